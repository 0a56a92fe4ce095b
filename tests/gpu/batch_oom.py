"""The largest micro-batch that fits, predicted and found (issue #16 item 5).

A small transformer encoder (12 layers, d_model 512, 8 heads, sequences of
256 tokens, Adam) trained from a DataLoader, the kind of model whose
activations dominate its memory.  tests/gpu/check.sh runs it three ways:

  batch_oom.py train BATCH STEPS     train STEPS steps at BATCH (under
                                     `trainmon run`: the anatomy gives the
                                     predicted largest batch; with a batch
                                     too large: the OOM the report explains)
  batch_oom.py search START          the largest batch that really fits:
                                     doubled from START until a training
                                     step runs out of memory, then bisected;
                                     prints one JSON line
  batch_oom.py histcost BATCH STEPS  what torch's _record_memory_history
                                     costs per step and per recorded event
                                     (the cost `run --memory-history` states)

Each prints its own account (steps done, the batch, the timings): the
oracle check.sh compares trainmon's report with.  `--device cpu` runs the
same code on the CPU at a tiny size, to check the script itself without a
GPU (no OOM there).
"""
import gc
import json
import statistics
import sys
import time

import torch

SEQ, D, HEADS, LAYERS = 256, 512, 8, 12


class Tokens(torch.utils.data.Dataset):
    """Random embeddings made on the host, as a tokenizer-and-embed stage
    would hand them over (the batch's leading dimension is the batch)."""

    def __init__(self, n, seq, d):
        self.n, self.seq, self.d = n, seq, d

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.seq, self.d, generator=g)


def build(dev, seq=SEQ, d=D, layers=LAYERS):
    layer = torch.nn.TransformerEncoderLayer(d, HEADS, dim_feedforward=4 * d, batch_first=True)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, layers),
                                torch.nn.Linear(d, 1)).to(dev)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def step(model, opt, x):
    loss = model(x).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def train(dev, batch, steps, seq, d, layers):
    model, opt = build(dev, seq, d, layers)
    loader = torch.utils.data.DataLoader(Tokens(batch * steps, seq, d), batch_size=batch)
    done = 0
    for x in loader:
        step(model, opt, x.to(dev, non_blocking=True))
        done += 1
    sync(dev)
    print("batch_oom: train: batch %d, %d optimizer steps done" % (batch, done), flush=True)


def fits(dev, model, opt, batch, seq, d):
    """Two training steps at this batch (the second one with Adam's state
    and the previous step's cached blocks in place, as in training)."""
    x = None
    try:
        for _ in range(2):
            x = torch.randn(batch, seq, d, device=dev)
            step(model, opt, x)
            x = None
        sync(dev)
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        x = None
        opt.zero_grad(set_to_none=True)
        gc.collect()
        if dev.type == "cuda":
            torch.cuda.empty_cache()


def search(dev, start, seq, d, layers):
    model, opt = build(dev, seq, d, layers)
    lo, hi = 0, None
    b = max(1, start)
    tries = []
    while hi is None:
        ok = fits(dev, model, opt, b, seq, d)
        tries.append((b, ok))
        if ok:
            lo, b = b, 2 * b
        else:
            hi = b
        if dev.type != "cuda" and b > 4 * start:  # no OOM on the CPU: stop
            hi = b
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok = fits(dev, model, opt, mid, seq, d)
        tries.append((mid, ok))
        if ok:
            lo = mid
        else:
            hi = mid
    print(json.dumps({"largest_fit": lo, "first_fail": hi, "tries": tries,
                      "cpu_dry_run": dev.type != "cuda"}), flush=True)


def histcost(dev, batch, steps, seq, d, layers):
    """Median step time without and with the allocator's history recording,
    and the events it recorded per step."""
    model, opt = build(dev, seq, d, layers)
    x = torch.randn(batch, seq, d, device=dev)

    def block():
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            step(model, opt, x)
            sync(dev)
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    block()  # warm up: Adam's state, cuBLAS handles, cached blocks
    plain = block()
    events = 0
    rec = getattr(getattr(torch.cuda, "memory", None), "_record_memory_history", None)
    if dev.type == "cuda" and rec is not None:
        try:
            rec(enabled="all", max_entries=1000000)
        except TypeError:
            rec(True, trace_alloc_max_entries=1000000)
        hist = block()
        snap = torch.cuda.memory._snapshot()
        events = sum(len(t) for t in snap.get("device_traces", []))
        try:
            rec(enabled=None)
        except TypeError:
            rec(False)
    else:
        hist = block()
    per_event = (hist - plain) / (events / steps) if events else float("nan")
    print(json.dumps({"plain_step_s": plain, "history_step_s": hist,
                      "added_per_step_us": (hist - plain) * 1e6,
                      "events_per_step": events / steps if steps else 0,
                      "added_per_event_us": per_event * 1e6}), flush=True)


def main(argv):
    dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if "--device" in argv:
        i = argv.index("--device")
        dev = torch.device(argv[i + 1])
        del argv[i:i + 2]
    # the CPU dry run: the same code at a size a laptop runs in seconds
    seq, d, layers = (SEQ, D, LAYERS) if dev.type == "cuda" else (16, 32, 2)
    mode = argv[1] if len(argv) > 1 else ""
    if mode == "train" and len(argv) == 4:
        train(dev, int(argv[2]), int(argv[3]), seq, d, layers)
    elif mode == "search" and len(argv) == 3:
        search(dev, int(argv[2]), seq, d, layers)
    elif mode == "histcost" and len(argv) == 4:
        histcost(dev, int(argv[2]), int(argv[3]), seq, d, layers)
    else:
        print("usage: batch_oom.py [--device DEV] train BATCH STEPS | search START | "
              "histcost BATCH STEPS", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
