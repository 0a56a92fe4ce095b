#!/usr/bin/env bash
# trainmon run, CPU oversubscription (issue #14, item 5): a real torch job
# pinned to one core (taskset -c 0, so that the arithmetic does not depend
# on the machine) with torch.set_num_threads(4) and 3 DataLoader workers,
# each burning CPU on every sample.  The report must say
# host.cpu_oversubscribed with the thread arithmetic (4 x 1 + 3 = 7
# runnable threads on 1 usable CPU) and a fix that fits (set_num_threads(1),
# num_workers within the core); no advice may propose more workers than the
# usable cores or speak of a GPU the job has not got.  The control (1
# thread, no workers, the same core) must not get the finding.
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (a scenario of the plain build; the sampler, records and rules it runs are under ASan in run_storage_bound, real_loops and the unit tests)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_require
command -v taskset > /dev/null || { echo "skipped: no taskset (util-linux)"; exit 77; }
scratch=$(mktemp -d /var/tmp/trainmon-oversub.XXXXXX)
trap 'rm -rf "$scratch"' EXIT

cat > "$scratch/job.py" <<'EOF'
import sys, time
import torch
from torch.utils.data import DataLoader, Dataset

threads, workers, steps = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)


class Burn(Dataset):
    """Each sample costs 5 ms of CPU (a busy loop on the process clock)."""
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        t = time.process_time()
        while time.process_time() - t < 0.005:
            pass
        return torch.randn(256)


model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Burn(), batch_size=4, num_workers=workers)
n = 0
for x in loader:
    for _ in range(2):
        loss = model(x.repeat(16, 1)).pow(2).mean()
        loss.backward()
    opt.step()
    opt.zero_grad()
    n += 1
    if n >= steps:
        break
print("optimizer steps", n, "threads", torch.get_num_threads())
EOF

# The advice of every finding: never a worker count above the usable CPUs,
# never GPU wording (this job has none).
check_advice() {
    "$PY" - "$1/report.json" <<'EOF' || scen_fail "advice of $1 proposes what the job cannot use"
import json, re, sys
r = json.load(open(sys.argv[1]))
meta = json.load(open(sys.argv[1].replace("report.json", "meta.json")))
usable = meta.get("usable_cpus")
bad = []
for f in r.get("findings", []):
    adv = f.get("advice", "") + " " + f.get("title", "")
    if "GPU" in adv:
        bad.append((f["id"], "GPU wording without a GPU"))
    for m in re.finditer(r"num_workers=(\d+)", adv):
        if usable is not None and int(m.group(1)) > usable:
            bad.append((f["id"], "num_workers=%s > %s usable CPUs" % (m.group(1), usable)))
for b in bad:
    print("bad advice:", b)
sys.exit(1 if bad else 0)
EOF
}

run=$scratch/over
scen_run "$run" -i 0.5 -- taskset -c 0 "$PY" "$scratch/job.py" 4 3 60
scen_show "$run"
grep -q '"usable_cpus": 1.000' "$run/meta.json" || { cat "$run/meta.json"; scen_fail "meta.json: usable_cpus is not 1 under taskset -c 0"; }
scen_expect "$run" host.cpu_oversubscribed
scen_evidence "$run" host.cpu_oversubscribed | "$PY" -c '
import json, sys
ev = json.loads(sys.stdin.read())
want = {"usable_cpus": 1, "torch_threads_per_rank": 4, "ranks_on_host": 1, "workers_on_host": 3,
        "runnable_threads": 7, "advised_threads_per_rank": 1}
bad = {k: (ev.get(k), v) for k, v in want.items() if ev.get(k) != v}
print("thread arithmetic:", {k: ev.get(k) for k in want}, "psi", ev.get("psi_cpu_some"),
      "slowdown", ev.get("compute_slowdown"), ev.get("compute_slowdown_vs_early"))
# a loop that also waits for data keeps its workers (the rule never advises
# fewer then): 1 thread + 3 workers after; else 1 thread and no workers
input_bound = json.load(open(sys.argv[1]))["summary"]["data_wait_fraction"] >= 0.05
after = 4 if input_bound else 1
sys.exit(1 if bad or ev.get("runnable_threads_after", 99) > after else 0)' "$run/report.json" ||
    scen_fail "host.cpu_oversubscribed: the thread arithmetic is not 4 x 1 + 3 = 7 on 1 CPU"
"$PY" -c '
import json, sys
for f in json.load(open(sys.argv[1]))["findings"]:
    if f["id"] == "host.cpu_oversubscribed":
        a = f["advice"]
        input_bound = json.load(open(sys.argv[1]))["summary"]["data_wait_fraction"] >= 0.05
        sys.exit(0 if "torch.set_num_threads(1)" in a and "OMP_NUM_THREADS=1" in a
                 and ("num_workers=0" in a or input_bound) else 1)' "$run/report.json" ||
    scen_fail "host.cpu_oversubscribed: the advice lacks the fix with its numbers"
check_advice "$run"

ctl=$scratch/control
scen_run "$ctl" -i 0.5 -- taskset -c 0 "$PY" "$scratch/job.py" 1 0 60
scen_show "$ctl"
scen_expect_not "$ctl" host.cpu_oversubscribed
check_advice "$ctl"
echo "PASS: 4 threads + 3 workers on 1 core -> host.cpu_oversubscribed (7 on 1); 1 thread alone -> none"
