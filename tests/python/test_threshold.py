"""Thresholds that act: a data-wait share threshold fires its callback on
the training thread once per crossing."""
from conftest import last_json, run_script

LOOP = r"""
import json, threading, time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
state = {"item_s": 0.0}
class D(Dataset):
    def __len__(self): return 10**6
    def __getitem__(self, i):
        time.sleep(state["item_s"])
        return torch.zeros(2)
fired = []
def cb(ev):
    fired.append({"step": ev.step, "value": ev.value, "main": threading.current_thread() is threading.main_thread()})
def bad(ev):
    raise RuntimeError("callback bug")
trainmon.on_threshold("data_wait_fraction", above=0.5, callback=cb, window=2)
trainmon.on_threshold("trainmon_data_wait_fraction", above=0.5, callback=bad, window=2)
# regimes: (data s per step, compute s per step, steps)
regimes = [(0.001, 0.010, 8), (0.010, 0.001, 8), (0.001, 0.010, 8), (0.010, 0.001, 8)]
plan = [r for r in regimes for _ in range(r[2])]
it = iter(DataLoader(D(), batch_size=1, num_workers=0))
for step, (data_s, compute_s, _) in enumerate(plan):
    state["item_s"] = data_s
    next(it)
    time.sleep(compute_s)
next(it)
print(json.dumps({"fired": fired}))
"""


def test_data_wait_threshold_fires_once_per_crossing(tmp_path):
    p = run_script(LOOP, tmp_path)
    fired = last_json(p.stdout)["fired"]
    assert len(fired) == 2, fired
    # Crossings happen in the two input-bound regimes (steps 8..15, 24..31).
    assert 8 <= fired[0]["step"] <= 12 and 24 <= fired[1]["step"] <= 28, fired
    assert all(f["value"] > 0.5 and f["main"] for f in fired)


def test_a_raising_callback_is_reported_once_and_not_propagated(tmp_path):
    p = run_script(LOOP, tmp_path)
    assert p.stderr.count("callback bug") == 1, p.stderr
    assert "threshold callback for trainmon_data_wait_fraction raised RuntimeError" in p.stderr


def test_an_unknown_metric_is_refused_at_set_up():
    import pytest
    import trainmon
    with pytest.raises(ValueError):
        trainmon.on_threshold("no_such_metric", above=1, callback=print)


STOP = r"""
import json, sys, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
how = sys.argv[1] if len(sys.argv) > 1 else "exit"
fired = []
def stop(ev):
    fired.append(ev.step)
    if len(fired) == 1:
        if how == "exit":
            sys.exit(3)            # a job stopping itself from a callback
        raise KeyboardInterrupt    # as a Ctrl-C landing in trainmon's code would
trainmon.on_threshold("step_time_seconds", above=0.0, callback=stop, window=1)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=2)
where, caught, done = None, [], 0
for (x,) in loader:
    try:
        where = "backward"
        model(x).sum().backward()
        where = "step"
        opt.step()
        opt.zero_grad()
        where = "next"
        done += 1
    except KeyboardInterrupt:
        caught.append([where, done])
    except SystemExit as e:
        print(json.dumps({"exit": e.code, "where": where, "done": done, "fired": fired}))
        sys.stdout.flush()
        raise
print(json.dumps({"caught": caught, "done": done, "fired": fired,
                  "steps": trainmon.stats()["steps_closed"]}))
"""


def test_a_callbacks_sys_exit_stops_the_job_from_the_step_that_fired_it(tmp_path):
    """SystemExit is the job's, not trainmon's error: a callback that stops
    the job stops it, raised from optimizer.step() (the call that ended the
    step) once torch's step has returned; nothing is said of it."""
    p = run_script("import sys; sys.argv = ['x', 'exit']\n" + STOP, tmp_path, check=False)
    assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
    out = last_json(p.stdout)
    assert out["exit"] == 3 and out["where"] == "step" and len(out["fired"]) == 1, out
    assert "step boundary" not in p.stderr and "trainmon:" not in p.stderr, p.stderr


def test_a_keyboard_interrupt_in_trainmons_code_reaches_the_job_which_can_go_on(tmp_path):
    """A KeyboardInterrupt raised while the glue's boundary work runs (a
    Ctrl-C landing there) is the job's: raised from optimizer.step(), the
    step itself done; a job that catches it goes on, and trainmon with it."""
    p = run_script("import sys; sys.argv = ['x', 'kbi']\n" + STOP, tmp_path)
    out = last_json(p.stdout)
    assert len(out["caught"]) == 1 and out["caught"][0][0] == "step", out
    assert out["done"] == 31 and out["steps"] >= 31, out  # 32 batches, one step cut short
    assert len(out["fired"]) == 1, out  # the value stays above: no new crossing
    assert "step boundary" not in p.stderr, p.stderr
