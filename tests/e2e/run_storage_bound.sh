#!/usr/bin/env bash
# trainmon run, scenario (a), storage-bound input: a real torch CPU training
# job whose dataset (image-like files) sits on a loop device with ext4,
# page cache dropped, and the job (trainmon, the training process and its
# DataLoader workers) in a blkio cgroup that throttles reads from that
# device to 4 MB/s.  The report must say input.disk_bound, not
# input.cpu_bound.  With --probe, trainmon (in the same cgroup) measures
# the throttle before the job: the verdict says the job read at the
# device's ceiling ("the device is the limit").
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
SCEN_WRAP=slowdisk_run scen_run "$run" -i 0.5 -d "$SD_MNT/ds" --probe -- \
    "$PY" "$TRAIN" --data "$SD_MNT/ds" --workers 2 --batch-size 8 --steps 120 --model-size 64
grep -q "trainmon: data $SD_MNT/ds: .*$SD_DEV" "$run.out" ||
    { cat "$run.out"; scen_fail "trainmon did not say it watches $SD_DEV for the data"; }
scen_show "$run"
scen_expect "$run" input.disk_bound
scen_expect_cost "$run" input.disk_bound
scen_expect_not "$run" input.cpu_bound
scen_expect_not "$run" input.ok
# The storage ceiling: the probe found the 4 MiB/s throttle (within 10%),
# and the job's mean read rate is most of it.
"$PY" - "$(scen_evidence "$run" input.disk_bound)" "$SD_DEV" <<'EOF' ||
import json, sys
e = json.loads(sys.argv[1])
print("ceiling: %s, share %.2f of %.2f MB/s" % (e.get("storage_ceiling"), e.get("ceiling_share") or 0,
      (e.get("probe_random_read_bytes_per_second") or 0) / 1e6))
assert e["storage_ceiling"] == "device" and e["probe_disk"] == sys.argv[2], e
assert abs(e["probe_random_read_bytes_per_second"] - 4194304) <= 0.1 * 4194304, e
assert 0.7 <= e["ceiling_share"] <= 1.1, e
EOF
    { scen_show "$run"; scen_fail "the disk verdict does not use the probe's ceiling"; }
"$TRAINMON" report "$run" | grep -q "of what /dev/$SD_DEV delivered for 48 KiB random reads: the device is the limit" ||
    { "$TRAINMON" report "$run"; scen_fail "the report does not say the device is the limit"; }
echo "PASS: storage-bound job -> input.disk_bound, at the probe's ceiling"
