"""Shared bits of the real-loop jobs (tests/jobs/*.py, run by
tests/e2e/real_loops.sh under `trainmon run`).

Each job is an ordinary training loop in a style real code uses.  It times
its own batch fetch inline with time.perf_counter and prints, as its last
line, JSON with its own step count and data-wait share: the oracle the
report is checked against.  The share leaves out the first step (trainmon
calls it warm-up) and runs from the end of the first step to the end of the
last one."""
import json
import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)  # the test machine has 2 cores shared with others


class Clock:
    """Inline timing: fetch() around each batch fetch, step() after each
    step (optimizer step, or backward pass for manual SGD)."""

    def __init__(self):
        self.steps = 0
        self.t_first = None  # end of the first step
        self.t_last = None
        self.wait = 0.0      # fetch time after the first step
        self.eval_batches = 0
        self.eval_s = 0.0    # time in eval runs, left out of the span
        # the model run without gradients: eval runs (their part of eval_s,
        # which holds checkpoint saves too) and rollouts inside the steps
        self.eval_run_s = 0.0
        self.rollout_s = 0.0

    def rollout(self, fn):
        """Times a rollout made inside a step (the policy under no_grad)."""
        t0 = time.perf_counter()
        out = fn()
        if self.t_first is not None:
            self.rollout_s += time.perf_counter() - t0
        return out

    def fetch(self, fn):
        t0 = time.perf_counter()
        out = fn()
        if self.t_first is not None:
            self.wait += time.perf_counter() - t0
        return out

    def step(self):
        self.steps += 1
        self.t_last = time.perf_counter()
        if self.t_first is None:
            self.t_first = self.t_last

    def report(self, **extra):
        span = (self.t_last - self.t_first - self.eval_s) if self.t_first is not None else 0.0
        loop = span + self.eval_run_s
        out = {"steps": self.steps, "data_wait_share": self.wait / span if span > 0 else None,
               "eval_batches": self.eval_batches,
               "no_grad_share": (self.eval_run_s + self.rollout_s) / loop if loop > 0 else None}
        out.update(extra)
        # one write: ranks sharing a stdout must not interleave their lines
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


def busy(seconds):
    """CPU work standing in for batch preparation (tokenizing, augmenting)."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x
