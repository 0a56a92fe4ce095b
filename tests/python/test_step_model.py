"""The step model (docs/DIAGNOSIS.md): a step ends at the optimizer step,
else at a backward pass, else at the next DataLoader batch; eval batches are
recorded apart; a process that records nothing leaves no file."""
import os

from conftest import last_json, main_file, records, run_script

ACCUM_EVAL = r"""
import json, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
n = 0
for i, (x, y) in enumerate(DataLoader(ds, batch_size=4)):   # 16 micro-batches
    torch.nn.functional.mse_loss(model(x), y).backward()
    if (i + 1) % 4 == 0:
        opt.step(); opt.zero_grad(); n += 1
        model.eval()
        with torch.no_grad():                                  # 2 eval batches
            for vx, vy in DataLoader(ds, batch_size=32):
                model(vx)
        model.train()
print(json.dumps({"steps": n, "stats": trainmon.stats()}))
"""


def test_accumulated_micro_batches_make_one_step_and_eval_is_apart(tmp_path):
    p = run_script(ACCUM_EVAL, tmp_path)
    out = last_json(p.stdout)
    steps = records(main_file(tmp_path), "step")
    train = [f for _, _, f in steps if f["phase"] == 1]
    evals = [f for _, _, f in steps if f["phase"] == 2]
    assert out["steps"] == 4 and len(train) == 4, steps
    assert [f["step"] for f in train] == [0, 1, 2, 3]
    assert all(f["boundary"] == 3 and f["micro_batches"] == 4 and f["batches"] == 4
               for f in train), train
    assert len(evals) == 8 and all(f["batches"] == 1 and f["micro_batches"] == 0 for f in evals)
    # the eval run after step k is numbered with the next training step
    assert sorted({f["step"] for f in evals}) == [1, 2, 3, 4]
    # a training step does not span the eval run before it
    for prev, cur in zip(train, train[1:]):
        run = [e for e in evals if prev["end_ns"] <= e["start_ns"] < cur["end_ns"]]
        assert run and cur["start_ns"] >= max(e["end_ns"] for e in run)
    assert out["stats"]["steps_closed"] == 4


MANUAL = r"""
import json, time, torch, trainmon
trainmon.attach()
model = torch.nn.Linear(4, 1)
X, Y = torch.randn(512, 4), torch.randn(512, 1)
for i in range(70):          # past the 64 backward steps held back
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.002:   # batch preparation, CPU
        pass
    x, y = X[i:i + 8], Y[i:i + 8]
    torch.nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
print(json.dumps({"steps": 70}))
"""


def test_manual_sgd_steps_end_at_backward_and_time_their_batch_preparation(tmp_path):
    run_script(MANUAL, tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert len(steps) == 70 and [f["step"] for f in steps] == list(range(70))
    assert all(f["boundary"] == 2 and f["micro_batches"] == 1 and f["batches"] == 0
               for f in steps)
    # every step after the first: ~2 ms of preparation, CPU-bound, as its data wait
    later = steps[1:]
    assert all(f["prep_ns"] >= 1.8e6 and f["data_wait_ns"] == f["prep_ns"] for f in later), later[:3]
    # CPU work: the thread is on a CPU for most of it (the median step: a
    # busy machine may take the core away from a few)
    shares = sorted(f["prep_cpu_ns"] / f["prep_ns"] for f in later)
    assert shares[len(shares) // 2] >= 0.5, shares


def test_a_process_that_records_nothing_leaves_no_file(tmp_path):
    # The torchrun agent and helper scripts import torch with TRAINMON_ATTACH=1.
    run_script("import torch, trainmon; trainmon.attach(); print('{}')", tmp_path,
               env={"TRAINMON_ATTACH": "1"})
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmr")] == []


LOADER_BREAK = r"""
import json, time, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
model = torch.nn.Linear(4, 1)
n = 0
for (x,) in DataLoader(TensorDataset(torch.randn(400, 4)), batch_size=4):
    model(x)                  # no backward: the loader ends the steps
    time.sleep(0.002)
    n += 1
    if n == 10:
        break
time.sleep(0.3)               # after the loop: not part of the last step
print(json.dumps({"steps": n}))
"""


def test_a_loop_that_breaks_keeps_its_last_step(tmp_path):
    run_script(LOADER_BREAK, tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert [f["step"] for f in steps] == list(range(10)), steps
    assert all(f["boundary"] == 1 and not f["flags"] for f in steps)
    last = steps[-1]
    assert last["end_ns"] - last["start_ns"] < 0.2e9  # ended at the break, not at exit
