#!/usr/bin/env bash
# tests/gpu/check.sh - trainmon's GPU numbers against nvidia-smi on a real
# NVIDIA machine, while a CUDA torch process holds a known allocation and
# runs matmuls in a loop.
#
#   tests/gpu/check.sh                     build (make), run, print a table
#   tests/gpu/check.sh --compare JSONL SMI PID ALLOC_BYTES [APPS]
#                                          only the comparison (for testing
#                                          it without a GPU: tests/e2e/
#                                          gpu_check_compare.sh): JSONL is the
#                                          output of `trainmon watch --json`,
#                                          SMI holds nvidia-smi CSV lines
#                                          "used, total, util[, power, sm
#                                          clock, temperature, reasons]" (MiB,
#                                          MiB, %, W, MHz, C, hex mask), APPS
#                                          "pid, used MiB" lines of
#                                          --query-compute-apps
#
# Checked: GPU 0's memory used (within 5% or 256 MiB of nvidia-smi), memory
# total (same MiB), utilization (within 15 points: the two tools sample at
# different moments), power (10% or 25 W), SM clock (10% or 100 MHz),
# temperature (3 C), the throttle reasons (the same set as one of
# nvidia-smi's readings), and attribution: the torch pid's GPU memory
# equals --query-compute-apps' (2% or 64 MiB) and it and the watched tree's
# gpu_memory_bytes are at least the allocation.  PCIe rates are printed
# for the eye.  Then a real loop that computes and waits for
# data in turn under `trainmon run` must get gpu.util_swing, and a
# transformer's predicted largest micro-batch is compared with the one that
# really fits, then run out of memory for the report to explain.  Exit 0 when all match, 1 on a mismatch, 77 when
# the machine cannot run the check (no nvidia-smi, no CUDA torch).
# Environment: ALLOC_GIB (default 8), PYTHON (a python3 with CUDA torch),
# BUILD (default build), PARTS (the parts to run, default all: watch inproc
# swing hostwait leak amp compile batch; a device call is limited to 10 minutes).
set -u

compare() { # JSONL SMI PID ALLOC_BYTES
    "${CMP_PYTHON:-python3}" - "$@" <<'PY'
import json, sys

jsonl, smi_file, pid, alloc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
apps_file = sys.argv[5] if len(sys.argv) > 5 else ""
MiB = 1 << 20

samples = []
for line in open(jsonl):
    line = line.strip()
    if not line.startswith("{"):
        continue
    try:
        obj = json.loads(line)
    except ValueError as e:
        print("check: unparsable JSON line from trainmon: %s" % e)
        sys.exit(1)
    for g in obj.get("gpu") or []:
        if g.get("index") == 0:
            samples.append((obj, g))
            break
# nvidia-smi lines: used MiB, total MiB, util %, then (when the driver
# knows the fields) power W, SM clock MHz, temperature C, and the active
# clock-event (throttle) reasons as NVML's hex mask
SMI_KEYS = ("used", "total", "util", "power", "sm", "temp", "reasons")
def smi_val(key, p):
    if key == "reasons":
        return int(p, 16) if p.lower().startswith("0x") else None
    try:
        return float(p)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]" and the like
smi = []
for line in open(smi_file):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) >= 3:
        r = {k: smi_val(k, p) for k, p in zip(SMI_KEYS, parts)}
        if None not in (r["used"], r["total"], r["util"]):
            smi.append((r["used"], r["total"], r["util"], r))
# nvidia-smi --query-compute-apps=pid,used_memory lines (pid, MiB)
apps = {}
if apps_file:
    for line in open(apps_file):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit():
            apps[int(parts[0])] = smi_val("used", parts[1])  # None: "[N/A]" (MIG, vGPU)

rows, bad = [], 0

def row(what, tm, ref, rule, ok):
    global bad
    if ok is False:
        bad += 1
    rows.append((what, tm, ref, rule, {True: "ok", False: "MISMATCH", None: "info"}[ok]))

def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None

def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return "%.1f%s" % (v, unit)
    return "%s%s" % (v, unit)

if not samples:
    print("check: trainmon printed no sample with GPU 0 in its \"gpu\" list")
    sys.exit(1)
if not smi:
    print("check: no usable nvidia-smi reading")
    sys.exit(1)
obj, g = samples[-1]

# memory used: the closest pair of readings, as both move a little
used = [num(s[1].get("memory_used_bytes")) for s in samples]
used = [u / MiB for u in used if u is not None]
if used:
    d, u, r = min((abs(u - r[0]), u, r[0]) for u in used for r in smi)
    tol = max(0.05 * r, 256.0)
    row("memory used (MiB)", fmt(u), fmt(r), "within %.0f MiB" % tol, d <= tol)
else:
    row("memory used (MiB)", "n/a", fmt(smi[-1][0]), "within 5% or 256 MiB", False)

