"""The loop's work after its forward (docs/DIAGNOSIS.md, "The step model"):
nanoGPT's train.py makes the next batch between the forward and the
backward pass, nanochat's base_train.py between the backward pass and the
optimizer step.  The span before the forward saw neither, and both loops,
most of their time making batches on the training thread, read "input
keeps up".  Here 3 ms of CPU work stands for the batch, in each place; the
record's prep_fwd_ns and prep_opt_ns must hold it, and nothing else: not a
loss computed after the forward (a module or a function: compute), not
clip_grad_norm_ (the optimizer's), and no hook may stay on the job's
module, even when its forward raised."""
import pytest

from conftest import last_json, main_file, records, run_script

MODEL = """
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(16, 4)
        self.boom = False
    def forward(self, x, y):
        if self.boom:
            raise RuntimeError("CUDA out of memory (a stand-in)")
        out = self.l(x)
        return out, torch.nn.functional.cross_entropy(out, y)   # nanoGPT's: the loss inside
"""

LOOP = "MODEL = %r\n" % MODEL + r"""
import io, json, os, time, torch
def busy(s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s:
        pass
KIND = os.environ["KIND"]
if KIND == "nanochat":            # a slow clip: the optimizer's work, not the batch
    clip = torch.nn.utils.clip_grad_norm_
    def slow_clip(*a, **k):
        busy(0.004)
        return clip(*a, **k)
    torch.nn.utils.clip_grad_norm_ = slow_clip
import trainmon
trainmon.attach()
torch.manual_seed(0)
import sys, tempfile                # in a file: torch.jit.script reads the source
d = tempfile.mkdtemp()
with open(os.path.join(d, "tm_model.py"), "w") as f:
    f.write(MODEL)
sys.path.insert(0, d)
from tm_model import M
model = M()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
crit = torch.nn.CrossEntropyLoss()
X, Y = torch.randn(512, 16), torch.randint(0, 4, (512,))
x, y = X[:8], Y[:8]
saved = None
for i in range(40):
    if KIND == "nanogpt":           # the next batch between the forward and the backward
        for micro in range(2):
            out, loss = model(x, y)
            loss = loss / 2
            busy(0.003); x, y = X[i:i + 8], Y[i:i + 8]
            loss.backward()
        opt.step()
    elif KIND == "nanochat":        # ... between the backward and the optimizer step
        out, loss = model(x, y)
        loss.backward()
        busy(0.003); x, y = X[i:i + 8], Y[i:i + 8]
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    elif KIND == "lossmodule":      # 3 ms of loss-side work, then a loss module: compute
        busy(0.01)
        out, _ = model(x, y)
        busy(0.003)
        crit(out, y).backward()
        opt.step()
    elif KIND == "lossfunc":        # a loss function after the forward: compute
        busy(0.01)
        out, _ = model(x, y)
        loss = torch.nn.functional.mse_loss(out, torch.zeros_like(out))
        busy(0.003)
        loss.backward()
        opt.step()
    elif KIND == "small":           # nothing after the forward: measured on a sample
        busy(0.01)                  # (a 10 ms step: the backward call's own Python after
        out, loss = model(x, y)     # the forward is far under 2% of it)
        loss.backward()
        opt.step()
    elif KIND == "raise":           # a forward that raises (an OOM), a crash handler's save
        model.boom = i == 5
        try:
            out, loss = model(x, y)
        except RuntimeError:
            buf = io.BytesIO()
            torch.save(model, buf)
            saved = {"hooks": len(model._forward_hooks),
                     "always": len(getattr(model, "_forward_hooks_always_called", {})),
                     "global": len(torch.nn.modules.module._global_forward_hooks),
                     "bytes": len(buf.getvalue())}
            continue
        busy(0.003)
        loss.backward()
        opt.step()
    opt.zero_grad(set_to_none=True)
model.boom = False
scripted = torch.jit.script(model) is not None
print(json.dumps({"saved": saved, "scripted": scripted, "hooks": len(model._forward_hooks),
                  "every": trainmon.stats()["after_forward_every_step"],
                  "global": len(torch.nn.modules.module._global_forward_hooks)}))
"""

