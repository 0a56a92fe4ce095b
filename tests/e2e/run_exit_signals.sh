#!/usr/bin/env bash
# trainmon run: exit codes and signals.  The job's exit code comes back; a
# job killed by a signal gives 128+N and still gets a report from what was
# recorded; SIGINT sent to trainmon reaches the job; usage errors are one
# line and exit 2; a command that does not exist is one line and exit 127.
set -u
tm=$TRAINMON
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# The job's exit code.
"$tm" run -o "$scratch/r1" -- sh -c 'exit 3' > "$scratch/out" 2>&1; rc=$?
[ $rc -eq 3 ] || { cat "$scratch/out"; fail "exit 3: trainmon returned $rc"; }
grep -q '"exit_status": 3' "$scratch/r1/meta.json" || { cat "$scratch/r1/meta.json"; fail "meta.json lacks exit_status 3"; }
"$tm" dump "$scratch/r1/system.tmr" | grep -q 'event job_exit {"status": 3' ||
    fail "no job_exit event with status 3 in system.tmr"

# Killed by SIGKILL: 137, and the report is still printed.
"$tm" run -o "$scratch/r2" -i 0.2 -- sh -c 'sleep 0.5; kill -9 $$' > "$scratch/out" 2>&1; rc=$?
[ $rc -eq 137 ] || { cat "$scratch/out"; fail "kill -9: trainmon returned $rc, want 137"; }
grep -q 'killed by signal 9' "$scratch/out" || { cat "$scratch/out"; fail "kill -9: not said"; }
grep -q 'trainmon report' "$scratch/out" || { cat "$scratch/out"; fail "kill -9: no report printed"; }
grep -q '"signal": 9' "$scratch/r2/meta.json" || { cat "$scratch/r2/meta.json"; fail "meta.json lacks signal 9"; }

# SIGINT to trainmon reaches the job: it traps INT and exits 42.  (A
# background job of a script starts with SIGINT ignored; trainmon gives the
# job the default disposition back, so the trap can be set.)
"$tm" run -o "$scratch/r3" -i 0.2 -- sh -c 'trap "exit 42" INT; touch "$0/ready"; while :; do sleep 0.1; done' \
    "$scratch" > "$scratch/out" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -e "$scratch/ready" ] && break; sleep 0.1; done
[ -e "$scratch/ready" ] || fail "SIGINT: the job did not start"
kill -INT $pid
wait $pid; rc=$?
[ $rc -eq 42 ] || { cat "$scratch/out"; fail "SIGINT: trainmon returned $rc, want 42 (the job's trap)"; }

# SIGTERM likewise: a job without a handler dies of it, 128+15.
"$tm" run -o "$scratch/r4" -i 0.2 -- sh -c 'touch "$0/ready4"; exec sleep 30' "$scratch" \
    > "$scratch/out" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -e "$scratch/ready4" ] && break; sleep 0.1; done
kill -TERM $pid
wait $pid; rc=$?
[ $rc -eq 143 ] || { cat "$scratch/out"; fail "SIGTERM: trainmon returned $rc, want 143"; }

# Usage errors: one line, exit 2, no run directory.
cd "$scratch"
for args in "" "--bogus -- true" "-x -- true" "-i abc -- true" "--max-size 12Q -- true" \
            "-d /nonexistent/data -- true" "-o"; do
    "$tm" run $args > out 2> err; rc=$?
    [ $rc -eq 2 ] || { cat err; fail "run $args: exit $rc, want 2"; }
    [ "$(wc -l < err)" -eq 1 ] || { cat err; fail "run $args: want one line on stderr"; }
done
grep -q '^trainmon: /nonexistent/data: No such file or directory$' < <("$tm" run -d /nonexistent/data -- true 2>&1) ||
    fail "-d missing: message"
[ ! -e trainmon-runs ] || fail "a usage error left a run directory"

# A command that does not exist: 127, one line.
for cmd in /nonexistent/cmd no-such-command-trainmon; do
    "$tm" run -- $cmd > out 2> err; rc=$?
    [ $rc -eq 127 ] || { cat err; fail "$cmd: exit $rc, want 127"; }
    [ "$(wc -l < err)" -eq 1 ] || { cat err; fail "$cmd: want one line"; }
    grep -q "^trainmon: $cmd: command not found$" err || { cat err; fail "$cmd: message"; }
done

# No -o: a new directory under ./trainmon-runs, named after the time and
# the command, said on stderr.
"$tm" run -- true > out 2> err; rc=$?
[ $rc -eq 0 ] || { cat err; fail "true: exit $rc"; }
d=$(sed -n 's/^trainmon: recording into //p' err)
case "$d" in "$scratch"/trainmon-runs/[0-9]*-[0-9]*-true) ;; *) cat err; fail "default run dir: '$d'" ;; esac
[ -s "$d/meta.json" ] && [ -s "$d/system.tmr" ] || fail "default run dir incomplete"
# A job shorter than one interval still gets a sample of rates over its
# life: disk rates and the tree's CPU, not only cumulative totals.
"$tm" run -i 5 -o "$scratch/short" -- true > out 2> err || { cat err; fail "short: run failed"; }
"$tm" dump "$scratch/short/system.tmr" > dump.txt 2>&1 || fail "short: dump"
grep -q 'proc.cpu_utilization{root=' dump.txt || { cat dump.txt; fail "short job: no CPU rate sample"; }
if grep -q 'disk.reads_per_second' dump.txt || ! grep -q ' disk\.' dump.txt; then :; else
    fail "short job: disk series without rates"
fi
echo "PASS: exit codes, signals and usage errors"
