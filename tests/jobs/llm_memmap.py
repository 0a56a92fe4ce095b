"""(1) An LLM-style loop without a DataLoader: batches sliced at random
offsets from a token np.memmap in the main process (as nanoGPT's get_batch
does), AdamW, a small causal model.  Steps: optimizer steps.  With
JOB_EVAL_EVERY=N, an eval every N steps as nanoGPT's estimate_loss does it
(model.eval(), torch.no_grad(), batches from the same get_batch, then
model.train()): no DataLoader, so the eval span is seen only through
model.eval()/model.train(); its time is no step time.  With
JOB_SAVE_EVERY=N, a checkpoint every N steps as nanoGPT saves one
(torch.save of the model, the optimizer and JOB_SAVE_MB more of state, on
the training thread): the loop stops meanwhile, and that time is neither
batch preparation nor compute; with JOB_SAVE_DCP=1 the checkpoint is
torch.distributed.checkpoint.save's directory of shards (FSDP's and
torchtitan's way; one torch.save per tensor inside it).  With JOB_PYHEAP=N, the job holds N Python
objects (a corpus index as lists, as small scripts keep one) and its batch
preparation memoizes JOB_KEEP more each step (a decode cache): Python's
garbage collector then makes full collections inside the loop, each
walking the whole heap, started by the preparation's allocations.  The job
times them with a gc.callbacks entry of its own (the oracle): their time
is in the steps, and the data-wait share it prints is without them.  With
JOB_LOG_EVERY=N, every N steps the loop logs after optimizer.step() as
nanoGPT does, to a tracker whose upload takes JOB_LOG_S (a synchronous
HTTP post, slept here): the next step stalls before its forward, and that
is no batch preparation.  With JOB_ACCUM=N, gradient accumulation over N
micro-batches, each prepared before its forward (build-nanogpt's order).
The model returns its loss as nanoGPT's does, and zero_grad() follows
optimizer.step() as there.  JOB_ORDER=nanogpt makes each next batch where
nanoGPT's train.py does, between the forward and the backward (`logits,
loss = model(X, Y); loss = loss / accum; X, Y = get_batch('train');
scaler.scale(loss).backward()`, then unscale_, clip_grad_norm_,
scaler.step, zero_grad; a disabled GradScaler, as nanoGPT's off float16);
JOB_ORDER=nanochat where nanochat's base_train.py does, after the backward
(`loss.backward(); x, y = next(train_loader)` from a generator, then
clip_grad_norm_ and two optimizers stepped in turn, AdamW for the
embedding and head and a second one for the matrices, as its AdamW and
Muon).  Both fetch the first batch before the loop."""
import gc
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "40"))
PREP_S = float(os.environ.get("JOB_PREP_S", "0.004"))  # tokenizing on the fly
HIDDEN = int(os.environ.get("JOB_HIDDEN", "256"))
EVAL_EVERY = int(os.environ.get("JOB_EVAL_EVERY", "0"))
EVAL_ITERS = 4
SAVE_EVERY = int(os.environ.get("JOB_SAVE_EVERY", "0"))
# a larger model's state, saved with the checkpoint (MB of float32)
SAVE_DCP = os.environ.get("JOB_SAVE_DCP") == "1"  # torch.distributed.checkpoint.save
if SAVE_DCP:
    import torch.distributed.checkpoint as dcp
SAVE_PAD = torch.zeros(int(float(os.environ.get("JOB_SAVE_MB", "0")) * 262144))
VOCAB, BLOCK, BATCH = 256, 32, 8
LOG_EVERY = int(os.environ.get("JOB_LOG_EVERY", "0"))
LOG_S = float(os.environ.get("JOB_LOG_S", "0.3"))
PYHEAP = int(os.environ.get("JOB_PYHEAP", "0"))
ACCUM = int(os.environ.get("JOB_ACCUM", "1"))  # micro-batches per optimizer step
KEEP = int(os.environ.get("JOB_KEEP", "0"))
ORDER = os.environ.get("JOB_ORDER", "")  # "", "nanogpt" or "nanochat"
# activation checkpointing of the MLP: "reentrant" or "plain" (use_reentrant=False)
ACT_CKPT = os.environ.get("JOB_ACT_CKPT", "")
if ACT_CKPT:
    import torch.utils.checkpoint  # noqa: F401
index = [[i, i + 1] for i in range(PYHEAP)]  # the long-lived heap
cache = {}
pauses = []  # (begin, duration, generation) of every collection, by the job's own clock
_gc_t0 = [0.0]


def _gc_timer(phase, info):
    if phase == "start":
        _gc_t0[0] = time.perf_counter()
    else:
        pauses.append((_gc_t0[0], time.perf_counter() - _gc_t0[0], info["generation"]))


if PYHEAP:
    gc.collect()
    gc.callbacks.insert(0, _gc_timer)

d = tempfile.mkdtemp(prefix="tm-tokens.")
path = os.path.join(d, "train.bin")
np.random.randint(0, VOCAB, size=200_000, dtype=np.uint16).tofile(path)
data = np.memmap(path, dtype=np.uint16, mode="r")


