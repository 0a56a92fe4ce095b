"""torch.compile (docs/DIAGNOSIS.md, steps.compile): attach() registers
compile callbacks with torch._dynamo's callback handler, when the job first
compiles, or at attach() where torch._dynamo is loaded (attach() itself does
not load it: a second at the start of every torch 2.x job).  Each compilation is one compile event at its
end: its wall and CPU time, the steps begun so far, whether the training
thread compiled, the trigger and torch's compile id ("0/1": frame 0's
second compilation, a recompilation).  A garbage collection during a
compilation says so (in_compile) and is left to steps.compile.  detach()
takes the callbacks off.  torch 1.x has no torch.compile: nothing is
recorded and nothing breaks."""
import json
import subprocess

import pytest

from conftest import last_json, main_file, records, run_script

COMPILED = r"""
import gc, json, sys, time, torch, trainmon
trainmon.attach()
model = torch.compile(torch.nn.Linear(16, 4), backend="aot_eager")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
from torch._dynamo.callback import callback_handler as h
registered = len(h.start_callbacks)


def step(n):
    model(torch.randn(n, 16)).sum().backward()
    opt.step()
    opt.zero_grad()


steps = []                                         # (batch, compiled graphs after it, seconds)
for i, n in enumerate([8, 8, 8, 5, 8, 5, 8]):      # the short batch: a new shape, once
    t = time.perf_counter()
    step(n)
    steps.append((n, torch._dynamo.utils.counters["stats"]["unique_graphs"],
                  time.perf_counter() - t))
# a collection inside a compilation: a callback of the job's own that
# collects when the compilation starts, as a compiler's allocations would
h.register_start_callback(lambda args: gc.collect())
model2 = torch.compile(torch.nn.Linear(4, 4), backend="aot_eager")
model2(torch.randn(2, 4)).sum().backward()
trainmon.detach()
left = [f for f in h.start_callbacks + h.end_callbacks if "trainmon" in getattr(f, "__module__", "")]
print(json.dumps({"registered": registered, "steps": steps, "left": len(left)}))
"""


def _has_compile_callbacks(python):
    code = "import torch._dynamo.callback as c; print(hasattr(c, 'callback_handler'))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.stdout.strip() == "True"


def test_compilations_are_events_with_their_ids_and_steps(tmp_path):
    import sys
    if not _has_compile_callbacks(sys.executable):
        pytest.skip("torch.compile's callback handler is torch 2.4 and later's")
    p = run_script(COMPILED, tmp_path)
    out = last_json(p.stdout)
    assert out["registered"] >= 1
    assert out["left"] == 0, "detach() left trainmon's callbacks registered"
    ev = [(t, json.loads(r["json"])) for _, t, r in records(main_file(tmp_path), "event")
          if r["name"] == "compile"]
    dyn = [e for _, e in ev if e["trigger"] == "DYNAMO"]
    # the model: compiled in the first step (0/0), again for the short
    # batch of the fourth (0/1); the second short batch hits the cache.
    # Then model2, after the loop's 7 steps: Linear.forward again, the
    # same frame (torch numbers frames by code object): its third (0/2).
    assert [e["id"] for e in dyn] == ["0/0", "0/1", "0/2"], ev
    # the job's own count of graphs agrees: new graphs in steps 1 and 4 only
    grew = [i for i, s in enumerate(out["steps"]) if s[1] != (out["steps"][i - 1][1] if i else 0)]
    assert grew == [0, 3], out["steps"]
    # "step": the steps begun when it ended (a loop without a DataLoader
    # begins its next step at its boundary: the steps before it)
    assert [e["step"] for e in dyn] == [0, 3, 7], dyn
    for e in dyn:
        assert e["training"] is True and 0 < e["dur_s"] < 60, e
        assert e["cpu_s"] is None or 0 <= e["cpu_s"] <= e["dur_s"] + 0.01, e
    # each compilation's time is inside its step's, as the job timed it
    for e, i in ((dyn[0], 0), (dyn[1], 3)):
        assert e["dur_s"] <= out["steps"][i][2], (e, out["steps"][i])
    # the backward graph compiles at its first run, lazily
    assert any(e["trigger"] == "LAZY_BACKWARD" for _, e in ev), ev
    # the job's gc.collect() at model2's compilation start: in_compile
    gcs = [json.loads(r["json"]) for _, _, r in records(main_file(tmp_path), "event")
           if r["name"] == "gc.pause"]
    assert any(g.get("in_compile") is True and g["auto"] is False for g in gcs), gcs
    assert all("in_compile" in g for g in gcs)


