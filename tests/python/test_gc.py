"""Python's garbage collector (docs/DIAGNOSIS.md, gc.pauses): attach()
puts the agent's C callback into gc.callbacks and detach() takes it out.
Every collection is counted and timed per generation (gc.totals, once, at
exit); a full one, or any of 1 ms or more, is a gc.pause event with its
duration, generation, the steps written so far and whether the training
thread made it, whether it was the job's own gc.collect() (the glue wraps
it) and whether it fell inside a checkpoint save; at most 50 a second
(for full ones and for the others each); only into a file the process has
open (one that records nothing gets none).  The callback never raises into
the collector, whatever it is called with, and a forked child writes no
pause into the parent's file."""
import json

from conftest import last_json, main_file, records, run_script

PAUSES = r"""
import gc, io, json, os, time, torch, trainmon
import trainmon._trainmon as c
orig_collect = gc.collect
trainmon.attach()
registered = c.gc_callback in gc.callbacks and gc.collect is not orig_collect
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model(torch.randn(4, 8)).sum().backward()      # a first step: the record file is open
opt.step()
opt.zero_grad()
heap = [[i] for i in range(300_000)]          # a heap a full collection walks: automatic ones


class Collects:                                # a save whose pickling collects
    def __reduce__(self):
        gc.collect()
        return (int, (1,))

mine = []                                      # the job's own timer, after ours
gc.callbacks.append(lambda phase, info: mine.append((phase, info["generation"],
                                                     time.perf_counter())))
full = []
for i in range(1, 12):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    if i == 5:
        torch.save(Collects(), io.BytesIO())
    if i in (3, 7):
        t = time.perf_counter()
        gc.collect()
        full.append(time.perf_counter() - t)
gc.disable()
gc.collect()                                   # the job's own, automatic collection off
gc.enable()
# called as no collector calls it: never raises, never records
bad = []
for args in [(), ("stop",), ("stop", None), (1, 2), ("start", {}), ("stop", {"generation": "x"}),
             ("stop", {"generation": 7}), ("stop", []), ("bogus", {})]:
    try:
        c.gc_callback(*args)
    except BaseException as e:
        bad.append(repr(e))
pid = os.fork()
if pid == 0:                                   # a forked child: no pause of its
    gc.collect()
    os._exit(0)
os.waitpid(pid, 0)
trainmon.detach()
removed = c.gc_callback not in gc.callbacks and gc.collect is orig_collect
print(json.dumps({"registered": registered, "removed": removed, "full": full, "bad": bad,
                  "pid": os.getpid(), "child": pid, "mine": len(mine)}))
"""


def test_collections_are_timed_as_events_and_totals(tmp_path):
    p = run_script(PAUSES, tmp_path)
    out = last_json(p.stdout)
    assert out["registered"] and out["removed"], out
    assert out["bad"] == [], out["bad"]
    assert out["mine"] > 0  # the job's own callback still ran
    f = main_file(tmp_path)
    ev = [(t, r["name"], json.loads(r["json"])) for _, t, r in records(f, "event")
          if r["name"].startswith("gc.")]
    pauses = [e for _, n, e in ev if n == "gc.pause"]
    totals = [e for _, n, e in ev if n == "gc.totals"]
    # building the heap after the first step: automatic full collections
    assert [e for e in pauses if e["gen"] == 2 and e["auto"] and e["step"] == 1], pauses
    # the job's gc.collect() calls (the wrapper tells them): full, on the
    # training thread, at the steps written by then (after steps 0-3, 0-5
    # inside a save, 0-7, and 12 with automatic collection off), their time
    # as the job timed them (the pause is inside the job's bracket)
    own = [e for e in pauses if not e["auto"]]
    assert [(e["gen"], e["step"], e["in_save"]) for e in own] == [
        (2, 4, False), (2, 6, True), (2, 8, False), (2, 12, False)], own
    loop = [own[0], own[2]]
    for e, t in zip(loop, out["full"]):
        assert e["train"], e
        assert 0 < e["dur_s"] <= t, (e, t)
        assert e["dur_s"] > 0.5 * t, (e, t)  # a 300,000-object walk is most of it
    assert not [e for e in pauses if e["in_save"] and e["auto"]], pauses
    # the forked child's collection is not in the parent's file (its writer
    # is the parent's: appends there are -ECHILD, and the callback asks)
    assert len([e for e in pauses if e["gen"] == 2 and e["step"] == 12]) == 1, pauses
    # totals: once (shutdown runs at detach and at exit), every collection
    assert len(totals) == 1, totals
    t = totals[0]
    assert t["collections"][2] >= 3 and sum(t["collections"]) > t["collections"][2]
    assert t["time_s"][2] >= sum(e["dur_s"] for e in loop) - 1e-6
    assert t["max_s"] >= max(e["dur_s"] for e in pauses) - 1e-6
    assert t["threshold"][0] > 0 and t["frozen"] == 0 and t["dropped"] == 0
    assert t["events"] == len(pauses), (t, len(pauses))


