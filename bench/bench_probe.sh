#!/usr/bin/env bash
# trainmon probe's wall time (the issue's target: under 10 s) on a dataset
# of 400 files of 64 KiB (25 MiB) in a scratch directory on the disk that
# holds /var/tmp, with the default time budget, and what it measured there:
# fio-like numbers are only a by-product, the point is the time the user
# (and `run --probe`) waits.
#
# Prints key=value lines:
#   probe_wall_s          wall time of `trainmon probe DIR --json`
#   probe_cpu_s           its CPU time (user + system)
#   probe_best_mbs        the best test's MB/s; probe_random_mbs the best random one
#   probe_device          the device it measured
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
TRAINMON=${TRAINMON:-$root/$BUILD/trainmon}
[ -x "$TRAINMON" ] || { echo "bench_probe: $TRAINMON not built" >&2; exit 1; }
PY=/usr/bin/python3
tmp=$(mktemp -d /var/tmp/trainmon-bench-probe.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/ds"
for i in $(seq 1 400); do head -c 65536 /dev/urandom > "$tmp/ds/$i.bin"; done
"$PY" - "$TRAINMON" "$tmp/ds" <<'PYEOF'
import json, resource, subprocess, sys, time
t0 = time.monotonic()
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
out = subprocess.run([sys.argv[1], "probe", "--json", sys.argv[2]], check=True,
                     capture_output=True, text=True).stdout
wall = time.monotonic() - t0
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
p = json.loads(out)["probes"][0]
best = max(t["bytes_per_second"] for t in p["tests"])
rnd = max(t["bytes_per_second"] for t in p["tests"] if t["pattern"] == "random")
print("probe_wall_s=%.2f" % wall)
print("probe_cpu_s=%.2f" % (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime))
print("probe_best_mbs=%.1f" % (best / 1e6))
print("probe_random_mbs=%.1f" % (rnd / 1e6))
print("probe_device=%s" % (p["device"] or "none"))
PYEOF
