# scenario.sh - helpers for the `trainmon run` scenario tests: a real torch
# CPU training job (tests/e2e/train.py) under `trainmon run`, then the
# findings of `trainmon report --json`.
#
#   . tests/lib/scenario.sh
#   scen_require                 # exit 77 (skip) when torch is missing
#   scen_fake_nvml NAME          # the fake NVML, and $scratch removed at exit
#   scen_findings RUN            # prints the finding ids, one a line
#   scen_expect RUN ID           # fails unless ID is among the findings
#   scen_expect_not RUN ID       # fails if ID is among them
#   scen_evidence RUN ID         # prints the finding's evidence as JSON
#   scen_expect_cost RUN ID      # the finding's time lost and speed-up agree
#                                # with the job's own account (train.py)
#   scen_expect_cached RUN LO HI # data.page_cache: the share of the dataset
#                                # cached at the start is within [LO, HI]
#
# PY is the Python with Debian's torch (/usr/bin/python3; the python3 first
# on PATH may be another build), TRAIN the training script.

PY=${PY:-/usr/bin/python3}
TRAIN="$(cd "$(dirname "${BASH_SOURCE[0]}")/../e2e" && pwd)/train.py"

scen_fail() { echo "FAIL: $*"; exit 1; }

scen_require() {
    [ -x "$TRAINMON" ] || { echo "skipped: $TRAINMON not built"; exit 77; }
    "$PY" -c 'import torch, numpy' 2>/dev/null ||
        { echo "skipped: torch or numpy not importable by $PY (make deps)"; exit 77; }
}

# A scenario through the fake NVML (tests/fakes/fake_nvml.c, by its real
# dlopen path): skipped under the sanitizer build (the fake-NVML collector
# is under ASan in watch_gpu_fake and test_gpu); exports TRAINMON_NVML_LIB
# and makes $scratch (/var/tmp/trainmon-NAME.XXXXXX, 0700), removed at exit.
# usage: scen_fake_nvml NAME
scen_fake_nvml() {
    case ${BUILD:-} in *asan*) echo "skipped: under the sanitizer build (a scenario of the plain build; the fake-NVML collector is under ASan in watch_gpu_fake and test_gpu)"; exit 77 ;; esac
    scen_require
    local fake="$TM_ROOT/$BUILD/tests/fakes/fake_nvml.so"
    [ -f "$fake" ] || scen_fail "$fake not built"
    export TRAINMON_NVML_LIB=$fake
    scratch=$(mktemp -d "/var/tmp/trainmon-$1.XXXXXX") || scen_fail "mktemp in /var/tmp"
    trap 'rm -rf "$scratch"' EXIT
}

# The report as JSON, kept beside the run for a look after a failure.
scen_report() {
    local run=$1
    [ -s "$run/report.json" ] && return 0
    "$TRAINMON" report --json "$run" > "$run/report.json" 2> "$run/report.err" ||
        { cat "$run/report.err"; scen_fail "trainmon report --json $run failed"; }
}

scen_findings() {
    scen_report "$1"
    "$PY" -c 'import json,sys
for f in json.load(open(sys.argv[1])).get("findings", []): print(f.get("id"))' "$1/report.json"
}

scen_evidence() {
    scen_report "$1"
    "$PY" -c 'import json,sys
for f in json.load(open(sys.argv[1])).get("findings", []):
    if f.get("id") == sys.argv[2]: print(json.dumps(f.get("evidence", {})))' "$1/report.json" "$2"
}

scen_show() {
    scen_report "$1"
    echo "--- findings of $1:"
    "$PY" -c 'import json,sys
r = json.load(open(sys.argv[1]))
print("summary:", json.dumps(r.get("summary", {})))
for f in r.get("findings", []):
    print(" ", f.get("id"), f.get("severity"), json.dumps(f.get("evidence", {}))[:1500])' \
        "$1/report.json" 2>/dev/null || cat "$1/report.json"
}

scen_expect() {
    scen_findings "$1" | grep -qx "$2" || { scen_show "$1"; scen_fail "$2 not among the findings"; }
}

scen_expect_not() {
    ! scen_findings "$1" | grep -qx "$2" || { scen_show "$1"; scen_fail "$2 among the findings"; }
}

# Runs the job under trainmon; the output goes to RUN.out (printed on failure).
# SCEN_WRAP, when set, is a command that runs trainmon (slowdisk_run).
# usage: scen_run RUN [trainmon options] -- CMD...
scen_run() {
    local run=$1; shift
    local start=$SECONDS
    ${SCEN_WRAP:-} "$TRAINMON" run -o "$run" "$@" > "$run.out" 2>&1; local rc=$?
    echo "job under trainmon run: exit $rc, $((SECONDS - start)) s"
    [ $rc -eq 0 ] || { tail -n 30 "$run.out"; scen_fail "trainmon run exited $rc"; }
}

# The time lost and the speed-up of finding ID against the job's own
# inline account (train.py's "steps 1.. waited W s for data, computed C s:
# speedup X" line in RUN.out): the speed-up within 25% of X, the time lost
# within 25% of W (issue #11).
scen_expect_cost() {
    local run=$1 id=$2
    local line
    line=$(grep -m1 "^train.py: steps 1.. waited" "$run.out") ||
        scen_fail "the job printed no account of its wait (train.py)"
    scen_evidence "$run" "$id" | "$PY" -c '
import json, re, sys
ev = json.loads(sys.stdin.read() or "{}")
m = re.search(r"waited ([0-9.]+) s for data, computed ([0-9.]+) s: speedup ([0-9.]+)", sys.argv[1])
wait, busy, speedup = float(m.group(1)), float(m.group(2)), float(m.group(3))
lost, sp = ev.get("time_lost_s"), ev.get("speedup")
print("job: waited %.2f s, computed %.2f s, speedup %.2f; report: lost %s s, speedup %s, %s of the run"
      % (wait, busy, speedup, lost, sp, ev.get("time_lost_fraction")))
ok = (isinstance(lost, (int, float)) and isinstance(sp, (int, float))
      and abs(sp / speedup - 1) <= 0.25 and abs(lost / wait - 1) <= 0.25
      and 0 < ev.get("time_lost_fraction", 0) <= 1)
sys.exit(0 if ok else 1)' "$line" || { scen_show "$run"; scen_fail "$id: time lost or speed-up off the job's own account"; }
}

# The dataset's page-cache share at the job's start (data.page_cache, read
# by `run -d`) within [lo, hi]: a dataset read just before is cached, one
# whose cache was dropped is not (issue #11).
scen_expect_cached() {
    local run=$1 lo=$2 hi=$3
    scen_evidence "$run" data.page_cache | "$PY" -c '
import json, sys
ev = json.loads(sys.stdin.read() or "{}")
v = ev.get("dataset_cached_fraction_start")
print("dataset cached at the start:", v, "end:", ev.get("dataset_cached_fraction_end"))
sys.exit(0 if isinstance(v, (int, float)) and float(sys.argv[1]) <= v <= float(sys.argv[2]) else 1)' "$lo" "$hi" ||
        { scen_show "$run"; scen_fail "data.page_cache: the share cached at the start is not in [$lo, $hi]"; }
}
