"""The OOM analysis (issue #16): trainmon reads the allocator snapshot taken
at an OOM into the OOM summary record, and gpu_mem.oom leads with the cause
and the remedy.  The stand-in snapshots (oom_snapshots.py, one per cause)
are in torch's documented layout: torch's own torch.cuda._memory_viz reads
them; the numbers the analysis must find are worked by hand there."""
import json
import os
import pickle
import subprocess
import sys

import pytest

from conftest import PYDIR, main_file, records, run_script
import oom_snapshots
from oom_snapshots import CASES, MiB, TORCH_DIR
from test_cuda_standin import make_torch

HERE = os.path.dirname(os.path.abspath(__file__))


def _mv():
    import torch.cuda._memory_viz as mv
    return mv


@pytest.mark.parametrize("name", sorted(CASES))
def test_stand_in_snapshot_opens_in_torchs_own_memory_viz(name, tmp_path):
    mv = _mv()
    snap = CASES[name]()["snapshot"]
    ident = lambda s: s  # noqa: E731  (the default downloads flamegraph.pl)
    if not hasattr(mv, "segsum"):
        # torch 1.13's readers take 1.13's layout (a list of segments, the
        # frames in "history"): the same snapshot in that form
        legacy = oom_snapshots.legacy(snap)
        assert "stream_0;seg_" in mv.segments(legacy, format_flamegraph=ident)
        assert "active_allocated" in mv.memory(legacy, format_flamegraph=ident)
        st = mv.stats(legacy)
        assert st["segments"] == len(legacy)
        pytest.skip("torch 1.13's _memory_viz has no segsum, trace, segment_plot or trace_plot "
                    "(its readers were checked on the 1.13 layout above)")
    s = mv.segsum(snap)
    assert "segments: %d" % len(snap["segments"]) in s, s
    t = mv.trace(snap)
    assert "cudaMalloc" in t and "OutOfMemoryError" in t, t
    assert "stream_0;seg_" in mv.segments(snap, format_flamegraph=ident)
    assert "active_allocated" in mv.memory(snap, format_flamegraph=ident)
    for plot in (mv.segment_plot, mv.trace_plot):
        html = plot(snap)
        assert "<html" in html[:400].lower() or html.startswith("<!DOCTYPE html>")
    # the CLI's stats path, as a user would run it on the pickle
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(snap))
    p = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "segments: %d" % len(snap["segments"]) in p.stdout, p.stdout


def _analyze(case, legacy=False):
    import trainmon
    snap = case["snapshot"]
    if legacy:
        snap = oom_snapshots.legacy(snap)
    ptrs = case["ptrs"]
    if ptrs is not None and case.get("frozen"):  # a live module's, as _oom_ptrs adds them
        ptrs = (ptrs[0] + case["frozen"], ptrs[1], ptrs[2])
    return trainmon._oom_analyze(snap, case["device"], case["requested"], case["device_free"],
                                 ptrs, (TORCH_DIR + "/",))


