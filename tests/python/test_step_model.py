"""The step model (docs/DIAGNOSIS.md): a step ends at the optimizer step,
else at a backward pass, else at the next DataLoader batch; eval batches are
recorded apart; a process that records nothing leaves no file."""
import os

from conftest import free_port, last_json, main_file, records, run_script

ACCUM_EVAL = r"""
import json, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
n = 0
for i, (x, y) in enumerate(DataLoader(ds, batch_size=4)):   # 16 micro-batches
    torch.nn.functional.mse_loss(model(x), y).backward()
    if (i + 1) % 4 == 0:
        opt.step(); opt.zero_grad(); n += 1
        model.eval()
        with torch.no_grad():                                  # 2 eval batches
            for vx, vy in DataLoader(ds, batch_size=32):
                model(vx)
        model.train()
print(json.dumps({"steps": n, "stats": trainmon.stats()}))
"""


def test_accumulated_micro_batches_make_one_step_and_eval_is_apart(tmp_path):
    p = run_script(ACCUM_EVAL, tmp_path)
    out = last_json(p.stdout)
    steps = records(main_file(tmp_path), "step")
    train = [f for _, _, f in steps if f["phase"] == 1]
    evals = [f for _, _, f in steps if f["phase"] == 2]
    assert out["steps"] == 4 and len(train) == 4, steps
    assert [f["step"] for f in train] == [0, 1, 2, 3]
    assert all(f["boundary"] == 3 and f["micro_batches"] == 4 and f["batches"] == 4
               for f in train), train
    assert len(evals) == 8 and all(f["batches"] == 1 and f["micro_batches"] == 0 for f in evals)
    # the eval run after step k is numbered with the next training step
    assert sorted({f["step"] for f in evals}) == [1, 2, 3, 4]
    # a training step does not span the eval run before it
    for prev, cur in zip(train, train[1:]):
        run = [e for e in evals if prev["end_ns"] <= e["start_ns"] < cur["end_ns"]]
        assert run and cur["start_ns"] >= max(e["end_ns"] for e in run)
    assert out["stats"]["steps_closed"] == 4


MANUAL = r"""
import json, time, torch, trainmon
trainmon.attach()
model = torch.nn.Linear(4, 1)
X, Y = torch.randn(512, 4), torch.randn(512, 1)
for i in range(200):         # past the 64 backward steps held back
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.002:   # batch preparation, CPU
        pass
    x, y = X[i:i + 8], Y[i:i + 8]
    torch.nn.functional.mse_loss(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
            p.grad = None
print(json.dumps({"steps": 200}))
"""


