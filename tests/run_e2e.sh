#!/usr/bin/env bash
# Runs each tests/e2e/*.sh.  Exit 0 = pass, 77 = skipped (the script says
# why), anything else = fail.  E2E_ONLY limits the set: glob patterns
# separated by '|' (E2E_ONLY='watch_*|run_exit_signals').
#
# A script with the line "# e2e: parallel" times nothing and shares nothing
# with the others (its own scratch directory, its own copy of the sources):
# those run first, E2E_JOBS at a time (default: the CPUs online), then the
# others one at a time, alone on the machine, as their timings need.  Every
# result is printed in name order within its group.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export BUILD=${BUILD:-build}
export TRAINMON="$root/$BUILD/trainmon"
export TM_ROOT="$root"
jobs=${E2E_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# one SCRIPT: runs it, leaves "RC SECONDS" in $out/NAME.rc and its output in $out/NAME.out
one() {
    local t=$1 name start rc
    name=$(basename "$t" .sh)
    start=$(date +%s)
    (cd "$root" && timeout 600 bash "$t") > "$out/$name.out" 2>&1
    rc=$?
    echo "$rc $(($(date +%s) - start))" > "$out/$name.rc"
}

wanted() {
    local name=$1 p
    [ -n "${E2E_ONLY:-}" ] || return 0
    IFS='|' read -ra pats <<< "$E2E_ONLY"
    for p in "${pats[@]}"; do
        # shellcheck disable=SC2053 # a glob on purpose
        [[ $name == $p ]] && return 0
    done
    return 1
}

par=() ser=()
for t in "$here"/e2e/*.sh; do
    [ -e "$t" ] || continue
    wanted "$(basename "$t" .sh)" || continue
    if grep -qx '# e2e: parallel' "$t"; then par+=("$t"); else ser+=("$t"); fi
done

passed=0 failed=0 skipped=0
report() { # SCRIPT: the line (and on failure the tail) of a finished script
    local name rc secs
    name=$(basename "$1" .sh)
    read -r rc secs < "$out/$name.rc"
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS  $name (${secs}s)"
    elif [ "$rc" -eq 77 ]; then
        skipped=$((skipped + 1)); echo "SKIP  $name: $(tail -n1 "$out/$name.out")"
    else
        failed=$((failed + 1)); echo "FAIL  $name (exit $rc, ${secs}s)"
        tail -n 40 "$out/$name.out" | sed 's/^/    /'
    fi
}

running=0
for t in "${par[@]}"; do
    if [ $running -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    one "$t" &
    running=$((running + 1))
done
wait
for t in "${par[@]}"; do report "$t"; done
for t in "${ser[@]}"; do
    one "$t"
    report "$t"
done

mkdir -p "$BUILD"
echo "$passed $failed $skipped" > "$BUILD/.e2e-counts"
echo "e2e: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
