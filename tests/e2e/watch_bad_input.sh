#!/usr/bin/env bash
# trainmon watch on bad input: one clear line on stderr each, a non-zero exit
# only where nothing can be measured, and it keeps going when the watched
# process exits or the recording disk fills.
set -u
tm=$TRAINMON
scratch=$(mktemp -d)
cleanup() {
    mountpoint -q "$scratch/full" 2>/dev/null && umount "$scratch/full"
    rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A path that does not exist: the only thing asked for, so exit 1.
"$tm" watch /nonexistent/data -n 1 > "$scratch/out" 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] || fail "missing path: exit $rc, want 1"
[ "$(wc -l < "$scratch/err")" -eq 1 ] || { cat "$scratch/err"; fail "missing path: want one line on stderr"; }
grep -q '^trainmon: /nonexistent/data: No such file or directory$' "$scratch/err" ||
    { cat "$scratch/err"; fail "missing path: message"; }

# Bad options: exit 2, one line.
for args in "-i 0" "-i abc" "-n -3" "--pid 0" "--pid abc" "--max-size 12Q"; do
    "$tm" watch $args -n 1 > /dev/null 2> "$scratch/err"; rc=$?
    [ $rc -eq 2 ] || fail "watch $args: exit $rc, want 2"
    [ "$(wc -l < "$scratch/err")" -eq 1 ] || fail "watch $args: want one line on stderr"
done

# A pid that does not exist: said once; disks and pressure still measured.
"$tm" watch --pid 999999999 -n 1 -i 0.2 > "$scratch/out" 2> "$scratch/err"; rc=$?
cat "$scratch/err"
[ $rc -eq 0 ] || fail "missing pid: exit $rc, want 0 (disks are still measured)"
grep -q 'pid 999999999' "$scratch/err" || fail "missing pid: no message naming it"

# A process that exits mid-run: said once, watch goes on to its count.
sleep 0.5 & victim=$!
"$tm" watch --pid $victim --json -n 6 -i 0.2 > "$scratch/out" 2> "$scratch/err"; rc=$?
[ $rc -eq 0 ] || fail "exiting pid: exit $rc"
[ "$(wc -l < "$scratch/out")" -eq 6 ] || fail "exiting pid: want 6 intervals, got $(wc -l < "$scratch/out")"
[ "$(grep -c "pid $victim exited" "$scratch/err")" -eq 1 ] || { cat "$scratch/err"; fail "exiting pid: want one 'exited' line"; }
/usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert rows[0]["process_tree"]["alive"] is True, rows[0]
assert rows[-1]["process_tree"]["alive"] is False, rows[-1]
' "$scratch/out" || fail "exiting pid: JSON does not show alive true then false"

# A path with no block device behind it (tmpfs): a warning that says what
# is still measured, and watch runs.
"$tm" watch /dev/shm -n 1 -i 0.2 > "$scratch/out" 2> "$scratch/err"; rc=$?
cat "$scratch/err"
[ $rc -eq 0 ] || fail "tmpfs: exit $rc"
grep -q 'tmpfs' "$scratch/err" || fail "tmpfs: the warning does not name tmpfs"

# The recording disk fills: said once, printing goes on, what was recorded
# reads back.
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$scratch/full"
    mount -t tmpfs -o size=1m tmpfs "$scratch/full" || fail "cannot mount a small tmpfs"
    # Room for the header and one block (68 KiB) but not for a second.
    head -c 900k /dev/zero > "$scratch/full/filler"
    "$tm" watch --json -i 0.01 -n 400 -o "$scratch/full/run" > "$scratch/out" 2> "$scratch/err"; rc=$?
    cat "$scratch/err"
    [ $rc -eq 0 ] || fail "disk full: exit $rc"
    [ "$(wc -l < "$scratch/out")" -eq 400 ] || fail "disk full: printing stopped"
    [ "$(grep -c 'No space left on device' "$scratch/err")" -eq 1 ] || fail "disk full: want exactly one message"
    "$tm" dump "$scratch/full/run/system.tmr" > "$scratch/dump" || fail "disk full: dump of the partial recording failed"
    grep -q 'disk.reads_per_second' "$scratch/dump" || fail "disk full: nothing recorded before the disk filled"
else
    echo "disk-full case skipped: needs root to mount a small tmpfs"
fi
echo ok
