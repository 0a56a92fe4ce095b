#!/usr/bin/env bash
# input.overlapped on a real job under `trainmon run`, through the real
# dlopen path of the fake NVML (tests/fakes/fake_nvml.c): a torch loop
# without a DataLoader spends ~80% of each step between its optimizer
# step and the next forward.  The fake GPU lists the job as a compute
# process holding 1 GiB (its pid read from the file the job writes as it
# starts: d0.pid_file), so the GPU is the job's.  With it 97% busy all
# along, that span cannot have starved the GPU (it could have been busy at
# most ~20%): input.overlapped, and no input.main_prep.  With the GPU 10%
# busy it is the batch preparation it looks like: input.main_prep, as it
# is when the busy GPU is another process's (the job not among its
# processes, and no device memory of its own).  The real check is
# tests/gpu/check.sh on a lent GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_fake_nvml overlap
cat > "$scratch/job.py" <<'PY'
import os, sys, time, torch
open(sys.argv[1], "w").write(str(os.getpid()))
def busy(s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s:
        pass
m = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(60):
    busy(0.04)                 # the span before the forward (a wait for the GPU on a real one)
    x, y = torch.randn(32, 16), torch.randn(32, 1)
    torch.nn.functional.mse_loss(m(x), y).backward()
    busy(0.01)                 # compute
    opt.step(); opt.zero_grad()
print("steps", 60)
PY
gpu="d0.name=NVIDIA H200;d0.uuid=GPU-overlap;d0.mem=150323855360,1073741824,149250113536,0"
FAKE_NVML="$gpu;d0.util=97,40;d0.pid_file=$scratch/busy.pid" scen_run "$scratch/busy" -i 0.1 -- \
    "$PY" "$scratch/job.py" "$scratch/busy.pid"
scen_show "$scratch/busy"
scen_expect "$scratch/busy" input.overlapped
scen_expect_not "$scratch/busy" input.main_prep
scen_report "$scratch/busy"
"$PY" - "$scratch/busy/report.json" <<'PY' || scen_fail "input.overlapped evidence"
import json, sys
r = json.load(open(sys.argv[1]))
f = [f for f in r["findings"] if f["id"] == "input.overlapped"][0]
ev = f["evidence"]
print(f["title"]); print(f["advice"])
assert f["severity"] == "low", f["severity"]
assert 0.6 <= ev["data_wait_fraction"] <= 0.95, ev
assert abs(ev["gpu_utilization_mean"] - 0.97) < 0.01 and ev["gpus"] == 1, ev
assert ev["gpus_of"] == "the training process", ev
assert ev["gpu_samples"] >= 10, ev
assert "preparing its batches" in f["title"], f["title"]
PY
FAKE_NVML="$gpu;d0.util=10,40;d0.pid_file=$scratch/idle.pid" scen_run "$scratch/idle" -i 0.1 -- \
    "$PY" "$scratch/job.py" "$scratch/idle.pid"
scen_expect "$scratch/idle" input.main_prep
scen_expect_not "$scratch/idle" input.overlapped
# the same job beside another process's busy GPU (pid 1 on it)
FAKE_NVML="$gpu;d0.util=97,40;d0.procs=1:1073741824" scen_run "$scratch/other" -i 0.1 -- \
    "$PY" "$scratch/job.py" "$scratch/other.pid"
scen_expect "$scratch/other" input.main_prep
scen_expect_not "$scratch/other" input.overlapped
echo "PASS: a loop's wait while its GPU is busy -> input.overlapped; while it idles, or beside another's busy GPU -> input.main_prep"
