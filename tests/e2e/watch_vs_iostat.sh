#!/usr/bin/env bash
# trainmon watch --json against sysstat's iostat -x -y over the same
# interval, on a real loop device with ext4, cold cache and a 20 MB/s blkio
# read throttle: r/s, rkB/s, r_await and %util agree within 5%; the process
# tree's read rate matches the disk's, and its read-byte total matches what
# the reader read.
set -u
. "$(dirname "$0")/../lib/slowdisk.sh"
slowdisk_require
command -v iostat >/dev/null || { echo "skipped: iostat missing (make deps)"; exit 77; }

slowdisk_setup 224 20971520
slowdisk_file "$SD_MNT/data.bin" 140
size=$((140 * 1024 * 1024))

# The reader: a shell that waits a moment, reads the whole file through dd
# (a child, so its counters fold into the shell's when it is reaped), then
# lingers so the last samples see the folded total.  Direct 256 KiB reads
# make about 320 requests per window, so that a request more or less at a
# window's edge moves the rates by about 0.3%.
slowdisk_run bash -c 'sleep 0.5; dd if="$0" of=/dev/null bs=256k iflag=direct status=none; sleep 1.5' \
    "$SD_MNT/data.bin" &
reader=$!

# A watch over the reader's whole life, to check its read-byte total.
"$TRAINMON" watch --json -i 0.5 --pid "$reader" "$SD_MNT" > "$SD_DIR/life.json" \
    2> "$SD_DIR/life.err" &
life=$!

sleep 1.5
# The comparison window: 4 s, the same for both tools.  blk-throttle lets
# I/O through in slices of about 100 ms, so the windows must start
# together: iostat is started the moment watch says what it watches, which
# it does just before its first sample.
"$TRAINMON" watch --json -i 4 -n 1 --pid "$reader" "$SD_MNT/data.bin" > "$SD_DIR/w.json" \
    2> "$SD_DIR/w.err" &
w=$!
for _ in $(seq 1 500); do
    grep -q watching "$SD_DIR/w.err" 2>/dev/null && break
    sleep 0.005
done
iostat -x -y -o JSON 4 1 "$SD_DEV" > "$SD_DIR/i.json" &
i=$!
wait $w; wrc=$?
wait $i
wait $reader
sleep 0.6
kill -INT $life; wait $life; lrc=$?

echo "--- watch stderr"; cat "$SD_DIR/w.err"
[ $wrc -eq 0 ] || { echo "FAIL: watch exited $wrc"; exit 1; }
[ $lrc -eq 0 ] || { echo "FAIL: long watch exited $lrc after SIGINT"; exit 1; }
grep -q "watching $SD_MNT/data.bin: .*$SD_DEV" "$SD_DIR/w.err" ||
    { echo "FAIL: watch did not say it watches $SD_DEV"; exit 1; }

/usr/bin/python3 - "$SD_DIR/w.json" "$SD_DIR/i.json" "$SD_DIR/life.json" "$SD_DEV" "$size" <<'PY'
import json, sys
wpath, ipath, lpath, dev, size = sys.argv[1:6]
size = int(size)
w = json.loads(open(wpath).read().splitlines()[0])
i = json.load(open(ipath))["sysstat"]["hosts"][0]["statistics"][0]["disk"]
i = next(d for d in i if d["disk_device"] == dev)
wd = next(d for d in w["disk"] if d["disk_device"] == dev)
bad = 0
print(f"{'key':10} {'trainmon':>10} {'iostat':>10} {'diff%':>7}")
# Within 5%, or within what the numbers can resolve: both tools print two
# decimals, and %util counts io_ms in jiffies (4 ms at HZ=250), which is
# 0.1 percentage points of a 4 s window.
grain = {"r/s": 0.011, "rkB/s": 0.011, "r_await": 0.011, "util": 0.111}
for k in ("r/s", "rkB/s", "r_await", "util"):
    a, b = wd[k], i[k]
    diff = abs(a - b) / max(abs(b), 1e-9) * 100
    ok = diff <= 5.0 or abs(a - b) <= grain[k]
    bad += not ok
    print(f"{k:10} {a:10.2f} {b:10.2f} {diff:7.2f} {'ok' if ok else 'MISMATCH'}")
if i["rkB/s"] < 15000:
    print("FAIL: the throttled read ran at", i["rkB/s"], "kB/s; expected about 20480"); bad += 1
t = w["process_tree"]
tree_rate = t["read_bytes_per_second"]
disk_rate = i["rkB/s"] * 1024
diff = abs(tree_rate - disk_rate) / disk_rate * 100
print(f"tree read rate {tree_rate/1e6:.2f} MB/s vs disk {disk_rate/1e6:.2f} MB/s ({diff:.1f}%)")
if diff > 10:
    print("FAIL: tree read rate and disk read rate differ by more than 10%"); bad += 1
totals = [json.loads(l)["process_tree"].get("read_bytes_total", 0) for l in open(lpath)]
total = max(totals)
diff = abs(total - size) / size * 100
print(f"tree read bytes total {total} vs file size {size} ({diff:.2f}%)")
if diff > 2:
    print("FAIL: the tree's read bytes do not match what the reader read"); bad += 1
sys.exit(1 if bad else 0)
PY
