"""Steps and data wait recorded by attach() against what a real DataLoader
loop arranged: a dataset that sleeps a known time per item."""
import pytest

from conftest import last_json, main_file, records, run_script

ITEM_S = 0.02     # each __getitem__ sleeps this long
BATCH = 2
NBATCH = 40
COMPUTE_S = 0.002  # the loop's "training" per step

LOOP = r"""
import json, time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
trainmon.attach()
class Slow(Dataset):
    def __len__(self): return %(n)d
    def __getitem__(self, i):
        time.sleep(%(item)f)
        return torch.full((4,), float(i))
loader = DataLoader(Slow(), batch_size=%(batch)d, num_workers=%(nw)d)
waits = []          # the test's own oracle: time spent in next()
it = iter(loader)
while True:
    t0 = time.perf_counter()
    try:
        x = next(it)
    except StopIteration:
        break
    waits.append(time.perf_counter() - t0)
    time.sleep(%(compute)f)
print(json.dumps({"waits": waits}))
"""


def run_loop(tmp_path, nw):
    code = LOOP % dict(n=NBATCH * BATCH, item=ITEM_S, batch=BATCH, nw=nw, compute=COMPUTE_S)
    out = last_json(run_script(code, tmp_path).stdout)
    steps = records(main_file(tmp_path), "step")
    return out["waits"], steps


def test_single_process_loader_records_every_step_and_its_data_wait(tmp_path):
    oracle, steps = run_loop(tmp_path, 0)
    assert [s[2]["step"] for s in steps] == list(range(NBATCH))
    assert steps[-1][2]["flags"] & 1  # the last step ended with the loader exhausted
    waits = [s[2]["data_wait_ns"] / 1e9 for s in steps]
    mean = sum(waits) / len(waits)
    arranged = BATCH * ITEM_S
    assert mean == pytest.approx(arranged, rel=0.10)
    assert mean == pytest.approx(sum(oracle) / len(oracle), rel=0.10)


def test_two_worker_loader_records_every_step_and_its_data_wait(tmp_path):
    oracle, steps = run_loop(tmp_path, 2)
    assert [s[2]["step"] for s in steps] == list(range(NBATCH))
    waits = [s[2]["data_wait_ns"] / 1e9 for s in steps]
    for got, want in zip(waits, oracle):
        assert got == pytest.approx(want, rel=0.10, abs=0.003)
    # Arranged: two workers each deliver a batch every BATCH*ITEM_S; after
    # the first batch the loop waits for the last one's arrival minus the
    # compute it did in between (the workers' start-up stagger, a few ms, is
    # small against the 0.76 s this covers).
    arranged = (NBATCH // 2 - 1) * BATCH * ITEM_S - (NBATCH - 1) * COMPUTE_S
    assert sum(waits[1:]) == pytest.approx(arranged, rel=0.10)
    # The step durations cover wait + compute.
    for s in steps[:-1]:
        d = s[2]
        assert d["end_ns"] - d["start_ns"] >= d["data_wait_ns"] + COMPUTE_S * 1e9 * 0.9
