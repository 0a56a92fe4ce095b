#!/usr/bin/env bash
# Runs the pytest suite of the Python package (tests/python) once per torch
# of the test matrix and records the summed counts:
#   torch 1.x: $PYTHON (Debian's /usr/bin/python3 with python3-torch 1.13)
#   torch 2.x: $VENV_PY (the virtualenv `make deps` makes, torch 2.13 CPU)
# Each half prints its own closing line.  A half whose interpreter or torch
# is missing is skipped with one line saying why (make deps makes both).
# The extension is built in place for each interpreter that lacks one of
# its own ABI (python/trainmon/_trainmon<EXT_SUFFIX>).  The halves run one
# after the other; PY_JOBS=2 runs them at once (a quicker local run: some
# tests compare each batch's recorded wait with the job's own timing of it,
# and with both halves' jobs and DataLoader workers on two cores a
# preemption between the two was seen to fail one); the output is printed
# half by half.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
export BUILD=${BUILD:-build}
tp=0 tf=0 ts=0 rc_all=0

run_half() { # name interpreter
    local name=$1 py=$2
    case $py in /*) ;; */*) py="$root/$py" ;; esac # relative to the tree, as make passes it
    if [ ! -x "$py" ] && ! command -v "$py" >/dev/null 2>&1; then
        echo "python ($name): skipped: no interpreter $py (make deps makes it)"
        ts=$((ts + 1)); return 0
    fi
    local tv
    if ! tv=$("$py" -c 'import torch, pytest; print(torch.__version__)' 2>/dev/null); then
        echo "python ($name): skipped: $py has no torch or pytest (make deps installs them)"
        ts=$((ts + 1)); return 0
    fi
    local suffix
    suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
    if [ ! -e "$root/python/trainmon/_trainmon$suffix" ]; then
        (cd "$root" && env -u CC -u CFLAGS -u LDFLAGS -u LDLIBS "$py" setup.py -q build_ext \
            --inplace --build-temp "$BUILD/python-ext-$name" --build-lib "$BUILD/python-lib-$name") \
            >"$BUILD/python-ext-$name.log" 2>&1 ||
            { echo "python ($name): FAILED to build the extension for $py:"; tail -n 20 "$BUILD/python-ext-$name.log"; tf=$((tf + 1)); rc_all=1; return 0; }
    fi
    local out rc
    out=$(cd "$here/python" && PYTHONPATH="$root/python" "$py" -m pytest -q -p no:cacheprovider 2>&1); rc=$?
    printf '%s\n' "$out"
    local last p f s
    last=$(printf '%s\n' "$out" | grep -E '(passed|failed|skipped|error)' | tail -n1)
    p=$(printf '%s' "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); p=${p:-0}
    f=$(printf '%s' "$last" | grep -oE '[0-9]+ (failed|errors?)' | awk '{s+=$1} END {print s+0}')
    s=$(printf '%s' "$last" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+'); s=${s:-0}
    # pytest exits 5 when it collected nothing: that is a failure here.
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; fi
    [ $rc -eq 0 ] || rc_all=1
    echo "python ($name, torch $tv): $p passed, $f failed, $s skipped"
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s))
}

# half NAME INTERPRETER: run_half with its output in $out/NAME.txt and its
# counts in $out/NAME.counts ("passed failed skipped rc")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
half() {
    run_half "$1" "$2" > "$out/$1.txt" 2>&1
    echo "$tp $tf $ts $rc_all" > "$out/$1.counts"
}
jobs=${PY_JOBS:-1}
half torch1 "${PYTHON:-/usr/bin/python3}" &
[ "$jobs" -ge 2 ] 2>/dev/null || wait
if [ -n "${SKIP_TORCH2:-}" ]; then
    echo "python (torch2): skipped: ${SKIP_TORCH2}" > "$out/torch2.txt"
    echo "0 0 1 0" > "$out/torch2.counts"
else
    half torch2 "${VENV_PY:-$root/.venv/bin/python}" &
fi
wait
for name in torch1 torch2; do
    cat "$out/$name.txt"
    read -r p f s r < "$out/$name.counts" 2>/dev/null || { p=0 f=1 s=0 r=1; echo "python ($name): no result"; }
    tp=$((tp + p)); tf=$((tf + f)); ts=$((ts + s))
    [ "$r" -eq 0 ] || rc_all=1
done
mkdir -p "$BUILD"
echo "$tp $tf $ts" > "$BUILD/.python-counts"
echo "python: $tp passed, $tf failed, $ts skipped"
[ $rc_all -eq 0 ]