def test_manual_sgd_steps_end_at_backward_and_time_their_batch_preparation(tmp_path):
    run_script(MANUAL, tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert len(steps) == 200 and [f["step"] for f in steps] == list(range(200))
    assert all(f["boundary"] == 2 and f["micro_batches"] == 1 and f["batches"] == 0
               for f in steps)
    # every step after the first: ~2 ms of preparation, CPU-bound, as its data wait
    later = steps[1:]
    assert all(f["prep_ns"] >= 1.8e6 and f["data_wait_ns"] == f["prep_ns"] for f in later), later[:3]
    # CPU work: the thread is on a CPU for most of it (the median step: a
    # busy machine may take the core away from a few).  The thread CPU
    # clock is read on a thinning schedule (a system call; tm_prep_cpu_due):
    # steps 1, 17, 33, 49, then every 64th: 65, 129, 193 here; the others
    # say -1.
    measured = [f for f in later if f["prep_cpu_ns"] >= 0]
    assert [f["step"] for f in measured] == [1, 17, 33, 49, 65, 129, 193], \
        [f["prep_cpu_ns"] for f in later]
    assert all(f["prep_cpu_ns"] == -1 for f in later if f not in measured)
    shares = sorted(f["prep_cpu_ns"] / f["prep_ns"] for f in measured)
    assert shares[len(shares) // 2] >= 0.5, shares


# Gradient accumulation without a DataLoader (build-nanogpt's and nanochat's
# loops): each of the 4 micro-batches is prepared before its forward (a
# sleep of 3 ms, I/O-like, then 1 ms of CPU work), and the step's
# preparation is all four, not the first alone.  A second backward pass
# with no forward between (two losses of one forward) adds nothing.
ACCUM_PREP = r"""
import json, time, torch, trainmon
trainmon.attach()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
def busy(s):
    e = time.perf_counter() + s
    while time.perf_counter() < e: pass
for step in range(40):
    for micro in range(4):
        time.sleep(0.003); busy(0.001)          # the micro-batch's preparation
        x = torch.randn(16, 8)
        out = model(x)
        if micro == 3:
            out.sum().backward(retain_graph=True)
            (out ** 2).sum().backward()          # no forward between: nothing to add
        else:
            out.sum().backward()
    opt.step(); opt.zero_grad()
print(json.dumps({"steps": 40}))
"""


def test_accumulated_micro_batches_without_a_loader_each_have_their_preparation(tmp_path):
    run_script(ACCUM_PREP, tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert len(steps) == 40 and all(f["boundary"] == 3 and f["micro_batches"] == 5
                                    for f in steps), [(f["boundary"], f["micro_batches"]) for f in steps]
    later = steps[1:]
    # four preparations of 4 ms each: 16 ms (the loop's own code between
    # them adds a little; a busy machine more, never less)
    assert all(16e6 <= f["prep_ns"] and f["data_wait_ns"] == f["prep_ns"] for f in later), \
        [f["prep_ns"] for f in later]
    assert sorted(f["prep_ns"] for f in later)[len(later) // 2] < 40e6, [f["prep_ns"] for f in later]
    # the CPU clock read on the sampled steps over all four spans: 4 x 1 ms
    # of CPU work in 16 ms (the sleeps are off the CPU), never the first
    # span's alone (1 ms)
    # (steps 1, 17, 33 are the read ones; step 1 of an optimizer loop
    # carries none: the memory anatomy's work at the first step)
    measured = [f for f in later if f["prep_cpu_ns"] >= 0]
    assert [f["step"] for f in measured if f["step"] > 1] == [17, 33], \
        [f["prep_cpu_ns"] for f in later]
    assert all(3.5e6 <= f["prep_cpu_ns"] <= f["prep_ns"] for f in measured), measured


# An optimizer step that is not the step's end is no preparation: a GAN's
# second optimizer stepping between its backward pass and the next
# iteration's forward (a 4 ms step of optG, the lead being optD), and
# LBFGS's closure, whose forward and backward run inside optimizer.step()
# (the optimizer's own work between two closure calls).  And zero_grad()
# after optimizer.step(), before the next forward (nanoGPT's place for it),
# made slow here (4 ms, as 0.2 ms on torch 2.13's CPU is too small to
# tell): the optimizer's work, left out of the preparation.
OPT_BETWEEN = r"""
import json, os, time, torch
if os.environ["KIND"] == "zgrad":
    zg = torch.optim.Optimizer.zero_grad
    def slow_zero_grad(self, *a, **k):
        time.sleep(0.004)
        return zg(self, *a, **k)
    torch.optim.Optimizer.zero_grad = slow_zero_grad
import trainmon
trainmon.attach()
torch.manual_seed(0)
if os.environ["KIND"] == "zgrad":
    m = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    for i in range(30):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
elif os.environ["KIND"] == "gan":
    G, D = torch.nn.Linear(8, 4), torch.nn.Linear(4, 1)
    optD = torch.optim.SGD(D.parameters(), lr=0.01)
    class SlowSGD(torch.optim.SGD):
        def step(self, *a, **k):
            time.sleep(0.004)                  # the generator's update: not the batch
            return super().step(*a, **k)
    optG = SlowSGD(G.parameters(), lr=0.01)
    for i in range(30):
        real, z = torch.randn(16, 4), torch.randn(16, 8)
        fake = G(z)
        d = D(real).mean() - D(fake.detach()).mean()
        optD.zero_grad(); d.backward(); optD.step()
        g = -D(fake).mean()
        optG.zero_grad(); g.backward(); optG.step()
else:
    m = torch.nn.Linear(8, 1)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    opt = torch.optim.LBFGS(m.parameters(), max_iter=5)
    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        time.sleep(0.002)                      # the optimizer's work between closure calls
        return loss
    for i in range(20):
        opt.step(closure)
print(json.dumps({"ok": True}))
"""


def test_optimizer_work_between_backward_and_forward_is_no_preparation(tmp_path):
    for kind in ("gan", "lbfgs", "zgrad"):
        d = tmp_path / kind
        d.mkdir()
        run_script(OPT_BETWEEN, d, env={"KIND": kind})
        steps = [f for _, _, f in records(main_file(d), "step") if f["phase"] == 1][1:]
        assert len(steps) >= 15, (kind, len(steps))
        prep = sorted(f["prep_ns"] for f in steps if f["prep_ns"] >= 0)
        # the batch is two randn calls (the GAN, zero_grad) or none (LBFGS):
        # well under a millisecond, never the 4 ms update, the closure's
        # sleeps or the 4 ms zero_grad
        assert prep and prep[len(prep) // 2] < 1e6, (kind, prep)


# The loop's waits for the device between a step and the next forward are
# compute, not batch preparation: build-nanogpt calls
# torch.cuda.synchronize() after every optimizer step, which on a GPU
# returns once every kernel the host queued has run (the forward, backward
# and optimizer step it ran ahead of).  Here a stand-in device:
# torch.cuda.synchronize() replaced by 4 ms on a CPU (CUDA's default sync
# spins) or 4 ms asleep (a blocking sync: no CPU), the batch itself 2 ms
# of CPU work.  Before, every step's preparation read 6 ms, and with the
# blocking wait's 4 ms taken off its CPU time as well, the CPU-bound batch
# read as waiting.  After detach, torch.cuda.synchronize is the job's
# again.
DEVICE_SYNC = r"""
import json, os, time, torch
def busy(s):
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < s:
        pass
def spin(device=None):
    busy(0.004)
def block(device=None):
    time.sleep(0.004)
torch.cuda.synchronize = spin if os.environ["KIND"] == "spin" else block
import trainmon
trainmon.attach()
m = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
X, Y = torch.randn(512, 8), torch.randn(512, 1)
for i in range(40):
    busy(0.002)                                # the batch
    x, y = X[i:i + 16], Y[i:i + 16]
    loss = torch.nn.functional.mse_loss(m(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()                   # build-nanogpt's, to time the step
hooked = getattr(torch.cuda.synchronize, "_trainmon", False)
trainmon.detach()
print(json.dumps({"hooked": hooked, "after": torch.cuda.synchronize.__name__}))
"""


def test_waits_for_the_device_after_a_step_are_no_preparation(tmp_path):
    for kind in ("spin", "block"):
        d = tmp_path / kind
        d.mkdir()
        out = last_json(run_script(DEVICE_SYNC, d, env={"KIND": kind}).stdout)
        assert out == {"hooked": True, "after": kind}, out
        steps = [f for _, _, f in records(main_file(d), "step") if f["phase"] == 1][2:]
        assert len(steps) >= 30, len(steps)
        prep = sorted(f["prep_ns"] for f in steps if f["prep_ns"] >= 0)
        share = sorted(f["prep_cpu_ns"] / f["prep_ns"] for f in steps
                       if f["prep_cpu_ns"] >= 0 and f["prep_ns"] > 0)
        # 2 ms of batch, not the 6 ms with the wait for the device
        assert prep and 1.8e6 <= prep[len(prep) // 2] < 3.5e6, (kind, prep)
        # and the batch is CPU work, whether the wait spun or slept (2 ms
        # of 6 with the wait: 0.33; a busy machine takes some of the 2 ms)
        assert share and share[len(share) // 2] >= 0.55, (kind, share)


# Compiled code traces torch's own function where the agent wraps one in
# Python (_compiling_test): dist.all_reduce on a one-process gloo group,
# model.eval()/model.train() and model.zero_grad() (its Hook on once the
# loop without a DataLoader has made a step) in a function compiled with
# fullgraph=True (under trainmon "Attempted to call function marked as
# skipped" or "Unsupported method call", the agent's C function inside;
# traced without it).
COMPILED_WRAPPED = r"""
import json, os, torch
import torch.distributed as dist
import trainmon
trainmon.attach()
m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for i in range(3):
    m(torch.randn(4, 3)).sum().backward(); opt.step(); opt.zero_grad()
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["PORT"],
                        rank=0, world_size=1)
@torch.compile(fullgraph=True, backend="eager")
def f(x):
    m.zero_grad()
    m.eval()
    y = m(x)
    m.train()
    dist.all_reduce(y)
    return y.shape[0] + x
out = f(torch.ones(3)).tolist()
dist.destroy_process_group()
print(json.dumps({"out": out, "training": m.training,
                  "hooked": getattr(torch.nn.Module.zero_grad, "_trainmon", False)}))
"""


def test_compiled_code_traces_the_functions_the_agent_wraps(tmp_path):
    import pytest
    import socket
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "compile"):
        pytest.skip("torch %s has no torch.compile" % torch.__version__)
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    out = last_json(run_script(COMPILED_WRAPPED, tmp_path, env={"PORT": str(port)}).stdout)
    assert out == {"out": [4.0, 4.0, 4.0], "training": True, "hooked": True}, out


# torch.compile of a function that calls a method trainmon put a Hook on
# (the optimizer's step, zero_grad of an optimizer and a module, AMP's
# GradScaler.step): dynamo does not run a C type's __get__, took the
# class attribute for a plain value and called it without the instance
# ("missing 1 required positional argument: 'self'", raised into the job:
# the official "compiling the optimizer" recipe failed under trainmon).
# Now each runs, the steps are still timed, and the compiled optimizer
# step compiles one graph as without trainmon.
COMPILED_METHODS = r"""
import json, torch, trainmon
trainmon.attach()
from torch._dynamo.utils import counters
m = torch.nn.Linear(16, 4)
opt = torch.optim.Adam(m.parameters(), lr=0.01)
def batch():
    return m(torch.randn(8, 16)).pow(2).mean()
for _ in range(3):                       # the zero_grad Hooks go on (no DataLoader)
    batch().backward(); opt.step(); opt.zero_grad()
@torch.compile(fullgraph=False, backend="eager")
def opt_step():
    opt.step()
zero_opt = torch.compile(lambda: opt.zero_grad(), backend="eager")
zero_mod = torch.compile(lambda: m.zero_grad(), backend="eager")
scaler = torch.amp.GradScaler("cpu")
scaler_step = torch.compile(lambda: scaler.step(opt), backend="eager")
for i in range(4):
    batch().backward(); opt_step(); zero_opt()
grads = [p.grad for p in m.parameters()]
batch().backward(); zero_mod()
grads += [p.grad for p in m.parameters()]
scaler.scale(batch()).backward(); scaler_step(); scaler.update(); opt.zero_grad()
print(json.dumps({"steps": trainmon.stats()["steps_closed"], "grads": [g is None for g in grads],
                  "graphs": counters["stats"]["unique_graphs"]}))
"""


def test_compiled_functions_call_the_hooked_methods(tmp_path):
    import pytest
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "compile") or not hasattr(torch.amp, "GradScaler"):
        pytest.skip("torch %s has no torch.compile or torch.amp.GradScaler" % torch.__version__)
    out = last_json(run_script(COMPILED_METHODS, tmp_path).stdout)
    # 3 eager steps, 4 compiled ones and the scaler's; every grad set to None
    assert out["steps"] >= 7 and all(out["grads"]) and out["graphs"] >= 1, out


def test_a_process_that_records_nothing_leaves_no_file(tmp_path):
    # The torchrun agent and helper scripts import torch with TRAINMON_ATTACH=1.
    run_script("import torch, trainmon; trainmon.attach(); print('{}')", tmp_path,
               env={"TRAINMON_ATTACH": "1"})
    assert [f for f in os.listdir(tmp_path) if f.endswith(".tmr")] == []


LOADER_BREAK = r"""
import json, time, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
model = torch.nn.Linear(4, 1)
n = 0
for (x,) in DataLoader(TensorDataset(torch.randn(400, 4)), batch_size=4):
    model(x)                  # no backward: the loader ends the steps
    time.sleep(0.002)
    n += 1
    if n == 10:
        break
time.sleep(0.3)               # after the loop: not part of the last step
print(json.dumps({"steps": n}))
"""


def test_a_loop_that_breaks_keeps_its_last_step(tmp_path):
    run_script(LOADER_BREAK, tmp_path)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert [f["step"] for f in steps] == list(range(10)), steps
    assert all(f["boundary"] == 1 and not f["flags"] for f in steps)
    last = steps[-1]
    assert last["end_ns"] - last["start_ns"] < 0.2e9  # ended at the break, not at exit


MOVED = r"""
import json, torch, trainmon
import torch.nn.modules.module as nnm
nnm._global_forward_pre_hooks = None  # a torch whose internals moved (torch runs on: None is "no hooks")
trainmon.attach()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(5):
    torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
    opt.step(); opt.zero_grad()
print(json.dumps({"steps": 5}))
"""


def test_a_torch_internal_that_moved_is_one_line_with_the_version_and_the_job_runs(tmp_path):
    p = run_script(MOVED, tmp_path)
    assert last_json(p.stdout) == {"steps": 5}
    import torch
    lines = [l for l in p.stderr.splitlines() if l.startswith("trainmon:")]
    assert len(lines) == 1, p.stderr
    assert "batch preparation timing" in lines[0] and "torch %s" % torch.__version__ in lines[0]
    assert "_global_forward_pre_hooks not found" in lines[0] and "runs unchanged" in lines[0]
    # the other measures go on: the optimizer steps are there
    train = [f for _, _, f in records(main_file(tmp_path), "step") if f["phase"] == 1]
    assert len(train) == 5


INFER = r"""
import torch, trainmon
trainmon.attach()
m = torch.nn.Linear(16, 4)
x = torch.randn(100, 16)
with torch.no_grad():
    for i in range(0, 100, 10):
        m(x[i:i + 10])
"""


def test_a_loop_without_boundaries_says_what_it_saw(tmp_path, trainmon_bin):
    import json as js
    import subprocess
    run_script(INFER, tmp_path)
    out = subprocess.run([trainmon_bin, "dump", "--json", main_file(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    evs = [js.loads(l) for l in out.splitlines() if '"inproc.boundaries"' in l]
    assert len(evs) == 1, out
    rep = subprocess.run([trainmon_bin, "report", "--json", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    f = {x["id"]: x for x in js.loads(rep)["findings"]}
    assert "steps.unsegmented" in f, rep
    e = f["steps.unsegmented"]["evidence"]
    assert e["forward_seen"] is True and e["optimizer_steps"] == 0 and e["loader_batches"] == 0


DIST = r"""
import json, os, torch, torch.distributed as dist, trainmon
trainmon.attach()
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % os.environ["PORT"],
                        rank=0, world_size=1)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(6):
    loss = torch.nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
    loss.backward()
    opt.step(); opt.zero_grad()
    dist.all_reduce(loss.detach().clone())
    dist.barrier()
dist.destroy_process_group()
"""


def test_backward_and_blocking_collectives_are_timed_per_step(tmp_path):
    run_script(DIST, tmp_path, env={"PORT": str(free_port())})
    train = [f for _, _, f in records(main_file(tmp_path), "step") if f["phase"] == 1]
    assert len(train) == 6
    # the first step ends before its collectives: the later ones carry them
    assert all(f["backward_ns"] > 0 for f in train), train
    assert all(f["collective_ns"] > 0 for f in train[1:]), train
    assert train[0]["collective_ns"] in (-1, 0)


SILENT = r"""
import torch, trainmon
import torch.utils.data.dataloader as dl
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
# a torch whose iterators no longer go through _BaseDataLoaderIter.__next__
# (the agent's step hook): the subclass defines its own
cls = dl._SingleProcessDataLoaderIter
def own_next(self):
    data = self._next_data()
    self._num_yielded += 1
    return data
cls.__next__ = own_next
model = torch.nn.Linear(4, 1)
for x, y in DataLoader(TensorDataset(torch.randn(40, 4), torch.randn(40, 1)), batch_size=4):
    with torch.no_grad():
        model(x)
"""


def test_a_step_hook_that_never_fires_is_reported_not_an_empty_report(tmp_path, trainmon_bin):
    import json as js
    import subprocess
    run_script(SILENT, tmp_path)
    rep = js.loads(subprocess.run([trainmon_bin, "report", "--json", str(tmp_path)],
                                  capture_output=True, text=True, check=True).stdout)
    f = {x["id"]: x for x in rep["findings"]}
    assert "steps.hook_silent" in f and "steps.unsegmented" not in f, list(f)
    assert f["steps.hook_silent"]["severity"] == "high"
    assert f["steps.hook_silent"]["evidence"]["fetches_in_process"] == 10


def test_a_measure_that_could_not_be_installed_is_in_the_report(tmp_path, trainmon_bin):
    import json as js
    import subprocess
    run_script(MOVED, tmp_path)
    rep = js.loads(subprocess.run([trainmon_bin, "report", "--json", str(tmp_path)],
                                  capture_output=True, text=True, check=True).stdout)
    f = {x["id"]: x for x in rep["findings"]}
    assert "run.measure_off" in f, list(f)
    e = f["run.measure_off"]["evidence"]
    assert e["measures_off"] == 1 and e["measure"].startswith("batch preparation timing")
    assert "_global_forward_pre_hooks not found" in e["why"]


TWO_OPTIMIZERS = r"""
import json, torch, trainmon
trainmon.attach()
g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
opt_g = torch.optim.SGD(g.parameters(), lr=0.01)
opt_d = torch.optim.SGD(d.parameters(), lr=0.01)
for i in range(6):                      # a GAN's loop: the generator's optimizer steps first
    d(g(torch.randn(8, 4))).sum().backward()
    opt_g.step(); opt_g.zero_grad()
    d(torch.randn(8, 4)).sum().backward()
    opt_d.step(); opt_d.zero_grad()
print(json.dumps({"steps": 6}))
"""


def test_the_lead_optimizers_step_is_in_its_step_record_and_another_has_its_own(
        tmp_path, trainmon_bin):
    # One record a step: the lead optimizer's step (the first to step) is
    # written in the step record it ends (opt_start_ns, optimizer); the
    # other optimizer's steps end no step and keep their own records.  The
    # readers see both as optimizer steps (export: optimizer.step_seconds).
    import subprocess
    run_script(TWO_OPTIMIZERS, tmp_path)
    path = main_file(tmp_path)
    every = [f for _, _, f in records(path, "step")]
    # the discriminator's backward after the last generator step opens a
    # step that the exit closes (at_exit: no optimizer step in it)
    steps, last = every[:-1], every[-1]
    assert last["flags"] & 2 and last["opt_start_ns"] == -1, last
    assert len(steps) == 6 and all(f["boundary"] == 3 for f in steps), steps
    assert all(f["optimizer"] == 0 and 0 < f["opt_start_ns"] <= f["end_ns"] for f in steps)
    others = [f for _, _, f in records(path, "optimizer_step")]
    assert len(others) == 6 and all(o["optimizer"] == 1 for o in others), others
    csv = subprocess.run([trainmon_bin, "export", str(tmp_path), "--format", "csv"],
                         capture_output=True, text=True, check=True).stdout
    rows = [r for r in csv.splitlines() if "optimizer.step_seconds" in r]
    assert sum("optimizer=0," in r for r in rows) == 6, rows
    assert sum("optimizer=1," in r for r in rows) == 6, rows
    assert all(float(r.rsplit(",", 1)[1]) >= 0 for r in rows), rows


EVAL_BREAK = r"""
import json, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
trainmon.attach()
train = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=4)
val = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=4)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
reused = 0
it = iter(train)
for epoch in range(3):
    for x, y in it:                                            # 8 steps an epoch
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step(); opt.zero_grad()
    with torch.no_grad():
        vit = iter(val)
        vid = id(vit)
        for i, (vx, vy) in enumerate(vit):                     # 3 eval batches, then break
            model(vx)
            if i == 2:
                break
        del vit                                                # dropped inside no_grad
    it = iter(train)                  # the same type: most often at the dropped one's address
    reused += id(it) == vid
print(json.dumps({"steps": 24, "reused": reused}))
"""


def test_an_eval_loop_that_breaks_under_no_grad_stays_eval(tmp_path):
    # The last eval batch's grad mode is asked when its iterator is dropped
    # (inside the no_grad block), not at the next fetch (outside it, of a
    # new training iterator that may reuse the dropped one's address): it
    # is an eval batch, never a held batch that the next training step takes
    # (the training steps have one batch each, the eval batches are 3 an
    # epoch).
    # (Whether CPython puts the new iterator at the dropped one's address
    # varies; the job prints how often it did.  Either way the counts hold.)
    last_json(run_script(EVAL_BREAK, tmp_path).stdout)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    train = [f for f in steps if f["phase"] == 1]
    evals = [f for f in steps if f["phase"] == 2]
    assert len(train) == 24 and all(f["batches"] == 1 for f in train), \
        [(f["step"], f["batches"]) for f in train]
    assert len(evals) == 9, len(evals)


# A background prefetcher (prefetch_generator's BackgroundGenerator): a
# thread iterates the DataLoader into a queue, started before the loop
# trains, so its __next__ is the first tracked call.  The training thread
# is the one that trains: the prefetcher gives way at the first backward
# pass, its fetches are no steps and no wait of the loop, and the loop's
# wait is its time from a step's start to its first forward (here: on the
# queue, 15 ms a batch against 2 ms of compute).  A second thread that
# trains later is not the training thread: the first stays.
THREAD_FED = r"""
import json, queue, threading, time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
trainmon.attach()

class Slow(Dataset):
    def __len__(self): return 10 ** 6
    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.randn(4), torch.randn(1)

q = queue.Queue(2)
stop = threading.Event()
def prefetch():
    for b in DataLoader(Slow(), batch_size=5):
        if stop.is_set():
            break
        q.put(b)
    q.put(None)
th = threading.Thread(target=prefetch, daemon=True)
th.start()
while trainmon.stats()["thread_fed_batches"] == 0 and q.qsize() == 0:
    time.sleep(0.001)          # the prefetcher's __next__ comes first
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
waits = []
for i in range(12):
    t0 = time.perf_counter()
    x, y = q.get()
    if i:
        waits.append(time.perf_counter() - t0)
    loss = torch.nn.functional.mse_loss(model(x), y)
    time.sleep(0.002)
    loss.backward()
    opt.step(); opt.zero_grad()
def other():                    # another thread trains once: not the training thread
    torch.nn.functional.mse_loss(model(torch.randn(2, 4)), torch.randn(2, 1)).backward()
    opt.step()
t = threading.Thread(target=other); t.start(); t.join()
stop.set()
while th.is_alive():
    try: q.get(timeout=0.05)
    except queue.Empty: pass
print(json.dumps({"steps": 12, "waits": waits, "stats": trainmon.stats()}))
"""


def test_a_background_prefetcher_gives_way_to_the_thread_that_trains(tmp_path):
    p = run_script(THREAD_FED, tmp_path)
    out = last_json(p.stdout)
    st = out["stats"]
    assert st["thread_repins"] == 1 and st["thread_fed_batches"] >= 8, st
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    train = [f for f in steps if f["phase"] == 1]
    # the 12 optimizer steps of the loop, no loader step of the prefetcher's,
    # and the other thread's step is an optimizer step of its own
    assert len(train) == 12 and all(f["boundary"] == 3 for f in train), steps
    assert len(records(main_file(tmp_path), "optimizer_step")) == 1
    fed = [f for f in train[1:] if f["flags"] & 4]
    assert len(fed) >= 9, train
    # the loop's own wait on the queue: the first forward after each step's start
    assert all(f["prep_ns"] == -1 and f["prep_cpu_ns"] == -1 for f in fed), fed
    own = sum(out["waits"][1:])
    got = sum(f["data_wait_ns"] for f in train[2:]) / 1e9
    assert abs(got - own) < 0.25 * own + 0.002, (got, own)
    assert sum(f["batches"] for f in fed) >= 8


# Two loaders feeding one step (semi-supervised training, domain
# adaptation, Lightning's CombinedLoader): `zip(a, b)`, then a second
# loader's next() inside a loop over the first (started again when it runs
# out), then an eval loop run with grad enabled between a step's fetch and
# its backward pass, then eval loops under no_grad that keep their iterator
# (the last eval batch's grad mode, asked at the next fetch, is training's),
# then eval loops of one batch fetched with grad enabled that run to their
# end (the batch of a loader no backward pass ever took is eval), then
# single eval batches of a kept iterator under no_grad between steps.  Each step takes one batch of each loader: both are the
# step's batches and both fetches its wait; none is an eval batch.
TWO_LOADERS = r"""
import json, time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
trainmon.attach()

class Slow(Dataset):
    def __init__(self, n): self.n = n
    def __len__(self): return self.n
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(4)

model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
a = DataLoader(Slow(40), batch_size=2)        # 20 batches, ~4 ms each
b = DataLoader(Slow(24), batch_size=4)        # 6 batches, ~8 ms each
val = DataLoader(Slow(6), batch_size=2)       # 3 batches
waits, evals = [], 0

def fetch(fn):
    t0 = time.perf_counter()
    out = fn()
    waits.append(time.perf_counter() - t0)
    return out

def train(*xs):
    loss = sum(model(x).pow(2).mean() for x in xs)
    time.sleep(0.002)
    opt.zero_grad(); loss.backward(); opt.step()

pairs = iter(zip(a, b))
while True:                                   # 6 steps: b runs out first
    got = fetch(lambda: next(pairs, None))
    if got is None:
        break
    train(*got)
b_it = iter(b)
def both():
    global b_it
    x = next(a_it)
    try:
        u = next(b_it)
    except StopIteration:
        b_it = iter(b)
        u = next(b_it)
    return x, u
a_it = iter(a)
for i in range(10):                           # 10 steps, b started again once
    train(*fetch(both))
for i in range(3):                            # 3 steps, each with an eval run inside
    x = fetch(lambda: next(a_it))
    for v in val:                             # grad enabled: no torch.no_grad()
        model(v); evals += 1
    train(x)
v_it = iter(DataLoader(Slow(40), batch_size=2))
for i in range(2):                            # 2 steps after an eval loop that keeps its iterator
    with torch.no_grad():                     # (Lightning's limit_val_batches)
        for _ in range(2):
            model(next(v_it)); evals += 1
    train(fetch(lambda: next(a_it)))
one = DataLoader(Slow(2), batch_size=2)       # an eval set of one batch, fetched with grad
for i in range(2):                            # enabled (no_grad inside the loop, as the HF
    for v in one:                             # Trainer's evaluation loop): 2 steps after it
        with torch.no_grad():
            model(v); evals += 1
    train(fetch(lambda: next(a_it)))
kept = iter(DataLoader(Slow(40), batch_size=2))
for i in range(2):                            # a step, then one eval batch of a kept
    train(fetch(lambda: next(a_it)))          # iterator under no_grad (its grad mode
    with torch.no_grad():                     # is asked at its fetch, not at the next
        model(next(kept)); evals += 1         # training fetch's)
print(json.dumps({"steps": 25, "waits": waits, "evals": evals}))
"""


def test_two_loaders_feeding_one_step_are_its_batches_and_its_wait(tmp_path):
    out = last_json(run_script(TWO_LOADERS, tmp_path).stdout)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    train = [f for f in steps if f["phase"] == 1]
    evals = [f for f in steps if f["phase"] == 2]
    assert len(train) == 25 and all(f["boundary"] == 3 for f in train), steps
    # a's batch that zip fetched before b ran out was waited for: it is the
    # first batch of the next step (with one of each loader)
    assert [f["batches"] for f in train] == [2] * 6 + [3] + [2] * 9 + [1] * 9, \
        [f["batches"] for f in train]
    # only the eval runs' batches are eval batches
    assert len(evals) == out["evals"] == 17, [(f["step"], f["start_ns"]) for f in evals]
    # the step's wait is both fetches (the job times them together); the
    # first step's is left out (its start is the first fetch's exit or so)
    own = sum(out["waits"][1:])
    got = sum(f["data_wait_ns"] for f in train[1:]) / 1e9
    assert abs(got - own) < 0.15 * own, (got, own)


# AMP: GradScaler.step skips the optimizer's step when the gradients hold
# inf/NaN at the loss scale.  The iteration still ends there: each is one
# step (flag 8, skipped, on exactly the iterations the scaler skipped), not
# two iterations run together.  Two optimizers under one scaler (a GAN's):
# the second's skipped step writes nothing of its own.  On torch 1.x
# without CUDA the scaler disables itself and only steps: no step skipped.
AMP = r"""
import json, warnings, torch, trainmon
trainmon.attach()
g, d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
opt_g = torch.optim.SGD(g.parameters(), lr=0.01)
opt_d = torch.optim.SGD(d.parameters(), lr=0.01)
try:
    scaler = torch.amp.GradScaler("cpu")          # torch >= 2.3
except (AttributeError, TypeError):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = torch.cuda.amp.GradScaler()      # 1.x, no CUDA: disabled
on = scaler.is_enabled()
skipped = []
for i in range(24):
    loss = d(g(torch.randn(8, 4))).pow(2).mean()
    if on and i in (3, 4, 10):
        loss = loss * float("inf")                # inf gradients: the update is skipped
    scale = scaler.get_scale() if on else None
    scaler.scale(loss).backward()
    scaler.step(opt_g)
    scaler.step(optimizer=opt_d)                  # the keyword call
    scaler.update()
    if on and scaler.get_scale() < scale:
        skipped.append(i)
    opt_g.zero_grad(); opt_d.zero_grad()
print(json.dumps({"skipped": skipped, "enabled": on, "stats": trainmon.stats()}))
"""


# An optimizer whose step the agent cannot see (an LR scheduler made before
# attach() wrapped the instance's step with the unhooked one): its steps
# are not seen, and none is taken for skipped (it would read as 60 skipped).
AMP_UNSEEN = r"""
import json, torch
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.001)
sched = torch.optim.lr_scheduler.StepLR(opt, 10)
import trainmon
trainmon.attach()
try:
    scaler = torch.amp.GradScaler("cpu")
except (AttributeError, TypeError):
    scaler = None
for i in range(60):
    loss = m(torch.randn(8, 4)).pow(2).mean()
    if scaler is None:
        loss.backward(); opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt); scaler.update()
    opt.zero_grad(); sched.step()
print(json.dumps({"stats": trainmon.stats()}))
"""


def test_an_optimizer_whose_steps_are_not_seen_is_never_taken_for_skipping(tmp_path):
    out = last_json(run_script(AMP_UNSEEN, tmp_path).stdout)
    assert out["stats"]["optimizer_steps_skipped"] == 0, out
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    assert steps and not [f for f in steps if f["flags"] & 8], steps


def test_a_step_amps_grad_scaler_skipped_is_one_step_flagged_skipped(tmp_path):
    out = last_json(run_script(AMP, tmp_path).stdout)
    steps = [f for _, _, f in records(main_file(tmp_path), "step")]
    train = [f for f in steps if f["phase"] == 1]
    assert len(train) == 24 and all(f["boundary"] == 3 and f["micro_batches"] == 1
                                    for f in train), train
    assert [f["step"] for f in train if f["flags"] & 8] == out["skipped"]
    assert out["stats"]["optimizer_steps_skipped"] == len(out["skipped"])
    # the second optimizer's steps that ran are its own records; its skipped ones none
    assert len(records(main_file(tmp_path), "optimizer_step")) == 24 - len(out["skipped"])
    if out["enabled"]:
        assert out["skipped"] == [3, 4, 10], out


# An inference job (docs/DIAGNOSIS.md "Inference loops"): the report reads a
# process that never trained as one whose batches are its steps, and needs
# two things of the agent: the boundaries event counts the optimizers the
# process made (one made before attach() too: a job that makes one trains,
# even if it dies before stepping it), and an eval batch of a multi-process
# loader carries the CPU time the loop spent receiving it, as a training
# batch does (input.handoff reads it, on a sample of the fetches).
INFER_LOADER = r"""
import json, os, torch, trainmon
from torch.utils.data import DataLoader, TensorDataset
made = os.environ.get("MAKE_OPT")
if made == "before":
    torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
trainmon.attach()
if made == "after":
    torch.optim.Adam(torch.nn.Linear(2, 1).parameters())
    torch.optim.Adam(torch.nn.Linear(2, 1).parameters())
model = torch.nn.Linear(8, 2).eval()
n = 0
with torch.no_grad():
    for x, in DataLoader(TensorDataset(torch.randn(96, 8)), batch_size=8, num_workers=1):
        model(x); n += 1
print(json.dumps({"batches": n}))
"""


def test_an_inference_loop_tells_the_optimizers_it_made_and_its_receive_cpu(tmp_path):
    import json
    for made, want in ((None, 0), ("before", 1), ("after", 2)):
        d = tmp_path / str(made)
        d.mkdir()
        out = last_json(run_script(INFER_LOADER, d, env={"MAKE_OPT": made or ""}).stdout)
        f = main_file(d)
        ev = [json.loads(r["json"]) for _, _, r in records(f, "event")
              if r["name"] == "inproc.boundaries"]
        assert len(ev) == 1 and ev[0]["optimizers_made"] == want, (made, ev)
        assert ev[0]["backward_passes"] == 0 and ev[0]["optimizer_steps"] == 0, ev
        steps = [r for _, _, r in records(f, "step")]
        assert len(steps) == out["batches"] == 12, steps
        assert all(r["phase"] == 2 and r["batches"] == 1 for r in steps), steps
        # read on a sample of the fetches (as a training batch's): some, -1 the rest
        cpu = [r["wait_cpu_ns"] for r in steps]
        assert any(c > 0 for c in cpu) and all(c > 0 or c == -1 for c in cpu), cpu
