"""The step model on loops that fetch ahead of the backward pass, as the
frameworks do (docs/DIAGNOSIS.md "Prefetched batches"), without the
frameworks: accelerate's DataLoaderShard fetches batch k+1 before it
yields batch k; the HF Trainer with gradient accumulation fetches the 4
batches of a step before it runs any; its evaluation loop fetches with
grad enabled (no_grad only around the forward)."""
from conftest import main_file, records, run_script

PREFETCH = r"""
import torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
ACCUM = %(accum)d
def one_ahead(loader):                 # accelerate's DataLoaderShard.__iter__
    it = iter(loader)
    cur = next(it)
    for nxt in it:
        yield cur
        cur = nxt
    yield cur
ds = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
batches = one_ahead(DataLoader(ds, batch_size=4))
for step in range(8):
    group = [next(batches) for _ in range(ACCUM)]   # the Trainer's get_batch_samples
    for x, y in group:
        (torch.nn.functional.mse_loss(model(x), y) / ACCUM).backward()
    opt.step(); opt.zero_grad()
    if step %% 4 == 3:                              # eval: fetched with grad enabled
        model.eval()
        for vx, vy in one_ahead(DataLoader(ds, batch_size=64)):   # 4 batches
            with torch.no_grad():
                model(vx)
        model.train()
"""


def run(tmp_path, accum):
    run_script(PREFETCH % dict(accum=accum), tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    return [f for f in steps if f["phase"] == 1], [f for f in steps if f["phase"] == 2]


def test_a_batch_fetched_one_ahead_is_no_loader_step(tmp_path):
    train, evals = run(tmp_path, 1)
    assert [f["step"] for f in train] == list(range(8)), train
    assert all(f["boundary"] == 3 and f["micro_batches"] == 1 for f in train), train
    # the batch fetched ahead joins the first step, after that one per step
    assert [f["batches"] for f in train] == [2, 1, 1, 1, 1, 1, 1, 1], train
    assert len(evals) == 8 and all(f["batches"] == 1 for f in evals), evals


def test_an_accumulation_group_fetched_first_is_one_step_with_its_batches(tmp_path):
    train, evals = run(tmp_path, 4)
    assert [f["step"] for f in train] == list(range(8)), train
    assert all(f["boundary"] == 3 and f["micro_batches"] == 4 for f in train), train
    assert sum(f["batches"] for f in train) == 8 * 4 + 1  # one fetched ahead
    assert all(f["batches"] >= 4 for f in train[:-1]), train
    assert all(f["data_wait_ns"] > 0 for f in train)
    # the eval runs (grad enabled at the fetch) are eval batches, no more
    assert len(evals) == 8 and all(f["batches"] == 1 for f in evals), evals
