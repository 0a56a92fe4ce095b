"""(11) Two DataLoaders feeding one step, as semi-supervised training and
domain adaptation do: a labeled and an unlabeled loader, each batch of a
step taking one batch from each.  JOB_VARIANT picks how the loop takes
them:

  zip   `for (x, y), u in zip(labeled, unlabeled)` (epochs over the pair);
  next  `for x, y in labeled` with `u = next(unl_it)` inside the loop, the
        unlabeled iterator started again when it runs out (FixMatch's
        style: the unlabeled set is a different length).

Both datasets cost JOB_ITEM_S per item in the main process (no workers), so
the loop waits on both fetches; the job times the two together inline.
JOB_WORKERS=N gives each of the two loaders N persistent workers (FixMatch's
loaders have workers of their own): 2N worker processes at once, never
started again, whose ids are 0..N-1 in each loader.
Steps: optimizer steps.  Every 15 steps (JOB_EVAL_EVERY, 0: none) a short
eval run over a third loader with grad enabled (no torch.no_grad(): a
mistake people make, and the case the held batches of another loader were
first written as eval for), timed and left out of the span."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "40"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0005"))
VARIANT = os.environ.get("JOB_VARIANT", "zip")
EVAL_EVERY = int(os.environ.get("JOB_EVAL_EVERY", "15"))
EVAL_BATCHES = 3
COMPUTE_S = 0.004
BATCH = 8


class Slow(Dataset):
    def __init__(self, n, labeled):
        self.n, self.labeled = n, labeled

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(ITEM_S)
        x = torch.randn(32)
        return (x, torch.randn(1)) if self.labeled else x


model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clock = Clock()
WORKERS = int(os.environ.get("JOB_WORKERS", "0"))
LOADER_KW = {"num_workers": WORKERS, "persistent_workers": True} if WORKERS else {}
labeled = DataLoader(Slow(BATCH * 25, True), batch_size=BATCH, shuffle=True, **LOADER_KW)
# the unlabeled set is the shorter one here: the `next` variant starts its
# iterator again mid-epoch, the `zip` one ends its epochs on it
unlabeled = DataLoader(Slow(BATCH * 11, False), batch_size=BATCH, shuffle=True, **LOADER_KW)
val = DataLoader(Slow(BATCH * EVAL_BATCHES, True), batch_size=BATCH)


def train_step(x, y, u):
    sup = torch.nn.functional.mse_loss(model(x), y)
    cons = model(u).pow(2).mean()  # stands in for a consistency loss
    time.sleep(COMPUTE_S)  # the rest of the step's compute, outside the GIL as on a GPU
    opt.zero_grad()
    (sup + 0.1 * cons).backward()
    opt.step()
    clock.step()


def evaluate():
    t0 = time.perf_counter()
    for x, y in val:  # grad enabled: no torch.no_grad() here
        model(x)
        clock.eval_batches += 1
    dt = time.perf_counter() - t0
    clock.eval_s += dt
    clock.eval_run_s += dt


def maybe_eval():
    if EVAL_EVERY and clock.steps % EVAL_EVERY == 0 and clock.steps < STEPS:
        evaluate()


if VARIANT == "zip":
    while clock.steps < STEPS:
        # iter() is a wait too: persistent workers are told to start an
        # epoch again and answer (with workers: JOB_WORKERS)
        pairs = clock.fetch(lambda: iter(zip(labeled, unlabeled)))
        while clock.steps < STEPS:
            got = clock.fetch(lambda: next(pairs, None))  # the fetch that ends it is wait too
            if got is None:
                break
            (x, y), u = got
            train_step(x, y, u)
            maybe_eval()
elif VARIANT == "next":
    unl_it = iter(unlabeled)

    def both():
        global unl_it
        got = next(lab_it, None)
        if got is None:
            return None
        x, y = got
        try:
            u = next(unl_it)
        except StopIteration:
            unl_it = iter(unlabeled)
            u = next(unl_it)
        return x, y, u

    while clock.steps < STEPS:
        lab_it = clock.fetch(lambda: iter(labeled))
        while clock.steps < STEPS:
            got = clock.fetch(both)
            if got is None:
                break
            train_step(*got)
            maybe_eval()
else:
    sys.exit("JOB_VARIANT: zip or next")
clock.report()
