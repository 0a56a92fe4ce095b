"""The CUDA paths (allocator keys, OOM observer, snapshot, memory history)
against a stand-in `torch` package that has them; tests/gpu/check.sh checks
the same against a real GPU."""
import os
import pickle
import textwrap

from conftest import PYDIR, last_json, main_file, records, run_script

G = 1 << 30

FILES = {
    "torch/__init__.py": """
        __version__ = "2.1.0+standin"
        from . import _C, cuda, utils, optim
    """,
    "torch/_C.py": """
        calls = {"memstats": 0}
        observers = []
        def fam(cur, peak):
            d = {"current": cur, "peak": peak, "allocated": cur, "freed": 0}
            return {"all": d, "small_pool": dict(d, current=0), "large_pool": d}
        STATS = {"allocated_bytes": fam(3 << 30, 5 << 30), "reserved_bytes": fam(6 << 30, 7 << 30),
                 "active_bytes": fam(4 << 30, 4 << 30), "inactive_split_bytes": fam(1 << 29, 1 << 29),
                 "requested_bytes": fam((3 << 30) - 100, 5 << 30),
                 "num_alloc_retries": 2, "num_ooms": 1, "max_split_size": -1}
        def _cuda_memoryStats(dev):
            from . import cuda
            if not cuda._initialized:
                raise RuntimeError("stand-in: trainmon would have initialised CUDA")
            calls["memstats"] += 1
            return STATS
        def _cuda_attach_out_of_memory_observer(cb):
            from . import cuda
            if cuda._initialized:          # per-device allocators exist only after init
                observers.append(cb)
    """,
    "torch/cuda/__init__.py": """
        _initialized = False
        resets = []
        class OutOfMemoryError(RuntimeError):
            pass
        def is_initialized():
            return _initialized
        def init():
            global _initialized
            _initialized = True
        def _need():
            if not _initialized:
                raise RuntimeError("stand-in: trainmon would have initialised CUDA")
        def mem_get_info(dev=None):
            _need(); return (10 << 30, 80 << 30)
        def current_device():
            _need(); return 0
        def reset_peak_memory_stats(dev=None):
            resets.append(dev)
        from . import memory
    """,
    "torch/cuda/memory.py": """
        history = []
        def _record_memory_history(enabled=None, max_entries=None, **kw):
            history.append([enabled, max_entries])
        # What torch 2.x's _snapshot() returns, in the keys torch's own
        # readers (torch.cuda._memory_viz) use: one 2 MiB segment with an
        # allocated and a free block, and a trace ending in the OOM.
        def _snapshot():
            import os
            case = os.environ.get("STANDIN_OOM_CASE")  # oom_snapshots.py: one per cause
            if case:
                import oom_snapshots, torch
                snap = oom_snapshots.CASES[case](os.path.dirname(torch.__file__))["snapshot"]
                # torch 1.13's memory_snapshot(): the list of segments
                return oom_snapshots.legacy(snap) if os.environ.get("STANDIN_OOM_LEGACY") else snap
            if os.environ.get("STANDIN_OOM_FAIL"):     # the allocator itself failing
                raise RuntimeError("CUDA error: out of memory (stand-in)")
            fr = [{"filename": "train.py", "line": 42, "name": "forward"}]
            base = 0x7F0000000000
            blocks = [
                {"address": base, "size": 1 << 20, "requested_size": (1 << 20) - 512,
                 "state": "active_allocated", "frames": fr},
                {"address": base + (1 << 20), "size": 1 << 20, "requested_size": 0,
                 "state": "inactive", "frames": []},
            ]
            seg = {"device": 0, "address": base, "total_size": 2 << 20,
                   "allocated_size": 1 << 20, "active_size": 1 << 20,
                   "requested_size": (1 << 20) - 512, "stream": 0, "segment_type": "large",
                   "segment_pool_id": (0, 0), "is_expandable": False, "frames": fr,
                   "blocks": blocks}
            trace = [
                {"action": "segment_alloc", "addr": base, "size": 2 << 20, "stream": 0,
                 "time_us": 1, "frames": fr},
                {"action": "alloc", "addr": base, "size": 1 << 20, "stream": 0, "time_us": 2,
                 "frames": fr},
                {"action": "alloc", "addr": base + (1 << 20), "size": 1 << 20, "stream": 0,
                 "time_us": 3, "frames": fr},
                {"action": "free_requested", "addr": base + (1 << 20), "size": 1 << 20,
                 "stream": 0, "time_us": 4, "frames": fr},
                {"action": "free_completed", "addr": base + (1 << 20), "size": 1 << 20,
                 "stream": 0, "time_us": 5, "frames": fr},
                {"action": "oom", "addr": 0, "device_free": 5 << 20, "size": 1 << 30, "stream": 0,
                 "time_us": 6, "frames": fr},
            ]
            return {"segments": [seg], "device_traces": [trace],
                    "allocator_settings": {"expandable_segments": False}}
        def _dump_snapshot(path):
            import pickle
            with open(path, "wb") as f:
                pickle.dump(_snapshot(), f)
    """,
    "torch/utils/__init__.py": "from . import data\n",
    "torch/utils/data/__init__.py": """
        from . import dataloader, _utils
        def get_worker_info():
            return None
    """,
    "torch/utils/data/dataloader.py": """
        class _BaseDataLoaderIter:
            def __init__(self, items):
                self.items = list(items)
            def __iter__(self):
                return self
            def __next__(self):
                if not self.items:
                    raise StopIteration
                return self.items.pop(0)
        class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
            pass
    """,
    "torch/utils/data/_utils/__init__.py": "from . import fetch\n",
    "torch/utils/data/_utils/fetch.py": """
        class _MapDatasetFetcher:
            def fetch(self, idx):
                return idx
    """,
    "torch/optim/__init__.py": "from . import optimizer\n",
    "torch/optim/optimizer.py": """
        _pre, _post = [], []
        class _Handle:
            def __init__(self, l, f): self.l, self.f = l, f
            def remove(self): self.l.remove(self.f)
        def register_optimizer_step_pre_hook(f):
            _pre.append(f); return _Handle(_pre, f)
        def register_optimizer_step_post_hook(f):
            _post.append(f); return _Handle(_post, f)
        class Optimizer:
            def step(self):
                for f in _pre: f(self, (), {})
                for f in _post: f(self, (), {})
    """,
}

