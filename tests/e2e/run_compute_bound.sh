#!/usr/bin/env bash
# trainmon run, scenario (c), compute-bound: cached data that costs nothing
# to load, two workers, and a model whose matmuls take ~0.5 s a step (one
# epoch: no second start of the workers).  The
# loop hardly waits for data: the report must say input.ok, and neither
# input.disk_bound nor input.cpu_bound.  On torch 2.x the same matmuls are
# about 3x faster, and the few ms of handing each batch over from the idle
# workers can reach 5-10% of a step: input.handoff at low severity is then
# the right verdict (the wait is real and is the handoff), never more.
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (a scenario of the plain build; the sampler, records and rules it runs are under ASan in run_storage_bound, real_loops and the unit tests)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_require
scratch=$(mktemp -d /var/tmp/trainmon-compute.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

"$PY" "$TRAIN" --data "$scratch/ds" --generate 1000 > /dev/null || scen_fail "generating the dataset"
cat "$scratch"/ds/* > /dev/null

run=$scratch/run
scen_run "$run" -i 0.5 -d "$scratch/ds" -- \
    "$PY" "$TRAIN" --data "$scratch/ds" --workers 2 --batch-size 32 --steps 24 \
    --model-size 1024 --layers 8
scen_show "$run"
if scen_findings "$run" | grep -qx input.handoff; then
    sev=$(scen_report "$run"; "$PY" -c 'import json,sys
print([f["severity"] for f in json.load(open(sys.argv[1]))["findings"] if f["id"] == "input.handoff"][0])' "$run/report.json")
    [ "$sev" = low ] || { scen_show "$run"; scen_fail "input.handoff at $sev severity on a compute-bound job"; }
else
    scen_expect "$run" input.ok
fi
scen_expect_not "$run" input.disk_bound
scen_expect_not "$run" input.cpu_bound
# The dataset was read just before the job (cat): cached at its start.
scen_expect_cached "$run" 0.95 1
echo "PASS: compute-bound job -> input.ok"
