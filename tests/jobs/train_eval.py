"""(3) Training with an eval loop every N steps: model.eval() and
torch.no_grad() over a validation DataLoader, then model.train().  Steps:
optimizer steps; the eval batches are no training steps.  JOB_EVAL_FIRST=1
evaluates before the first step too (a baseline, as Lightning's sanity
check does): a training job still, not an inference loop that trains
later."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "30"))
EVAL_EVERY, EVAL_BATCHES = 10, 5

train = TensorDataset(torch.randn(4096, 32), torch.randn(4096, 1))
val = TensorDataset(torch.randn(EVAL_BATCHES * 16, 32), torch.randn(EVAL_BATCHES * 16, 1))
model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
clock = Clock()


def evaluate():
    t_eval = time.perf_counter()
    model.eval()
    with torch.no_grad():
        for vx, vy in DataLoader(val, batch_size=16):
            torch.nn.functional.mse_loss(model(vx), vy)
            busy(0.01)  # slow eval: it must not show in the step times
            clock.eval_batches += 1
    model.train()
    if clock.t_first is not None:
        dt = time.perf_counter() - t_eval
        clock.eval_s += dt  # eval time is no step time
        clock.eval_run_s += dt


if os.environ.get("JOB_EVAL_FIRST") == "1":
    evaluate()
it = iter(DataLoader(train, batch_size=16, shuffle=True))
for step in range(STEPS):
    x, y = clock.fetch(lambda: next(it))
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    busy(0.002)
    opt.step()
    clock.step()
    if (step + 1) % EVAL_EVERY == 0 and step + 1 < STEPS:  # (none after the last step)
        evaluate()
clock.report()