# attach() leaves torch._dynamo unloaded (torch.compiler.disable would load
# it: 1.1-1.9 s); the functions the extension calls at a step's end go
# through torch.compiler.disable once the job loads it (here by making an
# optimizer, as torch 2.13 does), so that a step ending inside compiled code
# does not have dynamo compile trainmon's frames.
LAZY_DYNAMO = r"""
import json, sys, torch
import trainmon
trainmon.attach()
after = "torch._dynamo" in sys.modules
plain = [f.__name__ for f in trainmon._state["step_calls"]]
import torch._dynamo
zg, rk = trainmon._state["step_calls"]
print(json.dumps({"after_attach": after, "plain": plain,
                  "disabled": [getattr(f, "__wrapped__", None) is g and f is not g
                               for f, g in ((zg, trainmon._zgrad_install),
                                            (rk, trainmon._learn_rank))]}))
"""


def test_attach_leaves_dynamo_unloaded_and_binds_through_disable_once_it_loads(tmp_path):
    torch = pytest.importorskip("torch")
    if not hasattr(getattr(torch, "compiler", None), "disable"):
        pytest.skip("torch %s has no torch.compiler.disable" % torch.__version__)
    out = last_json(run_script(LAZY_DYNAMO, tmp_path).stdout)
    assert out == {"after_attach": False, "plain": ["_zgrad_install", "_learn_rank"],
                   "disabled": [True, True]}, out


def test_a_job_that_never_compiles_records_no_compilation(tmp_path):
    code = r"""
import json, sys, torch, trainmon
trainmon.attach()
m = torch.nn.Linear(4, 4)
m(torch.randn(2, 4)).sum().backward()
print(json.dumps({"steps": 1}))
"""
    p = run_script(code, tmp_path)
    assert last_json(p.stdout) == {"steps": 1}
    assert not [r for _, _, r in records(main_file(tmp_path), "event") if r["name"] == "compile"]


def test_compile_callbacks_never_raise_into_torch(tmp_path):
    code = r"""
import json, trainmon, trainmon._trainmon as c
bad = []
for call in (lambda: trainmon._compile_start(None), lambda: trainmon._compile_end(None),
             lambda: trainmon._compile_end(object()), lambda: c.compile_exit(None, None),
             lambda: c.compile_exit(1, 2), lambda: c.compile_exit(),
             lambda: c.compile_enter(None), lambda: c.compile_exit('x"}{', '0/0"\\')):
    try:
        call()
    except BaseException as e:
        bad.append(repr(e))
print(json.dumps({"bad": bad}))
"""
    p = run_script(code, tmp_path)
    assert last_json(p.stdout) == {"bad": []}


def test_the_chrome_trace_shows_each_compilation_on_the_stops_track(tmp_path, trainmon_bin):
    # `trainmon export --format chrome`: a slice "torch.compile F/N" on the
    # training process's "stops" track (tid 3) for each compilation, ending
    # at its event, as long as it; the collections inside one nest in it
    import sys
    if not _has_compile_callbacks(sys.executable):
        pytest.skip("torch.compile's callback handler is torch 2.4 and later's")
    run_script(COMPILED, tmp_path)
    trace = tmp_path / "trace.json"
    subprocess.run([trainmon_bin, "export", str(tmp_path), "--format", "chrome", "-o", str(trace)],
                   check=True, capture_output=True)
    ev = json.load(open(trace))["traceEvents"]
    stops = sorted((e for e in ev if e.get("ph") == "X" and e.get("tid") == 3),
                   key=lambda e: (e["ts"], -e["dur"]))
    names = [e["name"] for e in stops if e["name"].startswith("torch.compile")]
    assert names[:3] == ["torch.compile 0/0", "torch.compile 0/0", "torch.compile 0/1"], names
    comp = [(json.loads(r["json"]), t) for _, t, r in records(main_file(tmp_path), "event")
            if r["name"] == "compile" and json.loads(r["json"])["training"]]
    slices = [e for e in stops if e["name"].startswith("torch.compile")]
    assert len(slices) == len(comp), (slices, comp)
    for e, (c, _) in zip(slices, comp):
        assert abs(e["dur"] - c["dur_s"] * 1e6) < 1.5, (e, c)
    # the track nests (a pause inside a compilation inside it)
    stack = []
    for e in stops:
        while stack and e["ts"] >= stack[-1] - 1:
            stack.pop()
        assert not stack or e["ts"] + e["dur"] <= stack[-1] + 1, ("does not nest", e)
        stack.append(e["ts"] + e["dur"])
    assert any(e["name"] == "gc pause, generation 2" for e in stops), [e["name"] for e in stops]
