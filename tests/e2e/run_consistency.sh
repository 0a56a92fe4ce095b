#!/usr/bin/env bash
# One number, four readers: a real torch job with two ranks runs under
# `trainmon run --serve ADDR --alert ... --on-alert CMD`; at its end, for each
# rank, the report (`trainmon report --json`), /metrics of the exporter, the
# run.* alert inputs (the value an --on-alert command gets) and the job's own
# trainmon.stats() must give the same step count and the same data-wait
# fraction: all four take them from the one step accounting (steps.c), the
# live ones through the one follower (follow.c).  Each rank also saves a
# checkpoint and collects once, timing both itself: /metrics' stop totals
# (trainmon_run_stop_seconds_total) must agree with those timings.
#
# How the alerts carry the final numbers: an alert says the value it fired
# with, so the rules are made to fire only once a rank has finished.  Every
# batch comes at once except the last, which takes 2.5 s to load: until the
# last step completes a rank's data-wait fraction is low (under 0.1: the
# steps are 20 ms of compute, the batches are ready), and with it the
# fraction jumps to about 0.8 (still above 0.4 if a loaded machine made
# every other step last 100 ms).
# `run.data_wait_fraction > 0.4` therefore fires at the first sample after
# the last step, with the final value (no step follows it), and
# `run.steps >= N` fires at the same sample with the final count.  The
# alert window (TM_FOLLOW_WINDOW, 100 steps) holds all N-1 judged steps, so
# the windowed fraction is the whole run's.
set -u
root=${TM_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${BUILD:-build}
tm=${TRAINMON:-$root/$BUILD/trainmon}
PY=/usr/bin/python3
N=30 # steps per rank
[ -x "$tm" ] || { echo "FAIL: $tm not built"; exit 1; }
command -v curl >/dev/null || { echo "skipped: curl missing (make deps)"; exit 77; }
"$PY" -c 'import torch' 2>/dev/null || { echo "skipped: torch not importable by $PY (make deps)"; exit 77; }

scratch=$(mktemp -d /tmp/trainmon-consistency.XXXXXX)
runpid=
cleanup() {
    touch "$scratch/gate" 2>/dev/null
    [ -n "$runpid" ] && wait "$runpid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    tail -n 30 "$scratch/run.err" 2>/dev/null
    exit 1
}
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$scratch/alerts"

# The job: a DataLoader with one worker, a linear model, SGD.  It writes
# its stats() when its loop is done, then waits (in a last phase with no
# steps) until the test has scraped /metrics.
cat > "$scratch/job.py" <<'EOF'
import gc, json, os, sys, time
import torch, trainmon
from torch.utils.data import DataLoader, Dataset
n, out, gate = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rank = int(os.environ["RANK"])

class D(Dataset):
    def __len__(self):
        return n
    def __getitem__(self, i):
        time.sleep(2.5 if i == n - 1 else 0.001)
        return torch.ones(8) * i

model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
timed = {}
for i, x in enumerate(DataLoader(D(), batch_size=1, num_workers=1)):
    loss = model(x).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)
    if i == 10:    # a checkpoint the loop waits for, timed by the job
        ckpt = {"model": model.state_dict(), "big": torch.ones(8 << 20)}
        t = time.perf_counter()
        torch.save(ckpt, out + ".pt")
        timed["save_s"] = time.perf_counter() - t
    if i == 15:    # a full collection of the job's own
        t = time.perf_counter()
        gc.collect()
        timed["collect_s"] = time.perf_counter() - t
with open(out + ".tmp", "w") as f:
    json.dump(dict(trainmon.stats(), timed=timed), f)
os.rename(out + ".tmp", out)
deadline = time.time() + 180
while not os.path.exists(gate) and time.time() < deadline:
    time.sleep(0.05)
EOF

"$tm" run -o "$scratch/run" -i 0.25 --serve "127.0.0.1:$port" \
    --alert "run.steps >= $N" --alert 'run.data_wait_fraction > 0.4' \
    --on-alert "cat > $scratch/alerts/\$\$.json" -- \
    bash -c 'pids=
             for r in 0 1; do
                 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r "$0" "$1" "$2" "$3/stats-$r.json" "$3/gate" &
                 pids="$pids $!"
             done
             for p in $pids; do wait $p || exit 1; done' "$PY" "$scratch/job.py" "$N" "$scratch" \
    > "$scratch/run.out" 2> "$scratch/run.err" &
runpid=$!

# Both ranks done (their stats written) and the four alerts in.
for _ in $(seq 1200); do
    [ -s "$scratch/stats-0.json" ] && [ -s "$scratch/stats-1.json" ] &&
        [ "$(find "$scratch/alerts" -name '*.json' -size +0 | wc -l)" -ge 4 ] && break
    kill -0 "$runpid" 2>/dev/null || fail "trainmon run ended before the job was done"
    sleep 0.1
