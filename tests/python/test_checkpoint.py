"""Checkpoint saves (docs/DIAGNOSIS.md, checkpoint.blocking): the agent
wraps torch.save.  A save on the training thread stops the loop: its time
is taken out of the steps (it is neither the next step's batch preparation
nor compute) and written as a checkpoint.save event with its time, the
bytes and the step; a save in another thread is marked as not blocking; the
job's own result and exceptions pass through unchanged."""
import json

import pytest

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


EVAL_AND_MIDSTEP = r"""
import io, json, os, tempfile, time, torch, trainmon
trainmon.attach()
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
big = {"pad": torch.zeros(8_000_000)}           # 32 MB: a save of some ms
path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")

def busy(s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s:
        pass

saves = {}
for i in range(40):
    if i == 20:   # validate, save the best, back to training (no DataLoader)
        model.eval()
        with torch.no_grad():
            model(torch.randn(8, 64)); busy(0.01)
        t = time.perf_counter(); torch.save(big, f=path); saves["eval"] = time.perf_counter() - t
        model.train()
    busy(0.003)                                  # batch preparation, CPU
    model(torch.randn(8, 64)).square().mean().backward()
    if i == 30:   # a save between the backward pass and the optimizer step
        t = time.perf_counter(); torch.save(big, path); saves["mid"] = time.perf_counter() - t
    opt.step(); opt.zero_grad()

class Tell(io.BytesIO):
    def tell(self):
        raise OSError("no tell")
torch.save({"w": 1}, Tell())                     # a file object whose tell() fails
print(json.dumps(saves))
"""


def test_a_save_in_an_eval_span_or_mid_step_is_neither_eval_nor_step_time(tmp_path):
    p = run_script(EVAL_AND_MIDSTEP, tmp_path)
    saves = last_json(p.stdout)
    f = main_file(tmp_path)
    steps = [r for _, _, r in records(f, "step")]
    train = {r["step"]: r for r in steps if r["phase"] == 1}
    evals = [r for r in steps if r["phase"] == 2]
    assert min(saves.values()) > 0.008, saves
    # the eval span (10 ms of work) does not hold the save after it
    assert len(evals) == 1, evals
    ev_s = (evals[0]["end_ns"] - evals[0]["start_ns"]) / 1e9
    assert ev_s < 0.010 + 0.5 * saves["eval"], (ev_s, saves)
    # the step with a save after its backward pass keeps its preparation
    # (3 ms, measured from its start to its first forward) and not the save
    s30 = train[30]
    assert s30["prep_ns"] >= 2.5e6 and s30["data_wait_ns"] == s30["prep_ns"], s30
    assert (s30["end_ns"] - s30["start_ns"]) / 1e9 < 0.5 * saves["mid"] + 0.03, (s30, saves)
    ev = [json.loads(r["json"]) for _, _, r in records(f, "event")
          if r["name"] == "checkpoint.save"]
    assert len(ev) == 3 and all(e["blocking"] and e["ok"] and e["via"] == "torch.save"
                                for e in ev), ev
    assert ev[0]["bytes"] == ev[1]["bytes"] > 32_000_000 and ev[0]["to"] == "file", ev
    # tell() that raises: bytes unknown, the save itself ok, in memory
    assert ev[2]["bytes"] is None and ev[2]["to"] == "memory", ev[2]


NESTED_DETACH = r"""
import io, json, torch, trainmon
trainmon.attach()

class Obj:
    def __reduce__(self):          # a save inside a save (pickling runs user code)
        torch.save([1, 2], io.BytesIO())
        return (list, ())

buf = io.BytesIO(b"x" * 100)
buf.seek(100)
torch.save({"o": Obj()}, buf)      # into a stream at position 100: its own bytes only
n = buf.tell() - 100
trainmon.detach()
after = torch.save is torch.serialization.save and not getattr(torch.save, "_trainmon", False)
torch.save([3], io.BytesIO())      # detached: nothing recorded
print(json.dumps({"n": n, "restored": after}))
"""


def test_a_save_inside_a_save_is_one_and_detach_restores_torch_save(tmp_path):
    p = run_script(NESTED_DETACH, tmp_path)
    out = last_json(p.stdout)
    ev = [json.loads(r["json"]) for _, _, r in records(main_file(tmp_path), "event")
          if r["name"] == "checkpoint.save"]
    assert len(ev) == 1 and ev[0]["bytes"] == out["n"], (ev, out)
    assert out["restored"]


