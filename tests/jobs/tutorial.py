"""(26) The PyTorch CIFAR-10 tutorial's loop ("Training a Classifier"): a
batch looked at before training (`dataiter = iter(trainloader); images,
labels = next(dataiter)`, shown with imshow), then epochs of `for i, data
in enumerate(trainloader, 0)` with zero_grad, forward, loss, backward and
step, over a DataLoader with 2 workers and shuffle=True.  JOB_VARIANT=drop
looks at it as notebooks often write it, `images, labels =
next(iter(trainloader))`: the iterator dropped at once, its workers
stopped.  Either way the looked-at batch trains no step: the job's steps
are its loop's (the report counted one more, a step of that batch alone,
when its iterator was dropped), and the loop's first step, with its
workers' start, is the warm-up.  The job times each epoch's iter() (its
workers start) with the batches it waits for."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock  # noqa: E402

VARIANT = os.environ.get("JOB_VARIANT", "keep")
EPOCHS = int(os.environ.get("JOB_EPOCHS", "2"))


class Images(Dataset):
    """64 small images, each read from a slow store (4 ms)."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.004)
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 8, 8, generator=g), i % 10


trainloader = DataLoader(Images(), batch_size=4, shuffle=True, num_workers=2)
if VARIANT == "drop":
    images, labels = next(iter(trainloader))
else:
    dataiter = iter(trainloader)
    images, labels = next(dataiter)
print("a batch of", tuple(images.shape))  # the tutorial's imshow
net = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                          torch.nn.Linear(6 * 6 * 6, 10))
criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
clock = Clock()
for epoch in range(EPOCHS):
    it = clock.fetch(lambda: enumerate(trainloader, 0))  # iter(): the epoch's workers start
    while True:
        try:
            i, data = clock.fetch(lambda: next(it))
        except StopIteration:
            break
        inputs, labels = data
        optimizer.zero_grad()
        loss = criterion(net(inputs), labels)
        loss.backward()
        optimizer.step()
        clock.step()
clock.report(variant=VARIANT)
