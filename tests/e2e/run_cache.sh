#!/usr/bin/env bash
# trainmon run and the page cache (data.page_cache, data.small_files): real
# torch CPU training jobs whose dataset sits on a loop device with ext4, the
# job in a blkio cgroup that throttles reads from that device.
#
#   1. The storage-bound job of run_storage_bound.sh (1000 files of 48 KiB,
#      reads throttled to 4 MB/s), run twice without dropping caches.  The
#      first run reads every file from the disk: input.disk_bound, and
#      data.page_cache says epoch 1 read from disk, all cached after.  The
#      second finds the dataset cached at its start: data.page_cache says
#      so, and the verdict is not input.disk_bound.
#   2. A dataset of 2000 files of 4 KiB under a request-rate throttle (150
#      reads/s, a cloud volume's IOPS limit): the disk serves small requests
#      at its rate limit and data.small_files advises packing with a gain
#      (not for the 48 KiB files of 1: under 4x, not worth a rewrite).
#
# The page cache is emptied only for this loop device's filesystem (unmount
# and mount again), never system-wide.
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (a scenario of the plain build; the page-cache walk and its rules run under ASan in test_dscache, test_rules_cache and run_storage_bound)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/slowdisk.sh"
. "$here/../lib/scenario.sh"
slowdisk_require
scen_require

SD_TAG=cache slowdisk_setup 192 4194304

# Evicts the filesystem's page cache (and its inodes): unmount, mount again.
evict() {
    sync
    umount "$SD_MNT" && mount "/dev/$SD_DEV" "$SD_MNT" || scen_fail "remounting $SD_MNT"
}

# Prints the evidence value KEY of finding ID in RUN.
ev() {
    scen_evidence "$1" "$2" | "$PY" -c 'import json,sys
v = json.load(sys.stdin).get(sys.argv[1]); print("null" if v is None else v)' "$3"
}

# Fails unless the Python expression EXPR (over x) holds for the value.
check() {
    local run=$1 id=$2 key=$3 expr=$4 v
    v=$(ev "$run" "$id" "$key")
    "$PY" -c "import sys; x = $v; sys.exit(0 if ($expr) else 1)" 2>/dev/null ||
        { scen_show "$run"; scen_fail "$id $key = $v, expected $expr"; }
    echo "  $id $key = $v ($expr)"
}

"$PY" "$TRAIN" --data "$SD_MNT/ds" --generate 1000 > /dev/null || scen_fail "generating ds"
"$PY" "$TRAIN" --data "$SD_MNT/small" --generate 2000 --item-bytes 4096 > /dev/null ||
    scen_fail "generating small"
evict

# --- 1. the same storage-bound job twice, caches kept
job=("$PY" "$TRAIN" --data "$SD_MNT/ds" --workers 2 --batch-size 8 --steps 125 --model-size 64)
cold=$SD_DIR/cold warm=$SD_DIR/warm
SCEN_WRAP=slowdisk_run scen_run "$cold" -i 0.5 -d "$SD_MNT/ds" -- "${job[@]}"
scen_show "$cold"
scen_expect "$cold" input.disk_bound
scen_expect "$cold" data.page_cache
scen_expect_not "$cold" data.small_files # 48 KiB reads: packing would gain under 4x
check "$cold" data.page_cache dataset_files 'x == 1000'
check "$cold" data.page_cache dataset_cached_fraction_start 'x < 0.2'
check "$cold" data.page_cache dataset_cached_fraction_end 'x >= 0.95'
check "$cold" data.page_cache dataset_memory_ratio '0 < x < 0.1'
check "$cold" input.disk_bound dataset_cached_fraction_end 'x >= 0.95'
scen_report "$cold"
grep -q '"epoch 1 read from disk, [0-9]*% cached after: later epochs will not be disk-bound' \
    "$cold/report.json" || scen_fail "the cold run's data.page_cache title"

SCEN_WRAP=slowdisk_run scen_run "$warm" -i 0.5 -d "$SD_MNT/ds" -- "${job[@]}"
scen_show "$warm"
scen_expect "$warm" data.page_cache
scen_expect_not "$warm" input.disk_bound
scen_expect_not "$warm" data.small_files
check "$warm" data.page_cache dataset_cached_fraction_start 'x >= 0.95'
scen_report "$warm"
grep -q '"dataset cached: [0-9]*% of the' "$warm/report.json" ||
    scen_fail "the warm run's data.page_cache title"
echo "PASS: the same job twice: disk-bound and cached after, then cached and not disk-bound"

# --- 2. many 4 KiB files under a request-rate limit
echo "$SD_MAJMIN 0" > "$SD_CG/blkio.throttle.read_bps_device"
echo "$SD_MAJMIN 150" > "$SD_CG/blkio.throttle.read_iops_device"
evict
small=$SD_DIR/small
SCEN_WRAP=slowdisk_run scen_run "$small" -i 0.5 -d "$SD_MNT/small" -- \
    "$PY" "$TRAIN" --data "$SD_MNT/small" --workers 2 --batch-size 8 --steps 150 --model-size 64
scen_show "$small"
scen_expect "$small" data.small_files
check "$small" data.small_files read_request_bytes 'x <= 32 * 1024'
check "$small" data.small_files reads_per_second 'x >= 50'
check "$small" data.small_files mean_file_bytes 'x == 4096'
check "$small" data.small_files expected_read_gain 'x >= 2'
check "$small" data.small_files expected_speedup 'x > 1'
scen_report "$small"
"$PY" -c '
import json, sys
r = json.load(open(sys.argv[1]))
adv = [f["advice"] for f in r["findings"] if f["id"] == "data.small_files"][0]
sys.exit(0 if "WebDataset" in adv and "shard" in adv else 1)' "$small/report.json" ||
    scen_fail "data.small_files gives no packing advice"
echo "PASS: many 4 KiB files -> data.small_files with the packing gain"
