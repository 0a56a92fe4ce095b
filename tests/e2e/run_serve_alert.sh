#!/usr/bin/env bash
# trainmon run --serve ADDR --alert RULE --on-alert CMD: while the job runs,
# the exporter answers on ADDR with the node's and the run's metrics; an
# alert on the job's own CPU fires while it spins and resolves when it stops,
# and the command gets both with the JSON on stdin; a bad rule stops the run
# before the job starts.
set -u
tm=$TRAINMON
command -v curl >/dev/null || { echo "skipped: curl missing (make deps)"; exit 77; }
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

# The job: spin on a core for 4 s (the alert's condition holds), then idle
# for 3 s (it resolves), scraping the exporter in between.  The threshold
# is 30% of a core, not 50%: with a build running beside the tests on the
# 2-core test VM, the 3 s spin at > 50% never held for 1 s of samples.
"$tm" run -o "$scratch/run" -i 0.25 --serve "127.0.0.1:$port" \
    --alert 'proc.cpu_pct > 30 for 1s' \
    --on-alert "cat >> $scratch/alerts.jsonl; echo >> $scratch/alerts.jsonl" -- \
    bash -c 'end=$((SECONDS + 4)); while [ $SECONDS -lt $end ]; do :; done
             curl -sf "http://127.0.0.1:'"$port"'/metrics" > "'"$scratch"'/metrics.txt"
             sleep 3' > "$scratch/out" 2> "$scratch/err"
rc=$?
cat "$scratch/err" | grep -v '^$' | tail -n 20
[ $rc -eq 0 ] || fail "run exited $rc"
grep -q '^trainmon_disk_reads_completed_total' "$scratch/metrics.txt" || fail "no disk metrics from --serve"
grep -q '^trainmon_run_info' "$scratch/metrics.txt" || fail "the run is not exported by --serve"
/usr/bin/python3 - "$scratch/alerts.jsonl" <<'PY' || fail "alerts"
import json, sys
alerts = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
root = [a for a in alerts if a["metric"] == "proc.cpu_pct"]
st = [a["status"] for a in root]
assert st == ["firing", "resolved"], st
assert root[0]["value"] > 30 and root[0]["threshold"] == 30, root[0]
print("alerts:", st)
PY
# The exporter is gone with the run.
curl -sf "http://127.0.0.1:$port/metrics" > /dev/null 2>&1 && fail "the exporter outlived the run"

# A bad rule: exit 2, one line, and the job never ran.
"$tm" run -o "$scratch/bad" --alert 'disk.nope > 1' -- touch "$scratch/ran" 2> "$scratch/err"; rc=$?
[ $rc -eq 2 ] || fail "bad rule: exit $rc, want 2"
[ "$(wc -l < "$scratch/err")" -eq 1 ] || fail "bad rule: want one line"
[ -e "$scratch/ran" ] && fail "bad rule: the job ran"
echo ok
