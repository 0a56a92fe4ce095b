#!/usr/bin/env bash
# trainmon run, scenario (a), storage-bound input: a real torch CPU training
# job whose dataset (image-like files) sits on a loop device with ext4,
# page cache dropped, and the job (trainmon, the training process and its
# DataLoader workers) in a blkio cgroup that throttles reads from that
# device to 4 MB/s.  The report must say input.disk_bound, not
# input.cpu_bound.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/slowdisk.sh"
. "$here/../lib/scenario.sh"
slowdisk_require
scen_require

slowdisk_setup 128 4194304
# 1000 files of 48 KiB (47 MB): 120 steps of 8 items read each file once,
# about 12 s at 4 MB/s.  Written outside the throttle, then evicted.
"$PY" "$TRAIN" --data "$SD_MNT/ds" --generate 1000 > /dev/null || scen_fail "generating the dataset"
slowdisk_drop_caches

run=$SD_DIR/run
SCEN_WRAP=slowdisk_run scen_run "$run" -i 0.5 -d "$SD_MNT/ds" -- \
    "$PY" "$TRAIN" --data "$SD_MNT/ds" --workers 2 --batch-size 8 --steps 120 --model-size 64
grep -q "trainmon: data $SD_MNT/ds: .*$SD_DEV" "$run.out" ||
    { cat "$run.out"; scen_fail "trainmon did not say it watches $SD_DEV for the data"; }
scen_show "$run"
scen_expect "$run" input.disk_bound
scen_expect_cost "$run" input.disk_bound
scen_expect_not "$run" input.cpu_bound
scen_expect_not "$run" input.ok
echo "PASS: storage-bound job -> input.disk_bound"
