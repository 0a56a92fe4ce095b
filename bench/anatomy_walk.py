"""The memory anatomy's cost (docs/DIAGNOSIS.md "Memory anatomy"): one walk
over an optimizer's tensors, as the agent makes at its due steps (1, 2, 4,
..., 1024, then every 1024th), timed on AdamW over a 24-layer
TransformerEncoder (288 parameters, 864 state tensors), CPU.

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
