#!/usr/bin/env bash
# trainmon watch with GPUs, through the real dlopen path of the fake NVML
# (tests/fakes/fake_nvml.c): values reach the JSON exactly, the tree's GPU
# memory is attributed, a GPU lost mid-run is said once and the others go
# on, and no driver at all is said once while everything else works.
set -u
fake="$TM_ROOT/$BUILD/tests/fakes/fake_nvml.so"
[ -f "$fake" ] || { echo "FAIL: $fake not built"; exit 1; }
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

sleep 30 & job=$!
export TRAINMON_NVML_LIB=$fake
export FAKE_NVML="devices=2;d0.name=NVIDIA H200;d0.uuid=GPU-aaaa;d0.mem=150323855360,42949672960,107374182400,536870912;d0.util=97,41;d0.temp=61;d0.power_mw=312000;d0.pcie_kbps=2048,1024;d0.sm_mhz=1980;d0.throttle=0x4;d0.procs=$job:40000000000,4242:1000;d1.lost_after=2"
"$TRAINMON" watch --json --pid $job -i 0.2 -n 4 -o "$scratch/run" / > "$scratch/out" 2> "$scratch/err"
rc=$?; kill $job
cat "$scratch/err"
[ $rc -eq 0 ] || fail "watch exited $rc"
[ "$(grep -c 'GPU 1 (.*) is lost' "$scratch/err")" -eq 1 ] || fail "the lost GPU is not said exactly once"
/usr/bin/python3 - "$scratch/out" <<'PY' || fail "JSON values"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 4, len(rows)
g = rows[-1]["gpu"][0]
want = {"index": 0, "name": "NVIDIA H200", "uuid": "GPU-aaaa", "memory_total_bytes": 150323855360,
        "memory_used_bytes": 42949672960, "memory_free_bytes": 107374182400,
        "memory_reserved_bytes": 536870912, "utilization_gpu_percent": 97.0,
        "utilization_memory_percent": 41.0, "temperature_celsius": 61.0, "power_watts": 312.0,
        "pcie_rx_bytes_per_second": 2048 * 1024, "pcie_tx_bytes_per_second": 1024 * 1024,
        "sm_clock_mhz": 1980, "throttle_reasons": ["sw_power_cap"]}
for k, v in want.items():
    assert g[k] == v, (k, g[k], v)
assert rows[-1]["process_tree"]["gpu_memory_bytes"] == 40000000000, rows[-1]["process_tree"]
lost = rows[-1]["gpu"][1]
assert lost["lost"] is True and "memory_used_bytes" not in lost, lost
print("gpu values exact; tree GPU memory attributed; lost GPU left out")
PY
"$TRAINMON" dump "$scratch/run/system.tmr" > "$scratch/dump" || fail "dump"
grep -q 'gpu.memory_used_bytes' "$scratch/dump" || fail "GPU series not recorded"

# No driver: said once, disks still printed.
TRAINMON_NVML_LIB=/nonexistent/libnvidia-ml.so.1 "$TRAINMON" watch -i 0.2 -n 3 / > "$scratch/out" 2> "$scratch/err"
rc=$?
[ $rc -eq 0 ] || fail "no driver: exit $rc"
[ "$(grep -c 'no NVIDIA driver found: GPU metrics off' "$scratch/err")" -eq 1 ] || fail "no driver: not said once"
[ "$(grep -c '^[0-9:]* *vda\|^ *vda' "$scratch/out")" -ge 1 ] || grep -q 'r/s' "$scratch/out" || fail "no driver: no disk lines"
# --gpu none: nothing said about GPUs.
TRAINMON_NVML_LIB=/nonexistent "$TRAINMON" watch --gpu none -i 0.2 -n 1 / > /dev/null 2> "$scratch/err"
grep -q NVIDIA "$scratch/err" && fail "--gpu none still opened NVML"
echo ok
