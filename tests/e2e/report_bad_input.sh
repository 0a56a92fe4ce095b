#!/usr/bin/env bash
# trainmon report on bad input: a missing or empty run directory is one line
# and exit 1; a recording with a corrupted middle and a truncated tail is
# reported from what is intact, each damage named on stderr.
set -u
tm=$TRAINMON
py=${PYTHON:-/usr/bin/python3}
root=${TM_ROOT:-$(pwd)}
scratch=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# A missing directory.
"$tm" report /nonexistent/run > "$scratch/out" 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] || fail "missing dir: exit $rc, want 1"
[ "$(cat "$scratch/err")" = "trainmon: /nonexistent/run: No such file or directory" ] ||
    { cat "$scratch/err"; fail "missing dir: message"; }
[ ! -s "$scratch/out" ] || fail "missing dir: something on stdout"

# An empty directory.
mkdir "$scratch/empty"
"$tm" report "$scratch/empty" --json > "$scratch/out" 2> "$scratch/err"; rc=$?
[ $rc -eq 1 ] || fail "empty dir: exit $rc, want 1"
[ "$(cat "$scratch/err")" = "trainmon: $scratch/empty: no trainmon record files" ] ||
    { cat "$scratch/err"; fail "empty dir: message"; }

# A real recording: the sampler (watch) and a training process with a
# DataLoader of 2 workers, instrumented by `import trainmon`.
run="$scratch/run"
mkdir "$run"
"$tm" watch -o "$run" -n 30 -i 0.1 > /dev/null 2>&1 &
wpid=$!
cat > "$scratch/train.py" <<'PY'
import sys, time
import torch
import trainmon
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self): return 80
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((8,), float(i))

trainmon.attach(sys.argv[1])
mon = trainmon.Monitor()
for x in DataLoader(Slow(), batch_size=2, num_workers=2):
    mon.capture("step")
    time.sleep(0.002)
PY
PYTHONPATH="${TM_PYTHONPATH:-$root/python}" "$py" "$scratch/train.py" "$run" > "$scratch/train.out" 2>&1 ||
    { cat "$scratch/train.out"; fail "the training script failed"; }
wait $wpid
rank=$(cd "$run" && ls pid*.tmr | head -n1)
[ -n "$rank" ] || fail "no pid*.tmr in the recording"

"$tm" report "$run" --json > "$scratch/good.json" 2> "$scratch/err"; rc=$?
[ $rc -eq 0 ] || { cat "$scratch/err"; fail "intact run: exit $rc"; }
[ ! -s "$scratch/err" ] || { cat "$scratch/err"; fail "intact run: stderr not empty"; }
good_steps=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"]["steps"])' \
    "$scratch/good.json") || fail "intact run: JSON does not parse"
[ "$good_steps" -ge 30 ] || fail "intact run: $good_steps steps, want >= 30"

# The same recording, damaged: records in the middle of the rank file get
# garbage, and the file is cut in the middle of its last record.
cp -r "$run" "$scratch/bad"
f="$scratch/bad/$rank"
"$py" - "$f" <<'PY' > "$scratch/where" || fail "could not damage the file"
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
block = data[4096:4096 + 65536]
end = len(block.rstrip(b"\0"))          # end of the records in block 0
mid = 4096 + 16 + 8 * ((end // 2) // 8)  # a record boundary is 8-aligned
# garbage over 300 bytes from inside some record: two or three records
# (steps, captures and the agent's events are 100-200 bytes each), so at
# least one step whatever else the agent wrote around it
data[mid + 30:mid + 330] = b"X" * 300
open(path, "wb").write(bytes(data[:4096 + end - 5]))
print(mid)
PY
"$tm" report "$scratch/bad" > "$scratch/out" 2> "$scratch/err"; rc=$?
[ $rc -eq 0 ] || { cat "$scratch/err"; fail "damaged run: exit $rc, want 0"; }
grep -q "^trainmon: $f: damaged record at offset [0-9]*, skipped\$" "$scratch/err" ||
    { cat "$scratch/err"; fail "damaged run: the damage is not named"; }
grep -q "^trainmon: $f: torn last record" "$scratch/err" ||
    { cat "$scratch/err"; fail "damaged run: the torn tail is not named"; }
grep -q "^Findings" "$scratch/out" || fail "damaged run: no report"
grep -q "damaged record at offset" "$scratch/out" || fail "damaged run: report does not list the damage"

"$tm" report "$scratch/bad" --json > "$scratch/bad.json" 2> /dev/null
"$py" - "$scratch/bad.json" "$good_steps" <<'PY' || fail "damaged run: JSON"
import json, sys
d = json.load(open(sys.argv[1]))
good = int(sys.argv[2])
steps = d["summary"]["steps"]
assert 0 < steps < good, (steps, good)
assert any("damaged record at offset" in x["note"] for x in d["damage"]), d["damage"]
assert any(f["torn_tail"] for f in d["run"]["files"])
assert d["findings"], "no findings"
PY
echo "report_bad_input: ok"
