"""The model run under no_grad before a step's training forward
(docs/DIAGNOSIS.md, "steps.no_grad"): an RL loop's rollout calls its policy
under torch.no_grad() at each environment step, then trains.  The step's
first forward was the rollout's first call, and the rest of the rollout
read as the step's compute.  The record's nograd_ns must hold the rollout
(2 ms of environment a step here) and nograd_calls the loop's own calls of
its model (two a step: the actor and the critic, as CleanRL's
get_action_and_value makes them), not the modules inside; a teacher's
forward is one call; a rollout under model.eval() is an eval span, not
this; a loop without one has neither field."""
import pytest

from conftest import last_json, main_file, records, run_script

LOOP = r"""
import json, os, time, torch
def busy(s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s:
        pass
KIND = os.environ["KIND"]
import trainmon
trainmon.attach()
torch.manual_seed(0)
class Agent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.actor = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
        self.critic = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    def act(self, x):               # CleanRL's get_action_and_value: two calls
        return self.actor(x), self.critic(x)
class Teacher(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 3)
    def forward(self, x):
        busy(0.003)                 # a big teacher's forward
        return self.l(x)
agent, teacher = Agent(), Teacher()
if KIND == "ownhook":               # a hook of the model's own: torch 2.x's inner() path
    agent.actor.register_forward_pre_hook(lambda m, a: None)
if KIND == "compiled":              # OptimizedModule looks at the hooks before its call
    agent.actor = torch.compile(agent.actor, backend="eager")
    agent.critic = torch.compile(agent.critic, backend="eager")
import sys
opt = torch.optim.Adam(agent.parameters(), lr=1e-3)
obs = torch.randn(4, 8)
caught = None
for i in range(30):
    if KIND == "reclim" and i in (6, 9):  # inductor's sys.setrecursionlimit mid-run
        sys.setrecursionlimit(sys.getrecursionlimit() + (500 if i == 6 else -300))
    if KIND in ("rollout", "ownhook", "inference", "eval", "every", "raise", "deep",
                "compiled", "reclim") and \
            (KIND != "every" or i % 4 == 0):
        if KIND == "eval":
            agent.eval()            # Stable-Baselines3's set_training_mode(False)
        buf = []
        ctx = torch.inference_mode if KIND == "inference" else torch.no_grad
        try:
            for t in range(5):      # 5 environment steps
                with ctx():
                    logits, value = agent.act(obs)
                if KIND == "raise" and i == 7 and t == 2:
                    raise RuntimeError("the environment crashed")
                busy(0.002)         # the environment's physics
                buf.append(obs.clone())
        except RuntimeError as e:
            caught = str(e)
        if KIND == "eval":
            agent.train()
        x = torch.cat(buf) if buf else obs
    elif KIND == "teacher":
        x = obs
        with torch.no_grad():
            t_out = teacher(x)
    elif KIND == "probe":           # the next batch made after a probe of the model
        busy(0.003)
        x = obs
    else:
        x = obs
        busy(0.002)
    if KIND == "deep":              # the update's forward made deeper than the rollout's
        def update(v):
            return inner(v)
        def inner(v):
            return agent.act(v)
        logits, value = update(x)
    else:
        logits, value = agent.act(x)
    loss = logits.logsumexp(-1).mean() + value.pow(2).mean()
    if KIND == "teacher":
        loss = loss + (logits - t_out).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if KIND == "probe":             # a metric on a fixed batch after the step
        with torch.no_grad():
            agent.act(obs)
print(json.dumps({"caught": caught,
                  "pre_hooks": len(torch.nn.modules.module._global_forward_pre_hooks),
                  "hooks": len(agent.actor._forward_hooks) + len(agent.critic._forward_hooks)}))
"""


def _run(tmp_path, kind):
    out = last_json(run_script(LOOP, tmp_path, env={"KIND": kind}).stdout)
    recs = [f for _, _, f in records(main_file(tmp_path), "step")]
    return out, [f for f in recs if f["phase"] == 1], [f for f in recs if f["phase"] == 2]


