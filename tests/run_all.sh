#!/usr/bin/env bash
# Runs every test: the cmocka unit binaries given as arguments, then the
# end-to-end scripts in tests/e2e.  Prints each runner's own output and a
# closing line "total: N passed, N failed, N skipped"; exits non-zero if
# anything failed.
set -u
here=$(cd "$(dirname "$0")" && pwd)
"$here/run_unit.sh" "$@"; unit_rc=$?
"$here/run_e2e.sh"; e2e_rc=$?
if [ -n "${SKIP_PYTHON:-}" ]; then
    # The sanitizer build: the extension is not instrumented, so its tests
    # would only repeat the plain build's.
    echo "python: skipped (${SKIP_PYTHON})"; mkdir -p "${BUILD:-build}"; echo "0 0 0" > "${BUILD:-build}/.python-counts"; py_rc=0
else
    "$here/run_python.sh"; py_rc=$?
fi
read -r up uf < "${BUILD:-build}/.unit-counts" 2>/dev/null || { up=0; uf=1; }
read -r ep ef es < "${BUILD:-build}/.e2e-counts" 2>/dev/null || { ep=0; ef=1; es=0; }
read -r pp pf ps < "${BUILD:-build}/.python-counts" 2>/dev/null || { pp=0; pf=1; ps=0; }
echo
echo "total: $((up + ep + pp)) passed, $((uf + ef + pf)) failed, $((es + ps)) skipped"
[ $unit_rc -eq 0 ] && [ $e2e_rc -eq 0 ] && [ $py_rc -eq 0 ]
