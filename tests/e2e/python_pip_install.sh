#!/usr/bin/env bash
# The Python package installs with pip from a clean copy of the sources
# (no index reachable: --no-build-isolation with Debian's setuptools), and
# the installed package records: Monitor.capture writes a rank file that
# trainmon dump reads back.
# e2e: parallel
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (pip builds the extension with Python's own flags: nothing of the sanitizer build is tested)"; exit 77 ;; esac
py=/usr/bin/python3
"$py" -m pip --version > /dev/null 2>&1 || { echo "skipped: pip missing for $py (make deps)"; exit 77; }
root=${TM_ROOT:-$(pwd)}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A clean copy: the committed sources, nothing built.
git -C "$root" rev-parse HEAD > /dev/null 2>&1 || { echo "skipped: not a git checkout"; exit 77; }
mkdir "$scratch/src"
git -C "$root" archive --format=tar HEAD | tar -x -C "$scratch/src" || fail "git archive"
# Python's own compiler flags: the sanitizer build exports CC and CFLAGS.
(cd "$scratch/src" && env -u CC -u CFLAGS -u LDFLAGS -u LDLIBS "$py" -m pip install -q --no-build-isolation --no-index --no-deps \
    --target "$scratch/site" . > "$scratch/pip.log" 2>&1) || { tail -n 20 "$scratch/pip.log"; fail "pip install"; }
ls "$scratch"/site/trainmon/_trainmon*.so > /dev/null || fail "no extension installed"

mkdir "$scratch/run"
(cd "$scratch" && PYTHONPATH="$scratch/site" TRAINMON_RUN_DIR="$scratch/run" "$py" - <<'PY') || fail "the installed package"
import os, trainmon
assert os.path.dirname(trainmon.__file__).startswith(os.environ["PYTHONPATH"]), trainmon.__file__
m = trainmon.Monitor()
for i in range(5):
    m.capture(f"tag{i}")
assert m.history["tag"] == [f"tag{i}" for i in range(5)], m.history["tag"]
PY
f=$(ls "$scratch"/run/*.tmr | head -n1)
[ -n "$f" ] || fail "no record file"
[ "$("$TRAINMON" dump "$f" | grep -c 'tag[0-4]')" -eq 5 ] || fail "dump does not show the 5 captures"
echo ok
