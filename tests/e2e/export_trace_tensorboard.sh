#!/usr/bin/env bash
# trainmon export --format chrome|tensorboard on a real run directory (a
# `watch -o` recording plus a rank file written the way the extension
# records one): the trace is valid JSON with step slices per rank that nest
# per thread and counters, and the compilations on the "stops" thread (a
# crafted id kept out of the name, an unreadable duration and another
# thread's compilation not drawn); the TensorBoard files are read back by the
# independent reader (tests/e2e/tbread.py) with per-step scalars.
set -u
tm=$TRAINMON
root=${TM_ROOT:-$(pwd)}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run="$scratch/run"
"$tm" watch --gpu none "$scratch" -o "$run" -n 3 -i 0.1 > /dev/null 2>&1 || fail "watch failed"
# A real (tiny) training loop, recorded by the Python package as rank 0.
RANK=0 WORLD_SIZE=1 TRAINMON_RUN_DIR="$run" PYTHONPATH="$root/python" /usr/bin/python3 - <<'PY' ||
import time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.ones(8) * i
trainmon.attach()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(D(), batch_size=2):
    with trainmon.phase("forward"):
        loss = model(x).sum()
    loss.backward(); opt.step(); opt.zero_grad()
# compile events as the agent writes them, and as nobody does: a crafted
# id, an unreadable duration, another thread's (the last two not drawn)
import trainmon._trainmon as c
for js in ('{"dur_s":0.004,"training":true,"trigger":"DYNAMO","id":"0/1"}',
           '{"dur_s":0.002,"training":true,"id":"\\"}{<x>/9"}',
           '{"dur_s":1e400,"training":true,"id":"5/5"}',
           '{"dur_s":0.003,"training":false,"id":"7/0"}'):
    time.sleep(0.01)
    c.event("compile", js)
PY
    fail "the training loop failed"
ls "$run"/rank0.tmr > /dev/null || fail "no rank0.tmr"

"$tm" export "$run" --format chrome -o "$scratch/trace.json" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "chrome export failed"; }
/usr/bin/python3 - "$scratch/trace.json" <<'PY' || fail "chrome trace"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
steps = [e for e in ev if e.get("ph") == "X" and e["name"].startswith("step")]
assert len(steps) >= 20, len(steps)
assert any(e.get("ph") == "C" for e in ev), "no counters"
assert any(e.get("ph") == "M" and e["name"] == "process_name" for e in ev), "no process names"
# Times are microseconds near 1.8e15: a double keeps about 0.25 us, so a
# step that starts where the previous one ended may read 0.25 us early.
eps = 1.0
tracks = {}
for e in ev:
    if e.get("ph") == "X":
        tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], -e["dur"], e["dur"]))
for key, sl in tracks.items():
    stack = []
    for ts, _, dur in sorted(sl):
        while stack and ts >= stack[-1] - eps:
            stack.pop()
        assert not stack or ts + dur <= stack[-1] + eps, ("does not nest", key, ts, dur)
        stack.append(ts + dur)
stops = [e["name"] for e in ev if e.get("ph") == "X" and e.get("tid") == 3]
assert stops == ["torch.compile 0/1", "torch.compile"], stops
print(f"chrome: {len(ev)} events, {len(steps)} step slices, {len(tracks)} tracks nest, stops {stops}")
PY

"$tm" export "$run" --format tensorboard -o "$scratch/tb" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "tensorboard export failed"; }
f=$(ls "$scratch"/tb/rank0/events.out.tfevents.* 2>/dev/null | head -n1)
[ -n "$f" ] || { ls -R "$scratch/tb"; fail "no event file for rank 0"; }
/usr/bin/python3 "$root/tests/e2e/tbread.py" "$f" > "$scratch/ev.jsonl" || fail "the reader refused $f"
/usr/bin/python3 - "$scratch/ev.jsonl" <<'PY' || fail "tensorboard scalars"
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
assert ev[0].get("file_version") == "brain.Event:2", ev[0]
tags = {}
for e in ev[1:]:
    for v in e.get("values", e.get("summary", [])) if isinstance(e.get("values", e.get("summary")), list) else []:
        tags.setdefault(v["tag"], []).append(e["step"])
if not tags:  # the reader's shape: one scalar per event
    for e in ev[1:]:
        tags.setdefault(e["tag"], []).append(e["step"])
assert any("step_time" in t for t in tags), tags.keys()
st = next(t for t in tags if "step_time" in t)
assert len(tags[st]) >= 20, (st, len(tags[st]))
print("tensorboard:", {t: len(s) for t, s in tags.items()})
PY
echo ok
