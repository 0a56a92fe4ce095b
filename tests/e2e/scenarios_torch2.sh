#!/usr/bin/env bash
# The real-job scenarios (storage-bound, CPU-bound, compute-bound, worker
# growth, CPU oversubscription: tests/e2e/run_*_bound.sh,
# run_worker_growth.sh, run_cpu_oversub.sh) again on torch
# 2.x, the virtualenv of `make deps` (issue #10): the same jobs, the same
# assertions, PY pointing at the venv's interpreter.  Each scenario keeps
# its own skip rules (root for the throttled disk); this test is skipped
# with one line when the venv has no torch.
set -u
case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (the Python side and the framework jobs are the plain build's; the binary's parsers run under ASan in the other tests)"; exit 77 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
. "$root/tests/lib/venv.sh"
venv=$(tm_venv_python)
if [ -z "$venv" ] || ! tv=$("$venv" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
    echo "skipped: no virtualenv with torch (make deps makes .venv)"; exit 77
fi
fails=0 ran=0
for s in run_storage_bound run_cpu_bound run_compute_bound run_worker_growth run_cpu_oversub; do
    out=$(PY=$venv bash "$here/$s.sh" 2>&1); rc=$?
    case $rc in
    0) ran=$((ran + 1)); echo "  PASS $s on torch $tv" ;;
    77) echo "  SKIP $s: $(printf '%s\n' "$out" | tail -n1)" ;;
    *) ran=$((ran + 1)); fails=$((fails + 1)); echo "  FAIL $s on torch $tv (exit $rc)"
       printf '%s\n' "$out" | tail -n 25 | sed 's/^/    /' ;;
    esac
done
[ $ran -gt 0 ] || { echo "skipped: every scenario skipped itself"; exit 77; }
[ $fails -eq 0 ] || { echo "FAIL: $fails of $ran scenarios on torch $tv"; exit 1; }
echo "PASS: $ran scenarios on torch $tv"
