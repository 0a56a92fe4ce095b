#!/usr/bin/env bash
# trainmon serve under a slowloris attack, on loopback (issue #15 item 3):
#   - a connection trickling a header byte every 0.5 s is closed by the
#     header deadline (2 s), which the trickle does not extend;
#   - 3,000 connections trickling one header byte every 0.5 s for 8 s, then
#     10,000 idle connections for 6 s, then 10,000 idle connections from 50
#     loopback addresses for 6 s (tests/e2e/slowloris.py; a connection
#     the server cuts is opened again, so the pressure does not fade), while
#     a probe GETs /health every 0.5 s with a 1 s timeout: every probe is
#     answered 200 within 1 s, and serve's RSS stays within 12 MiB of its
#     size before the attacks (512 connections x 16 KiB request memory is 8
#     MiB: the bound holds even if every slot were full);
#   - SIGTERM and SIGINT while an attack is on: serve exits within 1 s, 0;
#   - a stalled collection (the test-only TRAINMON_TEST_COLLECT_DELAY_MS):
#     /health answers 503 "stale" once the last collection is older than
#     max(3 intervals, 5 s), /metrics still answers, and SIGTERM during the
#     stall still ends serve within 1 s.
# Needs curl and python3; raises its own descriptor limit for the attacker.
set -u
root=${TM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
BUILD=${BUILD:-build}
TRAINMON=${TRAINMON:-$root/$BUILD/trainmon}
ATTACK=$root/tests/e2e/slowloris.py
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
command -v curl >/dev/null || { echo "skip: curl not installed"; exit 77; }
[ -x "$TRAINMON" ] || { echo "FAIL: $TRAINMON not built"; exit 1; }
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d /tmp/trainmon-slowloris.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
asan=0
nm "$TRAINMON" 2>/dev/null | grep -q __asan_init && asan=1
# The promise (every /health probe within 1 s) is the plain build's.  Under
# AddressSanitizer serve's one network thread is several times slower, and
# that build is here for memory errors under attack: it gets 3 s.
probe_s=1
[ "$asan" = 1 ] && probe_s=3
# The attacker's rate of new connections.  At 20,000/s an attacker's
# connection lives ~10 ms before admission cuts it (192 newer ones from its
# address), so a probe whose curl is descheduled for 10 ms between its
# connect and its request is cut unsent.  The plain build holds at that
# rate; under AddressSanitizer serve takes most of one of the two cores and
# curl's 10 ms came up short in one CI run (a probe '000' after 6 ms),
# which tests the scheduler, not serve: that build is attacked at a quarter
# of the rate (a connection lives ~60 ms; ~100,000 connections in all).
# The attacker spreads its rate in bursts of at most 10 ms of it: a second's
# worth in one burst (250 connects after a slow turn, seen under ASan) made a
# probe '000' after 7 ms in another CI run, the same window from the other side.
rate=20000
[ "$asan" = 1 ] && rate=5000
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null; }
now_ms() { date +%s%3N; }

# start_serve [ARGS...]: sets spid, port, base.
start_serve() {
    port=$(free_port)
    "$TRAINMON" serve --listen "127.0.0.1:$port" --gpu none "$@" > "$tmp/serve.log" 2>&1 &
    spid=$!
    pids+=($spid)
    base="http://127.0.0.1:$port"
    for _ in $(seq 50); do curl -sf "$base/health" -o /dev/null && return 0; sleep 0.1; done
    fail "serve did not start: $(cat "$tmp/serve.log")"
}

# stop_within PID SIGNAL: sends SIGNAL and fails unless PID exits with 0
# within 1 s; prints the time it took.
stop_within() {
    local pid=$1 sig=$2 t0 t1 st
    t0=$(now_ms)
    kill -"$sig" "$pid"
    while kill -0 "$pid" 2>/dev/null; do
        t1=$(now_ms)
        [ $((t1 - t0)) -le 1000 ] || fail "serve still running $((t1 - t0)) ms after SIG$sig"
        sleep 0.02
    done
    t1=$(now_ms)
    wait "$pid"
    st=$?
    [ $st -eq 0 ] || fail "serve exited $st after SIG$sig: $(tail -3 "$tmp/serve.log")"
    echo "ok: SIG$sig: serve exited 0 after $((t1 - t0)) ms"
}

# probe SECONDS OUT: GET /health every 0.5 s (1 s timeout), one line each.
probe() {
    local end=$((SECONDS + $1))
    : > "$2"
    while [ $SECONDS -lt $end ]; do
        curl -s --max-time "$probe_s" -o /dev/null -w '%{http_code} %{time_total}\n' "$base/health" >> "$2"
        sleep 0.5
    done
}