total = num(g.get("memory_total_bytes"))
ref_total = smi[-1][1]
if total is not None:
    # nvidia-smi prints whole MiB; accept its rounding either way
    ok = int(ref_total) in (total // MiB, round(total / MiB))
    row("memory total (MiB)", fmt(total // MiB), fmt(int(ref_total)), "same MiB", ok)
else:
    row("memory total (MiB)", "n/a", fmt(int(ref_total)), "same MiB", False)

utils = [num(s[1].get("utilization_gpu_percent")) for s in samples]
utils = [u for u in utils if u is not None]
if utils:
    d, u, r = min((abs(u - r[2]), u, r[2]) for u in utils for r in smi)
    row("utilization (%)", fmt(float(u)), fmt(r), "within 15 points", d <= 15)
else:
    row("utilization (%)", "n/a", fmt(smi[-1][2]), "within 15 points", False)

procs = g.get("processes") or []
mine = [p for p in procs if p.get("pid") == pid]
pm = num(mine[0].get("used_memory_bytes")) if mine else None
row("torch pid %d GPU memory (MiB)" % pid, fmt(pm // MiB if pm is not None else None),
    ">= %d" % (alloc // MiB), ">= allocation", pm is not None and pm >= alloc)
# against --query-compute-apps: both are NVML's per-process figure, read a
# moment apart (the allocation does not move).  Matched by the pid NVML
# reports (the host's), which is trainmon's; inside a container the torch
# pid of this namespace may differ, so the largest of trainmon's GPU
# processes that nvidia-smi lists stands in for it.
listed = [p for p in procs if p.get("pid") in apps]
cand = mine if mine and pid in apps else sorted(
    listed, key=lambda p: num(p.get("used_memory_bytes")) or 0)[-1:]
if cand:
    p0 = cand[0]
    mem, ref = num(p0.get("used_memory_bytes")), apps[p0["pid"]]
    what = "pid %d GPU memory vs compute-apps (MiB)" % p0["pid"]
    if ref is None or mem is None:
        row(what, fmt(mem // MiB if mem is not None else None), fmt(ref), "", None)
    else:
        row(what, fmt(mem // MiB), fmt(ref), "within 2% or 64 MiB",
            abs(mem / MiB - ref) <= max(0.02 * ref, 64.0))
elif apps_file:
    row("trainmon's GPU processes in --query-compute-apps", str(len(procs)),
        "%d listed" % len(apps), "", None)

tree = obj.get("process_tree") or {}
tm = num(tree.get("gpu_memory_bytes"))
row("process tree GPU memory (MiB)", fmt(int(tm // MiB) if tm is not None else None),
    ">= %d" % (alloc // MiB), ">= allocation", tm is not None and tm >= alloc)

for key, label in (("memory_reserved_bytes", "memory reserved (MiB)"),):
    v = num(g.get(key))
    row(label, fmt(v // MiB if v is not None else None), "", "", None)
# power, SM clock and temperature move under load: the closest pair of
# trainmon's and nvidia-smi's readings within a tolerance (a field the
# driver does not report on either side is printed, not judged)
for key, skey, label, rel, floor in (("power_watts", "power", "power (W)", 0.10, 25.0),
                                     ("sm_clock_mhz", "sm", "SM clock (MHz)", 0.10, 100.0),
                                     ("temperature_celsius", "temp", "temperature (C)", 0.0, 3.0)):
    mine_v = [num(s[1].get(key)) for s in samples]
    mine_v = [v for v in mine_v if v is not None]
    ref_v = [r[3].get(skey) for r in smi if r[3].get(skey) is not None]
    if mine_v and ref_v:
        d, u, r = min((abs(u - r), u, r) for u in mine_v for r in ref_v)
        tol = max(rel * r, floor)
        row(label, fmt(float(u)), fmt(r), "within %.0f" % tol, d <= tol)
    else:
        row(label, fmt(mine_v[-1] if mine_v else None), fmt(ref_v[-1] if ref_v else None),
            "", None)
for key, label in (("pcie_rx_bytes_per_second", "PCIe rx (B/s)"),
                   ("pcie_tx_bytes_per_second", "PCIe tx (B/s)")):
    row(label, fmt(num(g.get(key))), "", "", None)
# throttle reasons: trainmon's names are NVML's bits (include/trainmon.h).
# A reason may come and go between readings (the power cap under load):
# a mismatch is a reason set in every reading of one tool and in none of
# the other's.
BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4,
        "hw_slowdown": 0x8, "sync_boost": 0x10, "sw_thermal_slowdown": 0x20,
        "hw_thermal_slowdown": 0x40, "hw_power_brake": 0x80, "display_clocks_setting": 0x100}
masks = []
for s_obj, s_g in samples:
    names = s_g.get("throttle_reasons")
    if isinstance(names, list):
        masks.append(sum(BITS.get(n, 0) for n in names))
ref_m = [r[3]["reasons"] & 0x1ff for r in smi if r[3].get("reasons") is not None]
names = ",".join(g.get("throttle_reasons") or []) or "-"
if masks and ref_m:
    def every(ms):
        a = 0x1ff
        for m in ms:
            a &= m
        return a
    def ever(ms):
        o = 0
        for m in ms:
            o |= m
        return o
    off = (every(masks) & ~ever(ref_m)) | (every(ref_m) & ~ever(masks))
    row("throttle reasons", names, ",".join("0x%x" % m for m in sorted(set(ref_m))),
        "none always in one, never in the other", off == 0)
else:
    row("throttle reasons", names, "", "", None)
row("GPU", "%s %s" % (g.get("name"), g.get("uuid")), "", "", None)
row("processes on GPU 0", str(len(procs)), "", "", None)

w = [max(len(str(r[i])) for r in rows + [("what", "trainmon", "nvidia-smi", "rule", "")])
     for i in range(5)]
line = "  ".join("%-*s" % (w[i], h) for i, h in
                 enumerate(("what", "trainmon", "nvidia-smi", "rule", "result")))
print(line)
print("-" * len(line))
for r in rows:
    print("  ".join("%-*s" % (w[i], r[i]) for i in range(5)))
print("check: %s" % ("all match" if bad == 0 else "%d mismatch(es)" % bad))
sys.exit(1 if bad else 0)
PY
}

if [ "${1:-}" = "--compare" ]; then
    shift
    [ $# -eq 4 ] || [ $# -eq 5 ] ||
        { echo "usage: $0 --compare JSONL SMI PID ALLOC_BYTES [APPS]" >&2; exit 2; }
    compare "$@"
    exit $?
fi

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
build=${BUILD:-build}

if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "check: nvidia-smi not found: not a GPU machine, skipped" >&2
    exit 77
fi

py=""
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
        timeout 120 "$cand" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
            >/dev/null 2>&1; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "check: no python3 with a CUDA build of torch (set PYTHON=...): skipped" >&2
    exit 77
fi
CMP_PYTHON=$py

# PARTS picks the parts to run (all by default), so that a device with
# less time left runs them over several calls: watch inproc swing hostwait leak amp compile batch
all_parts="watch inproc swing hostwait leak amp compile batch"
parts=${PARTS:-$all_parts}
[ -n "${parts// /}" ] || { echo "check: PARTS names no part (the parts: $all_parts)" >&2; exit 2; }
for p in $parts; do
    case " $all_parts " in
    *" $p "*) ;;
    *) echo "check: PARTS: no part '$p' (the parts: $all_parts, separated by blanks)" >&2; exit 2 ;;
    esac
done
want() {
    case " $parts " in *" $1 "*) return 0 ;; esac
    echo "check: $1: not in PARTS, skipped"
    return 1
}
watch_rc=skipped py_rc=skipped swing_rc=skipped hostwait_rc=skipped leak_rc=skipped amp_rc=skipped
compile_rc=skipped batch_rc=skipped

echo "check: building"
if ! make -j"$(nproc)" >/tmp/trainmon-gpu-build.log 2>&1; then
    tail -n 30 /tmp/trainmon-gpu-build.log
    echo "check: make failed" >&2
    exit 1
fi

gib=${ALLOC_GIB:-8}
alloc=$((gib << 30))
work=$(mktemp -d /tmp/trainmon-gpu.XXXXXX)
torch_pid=""
ballast_pid=""
cleanup() {
    [ -n "$torch_pid" ] && kill "$torch_pid" 2>/dev/null && wait "$torch_pid" 2>/dev/null
    [ -n "$ballast_pid" ] && kill "$ballast_pid" 2>/dev/null && wait "$ballast_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# CUDA orders devices fastest first unless told otherwise; NVML by PCI bus.
export CUDA_DEVICE_ORDER=PCI_BUS_ID


# the extension for this interpreter: the in-process part imports it from
# the tree, and `trainmon run` gives jobs the package next to the binary
echo "check: building the trainmon extension for $py"
if ! "$py" setup.py -q build_ext --inplace --force --build-temp "$build/python-ext-gpu" \
        >"$work/ext.log" 2>&1; then
    tail -n 20 "$work/ext.log"
    echo "check: building the extension failed" >&2
    exit 1
fi

# run_job NAME TIMEOUT [RUN-OPTIONS...] -- SCRIPT [ARGS...]: the job under
# `trainmon run -o $work/NAME` on GPU 0, its output in $work/NAME.out, the
# report's JSON in $work/NAME.json; returns the run's exit status
run_job() {
    local name=$1 limit=$2 opts=()
    shift 2
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do opts+=("$1"); shift; done
    shift
    CUDA_VISIBLE_DEVICES=0 timeout "$limit" "$build/trainmon" run -o "$work/$name" "${opts[@]}" \
        -- "$py" "$@" >"$work/$name.out" 2>&1
    local rc=$?
    "$build/trainmon" report --json "$work/$name" >"$work/$name.json" 2>>"$work/$name.out"
    return $rc
}

# (the parts are not indented: their heredocs are Python)
part_watch() { # a failure here is this part's (return 1): the others still run
CUDA_VISIBLE_DEVICES=0 "$py" - "$alloc" "$work/ready" 150 >"$work/torch.log" 2>&1 <<'PY' &
import os, sys, time
import torch
alloc, ready, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
dev = torch.device("cuda:0")
buf = torch.empty(alloc, dtype=torch.uint8, device=dev)
buf.fill_(1)  # touch it: memory really in use
a = torch.randn(4096, 4096, device=dev)
b = torch.randn(4096, 4096, device=dev)
torch.cuda.synchronize()
with open(ready + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
end = time.time() + secs
while time.time() < end:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
PY
torch_pid=$!

for _ in $(seq 1 240); do
    [ -f "$work/ready" ] && break
    kill -0 "$torch_pid" 2>/dev/null || break
    sleep 0.5
done
if [ ! -f "$work/ready" ]; then
    cat "$work/torch.log"
    echo "check: the torch process did not get ready" >&2
    return 1
fi
echo "check: torch pid $torch_pid holds $gib GiB on GPU 0 and runs matmuls"
sleep 2 # let utilization settle at its busy level

# the fields this driver knows: the clock-event reasons are
# clocks_event_reasons.* from driver 535 on, clocks_throttle_reasons.* before
fields=memory.used,memory.total,utilization.gpu
if nvidia-smi -i 0 --query-gpu=$fields,power.draw,clocks.sm,temperature.gpu \
    --format=csv,noheader,nounits >/dev/null 2>&1; then
    fields=$fields,power.draw,clocks.sm,temperature.gpu
    for r in clocks_event_reasons.active clocks_throttle_reasons.active; do
        if nvidia-smi -i 0 --query-gpu=$fields,$r --format=csv,noheader,nounits >/dev/null 2>&1; then
            fields=$fields,$r
            break
        fi
    done
fi
echo "check: nvidia-smi --query-gpu=$fields"
smi_query() {
    nvidia-smi -i 0 --query-gpu="$fields" \
        --format=csv,noheader,nounits >>"$work/smi.csv" 2>>"$work/smi.err"
}
start=$(date +%s.%N)
timeout 60 "$build/trainmon" watch --json --gpu 0 --pid "$torch_pid" -i 1 -n 3 \
    >"$work/watch.jsonl" 2>"$work/watch.err" &
watch_pid=$!
for _ in 1 2 3; do
    sleep 0.7
    smi_query
done
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
    >"$work/apps.csv" 2>>"$work/smi.err"
wait "$watch_pid"
rc=$?
end=$(date +%s.%N)
if [ -s "$work/watch.err" ]; then
    echo "check: trainmon watch said:"
    sed 's/^/  /' "$work/watch.err"
fi
if [ $rc -ne 0 ]; then
    echo "check: trainmon watch exited $rc" >&2
    return 1
fi
echo "check: trainmon watch -i 1 -n 3 took $(awk "BEGIN { printf \"%.1f\", $end - $start }") s"
compare "$work/watch.jsonl" "$work/smi.csv" "$torch_pid" "$alloc" "$work/apps.csv"
}
if want watch; then
    part_watch
    watch_rc=$?
    kill "$torch_pid" 2>/dev/null && wait "$torch_pid" 2>/dev/null
    torch_pid=""
fi

# --- in-process recorder (python/trainmon) on real CUDA: allocator numbers
# equal torch.cuda.memory_stats(); a provoked OOM leaves an OOM record with
# step and phase and a snapshot that torch's own _memory_viz reads.
if want inproc; then
mkdir -p "$work/run"
CUDA_VISIBLE_DEVICES=0 PYTHONPATH="$root/python" TRAINMON_RUN_DIR="$work/run" \
    timeout 300 "$py" - "$work/run" <<'PY'
import os, pickle, sys
import torch, trainmon
run = sys.argv[1]
bad = 0
def check(what, ok, detail=""):
    global bad
    bad += not ok
    print("check: %-58s %s %s" % (what, "ok" if ok else "MISMATCH", detail))

trainmon.attach(memory_history=10000)
mon = trainmon.Monitor()
x = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")
mon.capture("after 300 MiB")
st = torch.cuda.memory_stats()
h = mon.history
G = float(1 << 30)
check("Monitor allocated == memory_stats allocated_bytes.all.current",
      h["allocated_gb"][-1] * G == st["allocated_bytes.all.current"])
check("Monitor reserved == memory_stats reserved_bytes.all.current",
      h["reserved_gb"][-1] * G == st["reserved_bytes.all.current"])
check("Monitor peak == memory_stats allocated_bytes.all.peak",
      h["peak_gb"][-1] * G == st["allocated_bytes.all.peak"])
check("Monitor num_retries == memory_stats num_alloc_retries",
      h["num_retries"][-1] == st["num_alloc_retries"])
free, total = torch.cuda.mem_get_info()
check("Monitor free memory within 1 GiB of mem_get_info",
      abs(h["free_mem_gb"][-1] * G - free) < G)

# capture()'s cost with the allocator read, against a monitor built on
# torch.cuda.memory_stats() that keeps the same numbers, in one run
import time
KEYS = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
        "active_bytes.all.current", "inactive_split_bytes.all.current",
        "requested_bytes.all.current", "num_alloc_retries", "num_ooms")
rows = []
def py_capture(tag):
    s = torch.cuda.memory_stats()
    free, total = torch.cuda.mem_get_info()
    rows.append((time.time(), tag, [s.get(k) for k in KEYS], free, total))
def per_call(fn, n=2000):
    best = None
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn("cost")
        d = (time.perf_counter() - t) / n
        best = d if best is None or d < best else best
    return best
cost_mon = per_call(mon.capture)
cost_py = per_call(py_capture)
check("capture() costs no more than a memory_stats() monitor", cost_mon <= cost_py,
      "capture %.1f us, memory_stats monitor %.1f us a call (best of 5 x 2000; ratio %.2f)"
      % (cost_mon * 1e6, cost_py * 1e6, cost_mon / cost_py))

data = torch.utils.data.TensorDataset(torch.zeros(8, 4))
oom = False
for i, (b,) in enumerate(torch.utils.data.DataLoader(data, batch_size=2)):
    if i == 2:
        with trainmon.phase("provoke-oom"):
            try:
                torch.empty(total * 2, dtype=torch.uint8, device="cuda")
            except torch.cuda.OutOfMemoryError:
                oom = True
check("an OOM was provoked", oom)
path = os.path.join(run, trainmon.run_dir() and [f for f in os.listdir(run)
                    if f.endswith(".tmr") and not f.startswith("worker-")][0])
_, recs, _, _ = trainmon.read_records(path)
ooms = [r[2] for r in recs if r[0] == "oom"]
check("OOM record written", bool(ooms), str(ooms[:1]))
if ooms:
    o = ooms[0]
    check("OOM record has step 3 and phase provoke-oom",
          o["step"] == 3 and o["phase"] == "provoke-oom", "step=%s phase=%s" % (o["step"], o["phase"]))
    check("OOM record requested == the failed allocation (rounded up to 2 MiB)",
          total * 2 <= o["requested"] < total * 2 + (2 << 20))
    snap = os.path.join(run, o["snapshot"]) if o["snapshot"] else ""
    ok = False
    if snap and os.path.exists(snap):
        from torch.cuda import _memory_viz as viz
        s = pickle.load(open(snap, "rb"))
        try:
            out = viz.segment_plot(s) if hasattr(viz, "segment_plot") else viz.segments(s)
            ok = bool(out)
        except Exception as e:
            print("check: _memory_viz:", e)
    check("OOM snapshot readable by torch.cuda._memory_viz", ok, snap)
sys.exit(1 if bad else 0)
PY
py_rc=$?
fi

# --- gpu.util_swing on real NVML (#11 item 5): a loop that computes about
# 0.6 s of matmuls per step on GPU 0, then waits about 0.6 s for its next
# batch (a DataLoader whose items sleep), under `trainmon run -i 0.25`: the
# utilization samples swing busy/idle at the step period and the report
# says gpu.util_swing with the data wait (tests/e2e/run_gpu_swing.sh is the
# fake-NVML version).
if want swing; then
cat >"$work/swing.py" <<'PY'
import time, torch
class Slow(torch.utils.data.Dataset):
    def __len__(self): return 24
    def __getitem__(self, i):
        time.sleep(0.6)
        return torch.randn(64)
dev = torch.device("cuda:0")
model = torch.nn.Linear(64, 64).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
a = torch.randn(8192, 8192, device=dev)
for x in torch.utils.data.DataLoader(Slow(), batch_size=1):
    t = time.time()
    while time.time() - t < 0.6:
        for _ in range(4):
            c = a @ a
        torch.cuda.synchronize()
    loss = model(x.to(dev)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("swing.py: done")
PY
run_job swing 120 -i 0.25 -- "$work/swing.py"
swing_rc=$?
"$py" - "$work/swing.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
f = [f for f in r.get("findings", []) if f["id"] == "gpu.util_swing"]
ev = f[0]["evidence"] if f else {}
print("check: gpu.util_swing on a real GPU:", "ok" if f else "MISSING",
      {k: ev.get(k) for k in ("busy_sample_share", "idle_sample_share", "swing_period_s",
                               "step_time_median_s", "data_wait_per_step_s")})
# the slow DataLoader (0.6 s an item, fetched in the main process) is the
# input finding, with about half of each step waiting
inp = [x for x in r.get("findings", []) if x["id"].startswith("input.") and x["id"] != "input.ok"]
iev = inp[0]["evidence"] if inp else {}
print("check: input finding for the slow DataLoader:", inp[0]["id"] if inp else "MISSING",
      {k: iev.get(k) for k in ("data_wait_fraction", "steps")})
sys.exit(0 if f and inp else 1)
PY
[ $? -eq 0 ] && [ $swing_rc -eq 0 ] || { tail -n 20 "$work/swing.out"; swing_rc=1; }
fi

# --- the host's waits for the GPU are not batch preparation: a loop
# without a DataLoader in build-nanogpt's shape (48 Linear(4096) layers,
# batches of 512 copied from a CPU pool, ~60 ms of GPU work a step, the
# batch ~2 ms), under `trainmon run -i 0.25`.  "sync": it calls
# torch.cuda.synchronize() after each optimizer step, which the agent
# leaves out of the span before the next forward (the loss.item() after
# it finds the queue empty): no
# input.main_prep, and the report's wait share within 5 points of the
# job's own inline timing of its batch.  "copy": no sync, so the next
# batch's blocking .to(device) waits for the GPU's queue (most of the
# step, on the host), while the GPU stays busy: input.overlapped.
if want hostwait; then
cat >"$work/hostwait.py" <<'PY'
import json, os, sys, time, torch
dev = torch.device("cuda:0")
torch.backends.cuda.matmul.allow_tf32 = False
model = torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(48)]).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
pool = torch.randn(4, 512, 4096)
sync = sys.argv[1] == "sync"
prep = total = 0.0
for i in range(80):
    t0 = time.perf_counter()
    x = pool[i % 4].to(dev)
    t1 = time.perf_counter()
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if sync:
        torch.cuda.synchronize()
        lossf = loss.item()
    if i >= 10:
        prep += t1 - t0
        total += time.perf_counter() - t0
print(json.dumps({"mode": sys.argv[1], "prep_share": prep / total}))
PY
hostwait_rc=0
for mode in sync copy; do
run_job "hostwait_$mode" 120 -i 0.25 -- "$work/hostwait.py" "$mode" || hostwait_rc=1
"$py" - "$work/hostwait_$mode.json" "$work/hostwait_$mode.out" "$mode" <<'PY' || { tail -n 20 "$work/hostwait_$mode.out"; hostwait_rc=1; }
import json, sys
r = json.load(open(sys.argv[1]))
job = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][-1]
ids = [f["id"] for f in r.get("findings", [])]
s = r.get("summary", {})
print("check: host waits (%s): job's batch share %.3f, report's wait %.3f, GPU util %s, input: %s"
      % (sys.argv[3], job["prep_share"], s.get("data_wait_fraction") or -1,
         s.get("gpu_utilization_mean"), [i for i in ids if i.startswith("input.")]))
if sys.argv[3] == "sync":
    ok = "input.main_prep" not in ids and abs(s["data_wait_fraction"] - job["prep_share"]) <= 0.05
else:
    ok = "input.overlapped" in ids and "input.main_prep" not in ids
print("check: host waits (%s):" % sys.argv[3], "ok" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY
done
fi

# --- a leak on a real GPU: a loop that keeps a 4 MiB CUDA tensor every
# step (a list of "losses for logging" that are never freed) under
# `trainmon run`: gpu_mem.growth with bytes_per_step within 10% of 4 MiB
# (the caching allocator rounds 4 MiB to itself: a multiple of 2 MiB).
if want leak; then
cat >"$work/leak.py" <<'PY'
import torch
dev = torch.device("cuda:0")
model = torch.nn.Linear(256, 256).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(80 * 16, 256))
kept = []
n = 0
for (x,) in torch.utils.data.DataLoader(data, batch_size=16):
    loss = model(x.to(dev)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    kept.append(torch.ones(1 << 20, device=dev))  # 4 MiB of float32, kept
    n += 1
torch.cuda.synchronize()
print("leak.py: %d steps, %d bytes kept" % (n, sum(t.numel() * 4 for t in kept)))
PY
run_job leak 120 -- "$work/leak.py"
leak_rc=$?
"$py" - "$work/leak.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
f = [x for x in r.get("findings", []) if x["id"] == "gpu_mem.growth"]
ev = f[0]["evidence"] if f else {}
b = ev.get("bytes_per_step")
ok = b is not None and abs(b - (4 << 20)) <= 0.1 * (4 << 20)
print("check: gpu_mem.growth for 4 MiB kept a step:", "ok" if ok else "MISMATCH",
      {k: ev.get(k) for k in ("bytes_per_step", "r2", "rise_bytes", "from_step", "to_step")})
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] && [ $leak_rc -eq 0 ] || { tail -n 20 "$work/leak.out"; leak_rc=1; }
fi

# --- fp16 AMP on a real GPU: autocast to float16 with a GradScaler, and a
# learning-rate spike at step 40 that overflows the weights, under
# `trainmon run`: every iteration a step (the job's count), and
# amp.skipped_steps with the job's own count of skipped steps (the scale
# fell at its update(): the start's backoff too, if fp16 overflowed there)
# and the step it stopped learning at.
if want amp; then
cat >"$work/amp.py" <<'PY'
import json, torch
dev = torch.device("cuda:0")
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                            torch.nn.Linear(2048, 512)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    scaler = torch.amp.GradScaler("cuda")
except (AttributeError, TypeError):
    scaler = torch.cuda.amp.GradScaler()
skipped, dead_from, steps = 0, None, 80
for step in range(steps):
    x = torch.randn(64, 512, device=dev)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    for g in opt.param_groups:
        g["lr"] = 1e30 if step == 40 else 0.01
    scale = scaler.get_scale()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    if scaler.get_scale() < scale:
        skipped += 1
        dead_from = step if dead_from is None else dead_from
    else:
        dead_from = None
    opt.zero_grad()
print(json.dumps({"steps": steps, "skipped": skipped, "dead_from": dead_from}))
PY
run_job amp 120 -- "$work/amp.py"
amp_rc=$?
"$py" - "$work/amp.json" "$work/amp.out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
job = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][-1]
f = [x for x in r.get("findings", []) if x["id"] == "amp.skipped_steps"]
ev = f[0]["evidence"] if f else {}
want = (job["steps"], job["skipped"], job["steps"] - job["dead_from"] if job["dead_from"] is not None else None)
got = (r["summary"].get("steps"), ev.get("skipped_steps"), ev.get("skipped_in_a_row_at_end"))
print("check: fp16 AMP, the job's steps, skipped, skipped at the end:", want, "trainmon:", got,
      "ok" if got == want else "MISMATCH")
sys.exit(0 if got == want else 1)
PY
[ $? -eq 0 ] && [ $amp_rc -eq 0 ] || { tail -n 20 "$work/amp.out"; amp_rc=1; }
fi

# --- torch.compile on the GPU (steps.compile): a compiled model (inductor)
# trained 3 epochs of 13 steps, the 13th a short batch (recompiled once).
# The backward graph compiles lazily in the autograd engine's device
# thread: it must count as the loop's, not as another thread's.  The job's
# own count of its compiling steps and their time is the oracle.
if want compile; then
cat >"$work/compile.py" <<'PY'
import json, time, torch
dev = torch.device("cuda:0")
model = torch.compile(torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(),
                                          torch.nn.Linear(2048, 512)).to(dev))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
frames = torch._dynamo.utils.counters["stats"]
steps, compiled, comp_s = 0, 0, 0.0
for epoch in range(3):
    for i in range(13):
        x = torch.randn(64 if i < 12 else 20, 512, device=dev)
        before = frames["unique_graphs"]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        steps += 1
        if frames["unique_graphs"] != before:
            compiled += 1
            comp_s += time.perf_counter() - t0
print(json.dumps({"steps": steps, "compiled_steps": compiled, "compile_step_s": comp_s,
                  "graphs": frames["unique_graphs"]}))
PY
run_job compile 300 -- "$work/compile.py"
compile_rc=$?
"$py" - "$work/compile.json" "$work/compile.out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
job = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")][-1]
f = [x for x in r.get("findings", []) if x["id"] == "steps.compile"]
ev = f[0]["evidence"] if f else {}
want = (job["steps"], job["compiled_steps"] - 1, 12, job["graphs"] - 1, 0)
got = (r["summary"].get("steps"), ev.get("compilations_after_warmup"),
       ev.get("first_step_after_warmup"), ev.get("recompilations"),
       ev.get("other_thread_compilations"))
ct = ev.get("compile_time_s") or 0
ok = got == want and 0.5 * job["compile_step_s"] <= ct <= job["compile_step_s"] + 0.05
print("check: torch.compile, the job's steps, compiling steps after the first, from step, "
      "recompilations, other threads':", want, "trainmon:", got, "compile time %.2f s of the "
      "job's %.2f s in those steps" % (ct, job["compile_step_s"]), "ok" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY
[ $? -eq 0 ] && [ $compile_rc -eq 0 ] || { tail -n 20 "$work/compile.out"; compile_rc=1; }
fi

# --- the largest micro-batch (#16 item 5): with GPU 0 left about BATCH_GIB
# free by a ballast process, a transformer trained under `trainmon run` at
# batch 8 gets anatomy.max_micro_batch (the prediction); batch_oom.py then
# finds the largest batch that really fits (doubled, then bisected, two
# Adam steps each); the prediction must not promise a batch that runs out
# of memory, nor fall below 60% of the real one.  Then the same job at twice
# the first failing batch runs out of memory under `trainmon run
# --memory-history`: the report's gpu_mem.oom must explain it (cause,
# largest free piece, live bytes by category, sites).  Last, what torch's
# history recording costs per step and per event (run --help states it).
if want batch; then
bgib=${BATCH_GIB:-24}
CUDA_VISIBLE_DEVICES=0 "$py" - "$bgib" "$work/ballast" >"$work/ballast.log" 2>&1 <<'PY' &
import os, sys, time, torch
keep = int(sys.argv[1]) << 30
free, total = torch.cuda.mem_get_info(0)
hold = torch.empty(max(0, free - keep), dtype=torch.uint8, device="cuda:0")
hold.fill_(1)
torch.cuda.synchronize()
open(sys.argv[2], "w").write("%d %d\n" % (free, hold.numel()))
time.sleep(900)
PY
ballast_pid=$!
for _ in $(seq 1 240); do
    [ -s "$work/ballast" ] && break
    kill -0 "$ballast_pid" 2>/dev/null || break
    sleep 0.5
done
batch_rc=1
if [ -s "$work/ballast" ]; then
    echo "check: ballast pid $ballast_pid leaves about $bgib GiB of GPU 0 free"
    run_job pred 240 -- tests/gpu/batch_oom.py train 8 6
    CUDA_VISIBLE_DEVICES=0 timeout 240 "$py" tests/gpu/batch_oom.py search 8 >"$work/search.out" 2>&1
    first_fail=$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["first_fail"])' "$work/search.out" 2>/dev/null || echo 64)
    hist=""
    "$build/trainmon" run --help 2>&1 | grep -q -- '--memory-history' && hist=--memory-history
    run_job oom 240 $hist -- tests/gpu/batch_oom.py train $((first_fail * 2)) 3
    "$build/trainmon" report "$work/oom" 2>&1 | sed -n '/out of memory/,/^$/p' | head -n 30
    CUDA_VISIBLE_DEVICES=0 timeout 120 "$py" tests/gpu/batch_oom.py histcost 8 20 >"$work/hist.out" 2>&1
    "$py" - "$work/pred.json" "$work/search.out" "$work/oom.json" "$work/hist.out" <<'PY'
import json, sys
def last_json(path):
    for line in reversed(open(path).read().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return {}
bad = 0
def check(what, ok, detail=""):
    global bad
    bad += not ok
    print("check: %-58s %s %s" % (what, "ok" if ok else "MISMATCH", detail))
pred = json.load(open(sys.argv[1]))
f = [x for x in pred.get("findings", []) if x["id"] == "anatomy.max_micro_batch"]
p = f[0]["evidence"].get("max_micro_batch") if f else None
s = last_json(sys.argv[2])
real = s.get("largest_fit")
check("anatomy.max_micro_batch predicted", p is not None, "predicted %s" % p)
check("the largest batch that fits was found", bool(real), "largest %s, first failing %s"
      % (real, s.get("first_fail")))
if p is not None and real:
    r = p / real
    check("prediction within [0.6, 1.0] of the real largest batch", 0.6 <= r <= 1.0,
          "%.0f / %d = %.2f" % (p, real, r))
oom = json.load(open(sys.argv[3]))
f = [x for x in oom.get("findings", []) if x["id"] == "gpu_mem.oom"]
ev = f[0]["evidence"] if f else {}
check("gpu_mem.oom reported for the batch that does not fit", bool(f),
      f[0]["title"] if f else "")
check("the OOM finding names its cause", bool(ev.get("cause")), str(ev.get("cause")))
print("check: OOM evidence:", {k: v for k, v in ev.items() if k != "snapshot"})
h = last_json(sys.argv[4])
print("check: memory history cost: %s" % h)
sys.exit(1 if bad else 0)
PY
    batch_rc=$?
    [ $batch_rc -eq 0 ] || tail -n 20 "$work/pred.out" "$work/search.out" "$work/oom.out" "$work/hist.out"
else
    cat "$work/ballast.log"
    echo "check: the ballast process did not get ready" >&2
fi
kill "$ballast_pid" 2>/dev/null && wait "$ballast_pid" 2>/dev/null
ballast_pid=""
fi

echo "check: watch $watch_rc, in-process $py_rc, swing $swing_rc, host waits $hostwait_rc, leak $leak_rc, amp $amp_rc, compile $compile_rc, batch $batch_rc (0: all match)"
for r in $watch_rc $py_rc $swing_rc $hostwait_rc $leak_rc $amp_rc $compile_rc $batch_rc; do
    case $r in 0 | skipped) ;; *) exit 1 ;; esac
done
exit 0