FLOOD = r"""
import gc, json, trainmon
import trainmon._trainmon as c
import torch
trainmon.attach()
m = torch.nn.Linear(2, 2)                   # one step: the record file is open
opt = torch.optim.SGD(m.parameters(), lr=0.1)
m(torch.ones(1, 2)).sum().backward(); opt.step()
gc.freeze()
for i in range(400):                  # 400 full collections in well under a second
    c.gc_callback("start", {"generation": 2})
    c.gc_callback("stop", {"generation": 2, "collected": 0, "uncollectable": 0})
print(json.dumps({"frozen": gc.get_freeze_count()}))
"""


def test_pauses_beyond_fifty_a_second_are_counted_not_written(tmp_path):
    p = run_script(FLOOD, tmp_path)
    out = last_json(p.stdout)
    f = main_file(tmp_path)
    ev = [(r["name"], json.loads(r["json"])) for _, _, r in records(f, "event")
          if r["name"].startswith("gc.")]
    pauses = [e for n, e in ev if n == "gc.pause"]
    (tot,) = [e for n, e in ev if n == "gc.totals"]
    assert 50 <= len(pauses) <= 100, len(pauses)  # 50 a second (the loop may cross one)
    assert tot["dropped"] >= 300 and tot["events"] + tot["dropped"] >= 400, tot
    assert tot["events"] == len(pauses)
    assert 0.5 * out["frozen"] < tot["frozen"] <= out["frozen"]  # some died since


NOTHING = r"""
import gc, os, torch, trainmon
trainmon.attach()
heap = [[i] for i in range(100_000)]
for _ in range(3):
    gc.collect()              # no step, no record: torchrun's agent, a spawned worker
import json
print(json.dumps({"files": sorted(os.listdir(os.environ["TRAINMON_RUN_DIR"]))}))
"""


def test_a_process_that_records_nothing_gets_no_file_for_its_collections(tmp_path):
    p = run_script(NOTHING, tmp_path)
    assert last_json(p.stdout) == {"files": []}, p.stdout
    assert not [f for f in tmp_path.iterdir() if f.suffix == ".tmr"], list(tmp_path.iterdir())


# Whether a collection began inside the loop's own batch preparation
# (prep): a loop without a DataLoader, two micro-batches a step, waiting
# for its device after the optimizer step (a stand-in
# torch.cuda.synchronize: 3 ms asleep).  The job's gc.collect() at six
# places: inside that wait (left out of the preparation span: no), in the
# first micro-batch's preparation (yes), in its forward (no), in the
# second micro-batch's preparation (yes: the span armed at the first
# backward's end, which the next forward ends), after the last backward
# before the optimizer step (yes: that span is the loop's preparation too,
# where nanochat fetches its next batch; before, it was taken back by a
# gc.unprep event when the span met the optimizer step), and in an eval
# after model.eval() (no).  The accounting takes only the "yes" ones out of
# the preparation it reads (src/lib/runsum_gc.c); before, it took every
# pause's overlap with [start, start + prep_ns].
PREP = r"""
import gc, json, time, torch
where = {}
def sync(device=None):
    time.sleep(0.003)
    if where.get("sync"):
        gc.collect()
torch.cuda.synchronize = sync
import trainmon
trainmon.attach()
class Net(torch.nn.Linear):
    def forward(self, x):
        if where.get("forward"):
            gc.collect()
        return super().forward(x)
m = Net(8, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
X = torch.randn(256, 8)
marks = {6: "sync", 8: "prep0", 10: "forward", 12: "prep1", 13: "postbwd", 14: "eval"}
for i in range(16):
    if marks.get(i) == "eval":
        m.eval()
        gc.collect()
        with torch.no_grad():
            m(X[:8])
        m.train()
    for micro in range(2):
        where = {"sync": marks.get(i) == "sync", "forward": marks.get(i) == "forward" and micro == 0}
        if marks.get(i) == "prep%d" % micro:
            gc.collect()
        x = X[i:i + 8] * 2
        m(x).sum().backward()
    if marks.get(i) == "postbwd":
        gc.collect()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
trainmon.detach()
print(json.dumps({"ok": True}))
"""


def test_a_pause_says_whether_it_began_in_the_loops_preparation(tmp_path):
    run_script(PREP, tmp_path)
    ev = [(t, r["name"], json.loads(r["json"])) for _, t, r in
          records(main_file(tmp_path), "event") if r["name"] in ("gc.pause", "gc.unprep")]
    own = [(t, e) for t, n, e in ev if n == "gc.pause" and not e["auto"]]
    assert [e["prep"] for _, e in own] == [False, True, False, True, True, False], own
    # none taken back: the spans they began in each met a forward or the
    # optimizer step (a gc.unprep is for a span that met neither)
    unprep = [(t, e) for t, n, e in ev if n == "gc.unprep"]
    assert not unprep, unprep
