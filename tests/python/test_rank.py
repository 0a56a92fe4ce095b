"""A process whose launcher sets no RANK learns its rank from the process
group (python/trainmon/__init__.py _learn_rank): torch.multiprocessing.spawn
(the PyTorch DDP tutorial's launcher) and Lightning's own DDP launcher pass
the rank to init_process_group, not through the environment.  Before, such
ranks were "pid<N>" processes: the report's rows, the cross-rank reading
of stalls (a rank's stall held the others) and the DataLoader workers'
match to their rank (every rank at -1 took every worker) went wrong.

Two processes by mp.spawn, each attach()ing, a DataLoader with a forked
worker.  With init_process_group before the first record, the record file
is made as rank<N>.tmr with the rank in its header; with a step first (the
file already made, as pid<N>.tmr), a process.rank event says it and the
reader applies it (src/lib/timeline.c part_late_rank).  The workers,
forked after, record the rank either way (worker-r<N>-<pid>.tmr)."""
import json
import os
import subprocess
import sys

from conftest import PYDIR, free_port, records

SCRIPT = r"""
import os, subprocess, sys, torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed import init_process_group as bound_init  # before attach

def work(rank, port, early):
    import trainmon
    trainmon.attach()
    m = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    if early == "early":                       # a step before the group: the file is made
        m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()
    init = bound_init if early == "bound" else dist.init_process_group
    init("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=2)
    if rank == 0:                              # a helper script the rank runs: no rank of its
        out = subprocess.run([sys.executable, "-c", "import os, trainmon; "
                              "print(trainmon._rank(), os.environ.get('TRAINMON_RANK'))"],
                             capture_output=True, text=True).stdout.split()
        print("helper", out, flush=True)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    # forked workers (a process mp.spawn started spawns its own by default:
    # fresh interpreters that attach only under `trainmon run`)
    for x, y in torch.utils.data.DataLoader(ds, batch_size=8, num_workers=1,
                                            multiprocessing_context="fork"):
        torch.nn.functional.mse_loss(m(x), y).backward(); opt.step(); opt.zero_grad()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(work, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


def _spawn(tmp_path, how, env=None):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    run = tmp_path / how
    e = dict(os.environ, PYTHONPATH=PYDIR + os.pathsep + os.environ.get("PYTHONPATH", ""),
             TRAINMON_RUN_DIR=str(run))
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TRAINMON_ATTACH", "TRAINMON_RANK",
              "SLURM_PROCID"):
        e.pop(k, None)
    e.update(env or {})
    p = subprocess.run([sys.executable, str(script), str(free_port()), how],
                       env=e, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    # the helper rank 0 ran took no rank of ours (TRAINMON_RANK is for the
    # workers multiprocessing spawns; a launcher's SLURM_PROCID is its own)
    helper = "helper ['%s', '%s']" % (e.get("SLURM_PROCID") or None,
                                      None if how == "bound" else 0)  # (learned at step 1)
    assert helper in p.stdout, (helper, p.stdout)
    return run


def _headers(run):
    import trainmon
    return {f: trainmon.read_records(str(run / f))[0]["rank"] for f in os.listdir(run)
            if f.endswith(".tmr")}


def test_a_spawned_rank_names_its_file_and_its_workers(tmp_path):
    run = _spawn(tmp_path, "late")
    files = sorted(os.listdir(run))
    assert [f for f in files if not f.startswith("worker-")] == ["rank0.tmr", "rank1.tmr"], files
    assert sorted(f.split("-")[1] for f in files if f.startswith("worker-")) == ["r0", "r1"], files
    for r in (0, 1):
        import trainmon
        hdr = trainmon.read_records(str(run / ("rank%d.tmr" % r)))[0]
        assert hdr["rank"] == r, hdr
        start = [json.loads(x[2]["json"]) for x in records(str(run / ("rank%d.tmr" % r)), "event")
                 if x[2]["name"] == "inproc.start"]
        assert start and start[0]["rank"] == r and start[0]["world_size"] == 2, start


def test_a_rank_learned_after_the_file_was_made_is_an_event_the_report_applies(tmp_path,
                                                                               trainmon_bin):
    run = _spawn(tmp_path, "early")
    files = sorted(os.listdir(run))
    main = [f for f in files if f.endswith(".tmr") and not f.startswith("worker-")]
    assert len(main) == 2 and all(f.startswith("pid") for f in main), files
    assert sorted(f.split("-")[1] for f in files if f.startswith("worker-")) == ["r0", "r1"], files
    seen = set()
    for f in main:
        ev = [json.loads(x[2]["json"]) for x in records(str(run / f), "event")
              if x[2]["name"] == "process.rank"]
        assert len(ev) == 1 and ev[0]["world_size"] == 2, ev
        seen.add(ev[0]["rank"])
    assert seen == {0, 1}
    p = subprocess.run([trainmon_bin, "report", "--json", str(run)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    s = json.loads(p.stdout)["summary"]
    assert sorted((r["rank"], r["workers"]) for r in s["ranks"]) == [("0", 1), ("1", 1)], s["ranks"]


def test_the_rank_is_set_in_the_header_of_a_file_made_before_it(tmp_path):
    """(the header survives where a ring overwrites the event)"""
    hdr = _headers(_spawn(tmp_path, "early"))
    assert sorted(r for f, r in hdr.items() if f.startswith("pid")) == [0, 1], hdr


def test_a_group_made_by_a_function_bound_before_attach(tmp_path):
    """learned at the first training step (the files were made by then)"""
    hdr = _headers(_spawn(tmp_path, "bound"))
    assert sorted(r for f, r in hdr.items() if not f.startswith(("worker-", "system"))) == [0, 1], hdr


def test_the_groups_rank_wins_over_a_launcher_rank_that_is_not_RANK(tmp_path):
    """an sbatch step's SLURM_PROCID=0 is every spawned process's"""
    hdr = _headers(_spawn(tmp_path, "late", env={"SLURM_PROCID": "0"}))
    assert hdr.get("rank0.tmr") == 0 and hdr.get("rank1.tmr") == 1, hdr
