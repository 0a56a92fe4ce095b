"""The agent's C hooks (python/trainmon/_trainmon.c "hooks that torch
calls"): they pass the job's results and exceptions through unchanged, and
the ArmedHooks dict that replaces torch's global forward pre-hook dict still
runs the job's own hooks."""
from conftest import last_json, main_file, records, run_script

PASS_THROUGH = r"""
import json, torch, trainmon
import torch.nn.modules.module as nnm
from torch.autograd.variable import Variable
engine = Variable._execution_engine
trainmon.attach()
out = {"hooks_type": type(nnm._global_forward_pre_hooks).__name__,
       "engine": type(Variable._execution_engine).__name__,
       "engine_is_torchs": isinstance(Variable._execution_engine, type(engine)),
       "backward_untouched": not hasattr(torch.autograd.backward, "__wrapped__")}
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
# an error inside backward reaches the job as it is
try:
    torch.autograd.backward(torch.zeros(3))          # no grad_fn: torch raises
except RuntimeError as e:
    out["backward_error"] = "does not require grad" in str(e)
# the job's own global forward pre-hook runs, and its handle removes it
seen = []
h = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, i: seen.append(1))
for i in range(3):
    model(torch.randn(2, 4)).sum().backward()
    # a gradient asked of autograd.grad is no backward pass of the step
    # model (it accumulates nothing), as a gradient penalty's is not
    g, = torch.autograd.grad(model(torch.randn(2, 4)).sum(), model.weight)
    opt.step(); opt.zero_grad()
h.remove()
model(torch.randn(2, 4))
out["user_hook_calls"] = len(seen)
out["hooks_left"] = len(nnm._global_forward_pre_hooks)
# a loader's end (StopIteration) and a batch pass through __next__
dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(6.)), batch_size=4)
it = iter(dl)
out["batches"] = [next(it)[0].tolist(), next(it)[0].tolist()]
try:
    next(it)
except StopIteration:
    out["stop"] = True
# an error in iter(loader) (the Dataset's __iter__ opening a shard) as it is
class NoShard(torch.utils.data.IterableDataset):
    def __iter__(self):
        raise KeyError("shard 7 missing")
try:
    iter(torch.utils.data.DataLoader(NoShard()))
except KeyError as e:
    out["iter_error"] = "shard 7 missing" in str(e)
out["iter_hooked"] = getattr(torch.utils.data.DataLoader.__dict__["__iter__"], "_trainmon", False)
trainmon.detach()
out["iter_restored"] = not hasattr(torch.utils.data.DataLoader.__dict__["__iter__"], "_trainmon")
out["restored"] = type(nnm._global_forward_pre_hooks).__name__
out["engine_restored"] = Variable._execution_engine is engine
print(json.dumps(out))
"""


def test_hooks_pass_results_and_errors_through_and_keep_the_jobs_forward_hooks(tmp_path):
    out = last_json(run_script(PASS_THROUGH, tmp_path).stdout)
    assert out["hooks_type"] == "ArmedHooks" and out["restored"] == "OrderedDict"
    # backward passes are timed in torch's autograd engine, replaced by one
    # of a subtype of its type; torch.autograd.backward is torch's own
    assert out["engine"] == "Engine" and out["engine_is_torchs"], out
    assert out["backward_untouched"] and out["engine_restored"], out
    assert out["backward_error"] is True
    assert out["iter_hooked"] and out["iter_error"] and out["iter_restored"], out
    assert out["user_hook_calls"] == 6 and out["hooks_left"] == 0  # two forwards a step
    assert out["batches"] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]] and out["stop"] is True
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert [f["boundary"] for f in steps][:3] == [3, 3, 3]
    # (the first step's count has the backward call that raised, too)
    assert [f["micro_batches"] for f in steps][:3] == [2, 1, 1]


PREP = r"""
import json, time, torch, trainmon
trainmon.attach()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(6):
    time.sleep(0.003)                     # the loop's batch preparation
    x = torch.randn(8, 4)
    model(x).sum().backward()
    opt.step(); opt.zero_grad()
print(json.dumps({}))
"""


