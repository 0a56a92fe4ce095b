"""(2) Gradient accumulation: 4 micro-batches per optimizer step from a
DataLoader whose dataset costs a known time per item.  Steps: optimizer
steps (not micro-batches)."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

ACCUM = 4
STEPS = int(os.environ.get("JOB_STEPS", "20"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0003"))


class Slow(Dataset):
    def __len__(self):
        return 10 ** 6

    def __getitem__(self, i):
        time.sleep(ITEM_S)
        return torch.randn(32), torch.randn(1)


model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clock = Clock()
it = iter(DataLoader(Slow(), batch_size=8, num_workers=0))
for step in range(STEPS):
    for micro in range(ACCUM):
        x, y = clock.fetch(lambda: next(it))
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUM
        loss.backward()
        busy(0.001)  # the rest of the micro-batch's compute
    opt.step()
    opt.zero_grad()
    clock.step()
clock.report(micro_batches=STEPS * ACCUM)
