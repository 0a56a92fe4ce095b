#!/usr/bin/env bash
# Readers never block (issue #15): a FIFO named rank0.tmr or meta.json in a
# run directory, or given to dump, makes `dump`, `report` and
# `export --format jsonl` return within a second with one line naming it.
# In a run directory a refused file is a note and the rest is read; given
# to dump it is an error (exit 1).  A record file that is a symlink is
# refused the same way; the run directory itself may be a symlink.
set -u
tm=$TRAINMON
root=${TM_ROOT:-$(pwd)}
writer="$root/${BUILD:-build}/tests/helpers/rec_writer"
[ -x "$writer" ] || { echo "no $writer (make $BUILD/tests/helpers/rec_writer)"; exit 77; }
scratch=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A real record file, then the run directories around it.
"$writer" "$scratch/real.tmr" --count 50 > /dev/null || fail "rec_writer"
mkdir "$scratch/fifo_rank" "$scratch/fifo_meta" "$scratch/link_rank"
cp "$scratch/real.tmr" "$scratch/fifo_rank/rank1.tmr"
mkfifo "$scratch/fifo_rank/rank0.tmr"
cp "$scratch/real.tmr" "$scratch/fifo_meta/rank0.tmr"
mkfifo "$scratch/fifo_meta/meta.json"
cp "$scratch/real.tmr" "$scratch/link_rank/rank1.tmr"
ln -s "$scratch/real.tmr" "$scratch/link_rank/rank0.tmr"
ln -s "$scratch/fifo_meta" "$scratch/run_link"
mkfifo "$scratch/lone.tmr"

# run NAME WANT_RC WANT_ERR_LINE CMD...: runs CMD under `timeout 5`, and
# checks its exit status, that it took under a second, and that stderr has
# the wanted line.
run() {
    local name=$1 want_rc=$2 want_line=$3
    shift 3
    local t0 t1 rc ms
    t0=$(date +%s%N)
    timeout 5 "$@" > "$scratch/out" 2> "$scratch/err"; rc=$?
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    [ $rc -ne 124 ] || fail "$name: still blocked after 5 s"
    [ $ms -lt 1000 ] || fail "$name: took $ms ms"
    [ $rc -eq "$want_rc" ] || { cat "$scratch/err"; fail "$name: exit $rc, want $want_rc"; }
    grep -qxF -- "$want_line" "$scratch/err" ||
        { cat "$scratch/err"; fail "$name: no line '$want_line' on stderr"; }
    echo "ok    $name (${ms} ms)"
}

# A FIFO given to dump: one line, exit 1.
run "dump fifo" 1 "trainmon: $scratch/lone.tmr: not a regular file (fifo)" "$tm" dump "$scratch/lone.tmr"
[ "$(wc -l < "$scratch/err")" -eq 1 ] || { cat "$scratch/err"; fail "dump fifo: more than one line"; }
[ ! -s "$scratch/out" ] || fail "dump fifo: something on stdout"
run "dump --json fifo" 1 "trainmon: $scratch/lone.tmr: not a regular file (fifo)" \
    "$tm" dump --json "$scratch/lone.tmr"

# A FIFO named rank0.tmr: a note, and rank1.tmr is still read.
line="trainmon: $scratch/fifo_rank/rank0.tmr: not a regular file (fifo), skipped"
run "report, fifo rank0.tmr" 0 "$line" "$tm" report "$scratch/fifo_rank"
grep -q . "$scratch/out" || fail "report, fifo rank0.tmr: no report"
run "report --json, fifo rank0.tmr" 0 "$line" "$tm" report --json "$scratch/fifo_rank"
grep -q '"rank1.tmr"\|rank1.tmr' "$scratch/out" || fail "report --json: rank1.tmr not in the report"
run "export jsonl, fifo rank0.tmr" 0 "$line" "$tm" export --format jsonl "$scratch/fifo_rank"
[ "$(grep -c '"n"' "$scratch/out")" -ge 50 ] || fail "export jsonl: the 50 events of rank1.tmr are not all there"

# A FIFO named meta.json: a note, the records are read.
line="trainmon: $scratch/fifo_meta/meta.json: not a regular file (fifo), ignored"
run "report, fifo meta.json" 0 "$line" "$tm" report "$scratch/fifo_meta"
run "export jsonl, fifo meta.json" 0 "$line" "$tm" export --format jsonl "$scratch/fifo_meta"
[ "$(grep -c '"n"' "$scratch/out")" -ge 50 ] || fail "export jsonl (fifo meta.json): events missing"
# The same directory named through a symlink: the user named it, so it is followed.
line="trainmon: $scratch/run_link/meta.json: not a regular file (fifo), ignored"
run "report, run dir given as a symlink" 0 "$line" "$tm" report "$scratch/run_link"

# A record file that is a symlink: refused, not followed; the rest is read.
line="trainmon: $scratch/link_rank/rank0.tmr: not a regular file (symlink, not followed), skipped"
run "report, symlink rank0.tmr" 0 "$line" "$tm" report "$scratch/link_rank"
run "export jsonl, symlink rank0.tmr" 0 "$line" "$tm" export --format jsonl "$scratch/link_rank"
[ "$(grep -c '"n"' "$scratch/out")" -eq 50 ] || fail "export jsonl (symlink): want the 50 events of rank1.tmr only"

# A directory with nothing but the FIFO: nothing readable, exit 1, promptly.
mkdir "$scratch/only_fifo"
mkfifo "$scratch/only_fifo/rank0.tmr"
run "report, only a fifo" 1 \
    "trainmon: $scratch/only_fifo: no readable trainmon record files ($scratch/only_fifo/rank0.tmr: not a regular file (fifo), skipped)" \
    "$tm" report "$scratch/only_fifo"
[ "$(wc -l < "$scratch/err")" -eq 1 ] || { cat "$scratch/err"; fail "report, only a fifo: more than one line"; }
# A FIFO planted in a live run directory while `trainmon run` follows it (an
# alert rule on run.* makes it read the training files every interval): it
# still ends with its job, finalizes meta.json and reports, promptly.
t0=$(date +%s%N)
timeout 20 "$tm" run -i 0.2 -o "$scratch/live" --alert 'run.steps > 1000000' -- \
    sh -c 'sleep 0.6; mkfifo "$TRAINMON_RUN_DIR/rank9.tmr"; sleep 1' > "$scratch/out" 2> "$scratch/err"
rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc -eq 0 ] || { cat "$scratch/err"; fail "run with a fifo planted in its directory: exit $rc"; }
[ -p "$scratch/live/rank9.tmr" ] || fail "the job did not plant its fifo"
grep -q '"exit_status": 0' "$scratch/live/meta.json" || fail "run with a fifo: meta.json not finalized"
[ $ms -lt 8000 ] || fail "run with a fifo took $ms ms for a 1.6 s job"
echo "PASS"
