"""(10) DataLoader features whose internals differ between torch 1.x and
2.x, one variant per run (JOB_VARIANT):
  persistent   num_workers=2, persistent_workers=True, pin_memory=True (a
               no-op without CUDA), 3 epochs of a map-style dataset;
  iterable     an IterableDataset sharded by get_worker_info(), workers
               started with multiprocessing_context="spawn" (the default
               on macOS and, from 3.14, for Python itself);
  forkserver   a map-style dataset, workers from a forkserver, and the
               model wrapped by torch.compile (backend "eager": dynamo's
               tracing and guards without a C++ toolchain) on torch 2.x,
               with dynamo's error_on_recompile set: a guard that the
               agent's hooks fail (the global forward pre-hook dict whose
               type it toggles each step) would make every step recompile,
               and here kills the job, which fails the test;
  fork         the default start method on Linux before Python 3.14: a
               map-style dataset that holds JOB_HEAP_MB (default 1000) in
               the main process, 4 workers without persistent_workers and
               short epochs (10 batches): each iter() forks 4 workers of a
               large process (page tables copied), 60 ms and more here,
               longer than the workers take for a batch;
  newiter      `x, y = next(iter(loader))` in the loop, as tutorials and
               notebooks write it: a new iterator for every batch, 2 fork
               workers started by each iter() and stopped when the
               iterator is dropped after its one batch (40 steps);
  newiter_persistent  the same with persistent_workers=True: each iter()
               resets the 2 workers, whose batches made ahead are thrown
               away.
The oracle: optimizer steps and the data-wait share timed inline."""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

VARIANT = os.environ.get("JOB_VARIANT", "persistent")
ITEM_S = 0.0004
BATCH = 8


class Items(Dataset):
    def __len__(self):
        return 20 * BATCH

    def __getitem__(self, i):
        busy(ITEM_S)
        return torch.full((16,), float(i)), torch.ones(1)


class Held(Items):
    """Items whose Dataset holds a large array in memory (a tokenized
    corpus, decoded images), touched so that its pages are the process's."""

    def __init__(self, mb):
        self.heap = torch.ones(mb * 262144)

    def __len__(self):
        return 10 * BATCH


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        k, m = (info.id, info.num_workers) if info else (0, 1)
        for i in range(k, self.n, m):
            busy(ITEM_S)
            yield torch.full((16,), float(i)), torch.ones(1)


def main():
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    run = model
    if VARIANT == "persistent":
        loader = DataLoader(Items(), batch_size=BATCH, num_workers=2, persistent_workers=True,
                            pin_memory=torch.cuda.is_available())
        epochs = 3
    elif VARIANT == "iterable":
        loader = DataLoader(Stream(60 * BATCH), batch_size=BATCH, num_workers=2,
                            multiprocessing_context="spawn")
        epochs = 1
    elif VARIANT == "fork":
        loader = DataLoader(Held(int(os.environ.get("JOB_HEAP_MB", "1000"))), batch_size=BATCH,
                            num_workers=4, multiprocessing_context="fork")
        epochs = 6
    elif VARIANT in ("newiter", "newiter_persistent"):
        loader = DataLoader(Items(), batch_size=BATCH, shuffle=True, num_workers=2,
                            multiprocessing_context="fork",
                            persistent_workers=VARIANT == "newiter_persistent")
        epochs = 0
    else:
        loader = DataLoader(Items(), batch_size=BATCH, num_workers=2,
                            multiprocessing_context="forkserver")
        epochs = 2
        if hasattr(torch, "compile"):
            import torch._dynamo as dynamo
            dynamo.config.error_on_recompile = True
            run = torch.compile(model, backend="eager")
    clock = Clock()
    if VARIANT.startswith("newiter"):
        for _ in range(40):
            x, y = clock.fetch(lambda: next(iter(loader)))  # a new iterator each batch
            loss = torch.nn.functional.mse_loss(run(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            busy(0.003)
            clock.step()
    for _ in range(epochs):
        # iter() starts the epoch's workers (or resumes the persistent
        # ones): the loop waits for it as for the batches
        it = clock.fetch(lambda: iter(loader))
        while True:
            try:
                x, y = clock.fetch(lambda: next(it))
            except StopIteration:
                break
            loss = torch.nn.functional.mse_loss(run(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            busy(0.003)  # the rest of the step's compute
            clock.step()
    clock.report(variant=VARIANT)


if __name__ == "__main__":  # spawn and forkserver import this file in each worker
    torch.set_num_threads(1)
    main()
