#!/usr/bin/env bash
# Ring mode everywhere (#15): a real torch job with a DataLoader of 2
# workers under `trainmon run --max-size 128K`, long enough to wrap every
# ring: the rank file (thousands of steps) and each worker's file (one
# epoch of 5000 one-item batches is 2500 batches per worker, about 180 KiB
# of worker records).
#   - Every file in the run directory is within the limit.  The bound is
#     exact: a ring is 4096 + nblocks * block_size <= max-size bytes
#     (docs/FORMAT.md), not max-size rounded up to a block.
#   - The report says how many steps the ring dropped, with the right total:
#     the job prints its own step count, and text and JSON must give it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_require
scratch=$(mktemp -d /var/tmp/trainmon-ring.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
MAX=131072 # 128K
STEPS=7000

# 768-byte items: the smallest train.py reads (3 x 16 x 16).
"$PY" "$TRAIN" --data "$scratch/ds" --generate 5000 --item-bytes 768 > /dev/null ||
    scen_fail "generating the dataset"

run=$scratch/run
scen_run "$run" --max-size 128K -i 0.5 -- \
    "$PY" "$TRAIN" --data "$scratch/ds" --workers 2 --batch-size 1 --steps $STEPS --model-size 16
grep -q "train.py: $STEPS steps" "$run.out" || { cat "$run.out"; scen_fail "the job did not print its step count"; }

# Every file within the limit; the worker files are rings and wrapped.
big=$(find "$run" -type f -size +${MAX}c -printf '%p %s\n')
[ -z "$big" ] || { ls -la "$run"; scen_fail "files over $MAX bytes: $big"; }
nw=$(find "$run" -name 'worker-*.tmr' | wc -l)
[ "$nw" -ge 2 ] || { ls -la "$run"; scen_fail "want at least 2 worker files, got $nw"; }
for f in "$run"/worker-*.tmr "$run"/rank*.tmr "$run"/pid*.tmr; do
    [ -e "$f" ] || continue
    "$TRAINMON" dump --json "$f" 2> /dev/null | head -n 1 | grep -q "\"max_size\":$MAX" ||
        scen_fail "$(basename "$f") is not a ring of $MAX bytes"
done
# The first epoch's workers fetched 2500 batches each: their rings wrapped
# (the oldest batches are gone), which the unbounded file of before would
# have kept in 180 KiB.
"$PY" - "$run" <<'PY' || scen_fail "worker rings did not wrap"
import glob, json, subprocess, sys, os
tm = os.environ["TRAINMON"]
wrapped = 0
for f in glob.glob(sys.argv[1] + "/worker-*.tmr"):
    recs = [json.loads(l) for l in subprocess.run([tm, "dump", "--json", f], capture_output=True,
                                                  text=True).stdout.splitlines()]
    batches = [r["batch"] for r in recs if r.get("type") == "worker"]
    if batches and min(batches) > 0:
        wrapped += 1
print("worker files whose first batches were dropped:", wrapped)
sys.exit(0 if wrapped >= 2 else 1)
PY

# The report: the true total and what was dropped, in JSON and in text.
scen_report "$run"
"$PY" - "$run/report.json" "$STEPS" <<'PY' || { scen_show "$run"; scen_fail "report ring numbers"; }
import json, sys
r = json.load(open(sys.argv[1]))
steps = int(sys.argv[2])
ring = r["summary"]["ring"]
print("ring:", ring, "kept steps:", r["summary"]["steps_total"])
assert ring is not None and ring["files"] >= 1, ring
assert ring["steps_total"] == steps, (ring["steps_total"], steps)
kept = r["summary"]["steps_total"]
assert ring["steps_dropped"] > 0 and kept < steps, (ring, kept)
# Dropped and kept make the whole; the last step may have ended at exit and
# not count as complete.
assert steps - 1 <= ring["steps_dropped"] + kept <= steps, (ring, kept)
assert ring["kept_from_ns"] >= r["run"]["start_ns"], ring
PY
"$TRAINMON" report "$run" > "$run/report.txt" 2>&1 || scen_fail "trainmon report"
grep -E "^  steps +$STEPS \(ring: the oldest [0-9]+ dropped; data kept from [0-9T:.-]+Z\)$" "$run/report.txt" ||
    { cat "$run/report.txt"; scen_fail "the text report does not say what the ring dropped"; }
"$TRAINMON" report "$run" --html "$run/report.html" > /dev/null 2>&1 || scen_fail "trainmon report --html"
grep -qE "<td>$STEPS steps in all, the oldest [0-9]+ dropped; data kept from [0-9T:.-]+Z</td>" "$run/report.html" ||
    scen_fail "the HTML report does not say what the ring dropped"
echo "PASS: --max-size bounds every file (workers too); the report says the ring dropped steps"
