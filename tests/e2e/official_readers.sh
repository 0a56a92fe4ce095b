#!/usr/bin/env bash
# The official readers as oracles (issue #10): a real run (a torch job
# under `trainmon run`) exported and read back by the readers users use,
# from the torch 2.x virtualenv of `make deps` (which installs them):
#   - TensorBoard's own EventAccumulator loads `export --format
#     tensorboard`: every per-process tag and every system series tag, with
#     the same values (float32) and wall times as `export --format jsonl`;
#   - pandas.read_csv reads `export --format csv` with numeric dtypes for
#     time_s, rank and value, wall_time parses as UTC datetimes, and the
#     rows of each sampled series equal the JSON lines';
#   - `export --format chrome` passes a strict Trace Event Format check
#     (Perfetto's trace processor downloads its binary at run time, which
#     this machine cannot): every event's phase, required fields and types,
#     counters' numeric args, metadata names, and complete events properly
#     nested per thread.
# Skipped with one line when the venv lacks tensorboard or pandas (the
# package index was unreachable for `make deps`).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TRAINMON=${TRAINMON:-$root/${BUILD:-build}/trainmon}
[ -x "$TRAINMON" ] || { echo "skipped: $TRAINMON not built"; exit 77; }
. "$root/tests/lib/venv.sh"
venv=$(tm_venv_python)
if [ -z "$venv" ] || ! "$venv" -c 'import tensorboard, pandas, torch' 2>/dev/null; then
    echo "skipped: no virtualenv with tensorboard, pandas and torch (make deps installs them)"; exit 77