def test_first_forward_is_seen_through_the_armed_dict_without_a_hook_in_it(tmp_path):
    run_script(PREP, tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert len(steps) == 6
    # every step after the first: its preparation (>= 3 ms) up to the first forward
    assert all(f["prep_ns"] >= 3e6 and f["data_wait_ns"] == f["prep_ns"] for f in steps[1:]), steps


TOGGLE = r"""
import json, torch, trainmon
import torch.nn.modules.module as nnm
trainmon.attach()
d = nnm._global_forward_pre_hooks
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
kinds = [type(d).__name__]                       # armed at attach: the first forward is due
y = model(torch.randn(2, 4))
kinds.append(type(d).__name__)                   # seen: disarmed, a plain OrderedDict
y.sum().backward()
opt.step(); opt.zero_grad()
kinds.append(type(d).__name__)                   # the step ended: armed again
y = model(torch.randn(2, 4))
kinds.append(type(d).__name__)                   # a measured step: armed after the forward too
y.sum().backward()
kinds.append(type(d).__name__)                   # and after it, to the optimizer step
seen = []
h = torch.nn.modules.module.register_module_forward_pre_hook(lambda m, i: seen.append(1))
opt.step(); opt.zero_grad()
model(torch.randn(2, 4))
trainmon.detach()                                # the job's hook lives in our dict: kept
model(torch.randn(2, 4))
print(json.dumps({"kinds": kinds, "same": nnm._global_forward_pre_hooks is d,
                  "after_detach": type(d).__name__, "seen": len(seen)}))
"""


def test_the_armed_dict_is_an_ordered_dict_between_first_forward_and_boundary(tmp_path):
    # While disarmed, module calls make the OrderedDict's own truth test
    # (no call of the agent per module call); a hook the job registers then
    # lands in the same dict, runs, and stays in place after detach().  On
    # a step whose work after the forward is measured (step 1 here), the
    # forward's return arms it again until the next module call or the
    # backward pass, whose end arms it for the span to the next forward or
    # the optimizer step.
    out = last_json(run_script(TOGGLE, tmp_path).stdout)
    assert out["kinds"] == ["ArmedHooks", "OrderedDict", "ArmedHooks", "ArmedHooks",
                            "ArmedHooks"], out
    assert out["same"] is True and out["after_detach"] == "OrderedDict" and out["seen"] == 2


# attach(), which times backward passes one way or the other, three
# training steps, detach(); "engine_kept": the engine is still ENGINE
ATTACH_TRAIN_DETACH = r"""trainmon.attach()
out = {"engine_kept": Variable._execution_engine is ENGINE,
       "backward_wrapped": hasattr(torch.autograd.backward, "__wrapped__")}
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(3):
    model(torch.randn(2, 4)).sum().backward()
    opt.step(); opt.zero_grad()
trainmon.detach()
"""


OTHER_ENGINE = r"""
import json, torch, trainmon
from torch.autograd.variable import Variable
class Engine:  # an engine trainmon cannot subtype: a Python object around torch's
    def __init__(self, e):
        self.e = e
    def __getattr__(self, name):
        return getattr(self.e, name)
mine = Engine(Variable._execution_engine)
Variable._execution_engine = mine
""" + ATTACH_TRAIN_DETACH.replace("ENGINE", "mine") + r"""out["unwrapped"] = not hasattr(torch.autograd.backward, "__wrapped__")
print(json.dumps(out))
"""


def test_an_engine_of_another_kind_is_left_alone_and_backward_is_wrapped_instead(tmp_path):
    """Where torch's autograd engine is not of the C type trainmon subtypes
    (python/trainmon/_trainmon.c "the autograd engine"), the glue wraps
    torch.autograd.backward with a Hook instead, and backward passes are
    still the step model's micro-batches."""
    p = run_script(OTHER_ENGINE, tmp_path)
    out = last_json(p.stdout)
    assert out == {"engine_kept": True, "backward_wrapped": True, "unwrapped": True}, out
    assert "trainmon" not in p.stderr, p.stderr  # nothing to say: the passes are timed
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert [(f["boundary"], f["micro_batches"]) for f in steps] == [(3, 1)] * 3, steps


ENGINE_FAILS = r"""
import json, torch, trainmon
from torch.autograd.variable import Variable
torch_backward, engine = torch.autograd.backward, Variable._execution_engine
def fails(e):
    raise RuntimeError("no engine made")  # as a MemoryError from the type's making would
trainmon._c.engine_hook = fails
""" + ATTACH_TRAIN_DETACH.replace("ENGINE", "engine") + r"""# an anatomy one-shot wrapper of backward not called yet is taken out too
trainmon.attach()
trainmon._anatomy_arm(torch)
out["armed"] = getattr(torch.autograd.backward, "_trainmon_anatomy", False)
trainmon.detach()
out["restored"] = torch.autograd.backward is torch_backward and Variable._execution_engine is engine
print(json.dumps(out))
"""


def test_an_engine_that_cannot_be_made_falls_back_and_detach_restores_all(tmp_path):
    """Any failure to make the engine (not only a type of another kind)
    leaves torch's engine and wraps torch.autograd.backward instead; detach
    puts back torch's backward even under an anatomy wrapper not yet
    called."""
    p = run_script(ENGINE_FAILS, tmp_path)
    out = last_json(p.stdout)
    assert out == {"engine_kept": True, "backward_wrapped": True, "armed": True,
                   "restored": True}, out
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert [(f["boundary"], f["micro_batches"]) for f in steps][:3] == [(3, 1)] * 3, steps
