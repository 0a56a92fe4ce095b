"""(19) The loop most tutorials write: epochs of `for x, y in tqdm(loader)`
with the progress bar's postfix set from `loss.item()` every step, and a
validation pass under `torch.no_grad()` with a tqdm bar of its own at each
epoch's end.  tqdm's generator holds the DataLoader's iterator and refreshes
its bar between batches (mininterval=0: every batch, the most work it does
there); the job can only time its wait from the end of one step to the
start of the next one's body, tqdm's own work included, as a user would.
JOB_WORKERS (default 2) DataLoader workers decode each item for ITEM_S of
CPU.  Steps: optimizer steps; the validation batches are eval."""
import io
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

EPOCHS = int(os.environ.get("JOB_EPOCHS", "3"))
WORKERS = int(os.environ.get("JOB_WORKERS", "2"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.002"))
BATCH, TRAIN_BATCHES, VAL_BATCHES = 8, 15, 3


class Decoded(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        busy(ITEM_S)  # decoding an item (an image, a token window)
        return torch.randn(32), torch.randn(1)


model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
kw = dict(batch_size=BATCH, num_workers=WORKERS, persistent_workers=WORKERS > 0)
train = DataLoader(Decoded(BATCH * TRAIN_BATCHES), shuffle=True, **kw)
val = DataLoader(Decoded(BATCH * VAL_BATCHES), **kw)
clock = Clock()
bar_out = io.StringIO()  # the bars drawn as on a terminal, kept out of the oracle's stdout
t_end = None
for epoch in range(EPOCHS):
    model.train()
    pbar = tqdm(train, desc="epoch %d" % epoch, file=bar_out, mininterval=0)
    for x, y in pbar:
        if t_end is not None and clock.t_first is not None:
            clock.wait += time.perf_counter() - t_end  # the fetch, tqdm's refresh in it
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        busy(0.004)  # the rest of the step's compute
        opt.step()
        pbar.set_postfix(loss="%.4f" % loss.item())
        clock.step()
        t_end = time.perf_counter()
    t_eval = time.perf_counter()
    model.eval()
    with torch.no_grad():
        for vx, vy in tqdm(val, desc="val", file=bar_out, leave=False):
            torch.nn.functional.mse_loss(model(vx), vy)
            clock.eval_batches += 1
    if epoch + 1 < EPOCHS:  # the next epoch's first fetch begins here
        dt = time.perf_counter() - t_eval
        clock.eval_s += dt
        clock.eval_run_s += dt
        t_end = time.perf_counter()
clock.report(bars=bar_out.getvalue().count("epoch"))
