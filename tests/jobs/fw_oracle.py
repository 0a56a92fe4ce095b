"""The oracle of the framework jobs (tests/jobs/lightning_loop.py,
tests/jobs/hf_trainer.py, run by tests/e2e/frameworks.sh).

A framework owns the loop, so the job cannot put a timer around its
`next(it)` as tests/jobs/common.py does.  It times its data inline with
time.perf_counter where it can reach it:
  - Lightning iterates the DataLoader it is given: a DataLoader subclass
    times each next() of its iterator, the whole fetch (sampler, dataset,
    collate), as a hand-written loop's timer does;
  - the HF Trainer hands its DataLoader to accelerate, which builds a new
    one (a subclass would be lost): the job times its own data work, every
    Dataset.__getitem__ and data-collator call (num_workers=0: both run on
    the training thread, inside DataLoader.__next__).  That is the fetch
    less the sampler's and the fetcher's few microseconds per batch.
Neither counts what the framework does between batches (callbacks, moving
the batch to the device): that is no data wait and must not be called one.

Steps are the framework's own count of optimizer steps (Lightning's
trainer.global_step, the HF Trainer's state.global_step), read in a
callback; micro-batches are the training batches that ran.  As in
common.py the share runs from the end of the first step to the end of the
last one, less the eval runs in between, and the last line printed is the
JSON the test reads."""
import json
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # the test machine has 2 cores shared with others


def busy(seconds):
    """CPU work standing in for decoding and augmenting a sample."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


class Oracle:
    def __init__(self):
        self.steps = 0          # optimizer steps, as the framework counts them
        self.micro = 0          # training batches that ran
        self.t_first = None     # end of the first step
        self.t_last = None      # end of the last step
        self.wait = 0.0         # data work after the first step
        self.eval_batches = 0   # incl. a sanity check before training
        self.evals = []         # (start, end) of each eval run
        self._eval_t0 = None
        self.saves = 0          # checkpoints the framework saved (JOB_CKPT_EVERY)
        self.save_bytes = []    # bytes of each, where the job can list its files

    def timed(self, fn, *args):
        """Runs one piece of data work (a __getitem__, a collate) and counts
        its time as data wait once the first step is done."""
        t0 = time.perf_counter()
        out = fn(*args)
        if self.t_first is not None and self._eval_t0 is None:
            self.wait += time.perf_counter() - t0
        return out

    def step_done(self, global_step):
        """After each training batch: a step when the count advanced."""
        self.micro += 1
        while self.steps < global_step:
            self.steps += 1
            self.t_last = time.perf_counter()
            if self.t_first is None:
                self.t_first = self.t_last

    def eval_start(self):
        self._eval_t0 = time.perf_counter()

    def eval_end(self):
        if self._eval_t0 is not None:
            self.evals.append((self._eval_t0, time.perf_counter()))
        self._eval_t0 = None

    def report(self, **extra):
        span = 0.0
        if self.t_first is not None:
            span = self.t_last - self.t_first
            for a, b in self.evals:  # eval runs inside the span are no step time
                if a >= self.t_first and b <= self.t_last:
                    span -= b - a
        out = {"steps": self.steps, "data_wait_share": self.wait / span if span > 0 else None,
               "eval_batches": self.eval_batches, "micro_batches": self.micro,
               "wait_s": round(self.wait, 4), "span_s": round(span, 4)}
        if self.saves:
            out["checkpoints"] = self.saves
        if self.save_bytes:
            out["save_bytes"] = self.save_bytes
        out.update(extra)
        print(json.dumps(out), flush=True)
