#!/usr/bin/env bash
# trainmon serve against the real thing: promtool checks the exposition, a
# real Prometheus server (Debian package, loopback only) scrapes the
# exporter and its HTTP API must return the expected series, the alert rules
# pass `promtool check rules` and `promtool test rules`, every PromQL
# expression of the Grafana dashboard runs without error, /health parses,
# and garbage, oversized requests, a slow client and 1,000 idle connections
# neither crash the exporter nor grow its memory without bound.
# Exit 77 (skip) when prometheus or promtool is not installed.
set -u
root=${TM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
BUILD=${BUILD:-build}
TRAINMON=${TRAINMON:-$root/$BUILD/trainmon}
WRITER=$root/$BUILD/tests/helpers/rank_writer
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

for tool in promtool prometheus curl; do
    command -v $tool >/dev/null || { echo "skip: $tool not installed (make deps)"; exit 77; }
done
[ -x "$TRAINMON" ] || { echo "FAIL: $TRAINMON not built"; exit 1; }
[ -x "$WRITER" ] || { echo "FAIL: $WRITER not built"; exit 1; }

tmp=$(mktemp -d /tmp/trainmon-serve-e2e.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; exit 1; }
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# --- a live run: rank 0 keeps appending steps while the test runs
mkdir -p "$tmp/runs/exp1"
echo '{"trainmon_version": "test"}' > "$tmp/runs/exp1/meta.json"
"$WRITER" "$tmp/runs/exp1/rank0.tmr" 0 50 1 1200 > "$tmp/writer.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do grep -q ready "$tmp/writer.out" && break; sleep 0.1; done
grep -q ready "$tmp/writer.out" || fail "rank_writer did not start: $(cat "$tmp/writer.out")"

# --- the exporter
port=$(free_port)
"$TRAINMON" serve --listen "127.0.0.1:$port" --runs "$tmp/runs" -i 0.5 --gpu none \
    > "$tmp/serve.log" 2>&1 &
spid=$!
pids+=($spid)
base="http://127.0.0.1:$port"
for _ in $(seq 50); do curl -sf "$base/metrics" -o /dev/null && break; sleep 0.1; done
curl -sf "$base/metrics" -o "$tmp/metrics.txt" || fail "no /metrics: $(cat "$tmp/serve.log")"

promtool check metrics < "$tmp/metrics.txt" || fail "promtool check metrics"
for m in trainmon_disk_reads_completed_total trainmon_disk_read_bytes_total \
         trainmon_disk_io_time_seconds_total trainmon_pressure_io_waiting_seconds_total \
         trainmon_exporter_build_info trainmon_run_info trainmon_run_steps_total \
         trainmon_run_data_wait_seconds_total trainmon_run_gpu_allocated_bytes \
         trainmon_run_ooms_total trainmon_run_stop_seconds_total trainmon_run_stops_total; do
    grep -q "^$m" "$tmp/metrics.txt" || fail "/metrics lacks $m"
done
grep -q '^trainmon_run_ooms_total{run="exp1",rank="0"} 1$' "$tmp/metrics.txt" ||
    fail "OOM count of rank 0 is not 1"
steps_of() { curl -sf "$base/metrics" | awk '/^trainmon_run_steps_total\{run="exp1",rank="0"\}/ {print $2}'; }
s1=$(steps_of); sleep 1.5; s2=$(steps_of)
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s2" -gt "$s1" ] ||
    fail "steps of a growing record file did not advance ($s1 -> $s2)"
echo "ok: /metrics passes promtool; the live run's steps advance ($s1 -> $s2)"

# --- /health, /, 404, 405
curl -sf "$base/health" | $PY -c '
import json, sys
h = json.load(sys.stdin)
assert h["status"] in ("ok", "degraded"), h
assert isinstance(h["reasons"], list) and "disks" in h and "pressure" in h, h
assert (h["status"] == "ok") == (not h["reasons"]), h
' || fail "/health is not the documented JSON"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/")" = 200 ] || fail "GET / not 200"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/nope")" = 404 ] || fail "unknown path not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x=1 "$base/metrics")" = 405 ] ||
    fail "POST not 405"
[ "$(curl -s -o /dev/null -w '%{http_code}' -I "$base/metrics")" = 200 ] || fail "HEAD not 200"
echo "ok: /health JSON, /, 404, 405, HEAD"

# --- alert rules
promtool check rules deploy/prometheus-rules.yml || fail "promtool check rules"
promtool test rules deploy/prometheus-rules.test.yml || fail "promtool test rules"

# --- a real Prometheus scrapes the exporter
pport=$(free_port)
cat > "$tmp/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $root/deploy/prometheus-rules.yml
scrape_configs:
  - job_name: trainmon
    static_configs:
      - targets: ['127.0.0.1:$port']
EOF
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
    --web.listen-address="127.0.0.1:$pport" > "$tmp/prometheus.log" 2>&1 &
pids+=($!)
papi="http://127.0.0.1:$pport/api/v1"
query() { curl -sf --get "$papi/query" --data-urlencode "query=$1"; }
got=""
for _ in $(seq 60); do
    got=$(query 'trainmon_run_steps_total' 2>/dev/null | $PY -c \
        'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))' 2>/dev/null)
    [ -n "$got" ] && [ "$got" -gt 0 ] && break
    sleep 0.5
done
[ -n "$got" ] && [ "$got" -gt 0 ] || fail "Prometheus has no trainmon series: $(tail -5 "$tmp/prometheus.log")"
sleep 2 # a few more scrapes, so that rate() has two points
for q in 'up{job="trainmon"} == 1' trainmon_disk_reads_completed_total \
         trainmon_disk_io_time_seconds_total trainmon_pressure_io_waiting_seconds_total \
         trainmon_exporter_build_info 'trainmon_run_info{run="exp1"}' \
         'trainmon_run_steps_total{run="exp1",rank="0"}' \
         'trainmon_run_ooms_total{run="exp1",rank="0"} == 1' \
         'trainmon_run_stop_seconds_total{run="exp1",rank="0",stop="compile"} == 0' \
         'rate(trainmon_run_steps_total[5s]) > 0'; do
    n=$(query "$q" | $PY -c 'import json,sys; d=json.load(sys.stdin); assert d["status"]=="success"; print(len(d["data"]["result"]))') ||
        fail "query failed: $q"
    [ "$n" -gt 0 ] || fail "Prometheus returns no series for: $q"
done
echo "ok: Prometheus scraped the exporter and returns the expected series"

# --- every PromQL expression of the dashboard and the rules runs
$PY - "$papi" deploy/grafana-dashboard.json deploy/prometheus-rules.yml <<'EOF' || fail "dashboard/rule queries"
import json, re, sys, urllib.parse, urllib.request
api, dash, rules = sys.argv[1:4]
exprs = []
def walk(o):
    if isinstance(o, dict):
        if isinstance(o.get("expr"), str):
            exprs.append(o["expr"])
        if o.get("type") == "query" and isinstance(o.get("definition"), str):
            exprs.append(o["definition"])  # a template variable's query
        for v in o.values():
            walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
walk(json.load(open(dash)))
# Template queries "label_values(metric, label)" are Grafana's, not PromQL:
# run the metric part.
def grafana_to_promql(e):
    m = re.match(r"^\s*label_values\((.*),\s*\w+\)\s*$", e)
    if m:
        e = m.group(1)
    e = e.replace("$__rate_interval", "1m").replace("$__interval", "15s")
    e = re.sub(r"=~\s*\"\$\w+\"", '=~".*"', e)
    e = re.sub(r"\$\{?\w+\}?", ".*", e)
    return e
n = 0
for e in exprs:
    q = grafana_to_promql(e)
    url = api + "/query?" + urllib.parse.urlencode({"query": q})
    try:
        d = json.load(urllib.request.urlopen(url, timeout=10))
    except Exception as ex:
        print("query error:", q, ex); sys.exit(1)
    if d.get("status") != "success":
        print("query failed:", q, d); sys.exit(1)
    n += 1
if n < 8:
    print("dashboard has only", n, "queries"); sys.exit(1)
print(f"ok: {n} dashboard queries run against Prometheus")
EOF

# --- robustness: garbage, oversized header, slow client, 1,000 idle connections
rss0=$(rss_kb $spid)
$PY - "$port" "$spid" "$rss0" <<'EOF' || fail "robustness"
import socket, sys, time
port, pid, rss0 = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"):
            return int(l.split()[1])
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s
def get_ok():
    s = conn()
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:100]
    assert b"trainmon_exporter_build_info" in data
