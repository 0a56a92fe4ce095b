"""(7) Inference: batch scoring of a dataset by a trained model, no
training at all: model.eval() and torch.inference_mode() (torch.no_grad()
with JOB_GRAD=no_grad) around a loop over a DataLoader, as embedding
extraction, offline evaluation and `predict()` jobs are written.  Each item
is decoded on the CPU (JOB_ITEM_S of work: an image decode, a tokenizer)
by JOB_WORKERS workers (0: in the main process).  The batches are the
steps: the oracle counts them and times the wait inline around next(it),
and prints "inference": true (the report must say it read the run as an
inference loop, and no other job may be read so)."""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Clock, busy  # noqa: E402

ITEMS = int(os.environ.get("JOB_ITEMS", "1920"))
BATCH = int(os.environ.get("JOB_BATCH", "32"))
WORKERS = int(os.environ.get("JOB_WORKERS", "2"))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0008"))
GRAD = os.environ.get("JOB_GRAD", "inference_mode")


class Decoded(Dataset):
    def __len__(self):
        return ITEMS

    def __getitem__(self, i):
        busy(ITEM_S)  # decoding the item
        g = torch.Generator().manual_seed(i)
        return torch.randn(256, generator=g)


if __name__ == "__main__":
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 128))
    model.eval()
    clock = Clock()
    loader = DataLoader(Decoded(), batch_size=BATCH, num_workers=WORKERS)
    out = []
    with torch.inference_mode() if GRAD == "inference_mode" else torch.no_grad():
        it = clock.fetch(lambda: iter(loader))
        while True:
            try:
                x = clock.fetch(lambda: next(it))
            except StopIteration:
                break
            out.append(torch.nn.functional.normalize(model(x), dim=1))
            busy(0.004)  # the rest of the forward (a bigger model)
            clock.step()
    emb = torch.cat(out)
    clock.report(inference=True, rows=int(emb.shape[0]))
