#!/usr/bin/env bash
# Runs the pytest suite of the Python package (tests/python) on $PYTHON
# (Debian's /usr/bin/python3, which has torch) and records its counts.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
py=${PYTHON:-/usr/bin/python3}
export BUILD=${BUILD:-build}
out=$(cd "$here/python" && PYTHONPATH="$root/python" "$py" -m pytest -q -p no:cacheprovider 2>&1); rc=$?
printf '%s\n' "$out"
last=$(printf '%s\n' "$out" | grep -E '(passed|failed|skipped|error)' | tail -n1)
p=$(printf '%s' "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
f=$(printf '%s' "$last" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
s=$(printf '%s' "$last" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
# pytest exits 5 when it collected nothing: that is a failure here.
if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
mkdir -p "$BUILD"
echo "$p $f $s" > "$BUILD/.python-counts"
echo "python: $p passed, $f failed, $s skipped"
[ $rc -eq 0 ]
