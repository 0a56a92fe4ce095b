"""(3) Idle workers: an in-memory dataset behind a DataLoader with 2
workers.  Each item is a slice of a tensor already in memory, so the
workers have almost nothing to do; what the loop waits for is the handoff
of each batch from a worker to the main process (collating into shared
memory, the queue, receiving it).  The oracle: steps, and the data-wait
share timed inline around next(it).  trainmon must call this handoff, not
CPU-bound workers (no input.cpu_bound: more workers would not help)."""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "60"))
BATCH = int(os.environ.get("JOB_BATCH", "256"))
N = int(os.environ.get("JOB_ITEMS", "65536"))
WORKERS = int(os.environ.get("JOB_WORKERS", "2"))


class InMemory(Dataset):
    def __init__(self):
        self.x = torch.randn(N, 64)
        self.y = torch.randint(0, 10, (N,))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


if __name__ == "__main__":
    model = torch.nn.Sequential(torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = Clock()
    loader = DataLoader(InMemory(), batch_size=BATCH, num_workers=WORKERS, shuffle=True)
    it = iter(loader)
    for step in range(STEPS):
        try:
            x, y = clock.fetch(lambda: next(it))
        except StopIteration:
            # a new epoch: iter() starts the workers again, a wait as well
            it = clock.fetch(lambda: iter(loader))
            x, y = clock.fetch(lambda: next(it))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        busy(0.002)  # the rest of a step's compute
        clock.step()
    clock.report()
