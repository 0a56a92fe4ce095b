"""(5) A loop that breaks after K optimizer steps out of a longer
DataLoader: the last step (the one before the break) must count."""
import os
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

K = int(os.environ.get("JOB_STEPS", "25"))
ds = TensorDataset(torch.randn(100 * 16, 32), torch.randn(100 * 16, 1))
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clock = Clock()
it = iter(DataLoader(ds, batch_size=16))
while True:
    x, y = clock.fetch(lambda: next(it))
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    busy(0.002)
    opt.step()
    clock.step()
    if clock.steps == K:
        break
busy(0.3)  # work after the loop (saving, logging): not part of the last step
clock.report()
