#!/usr/bin/env bash
# The comparison half of tests/gpu/check.sh (the GPU truth check of issue
# #12), run here on the output of a real `trainmon watch --json` through
# the fake NVML (tests/fakes/fake_nvml.c) and nvidia-smi lines written to
# agree or disagree with it: every field that agrees passes, each one that
# disagrees is a MISMATCH row and the exit is 1, and nvidia-smi's "[N/A]"
# fields are printed, not judged.  So a lent GPU's time is not spent on a
# broken comparison.
set -u
fake="$TM_ROOT/$BUILD/tests/fakes/fake_nvml.so"
[ -f "$fake" ] || { echo "FAIL: $fake not built"; exit 1; }
scratch=$(mktemp -d); trap 'rm -rf "$scratch"; [ -z "${job:-}" ] || kill $job 2>/dev/null' EXIT
fail() { echo "FAIL: $*"; exit 1; }
check="$TM_ROOT/tests/gpu/check.sh"
MiB=1048576

sleep 30 & job=$!
alloc=$((8 << 30))
# GPU 0: 140 GiB total, 9 GiB used, 97% busy, 612 W, 1980 MHz, 61 C,
# sw_power_cap (0x4); the job holds 8.5 GiB
export TRAINMON_NVML_LIB=$fake
export FAKE_NVML="d0.name=NVIDIA H200;d0.uuid=GPU-cmp;d0.mem=150323855360,9663676416,140660178944,0;d0.util=97,41;d0.temp=61;d0.power_mw=612000;d0.sm_mhz=1980;d0.throttle=0x4;d0.procs=$job:9126805504"
"$TRAINMON" watch --json --gpu 0 --pid $job -i 0.2 -n 3 > "$scratch/watch.jsonl" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "watch"; }

# compare NAME [APPS]: check.sh --compare on $scratch/smi.NAME (and the
# compute-apps file APPS), its output printed and in $scratch/NAME.out
compare() {
    CMP_PYTHON=/usr/bin/python3 "$check" --compare "$scratch/watch.jsonl" "$scratch/smi.$1" $job $alloc \
        ${2:+"$scratch/$2"} > "$scratch/$1.out" 2>&1
    local rc=$?
    cat "$scratch/$1.out"
    return $rc
}
# judged NAME WHAT RESULT: the row WHAT of $scratch/NAME.out ends in RESULT
judged() {
    grep -F "$2" "$scratch/$1.out" | grep -q " $3 *\$" || fail "$1: '$2' is not $3"
}

# nvidia-smi's view of the same GPU: 143360 MiB total, 9216 MiB used
printf '9216, 143360, 95, 598.31, 1980, 61, 0x0000000000000004\n' > "$scratch/smi.ok"
printf '9216, 143360, 97, 640.02, 1965, 62, 0x0000000000000004\n' >> "$scratch/smi.ok"
printf '%d, 8704\n' $job > "$scratch/apps.ok"
compare ok apps.ok || fail "agreeing readings: exit $?"
grep -q "check: all match" "$scratch/ok.out" || fail "agreeing readings: no 'all match'"
for what in "memory used" "memory total" "utilization" "power (W)" "SM clock" "temperature" \
    "throttle reasons" "vs compute-apps"; do
    judged ok "$what" ok
done

# each field off: power by 200 W, the clock by 500 MHz, 10 C hotter, the
# GPU idle instead of power-capped, and the process at 4 GiB
printf '9216, 143360, 95, 412.00, 1480, 71, 0x0000000000000001\n' > "$scratch/smi.bad"
printf '%d, 4096\n' $job > "$scratch/apps.bad"
compare bad apps.bad
rc=$?
[ $rc -eq 1 ] || fail "disagreeing readings: exit $rc, not 1"
for what in "power (W)" "SM clock" "temperature" "throttle reasons" "vs compute-apps"; do
    judged bad "$what" MISMATCH
done
grep -q "check: 5 mismatch(es)" "$scratch/bad.out" || fail "not exactly the five mismatches"

# a driver that knows only the first three fields (an old one), and no
# compute-apps file: what is missing is printed, not judged
printf '9216, 143360, 96\n' > "$scratch/smi.old"
compare old || fail "three-field readings: exit $?"
judged old "power (W)" info
printf '9216, 143360, 96, [N/A], [N/A], 60, [N/A]\n' > "$scratch/smi.na"
compare na || fail "[N/A] readings: exit $?"
judged na "throttle reasons" info
# the power cap coming and going between nvidia-smi's readings is no
# mismatch; a process whose memory nvidia-smi cannot tell (MIG, vGPU) is
# printed, not judged
printf '9216, 143360, 96, 600, 1980, 61, 0x0000000000000004\n9216, 143360, 96, 600, 1980, 61, 0x0000000000000000\n' \
    > "$scratch/smi.flicker"
printf '%d, [N/A]\n' $job > "$scratch/apps.na"
compare flicker apps.na || fail "flicker: exit $?"
judged flicker "throttle reasons" ok
judged flicker "vs compute-apps" info
echo "check.sh --compare: agreeing readings pass, each disagreeing field is a mismatch, missing fields are printed"
