#!/usr/bin/env bash
# trainmon run, scenario (b), CPU-bound DataLoader workers: the dataset is
# in the page cache, each item costs 20 ms of real CPU work in the worker,
# one worker feeds a tiny model.  The report must say input.cpu_bound and
# name a worker count above the one used (1) that would keep up.
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (a scenario of the plain build; the sampler, records and rules it runs are under ASan in run_storage_bound, real_loops and the unit tests)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_require
scratch=$(mktemp -d /var/tmp/trainmon-cpu.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

"$PY" "$TRAIN" --data "$scratch/ds" --generate 400 > /dev/null || scen_fail "generating the dataset"
cat "$scratch"/ds/* > /dev/null   # in the page cache: reading costs nothing

run=$scratch/run
scen_run "$run" -i 0.5 -d "$scratch/ds" -- \
    "$PY" "$TRAIN" --data "$scratch/ds" --workers 1 --batch-size 8 --steps 40 \
    --item-cost-ms 20 --model-size 64
scen_show "$run"
scen_expect "$run" input.cpu_bound
scen_expect_cost "$run" input.cpu_bound
scen_expect_not "$run" input.disk_bound
scen_expect_not "$run" input.ok
# The data was in the page cache (cat above): data.page_cache says so.
scen_evidence "$run" data.page_cache | "$PY" -c 'import json, sys
sys.exit(0 if json.load(sys.stdin)["dataset_cached_fraction_start"] >= 0.95 else 1)' ||
    scen_fail "data.page_cache does not say the cached dataset was cached"
# The advice names a worker count: some number under a key about workers
# in the evidence that is above 1 (the count used).
scen_evidence "$run" input.cpu_bound | "$PY" -c '
import json, sys
ev = json.loads(sys.stdin.read() or "{}")
keys = [k for k, v in ev.items() if "worker" in k.lower() and isinstance(v, (int, float))
        and not isinstance(v, bool) and any(w in k.lower() for w in
        ("need", "suggest", "recommend", "keep", "would", "enough", "advised", "target"))]
print("worker-count evidence:", {k: ev[k] for k in keys})
sys.exit(0 if keys and max(ev[k] for k in keys) > 1 else 1)' ||
    scen_fail "input.cpu_bound evidence names no worker count above 1"
# The count advised fits the CPUs the job may use (meta.json): never a
# worker count the machine cannot run (issue #14: "num_workers=22" on 2 cores).
scen_evidence "$run" input.cpu_bound | "$PY" -c '
import json, re, sys
ev = json.loads(sys.stdin.read() or "{}")
meta = json.load(open(sys.argv[1]))
rep = json.load(open(sys.argv[2]))
adv = [f["advice"] for f in rep["findings"] if f["id"] == "input.cpu_bound"][0]
usable = meta["usable_cpus"]
counts = [int(n) for n in re.findall(r"num_workers=(\d+)", adv)]
print("usable", usable, "advised", ev.get("workers_advised"), "in the advice", counts)
sys.exit(0 if ev.get("workers_advised", 1e9) <= usable and all(c <= usable for c in counts) else 1)
' "$run/meta.json" "$run/report.json" || scen_fail "input.cpu_bound advises more workers than usable CPUs"

# The same job pinned to one core (taskset): the advice counts the one core
# the job may use (issue #11, machine-aware advice), advises at most one
# worker and says by how much a sample must get cheaper for it to keep up.
if command -v taskset > /dev/null && [ "$(nproc)" -ge 2 ]; then
    pinned=$scratch/pinned
    SCEN_WRAP="taskset -c 0" scen_run "$pinned" -i 0.5 -d "$scratch/ds" -- \
        "$PY" "$TRAIN" --data "$scratch/ds" --workers 1 --batch-size 8 --steps 40 \
        --item-cost-ms 20 --model-size 64
    scen_show "$pinned"
    scen_expect "$pinned" input.cpu_bound
    "$PY" -c '
import json, re, sys
meta = json.load(open(sys.argv[1]))
rep = json.load(open(sys.argv[2]))
f = [f for f in rep["findings"] if f["id"] == "input.cpu_bound"][0]
adv, ev = f["advice"], f["evidence"]
print("usable", meta.get("usable_cpus"), "advised", ev.get("workers_advised"), "advice:", adv)
ok = (meta.get("usable_cpus") == 1 and ev.get("usable_cpus") == 1
      and ev.get("workers_advised", 9) <= 1 and "may use 1 core" in adv
      and re.search(r"each sample must cost \d+% less", adv)
      and all(int(n) <= 1 for n in re.findall(r"num_workers=(\d+)", adv)))
sys.exit(0 if ok else 1)' "$pinned/meta.json" "$pinned/report.json" ||
        scen_fail "the pinned job's advice does not name its one core"
else
    echo "note: taskset or a second core missing: the pinned run is not checked"
fi
echo "PASS: CPU-bound workers -> input.cpu_bound with a larger worker count"
