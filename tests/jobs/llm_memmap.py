"""(1) An LLM-style loop without a DataLoader: batches sliced at random
offsets from a token np.memmap in the main process (as nanoGPT's get_batch
does), AdamW, a small causal model.  Steps: optimizer steps."""
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

STEPS = int(os.environ.get("JOB_STEPS", "40"))
PREP_S = float(os.environ.get("JOB_PREP_S", "0.004"))  # tokenizing on the fly
HIDDEN = int(os.environ.get("JOB_HIDDEN", "256"))
VOCAB, BLOCK, BATCH = 256, 32, 8

d = tempfile.mkdtemp(prefix="tm-tokens.")
path = os.path.join(d, "train.bin")
np.random.randint(0, VOCAB, size=200_000, dtype=np.uint16).tofile(path)
data = np.memmap(path, dtype=np.uint16, mode="r")


def get_batch():
    ix = np.random.randint(0, len(data) - BLOCK - 1, size=BATCH)
    x = torch.from_numpy(np.stack([data[i:i + BLOCK].astype(np.int64) for i in ix]))
    y = torch.from_numpy(np.stack([data[i + 1:i + 1 + BLOCK].astype(np.int64) for i in ix]))
    busy(PREP_S)
    return x, y


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 64)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.GELU(),
                                       torch.nn.Linear(HIDDEN, 64))
        self.head = torch.nn.Linear(64, VOCAB)

    def forward(self, idx):
        h = self.emb(idx)
        h = h + self.mlp(h)
        return self.head(h)


model = TinyLM()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
clock = Clock()
for it in range(STEPS):
    x, y = clock.fetch(get_batch)
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    clock.step()
os.unlink(path)
os.rmdir(d)
clock.report()