@pytest.mark.parametrize("legacy", [False, True], ids=["torch2_dict", "torch1_13_list"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_analysis_finds_the_hand_worked_numbers(name, legacy):
    case = CASES[name]()
    s = _analyze(case, legacy)
    exp = case["expect"]
    assert s["status"] == 1 and s["why"] == ""
    for k in ("pool", "largest_free", "free_cached", "fragments", "expandable", "live",
              "reserved", "blocks", "live_params", "live_grads", "live_optim_state",
              "live_other"):
        if k in exp:
            assert s[k] == exp[k], (k, s[k], exp[k])
    assert s["sites"] == [(k, float(v)) for k, v in exp["sites"]]


def test_without_an_optimizer_the_live_bytes_are_unknown_not_a_wrong_split():
    case = CASES["activations"]()
    case["ptrs"] = None
    s = _analyze(case)
    # 3840 MiB live, all of it "unknown"; no category is guessed
    assert s["live_unknown"] == 3840 * MiB and s["live"] == 3840 * MiB
    assert all(s[k] != s[k] for k in ("live_params", "live_grads", "live_optim_state",
                                      "live_other"))


def test_a_small_request_is_judged_against_the_small_pool():
    case = CASES["fragmentation"]()
    # 512 KiB (<= 1 MiB): the small segment's 1.5 MiB free piece is the pool
    s = trainmon_analyze(case, 512 << 10)
    assert s["pool"] == 1 and s["largest_free"] == 3 << 19 and s["fragments"] == 1


def trainmon_analyze(case, req):
    import trainmon
    return trainmon._oom_analyze(case["snapshot"], 0, req, case["device_free"], None, ())


def test_the_walk_is_bounded_and_says_so(monkeypatch):
    import trainmon
    monkeypatch.setattr(trainmon, "_OOM_BLOCKS_MAX", 3)
    s = _analyze(CASES["fragmentation"]())
    # 3 blocks: segment 0's live 40 MiB and free 280 MiB, segment 1's live 40 MiB
    assert s["status"] == 2 and "3 blocks" in s["why"]
    assert s["blocks"] == 3 and s["live"] == 80 * MiB and s["free_cached"] == 280 * MiB


def test_another_devices_segments_are_left_out():
    case = CASES["fragmentation"]()
    for seg in case["snapshot"]["segments"]:
        seg["device"] = 1
    s = _analyze(case)
    assert s["blocks"] == 0 and s["live"] == 0 and s["reserved"] == 0


# ------------------------------------------------------------ end to end

EXTRA_INIT = """
from . import autograd
class _Dev:
    def __init__(self, kind, index):
        self.type, self.index = kind, index
class _Storage:
    def __init__(self, ptr, n):
        self.ptr, self.n = ptr, n
    def data_ptr(self):
        return self.ptr
    def nbytes(self):
        return self.n
class Tensor:
    # a CUDA tensor of the stand-in: only where its storage is
    def __init__(self, ptr, n=4):
        self.device, self._s, self.grad = _Dev("cuda", 0), _Storage(ptr, n), None
    def untyped_storage(self):
        return self._s
    def data_ptr(self):
        return self._s.ptr
    def numel(self):
        return self._s.n // 4
    def element_size(self):
        return 4
class nn:
    class Module:
        # a module of the stand-in: its own parameters, as nn.Module keeps them
        def __init__(self, params):
            self._parameters = {str(i): p for i, p in enumerate(params)}
"""

SCRIPT = r"""
import os, torch, trainmon, oom_snapshots
trainmon.attach(memory_history=1000)
case = oom_snapshots.CASES[os.environ.get("STANDIN_OOM_CASE") or "fragmentation"]()
it = torch.utils.data.dataloader._BaseDataLoaderIter(range(5))
next(it)
torch.cuda.init()
next(it)
opt = torch.optim.optimizer.Optimizer()
opt.param_groups, opt.state = [], {}
if case["ptrs"]:
    ps, gs, ss = case["ptrs"]
    params = [torch.Tensor(p) for p in ps]
    for p, g in zip(params, gs):
        p.grad = torch.Tensor(g)
    for i, s in enumerate(ss):
        opt.state.setdefault(params[i % len(params)], {})["m%d" % i] = torch.Tensor(s)
    opt.param_groups = [{"params": params}]
base = torch.nn.Module([torch.Tensor(p) for p in case.get("frozen", ())])
if case.get("step", True):
    opt.step()
with trainmon.phase("fwd"):
    for _ in range(int(os.environ.get("STANDIN_OOM_REPEAT", "1"))):
        for cb in list(torch._C.observers):
            cb(0, case["requested"], case["total"], case["device_free"])
"""


def _run(tmp_path, env, said=0):
    fake = tmp_path / "fake"
    make_torch(fake)
    with open(str(fake / "torch" / "__init__.py"), "a") as f:
        f.write(EXTRA_INIT)
    (fake / "torch" / "autograd.py").write_text("def backward(*a, **k):\n    pass\n")
    run_dir = tmp_path / "run"
    e = {"PYTHONPATH": "%s:%s:%s" % (fake, PYDIR, HERE)}
    e.update(env)
    p = run_script(SCRIPT, run_dir, env=e)
    assert p.stderr.count("trainmon:") == said, p.stderr
    return run_dir, p.stderr


def _finding(run_dir, trainmon_bin):
    rep = json.loads(subprocess.run([trainmon_bin, "report", "--json", str(run_dir)],
                                    capture_output=True, text=True, check=True).stdout)
    f = [x for x in rep["findings"] if x["id"] == "gpu_mem.oom"]
    assert len(f) == 1, [x["id"] for x in rep["findings"]]
    text = subprocess.run([trainmon_bin, "report", str(run_dir)], capture_output=True,
                          text=True, check=True).stdout
    return f[0], text


@pytest.mark.parametrize("name", sorted(CASES))
def test_end_to_end_the_oom_its_summary_and_the_finding(name, tmp_path, trainmon_bin):
    case = CASES[name]()
    exp = case["expect"]
    run_dir, _ = _run(tmp_path, {"STANDIN_OOM_CASE": name})
    path = main_file(run_dir)
    ooms = [r[2] for r in records(path, "oom")]
    sums = [r[2] for r in records(path, "oom_summary")]
    assert len(ooms) == 1 and len(sums) == 1
    o, s = ooms[0], sums[0]
    assert s["seq"] == o["seq"] == 1 and s["device"] == 0 and s["status"] == 1  # ok
    assert o["snapshot"] and os.path.exists(os.path.join(str(run_dir), o["snapshot"]))
    for k in ("largest_free", "free_cached", "fragments", "expandable", "live", "reserved"):
        assert s[k] == exp[k], (k, s[k], exp[k])
    for k in ("live_params", "live_grads", "live_optim_state", "live_other"):
        if k in exp:
            assert s[k] == exp[k], (k, s[k], exp[k])
    # the stand-in torch's frames are folded away by its real directory
    assert s["site1"] == exp["sites"][0][0] and s["site1_bytes"] == exp["sites"][0][1]

    f, text = _finding(run_dir, trainmon_bin)
    ev = f["evidence"]
    assert ev["cause"] == exp["cause"], (ev["cause"], f["title"])
    assert ev["live_bytes"] == exp["live"] and ev["site1"] == exp["sites"][0][0]
    assert "      site: %s holds " % exp["sites"][0][0] in text, text  # under the finding
    if name == "fragmentation":
        # asked for 1 GiB; 256 + 1119 = 1375 MiB = 1.34 GiB free, the largest
        # piece 280 MiB (4 pieces); usable with expandable segments 1356 MiB
        assert "asked for 1.00 GiB; 1.34 GiB free but the largest piece is 280.0 MiB " \
               "(4 pieces): fragmentation" in f["title"], f["title"]
        assert f["advice"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                                      "would have fit it (1.32 GiB usable"), f["advice"]
        assert ev["expandable_usable_bytes"] == 1356 * MiB
    elif name in ("activations", "first_forward"):
        # 3072 of 3840 MiB live: 80%; half the micro-batch saves 1536 MiB
        # (first_forward: before the optimizer's first step, found alive;
        # before, every live byte was unknown and the cause a bare peak)
        assert "activations and temporaries hold 3.00 GiB of the 3.75 GiB live (80%)" \
            in f["title"], f["title"]
        assert f["advice"].startswith("Activation checkpointing")
        assert "saves about 1.50 GiB" in f["advice"]
        assert ev["half_micro_batch_saves_bytes"] == 1536 * MiB
    elif name == "frozen":
        # the frozen base model's 6144 MiB are parameters: 6208 + 64 =
        # 6272 of 7936 MiB (79%); before, they were taken for activations
        # (97%) and the advice was checkpointing.  8 ranks save 6272 x 7/8
        # = 5488 MiB = 5.36 GiB
        assert "the parameters and their gradients hold 6.12 GiB of the 7.75 GiB live " \
               "(79%)" in f["title"], f["title"]
        assert f["advice"].startswith("Shard the parameters and gradients over 8 ranks")
        assert "frozen weights (a LoRA base model, a teacher) load in 8 or 4 bits" \
            in f["advice"], f["advice"]
        assert ev["sharding_saves_bytes"] == 5488 * MiB
    else:
        # 4096 of 8704 MiB: 47%; 8 ranks save 3584 MiB, 8-bit 3072 MiB
        assert "the optimizer's state holds 4.00 GiB of the 8.50 GiB live (47%)" \
            in f["title"], f["title"]
        assert f["advice"].startswith("Shard the optimizer's state over 8 ranks")
        assert ev["sharding_saves_bytes"] == 3584 * MiB
        assert ev["eight_bit_saves_bytes"] == 3072 * MiB


def test_a_snapshot_that_cannot_be_taken_still_gives_a_summary(tmp_path, trainmon_bin):
    # said once on stderr (the job runs on), and in the record
    run_dir, err = _run(tmp_path, {"STANDIN_OOM_FAIL": "1"}, said=1)
    assert "the OOM snapshot off" in err and "out of memory (stand-in)" in err
    path = main_file(run_dir)
    o = records(path, "oom")[0][2]
    s = records(path, "oom_summary")[0][2]
    assert o["snapshot"] == "" and s["seq"] == o["seq"]
    assert s["status"] == 3 and "snapshot failed" in s["why"]
    assert s["requested"] == 1 << 30 and s["free_device"] == 256 * MiB and s["pool"] == 2
    assert s["largest_free"] is None and s["live"] is None  # NAN: unknown
    f, _ = _finding(run_dir, trainmon_bin)
    assert f["evidence"]["snapshot_status"] == "no_snapshot"


EXC_SCRIPT = SCRIPT.split("with trainmon.phase")[0] + r"""
raise torch.cuda.OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 79.15 GiB total capacity; "
    "3.75 GiB already allocated; 100.00 MiB free; 3.77 GiB reserved in total by PyTorch)")
"""


def test_torch_1_13s_path_an_uncaught_oom_read_from_its_list_of_segments(tmp_path):
    """torch 1.13 has no OOM observer: the exception hook records the OOM at
    exit, and the snapshot is 1.13's list of segments (frames in history)."""
    fake = tmp_path / "fake"
    make_torch(fake)
    with open(str(fake / "torch" / "__init__.py"), "a") as f:
        f.write(EXTRA_INIT)
    (fake / "torch" / "autograd.py").write_text("def backward(*a, **k):\n    pass\n")
    run_dir = tmp_path / "run"
    p = run_script(EXC_SCRIPT, run_dir, check=False,
                   env={"PYTHONPATH": "%s:%s:%s" % (fake, PYDIR, HERE),
                        "STANDIN_OOM_CASE": "activations", "STANDIN_OOM_LEGACY": "1"})
    assert p.returncode == 1 and "OutOfMemoryError" in p.stderr
    assert "trainmon:" not in p.stderr, p.stderr
    path = main_file(run_dir)
    o = records(path, "oom")[0][2]
    s = records(path, "oom_summary")[0][2]
    exp = CASES["activations"]()["expect"]
    # parsed from the message: 512 MiB asked, 100 MiB free on GPU 0
    assert o["source"] == 2 and o["requested"] == 512 * MiB and o["free_device"] == 100 * MiB
    assert s["seq"] == o["seq"] and s["status"] == 1
    for k in ("largest_free", "free_cached", "live", "live_params", "live_optim_state",
              "live_other"):
        assert s[k] == exp[k], (k, s[k], exp[k])
    assert s["site1"] == exp["sites"][0][0]


def test_past_three_snapshots_an_oom_still_gets_its_summary(tmp_path):
    # the observer fires 4 times (cuDNN retries, later OOMs): 3 snapshots
    # are taken, pickled and read; the 4th says why it has none
    run_dir, _ = _run(tmp_path, {"STANDIN_OOM_CASE": "activations", "STANDIN_OOM_REPEAT": "4"})
    path = main_file(run_dir)
    ooms = [r[2] for r in records(path, "oom")]
    sums = [r[2] for r in records(path, "oom_summary")]
    assert [o["seq"] for o in ooms] == [s["seq"] for s in sums] == [1, 2, 3, 4]
    assert [s["status"] for s in sums] == [1, 1, 1, 3]
    assert "at most 3 snapshots" in sums[3]["why"] and sums[3]["live"] is None
    assert [bool(o["snapshot"]) for o in ooms] == [True, True, True, False]
    assert len([f for f in os.listdir(str(run_dir)) if f.endswith(".pickle")]) == 3


# ----------------------------------------------- run --memory-history[=N]

HISTORY_JOB = r"""
import json, torch
it = torch.utils.data.dataloader._BaseDataLoaderIter(range(5))
next(it)
torch.cuda.init()
next(it)
next(it)
print("HISTORY " + json.dumps(torch.cuda.memory.history))
"""


def _run_cli(tmp_path, trainmon_bin, *opts):
    fake = tmp_path / "fake"
    make_torch(fake)
    env = dict(os.environ, PYTHONPATH="%s:%s" % (fake, PYDIR))
    env.pop("TRAINMON_ATTACH", None)
    env.pop("TRAINMON_MEMORY_HISTORY", None)
    return subprocess.run([trainmon_bin, "run", "-o", str(tmp_path / "run")] + list(opts) +
                          ["--", sys.executable, "-c", HISTORY_JOB],
                          capture_output=True, text=True, env=env, timeout=120)


def _history(p):
    lines = [x for x in p.stdout.splitlines() if x.startswith("HISTORY ")]
    assert lines, (p.stdout, p.stderr)
    return json.loads(lines[0][len("HISTORY "):])


@pytest.mark.parametrize("opt,want", [([], []), (["--memory-history"], [["all", 100000]]),
                                      (["--memory-history=500"], [["all", 500]])])
def test_run_memory_history_reaches_the_allocator_and_is_off_by_default(
        opt, want, tmp_path, trainmon_bin):
    p = _run_cli(tmp_path, trainmon_bin, *opt)
    assert p.returncode == 0, p.stderr
    assert _history(p) == want


@pytest.mark.parametrize("bad", ["0", "abc", "-3", "99999999999"])
def test_run_memory_history_refuses_a_bad_count_in_one_line(bad, tmp_path, trainmon_bin):
    p = _run_cli(tmp_path, trainmon_bin, "--memory-history=" + bad)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "--memory-history=%s" % bad in p.stderr, p.stderr


def test_run_help_states_the_memory_history_cost(trainmon_bin):
    out = subprocess.run([trainmon_bin, "run", "--help"], capture_output=True, text=True).stdout
    assert "--memory-history[=N]" in out and "2 us per recorded" in out
    assert "tests/gpu/check.sh" in out
