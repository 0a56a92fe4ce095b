"""The garbage collector's timing (docs/DIAGNOSIS.md, gc.pauses): what the
agent's C callback in gc.callbacks adds to each collection, against the
same collection with no callback and with a Python callback doing the same
bookkeeping (what a monitor written in Python would pay); and how many
collections a training step makes, so the cost per step.

    PYTHONPATH=python python3 bench/gc_callback.py

Each figure is the median over 9 alternating rounds of 100,000 young
collections (gc.collect(0): the collections a loop makes most, each short,
so the callback's share is largest); a round's per-collection time is its
block's time / 100,000.  Collections per step: a DataLoader loop over a
small model (batch 32 of 64 floats, 2 workers off: num_workers=0), 2000
steps, gc.get_stats() before and after.
"""
import gc
import statistics
import time

import torch

import trainmon._trainmon as c

N = 100_000
ROUNDS = 9


def py_callback():
    t0 = [0.0]
    n = [0, 0, 0]
    tot = [0.0, 0.0, 0.0]

    def cb(phase, info):
        if phase == "start":
            t0[0] = time.perf_counter()
            return
        g = info["generation"]
        n[g] += 1
        tot[g] += time.perf_counter() - t0[0]
    return cb


def block(cbs):
    saved = list(gc.callbacks)
    gc.callbacks[:] = cbs
    try:
        t = time.perf_counter()
        for _ in range(N):
            gc.collect(0)
        return (time.perf_counter() - t) / N * 1e9
    finally:
        gc.callbacks[:] = saved


def per_collection():
    pycb = py_callback()
    rows = {"none": [], "agent (C)": [], "python": []}
    for _ in range(ROUNDS):
        rows["none"].append(block([]))
        rows["agent (C)"].append(block([c.gc_callback]))
        rows["python"].append(block([pycb]))
    return {k: statistics.median(v) for k, v in rows.items()}


def per_step(steps=2000):
    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(64 * 32, 64), torch.randn(64 * 32, 1))
    dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    s0 = [g["collections"] for g in gc.get_stats()]
    done = 0
    t = time.perf_counter()
    while done < steps:
        for x, y in dl:
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            done += 1
            if done == steps:
                break
    dt = (time.perf_counter() - t) / steps
    s1 = [g["collections"] for g in gc.get_stats()]
    return [(b - a) / steps for a, b in zip(s0, s1)], dt


m = per_collection()
cps, step_s = per_step()
added = m["agent (C)"] - m["none"]
print("torch %s, Python %s" % (torch.__version__, ".".join(map(str, __import__("sys").version_info[:3]))))
print("| callback | ns per young collection | added |")
print("|---|---|---|")
for k, v in m.items():
    print("| %s | %.0f | %s |" % (k, v, "-" if k == "none" else "%+.0f" % (v - m["none"])))
print("collections per step (gen 0, 1, 2): %s; step %.0f us; the agent's callback: %.1f ns "
      "per step (%.4f %% of the step)"
      % (", ".join("%.3f" % x for x in cps), step_s * 1e6, added * sum(cps),
         100 * added * sum(cps) / (step_s * 1e9)))
