"""Checkpoint saves (docs/DIAGNOSIS.md, checkpoint.blocking): the agent
wraps torch.save.  A save on the training thread stops the loop: its time
is taken out of the steps (it is neither the next step's batch preparation
nor compute) and written as a checkpoint.save event with its time, the
bytes and the step; a save in another thread is marked as not blocking; the
job's own result and exceptions pass through unchanged."""
import json

from conftest import last_json, main_file, records, run_script

SAVES = r"""
import io, json, os, sys, tempfile, threading, time, torch, trainmon
trainmon.attach()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
state = {"model": model.state_dict(), "pad": torch.zeros(10_000_000)}   # 40 MB
d = tempfile.mkdtemp()
path = os.path.join(d, "ckpt.pt")
saves, sizes = [], []
for i in range(30):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.002:      # batch preparation, CPU
        pass
    x = torch.randn(8, 64)
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    if (i + 1) % 10 == 0:                        # nanoGPT's checkpoint
        t = time.perf_counter()
        torch.save(state, path)
        saves.append(time.perf_counter() - t)
        sizes.append(os.path.getsize(path))
buf = io.BytesIO()
torch.save({"w": torch.ones(1000)}, buf)
# a save in a background thread (async checkpointing)
th = threading.Thread(target=torch.save, args=(state, path + ".bg"))
th.start(); th.join()
# the job's exception passes through as torch's own
errs = []
for fn in (torch.save, torch.save.__wrapped__):
    try:
        fn({"w": 1}, os.path.join(d, "no", "such", "dir.pt"))
    except Exception as e:
        errs.append([type(e).__name__, str(e)])
print(json.dumps({"saves": saves, "sizes": sizes, "bio": buf.tell(), "errs": errs,
                  "wrapped": torch.save is torch.serialization.save,
                  "name": torch.save.__name__}))
"""


def test_saves_are_no_step_time_and_each_is_an_event(tmp_path):
    p = run_script(SAVES, tmp_path)
    out = last_json(p.stdout)
    f = main_file(tmp_path)
    steps = [r for _, _, r in records(f, "step") if r["phase"] == 1]
    ev = [json.loads(r["json"]) for _, _, r in records(f, "event")
          if r["name"] == "checkpoint.save"]
    assert len(steps) == 30, len(steps)
    # the three checkpoints on the training thread: blocking, their bytes
    # the file's, numbered with the steps begun (10, 20, 30)
    blk = [e for e in ev if e["blocking"] and e["step"] in (10, 20, 30) and e["ok"]]
    assert [e["step"] for e in blk[:3]] == [10, 20, 30], ev
    assert [e["bytes"] for e in blk[:3]] == out["sizes"], (ev, out)
    for e, job in zip(blk, out["saves"]):
        assert e["dur_s"] <= job + 0.002 and e["dur_s"] >= 0.5 * job, (e, job)
        assert e["cpu_s"] is None or 0 <= e["cpu_s"] <= e["dur_s"] + 1e-3
    # the steps after a save do not hold it: their preparation is the
    # 2 ms loop, not the save (each took the job more than 5 ms)
    after = [s for s in steps if s["step"] in (10, 20)]
    assert min(out["saves"]) > 0.005, out
    for s in after:
        assert s["data_wait_ns"] < 0.5 * min(out["saves"]) * 1e9, (s, out["saves"])
        assert s["end_ns"] - s["start_ns"] < 0.5 * min(out["saves"]) * 1e9 + 20e6, s
    # a save into a file object: its position is the bytes
    bio = [e for e in ev if e["bytes"] == out["bio"]]
    assert len(bio) == 1 and bio[0]["ok"], ev
    # the background thread's save does not block the loop
    assert sum(1 for e in ev if not e["blocking"]) == 1, ev
    # the failing save: the same exception as torch's own, recorded as not ok
    assert out["errs"][0] == out["errs"][1], out["errs"]
    assert sum(1 for e in ev if not e["ok"]) == 1, ev
    # one wrapper for torch.save and torch.serialization.save, torch's name
    assert out["wrapped"] and out["name"] == "save"


def test_a_save_before_any_step_on_the_main_thread_blocks(tmp_path):
    code = r"""
import io, torch, trainmon
trainmon.attach()
torch.save(torch.zeros(10), io.BytesIO())
"""
    run_script(code, tmp_path)
    ev = [json.loads(r["json"]) for _, _, r in records(main_file(tmp_path), "event")
          if r["name"] == "checkpoint.save"]
    assert len(ev) == 1 and ev[0]["blocking"] and ev[0]["step"] == 0, ev
