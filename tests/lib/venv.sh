# venv.sh - which Python has torch 2.x for a test: one rule for every
# script (the virtualenv `make deps` makes).
#
#   . tests/lib/venv.sh
#   venv=$(tm_venv_python)     # "" when there is none
#
# $VENV_PY when set (relative to the repository root if not absolute),
# else the tree's .venv/bin/python ($TM_ROOT, the root run_e2e.sh exports,
# else the repository this file is in).  Printed only when executable.

tm_venv_python() {
    local lib root v
    lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    root=${TM_ROOT:-$(cd "$lib/../.." && pwd)}
    v=${VENV_PY:-$root/.venv/bin/python}
    case $v in /*) ;; *) v=$root/$v ;; esac
    [ -x "$v" ] && printf '%s\n' "$v"
    return 0
}
