"""(13) A GAN: two networks, two optimizers, several backward passes per
iteration, one DataLoader.  JOB_VARIANT picks the style:

  dcgan  PyTorch's DCGAN tutorial: per batch the discriminator's loss on
         the real batch and on a fake one, each with its own backward()
         (gradients add up), optimizerD.step(); then the generator's
         backward() through the discriminator and optimizerG.step().  Three
         backward passes and two optimizer steps per batch: one step.
  wgan   WGAN-GP's loop (n_critic = 5): the critic steps on every batch and
         the generator on every fifth, its backward and step after the
         fifth critic step and before the next fetch.  Steps: critic steps
         (one per batch), the generator's step inside every fifth.

The dataset costs JOB_ITEM_S per item in the main process (no workers): the
loop waits on its fetch, timed inline.  Steps are counted at the lead
optimizer's step (the first to step: the discriminator's, the critic's), as
trainmon does and as the tutorials print them."""
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "40"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0006"))
VARIANT = os.environ.get("JOB_VARIANT", "dcgan")
N_CRITIC = 5
BATCH, NZ, NX = 8, 16, 64
COMPUTE_S = 0.003


class Images(Dataset):
    def __len__(self):
        return BATCH * 15  # several epochs: a new iterator mid-run

    def __getitem__(self, i):
        time.sleep(ITEM_S)
        return torch.randn(NX), 0


netG = torch.nn.Sequential(torch.nn.Linear(NZ, 128), torch.nn.ReLU(), torch.nn.Linear(128, NX))
netD = torch.nn.Sequential(torch.nn.Linear(NX, 128), torch.nn.LeakyReLU(0.2), torch.nn.Linear(128, 1))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
bce = torch.nn.BCEWithLogitsLoss()
loader = DataLoader(Images(), batch_size=BATCH, shuffle=True)
clock = Clock()


def dcgan_iteration(real):
    netD.zero_grad()
    errD_real = bce(netD(real), torch.ones(BATCH, 1))
    errD_real.backward()
    fake = netG(torch.randn(BATCH, NZ))
    errD_fake = bce(netD(fake.detach()), torch.zeros(BATCH, 1))
    errD_fake.backward()
    time.sleep(COMPUTE_S)  # the rest of the step's device work, outside the GIL
    optD.step()
    clock.step()
    netG.zero_grad()
    errG = bce(netD(fake), torch.ones(BATCH, 1))
    errG.backward()
    optG.step()


def wgan_iteration(real, i):
    optD.zero_grad()
    fake = netG(torch.randn(BATCH, NZ)).detach()
    eps = torch.rand(BATCH, 1)
    mix = (eps * real + (1 - eps) * fake).requires_grad_(True)
    grad, = torch.autograd.grad(netD(mix).sum(), mix, create_graph=True)  # no accumulation: not a backward pass
    gp = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    loss_d = netD(fake).mean() - netD(real).mean() + 10 * gp
    loss_d.backward()
    time.sleep(COMPUTE_S)
    optD.step()
    clock.step()
    if i % N_CRITIC == N_CRITIC - 1:
        optG.zero_grad()
        loss_g = -netD(netG(torch.randn(BATCH, NZ))).mean()
        loss_g.backward()
        optG.step()


i = 0
while clock.steps < STEPS:
    it = iter(loader)
    while clock.steps < STEPS:
        try:
            real, _ = clock.fetch(lambda: next(it))
        except StopIteration:
            break
        if VARIANT == "wgan":
            wgan_iteration(real, i)
        else:
            dcgan_iteration(real)
        i += 1
# the memory anatomy's parameters: both networks' (each optimizer's own)
params = sum(p.numel() * p.element_size() for p in list(netG.parameters()) + list(netD.parameters()))
clock.report(backward_passes=STEPS * 3 if VARIANT == "dcgan" else STEPS + STEPS // N_CRITIC,
             params_bytes=params)
