"""(10) Batches fetched by a background thread: the `BackgroundGenerator`
pattern (prefetch_generator, and many hand-written loops): a thread iterates
the DataLoader and puts the batches in a bounded queue, and the training
loop takes them from the queue.  The DataLoader's __next__ runs only on
that thread, never on the one that trains, so the training loop's data wait
is its wait on the queue, not the thread's fetch time.  JOB_ITEM_S sets the
dataset's cost per item: slow enough, the thread cannot keep up and the
loop waits; fast, the queue is always full and the loop never waits.
JOB_WORKERS gives the DataLoader behind the thread worker processes.
Steps: optimizer steps."""
import os
import queue
import sys
import threading
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "40"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0015"))
WORKERS = int(os.environ.get("JOB_WORKERS", "0"))
COMPUTE_S = 0.004
BATCH = 8


class Slow(Dataset):
    def __len__(self):
        return 10 ** 6

    def __getitem__(self, i):
        time.sleep(ITEM_S)
        return torch.randn(32), torch.randn(1)


class BackgroundGenerator(threading.Thread):
    """As prefetch_generator's: iterates its source on a daemon thread."""

    def __init__(self, source, max_prefetch=4):
        super().__init__(daemon=True)
        self.queue = queue.Queue(max_prefetch)
        self.source = source
        self.stopping = threading.Event()
        self.start()

    def run(self):
        for item in self.source:
            if self.stopping.is_set():
                break
            self.queue.put(item)
        self.queue.put(None)

    def close(self):
        """Stops the thread (torch aborts a process whose daemon thread is
        still in a DataLoader at exit)."""
        self.stopping.set()
        while self.is_alive():
            try:
                self.queue.get(timeout=0.05)
            except queue.Empty:
                pass
        self.join()

    def __iter__(self):
        return self

    def __next__(self):
        item = self.queue.get()
        if item is None:
            raise StopIteration
        return item


model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clock = Clock()
loader = DataLoader(Slow(), batch_size=BATCH, num_workers=WORKERS)
it = BackgroundGenerator(loader)
for step in range(STEPS):
    x, y = clock.fetch(lambda: next(it))
    loss = torch.nn.functional.mse_loss(model(x), y)
    time.sleep(COMPUTE_S)  # the rest of the step's compute, outside the GIL as on a GPU
    opt.zero_grad()
    loss.backward()
    opt.step()
    clock.step()
it.close()
clock.report()
