"""(4) Manual SGD without torch.optim: batches sliced from an in-memory
tensor, loss.backward(), then p -= lr * p.grad under torch.no_grad().
Steps: backward passes.  trainmon's data wait here is the host time from
the end of one backward pass to the next forward: the parameter update
(~0.1 ms) counts in it, the job's inline timing around get_batch does not."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "80"))  # more than trainmon holds back (64)
PREP_S = float(os.environ.get("JOB_PREP_S", "0.002"))
X, Y = torch.randn(8192, 32), torch.randn(8192, 1)
model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
lr = 1e-3
clock = Clock()


def get_batch(i):
    s = (i * 64) % (len(X) - 64)
    busy(PREP_S)
    return X[s:s + 64], Y[s:s + 64]


for i in range(STEPS):
    x, y = clock.fetch(lambda: get_batch(i))
    loss = ((model(x) - y) ** 2).mean()
    busy(0.006)  # the rest of the forward's compute
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None
    clock.step()
clock.report()
