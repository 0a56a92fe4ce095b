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
waits = []          # the test's own oracle: time spent in iter() and next()
t0 = time.perf_counter()
it = iter(loader)   # starts the workers: the first batch waits for that too
pending = time.perf_counter() - t0
while True:
    t0 = time.perf_counter()
    try:
        x = next(it)
    except StopIteration:
        break
    waits.append(time.perf_counter() - t0 + pending)
    pending = 0.0
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
    # sleeps overshoot on a busy machine, never undershoot; the job's own
    # clock is the oracle
    assert arranged * 0.95 <= mean <= arranged * 1.5
    assert mean == pytest.approx(sum(oracle) / len(oracle), rel=0.10)


def test_two_worker_loader_records_every_step_and_its_data_wait(tmp_path):
    oracle, steps = run_loop(tmp_path, 2)
    assert [s[2]["step"] for s in steps] == list(range(NBATCH))
    waits = [s[2]["data_wait_ns"] / 1e9 for s in steps]
    off = [(got, want) for got, want in zip(waits, oracle)
           if got != pytest.approx(want, rel=0.10, abs=0.003)]
    assert len(off) <= 1, off
    assert sum(waits) == pytest.approx(sum(oracle), rel=0.05)
    # Arranged: two workers each deliver a batch every BATCH*ITEM_S; after
    # the first batch the loop waits for the last one's arrival minus the
    # compute it did in between (the workers' start-up stagger, a few ms, is
    # small against the 0.76 s this covers).
    arranged = (NBATCH // 2 - 1) * BATCH * ITEM_S - (NBATCH - 1) * COMPUTE_S
    assert sum(waits[1:]) >= 0.9 * arranged
    assert sum(waits[1:]) == pytest.approx(sum(oracle[1:]), rel=0.05)
    # The step durations cover wait + compute.
    for s in steps[:-1]:
        d = s[2]
        assert d["end_ns"] - d["start_ns"] >= d["data_wait_ns"] + COMPUTE_S * 1e9 * 0.9


ITER_S = 0.15  # the IterableDataset's __iter__ (opening a shard) sleeps this long
EPOCHS = r"""
import json, os, time, torch, trainmon
from torch.utils.data import DataLoader, IterableDataset
trainmon.attach()
GAP = float(os.environ["GAP"])   # seconds between iter() and the first next()
class Shards(IterableDataset):
    # a shard opened in __iter__ (not a generator): iter(loader) runs it
    def __iter__(self):
        time.sleep(%(iter_s)f)
        return iter([torch.full((4,), float(i)) for i in range(6)])
loader = DataLoader(Shards(), batch_size=2)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(3):
    it = iter(loader)
    time.sleep(GAP)
    for x in it:
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
trainmon.detach()
print(json.dumps({"steps": 9}))
"""


def epochs(tmp_path, gap):
    out = last_json(run_script(EPOCHS % dict(iter_s=ITER_S), tmp_path, env={"GAP": str(gap)}).stdout)
    steps = [s[2] for s in records(main_file(tmp_path), "step")]
    assert len(steps) == out["steps"]
    return steps


def test_the_first_batch_of_an_epoch_waited_for_iter_too(tmp_path):
    """iter(loader) runs the Dataset's __iter__ (and starts worker
    processes, sends them the Dataset): the loop waits for that before its
    first batch, and the agent counts it in that batch's wait."""
    steps = epochs(tmp_path, 0.0)
    firsts = [steps[0], steps[3], steps[6]]  # each epoch's first step
    for s in firsts:
        assert s["data_wait_ns"] / 1e9 >= ITER_S, s
        assert s["data_wait_ns"] / 1e9 < ITER_S + 0.1, s
    for s in steps[1:3] + steps[4:6] + steps[7:]:
        assert s["data_wait_ns"] / 1e9 < 0.01, s
    # the step holds its wait (optimizer steps end the steps: the second
    # epoch's first step begins at the last step's end, before iter())
    for s in firsts[1:]:
        assert s["end_ns"] - s["start_ns"] >= s["data_wait_ns"], s


def test_an_iterator_used_later_is_no_wait_of_its_first_batch(tmp_path):
    """An iterator made 50 ms before its first next() (at set-up, or with
    work between): iter()'s time is not joined to that batch's wait."""
    steps = epochs(tmp_path, 0.05)
    for s in steps:
        assert s["data_wait_ns"] / 1e9 < 0.01, s
    # ...and the time is still in the step: iter() and the gap as compute
    assert steps[3]["end_ns"] - steps[3]["start_ns"] >= (ITER_S + 0.05) * 1e9


SHAPES = r"""
import json, os, time, torch, trainmon
from torch.utils.data import DataLoader, IterableDataset
import torch.utils.data.dataloader as dlm
SHAPE = os.environ["SHAPE"]
if SHAPE in ("slow_del", "newiter"):  # an old iterator whose __del__ (stopping workers) takes 60 ms
    orig_del = dlm._MultiProcessingDataLoaderIter.__del__
    def slow_del(self):
        time.sleep(0.06)
        orig_del(self)
    dlm._MultiProcessingDataLoaderIter.__del__ = slow_del
trainmon.attach()
class Shards(IterableDataset):
    def __iter__(self):
        time.sleep(%(iter_s)f)
        return iter([torch.full((4,), float(i)) for i in range(6)])
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if SHAPE == "zip":  # a step fed by two loaders: both iter() calls before the first batch
    la, lb = DataLoader(Shards(), batch_size=2), DataLoader(Shards(), batch_size=2)
    for epoch in range(3):
        for xa, xb in zip(la, lb):
            (model(xa).sum() + model(xb).sum()).backward()
            opt.step()
            opt.zero_grad()
elif SHAPE == "break":  # no backward: steps end at the next batch; epochs broken off
    loader = DataLoader(Shards(), batch_size=2)
    it = None
    for epoch in range(3):
        it = iter(loader)        # the old iterator goes after the new one is made
        for k in range(2):
            x = next(it)
            time.sleep(0.01)
elif SHAPE in ("newiter", "persist"):  # `next(iter(loader))` in the loop: an iterator each batch
    loader = DataLoader([torch.ones(4)] * 40, batch_size=2, num_workers=1,
                        persistent_workers=SHAPE == "persist")  # persist: iter() resets it
    for k in range(6):
        model(next(iter(loader))).sum().backward()
        opt.step()
        opt.zero_grad()
elif SHAPE == "short":  # `for x in loader` over epochs of one batch: an iterator each, run out
    loader = DataLoader([torch.ones(4)] * 2, batch_size=2, num_workers=1)
    for epoch in range(6):
        for x in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
elif SHAPE == "peek":  # a batch looked at before the loop (its shape), then epochs of it
    loader = DataLoader([torch.ones(4)] * 8, batch_size=2, num_workers=1)
    print(next(iter(loader)).shape)
    time.sleep(0.05)  # building the rest of the model
    with open(os.environ["LOOP_T"], "w") as f:
        f.write(str(time.monotonic_ns()))
    for epoch in range(2):
        for x in loader:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
elif SHAPE == "scoring":  # next(iter(loader)) without a backward pass: 30 ms of work a batch
    loader = DataLoader([torch.ones(4)] * 40, batch_size=2, num_workers=1)
    for k in range(6):
        x = next(iter(loader))
        time.sleep(0.03)
else:  # slow_del: one worker over a plain list, epochs broken off after 2 batches
    loader = DataLoader([torch.ones(4)] * 40, batch_size=2, num_workers=1)
    it = None
    for epoch in range(3):
        it = iter(loader)
        for k in range(2):
            model(next(it)).sum().backward()
            opt.step()
            opt.zero_grad()
trainmon.detach()
print(json.dumps({"done": True}))
"""


def shape(tmp_path, name):
    run_script(SHAPES % dict(iter_s=ITER_S), tmp_path, env={"SHAPE": name})
    return [s[2] for s in records(main_file(tmp_path), "step")]


def test_zip_of_two_loaders_waits_for_both_iters_once(tmp_path):
    """zip(a, b) calls iter(a) and iter(b) before the first batch: the
    step's wait counts from iter(a), both calls once."""
    steps = shape(tmp_path, "zip")
    assert len(steps) == 9, steps
    for s in (steps[0], steps[3], steps[6]):
        assert 2 * ITER_S <= s["data_wait_ns"] / 1e9 < 2 * ITER_S + 0.1, s
    for s in steps[1:3] + steps[4:6] + steps[7:]:
        assert s["data_wait_ns"] / 1e9 < 0.01, s


def test_a_broken_off_epochs_step_ends_where_the_next_iter_began(tmp_path):
    """A loop without a backward pass breaks off its epoch with `it =
    iter(loader)`: the old iterator goes after the new one was made.  Its
    last step ends at that iter() (not after it: the two steps would
    overlap, iter() counted in both), and the new epoch's first waits for
    it."""
    steps = shape(tmp_path, "break")
    assert len(steps) == 6, steps
    for a, b in zip(steps, steps[1:]):
        assert a["end_ns"] <= b["start_ns"] + 1000, (a, b)
    for k in (2, 4):
        assert steps[k]["data_wait_ns"] / 1e9 >= ITER_S, steps[k]
        assert (steps[k - 1]["end_ns"] - steps[k - 1]["start_ns"]) / 1e9 < ITER_S, steps[k - 1]


def test_an_old_iterators_shutdown_after_iter_is_part_of_the_wait(tmp_path):
    """`it = iter(loader)` over a broken-off epoch of a loader with workers:
    the old iterator stops its workers in __del__ after the new iter()
    (60 ms here, 20-30 ms for 4 real ones), and the first batch still
    counts from iter(), that time included."""
    steps = shape(tmp_path, "slow_del")
    assert len(steps) == 6, steps
    for k in (2, 4):
        assert steps[k]["data_wait_ns"] / 1e9 >= 0.06, steps[k]


def test_an_iterator_dropped_after_its_batch_stops_its_workers_in_the_wait(tmp_path):
    """`next(iter(loader))` inside the loop: the iterator is dropped as its
    batch comes back, and its __del__ stops the worker its iter() started
    (60 ms here): the loop's time on its loader, so the batch's wait, not
    the step's compute."""
    steps = shape(tmp_path, "newiter")
    # one step a batch, the first too: its fetch, forward, backward and
    # optimizer step (the first batch was a loader step of its own, its
    # compute the next: 7 steps for 6)
    assert [s["boundary"] for s in steps] == [3] * 6, steps  # optimizer
    assert all(s["batches"] == 1 and s["micro_batches"] == 1 for s in steps), steps
    for s in steps[1:]:
        assert s["data_wait_ns"] / 1e9 >= 0.06, s


def test_a_batch_peeked_at_before_the_loop_is_in_no_step(tmp_path):
    """`next(iter(loader))` before the loop (a batch's shape, a model's
    summary) trains nothing: neither a step of its own (it was one: a step
    more than the loop's, and the loop's first, with its workers' start,
    judged) nor part of the loop's first step (which then ran from it over
    the job's set-up).  The loop's first step is the warm-up."""
    loop_t = tmp_path / "loop_t"
    run_script(SHAPES % dict(iter_s=ITER_S), tmp_path, env={"SHAPE": "peek",
                                                            "LOOP_T": str(loop_t)})
    steps = [s[2] for s in records(main_file(tmp_path), "step")]
    assert [s["boundary"] for s in steps] == [3] * 8, steps  # 2 epochs of 4 batches
    assert all(s["batches"] == 1 for s in steps), steps
    # the first step begins at the loop's iter(), after the set-up
    assert steps[0]["start_ns"] >= int(loop_t.read_text()), steps[0]


@pytest.mark.parametrize("name", ["newiter", "persist", "short"])
def test_a_batch_from_an_iterator_made_for_it_is_flagged(tmp_path, name):
    """TM_STEP_NEW_ITER (16): the batch came from an iter() made just
    before it while the iterator before had not run out: `next(iter(loader))`
    (its iterator dropped, or with persistent workers reset), not a loop
    over epochs of one batch, whose iterators each end in StopIteration."""
    steps = [s for s in shape(tmp_path, name) if s["boundary"] == 3]
    flagged = [s["step"] for s in steps if s["flags"] & 16]
    if name == "short":
        assert steps and not flagged, steps
    else:  # all but the first (no iterator before it)
        assert len(steps) >= 5 and flagged == [s["step"] for s in steps[1:]], steps


def test_next_iter_without_a_backward_pass_keeps_its_work_in_its_steps(tmp_path):
    """A loop without a backward pass ends a step at the next fetch: a batch
    dropped with its iterator at once is in use (after the first), not
    broken off, so its step runs to the next fetch, 30 ms of work and all."""
    steps = [s for s in shape(tmp_path, "scoring")]
    later = steps[1:]
    assert len(later) >= 4, steps
    for s in later[:-1]:  # (the last is closed at exit)
        assert (s["end_ns"] - s["start_ns"]) / 1e9 >= s["data_wait_ns"] / 1e9 + 0.03, s