done
[ -s "$scratch/stats-1.json" ] || fail "the ranks did not finish in 120 s"
sleep 0.5 # the --on-alert commands write as they read

# /metrics once it has settled: the exporter (its own 1 s interval) has
# read every rank's last records when two scrapes 1.5 s apart agree.
scrape() { curl -sf "http://127.0.0.1:$port/metrics" | grep '^trainmon_run_' | grep -v age_seconds; }
prev=$(scrape)
for _ in $(seq 20); do
    sleep 1.5
    cur=$(scrape)
    [ -n "$cur" ] && [ "$cur" = "$prev" ] && break
    prev=$cur
done
[ -n "$cur" ] && [ "$cur" = "$prev" ] || fail "/metrics did not settle"
printf '%s\n' "$cur" > "$scratch/metrics.txt"

touch "$scratch/gate"
wait "$runpid"; rc=$?
runpid=
[ $rc -eq 0 ] || fail "trainmon run exited $rc"
"$tm" report --json "$scratch/run" > "$scratch/report.json" 2> "$scratch/report.err" ||
    fail "trainmon report --json: $(cat "$scratch/report.err")"

"$PY" - "$scratch" "$N" <<'EOF' || fail "the four readers disagree"
import glob, json, re, sys
d, n = sys.argv[1], int(sys.argv[2])

report = {r["rank"]: r for r in json.load(open(d + "/report.json"))["summary"]["ranks"]}

metrics = {}
for line in open(d + "/metrics.txt"):
    m = re.match(r'(\w+)\{run="run",rank="(\w+)"(?:,stop="(\w+)")?\} (\S+)$', line.strip())
    if m:
        key = (m.group(1), m.group(2)) + ((m.group(3),) if m.group(3) else ())
        metrics[key] = float(m.group(4))

alerts = {}
for p in glob.glob(d + "/alerts/*.json"):
    a = json.load(open(p))
    assert a["status"] == "firing", a
    key = (a["metric"], a["labels"]["rank"])
    assert key not in alerts, ("fired twice", a)
    assert a["labels"]["run"] == "run", a
    alerts[key] = a["value"]

stats = {r: json.load(open("%s/stats-%s.json" % (d, r))) for r in ("0", "1")}

# Steps: exactly.  Data-wait fraction: to 1e-6, what the printed forms
# carry (the report prints 6 significant digits, the alert JSON 10,
# /metrics 15); the four compute it from the same step records (the job's
# own copy of them in stats()) in the same order.
TOL = 1e-6
for r in ("0", "1"):
    steps = {
        "report": report[r]["steps"],
        "/metrics": metrics[("trainmon_run_steps_total", r)],
        "alert": alerts[("run.steps", r)],
        "stats()": stats[r]["steps_counted"],
    }
    frac = {
        "report": report[r]["data_wait_fraction"],
        "/metrics": metrics[("trainmon_run_data_wait_fraction", r)],
        "alert": alerts[("run.data_wait_fraction", r)],
        "stats()": stats[r]["data_wait_fraction"],
    }
    print("rank", r, "steps", steps, "data-wait fraction", frac)
    assert all(v == n for v in steps.values()), ("steps differ", r, steps)
    lo, hi = min(frac.values()), max(frac.values())
    assert hi - lo <= TOL, ("data-wait fractions differ", r, frac)
    assert 0.4 < lo < 1, ("the job did not wait as designed", r, frac)
    assert stats[r]["steps"] == n and stats[r]["steps_closed"] == n, stats[r]
print("ok: report, /metrics, alert inputs and stats() agree for both ranks")

# What stopped each rank's loop, on /metrics (the follower's totals of the
# agent's events), against the job's own timing of the calls: the one
# checkpoint save (the agent times torch.save inside the job's timing of
# it: not more, and not much less) and its full collection (automatic
# ones may add to the gc total: not less); no compilation (no torch.compile).
for r in ("0", "1"):
    timed = stats[r]["timed"]
    stop = {k: (metrics[("trainmon_run_stops_total", r, k)],
                metrics[("trainmon_run_stop_seconds_total", r, k)])
            for k in ("compile", "checkpoint", "gc")}
    print("rank", r, "stops", stop, "job's own timing", timed)
    assert stop["compile"] == (0, 0), stop
    n, s = stop["checkpoint"]
    assert n == 1 and 0.8 * timed["save_s"] - 0.005 <= s <= timed["save_s"], (stop, timed)
    n, s = stop["gc"]
    assert n >= 1 and s >= 0.8 * timed["collect_s"] - 0.005, (stop, timed)
# the report counts the same save (the rank whose saves took longest)
assert json.load(open(d + "/report.json"))["summary"]["checkpoints"] == 1
print("ok: /metrics' stops agree with the job's own timing of its save and collection")
EOF
echo ok
