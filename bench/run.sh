#!/usr/bin/env bash
# make bench: every benchmark, measured in one run, printed as ratios against
# named baselines.  The table is also written to $BUILD/bench.md for
# docs/BENCHMARKS.md.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
exec /usr/bin/python3 "$root/bench/run.py" "$root" "${BUILD:-build}"
