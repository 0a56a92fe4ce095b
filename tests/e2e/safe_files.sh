#!/usr/bin/env bash
# trainmon as root beside other users' files (docs/SECURITY.md): planted
# symlinks in a run directory and at an output path leave their targets
# unchanged and cost one line; a planted .python owned by another user is
# never put on the job's path; run directories that are another user's or
# writable by others are refused (exit 1, no job); `run -o FILE` is refused;
# meta.json stores secret-looking arguments redacted (unless --keep-args)
# in a 0700 directory (0750 with --group-readable); the Python extension
# makes only the last component of TRAINMON_RUN_DIR and refuses another
# user's.  Needs root (chown to nobody, reading as root what others
# planted); skipped (77) otherwise.
set -u
tm=$TRAINMON
root=${TM_ROOT:-$(pwd)}
py=/usr/bin/python3
if [ "$(id -u)" != 0 ]; then
    echo "skipped: needs root (chown to another user, root's view of planted links)"
    exit 77
fi
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
chmod 755 "$scratch"
fail() { echo "FAIL: $*"; exit 1; }
target="$scratch/precious"
printf 'precious\n' > "$target"
unchanged() { [ "$(cat "$target")" = precious ] || fail "$1: the symlink's target was written"; }
mode() { stat -c %a "$1"; }

# --- planted symlinks in an existing run directory of root's
run="$scratch/planted"
mkdir -m 700 "$run" "$run/.python"
ln -s "$target" "$run/system.tmr"
ln -s "$target" "$run/.meta.json.tmp"
ln -s "$target" "$run/.python/sitecustomize.py"
"$tm" run -o "$run" -i 0.2 -- "$py" -c 'print("job ran")' > "$scratch/out" 2> "$scratch/err"; rc=$?
cat "$scratch/err"
[ $rc -eq 0 ] || fail "planted: the job's exit status is lost (got $rc)"
grep -q 'job ran' "$scratch/out" || fail "planted: the job did not run"
unchanged "planted system.tmr/.meta.json.tmp/.python"
[ "$(grep -c 'system.tmr: is a symbolic link' "$scratch/err")" -eq 1 ] ||
    fail "planted system.tmr: want exactly one line saying so"
[ -L "$run/system.tmr" ] || fail "planted system.tmr: the link itself was replaced"
[ -f "$run/meta.json" ] && [ ! -L "$run/meta.json" ] || fail "planted: meta.json not written as a file"
grep -q '"exit_status": 0' "$run/meta.json" || fail "planted: meta.json not finalized"

# --- a planted meta.json symlink is replaced, never written through
run="$scratch/metalink"
mkdir -m 700 "$run"
"$tm" run -o "$run" -- true > /dev/null 2>&1 || fail "metalink: first run failed"
rm "$run/meta.json"; ln -s "$target" "$run/meta.json"
"$tm" run -o "$run" -- true > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] || fail "metalink: a dangling run's meta.json symlink is not 'already holds a run' (rc $rc)"
unchanged "meta.json symlink"

# --- a planted .python owned by another user is never used
run="$scratch/pyplant"
mkdir -m 700 "$run"
mkdir "$run/.python"
printf 'raise SystemExit("planted json.py ran")\n' > "$run/.python/json.py"
printf 'import os; open(%q, "w").write("pwned")\n' "$scratch/pwned" > "$run/.python/sitecustomize.py"
chown -R nobody "$run/.python"
"$tm" run -o "$run" -- "$py" -c 'import json, sys; print("JSON", json.__file__); print("PATH", sys.path)' \
    > "$scratch/out" 2> "$scratch/err"; rc=$?
cat "$scratch/err"
[ $rc -eq 0 ] || { cat "$scratch/out"; fail "pyplant: job failed ($rc)"; }
grep -q "^JSON /usr/lib/python3" "$scratch/out" || { cat "$scratch/out"; fail "pyplant: json not from the standard library"; }
grep "^PATH" "$scratch/out" | grep -q "$run/.python'" && fail "pyplant: the planted .python is on sys.path"
grep "^PATH" "$scratch/out" | grep -q "$run/.python-" || fail "pyplant: the fresh .python-XXXXXX is not on sys.path"
[ -e "$scratch/pwned" ] && fail "pyplant: the planted sitecustomize ran"
fresh=$(ls -d "$run"/.python-* | head -n1)
[ "$(stat -c %u "$fresh")" = 0 ] && [ "$(mode "$fresh")" = 700 ] || fail "pyplant: $fresh not root's 0700"

