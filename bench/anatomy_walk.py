"""The memory anatomy's cost (docs/DIAGNOSIS.md "Memory anatomy"): one walk
over an optimizer's tensors, as the agent makes at its due steps (the lead
optimizer's first, then every 4096th), timed on AdamW over a 24-layer
TransformerEncoder (288 parameters, 864 state tensors), CPU; and the one
pass over the garbage collector's objects that finds the live modules
(at the first walk) and, at an OOM, the optimizers: in this process, and
with a million more objects alive (a large job's Python heap).

    PYTHONPATH=python python3 bench/anatomy_walk.py
"""
import time

import torch

import trainmon

torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(256, 8, 1024)
model = torch.nn.TransformerEncoder(layer, 24)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
model(torch.randn(4, 2, 256)).sum().backward()
opt.step()
n = sum(1 for _ in model.parameters())
state = sum(len(s) for s in opt.state.values())
trainmon._anatomy_walk(torch, opt)
reps = 50
t = time.perf_counter()
for _ in range(reps):
    trainmon._anatomy_walk(torch, opt)
dt = (time.perf_counter() - t) / reps
print("torch %s: %d parameters, %d state tensors: one walk %.2f ms (%.1f us per tensor)"
      % (torch.__version__, n, state, dt * 1e3, dt * 1e6 / (2 * n + state)))

from trainmon import _anatomy_frozen  # noqa: E402,F401  (the agent's entry)
import gc  # noqa: E402


def scan_ms(reps=5):
    best = None
    for _ in range(reps):
        t = time.perf_counter()
        opts, mods = trainmon._live_objects(torch)
        d = time.perf_counter() - t
        best = d if best is None else min(best, d)
    return best * 1e3, len(opts), len(mods)


for extra in (0, 1000000):
    ballast = [[i] for i in range(extra)]  # lists: always tracked by the gc
    ms, no, nm = scan_ms()
    print("gc pass over %d objects (%d optimizers, %d modules found): %.1f ms (best of 5)"
          % (len(gc.get_objects()), no, nm, ms))
    del ballast
