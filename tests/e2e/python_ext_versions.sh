#!/usr/bin/env bash
# The CPython extension (python/trainmon/_trainmon.c) compiles against the
# headers of every Python the package claims (setup.py: python_requires
# >= 3.9), with setup.py's own flags: an API that a version's Python.h does
# not declare (PyFrame_GetBack before 3.11 is in frameobject.h) is an
# implicit declaration there, an error with -Werror=implicit-function-
# declaration, and without it a pointer cut to an int.  Built here only
# for the interpreter at hand, so this checks the others' headers where
# the machine has them (pyenv's, Debian's python3.X-dev): cc -fsyntax-only,
# a second or two each.  Skipped when none but one version is found.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
CC=${CC:-cc}
found=0 fails=0
declare -A seen
for inc in /root/.pyenv/versions/3.*/include/python3.* /usr/include/python3.*; do
    [ -f "$inc/Python.h" ] || continue
    [[ $(basename "$inc") =~ ^python3\.([0-9]+) ]] || continue  # python3.11d: 3.11
    minor=${BASH_REMATCH[1]} ver=python3.${BASH_REMATCH[1]}
    [ "$minor" -ge 9 ] || continue
    [ -n "${seen[$ver]:-}" ] && continue
    seen[$ver]=1
    found=$((found + 1))
    if "$CC" -fsyntax-only -std=c11 -pthread -Wall -Wno-missing-field-initializers \
        -Werror -Werror=implicit-function-declaration -I"$inc" -I"$root/include" \
        -I"$root/src/lib" "$root/python/trainmon/_trainmon.c" > /tmp/ext_versions.$$ 2>&1; then
        echo "  $ver ($inc): compiles"
    else
        echo "  FAIL $ver ($inc):"; head -n 5 /tmp/ext_versions.$$; fails=$((fails + 1))
    fi
done
rm -f /tmp/ext_versions.$$
[ "$found" -ge 2 ] || { echo "skipped: headers of $found Python version(s) >= 3.9 here"; exit 77; }
[ "$fails" -eq 0 ] || { echo "FAIL: $fails of $found Python versions"; exit 1; }
echo "PASS: the extension compiles against $found Python versions' headers"