SCRIPT = r"""
import json, torch, trainmon
trainmon.attach(memory_history=1000)
m = trainmon.Monitor()
m.capture("before-init")
it = torch.utils.data.dataloader._BaseDataLoaderIter(range(5))
next(it)                         # step 0
torch.cuda.init()                # the job initialises CUDA
m.capture("after-init")
next(it)                         # step 1: trainmon notices CUDA, attaches its observer
torch.optim.optimizer.Optimizer().step()
with trainmon.phase("fwd"):
    for cb in list(torch._C.observers):
        cb(0, 1 << 30, 80 << 30, 5 << 20)     # an OOM, reported twice (cuDNN retry)
        cb(0, 1 << 30, 80 << 30, 5 << 20)
print(json.dumps({"history": m.history, "observers": len(torch._C.observers),
                  "mem_history": torch.cuda.memory.history, "resets": torch.cuda.resets}))
"""


def make_torch(root):
    for rel, text in FILES.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))


def run(tmp_path):
    fake = tmp_path / "fake"
    make_torch(fake)
    run_dir = tmp_path / "run"
    p = run_script(SCRIPT, run_dir, env={"PYTHONPATH": "%s:%s" % (fake, PYDIR)})
    assert "trainmon:" not in p.stderr, p.stderr
    return last_json(p.stdout), run_dir


def test_allocator_numbers_come_from_the_nested_stats_dict_once_cuda_is_up(tmp_path):
    out, _ = run(tmp_path)
    h = out["history"]
    assert h["tag"] == ["before-init", "after-init"]
    assert h["allocated_gb"] == [None, 3.0]   # before init: unavailable, CUDA left alone
    assert h["reserved_gb"] == [None, 6.0]
    assert h["peak_gb"] == [None, 5.0]
    assert h["free_mem_gb"] == [None, 10.0]
    assert h["num_retries"] == [None, 2]
    assert h["active_gb"][1] == 4.0 and h["inactive_split_gb"][1] == 0.5
    assert h["requested_gb"][1] == ((3 << 30) - 100) / G and h["num_ooms"][1] == 1
    assert out["resets"] == []                # never reset_peak_memory_stats


