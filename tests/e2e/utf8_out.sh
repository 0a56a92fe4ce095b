#!/usr/bin/env bash
# Valid UTF-8 out (#15): a run whose record files hold bytes that are not
# UTF-8 (in a tag, phase names, an event, the host name, a process's comm
# name, labels, a unit, meta.json's command; tests/helpers/utf8_writer.c)
# goes through every writer: dump --json, export jsonl, chrome, csv and
# tensorboard, report --json and --html.  Each output must decode as strict
# UTF-8 (Python and iconv), parse in its format, and carry each bad string
# as Python's decode(errors="replace") of its bytes: U+FFFD per maximal
# ill-formed subpart, the rest kept.
set -u
tm=$TRAINMON
py=/usr/bin/python3
helper="$TM_ROOT/$BUILD/tests/helpers/utf8_writer"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -x "$helper" ] || { echo "no $helper (make $BUILD/tests/helpers/utf8_writer)"; exit 77; }

run="$scratch/run"
mkdir "$run"
"$helper" "$run" || fail "utf8_writer"

out="$scratch/out"
mkdir "$out"
for f in rank0 pid77 system; do
    "$tm" dump "$run/$f.tmr" --json > "$out/dump-$f.jsonl" 2> "$scratch/err" ||
        { cat "$scratch/err"; fail "dump --json $f"; }
    "$tm" dump "$run/$f.tmr" > "$out/dump-$f.txt" 2> "$scratch/err" ||
        { cat "$scratch/err"; fail "dump $f"; }
done
"$tm" export "$run" --format jsonl -o "$out/export.jsonl" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "export jsonl"; }
"$tm" export "$run" --format csv -o "$out/export.csv" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "export csv"; }
"$tm" export "$run" --format chrome -o "$out/trace.json" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "export chrome"; }
"$tm" export "$run" --format tensorboard -o "$scratch/tb" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "export tensorboard"; }
"$tm" report "$run" --json > "$out/report.json" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "report --json"; }
"$tm" report "$run" --html "$out/report.html" > /dev/null 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "report --html"; }

# Strict UTF-8, by a second decoder where there is one.
if command -v iconv > /dev/null; then
    for f in "$out"/*; do
        iconv -f UTF-8 -t UTF-8 "$f" > /dev/null 2>&1 || fail "iconv: $(basename "$f") is not UTF-8"
    done
fi
for f in "$scratch"/tb/*/events.out.tfevents.*; do
    "$py" "$TM_ROOT/tests/e2e/tbread.py" "$f" > "$f.jsonl" || fail "tensorboard reader refused $f"
done

"$py" - "$out" "$scratch/tb" <<'PY' || fail "outputs"
import csv, glob, io, json, os, sys
out, tb = sys.argv[1], sys.argv[2]

def fix(b):  # what every writer must print for these bytes
    return b.decode("utf-8", "replace")

HOST = fix(b"gpu\xff\xfe-\xc3\xa9")
ROLE = fix(b"py\xff")
TAG = fix(b"tag\xc0\xaf\xff-\xe2\x82")
PHASE = fix(b"ph\xed\xa0\x80se")
PHASE2 = fix(b"q\"uo\x01te\xc3\xa9")
EVNAME = fix(b"ev\xff")
EVJSON = fix(b'{"k":"v\xfe\xf4\x90\x80\x80"}')
OPHASE = fix(b"fwd\xff")
SNAP = fix(b"oom\xf8\x88.pickle")
COMM_LABELS = fix(b"pid=77,comm=py\xff\xc3")
UNIT = fix(b"ratio\xff")
CMD = ["python", fix(b"tr\xe2\x82ain.py"), fix(b"--name=\xff")]
assert TAG == "tag\ufffd\ufffd\ufffd-\ufffd", TAG  # the oracle itself

def text(name):
    with open(os.path.join(out, name), "rb") as f:
        return f.read().decode("utf-8")  # strict: raises on a bad byte

def lines(name):
    return [json.loads(l) for l in text(name).splitlines()]

