#!/usr/bin/env bash
# Runs cmocka unit-test binaries and sums their closing lines.
set -u
passed=0 failed=0 broken=0
for t in "$@"; do
    out=$(cd "$(dirname "$0")/.." && "$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
    f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | tail -n1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ $rc -ne 0 ] && [ "${f:-0}" = 0 ]; then
        echo "unit: $t exited $rc without a cmocka failure line (crash?)"
        broken=$((broken + 1))
    fi
done
failed=$((failed + broken))
mkdir -p "${BUILD:-build}"
echo "$passed $failed" > "${BUILD:-build}/.unit-counts"
echo "unit: $passed passed, $failed failed"
[ $failed -eq 0 ]
