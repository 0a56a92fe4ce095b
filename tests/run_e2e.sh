#!/usr/bin/env bash
# Runs each tests/e2e/*.sh.  Exit 0 = pass, 77 = skipped (the script says
# why), anything else = fail.  E2E_ONLY limits the set: glob patterns
# separated by '|' (E2E_ONLY='watch_*|run_exit_signals').
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export BUILD=${BUILD:-build}
export TRAINMON="$root/$BUILD/trainmon"
export TM_ROOT="$root"
passed=0 failed=0 skipped=0
for t in "$here"/e2e/*.sh; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .sh)
    if [ -n "${E2E_ONLY:-}" ]; then
        want=0
        IFS='|' read -ra pats <<< "$E2E_ONLY"
        for p in "${pats[@]}"; do
            # shellcheck disable=SC2053 # a glob on purpose
            [[ $name == $p ]] && want=1
        done
        [ $want = 1 ] || continue
    fi
    start=$(date +%s)
    out=$(cd "$root" && timeout 600 bash "$t" 2>&1); rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS  $name (${secs}s)"
    elif [ $rc -eq 77 ]; then
        skipped=$((skipped + 1)); echo "SKIP  $name: $(printf '%s\n' "$out" | tail -n1)"
    else
        failed=$((failed + 1)); echo "FAIL  $name (exit $rc, ${secs}s)"
        printf '%s\n' "$out" | tail -n 40 | sed 's/^/    /'
    fi
done
mkdir -p "$BUILD"
echo "$passed $failed $skipped" > "$BUILD/.e2e-counts"
echo "e2e: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
