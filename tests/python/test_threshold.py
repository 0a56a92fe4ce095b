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
