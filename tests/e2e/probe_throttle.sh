#!/usr/bin/env bash
# trainmon probe on a real slow disk: a loop device with ext4, a dataset of
# 64 KiB files, cold cache, and a cgroup v1 blkio read throttle that the
# probe runs under.  The probe's ceiling (its best test) must be the
# throttle's rate within 10%, at two rates (16 MiB/s, then 6 MiB/s: it
# tracks the limit, it does not print a constant), and far above it with no
# throttle; it must leave the dataset out of the page cache (O_DIRECT), and
# refuse what it cannot measure with one line and a non-zero exit; under
# `run --probe`, storage that does not answer is given up on and the job
# starts.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/slowdisk.sh"
PY=${PY:-/usr/bin/python3}
fail() { echo "FAIL: $*"; exit 1; }

# Refusals need no root: a missing path (usage, 2), memory (1).
err=$("$TRAINMON" probe /nonexistent-trainmon-probe 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$err" = "trainmon: /nonexistent-trainmon-probe: No such file or directory" ] ||
    fail "missing path: exit $rc: $err"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    shm=$(mktemp -d /dev/shm/trainmon-probe.XXXXXX)
    head -c 65536 /dev/urandom > "$shm/x"
    err=$("$TRAINMON" probe "$shm" 2>&1); rc=$?
    rm -rf "$shm"
    [ $rc -eq 1 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] &&
        printf '%s' "$err" | grep -q 'memory.*no storage' || fail "tmpfs: exit $rc: $err"
fi
err=$("$TRAINMON" probe -t nonsense /tmp 2>&1); rc=$?
[ $rc -eq 2 ] || fail "-t nonsense: exit $rc: $err"
# run --probe needs a data path, and a time that parses; neither starts the job.
err=$("$TRAINMON" run --probe -- touch /nonexistent-trainmon-probe-ran 2>&1); rc=$?
[ $rc -eq 2 ] && [ "$err" = "trainmon: --probe: needs a data path to probe (-d PATH)" ] ||
    fail "run --probe without -d: exit $rc: $err"
err=$("$TRAINMON" run --probe=soon -d /tmp -- true 2>&1); rc=$?
[ $rc -eq 2 ] || fail "run --probe=soon: exit $rc: $err"

SD_TAG=probe
slowdisk_require
slowdisk_setup 160 $((16 * 1024 * 1024))
ds=$SD_MNT/ds
mkdir -p "$ds"
for i in $(seq 1 400); do head -c 65536 /dev/urandom > "$ds/$i.bin"; done # 25 MiB
slowdisk_drop_caches

# probe OUT LIMIT_BPS: runs the probe (in the throttled cgroup when LIMIT
# is not 0) and checks its ceiling against LIMIT.
probe() {
    local out=$1 limit=$2
    if [ "$limit" -gt 0 ]; then
        slowdisk_run "$TRAINMON" probe -t "${PROBE_T:-4}" --json "$ds" > "$out" 2> "$out.err"
    else
        "$TRAINMON" probe -t "${PROBE_T:-4}" --json "$ds" > "$out" 2> "$out.err"
    fi || { cat "$out.err"; fail "trainmon probe exited $?"; }
    "$PY" - "$out" "$limit" "$SD_DEV" <<'EOF' || fail "probe at limit $limit: $(cat "$out")"
import json, sys
doc = json.load(open(sys.argv[1])); limit = int(sys.argv[2]); dev = sys.argv[3]
p = doc["probes"][0]
assert p["device"] == dev, ("device", p["device"], dev)
assert p["files"] == 400 and p["file_size_median_bytes"] == 65536, p
tests = p["tests"]
assert [(t["pattern"], t["queue_depth"]) for t in tests] == [
    ("sequential", 1), ("sequential", 4), ("random", 1), ("random", 4), ("random", 16)], tests
assert all(t["block_bytes"] == 65536 for t in tests if t["pattern"] == "random"), tests
best = max(t["bytes_per_second"] for t in tests)
rates = " ".join("%s/%d %.2f MB/s" % (t["pattern"][:4], t["queue_depth"], t["bytes_per_second"] / 1e6)
                 for t in tests)
print("limit %.2f MB/s: best %.2f MB/s (%s) in %.1f s" % (limit / 1e6, best / 1e6, rates, p["seconds"]))
if limit:
    assert abs(best - limit) <= 0.10 * limit, "best %.0f not within 10%% of %d" % (best, limit)
    # every test, whatever its pattern, meets the throttle and no more
    assert all(abs(t["bytes_per_second"] - limit) <= 0.10 * limit for t in tests), "a test off the limit"
else:
    assert best > 3 * 16 * 1024 * 1024, "unthrottled best %.0f is no faster" % best
assert p["seconds"] < 6, p["seconds"]
EOF
}

probe "$SD_DIR/p16.json" $((16 * 1024 * 1024))
# O_DIRECT: the files it read are not in the page cache afterwards.
res=$(fincore -b -n -o RES "$ds"/*.bin | awk '{s += $1} END {print s + 0}')
[ "$res" -eq 0 ] || fail "the probe left $res bytes of the dataset in the page cache"

echo "$SD_MAJMIN $((6 * 1024 * 1024))" > "$SD_CG/blkio.throttle.read_bps_device"
probe "$SD_DIR/p6.json" $((6 * 1024 * 1024))
probe "$SD_DIR/pfree.json" 0

# Storage that does not answer: a throttle of 4 KiB/s makes each O_DIRECT
# read of the probe take minutes, as a hung mount would.  `run --probe=1`
# must give up on it after 20 s + 2 x 1 s, say so in one line, write no
# probe.json and start the job anyway.  (The dataset's metadata is cached
# first: the walk's stat calls are not what is measured here.)
find "$ds" -type f -exec stat -c %s {} + > /dev/null
echo "$SD_MAJMIN 4096" > "$SD_CG/blkio.throttle.read_bps_device"
start=$(date +%s)
slowdisk_run "$TRAINMON" run --no-python -o "$SD_DIR/hung" --probe=1 -d "$ds" -- \
    touch "$SD_DIR/job-ran" > "$SD_DIR/hung.out" 2>&1
rc=$?
took=$(($(date +%s) - start))
# release the abandoned probe's reads (a SIGKILLed reader dies when its read
# returns), so that the cleanup can unmount
echo "$SD_MAJMIN 0" > "$SD_CG/blkio.throttle.read_bps_device"
[ $rc -eq 0 ] || { cat "$SD_DIR/hung.out"; fail "run --probe on hung storage exited $rc"; }
[ -e "$SD_DIR/job-ran" ] || fail "the job did not run after the probe was abandoned"
[ "$took" -lt 60 ] || fail "run --probe on hung storage took $took s"
grep -q "no answer from the storage within 22 s.*probe abandoned" "$SD_DIR/hung.out" ||
    { cat "$SD_DIR/hung.out"; fail "no line saying the probe was abandoned"; }
[ ! -e "$SD_DIR/hung/probe.json" ] || fail "a probe.json for an abandoned probe"
echo "hung storage: the probe was abandoned after $took s and the job ran"
echo "PASS: the probe finds a blkio throttle's rate within 10%, leaves the page cache alone and gives up on storage that does not answer"
