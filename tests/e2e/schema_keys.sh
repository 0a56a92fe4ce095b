#!/usr/bin/env bash
# One schema: for every in-process record type, `trainmon dump --json FILE`
# and `trainmon export RUN --format jsonl` print the same keys, named the
# same, for the same record, and the same values (clocks aside: dump shows
# them monotonic, export on the wall clock).  The jsonl line adds only its
# run-level keys.  The records come from tests/helpers/inproc_writer, which
# writes three variants of every type the schema knows (all values, none
# available, all zero).
set -u
root=${TM_ROOT:-$(pwd)}
tm=${TRAINMON:-$root/build/trainmon}
py=${PYTHON:-/usr/bin/python3}
helper="$root/${BUILD:-build}/tests/helpers/inproc_writer"
[ -x "$helper" ] || { echo "FAIL: $helper not built (make e2e builds it)"; exit 1; }
scratch=$(mktemp -d /tmp/trainmon-schema.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir "$scratch/run"
n=$("$helper" "$scratch/run/rank0.tmr") || fail "inproc_writer failed"
"$tm" dump --json "$scratch/run/rank0.tmr" > "$scratch/dump.jsonl" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "dump --json failed"; }
"$tm" export "$scratch/run" --format jsonl > "$scratch/export.jsonl" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "export --format jsonl failed"; }

"$py" - "$scratch/dump.jsonl" "$scratch/export.jsonl" "$n" <<'PY' || fail "keys differ"
import json, sys
from collections import defaultdict

DUMP_FRAME = {"t", "t_ns", "type"}                          # dump's own keys
JSONL_FRAME = {"t", "wall_ns", "file", "rank", "kind"}      # the run-level keys
CLOCKS = {"start_ns", "opt_start_ns"}                       # monotonic vs wall

dump, export = defaultdict(list), defaultdict(list)
for line in open(sys.argv[1]):
    o = json.loads(line)
    if o["type"] in ("header", "series", "sample", "event"):
        continue
    assert o["type"] != "unknown", "dump could not decode a record: %s" % line
    dump[o["type"]].append(o)
for line in open(sys.argv[2]):
    o = json.loads(line)
    if o["kind"] in ("sample", "event"):
        continue
    export[o["kind"]].append(o)

written = int(sys.argv[3])
types = sorted(dump)
# every type the writer wrote (three variants each), at least the six of
# docs/FORMAT.md, and the same types on both sides
assert sum(len(v) for v in dump.values()) == written, (written, {k: len(v) for k, v in dump.items()})
assert {"step", "capture", "phase", "oom", "worker", "optimizer_step"} <= set(types), types
assert set(export) == set(types), (sorted(export), types)

# One record a step: a step record that carries the optimizer step that
# ended it (opt_start_ns > 0) is read as an optimizer step of its own too
# (docs/FORMAT.md, TM_REC_STEP): export shows it, dump shows the record as
# stored.  The writer's steps of variants 0 and 1 carry one.
folded = [s for s in dump["step"] if s.get("opt_start_ns", -1) > 0]
assert len(folded) == 2, dump["step"]
stored = {(o["optimizer"], o["step"]) for o in dump["optimizer_step"]}
synth = [o for o in export["optimizer_step"] if (o["optimizer"], o["step"]) not in stored]
assert sorted((o["optimizer"], o["step"]) for o in synth) == \
    sorted((max(s.get("optimizer", 0), 0), s["step"] + 1) for s in folded), (synth, folded)
for o in synth:
    assert set(o) - JSONL_FRAME == set(dump["optimizer_step"][0]) - DUMP_FRAME, o
    # crafted clocks: the writer's opt_start_ns lies after end_ns
    assert isinstance(o["duration_s"], float), o
export["optimizer_step"] = [o for o in export["optimizer_step"] if o not in synth]

for kind in types:
    d, e = dump[kind], export[kind]
    assert len(d) == len(e) == 3, (kind, len(d), len(e))
    for i, (a, b) in enumerate(zip(d, e)):
        ka, kb = set(a) - DUMP_FRAME, set(b) - JSONL_FRAME
        assert ka, (kind, i, "no fields")
        assert ka == kb, "%s #%d: dump only %s, export only %s" % (
            kind, i, sorted(ka - kb), sorted(kb - ka))
        # the run-level keys do not hide a field of the record
        assert not (ka & JSONL_FRAME), (kind, sorted(ka & JSONL_FRAME))
        for k in ka - CLOCKS:
            assert a[k] == b[k], "%s #%d %s: dump %r, export %r" % (kind, i, k, a[k], b[k])
    print("%-15s %s" % (kind, " ".join(sorted(set(d[0]) - DUMP_FRAME))))
PY
echo "schema_keys: ok"