DCP = r"""
import json, os, sys, tempfile, time, torch, trainmon
if os.environ.get("DCP_FIRST"):        # imported before attach(): wrapped at attach
    from torch.distributed.checkpoint import save as early_save   # bound before attach()
trainmon.attach()                      # else imported after: the finder wraps on import
import torch.distributed.checkpoint as dcp
if not os.environ.get("DCP_FIRST"):
    early_save = dcp.save
from torch.distributed.checkpoint import state_dict_saver
torch.manual_seed(0)
model = torch.nn.Linear(256, 256)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
d = tempfile.mkdtemp()
saves, sizes, files = [], [], []
for i in range(20):
    model(torch.randn(8, 256)).square().mean().backward()
    opt.step()
    opt.zero_grad()
    if (i + 1) % 5 == 0:
        state = {"model": model.state_dict(), "optim": opt.state_dict(),
                 "pad": torch.zeros(2_000_000)}
        cid = os.path.join(d, "step%d" % i)
        t = time.perf_counter()
        if i + 1 == 10:                  # the older API: a FileSystemWriter
            dcp.save_state_dict(state, dcp.FileSystemWriter(cid), no_dist=True)
        elif i + 1 == 15:                # a writer with threads of its own, by the early name
            early_save(state, storage_writer=dcp.FileSystemWriter(cid, thread_count=3))
        else:
            dcp.save(state, checkpoint_id=cid)
        saves.append(time.perf_counter() - t)
        names = sorted(os.listdir(cid))
        files.append(names)
        sizes.append(sum(os.path.getsize(os.path.join(cid, n)) for n in names))
# async_save: staged on this thread, written by its save in a thread
t = time.perf_counter()
fut = dcp.async_save({"model": model.state_dict()}, checkpoint_id=os.path.join(d, "async"))
async_s = time.perf_counter() - t
fut.result()
async_bytes = sum(os.path.getsize(os.path.join(d, "async", n)) for n in os.listdir(os.path.join(d, "async")))
# the job's own error passes through as DCP's (no checkpoint_id, no writer)
try:
    dcp.save({"w": torch.ones(3)})
    err = None
except Exception as e:
    err = [type(e).__name__, str(e)[:80]]
out = {"saves": saves, "sizes": sizes, "files": files, "async_s": async_s,
       "async_bytes": async_bytes, "err": err,
       "same": dcp.async_save is state_dict_saver.async_save,
       "wrapped": [getattr(f, "_trainmon", False) for f in
                   (state_dict_saver._save_state_dict, dcp.async_save)],
       "name": state_dict_saver._save_state_dict.__name__}
trainmon.detach()
out["restored"] = [not hasattr(f, "_trainmon") for f in
                   (dcp.save, state_dict_saver._save_state_dict, dcp.async_save,
                    state_dict_saver.async_save, dcp.save_state_dict)]
out["same_after"] = dcp.async_save is state_dict_saver.async_save
print(json.dumps(out))
"""


@pytest.mark.parametrize("first", ["", "1"], ids=["imported_after", "imported_before"])
def test_a_torch_distributed_checkpoint_save_is_one_save_with_its_shards_bytes(tmp_path, first):
    """torch.distributed.checkpoint.save writes a directory of shards with
    a torch.save per tensor inside: one checkpoint.save event per call
    (not one per tensor, also from the writer's own threads and by a name
    bound before attach()), its time the call's, its bytes this process's
    shards and metadata; async_save is a blocking event for its staging
    and one background save (its thread's dcp.save) with the bytes."""
    torch = pytest.importorskip("torch")
    try:
        import torch.distributed.checkpoint as dcp
    except ImportError:
        pytest.skip("torch %s has no torch.distributed.checkpoint" % torch.__version__)
    if not hasattr(dcp, "async_save"):
        pytest.skip("torch %s has no torch.distributed.checkpoint.async_save" % torch.__version__)
    p = run_script(DCP, tmp_path, env={"PYTHONWARNINGS": "ignore", "DCP_FIRST": first})
    out = last_json(p.stdout)
    assert all(out["wrapped"]) and out["same"] and out["name"] == "_save_state_dict", out
    assert all(out["restored"]) and out["same_after"], out
    f = main_file(tmp_path)
    ev = [json.loads(r["json"]) for _, _, r in records(f, "event")
          if r["name"] == "checkpoint.save"]
    sync = [e for e in ev
            if e["via"] == "torch.distributed.checkpoint" and e["blocking"] and e["ok"]]
    assert len(sync) == 4, ev  # 4 calls, each one save (each wrote 6+ tensors)
    for e, want_s, want_b, names in zip(sync, out["saves"], out["sizes"], out["files"]):
        assert any(n.endswith(".distcp") for n in names) and ".metadata" in names, names
        assert e["bytes"] == want_b, (e, want_b, names)
        assert e["to"] == "file"
        assert abs(e["dur_s"] - want_s) <= 0.1 * want_s + 0.002, (e, want_s)
    assert [e["step"] for e in sync] == [5, 10, 15, 20]
    staged = [e for e in ev if e["via"] == "torch.distributed.checkpoint.async_save"]
    assert len(staged) == 1 and staged[0]["blocking"] and staged[0]["bytes"] is None, staged
    assert staged[0]["dur_s"] <= out["async_s"] + 0.002
    bg = [e for e in ev if not e["blocking"]]
    assert len(bg) == 1 and bg[0]["via"] == "torch.distributed.checkpoint", bg
    assert bg[0]["bytes"] == out["async_bytes"], (bg, out["async_bytes"])
    # the failed call (no writer): its own error, one event that says not ok
    assert out["err"] is not None and out["err"][0] == "RuntimeError", out["err"]
    failed = [e for e in ev if not e["ok"]]
    assert len(failed) == 1 and failed[0]["via"] == "torch.distributed.checkpoint", ev
    # and nothing else: no torch.save of a piece of one, on any thread
    assert len(ev) == 4 + 1 + 1 + 1, ev