# dump --json: one object per line; the strings as the oracle says.
d = lines("dump-rank0.jsonl")
assert d[0]["type"] == "header" and d[0]["host"] == HOST, d[0]
got = {(o.get("type"), o.get("name") or o.get("tag")) for o in d}
for want in [("phase", PHASE), ("phase", PHASE2), ("capture", TAG), ("event", EVNAME)]:
    assert want in got, (want, sorted(map(str, got)))
ev = [o for o in d if o["type"] == "event"][0]
assert ev["json"] == EVJSON, ev
oom = [o for o in d if o["type"] == "oom"][0]
assert oom["phase"] == OPHASE and oom["snapshot"] == SNAP, oom
d = lines("dump-pid77.jsonl")
assert d[0]["role"] == ROLE, d[0]
d = lines("dump-system.jsonl")
ser = [o for o in d if o["type"] == "series"]
assert any(o["labels"] == COMM_LABELS for o in ser), ser
assert any(o["unit"] == UNIT for o in ser), ser
for n in ("dump-rank0.txt", "dump-pid77.txt", "dump-system.txt"):
    t = text(n)
    assert all(c >= " " or c == "\n" for c in t), n  # one line per record
assert HOST in text("dump-rank0.txt")

# export jsonl
e = lines("export.jsonl")
assert any(o["kind"] == "capture" and o["tag"] == TAG for o in e)
assert any(o["kind"] == "phase" and o["name"] == PHASE for o in e)
assert any(o["kind"] == "event" and o["name"] == EVNAME and o["json"] == EVJSON for o in e)
assert any(o["kind"] == "oom" and o["phase"] == OPHASE and o["snapshot"] == SNAP for o in e)
assert any(o["kind"] == "sample" and o["labels"] == COMM_LABELS for o in e)
assert any(o["kind"] == "sample" and o["unit"] == UNIT for o in e)

# export csv: every row has the header's columns; the labels survive.
rows = list(csv.reader(io.StringIO(text("export.csv"), newline="")))
head = rows[0]
assert all(len(r) == len(head) for r in rows), "ragged csv"
assert any(r[5] == COMM_LABELS for r in rows[1:]), "comm label"
assert any(r[5].startswith("tag=" + TAG + ",") for r in rows[1:]), "capture tag"
assert any(",phase=" + OPHASE in r[5] for r in rows[1:]), "oom phase"

# chrome: one JSON document; process names carry the host, phases their names.
tr = json.loads(text("trace.json"))
names = {(x.get("ph"), x.get("name")) for x in tr["traceEvents"]}
assert ("X", PHASE) in names and ("X", PHASE2) in names, names
pn = [x["args"]["name"] for x in tr["traceEvents"] if x.get("name") == "process_name"]
assert any(HOST in n for n in pn), pn
assert any("sd\ufffd" in (x.get("name") or "") for x in tr["traceEvents"]), "disk counter"

# report --json: one object; host, command, rank label and evidence.
r = json.loads(text("report.json"))
assert HOST in r["run"]["hosts"], r["run"]["hosts"]
assert r["run"]["command"] == CMD, r["run"]["command"]
assert any(x["rank"] == ROLE for x in r["summary"]["ranks"]), r["summary"]["ranks"]
assert any(f["evidence"].get("phase") == OPHASE for f in r["findings"]), r["findings"]

# report --html: the strings there, escaped as HTML.
h = text("report.html")
assert HOST in h and CMD[1] in h and ROLE in h, "html strings"
assert "q&quot;uo" in h or "q&quot;uo" not in PHASE2, "html escaping"

# tensorboard: the reader decoded every tag as strict UTF-8; system tags
# carry the labels.
tags = set()
for f in glob.glob(os.path.join(tb, "*", "*.jsonl")):
    for l in open(f, encoding="utf-8"):
        for v in json.loads(l).get("summary", []):
            tags.add(v.get("tag"))
assert any(t and COMM_LABELS in t for t in tags), sorted(map(str, tags))[:20]
print("utf8_out: every output is UTF-8 and parses")
PY
echo "utf8_out: ok"
