#!/usr/bin/env bash
# trainmon watch --alert/--on-alert on a real slow disk: a loop device with
# ext4, cold cache and a 10 MB/s blkio read throttle.  A reader pushes the
# device's read rate over 2 MB/s for about 6 s, then stops: the command runs
# exactly once with a firing alert, then exactly once with the resolved one,
# gets the alert as JSON on stdin and in its environment, and the JSON names
# the device.  A bad rule is refused at once with a one-line message.
set -u
. "$(dirname "$0")/../lib/slowdisk.sh"

# A typo in a rule fails before anything is measured (no root needed).
err=$("$TRAINMON" watch -n 1 --alert 'disk.foo > 1' 2>&1); rc=$?
[ $rc -eq 2 ] || { echo "FAIL: bad rule: exit $rc, want 2"; exit 1; }
[ "$err" = "trainmon: --alert 'disk.foo > 1': unknown metric 'disk.foo' (see docs/ALERTS.md)" ] ||
    { echo "FAIL: bad rule message: $err"; exit 1; }
err=$("$TRAINMON" watch -n 1 --on-alert true 2>&1); rc=$?
[ $rc -eq 2 ] || { echo "FAIL: --on-alert without --alert: exit $rc, want 2 ($err)"; exit 1; }

slowdisk_require
slowdisk_setup 96 10485760
# 60 MiB at 10 MB/s: ~6 s of reading, so that an alert that fires late (a
# loaded machine delays the first samples of the read; seen: 3.5 s into a
# 4 s read) still has a firing span of over a second before it resolves
slowdisk_file "$SD_MNT/data.bin" 60
# The threshold is well under the throttle's rate: cgroup v1 dispatches
# throttled reads in slices, and a 0.5 s sample of a 10 MB/s read was seen
# at 5.0 MB/s (a threshold of 5 resolved and fired again mid-read).
OUT=$SD_DIR/out
mkdir -p "$OUT"
export OUT

"$TRAINMON" watch "$SD_MNT" -i 0.5 --gpu none --json \
    --alert 'disk.r_mb_s > 2 for 1s' \
    --on-alert 'cat >> "$OUT/alerts.jsonl"; echo "$TRAINMON_ALERT_STATUS" >> "$OUT/status.log"' \
    --on-alert 'printf "%s %s %s\n" "$TRAINMON_ALERT_STATUS" "$TRAINMON_ALERT_LABELS" "$TRAINMON_ALERT_METRIC" >> "$OUT/env.log"' \
    > "$OUT/watch.json" 2> "$OUT/watch.err" &
w=$!
sleep 1.2
start=$(date +%s.%N)
slowdisk_run dd if="$SD_MNT/data.bin" of=/dev/null bs=1M status=none
end=$(date +%s.%N)
sleep 2.5
kill -INT $w; wait $w; wrc=$?
sleep 0.3 # the last command may still be appending

echo "--- read took $(echo "$end - $start" | bc 2>/dev/null || echo "?") s"
echo "--- watch stderr"; cat "$OUT/watch.err"
echo "--- status.log"; cat "$OUT/status.log" 2>/dev/null
echo "--- env.log"; cat "$OUT/env.log" 2>/dev/null
[ $wrc -eq 0 ] || { echo "FAIL: watch exited $wrc"; exit 1; }
[ "$(cat "$OUT/status.log" 2>/dev/null)" = "$(printf 'firing\nresolved')" ] ||
    { echo "FAIL: want exactly one firing then one resolved"; exit 1; }
[ "$(cat "$OUT/env.log")" = "$(printf 'firing device=%s disk.r_mb_s\nresolved device=%s disk.r_mb_s' "$SD_DEV" "$SD_DEV")" ] ||
    { echo "FAIL: the second command did not get the alert in its environment"; exit 1; }
grep -q "alert firing: disk.r_mb_s > 2 for 1s {device=$SD_DEV}" "$OUT/watch.err" ||
    { echo "FAIL: watch did not say the alert on stderr"; exit 1; }

/usr/bin/python3 - "$OUT/alerts.jsonl" "$OUT/watch.json" "$SD_DEV" <<'PY'
import json, socket, sys
from datetime import datetime
path, wpath, dev = sys.argv[1:4]
lines = open(path).read().splitlines()
assert len(lines) == 2, lines
a, b = (json.loads(l) for l in lines)
for x in (a, b):
    assert set(x) == {"status", "rule", "metric", "labels", "value", "threshold",
                      "for_seconds", "starts_at", "ends_at", "host"}, x
    assert x["rule"] == "disk.r_mb_s > 2 for 1s" and x["metric"] == "disk.r_mb_s", x
    assert x["labels"] == {"device": dev}, x
    assert x["threshold"] == 2 and x["for_seconds"] == 1, x
    assert x["host"] == socket.gethostname(), x
assert a["status"] == "firing" and a["value"] > 2 and a["ends_at"] is None, a
assert b["status"] == "resolved" and b["value"] <= 2, b
assert b["starts_at"] == a["starts_at"], (a, b)
t0 = datetime.strptime(a["starts_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
t1 = datetime.strptime(b["ends_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
firing_s = (t1 - t0).total_seconds()
print(f"fired at {a['value']:.1f} MB/s, resolved at {b['value']:.2f} MB/s after {firing_s:.1f} s")
assert 1.0 <= firing_s <= 7.5, firing_s
# --json stdout stays clean: the commands' output goes to stderr.
for l in open(wpath):
    json.loads(l)
PY
