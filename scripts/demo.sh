#!/usr/bin/env bash
# make demo: a real small training job under `trainmon run`.  A generated
# image-like dataset (2,000 files of 64 KiB) is read through a torch
# DataLoader with 2 worker processes that do some CPU work per image,
# feeding a small model on the CPU, for about 20-30 s; trainmon records the
# disk behind the dataset, the process tree, pressure and the Python
# process from the inside, then prints its report.  The dataset is removed
# afterwards; the run directory is kept (its path is printed).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tm=${TRAINMON:-$root/${BUILD:-build}/trainmon}
py=/usr/bin/python3   # Debian's torch (the python3 first on PATH may be another build)
cd "$root"
"$py" -c 'import torch, numpy' 2>/dev/null ||
    { echo "demo: torch is not importable by $py (make deps)"; exit 1; }
scratch=$(mktemp -d "$root/.demo.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

echo "== generating the dataset: 2000 image-like files of 64 KiB in $scratch/data"
"$py" tests/e2e/train.py --data "$scratch/data" --generate 2000 --item-bytes 65536
echo
echo "== trainmon run -d $scratch/data -- $py tests/e2e/train.py --workers 2 ..."
echo "   (each image costs ~12 ms of CPU in a worker; the model is small)"
echo
set +e
"$tm" run -d "$scratch/data" -- "$py" tests/e2e/train.py --data "$scratch/data" \
    --workers 2 --batch-size 16 --steps 120 --item-cost-ms 12 --model-size 256 \
    2> >(tee "$scratch/err" >&2)
rc=$?
set -e
sleep 0.2  # let tee finish
run=$(sed -n 's/^trainmon: recording into //p' "$scratch/err")
echo
echo "== the job exited with $rc; the run directory is kept: $run"
echo "   trainmon report $run --json    # the same report as JSON"
echo "   trainmon dump $run/system.tmr  # the raw recording"
