#!/usr/bin/env bash
# Which trainmon package a job's interpreter loads under `trainmon run` (the
# rule in src/cli/sitecustomize.py; README "trainmon run"), each case run
# for real:
#   1. the build-tree binary on Debian's torch 1.13 (/usr/bin/python3) and
#      on the torch 2.x venv: the bundled package (python/), loaded before
#      the job's own `import trainmon`, which gets that same module; steps > 0;
#   2. the interpreter's own trainmon of the binary's version (pip install
#      --target of this tree, on the job's PYTHONPATH): that one is used;
#      the same directory named by TRAINMON_PYTHONPATH is the package beside
#      the binary, and is refused (one warning) when others may write it;
#   3. its own trainmon of another version (a package saying
#      __version__ = "0.0.1"): the bundled one is used, the other is never
#      run, and the job's `import trainmon` gets the bundled one;
#   4. an interpreter with no extension built for it (pyenv's 3.12): the job
#      runs unchanged (exit 0, its output), one line on stderr for the job
#      and its child naming the interpreter and the pip fix, an
#      agent-<pid>.json per process, and `report --json` has the high
#      run.agent_not_loaded with the reason; with its own trainmon of
#      another version, the job's `import trainmon` still gets its own;
#   5. `make install DESTDIR=... PREFIX=/usr/local`: the installed binary
#      loads PREFIX/share/trainmon/python and records steps > 0.
# e2e: parallel
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (which trainmon package a job's interpreter loads is the plain build's question; the binary's side of an agent run is under ASan in real_loops)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=${TM_ROOT:-$(cd "$here/../.." && pwd)}
BUILD=${BUILD:-build}
TRAINMON=${TRAINMON:-$root/$BUILD/trainmon}
SYS_PY=/usr/bin/python3
[ -x "$TRAINMON" ] || { echo "skipped: $TRAINMON not built"; exit 77; }
"$SYS_PY" -c 'import torch' 2> /dev/null || { echo "skipped: no torch for $SYS_PY (make deps)"; exit 77; }
ls "$root"/python/trainmon/_trainmon*.so > /dev/null 2>&1 ||
    { echo "skipped: the Python extension is not built (make)"; exit 77; }
scratch=$(mktemp -d /var/tmp/trainmon-agentrule.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
version=$("$TRAINMON" --version | awk '{print $2}')

cat > "$scratch/job.py" << 'EOF'
import sys
pre = "trainmon" in sys.modules
import trainmon
print("TRAINMON_FILE", trainmon.__file__, "preloaded" if pre else "imported", flush=True)
import torch
m = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(16, 8)
for i in range(20):
    opt.zero_grad()
    m(x).sum().backward()
    opt.step()
EOF

# steps RUN: the steps of `trainmon report --json RUN`
steps() {
    "$TRAINMON" report --json "$1" | "$SYS_PY" -c 'import json,sys; print(json.load(sys.stdin)["summary"]["steps"])'
}
# torch_job NAME BIN PY [env...]: runs job.py; checks steps > 0, no
# not-loaded line and no note; leaves the file the job imported in $file.
torch_job() {
    local name=$1 bin=$2 py=$3
    shift 3
    local run=$scratch/$name
    env "$@" "$bin" run -o "$run" -- "$py" "$scratch/job.py" > "$run.out" 2> "$run.err" ||
        { cat "$run.err"; fail "$name: trainmon run"; }
    grep -q 'steps not recorded' "$run.err" && { cat "$run.err"; fail "$name: said not recorded"; }
    ls "$run"/agent-*.json > /dev/null 2>&1 && fail "$name: left a not-loaded note"
    grep -q '^TRAINMON_FILE .* preloaded$' "$run.out" ||
        { cat "$run.out" "$run.err"; fail "$name: trainmon was not loaded before the job's import"; }
    file=$(awk '/^TRAINMON_FILE/ {print $2}' "$run.out")
    local n
    n=$(steps "$run") || fail "$name: report"
    [ "$n" -gt 0 ] || fail "$name: $n steps recorded"
    echo "ok: $name: $n steps, trainmon from $file"
}

# 1. the build tree's package, on both torches
torch_job torch113 "$TRAINMON" "$SYS_PY"
[ "$file" = "$root/python/trainmon/__init__.py" ] || fail "torch113: loaded $file"
. "$root/tests/lib/venv.sh"
VENV_PY=$(tm_venv_python)
[ -n "$VENV_PY" ] && ! "$VENV_PY" -c 'import torch' 2> /dev/null && VENV_PY=
if [ -n "$VENV_PY" ]; then
    torch_job torch2 "$TRAINMON" "$VENV_PY"
    [ "$file" = "$root/python/trainmon/__init__.py" ] || fail "torch2: loaded $file"
else
    echo "skipped: the torch 2.x half (no venv with torch: make venv)"
fi

# 2. its own trainmon of this version: pip install of a clean copy of the sources
if git -C "$root" rev-parse HEAD > /dev/null 2>&1 && "$SYS_PY" -m pip --version > /dev/null 2>&1; then
    mkdir "$scratch/src"
    git -C "$root" archive --format=tar HEAD | tar -x -C "$scratch/src" || fail "git archive"
    (cd "$scratch/src" && env -u CC -u CFLAGS -u LDFLAGS -u LDLIBS "$SYS_PY" -m pip install -q \
        --no-build-isolation --no-index --no-deps --target "$scratch/own" . > "$scratch/pip.log" 2>&1) ||
        { tail -n 20 "$scratch/pip.log"; fail "pip install"; }
    ls -d "$scratch/own/trainmon-$version.dist-info" > /dev/null || fail "pip made no trainmon-$version.dist-info"
    torch_job own_same "$TRAINMON" "$SYS_PY" PYTHONPATH="$scratch/own"
    [ "$file" = "$scratch/own/trainmon/__init__.py" ] || fail "own_same: loaded $file, not its own"

    # TRAINMON_PYTHONPATH names the package beside the binary; one that
    # others may write is refused with one warning, and nothing is loaded
    torch_job envpath "$TRAINMON" "$SYS_PY" TRAINMON_PYTHONPATH="$scratch/own"
    [ "$file" = "$scratch/own/trainmon/__init__.py" ] || fail "envpath: loaded $file"
    cp -r "$scratch/own" "$scratch/open" && chmod o+w "$scratch/open"
    TRAINMON_PYTHONPATH="$scratch/open" "$TRAINMON" run -o "$scratch/openrun" -- "$SYS_PY" -c \
        'import sys; print("LOADED", "trainmon" in sys.modules)' > "$scratch/open.out" 2> "$scratch/open.err" ||
        { cat "$scratch/open.err"; fail "open: trainmon run"; }
    grep -q "^trainmon: warning: $scratch/open: writable by others: not loaded into the job's Python" "$scratch/open.err" &&
        grep -qx 'LOADED False' "$scratch/open.out" ||
        { cat "$scratch/open.out" "$scratch/open.err"; fail "open: a package others may write was loaded"; }
    echo "ok: TRAINMON_PYTHONPATH used, and refused when others may write it"
else
    echo "skipped: the own-install half (not a git checkout, or no pip for $SYS_PY)"
fi

# 3. its own trainmon of another version: never run, the bundled one instead
mkdir -p "$scratch/other/trainmon"
cat > "$scratch/other/trainmon/__init__.py" << EOF
__version__ = "0.0.1"
open("$scratch/other_ran", "w").close()
EOF
torch_job own_other "$TRAINMON" "$SYS_PY" PYTHONPATH="$scratch/other"
[ "$file" = "$root/python/trainmon/__init__.py" ] || fail "own_other: loaded $file"
[ -e "$scratch/other_ran" ] && fail "own_other: the other version's package was run"

# 4. an interpreter with no extension built for it
PY312=/root/.pyenv/versions/3.12.1/bin/python3.12
if [ -x "$PY312" ]; then
    cat > "$scratch/plain.py" << 'EOF'
import subprocess, sys
print("plain ok", flush=True)
if len(sys.argv) < 2:
    subprocess.run([sys.executable, __file__, "child"], check=True)
EOF
    run=$scratch/py312
    "$TRAINMON" run -o "$run" -- "$PY312" "$scratch/plain.py" > "$run.out" 2> "$run.err"
    rc=$?
    [ $rc = 0 ] || { cat "$run.err"; fail "py312: exit $rc"; }
    [ "$(cat "$run.out" | grep -c '^plain ok$')" = 2 ] || { cat "$run.out"; fail "py312: the job's output changed"; }
    grep -q Traceback "$run.err" && { cat "$run.err"; fail "py312: a traceback"; }
    said=$(grep '^trainmon: steps not recorded' "$run.err")
    [ "$(printf '%s\n' "$said" | grep -c .)" = 1 ] || { cat "$run.err"; fail "py312: not exactly one not-loaded line"; }
    case $said in
    *"$PY312 (Python 3.12.1)"*"to fix: $PY312 -m pip install $root") ;;
    *) fail "py312: the line does not name the interpreter and the fix: $said" ;;
    esac
    [ "$(ls "$run"/agent-*.json | wc -l)" = 2 ] || fail "py312: not one note per process"
    [ "$(stat -c %a "$(ls "$run"/agent-*.json | head -n1)")" = 600 ] || fail "py312: note not 0600"
    "$TRAINMON" report --json "$run" > "$run.json" || fail "py312: report"
    "$SYS_PY" - "$run.json" "$PY312" << 'EOF' || fail "py312: the report"
