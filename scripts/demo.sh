#!/usr/bin/env bash
# make demo: trainmon watch on the disk behind this repository for a few
# seconds while a real reader and writer generate I/O there.  (When the
# run-and-report work lands, this becomes a whole training run.)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
tm="$root/${BUILD:-build}/trainmon"
scratch=$(mktemp -d "$root/.demo.XXXXXX")
trap 'kill $gen 2>/dev/null; wait 2>/dev/null; rm -rf "$scratch"' EXIT

echo "== trainmon watch $root --pid <I/O generator> -i 1 -n 6"
echo "   (the generator writes 256 MiB with O_DIRECT, then reads it back twice)"
bash -c '
    dd if=/dev/zero of="$0/data" bs=1M count=256 oflag=direct status=none
    dd if="$0/data" of=/dev/null bs=1M iflag=direct status=none
    dd if="$0/data" of=/dev/null bs=256k iflag=direct status=none
    sleep 30' "$scratch" &
gen=$!
"$tm" watch "$root" --pid "$gen" -i 1 -n 6 -o "$scratch/run"
echo
echo "== the same interval as JSON (iostat -x -o JSON keys for disks), one line:"
"$tm" watch "$root" --pid "$gen" --json -i 1 -n 1
echo
echo "== what was recorded (-o $scratch/run): trainmon dump, first lines"
"$tm" dump "$scratch/run/system.tmr" | head -n 12