# --- run directories that are not the caller's, or writable by others
for kind in other open file; do
    d="$scratch/bad-$kind"
    case $kind in
        other) mkdir -m 700 "$d"; chown nobody "$d" ;;
        open)  mkdir "$d"; chmod 777 "$d" ;;
        file)  printf 'not a dir\n' > "$d" ;;
    esac
    "$tm" run -o "$d" -- touch "$scratch/ran-$kind" > /dev/null 2> "$scratch/err"; rc=$?
    cat "$scratch/err"
    [ $rc -eq 1 ] || fail "$kind: want exit 1, got $rc"
    [ "$(wc -l < "$scratch/err")" -eq 1 ] || fail "$kind: want one line"
    [ -e "$scratch/ran-$kind" ] && fail "$kind: the job was started"
    grep -q 'recording into' "$scratch/err" && fail "$kind: says recording"
done
grep -q 'not a directory\|Not a directory' "$scratch/err" || fail "file: the message does not say why"
"$tm" run -o "$scratch/bad-other" -- true 2>&1 | grep -q 'owned by uid' || fail "other: message"
"$tm" run -o "$scratch/bad-open" -- true 2>&1 | grep -q 'writable by others' || fail "open: message"
"$tm" watch -n 1 -i 0.1 -o "$scratch/bad-open" / > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'writable by others' "$scratch/err" || fail "watch -o into a 0777 dir: rc $rc"
ln -s "$scratch/planted" "$scratch/dirlink"
"$tm" run -o "$scratch/dirlink" -- true > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'symbolic link' "$scratch/err" || fail "run -o a symlink to a directory: rc $rc"

# --- secrets and modes
run="$scratch/secret"
"$tm" run -o "$run" -- "$py" -c 'import trainmon; trainmon.Monitor().capture("x")' \
    --api-key=abc --password xyz HF_TOKEN=zzz > /dev/null 2>&1 || fail "secret: run failed"
