"""PyTorch Lightning: a LightningModule trained by lightning.Trainer on the
CPU, with a validation loop every VAL_EVERY optimizer steps (and Lightning's
own sanity check of 2 validation batches before training).  JOB_ACCUM=4
switches on gradient accumulation (accumulate_grad_batches): 4 training
batches per optimizer step.  JOB_CKPT_EVERY=N: a ModelCheckpoint every N
optimizer steps (each counted by on_save_checkpoint).  Steps: trainer.global_step.  Data wait: each
next() of the training DataLoader's iterator, timed inline by a DataLoader
subclass (fw_oracle.py).  No network, no files but a temporary directory.
JOB_MODE=validate or predict: no training, `trainer.validate()` or
`trainer.predict()` of the model over JOB_STEPS batches (evaluating a
checkpoint, scoring a dataset): each batch is a step of an inference loop,
counted by the batch-end callback, its next() timed as above."""
import os
import sys
import tempfile
import warnings

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fw_oracle import Oracle, busy  # noqa: E402

warnings.filterwarnings("ignore")  # "consider num_workers" and the like
import lightning as L  # noqa: E402

ACCUM = int(os.environ.get("JOB_ACCUM", "1"))
STEPS = int(os.environ.get("JOB_STEPS", str(40 // ACCUM)))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0004"))  # per sample: 8 a batch
MODE = os.environ.get("JOB_MODE", "fit")
CKPT_EVERY = int(os.environ.get("JOB_CKPT_EVERY", "0"))  # ModelCheckpoint every N steps
VAL_EVERY, VAL_BATCHES, BATCH = max(STEPS // 4, 1), 4, 8
oracle = Oracle()


class Samples(Dataset):
    def __init__(self, n):
        self.n = n
        self.x, self.y = torch.randn(n, 64), torch.randn(n, 1)

    def __len__(self):
        return self.n

    def _item(self, i):
        busy(ITEM_S)
        return self.x[i], self.y[i]

    def __getitem__(self, i):
        return self._item(i)


class TimedLoader(DataLoader):
    """The training DataLoader, its every next() timed: what the loop waits
    for, as a hand-written loop's `clock.fetch(lambda: next(it))`."""

    def __iter__(self):
        it = super().__iter__()
        while True:
            try:
                yield oracle.timed(next, it)
            except StopIteration:
                return


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 1))

    def training_step(self, batch, i):
        x, y = batch
        busy(0.004)  # the rest of a real model's compute
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, i):
        x, y = batch
        busy(0.004)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def predict_step(self, batch, i):
        x, y = batch
        busy(0.004)
        return self.net(x)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class Count(L.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, i):
        oracle.step_done(trainer.global_step)

    def on_validation_start(self, trainer, module):
        if not trainer.sanity_checking and MODE == "fit":
            oracle.eval_start()

    def on_validation_end(self, trainer, module):
        oracle.eval_end()

    def on_save_checkpoint(self, trainer, module, checkpoint):
        oracle.saves += 1

    def on_validation_batch_end(self, trainer, module, outputs, batch, i, dl=0):
        if MODE == "fit":
            oracle.eval_batches += 1
        else:  # validate(): the batches are the steps
            oracle.step_done(i + 1)

    def on_predict_batch_end(self, trainer, module, outputs, batch, i, dl=0):
        oracle.step_done(i + 1)


if MODE != "fit":
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[Count()])
    data = TimedLoader(Samples(STEPS * BATCH), batch_size=BATCH, num_workers=0)
    getattr(trainer, MODE)(Net(), dataloaders=data)
    oracle.report(accum=1, inference=True)
    sys.exit(0)
n_train = STEPS * ACCUM * BATCH
train = TimedLoader(Samples(n_train), batch_size=BATCH, shuffle=True, num_workers=0)
val = DataLoader(Samples(VAL_BATCHES * BATCH), batch_size=BATCH, num_workers=0)
with tempfile.TemporaryDirectory() as tmp:
    ckpt = [L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp, every_n_train_steps=CKPT_EVERY,
                                                save_top_k=-1)] if CKPT_EVERY else []
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, max_epochs=1,
                        accumulate_grad_batches=ACCUM, val_check_interval=VAL_EVERY * ACCUM,
                        limit_val_batches=VAL_BATCHES, logger=False,
                        enable_checkpointing=bool(CKPT_EVERY), enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=tmp,
                        callbacks=[Count()] + ckpt)
    trainer.fit(Net(), train, val)
oracle.report(accum=ACCUM)
