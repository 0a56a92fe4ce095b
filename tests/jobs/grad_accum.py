"""(2) Gradient accumulation: 4 micro-batches per optimizer step from a
DataLoader whose dataset costs a known time per item.  Steps: optimizer
steps (not micro-batches).  JOB_CYCLE=1 takes the batches from an endless
`cycle()` generator over a DataLoader of 10 batches, as diffusion and GAN
training code does (`data = cycle(dl)`, `next(data)` per micro-batch): a
new epoch, and a new iterator, every 2.5 steps, mid-step."""
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
CYCLE = os.environ.get("JOB_CYCLE") == "1"


class Slow(Dataset):
    def __len__(self):
        return 80 if CYCLE else 10 ** 6

    def __getitem__(self, i):
        time.sleep(ITEM_S)
        return torch.randn(32), torch.randn(1)


model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clock = Clock()


def cycle(dl):
    while True:
        for batch in dl:
            yield batch


loader = DataLoader(Slow(), batch_size=8, num_workers=0)
it = cycle(loader) if CYCLE else iter(loader)
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