def get_batch():
    ix = np.random.randint(0, len(data) - BLOCK - 1, size=BATCH)
    x = torch.from_numpy(np.stack([data[i:i + BLOCK].astype(np.int64) for i in ix]))
    y = torch.from_numpy(np.stack([data[i + 1:i + 1 + BLOCK].astype(np.int64) for i in ix]))
    busy(PREP_S)
    if KEEP:  # memoized decodes: objects that live on
        cache[len(cache)] = [[] for _ in range(KEEP)]
    return x, y


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 64)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.GELU(),
                                       torch.nn.Linear(HIDDEN, 64))
        self.head = torch.nn.Linear(64, VOCAB)

    def forward(self, idx, targets=None):  # nanoGPT's: the loss inside the model
        h = self.emb(idx)
        if ACT_CKPT and self.training:  # recomputed in the backward pass
            h = h + torch.utils.checkpoint.checkpoint(self.mlp, h,
                                                      use_reentrant=ACT_CKPT == "reentrant")
        else:
            h = h + self.mlp(h)
        logits = self.head(h)
        if targets is None:
            return logits, None
        return logits, torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
clock = Clock()
if ORDER == "nanochat":  # AdamW for the embedding and head, another for the matrices
    mats = [p for n, p in model.named_parameters() if n.startswith("mlp.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("mlp.")]
    opt = torch.optim.AdamW(rest, lr=1e-3)
    optimizers = [opt, torch.optim.SGD(mats, lr=1e-2, momentum=0.9)]
elif ORDER == "nanogpt":  # float16 only: disabled elsewhere, as nanoGPT's
    scaler = (torch.amp.GradScaler("cpu", enabled=False) if hasattr(torch, "amp")
              and hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler(enabled=False))


def batches():
    """nanochat's train_loader: a generator that tokenizes as it goes."""
    while True:
        yield get_batch()


train_loader = batches()
if ORDER:
    X, Y = next(train_loader)  # the first batch, before the loop


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(EVAL_ITERS)
    for k in range(EVAL_ITERS):
        x, y = get_batch()
        losses[k] = model(x, y)[1]
        busy(0.01)  # a slow eval: it must not show in the step times
    model.train()
    return losses.mean()


ckpt = os.path.join(d, "ckpt.pt")
saves = []
sizes = []  # bytes of each checkpoint
logs = []
for it in range(STEPS):
    if EVAL_EVERY and it % EVAL_EVERY == 0 and it > 0:
        t_eval = time.perf_counter()
        estimate_loss()
        dt = time.perf_counter() - t_eval
        clock.eval_s += dt
        clock.eval_run_s += dt
        clock.eval_batches += 1  # one eval span (no DataLoader: one record)
    n_pauses = len(pauses)
    if ORDER == "nanogpt":
        for micro in range(ACCUM):
            logits, loss = model(X, Y)
            loss = loss / ACCUM
            X, Y = clock.fetch(get_batch)  # while the GPU runs the forward
            scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        clock.step()
    elif ORDER == "nanochat":
        for micro in range(ACCUM):
            loss = model(X, Y)[1]
            loss = loss / ACCUM
            loss.backward()
            X, Y = clock.fetch(lambda: next(train_loader))  # while the GPU runs the backward
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for o in optimizers:
            for group in o.param_groups:
                group["lr"] = group["lr"] * 0.999
        for o in optimizers:
            o.step()
        model.zero_grad(set_to_none=True)
        clock.step()
    else:
        for micro in range(ACCUM):
            x, y = clock.fetch(get_batch)
            if PYHEAP and clock.t_first is not None:  # the collector's part of the wait
                clock.wait -= sum(dt for b, dt, g in pauses[n_pauses:] if g == 2 or dt >= 0.001)
            logits, loss = model(x, y)
            loss = loss / ACCUM
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        clock.step()
    if LOG_EVERY and (it + 1) % LOG_EVERY == 0 and it + 1 < STEPS:  # not after the last
        t_log = time.perf_counter()
        lossf = loss.item()  # nanoGPT's logging: the loss, then the tracker
        time.sleep(LOG_S)    # wandb.log(...) waiting on its upload
        logs.append(time.perf_counter() - t_log)
    if SAVE_EVERY and (it + 1) % SAVE_EVERY == 0 and it + 1 < STEPS:  # not after the last
        # nanoGPT's checkpoint, on the training thread: the loop stops
        t_save = time.perf_counter()
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                 "iter_num": it, "pad": SAVE_PAD}
        if SAVE_DCP:  # torchtitan's and FSDP users' way: a directory of shards
            dcp.save(state, checkpoint_id=os.path.join(d, "step%d" % it))
        else:
            torch.save(state, ckpt)
        dt = time.perf_counter() - t_save
        clock.eval_s += dt  # no step time: the oracle's span leaves it out
        saves.append(dt)
        if SAVE_DCP:  # the bytes it wrote: every file of the directory
            cd = os.path.join(d, "step%d" % it)
            sizes.append(sum(os.path.getsize(os.path.join(cd, n)) for n in os.listdir(cd)))
        else:
            sizes.append(os.path.getsize(ckpt))
os.unlink(path)
import shutil  # noqa: E402
shutil.rmtree(d)
extra = {"saves": len(saves), "save_s": sum(saves),
         "save_bytes": sorted(sizes)[len(sizes) // 2]} if saves else {}
if saves:  # the saves' share of the loop (steps after the first, and the saves)
    loop = clock.t_last - clock.t_first - clock.eval_s + sum(saves)
    extra["save_share"] = sum(saves) / loop if loop > 0 else None
if logs:
    extra.update(logs=len(logs), log_s=sum(logs))
if PYHEAP:  # the pauses (full collections, or 1 ms or more) after the warm-up step
    mine = [(b, dt) for b, dt, g in pauses if b >= clock.t_first and (g == 2 or dt >= 0.001)]
    extra.update(gc_pauses=len(mine), gc_s=sum(dt for b, dt in mine),
                 gc_share=sum(dt for b, dt in mine) / (clock.t_last - clock.t_first))
clock.report(**extra)