fi
scratch=$(mktemp -d /var/tmp/trainmon-readers.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run=$scratch/run
JOB_STEPS=12 "$TRAINMON" run -o "$run" -i 0.2 -- "$venv" "$root/tests/jobs/grad_accum.py" \
    > "$scratch/job.out" 2>&1 || { tail -20 "$scratch/job.out"; fail "trainmon run failed"; }
"$TRAINMON" export "$run" --format jsonl -o "$scratch/all.jsonl" || fail "export jsonl"
"$TRAINMON" export "$run" --format tensorboard -o "$scratch/tb" || fail "export tensorboard"
"$TRAINMON" export "$run" --format csv -o "$scratch/all.csv" || fail "export csv"
"$TRAINMON" export "$run" --format chrome -o "$scratch/trace.json" || fail "export chrome"

"$venv" - "$scratch" <<'PY' || exit 1
import collections, json, math, os, sys
scratch = sys.argv[1]
bad = []
rows = [json.loads(l) for l in open(os.path.join(scratch, "all.jsonl"))]
samples = collections.defaultdict(list)
for o in rows:
    if o["kind"] == "sample":
        tag = o["series"] + ("/" + o["labels"] if o["labels"] else "")
        samples[tag].append(o)
steps = [o for o in rows if o["kind"] == "step"]

def f32(x):
    import struct
    return struct.unpack("f", struct.pack("f", x))[0]

# --- TensorBoard's own reader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
tb = os.path.join(scratch, "tb")
seen_tags = set()
for d in sorted(os.listdir(tb)):
    ea = EventAccumulator(os.path.join(tb, d), size_guidance={"scalars": 0})
    ea.Reload()
    for tag in ea.Tags()["scalars"]:
        seen_tags.add(tag)
        got = ea.Scalars(tag)
        if tag in ("step_time_s", "data_wait_s"):
            key = "duration_s" if tag == "step_time_s" else "data_wait_s"
            want = [o[key] for o in steps]
            if [e.value for e in got] != [f32(v) for v in want]:
                bad.append("tensorboard %s/%s: %s, jsonl %s" % (d, tag, [e.value for e in got][:4], want[:4]))
            continue
        want = samples.get(tag)
        if want is None:
            bad.append("tensorboard tag %s is no series of the jsonl" % tag)
            continue
        if len(got) != len(want):
            bad.append("tensorboard %s: %d scalars, jsonl %d" % (tag, len(got), len(want)))
            continue
        for e, o in zip(got, want):
            if e.value != f32(o["value"]) or abs(e.wall_time - o["wall_ns"] / 1e9) > 1e-6:
                bad.append("tensorboard %s: (%r, %r) vs jsonl (%r, %r)"
                           % (tag, e.wall_time, e.value, o["wall_ns"] / 1e9, o["value"]))
                break
missing = set(samples) - seen_tags
if missing:
    bad.append("series missing from tensorboard: %s" % sorted(missing)[:5])
if not {"step_time_s", "data_wait_s"} <= seen_tags or not steps:
    bad.append("no step scalars (steps %d)" % len(steps))
print("  tensorboard %s: %d tags, %d step scalars" % (__import__("tensorboard").__version__, len(seen_tags), len(steps)))

# --- pandas
import pandas as pd
df = pd.read_csv(os.path.join(scratch, "all.csv"), parse_dates=["wall_time"])
for col in ("time_s", "rank", "value"):
    if not pd.api.types.is_numeric_dtype(df[col]):
        bad.append("pandas: column %s is %s, not numeric" % (col, df[col].dtype))
if not pd.api.types.is_datetime64_any_dtype(df["wall_time"]) or str(df["wall_time"].dt.tz) != "UTC":
    bad.append("pandas: wall_time is %s" % df["wall_time"].dtype)
per = df.assign(tag=df["series"] + df["labels"].fillna("").map(lambda l: "/" + l if l else "")).groupby("tag").size()
for tag, n in per.items():
    if tag not in samples:
        continue  # in-process records the CSV has as rows too (optimizer steps)
    if n != len(samples[tag]):
        bad.append("pandas: %s has %d rows, jsonl %d" % (tag, n, len(samples.get(tag, ()))))
        break
wall0 = df["wall_time"].iloc[0].value  # ns since the epoch
first = [o for o in rows if o["kind"] == "sample"][0]["wall_ns"]
if abs(wall0 - first) > 1e6:  # the text keeps milliseconds
    bad.append("pandas: first wall_time %d vs %d" % (wall0, first))
print("  pandas %s: %d rows, dtypes %s" % (pd.__version__, len(df), dict(df.dtypes.astype(str))))

# --- strict Trace Event Format
doc = json.load(open(os.path.join(scratch, "trace.json")))
if set(doc) - {"traceEvents", "displayTimeUnit", "otherData", "metadata"}:
    bad.append("trace: unknown top-level keys %s" % sorted(doc))
if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
    bad.append("trace: displayTimeUnit %r" % doc["displayTimeUnit"])
num = (int, float)
stacks = collections.defaultdict(list)
counts = collections.Counter()
for e in doc["traceEvents"]:
    ph = e.get("ph")
    counts[ph] += 1
    if ph not in ("X", "C", "i", "M"):
        bad.append("trace: phase %r" % ph); break
    if not isinstance(e.get("name"), str) or not isinstance(e.get("pid"), int):
        bad.append("trace: name/pid of %s" % e); break
    if ph != "M" and not (isinstance(e.get("ts"), num) and math.isfinite(e["ts"]) and e["ts"] >= 0):
        bad.append("trace: ts of %s" % e); break
    if ph == "X":
        if not isinstance(e.get("tid"), int) or not (isinstance(e.get("dur"), num) and e["dur"] >= 0):
            bad.append("trace: complete event %s" % e); break
        stacks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    elif ph == "C":
        a = e.get("args")
        if not isinstance(a, dict) or not a or not all(isinstance(v, num) and math.isfinite(v) for v in a.values()):
            bad.append("trace: counter args %s" % e); break
    elif ph == "i":
        if e.get("s") not in ("g", "p", "t"):
            bad.append("trace: instant scope %s" % e); break
    elif ph == "M":
        if e["name"] not in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"):
            bad.append("trace: metadata %s" % e); break
        if e["name"].endswith("_name") and not isinstance(e.get("args", {}).get("name"), str):
            bad.append("trace: metadata args %s" % e); break
# complete events on one thread nest: a later one starts after the open one ends or ends within it
# ts are wall-clock microseconds (~1.8e15): a double holds them to 0.25 us,
# so boundaries shared by two slices may read up to that far apart
eps = 0.5
for key, evs in stacks.items():
    evs.sort(key=lambda x: (x[0], -x[1]))
    open_ = []
    for b, end, name in evs:
        while open_ and b >= open_[-1][1] - eps:
            open_.pop()
        if open_ and end > open_[-1][1] + eps:
            bad.append("trace: %s [%f, %f] overlaps %s on %s" % (name, b, end, open_[-1][2], key)); break
        open_.append((b, end, name))
if counts["X"] < 2 * len(steps) or not counts["C"] or not counts["M"]:
    bad.append("trace: events %s for %d steps" % (dict(counts), len(steps)))
print("  trace event format: %s, %d threads with nested complete events" % (dict(counts), len(stacks)))
for b in bad:
    print("FAIL: " + b)
sys.exit(1 if bad else 0)
PY
echo "PASS: TensorBoard, pandas and a strict Trace Event check read the exports as trainmon wrote them"