# steps 1 to 4, then tm_prep_cpu_due's: 17, 33 of a 40-step loop
SAMPLE = [1, 2, 3, 4, 17, 33]


def _run(tmp_path, kind):
    out = last_json(run_script(LOOP, tmp_path, env={"KIND": kind}).stdout)
    steps = [f for _, _, f in records(main_file(tmp_path), "step") if f["phase"] == 1]
    return out, steps


def _median(v):
    v = sorted(v)
    return v[len(v) // 2]


def test_nanogpts_batch_between_forward_and_backward_is_preparation(tmp_path):
    out, steps = _run(tmp_path, "nanogpt")
    assert out["hooks"] == 0 and out["global"] == 0 and out["scripted"] and out["every"], out
    later = steps[1:]
    assert len(later) == 39
    # 3 ms a micro-batch, 2 micro-batches: 6 ms after the forwards, in
    # every step (a step's worth seen at step 1 has every step measured)
    fwd = [f["prep_fwd_ns"] for f in later]
    assert all(v >= 5.8e6 for v in fwd), fwd
    assert _median(fwd) < 8e6, fwd
    # in the preparation and the data wait, with what runs before the forward
    assert all(f["prep_ns"] >= f["prep_fwd_ns"] and f["data_wait_ns"] == f["prep_ns"]
               for f in later), later[:3]
    # nothing between the last backward and the optimizer step
    assert _median([f["prep_opt_ns"] for f in later]) < 0.5e6, later[:3]


def test_nanochats_batch_after_the_backward_is_preparation_and_clipping_is_not(tmp_path):
    out, steps = _run(tmp_path, "nanochat")
    later = steps[2:]  # the clip's hook is put on at the end of the first step
    tail = [f["prep_opt_ns"] for f in later]
    # 3 ms of batch, not the 7 ms with the (slow) clip_grad_norm_
    assert all(v >= 2.8e6 for v in tail), tail
    assert _median(tail) < 4e6, tail
    assert all(f["prep_ns"] >= f["prep_opt_ns"] for f in later)


@pytest.mark.parametrize("kind", ["lossmodule", "lossfunc"])
def test_a_loss_computed_after_the_forward_is_no_preparation(tmp_path, kind):
    out, steps = _run(tmp_path, kind)
    later = steps[1:]
    # measured on the sample only (no gap of its own seen), and none there
    measured = [f["step"] for f in later if f["prep_fwd_ns"] >= 0]
    assert measured == SAMPLE, measured
    assert all(f["prep_fwd_ns"] == 0 for f in later if f["step"] in SAMPLE), later[:5]
    assert _median([f["prep_ns"] for f in later]) < 11e6, later[:3]  # the 10 ms before


def test_a_loop_without_work_after_the_forward_is_measured_on_a_sample(tmp_path):
    out, steps = _run(tmp_path, "small")
    assert out["hooks"] == 0 and out["global"] == 0 and out["every"] is False, out
    measured = [f for f in steps if f["prep_fwd_ns"] >= 0]
    assert [f["step"] for f in measured] == SAMPLE, [f["step"] for f in measured]
    # the loss's division and the backward call's own Python: well under 1 ms
    assert all(f["prep_fwd_ns"] < 1e6 for f in measured), measured


def test_a_forward_that_raises_leaves_no_hook_on_the_jobs_module(tmp_path):
    out, steps = _run(tmp_path, "raise")
    # the crash handler's torch.save(model) pickled the module: nothing of
    # trainmon's on it (a C function there cannot be pickled), nor in
    # torch's global hooks; torch.jit.script of it works afterwards
    s = out["saved"]
    assert s and s["hooks"] == 0 and s["always"] == 0 and s["bytes"] > 0, out
    assert out["hooks"] == 0 and out["global"] == 0 and out["scripted"], out
    # and the loop's 3 ms after its forward are measured on the steps around it
    fwd = [f["prep_fwd_ns"] for f in steps[1:] if f["prep_fwd_ns"] >= 0]
    assert len(fwd) >= 30 and _median(fwd) >= 2.8e6, fwd
