#!/usr/bin/env bash
# trainmon serve under load, against prometheus-node-exporter serving the
# same disks (diskstats and pressure collectors only), both on loopback and
# measured in the same run with the same wrk load (-t2 -c16 -d5s).
#
# Prints key=value lines:
#   <x>_scrapes_per_s     requests/s wrk completed
#   <x>_p99_ms            99th percentile latency (wrk --latency)
#   <x>_rss_kb            resident set after the load (VmRSS); _hwm_kb: peak
#   <x>_cpu_us_per_scrape the server's CPU time (utime+stime from
#                         /proc/PID/stat) during the load / requests served
#   trainmon_collect_cpu_us  CPU of one trainmon collection (its own counter):
#                         what a scrape would cost if trainmon collected on
#                         every scrape as node_exporter does
#   cpu_ratio             trainmon_cpu_us_per_scrape / node_exporter's
#   collect_ratio         trainmon_collect_cpu_us / node_exporter's per scrape
# Exit 77 when wrk or prometheus-node-exporter is missing.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
TRAINMON=${TRAINMON:-$root/$BUILD/trainmon}
DURATION=${DURATION:-5s}
NODE_EXPORTER=$(command -v prometheus-node-exporter || command -v node_exporter || true)
command -v wrk >/dev/null || { echo "skip: wrk not installed"; exit 77; }
[ -n "$NODE_EXPORTER" ] || { echo "skip: prometheus-node-exporter not installed"; exit 77; }
[ -x "$TRAINMON" ] || { echo "bench_serve: $TRAINMON not built" >&2; exit 1; }

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
tmp=$(mktemp -d /tmp/trainmon-bench-serve.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
wait_up() { for _ in $(seq 100); do curl -sf "$1" -o /dev/null && return 0; sleep 0.1; done; return 1; }

# One load run: prints <name>_... lines.
measure() {
    local name=$1 pid=$2 url=$3
    curl -sf "$url" -o /dev/null
    wrk -t2 -c16 -d1s "$url" > /dev/null 2>&1 # warm up
    local t0 t1
    t0=$(ticks "$pid")
    wrk -t2 -c16 -d"$DURATION" --latency "$url" > "$tmp/$name.wrk" 2>&1
    t1=$(ticks "$pid")
    local hz
    hz=$(getconf CLK_TCK)
    $PY - "$name" "$tmp/$name.wrk" "$t0" "$t1" "$hz" "$pid" <<'EOF'
import re, sys
name, path, t0, t1, hz, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
out = open(path).read()
req = int(re.search(r"(\d+) requests in", out).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
m = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
status = {}
for l in open(f"/proc/{pid}/status"):
    k, _, v = l.partition(":")
    status[k] = v.split()[0] if v.split() else ""
bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
print(f"{name}_scrapes_per_s={rps:.0f}")
print(f"{name}_p99_ms={p99:.2f}")
print(f"{name}_rss_kb={status['VmRSS']}")
print(f"{name}_hwm_kb={status['VmHWM']}")
print(f"{name}_cpu_us_per_scrape={(t1 - t0) / hz * 1e6 / req:.1f}")
print(f"{name}_errors={bad.group(1) if bad else 0}")
EOF
}

tport=$(free_port)
"$TRAINMON" serve --listen "127.0.0.1:$tport" --gpu none > "$tmp/trainmon.log" 2>&1 &
tpid=$!
pids+=($tpid)
wait_up "http://127.0.0.1:$tport/metrics" || { echo "bench_serve: trainmon serve did not start: $(cat "$tmp/trainmon.log")" >&2; exit 1; }

# node_exporter on exactly trainmon's disks.  (1.5 refuses -include next to
# the default -exclude, hence the empty -exclude.)
devs=$(curl -sf "http://127.0.0.1:$tport/metrics" |
       sed -n 's/^trainmon_disk_reads_completed_total{device="\([^"]*\)"}.*/\1/p' | paste -sd'|')
nport=$(free_port)
"$NODE_EXPORTER" --web.listen-address="127.0.0.1:$nport" --collector.disable-defaults \
    --collector.diskstats --collector.pressure --collector.diskstats.device-exclude= \
    --collector.diskstats.device-include="^(${devs:-none})\$" > "$tmp/node.log" 2>&1 &
npid=$!
pids+=($npid)
wait_up "http://127.0.0.1:$nport/metrics" || { echo "bench_serve: node_exporter did not start: $(tail -3 "$tmp/node.log")" >&2; exit 1; }

counters() {
    curl -sf "http://127.0.0.1:$tport/metrics" | awk '
        /^trainmon_exporter_collect_cpu_seconds_total / {c = $2}
        /^trainmon_exporter_collections_total / {n = $2}
        END {print c, n}'
}
echo "disks=${devs:-none}"
echo "cores=$(nproc)"
read -r c0 n0 < <(counters)
measure trainmon "$tpid" "http://127.0.0.1:$tport/metrics" > "$tmp/t.out"
measure node_exporter "$npid" "http://127.0.0.1:$nport/metrics" > "$tmp/n.out"
cat "$tmp/t.out" "$tmp/n.out"
read -r c1 n1 < <(counters)
# Steady-state collections during the runs (the first one, with its opens, is left out).
$PY - "$tmp/t.out" "$tmp/n.out" "$(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}')" "$((n1 - n0))" <<'EOF'
import sys
kv = {}
for f in sys.argv[1:3]:
    for l in open(f):
        k, _, v = l.strip().partition("=")
        kv[k] = float(v)
collect_us = float(sys.argv[3]) / float(sys.argv[4]) * 1e6
print(f"trainmon_collect_cpu_us={collect_us:.1f}")
print(f"cpu_ratio={kv['trainmon_cpu_us_per_scrape'] / kv['node_exporter_cpu_us_per_scrape']:.4f}")
print(f"collect_ratio={collect_us / kv['node_exporter_cpu_us_per_scrape']:.4f}")
EOF
