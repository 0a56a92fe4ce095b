"""DataLoader workers (fork and spawn) never corrupt or duplicate the
parent's records; forked workers record their own batches."""
import os

from conftest import records, run_script

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
