#!/usr/bin/env bash
# gpu.util_swing on a real job under `trainmon run`, through the real
# dlopen path of the fake NVML (tests/fakes/fake_nvml.c): the fake GPU's
# utilization alternates 95% / 5% sample by sample (d0.util_seq) while a
# real torch loop waits for a slow DataLoader worker.  The report calls the
# swing out with the data wait that explains it, and keeps GPU wording
# (the run recorded a GPU).  Without the swing (a steady 95%) there is no
# such finding.  The real check is tests/gpu/check.sh on a lent GPU.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lib/scenario.sh"
scen_fake_nvml swing
"$PY" "$TRAIN" --data "$scratch/ds" --generate 200 > /dev/null || scen_fail "generating the dataset"

gpu="d0.name=NVIDIA H200;d0.uuid=GPU-swing;d0.mem=150323855360,1073741824,149250113536,0"
job=("$PY" "$TRAIN" --data "$scratch/ds" --workers 1 --batch-size 8 --steps 40 --item-sleep-ms 15)

FAKE_NVML="$gpu;d0.util_seq=95,5" scen_run "$scratch/swing" -i 0.25 -- "${job[@]}"
scen_show "$scratch/swing"
scen_expect "$scratch/swing" gpu.util_swing
scen_report "$scratch/swing"
"$PY" - "$scratch/swing/report.json" <<'PY' || scen_fail "gpu.util_swing evidence"
import json, sys
r = json.load(open(sys.argv[1]))
f = [f for f in r["findings"] if f["id"] == "gpu.util_swing"][0]
ev = f["evidence"]
print(f["title"]); print(f["advice"])
assert f["severity"] == "medium", f["severity"]
assert 0.3 <= ev["busy_sample_share"] <= 0.7 and 0.3 <= ev["idle_sample_share"] <= 0.7, ev
assert ev["data_wait_per_step_s"] > 0 and "waits" in f["title"] and "for data" in f["title"], f
assert "the idle samples are the data wait" in f["advice"], f["advice"]
assert any(g["id"].startswith("input.") and g["id"] != "input.ok" for g in r["findings"])
PY
FAKE_NVML="$gpu;d0.util=95,40" scen_run "$scratch/steady" -i 0.25 -- "${job[@]}"
scen_expect_not "$scratch/steady" gpu.util_swing
echo "PASS: a swinging GPU behind a waiting loop -> gpu.util_swing with the data wait"
