#!/usr/bin/env bash
# A -d path on a hung mount never keeps the job from starting: a FUSE
# filesystem that no daemon answers (tests/helpers/hangfs: what an NFS
# mount whose server is gone, or a dead sshfs, looks like; its stat()
# blocks in the kernel).  `trainmon run -d MNT -- JOB` waits for it at most
# TM_BLKDEV_RESOLVE_WAIT_S (10 s, in a child process; 2 s for a second path
# once one was hung), says so in one line,
# starts the job, and the report names the path (data.hung_mount, high: the
# job made no step).  `trainmon watch MNT`, which has nothing else to
# measure, ends with exit 1 and the same line instead of hanging.  Root and
# /dev/fuse; skipped otherwise.
set -u
tm=$TRAINMON
root=${TM_ROOT:-$(pwd)}
hangfs="$root/${BUILD:-build}/tests/helpers/hangfs"
[ -x "$hangfs" ] || { echo "no $hangfs (make $BUILD/tests/helpers/hangfs)"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "skipped: mounting a FUSE filesystem needs root"; exit 77; }
[ -c /dev/fuse ] || { echo "skipped: no /dev/fuse on this machine"; exit 77; }
py=${PYTHON:-/usr/bin/python3}
scratch=$(mktemp -d /tmp/trainmon-hung.XXXXXX)
mnt=$scratch/mnt
mkdir "$mnt"
hpid=
cleanup() {
    # closing hangfs's stdin aborts the connection: what blocks on the
    # mount fails with ENOTCONN and goes on; then the mount is detached
    exec 3>&- 2>/dev/null
    [ -n "$hpid" ] && { kill "$hpid" 2>/dev/null; wait "$hpid" 2>/dev/null; }
    grep -q " $mnt " /proc/mounts && umount -l "$mnt" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkfifo "$scratch/ctl"
"$hangfs" "$mnt" < "$scratch/ctl" > "$scratch/hangfs.out" 2>&1 &
hpid=$!
exec 3> "$scratch/ctl"
for _ in $(seq 50); do grep -q ready "$scratch/hangfs.out" && break; sleep 0.1; done
if ! grep -q ready "$scratch/hangfs.out"; then
    wait "$hpid"; rc=$?; hpid=
    [ $rc -eq 77 ] && { echo "skipped: $(cat "$scratch/hangfs.out")"; exit 77; }
    fail "hangfs: $(cat "$scratch/hangfs.out")"
fi
# the mount is hung: a stat of it blocks (killed after 2 s)
timeout -s KILL 2 stat "$mnt" > /dev/null 2>&1 && fail "stat $mnt answered: not a hung mount"

t0=$(date +%s)
timeout -s KILL 60 "$tm" run -d "$mnt" -d "$mnt/train" -o "$scratch/run" -- \
    "$py" -c 'print("the job ran")' > "$scratch/out" 2> "$scratch/err"
rc=$?
t1=$(date +%s)
cat "$scratch/err"
[ $rc -ne 137 ] || fail "trainmon run still blocked after 60 s"
[ $rc -eq 0 ] || fail "trainmon run exited $rc"
grep -q "the job ran" "$scratch/out" || fail "the job did not run"
grep -q "^trainmon: warning: $mnt: no answer from its filesystem within 10 s (a hung mount" \
    "$scratch/err" || fail "no line saying the path did not answer"
# the second path on the hung mount gets 2 s, not another 10
grep -q "^trainmon: warning: $mnt/train: no answer from its filesystem within 2 s" \
    "$scratch/err" || fail "no line for the second path, or not the shorter wait"
[ $((t1 - t0)) -le 30 ] || fail "the job started after $((t1 - t0)) s"

"$tm" report "$scratch/run" --json > "$scratch/report.json" || fail "report failed"
"$py" - "$scratch/report.json" "$mnt" <<'PY' || fail "report"
import json, sys
rep, mnt = json.load(open(sys.argv[1])), sys.argv[2]
f = [x for x in rep["findings"] if x["id"] == "data.hung_mount"]
assert len(f) == 1, [x["id"] for x in rep["findings"]]
f = f[0]
assert f["severity"] == "high", f
assert f["evidence"]["path"] == mnt and f["evidence"]["waited_s"] == 10, f
assert mnt + " (and 1 more)" in f["title"] and "no step" in f["title"], f["title"]
assert f["evidence"]["paths"] == 2, f
assert rep["findings"][0]["id"] == "data.hung_mount", [x["id"] for x in rep["findings"]]
print("report:", f["title"])
PY

t0=$(date +%s)
timeout -s KILL 60 "$tm" watch "$mnt" -n 1 -i 0.5 > /dev/null 2> "$scratch/werr"
rc=$?
t1=$(date +%s)
[ $rc -ne 137 ] || fail "trainmon watch still blocked after 60 s"
[ $rc -ne 0 ] || fail "trainmon watch of a hung mount alone exited 0"
grep -q "$mnt: no answer from its filesystem within 10 s" "$scratch/werr" ||
    fail "watch: $(cat "$scratch/werr")"
echo "run_hung_mount: ok (job started after the 10 s wait; watch ended with $rc in $((t1 - t0)) s)"