import json, sys
d = json.load(open(sys.argv[1]))
f = [x for x in d["findings"] if x["id"] == "run.agent_not_loaded"]
assert len(f) == 1, d["findings"]
f = f[0]
assert f["severity"] == "high", f
ev = f["evidence"]
assert ev["python"] == sys.argv[2] and ev["python_version"] == "3.12.1", ev
assert "has no extension built for it" in ev["reason"], ev
assert ev["processes"] == 2 and ev["steps"] == 0, ev
assert "steps and data wait are unknown" in f["title"], f["title"]
assert ev["fix"] in f["advice"], f["advice"]
EOF
    echo "ok: py312: runs unchanged, one line, report says run.agent_not_loaded"
    # its own trainmon of another version: not shadowed
    cat > "$scratch/imp.py" << 'EOF'
import trainmon
print("TRAINMON_FILE", trainmon.__file__, trainmon.__version__)
EOF
    run=$scratch/py312_other
    rm -f "$scratch/other_ran"
    PYTHONPATH="$scratch/other" "$TRAINMON" run -o "$run" -- "$PY312" "$scratch/imp.py" > "$run.out" 2> "$run.err" ||
        { cat "$run.err"; fail "py312_other: trainmon run"; }
    grep -qx "TRAINMON_FILE $scratch/other/trainmon/__init__.py 0.0.1" "$run.out" ||
        { cat "$run.out"; fail "py312_other: the job's own trainmon was shadowed"; }
    grep -q "its own trainmon ($scratch/other/trainmon) is version 0.0.1, not $version" "$run.err" ||
        { cat "$run.err"; fail "py312_other: the reason does not name the other version"; }
    echo "ok: py312_other: the job keeps its own trainmon 0.0.1"
else
    echo "skipped: the no-extension half ($PY312 missing)"
fi

# 5. an installed binary: make install into a scratch DESTDIR
env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s -C "$root" --no-print-directory BUILD="$BUILD" \
    install DESTDIR="$scratch/inst" PREFIX=/usr/local > "$scratch/install.log" 2>&1 ||
    { tail -n 20 "$scratch/install.log"; fail "make install"; }
inst=$scratch/inst/usr/local
ls "$inst"/share/trainmon/python/trainmon/_trainmon*.so "$inst/share/trainmon/trainmon-$version.tar.gz" > /dev/null ||
    fail "make install: no extension or source archive under share/trainmon"
torch_job installed "$inst/bin/trainmon" "$SYS_PY"
[ "$file" = "$inst/share/trainmon/python/trainmon/__init__.py" ] || fail "installed: loaded $file"
echo "PASS: python_agent_rule"