# attack MODE COUNT SECONDS [ATTACKER ARGS]: the attacker, the probes and an
# RSS sampler together; checks the probes, the attacker's counters and the RSS.
attack() {
    local mode=$1 count=$2 secs=$3 rmax r
    shift 3
    # The attacker runs at a lower priority: on a 2-core machine its 20,000
    # connects/s would otherwise starve the probe's own curl between its
    # connect and its request (seen under load: the probe, unsent, became
    # the stalest connection and was cut), which tests the machine, not
    # serve; serve and the probe keep the default priority.
    nice -n 10 $PY "$ATTACK" "$port" "$mode" "$count" "$secs" --rate $rate "$@" > "$tmp/attack.out" 2>&1 &
    local apid=$!
    pids+=($apid)
    ( while kill -0 "$apid" 2>/dev/null; do rss_kb "$spid"; sleep 0.2; done ) > "$tmp/rss" &
    local rpid=$!
    sleep 0.5 # the attack is on before the first probe
    probe "$((secs - 1))" "$tmp/probes"
    wait "$apid" || fail "attacker failed: $(cat "$tmp/attack.out")"
    wait "$rpid"
    kill -0 "$spid" 2>/dev/null || fail "serve died under the $mode attack: $(tail -5 "$tmp/serve.log")"
    echo "attacker ($mode $count): $(cat "$tmp/attack.out")"
    $PY - "$tmp/probes" "$tmp/attack.out" "$count" "$secs" "$probe_s" <<'EOF' || fail "$mode attack: probes"
import sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
kv = dict(f.split("=") for f in open(sys.argv[2]).read().split())
count, secs, limit = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
bad = [l for l in lines if l[0] != "200" or float(l[1]) >= limit]
times = sorted(float(l[1]) for l in lines)
print(f"probes: {len(lines)}, failed or slower than {limit:g} s: {len(bad)}, "
      f"slowest {times[-1] * 1000:.0f} ms, median {times[len(times) // 2] * 1000:.0f} ms")
assert not bad, f"probes that failed or took {limit:g} s or more: {bad}"
assert len(lines) >= secs, f"only {len(lines)} probes in {secs} s"
assert int(kv["opened"]) >= count, f"the attacker opened only {kv['opened']} of {count}"
EOF
    rmax=0
    for r in $(cat "$tmp/rss"); do [ "$r" -gt "$rmax" ] && rmax=$r; done
    echo "RSS: ${rss0} kB before the attacks, at most ${rmax} kB during this one"
    # Under AddressSanitizer (make asan) freed memory sits in its quarantine
    # and RSS says nothing about serve's own bound: only the plain build is held to it.
    if [ "$asan" = 0 ]; then
        [ $((rmax - rss0)) -lt 12288 ] || fail "RSS grew from $rss0 to $rmax kB under the $mode attack"
    fi
    curl -sf --max-time 1 "$base/metrics" -o /dev/null || fail "no /metrics after the $mode attack"
}

# --- the header deadline: a trickle of bytes does not extend it
start_serve -i 0.5
$PY - "$port" <<'EOF' || fail "header deadline"
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5)
t0 = time.monotonic()
req = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
i = 0
while time.monotonic() - t0 < 6:
    try:
        s.send(req[i:i + 1])
        i += 1
        if s.recv(4096) == b"":
            break
    except socket.timeout:
        continue
    except OSError:
        break
took = time.monotonic() - t0
print(f"ok: a connection trickling a byte every 0.5 s was closed after {took:.2f} s ({i} bytes)")
assert 1.8 <= took <= 3.0, f"closed after {took:.2f} s, want the 2 s deadline (+ the 0.25 s sweep)"
EOF

# --- (a) 3,000 trickling connections, (b) 10,000 idle ones, (c) 10,000 idle
# ones from 50 addresses (127.0.0.2-51), which only the total cap limits
rss0=$(rss_kb "$spid")
attack trickle 3000 8
attack idle 10000 6
attack idle 10000 6 --sources 50

# --- SIGTERM / SIGINT while an attack is on
$PY "$ATTACK" "$port" idle 10000 5 --rate $rate > /dev/null 2>&1 &
apid=$!
pids+=($apid)
sleep 2
stop_within "$spid" TERM
wait "$apid"
start_serve -i 0.5
$PY "$ATTACK" "$port" trickle 3000 5 --rate $rate > /dev/null 2>&1 &
apid=$!
pids+=($apid)
sleep 2
stop_within "$spid" INT
wait "$apid"

# --- a stalled collection: /health says "stale" with 503; SIGTERM still works
TRAINMON_TEST_COLLECT_DELAY_MS=60000 start_serve -i 1
code=$(curl -s --max-time 1 -o "$tmp/h0.json" -w '%{http_code}' "$base/health")
[ "$code" = 200 ] || fail "/health right after start: $code $(cat "$tmp/h0.json")"
t0=$(now_ms)
while :; do
    code=$(curl -s --max-time 1 -o "$tmp/h.json" -w '%{http_code}' "$base/health")
    [ "$code" = 503 ] && break
    [ $(($(now_ms) - t0)) -lt 8000 ] || fail "/health still $code 8 s into a stalled collection"
    sleep 0.2
done
$PY - "$tmp/h.json" <<'EOF' || fail "/health 503 body"
import json, sys
h = json.load(open(sys.argv[1]))
assert h["status"] == "stale", h
assert h["max_age_seconds"] == 5.0, h  # max(3 x 1 s, 5 s)
assert h["last_collection_age_seconds"] > 5.0, h
assert h["reasons"] and "stale" in h["reasons"][0], h
print(f"ok: /health 503 stale after {h['last_collection_age_seconds']:.1f} s without a collection")
EOF
curl -sf --max-time 1 "$base/metrics" -o /dev/null || fail "/metrics not served during the stall"
stop_within "$spid" TERM
grep -q "collection did not stop" "$tmp/serve.log" ||
    fail "the stop did not go through the watchdog: $(cat "$tmp/serve.log")"
echo "PASS serve_slowloris"