grep -q '"--api-key=<redacted>"' "$run/meta.json" || fail "secret: --api-key not redacted"
grep -q '"--password", "<redacted>"' "$run/meta.json" || fail "secret: --password value not redacted"
grep -q '"HF_TOKEN=<redacted>"' "$run/meta.json" || fail "secret: HF_TOKEN not redacted"
grep -qE 'abc|xyz|zzz' "$run/meta.json" && fail "secret: a secret is stored: $(cat "$run/meta.json")"
# ... nor anywhere else in the run: the job_start event, the extension's own meta
for f in "$run"/*.tmr; do
    grep -qaE 'abc|xyz|zzz' "$f" && fail "secret: a secret is stored in $(basename "$f")"
done
ls "$run"/*.tmr | grep -qv system.tmr || fail "secret: the job wrote no record file of its own"
[ "$(mode "$run")" = 700 ] || fail "secret: run dir mode $(mode "$run"), want 700"
[ "$(mode "$run/meta.json")" = 600 ] && [ "$(mode "$run/system.tmr")" = 600 ] ||
    fail "secret: file modes $(mode "$run/meta.json") $(mode "$run/system.tmr"), want 600"
run="$scratch/keep"
"$tm" run --keep-args -o "$run" -- "$py" -c pass --api-key=abc --password xyz HF_TOKEN=zzz > /dev/null 2>&1 ||
    fail "keep: run failed"
grep -q '"--api-key=abc", "--password", "xyz", "HF_TOKEN=zzz"' "$run/meta.json" ||
    fail "--keep-args: arguments not kept: $(cat "$run/meta.json")"
run="$scratch/group"
"$tm" run --group-readable -o "$run" -- true > /dev/null 2>&1 || fail "group: run failed"
[ "$(mode "$run")" = 750 ] || fail "--group-readable: dir mode $(mode "$run"), want 750"
[ "$(mode "$run/meta.json")" = 640 ] && [ "$(mode "$run/system.tmr")" = 640 ] ||
    fail "--group-readable: file modes $(mode "$run/meta.json") $(mode "$run/system.tmr"), want 640"
"$tm" run --help | grep -q -- '--keep-args' || fail "--keep-args not in run --help"
"$tm" run --help | grep -q -- '--group-readable' || fail "--group-readable not in run --help"

# --- outputs: a symlink at -o / --html, a FIFO, another user's file
good="$scratch/secret"
for opt in "export --format csv -o" "export --format jsonl -o" "export --format chrome -o" \
           "report -o" "report --html"; do
    ln -sf "$target" "$scratch/out.link"
    # shellcheck disable=SC2086 # the options split on purpose
    set -- $opt
    cmd=$1; shift
    "$tm" "$cmd" "$good" "$@" "$scratch/out.link" > /dev/null 2> "$scratch/err"; rc=$?
    [ $rc -eq 1 ] || fail "$opt symlink: want exit 1, got $rc"
    [ "$(grep -c 'out.link: is a symbolic link' "$scratch/err")" -eq 1 ] ||
        { cat "$scratch/err"; fail "$opt symlink: want one line saying so"; }
    unchanged "$opt"
done
mkfifo "$scratch/out.fifo"
timeout 5 "$tm" export "$good" --format csv -o "$scratch/out.fifo" > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'not a regular file' "$scratch/err" || fail "export -o FIFO: rc $rc (124: blocked)"
printf 'theirs\n' > "$scratch/theirs.html"; chown nobody "$scratch/theirs.html"
"$tm" report "$good" --html "$scratch/theirs.html" > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] && grep -q 'owned by uid' "$scratch/err" || fail "report --html another user's file: rc $rc"
[ "$(cat "$scratch/theirs.html")" = theirs ] || fail "another user's file was overwritten"
"$tm" export "$good" --format csv -o "$scratch/fine.csv" 2> /dev/null || fail "export to a new file failed"
"$tm" export "$good" --format csv -o "$scratch/fine.csv" 2> /dev/null || fail "export over our own file failed"
head -n1 "$scratch/fine.csv" | grep -q time || fail "export: no CSV header"

# --- watch -o and export --format tensorboard -o make private directories,
# and refuse a symlink where the output directory should be
"$tm" watch -n 2 -i 0.2 -o "$scratch/watchdir" / > /dev/null 2>&1 || fail "watch -o: failed"
[ "$(mode "$scratch/watchdir")" = 700 ] || fail "watch -o: dir mode $(mode "$scratch/watchdir"), want 700"
mkdir -m 700 "$scratch/elsewhere"; ln -s "$scratch/elsewhere" "$scratch/tblink"
"$tm" export "$scratch/watchdir" --format tensorboard -o "$scratch/tblink" > /dev/null 2> "$scratch/err" &&
    fail "export tensorboard -o through a symlink: accepted"
[ -z "$(ls -A "$scratch/elsewhere")" ] || fail "export tensorboard wrote through a symlink"

# --- the Python extension's run directory
code='import trainmon; m = trainmon.Monitor(); m.capture("x"); print("DIR", trainmon.run_dir())'
TRAINMON_RUN_DIR="$scratch/py/a/b" PYTHONPATH="$root/python" "$py" -c "$code" > "$scratch/out" 2> "$scratch/err" ||
    fail "extension: the job failed with a missing parent"
[ -e "$scratch/py" ] && fail "extension: made TRAINMON_RUN_DIR's parents"
grep -q 'cannot record' "$scratch/err" || fail "extension: a missing parent is not said"
TRAINMON_RUN_DIR="$scratch/pyrun" PYTHONPATH="$root/python" "$py" -c "$code" > "$scratch/out" 2> "$scratch/err" ||
    fail "extension: job failed"
[ "$(mode "$scratch/pyrun")" = 700 ] || fail "extension: run dir mode $(mode "$scratch/pyrun"), want 700"
ls "$scratch/pyrun"/*.tmr > /dev/null 2>&1 || fail "extension: no record file"
mkdir -m 700 "$scratch/pytheirs"; chown nobody "$scratch/pytheirs"
TRAINMON_RUN_DIR="$scratch/pytheirs" PYTHONPATH="$root/python" "$py" -c "$code" > "$scratch/out" 2> "$scratch/err" ||
    fail "extension: the job failed on another user's directory"
grep -q 'owned by uid' "$scratch/err" || { cat "$scratch/err"; fail "extension: another user's directory not refused"; }
[ -z "$(ls -A "$scratch/pytheirs")" ] || fail "extension: wrote into another user's directory"
ln -s "$target" "$scratch/pyrun/rank0.tmr"
RANK=0 TRAINMON_RUN_DIR="$scratch/pyrun" PYTHONPATH="$root/python" "$py" -c "$code" > /dev/null 2>&1 ||
    fail "extension: the job failed beside a planted rank0.tmr"
unchanged "extension rank0.tmr"
echo ok