def test_steps_get_an_allocator_sample_and_optimizer_steps_are_timed(tmp_path):
    _, run_dir = run(tmp_path)
    path = main_file(run_dir)
    auto = [c[2] for c in records(path, "capture") if c[2]["source"] == 2]
    assert auto and auto[0]["allocated"] == 3 << 30 and auto[0]["reserved"] == 6 << 30
    # the lead optimizer's one step, timed in the step record it ends (one
    # record a step): no optimizer-step record of its own
    assert records(path, "optimizer_step") == []
    opt = [s[2] for s in records(path, "step") if s[2]["opt_start_ns"] > 0]
    assert len(opt) == 1 and opt[0]["optimizer"] == 0 and opt[0]["boundary"] == 3
    assert 0 < opt[0]["opt_start_ns"] <= opt[0]["end_ns"]


def test_oom_observer_records_device_request_free_step_phase_and_a_snapshot(tmp_path):
    out, run_dir = run(tmp_path)
    assert out["observers"] == 1
    assert out["mem_history"] == [["all", 1000]]
    ooms = [r[2] for r in records(main_file(run_dir), "oom")]
    assert len(ooms) == 2
    o = ooms[0]
    assert (o["device"], o["requested"], o["free_device"], o["total_device"]) == \
        (0, 1 << 30, 5 << 20, 80 << 30)
    assert o["step"] == 2 and o["phase"] == "fwd" and o["source"] == 1
    assert o["allocated"] == 3 << 30
    snap = pickle.load(open(os.path.join(run_dir, o["snapshot"]), "rb"))
    assert "segments" in snap and "device_traces" in snap


def test_oom_snapshot_replaces_a_planted_symlink_instead_of_writing_through_it(tmp_path):
    fake = tmp_path / "fake"
    make_torch(fake)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(str(victim), str(run_dir / "oom-rank0-1.pickle"))
    os.symlink(str(victim), str(run_dir / "oom-rank0-1.pickle.tmp"))  # the old fixed temp name
    p = run_script(SCRIPT, run_dir, env={"PYTHONPATH": "%s:%s" % (fake, PYDIR), "RANK": "0"})
    assert "trainmon:" not in p.stderr, p.stderr
    assert victim.read_text() == "precious"
    snap = run_dir / "oom-rank0-1.pickle"
    assert not snap.is_symlink() and snap.is_file()
    assert "segments" in pickle.load(open(str(snap), "rb"))
    assert [f for f in os.listdir(str(run_dir)) if f.endswith(".tmp")] == ["oom-rank0-1.pickle.tmp"]


def test_the_oom_snapshot_opens_in_torchs_own_memory_viz(tmp_path):
    """The pickle trainmon writes at an OOM, read by torch's own readers
    (torch.cuda._memory_viz of the torch running this test: 1.13 has
    segsum and trace, 2.x also the HTML plots pytorch.org/memory_viz draws)."""
    import pytest
    import torch.cuda._memory_viz as mv
    if not hasattr(mv, "segsum"):
        pytest.skip("this torch's _memory_viz (1.x) draws only flamegraphs, through a script "
                    "it downloads; torch 2.x's readers are the oracle")
    _, run_dir = run(tmp_path)
    o = [r[2] for r in records(main_file(run_dir), "oom")][0]
    snap = pickle.load(open(os.path.join(run_dir, o["snapshot"]), "rb"))
    s = mv.segsum(snap)
    assert "2.0MiB" in s or "2.0 MiB" in s or "2097152" in s, s
    t = mv.trace(snap)
    assert "oom" in t.lower() or "alloc" in t, t
    for plot in ("segment_plot", "trace_plot"):
        if hasattr(mv, plot):
            html = getattr(mv, plot)(snap)
            assert html.startswith("<!DOCTYPE html>") or "<html" in html[:200].lower()