def _median(v):
    v = sorted(v)
    return v[len(v) // 2]


@pytest.mark.parametrize("kind", ["rollout", "ownhook", "inference", "compiled", "reclim"])
def test_a_rollout_before_the_training_forward_is_timed_and_its_calls_counted(tmp_path, kind):
    # compiled: torch.compile's OptimizedModule makes two tests of the dict
    # a call, one call; reclim: the recursion limit raised and lowered
    # mid-run moves no call's depth
    if kind == "compiled" and not hasattr(__import__("torch"), "compile"):
        pytest.skip("torch.compile is torch 2.x's")
    out, steps, evals = _run(tmp_path, kind)
    assert out["pre_hooks"] == 0 and out["hooks"] == 0, out
    assert len(steps) == 30 and not evals
    later = steps[1:]
    # 5 environment steps of 2 ms: 10 ms a rollout, the policy's 10 calls
    ng = [f["nograd_ns"] for f in later]
    assert all(v >= 9.8e6 for v in ng), ng
    assert _median(ng) < 16e6, ng  # (a 2 ms step more than the 5: 12 ms)
    assert all(f["nograd_calls"] == 10 for f in later), [f["nograd_calls"] for f in later]
    # the preparation ends at the rollout's first call, as before
    assert _median([f["prep_ns"] for f in later]) < 1e6, later[:3]


def test_a_training_forward_deeper_than_the_rollout_ends_it_at_its_last_call(tmp_path):
    # the modules inside the rollout's calls and the update's forward, made
    # two frames deeper, are not looked at: the backward pass ends the span
    # one longest interval between its calls after the last (the last
    # environment step)
    out, steps, evals = _run(tmp_path, "deep")
    later = steps[1:]
    assert all(f["nograd_calls"] == 10 for f in later), [f["nograd_calls"] for f in later]
    ng = [f["nograd_ns"] for f in later]
    assert all(9.8e6 <= v for v in ng) and _median(ng) < 16e6, ng


def test_a_rollout_every_four_steps_is_on_those_steps_only(tmp_path):
    out, steps, evals = _run(tmp_path, "every")
    with_ng = [f["step"] for f in steps if f["nograd_calls"] > 0]
    # rollouts before the steps 4, 8, ... 28 (and 0: the first step's span,
    # before any step ended, is not timed)
    assert with_ng == list(range(4, 30, 4)), with_ng
    assert all(f["nograd_ns"] == -1 and f["nograd_calls"] == -1
               for f in steps if f["step"] % 4), steps[:3]


def test_a_probe_after_the_step_is_one_short_call_not_the_next_batch(tmp_path):
    # the probe's two calls (actor, critic) end one interval between them
    # after the last: the 3 ms batch made after the probe is no part of it
    out, steps, evals = _run(tmp_path, "probe")
    later = steps[2:]
    assert all(f["nograd_calls"] == 2 for f in later), [f["nograd_calls"] for f in later]
    assert _median([f["nograd_ns"] for f in later]) < 1e6, [f["nograd_ns"] for f in later]


def test_a_teachers_forward_is_one_call(tmp_path):
    out, steps, evals = _run(tmp_path, "teacher")
    later = steps[1:]
    assert all(f["nograd_calls"] == 1 for f in later), [f["nograd_calls"] for f in later]
    assert all(f["nograd_ns"] >= 2.9e6 for f in later), [f["nograd_ns"] for f in later]


def test_a_rollout_under_eval_mode_is_an_eval_span(tmp_path):
    out, steps, evals = _run(tmp_path, "eval")
    assert len(steps) == 30 and len(evals) == 29, (len(steps), len(evals))
    assert all(f["nograd_calls"] == -1 for f in steps), steps[:3]
    assert all(e["end_ns"] - e["start_ns"] >= 9.8e6 for e in evals), evals[:3]


def test_a_loop_without_one_has_neither_field(tmp_path):
    out, steps, evals = _run(tmp_path, "plain")
    assert len(steps) == 30
    assert all(f["nograd_ns"] == -1 and f["nograd_calls"] == -1 for f in steps), steps[:3]


def test_the_jobs_exception_in_a_rollout_is_its_own(tmp_path):
    out, steps, evals = _run(tmp_path, "raise")
    assert out["caught"] == "the environment crashed" and out["pre_hooks"] == 0, out
    assert len(steps) == 30
    # the steps around it keep their rollouts
    assert sum(f["nograd_calls"] == 10 for f in steps[1:]) >= 27, [f["nograd_calls"] for f in steps]


CKPT = r"""
import json, os, time, torch
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
def busy(s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s:
        pass
KIND = os.environ["KIND"]
import trainmon
trainmon.attach()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Tanh())
                              for _ in range(6)])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
# torch 1.13's default and Hugging Face's gradient checkpointing's until
# transformers 4.35: reentrant (CheckpointFunction runs the model under no_grad)
kw = {"use_reentrant": True} if "use_reentrant" in checkpoint_sequential.__code__.co_varnames else {}
class Offload(torch.autograd.Function):  # DeepSpeed's and Megatron's shape: a Function of its own
    @staticmethod
    def forward(ctx, fn, x):
        ctx.fn = fn
        ctx.save_for_backward(x)
        with torch.no_grad():
            return fn(x)
    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            y = ctx.fn(x)
        torch.autograd.backward(y, g)
        return None, x.grad
class NewStyle(torch.autograd.Function):  # torch >= 2.0: forward without ctx, setup_context
    @staticmethod
    def forward(fn, x):
        with torch.no_grad():
            return fn(x)
    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.fn, x = inputs
        ctx.save_for_backward(x)
    backward = Offload.backward
for i in range(30):
    busy(0.003)                      # the batch
    x = torch.randn(8, 32, requires_grad=True)
    if KIND == "sequential":         # the loop calls checkpoint_sequential
        y = checkpoint_sequential(model, 3, x, **kw)
    elif KIND == "layers":           # each layer through checkpoint, as transformers did
        y = x
        for layer in model:
            def custom_forward(*inputs, layer=layer):
                return layer(*inputs)
            y = checkpoint(custom_forward, y, **kw)
    else:
        fn = NewStyle if KIND == "newstyle" else Offload
        y = x
        for layer in model:
            y = fn.apply(layer, y)
    loss = y.pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(json.dumps({"pre_hooks": len(torch.nn.modules.module._global_forward_pre_hooks)}))
"""


@pytest.mark.parametrize("kind", ["sequential", "layers", "function", "newstyle"])
def test_reentrant_checkpointing_called_by_the_loop_is_its_training_forward(tmp_path, kind):
    # an autograd Function's forward runs its module calls with grad
    # disabled: they are the training forward (the step's preparation ends
    # at the first), not a rollout of 6 calls under no_grad; newstyle:
    # torch >= 2.0's forward without ctx (setup_context), told by
    # Function.apply's frame
    if kind == "newstyle" and not hasattr(__import__("torch").autograd.Function, "setup_context"):
        pytest.skip("setup_context is torch 2.x's")
    out = last_json(run_script(CKPT, tmp_path, env={"KIND": kind}).stdout)
    assert out["pre_hooks"] == 0, out
    steps = [f for _, _, f in records(main_file(tmp_path), "step") if f["phase"] == 1]
    assert len(steps) == 30
    assert all(f["nograd_ns"] == -1 and f["nograd_calls"] == -1 for f in steps), \
        [(f["nograd_ns"], f["nograd_calls"]) for f in steps]
    # the 3 ms batch is the preparation
    prep = [f["prep_ns"] for f in steps[1:]]
    assert 2.9e6 <= _median(prep) < 6e6, prep


def test_the_chrome_trace_shows_each_run_inside_its_step(tmp_path, trainmon_bin):
    # `trainmon export --format chrome`: a child slice "no_grad (10 calls)"
    # of each step that had one, from the preparation's end for its span
    import json
    import subprocess
    out, steps, evals = _run(tmp_path, "rollout")
    trace = tmp_path / "trace.json"
    subprocess.run([trainmon_bin, "export", str(tmp_path), "--format", "chrome", "-o", str(trace)],
                   check=True, capture_output=True)
    ev = json.load(open(trace))["traceEvents"]
    ng = sorted((e for e in ev if e.get("ph") == "X" and e["name"] == "no_grad (10 calls)"),
                key=lambda e: e["ts"])
    with_run = [f for f in steps if f["nograd_calls"] > 0]
    assert len(ng) == len(with_run) >= 28, (len(ng), len(with_run))
    t0 = min(e["ts"] for e in ev if e.get("ph") == "X" and e["name"].startswith("step "))
    s0 = min(f["start_ns"] for f in steps)
    for e, f in zip(ng, with_run):
        assert abs(e["dur"] - f["nograd_ns"] / 1e3) < 1, (e, f)
        assert abs((e["ts"] - t0) - (f["start_ns"] + f["prep_ns"] - s0) / 1e3) < 1, (e, f)
