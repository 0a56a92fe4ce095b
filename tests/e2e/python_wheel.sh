#!/usr/bin/env bash
# `pip install trainmon` (issue #10): from a clean copy of the committed
# sources, the standard tool (`python -m build`, with build isolation: its
# setuptools comes from the package index) makes an sdist and, from that
# sdist, a wheel; the wheel installs into a fresh virtualenv and gives both
# `import trainmon` and the `trainmon` command on that virtualenv's PATH;
# `trainmon run` from there records a torch job (Debian's torch 1.13,
# seen through --system-site-packages) and reports its steps; without a C
# compiler, pip's error names the compiler it could not run.  Skipped
# with one line where the package index is unreachable.
# e2e: parallel
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (the Python side and the framework jobs are the plain build's; the binary's parsers run under ASan in the other tests)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=/usr/bin/python3
"$py" -c 'import venv, torch' 2>/dev/null || { echo "skipped: $py has no venv or torch (make deps)"; exit 77; }
git -C "$root" rev-parse HEAD > /dev/null 2>&1 || { echo "skipped: not a git checkout"; exit 77; }
scratch=$(mktemp -d /var/tmp/trainmon-wheel.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir "$scratch/src"
git -C "$root" archive --format=tar HEAD | tar -x -C "$scratch/src" || fail "git archive"
"$py" -m venv "$scratch/tools" || fail "venv"
if ! "$scratch/tools/bin/pip" install -q --disable-pip-version-check build > "$scratch/pip.log" 2>&1; then
    echo "skipped: cannot install 'build' from the package index ($(tail -n1 "$scratch/pip.log"))"; exit 77
fi
# Python's own compiler flags: the sanitizer build exports CC and CFLAGS.
(cd "$scratch/src" && env -u CC -u CFLAGS -u LDFLAGS -u LDLIBS "$scratch/tools/bin/python" -m build \
    --outdir "$scratch/dist" . > "$scratch/build.log" 2>&1) || { tail -n 30 "$scratch/build.log"; fail "python -m build"; }
sdist=$(ls "$scratch"/dist/trainmon-*.tar.gz 2>/dev/null) || fail "no sdist"
wheel=$(ls "$scratch"/dist/trainmon-*.whl 2>/dev/null) || fail "no wheel"
echo "  built $(basename "$sdist") and $(basename "$wheel")"
"$py" - "$wheel" <<'PY' || fail "the wheel's contents"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
assert any(n.endswith("/scripts/trainmon") for n in names), names
assert any(n.startswith("trainmon/_trainmon") and n.endswith(".so") for n in names), names
PY

"$py" -m venv --system-site-packages "$scratch/user" || fail "venv"
"$scratch/user/bin/pip" install -q --disable-pip-version-check --no-deps "$wheel" > "$scratch/inst.log" 2>&1 ||
    { tail -n 20 "$scratch/inst.log"; fail "pip install the wheel"; }
export PATH="$scratch/user/bin:$PATH"
[ "$(command -v trainmon)" = "$scratch/user/bin/trainmon" ] || fail "trainmon on PATH is $(command -v trainmon)"
trainmon --version > /dev/null 2>&1 || trainmon --help > /dev/null 2>&1 || fail "the installed trainmon does not run"
cd "$scratch"
trainmon run -o "$scratch/run" -- python -c '
import torch, trainmon
assert trainmon.__file__.startswith("'"$scratch/user"'"), trainmon.__file__
m = torch.nn.Linear(8, 1); o = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(12):
    m(torch.randn(4, 8)).sum().backward(); o.step(); o.zero_grad()
print("job done")' > "$scratch/run.out" 2>&1 || { tail -n 20 "$scratch/run.out"; fail "trainmon run from the venv"; }
grep -q "job done" "$scratch/run.out" || fail "the job did not run"
steps=$(trainmon report --json "$scratch/run" | python -c 'import json,sys; print(json.load(sys.stdin)["summary"]["steps"])')
[ "$steps" = 12 ] || { cat "$scratch/run.out"; fail "report steps $steps, the job ran 12"; }
# No C compiler: pip's error names the one it could not run.
"$py" -m venv "$scratch/nocc" || fail "venv"
CC=/nonexistent/cc "$scratch/nocc/bin/pip" install --disable-pip-version-check --no-deps "$sdist" \
    > "$scratch/nocc.log" 2>&1 && fail "installed without a compiler"
grep -q "/nonexistent/cc" "$scratch/nocc.log" || { tail -n 20 "$scratch/nocc.log"; fail "the error does not name the compiler"; }
echo "PASS: sdist and wheel by python -m build; the wheel gives import trainmon and trainmon on PATH; 12 steps reported"
