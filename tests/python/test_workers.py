"""DataLoader workers (fork and spawn) never corrupt or duplicate the
parent's records; forked workers record their own batches."""
import os
import subprocess
import sys

from conftest import PYDIR, records, run_script

LOOP = r"""
import time, torch, trainmon
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset
class D(torch.utils.data.Dataset):
    def __init__(self): self.mon = trainmon.Monitor()
    def __len__(self): return 64
    def __getitem__(self, i):
        self.mon.capture("in-worker")   # refused in workers: must not land in the parent's file
        return torch.zeros(8)
if __name__ == "__main__":
    trainmon.attach()
    mon = trainmon.Monitor()
    for epoch in range(2):
        for x in DataLoader(D(), batch_size=4, num_workers=2, multiprocessing_context="%(ctx)s"):
            mon.capture("parent")
"""


def check_parent_file(tmp_path):
    # A spawned worker that unpickles the dataset's Monitor records into its
    # own pid<P>.tmr; the parent's file is the one with the steps.
    files = [os.path.join(tmp_path, f) for f in os.listdir(tmp_path)
             if f.endswith(".tmr") and not f.startswith("worker-")]
    with_steps = [f for f in files if records(f, "step")]  # records() asserts no damage
    assert len(with_steps) == 1, files
    path = with_steps[0]
    for f in files:
        if f != path:
            assert "parent" not in [c[2]["tag"] for c in records(f, "capture")]
    steps = records(path, "step")
    assert [s[2]["step"] for s in steps] == list(range(32))
    tags = [c[2]["tag"] for c in records(path, "capture")]
    assert tags.count("parent") == 32 and "in-worker" not in tags
    return path


def test_forked_workers_leave_the_parent_file_intact_and_write_their_own(tmp_path):
    run_script(LOOP % {"ctx": "fork"}, tmp_path)
    check_parent_file(tmp_path)
    wfiles = [f for f in os.listdir(tmp_path) if f.startswith("worker-")]
    assert len(wfiles) == 4  # 2 workers x 2 epochs
    batches = sum(len(records(os.path.join(tmp_path, f), "worker")) for f in wfiles)
    assert batches == 32


def test_spawned_workers_leave_the_parent_file_intact(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LOOP % {"ctx": "spawn"})
    run_script("import runpy; runpy.run_path(%r, run_name='__main__')" % str(script), tmp_path,
               timeout=300)
    check_parent_file(tmp_path)


MIXED = r"""
import torch, trainmon
import torch.utils.data._utils.fetch as F
from torch.utils.data import DataLoader, TensorDataset
hooked = lambda: bool(getattr(F._MapDatasetFetcher.__dict__["fetch"], "_trainmon", False))
class D(torch.utils.data.Dataset):
    def __len__(self): return 16
    def __getitem__(self, i):
        assert hooked(), "a forked worker times its batches through the fetch hook"
        return torch.zeros(8)
if __name__ == "__main__":
    trainmon.attach()
    assert hooked()
    n = 0
    for x in DataLoader(TensorDataset(torch.zeros(32, 8)), batch_size=4, num_workers=0):
        n += 1
        if n == 1:
            assert hooked()             # one batch back: the next fetch takes it out
    assert not hooked(), "the main process fetches through torch's own fetch"
    for x in DataLoader(D(), batch_size=4, num_workers=2, multiprocessing_context="fork"):
        pass
    assert not hooked()
    trainmon.detach()
    assert not hooked()
    trainmon.attach()
    assert hooked(), "attach() after detach() hooks the fetchers again"
"""


def test_the_main_process_fetches_unhooked_and_forked_workers_hooked(tmp_path):
    # The fetch hook costs the main process ~320 instructions a batch
    # (bench/agent_cost.py): it is taken out once the step model has the
    # batches, and a fork puts it back for the worker, which still records
    # every batch (worker records: 16 items / 4 = 4 batches over 2 workers).
    run_script(MIXED, tmp_path)
    wfiles = [f for f in os.listdir(tmp_path) if f.startswith("worker-")]
    assert len(wfiles) == 2
    assert sum(len(records(os.path.join(tmp_path, f), "worker")) for f in wfiles) == 4


SETS = r"""
import json, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
data = TensorDataset(torch.zeros(16, 8))
kw = dict(batch_size=4, num_workers=2, multiprocessing_context="%(ctx)s")
a = DataLoader(data, persistent_workers=True, **kw)   # FixMatch's two loaders
b = DataLoader(data, persistent_workers=True, **kw)
c = DataLoader(data, **kw)                            # new workers each epoch
for epoch in range(2):
    for _ in zip(a, b):
        pass
    for _ in c:
        pass
"""


def _sets(tmp_path):
    """{pid: (worker id, {sets its records carry})} of the workers' files"""
    out = {}
    for f in os.listdir(tmp_path):
        if f.startswith("worker-"):
            recs = [r for _, _, r in records(os.path.join(tmp_path, f), "worker")]
            assert recs and all(r["layout"] == 3 for r in recs), recs[:1]
            out[recs[0]["pid"]] = (recs[0]["worker"], {r.get("set") for r in recs})
    return out


def _check_sets(tmp_path):
    # Each worker process records one set, the iterator that started it
    # (worker_info.seed - id): both ids 0 and 1 of each iter(); two loaders
    # side by side, and each epoch of a loader without persistent workers,
    # have sets of their own.  a and b: 2 workers each for both epochs; c:
    # 2 a epoch.  8 processes, 4 sets of ids {0, 1}.
    procs = _sets(tmp_path)
    assert len(procs) == 8, procs
    assert all(len(s) == 1 and None not in s for _, s in procs.values()), procs
    by_set = {}
    for wid, s in procs.values():
        by_set.setdefault(next(iter(s)), []).append(wid)
    assert sorted(sorted(v) for v in by_set.values()) == [[0, 1]] * 4, by_set


def test_each_worker_records_the_set_that_started_it(tmp_path):
    run_script(SETS % {"ctx": "fork"}, tmp_path)
    _check_sets(tmp_path)


def test_a_spawned_worker_records_its_set_too(tmp_path, trainmon_bin):
    # (a spawned worker records under `trainmon run`, which has every
    # Python process of the job import trainmon)
    script = tmp_path / "sets.py"
    script.write_text("if __name__ == '__main__':\n" + "\n".join(
        "    " + l for l in (SETS % {"ctx": "spawn"}).strip().splitlines()))
    env = dict(os.environ, PYTHONPATH=PYDIR)
    env.pop("TRAINMON_ATTACH", None)
    run = tmp_path / "run"
    p = subprocess.run([trainmon_bin, "run", "-o", str(run), "--", sys.executable, str(script)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    _check_sets(run)
