#!/usr/bin/env bash
# A one-GPU job on a machine of four GPUs, under `trainmon run`, through
# the real dlopen path of the fake NVML (tests/fakes/fake_nvml.c).  The
# fake lists the job on GPU 0 (its pid from the file it writes as it
# starts: d0.pid_file), 95% busy; GPUs 1-3 are idle and hold no process
# of the job's.  The job's GPU is the one read: its loop keeps up and its
# GPU is busy, input.ok and no gpu.underutilized (the mean of all four,
# 24%, read "GPU underutilized").  Then the job's GPU at 20% beside three
# of another process's (pid 1) at 100%: gpu.underutilized at 20% (the
# mean of all four, 80%, hid it).  The real check is tests/gpu/check.sh
# on a lent GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_fake_nvml shared
cat > "$scratch/job.py" <<'PY'
import os, sys, torch
open(sys.argv[1], "w").write(str(os.getpid()))
m = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
X = torch.randn(4096, 256)
for i in range(100):
    x = X[(i * 64) % 4000:(i * 64) % 4000 + 64]
    for _ in range(20):            # the step's compute: no batch preparation to speak of
        y = m(x).sum()
    y.backward(); opt.step(); opt.zero_grad()
print("steps", 100)
PY
# four GPUs: d0 the job's (util u0), d1-d3 (util u, processes p)
machine() { # u0 pidfile u procs
    local g="devices=4;d0.name=NVIDIA H200;d0.uuid=GPU-0;d0.mem=150323855360,1073741824,149250113536,0"
    g="$g;d0.util=$1,40;d0.pid_file=$2"
    for d in 1 2 3; do
        g="$g;d$d.name=NVIDIA H200;d$d.uuid=GPU-$d;d$d.mem=150323855360,0,150323855360,0;d$d.util=$3,0"
        [ -n "$4" ] && g="$g;d$d.procs=$4"
    done
    printf '%s' "$g"
}
check() { # dir util gpus
    "$PY" - "$1/report.json" "$2" "$3" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
print("summary:", s["gpu_utilization_mean"], s["gpus"], s["gpus_recorded"])
assert abs(s["gpu_utilization_mean"] - float(sys.argv[2])) < 0.01, s["gpu_utilization_mean"]
assert s["gpus"] == int(sys.argv[3]) and s["gpus_recorded"] == 4, s
PY
}
FAKE_NVML=$(machine 95 "$scratch/busy.pid" 0 "") scen_run "$scratch/busy" -i 0.1 -- \
    "$PY" "$scratch/job.py" "$scratch/busy.pid"
scen_show "$scratch/busy"
scen_expect "$scratch/busy" input.ok
scen_expect_not "$scratch/busy" gpu.underutilized
scen_report "$scratch/busy"
check "$scratch/busy" 0.95 1 || scen_fail "the job's GPU alone"
"$TRAINMON" report "$scratch/busy" | grep -q "95% (mean of the job's 1 GPU(s) of 4 recorded)" ||
    scen_fail "the summary line names the job's GPU among the machine's"
FAKE_NVML=$(machine 20 "$scratch/idle.pid" 100 "1:1073741824") scen_run "$scratch/idle" -i 0.1 -- \
    "$PY" "$scratch/job.py" "$scratch/idle.pid"
scen_expect "$scratch/idle" gpu.underutilized
scen_report "$scratch/idle"
check "$scratch/idle" 0.20 1 || scen_fail "the job's idle GPU beside another's busy ones"
echo "PASS: a one-GPU job on a four-GPU machine is judged by its own GPU (95% busy: no gpu.underutilized; 20% beside three busy ones: gpu.underutilized)"
