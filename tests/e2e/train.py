"""A small but real torch CPU training job for the `trainmon run` scenarios
and `make demo`: a Dataset that reads image-like files from disk, a real
DataLoader with worker processes, a small MLP and an optimizer.

    train.py --data DIR --generate N [--item-bytes B]   # write N files, exit
    train.py --data DIR --workers 2 --steps 200 [--item-cost-ms MS]
             [--model-size H --layers L] [--touch-list-mb MB]

Knobs that make the job input-bound or compute-bound:
  --item-cost-ms   CPU work per item in the worker (decode/augment stand-in:
                   real numpy work until that much CPU time is spent)
  --item-sleep-ms  a wait per item in the worker that costs no CPU
  --model-size     hidden width of the MLP (the per-step compute)
  --touch-list-mb  a Python list of that many MB of float objects made in
                   the parent before the workers fork; each item reads a
                   further slice of it, and the reference-count writes copy
                   the pages into the worker (copy-on-read)
No trainmon import here: `trainmon run` instruments it from the outside.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

FLOAT_OBJ_BYTES = 32  # a float object (24) and its list slot (8)


class FileDataset(Dataset):
    def __init__(self, root, item_cost_ms, big_list, touch_items=64, sleep_ms=0.0):
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".bin"))
        if not self.files:
            raise SystemExit("train.py: no .bin files in %s (use --generate)" % root)
        self.cost_s = item_cost_ms / 1000.0
        self.sleep_s = sleep_ms / 1000.0
        self.big = big_list
        self.touched = 0  # per process: a forked worker counts its own items
        self.touch_items = max(1, touch_items)  # items that touch the whole list once

    def __len__(self):
        return len(self.files)

    def _touch(self):
        # Reading a slice of the parent's list writes every object's
        # reference count: each page it touches is copied into this worker.
        n = len(self.big)
        k = max(1, n // self.touch_items)
        start = (self.touched * k) % n
        s = 0.0
        for x in self.big[start:start + k]:
            s += x
        self.touched += 1
        return s

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            raw = f.read()
        side = int((len(raw) // 3) ** 0.5)
        img = np.frombuffer(raw[:3 * side * side], dtype=np.uint8).reshape(3, side, side)
        x = img.astype(np.float32) / 255.0
        if self.cost_s > 0:
            # Augmentation stand-in: blur passes until the CPU time is spent
            # (CPU time, not wall time: on a busy machine it takes longer,
            # as real decoding would).
            t0 = time.process_time()
            while time.process_time() - t0 < self.cost_s:
                x = 0.5 * x + 0.25 * (np.roll(x, 1, axis=1) + np.roll(x, 1, axis=2))
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)  # waiting on something (a remote store), not CPU
        if self.big is not None:
            self._touch()
        t = torch.from_numpy(np.ascontiguousarray(x))
        return torch.nn.functional.adaptive_avg_pool2d(t, 16), i % 10


def generate(root, n, item_bytes):
    os.makedirs(root, exist_ok=True)
    for i in range(n):
        with open(os.path.join(root, "img%06d.bin" % i), "wb") as f:
            f.write(os.urandom(item_bytes))
    print("train.py: wrote %d files of %d bytes to %s" % (n, item_bytes, root))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--generate", type=int, default=0, help="write N files and exit")
    p.add_argument("--item-bytes", type=int, default=48 * 1024)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--item-cost-ms", type=float, default=0.0)
    p.add_argument("--item-sleep-ms", type=float, default=0.0)
    p.add_argument("--model-size", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--touch-list-mb", type=float, default=0.0)
    p.add_argument("--shuffle", action="store_true")
    a = p.parse_args()
    if a.generate:
        generate(a.data, a.generate, a.item_bytes)
        return 0

    torch.set_num_threads(1)
    torch.manual_seed(0)
    big = None
    if a.touch_list_mb > 0:
        big = [float(i) for i in range(int(a.touch_list_mb * 1e6 / FLOAT_OBJ_BYTES))]
    # Each worker touches the whole list once over the run, a slice per item.
    per_worker = a.steps * a.batch_size // max(1, a.workers)
    ds = FileDataset(a.data, a.item_cost_ms, big, per_worker, a.item_sleep_ms)
    dl = DataLoader(ds, batch_size=a.batch_size, shuffle=a.shuffle, num_workers=a.workers,
                    drop_last=True)
    layers = [torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, a.model_size), torch.nn.ReLU()]
    for _ in range(a.layers - 1):
        layers += [torch.nn.Linear(a.model_size, a.model_size), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(a.model_size, 10))
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    lossf = torch.nn.CrossEntropyLoss()

    # The job's own account, the oracle of the scenario tests: the time
    # each step waited in the DataLoader's __next__ and the rest of the
    # step, from step 1 on (step 0 is warm-up, as in the report).
    step, t0 = 0, time.time()
    wait = busy = 0.0
    while step < a.steps:
        it = iter(dl)
        while step < a.steps:
            s0 = time.perf_counter()
            try:
                x, y = next(it)
            except StopIteration:
                break
            s1 = time.perf_counter()
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            s2 = time.perf_counter()
            if step >= 1:
                wait += s1 - s0
                busy += s2 - s1
            step += 1
    dt = time.time() - t0
    print("train.py: %d steps in %.1f s (%.1f steps/s), loss %.3f"
          % (step, dt, step / dt, loss.item()))
    print("train.py: steps 1.. waited %.3f s for data, computed %.3f s: speedup %.3f"
          % (wait, busy, (wait + busy) / busy if busy > 0 else float("nan")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