DCP_BYTES = r"""
import json, os, sys, tempfile, trainmon
d = tempfile.mkdtemp()
def put(name, n):
    with open(os.path.join(d, name), "wb") as f:
        f.write(b"x" * n)
put("__0_0.distcp", 100); put("__0_1.distcp", 20); put("__1_0.distcp", 300)
put(".metadata", 7); put("__1.metadata", 5); put("model.safetensors", 999)
os.symlink("/etc/passwd", os.path.join(d, "__1_1.distcp"))   # never followed
os.mkdir(os.path.join(d, "__1_2.distcp"))                      # no file
out = {"r0": trainmon._dcp_bytes(d, 0, 0), "r1": trainmon._dcp_bytes(d, 1, 0),
       "r1_coord": trainmon._dcp_bytes(d, 1, 1), "r2": trainmon._dcp_bytes(d, 2, 0),
       "missing": trainmon._dcp_bytes(os.path.join(d, "no"), 0, 0)}
class W:  # a FileSystemWriter's path
    path = d
out["target_no_dist"] = list(trainmon._dcp_target(({}, W(), None, 1, True), {}))[1:]
out["target_id"] = trainmon._dcp_target(({},), {"checkpoint_id": d})[0] == d
# a Hugging Face checkpoint folder: files, a subfolder (FSDP's model), a link
h = tempfile.mkdtemp()
os.makedirs(os.path.join(h, "pytorch_model_fsdp_0", "deeper", "deepest"))
for name, n in (("model.safetensors", 1000), ("optimizer.pt", 300),
                ("pytorch_model_fsdp_0/__0_0.distcp", 50),
                ("pytorch_model_fsdp_0/deeper/x", 4), ("pytorch_model_fsdp_0/deeper/deepest/y", 9)):
    with open(os.path.join(h, name), "wb") as f:
        f.write(b"x" * n)
os.symlink("/etc", os.path.join(h, "etc"))
out["tree"] = trainmon._tree_bytes(h)
out["tree_missing"] = trainmon._tree_bytes(os.path.join(h, "no"))
print(json.dumps(out))
"""


def test_a_checkpoints_bytes_are_its_own_files(tmp_path):
    """This process's files of a torch.distributed.checkpoint directory: its
    shards __R_N.distcp (R its index in the save's plan) and the metadata
    it writes (.metadata on the coordinator, __R.metadata); a link or a
    directory by a shard's name is not read; no shard of its own (another
    writer's names) or no directory: unknown (-1); no_dist: index 0."""
    out = last_json(run_script(DCP_BYTES, tmp_path).stdout)
    assert out["r0"] == 100 + 20 + 7, out
    assert out["r1"] == 300 + 5, out           # .metadata is the coordinator's (0)
    assert out["r1_coord"] == 300 + 5 + 7, out
    assert out["r2"] == -1 and out["missing"] == -1, out
    assert out["target_no_dist"] == [0, 1] and out["target_id"], out
    # the Trainer's folder: 3 levels (the deepest file left out), no link
    assert out["tree"] == 1000 + 300 + 50 + 4 and out["tree_missing"] == -1, out
