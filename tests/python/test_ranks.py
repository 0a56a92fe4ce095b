"""DDP: rank and world size come from the environment and each rank writes
its own file (rank<R>.tmr) in the shared run directory; two ranks running
at the same time do not touch each other's records."""
import os
import subprocess
import sys

from conftest import PYDIR, records

LOOP = r"""
import time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 24
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.ones(4) * i
trainmon.attach()
mon = trainmon.Monitor()
for step, x in enumerate(DataLoader(D(), batch_size=2)):
    mon.capture("r%s-step%d" % (__import__("os").environ["RANK"], step))
"""


def test_each_rank_writes_its_own_file_with_its_rank(tmp_path):
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   TRAINMON_RUN_DIR=str(tmp_path),
                   PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
        env.pop("TRAINMON_ATTACH", None)
        procs.append(subprocess.Popen([sys.executable, "-c", LOOP], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".tmr") and not f.startswith("worker-"))
    assert files == ["rank0.tmr", "rank1.tmr"], files
    import trainmon
    for rank in (0, 1):
        path = os.path.join(str(tmp_path), "rank%d.tmr" % rank)
        hdr = trainmon.read_records(path)[0]
        assert hdr["rank"] == rank, hdr
        caps = [r for r in records(path) if r[0] == "capture"]
        tags = [r[2]["tag"] for r in caps if r[2].get("tag", "").startswith("r")]
        # Exactly this rank's captures, all 12 steps, none of the other's.
        assert tags == ["r%d-step%d" % (rank, s) for s in range(12)], tags
