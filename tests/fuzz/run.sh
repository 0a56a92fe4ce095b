#!/usr/bin/env bash
# Runs each libFuzzer target given for FUZZ_SECONDS on a scratch copy of its
# committed seed corpus (tests/fuzz/corpus/<target>), FUZZ_JOBS targets at a
# time (default: the CPUs online; a fuzzer is one process on one core and
# nothing here is timed, so the targets share the machine without changing
# what each one runs).  Prints each target's result in the order given and
# fails on any crash, leak or sanitizer report.
set -u
secs=${FUZZ_SECONDS:-15}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# one TARGET INDEX: runs the target, leaves its lines in $out/INDEX.txt and
# "0" or "1" (failed) in $out/INDEX.rc
one() {
    local bin=$1 i=$2 name work
    name=$(basename "$bin")
    work=$(mktemp -d)
    [ -d "$here/corpus/$name" ] && cp -r "$here/corpus/$name/." "$work/"
    if "$bin" -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" > "$work.log" 2>&1; then
        { echo "PASS  fuzz $name (${secs}s, $(grep -o 'stat::number_of_executed_units: [0-9]*' "$work.log" | awk '{print $2}') runs)"
          grep -h '#[0-9]*.*DONE' "$work.log" | tail -n1 | sed 's/^/      /'; } > "$out/$i.txt"
        echo 0 > "$out/$i.rc"
    else
        { echo "FAIL  fuzz $name"; tail -n 40 "$work.log" | sed 's/^/    /'
          ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | sed 's/^/    artifact: /'; } > "$out/$i.txt"
        echo 1 > "$out/$i.rc"
    fi
    rm -rf "$work" "$work.log"
}

bins=("$@")
i=0 running=0
for bin in "${bins[@]}"; do
    if [ $running -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    one "$bin" $i &
    running=$((running + 1))
    i=$((i + 1))
done
wait
failed=0 passed=0
for ((k = 0; k < i; k++)); do
    cat "$out/$k.txt" 2>/dev/null || echo "FAIL  fuzz $(basename "${bins[$k]}"): no result"
    if [ "$(cat "$out/$k.rc" 2>/dev/null)" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
