"""(14) A Hugging Face `accelerate` loop without the Trainer, as accelerate's
own examples write it (examples/by_feature/gradient_accumulation.py):
`Accelerator(gradient_accumulation_steps=N)`, model, optimizer, DataLoader
and scheduler through `accelerator.prepare`, and per batch

    with accelerator.accumulate(model):
        loss = ...; accelerator.backward(loss)
        optimizer.step(); lr_scheduler.step(); optimizer.zero_grad()

`optimizer.step()` is called on every batch, but the AcceleratedOptimizer
steps the inner optimizer only where gradients sync (every Nth batch, and
the last of the epoch): the steps are those, as the job counts them with
`accelerator.sync_gradients`.  The prepared DataLoader (DataLoaderShard)
fetches one batch ahead.  JOB_ACCUM picks N (default 4); the dataset costs
JOB_ITEM_S per item in the main process (no workers), timed inline."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock  # noqa: E402

from accelerate import Accelerator  # noqa: E402

ACCUM = int(os.environ.get("JOB_ACCUM", "4"))
EPOCHS = int(os.environ.get("JOB_EPOCHS", "2"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0005"))
BATCH, N = 8, 8 * 42  # 42 batches an epoch: 10 steps of 4 and a short one of 2
COMPUTE_S = 0.002


class Slow(Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        time.sleep(ITEM_S)
        return torch.randn(32), torch.randn(1)


accelerator = Accelerator(gradient_accumulation_steps=ACCUM, cpu=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
loader = DataLoader(Slow(), batch_size=BATCH, shuffle=True)
model, opt, loader, sched = accelerator.prepare(model, opt, loader, sched)
clock = Clock()
batches = 0
for epoch in range(EPOCHS):
    it = iter(loader)
    while True:
        try:
            x, y = clock.fetch(lambda: next(it))
        except StopIteration:
            break
        batches += 1
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            time.sleep(COMPUTE_S)  # the rest of the micro-batch's device work
            opt.step()
            sched.step()
            opt.zero_grad()
            if accelerator.sync_gradients:
                clock.step()
clock.report(micro_batches=batches)
