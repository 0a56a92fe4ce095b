#!/usr/bin/env bash
# Runs each libFuzzer target given for FUZZ_SECONDS on a scratch copy of its
# committed seed corpus (tests/fuzz/corpus/<target>).  Fails on the first
# crash, leak or sanitizer report.
set -u
secs=${FUZZ_SECONDS:-15}
here=$(cd "$(dirname "$0")" && pwd)
failed=0 passed=0
for bin in "$@"; do
    name=$(basename "$bin")
    work=$(mktemp -d)
    [ -d "$here/corpus/$name" ] && cp -r "$here/corpus/$name/." "$work/"
    if "$bin" -max_total_time="$secs" -rss_limit_mb=1024 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$work/" "$work" > "$work.log" 2>&1; then
        passed=$((passed + 1)); echo "PASS  fuzz $name (${secs}s, $(grep -o 'stat::number_of_executed_units: [0-9]*' "$work.log" | awk '{print $2}') runs)"
        grep -h '#[0-9]*.*DONE' "$work.log" | tail -n1 | sed 's/^/      /'
    else
        failed=$((failed + 1)); echo "FAIL  fuzz $name"; tail -n 40 "$work.log" | sed 's/^/    /'
        ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* 2>/dev/null | sed 's/^/    artifact: /'
    fi
    rm -rf "$work" "$work.log"
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
