#!/usr/bin/env bash
# serve_bad_file.sh - one bad record file inside `serve --runs` does not stall
# the others, and /health says which file it is (issue #15):
#   - runs/good/rank0.tmr: 30 intact steps;
#   - runs/damaged/rank0.tmr: 30 steps with 16 bytes overwritten in the middle
#     (the reader reports the place and reads past it);
#   - runs/crafted/rank0.tmr: 16 MB crafted for the worst case of resync
#     (tmr_craft far: a plausible bad header every 8 bytes).
# Then: /metrics has the good run's 30 steps and some of the damaged run's,
# a collection takes well under a second, /health answers 200 within 1 s and
# names the damaged file under "damaged_files", and promtool accepts /metrics.
set -u
root=${TM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
BUILD=${BUILD:-build}
TRAINMON=${TRAINMON:-$root/$BUILD/trainmon}
WRITER=$root/$BUILD/tests/helpers/rank_writer
CRAFT=$root/$BUILD/tests/helpers/tmr_craft
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
command -v curl >/dev/null || { echo "skip: curl not installed (make deps)"; exit 77; }
for b in "$TRAINMON" "$WRITER" "$CRAFT"; do [ -x "$b" ] || { echo "FAIL: $b not built"; exit 1; }; done

tmp=$(mktemp -d /tmp/trainmon-serve-bad.XXXXXX)
spid=
cleanup() { [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$tmp/serve.log" ] && sed 's/^/  serve: /' "$tmp/serve.log"; exit 1; }
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mkdir -p "$tmp/runs/good" "$tmp/runs/damaged" "$tmp/runs/crafted"
"$WRITER" "$tmp/runs/good/rank0.tmr" 0 30 > /dev/null 2>&1 || fail "rank_writer good"
"$WRITER" "$tmp/runs/damaged/rank0.tmr" 0 30 > /dev/null 2>&1 || fail "rank_writer damaged"
# 16 bytes of 0xA5 among the first records (they start after the 4 KiB header)
head -c 16 /dev/zero | tr '\0' '\245' |
    dd of="$tmp/runs/damaged/rank0.tmr" bs=1 seek=$((4096 + 400)) conv=notrunc status=none
"$CRAFT" far "$tmp/runs/crafted/rank0.tmr" $((16 << 20)) 65536 > /dev/null 2>&1 || fail "tmr_craft far"
"$TRAINMON" dump "$tmp/runs/damaged/rank0.tmr" 2>&1 | grep -qi 'damage' ||
    fail "the overwritten bytes did not damage a record (dump reports none)"

port=$(free_port)
"$TRAINMON" serve --listen "127.0.0.1:$port" --runs "$tmp/runs" -i 0.5 --gpu none \
    > "$tmp/serve.log" 2>&1 &
spid=$!
base="http://127.0.0.1:$port"
for _ in $(seq 100); do curl -sf "$base/metrics" -o /dev/null && break; sleep 0.1; done
sleep 1.5 # a few collections
curl -sf --max-time 5 "$base/metrics" -o "$tmp/metrics.txt" || fail "no /metrics"
code=$(curl -s --max-time 1 -o "$tmp/health.json" -w '%{http_code}' "$base/health")
[ "$code" = 200 ] || fail "/health answered $code (want 200 within 1 s)"

"$PY" - "$tmp/metrics.txt" "$tmp/health.json" <<'PY' || fail "metrics/health"
import json, re, sys
m = open(sys.argv[1]).read()
h = json.load(open(sys.argv[2]))
def val(name, run):
    r = re.search(r'^%s\{run="%s",rank="0"\} (\S+)$' % (name, run), m, re.M)
    return float(r.group(1)) if r else None
good, damaged = val("trainmon_run_steps_total", "good"), val("trainmon_run_steps_total", "damaged")
assert good == 30, "good run: %r steps, want 30" % good
assert damaged is not None and 0 < damaged <= 30, "damaged run: %r steps" % damaged
d = float(re.search(r'^trainmon_scrape_duration_seconds (\S+)$', m, re.M).group(1))
assert d < 0.5, "a collection took %.3f s with a 16 MB crafted file in the runs" % d
files = h.get("damaged_files")
assert isinstance(files, list), "no damaged_files in /health: %s" % h
names = {(f["run"], f["file"]) for f in files}
assert ("damaged", "rank0.tmr") in names, "/health does not name runs/damaged/rank0.tmr: %s" % files
assert ("good", "rank0.tmr") not in names, "/health blames the intact file: %s" % files
print("ok: good 30 steps, damaged %d, collection %.3f s, /health names %s" % (damaged, d, sorted(names)))
PY
if command -v promtool >/dev/null; then
    promtool check metrics < "$tmp/metrics.txt" || fail "promtool check metrics"
fi
echo "PASS"
