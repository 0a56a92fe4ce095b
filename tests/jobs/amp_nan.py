"""(12) Mixed precision with a GradScaler whose model blows up: a loop
with torch.amp.GradScaler (fp16 AMP's loss scaling; on the CPU of this
test, torch >= 2.3, over fp32 gradients, whose inf checks are the same)
runs well, then a learning-rate spike at step JOB_SPIKE (a bad schedule,
a bad batch) makes the weights overflow: every later loss is inf, the
scaler skips every later update, and the job goes on computing while it
learns nothing.  The job counts the steps the scaler skipped (its scale
falls) and prints them with its step count (every iteration is a step,
as the Hugging Face Trainer counts them).  On torch 1.x the CPU has no
GradScaler: the job runs without one and prints amp_skipped null."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "60"))
SPIKE = int(os.environ.get("JOB_SPIKE", "25"))

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    scaler = torch.amp.GradScaler("cpu")
except (AttributeError, TypeError):
    scaler = None
clock = Clock()
X, Y = torch.randn(4096, 32), torch.randn(4096, 1)
skipped, dead_from = 0, None
for step in range(STEPS):
    i = (step * 16) % 4096
    # batch preparation (CPU work) and the slice: the loop's data wait
    x, y = clock.fetch(lambda: (busy(0.001), X[i:i + 16], Y[i:i + 16])[1:])
    loss = torch.nn.functional.mse_loss(model(x), y)
    for group in opt.param_groups:
        group["lr"] = 1e30 if step == SPIKE else 0.01
    if scaler is None:
        loss.backward()
        busy(0.002)  # the rest of a real model's compute (beside it the loop's own us are few)
        opt.step()
    else:
        scale = scaler.get_scale()
        scaler.scale(loss).backward()
        busy(0.002)
        scaler.step(opt)
        scaler.update()
        if scaler.get_scale() < scale:
            skipped += 1
            dead_from = step if dead_from is None else dead_from
        else:
            dead_from = None
    opt.zero_grad()
    clock.step()
clock.report(amp_skipped=skipped if scaler else None,
             amp_dead_from=dead_from if scaler else None)
