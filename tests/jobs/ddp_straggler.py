"""(4) Stragglers: DistributedDataParallel with 2 ranks (gloo, CPU), one of
them slowed in its data path (JOB_SLOW=data: its dataset sleeps per item)
or in its compute (JOB_SLOW=compute: its forward does extra CPU work).
Each rank reads its shard through a DistributedSampler.  The other rank
waits for it in DDP's gradient all-reduce, inside its
backward pass, and at a dist.all_reduce of the loss the loop calls each
step (as logging code does).  Run by torchrun or with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set.  Each rank prints its own oracle line
with its rank, its step count and its data-wait share.  JOB_INFER=1: no
training, each rank scores its shard under torch.inference_mode() with the
model in eval mode and no DDP wrapper (distributed batch inference: the
ranks never wait for each other until the barrier at the end); its
batches are its steps."""
import contextlib
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "40"))
SLOW = os.environ.get("JOB_SLOW", "data")          # data | compute
SLOW_RANK = int(os.environ.get("JOB_SLOW_RANK", "1"))
EXTRA_S = float(os.environ.get("JOB_EXTRA_S", "0.03"))
# JOB_SAVE_EVERY=N: rank 0 saves a checkpoint every N steps (the model and
# JOB_SAVE_MB more of state, torch.save on its training thread) while the
# other rank goes on to the next step and waits for it in the all-reduce
SAVE_EVERY = int(os.environ.get("JOB_SAVE_EVERY", "0"))
SAVE_PAD = torch.zeros(int(float(os.environ.get("JOB_SAVE_MB", "32")) * 262144))
INFER = os.environ.get("JOB_INFER") == "1"
# JOB_ACCUM=N: gradient accumulation over N micro-batches, DDP's all-reduce
# only in the last one's backward pass: JOB_NOSYNC=context wraps the others
# in `with model.no_sync():` (Hugging Face accelerate's, Lightning's),
# JOB_NOSYNC=flag sets model.require_backward_grad_sync (build-nanogpt's)
ACCUM = int(os.environ.get("JOB_ACCUM", "1"))
NOSYNC = os.environ.get("JOB_NOSYNC", "context")

dist.init_process_group("gloo")
rank = dist.get_rank()
slow = rank == SLOW_RANK


class Items(Dataset):
    def __len__(self):
        return 8 * STEPS * ACCUM * dist.get_world_size()

    def __getitem__(self, i):
        if slow and SLOW == "data":
            time.sleep(EXTRA_S / 8)  # 8 items per batch
        return torch.randn(64), torch.randn(1)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 256)
        self.b = torch.nn.Linear(256, 1)

    def forward(self, x):
        if slow and SLOW == "compute":
            busy(EXTRA_S)
        busy(0.004)  # the rest of the forward pass
        return self.b(torch.relu(self.a(x)))


if INFER:
    model = Net().eval()
    clock = Clock()
    it = iter(DataLoader(Items(), batch_size=8, num_workers=0,
                         sampler=DistributedSampler(Items(), shuffle=False)))
    with torch.inference_mode():
        while True:
            try:
                x, _ = clock.fetch(lambda: next(it))
            except StopIteration:
                break
            model(x)
            clock.step()
    clock.report(rank=rank, slow=slow, inference=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)
model = torch.nn.parallel.DistributedDataParallel(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.01)
clock = Clock()
saves = []
ckpt = os.path.join(os.environ.get("TMPDIR", "/tmp"), "ddp-ckpt-%d.pt" % os.getpid())
it = iter(DataLoader(Items(), batch_size=8, num_workers=0, sampler=DistributedSampler(Items())))
for step in range(STEPS):
    if ACCUM > 1:
        for micro in range(ACCUM):
            x, y = clock.fetch(lambda: next(it))
            last = micro == ACCUM - 1
            if NOSYNC == "flag":
                model.require_backward_grad_sync = last
            with contextlib.nullcontext() if last or NOSYNC == "flag" else model.no_sync():
                loss = torch.nn.functional.mse_loss(model(x), y) / ACCUM
                loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    else:
        x, y = clock.fetch(lambda: next(it))
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    logged = loss.detach().clone()
    dist.all_reduce(logged)  # the mean loss for logging, as loops do
    clock.step()
    if SAVE_EVERY and rank == 0 and (step + 1) % SAVE_EVERY == 0 and step + 1 < STEPS:
        t_save = time.perf_counter()
        torch.save({"model": model.module.state_dict(), "pad": SAVE_PAD}, ckpt)
        dt = time.perf_counter() - t_save
        clock.eval_s += dt  # no step time of this rank: the oracle's span leaves it out
        saves.append(dt)
extra = {"saves": len(saves), "save_s": sum(saves)} if saves else {}
clock.report(rank=rank, slow=slow, **extra)
# both ranks done before the group goes: under torch 2.13 a rank that
# destroys its gloo group while the other still uses it aborted in 3 of 12
# torchrun runs ("terminate called without an active exception", SIGABRT),
# with or without trainmon; with the barrier, in none of 12
dist.barrier()
dist.destroy_process_group()
if saves:
    os.unlink(ckpt)
