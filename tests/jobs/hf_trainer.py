"""Hugging Face transformers.Trainer on the CPU: a tiny GPT-2 built from a
config (no download), a torch Dataset of random token ids, an eval run every
EVAL_EVERY optimizer steps (eval_strategy="steps").  JOB_ACCUM=4 switches
on gradient accumulation (gradient_accumulation_steps): the Trainer then
fetches the 4 batches of a step before it runs any of them.  Steps: the
Trainer's state.global_step.  Data wait: the dataset's __getitem__ and the
data collator, timed inline (fw_oracle.py says what that includes).  No
network (HF_HUB_OFFLINE), no files but a temporary directory.
JOB_CKPT_EVERY=N: save_strategy="steps", a checkpoint every N steps
(each counted by on_save).  JOB_MODE=evaluate or predict: no training,
`trainer.evaluate()` or `trainer.predict()` over JOB_STEPS batches (the
Trainer fetches them with grad enabled and runs each under no_grad): each
batch is a step of an inference loop, counted by on_prediction_step, its
data timed as in training."""
import os
import sys
import tempfile
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fw_oracle import Oracle, busy  # noqa: E402

warnings.filterwarnings("ignore")
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,  # noqa: E402
                          TrainingArguments, default_data_collator)
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.set_verbosity_error()

ACCUM = int(os.environ.get("JOB_ACCUM", "1"))
STEPS = int(os.environ.get("JOB_STEPS", str(40 // ACCUM)))
ITEM_S = float(os.environ.get("JOB_ITEM_S", "0.0015"))  # per sample: 8 a batch
CKPT_EVERY = int(os.environ.get("JOB_CKPT_EVERY", "0"))  # save_steps: a checkpoint every N steps
MODE = os.environ.get("JOB_MODE", "train")
EVAL_EVERY, EVAL_BATCHES, BATCH, SEQ = max(STEPS // 4, 1), 4, 8, 32
oracle = Oracle()


class Tokens(Dataset):
    def __init__(self, n, timed):
        self.n, self.timed = n, timed
        self.ids = torch.randint(0, 128, (n, SEQ))

    def __len__(self):
        return self.n

    def _item(self, i):
        busy(ITEM_S)
        return {"input_ids": self.ids[i], "labels": self.ids[i]}

    def __getitem__(self, i):
        return oracle.timed(self._item, i) if self.timed else self._item(i)


def collate(features):
    return oracle.timed(default_data_collator, features)


class Count(TrainerCallback):
    def on_substep_end(self, args, state, control, **kw):  # a micro-batch, no step
        oracle.micro += 1

    def on_step_end(self, args, state, control, **kw):
        oracle.step_done(state.global_step)

    def on_save(self, args, state, control, **kw):  # after the folder is written
        oracle.saves += 1
        d = os.path.join(args.output_dir, "checkpoint-%d" % state.global_step)
        oracle.save_bytes.append(sum(os.path.getsize(os.path.join(r, f))
                                     for r, _, fs in os.walk(d) for f in fs))

    def on_prediction_step(self, args, state, control, **kw):
        if MODE == "train":
            oracle.eval_batches += 1
        else:  # evaluate() or predict() alone: the batches are the steps
            oracle.step_done(oracle.steps + 1)


class Timed(Trainer):
    def evaluate(self, *a, **kw):
        if MODE != "train":
            return super().evaluate(*a, **kw)
        oracle.eval_start()
        try:
            return super().evaluate(*a, **kw)
        finally:
            oracle.eval_end()


cfg = GPT2Config(vocab_size=128, n_positions=SEQ, n_embd=128, n_layer=2, n_head=2)
model = GPT2LMHeadModel(cfg)
with tempfile.TemporaryDirectory() as tmp:
    args = TrainingArguments(
        output_dir=tmp, report_to=[], logging_strategy="no",
        save_strategy="steps" if CKPT_EVERY else "no", save_steps=CKPT_EVERY or 500,
        use_cpu=True, max_steps=STEPS, per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH, gradient_accumulation_steps=ACCUM,
        eval_strategy="steps", eval_steps=EVAL_EVERY, dataloader_num_workers=0,
        remove_unused_columns=False, disable_tqdm=True, seed=0)
    trainer = Timed(model=model, args=args, data_collator=collate,
                    train_dataset=Tokens(STEPS * ACCUM * BATCH, True),
                    eval_dataset=Tokens(EVAL_BATCHES * BATCH, False), callbacks=[Count()])
    if MODE == "train":
        trainer.train()
    else:
        getattr(trainer, MODE)(Tokens(STEPS * BATCH, True))
oracle.report(accum=ACCUM, **({} if MODE == "train" else {"inference": True}))
