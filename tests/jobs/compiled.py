"""(20) The torch 2.x loop: `model = torch.compile(model)`, then epochs of
`for x, y in loader` whose last batch is short (the data set is not a
multiple of the batch size, drop_last=False, as the default is).  The first
step compiles the forward and the backward graphs; the first short batch
recompiles them (a new shape); after that the graphs are cached.  The
compilation runs inside the forward and the backward: the loop's compute,
never its wait for data.  JOB_BACKEND (default aot_eager: dynamo's tracing
and AOTAutograd's graphs without inductor's C++ build, which takes minutes on
this VM; inductor for the real thing) and JOB_WORKERS (default 0) DataLoader
workers decoding each item for ITEM_S of CPU.  The job counts its own
compilations (torch._dynamo's frame counter) and times the steps that
compiled.  Steps: optimizer steps.

JOB_VARIANT=storm: the model's forward counts its calls in an attribute
and branches on it (a guard on the counter's value), so each step
recompiles until torch's recompile_limit (8 compilations of the frame),
after which dynamo runs the forward uncompiled (a warning on stderr)."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

EPOCHS = int(os.environ.get("JOB_EPOCHS", "3"))
WORKERS = int(os.environ.get("JOB_WORKERS", "0"))
BACKEND = os.environ.get("JOB_BACKEND", "aot_eager")
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0005"))
BATCH, ITEMS = 16, 16 * 12 + 5  # 12 full batches and a short one of 5


class Decoded(Dataset):
    def __len__(self):
        return ITEMS

    def __getitem__(self, i):
        busy(ITEM_S)  # decoding an item
        return torch.randn(64), torch.randn(1)


VARIANT = os.environ.get("JOB_VARIANT", "")


class Counting(torch.nn.Module):
    """A forward that reads a counter it keeps: a guard on its value."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.GELU(),
                                       torch.nn.Linear(512, 1))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls % 1000 == 999:
            x = x * 0.5
        return self.net(x)


if VARIANT == "storm":
    model = Counting()
else:
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.GELU(), torch.nn.Linear(512, 1))
model = torch.compile(model, backend=BACKEND)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(Decoded(), batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                    persistent_workers=WORKERS > 0)
clock = Clock()
frames = torch._dynamo.utils.counters["stats"]
compiled_steps, compile_step_s = 0, 0.0
for epoch in range(EPOCHS):
    it = iter(loader)
    while True:
        try:
            x, y = clock.fetch(lambda: next(it))
        except StopIteration:
            break
        before = frames["unique_graphs"]
        t0 = time.perf_counter()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        busy(0.003)  # the rest of the step's compute
        opt.step()
        clock.step()
        if frames["unique_graphs"] != before:  # this step compiled a graph
            compiled_steps += 1
            compile_step_s += time.perf_counter() - t0
clock.report(compiled_steps=compiled_steps, compile_step_s=round(compile_step_s, 4),
             graphs=frames["unique_graphs"], backend=BACKEND,
             frames_compiled=torch._dynamo.utils.counters["frames"]["ok"])
