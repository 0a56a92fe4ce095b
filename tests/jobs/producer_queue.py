"""(15) Batches made by producer processes of the job's own: processes
started with multiprocessing (spawn, as torch.multiprocessing advises) make
each batch (here 12 ms of CPU: decoding, tokenizing) and put it on a
bounded multiprocessing Queue; the training loop takes them with get().  No
DataLoader: the loop's wait is its get(), where the training thread sleeps
on the queue's pipe while a producer works.  Slower than the step, one
producer leaves the loop waiting about two thirds of its time.  The report
must say the wait is on the job's other processes (input.main_prep, cause
other_processes), not on a memmap or slow storage.  JOB_PRODUCERS sets
how many.  Steps: optimizer steps."""
import os
import sys

import torch
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "200"))
PRODUCERS = int(os.environ.get("JOB_PRODUCERS", "1"))
MAKE_S = 0.012     # a batch's CPU work in a producer
COMPUTE_S = 0.004  # the step's compute beside the model's


def producer(q, done, n, seed):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        busy(MAKE_S)
        q.put((torch.randn(64, 128, generator=g), torch.randn(64, 1, generator=g)))
    # alive until the loop is done: torch shares a queued tensor's storage
    # through the process that made it (the loop's get() connects to it)
    done.wait()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                        torch.nn.Linear(128, 1))

    def forward(self, x):
        busy(COMPUTE_S)  # a larger model's forward
        return self.body(x)


def main():
    ctx = mp.get_context("spawn")
    q, done = ctx.Queue(maxsize=8), ctx.Event()
    per = -(-STEPS // PRODUCERS)
    procs = [ctx.Process(target=producer, args=(q, done, per, i), daemon=True)
             for i in range(PRODUCERS)]
    for p in procs:
        p.start()
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    clock = Clock()
    for _ in range(STEPS):
        x, y = clock.fetch(q.get)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        clock.step()
    clock.report(producers=PRODUCERS)
    done.set()
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