# garbage bytes
for payload in (b"\x00\xff\xfe garbage \r\n\r\n", b"GET\r\n\r\n", b"\x16\x03\x01\x02\x00" + b"A" * 500,
                b"GET /metrics HTTP/9.9\r\n\r\n", b"GET " + b"/" * 5000 + b" HTTP/1.1\r\n\r\n"):
    s = conn()
    s.sendall(payload)
    try:
        s.recv(4096)
    except OSError:
        pass
    s.close()
get_ok()
# an oversized header (100 KB) must be refused, not buffered
s = conn()
try:
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n")
    r = s.recv(4096)
    assert r == b"" or r.startswith(b"HTTP/1.1 431"), r[:80]
except OSError:
    pass  # reset while sending: refused, as wanted
s.close()
get_ok()
# a slow client sending half a request does not block others
slow = conn()
slow.sendall(b"GET /metrics HTTP/1.1\r\nHo")
get_ok()
# 1,000 idle connections, then a normal scrape still works
idle = []
for i in range(1000):
    idle.append(conn())
time.sleep(0.5)
get_ok()
during = rss()
print(f"ok: 1000 idle connections open, scrape still served; RSS {rss0} -> {during} kB")
# Each connection holds at most its 16 KiB pool: bounded, not growing.
assert during - rss0 < 24576, f"RSS grew from {rss0} to {during} kB"
for s in idle:
    s.close()
slow.close()
time.sleep(0.5)
get_ok()
EOF
rss1=$(rss_kb $spid)
kill -0 $spid 2>/dev/null || fail "exporter died: $(tail -5 "$tmp/serve.log")"
curl -sf "$base/metrics" -o /dev/null || fail "no scrape after the abuse"
echo "ok: exporter alive; RSS ${rss0} kB before, ${rss1} kB after the abuse"
[ $((rss1 - rss0)) -lt 24576 ] || fail "RSS grew from $rss0 to $rss1 kB"
echo "PASS serve_prometheus"
