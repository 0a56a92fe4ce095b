"""The in-process agent's cost per training step, per kind of loop.

    python agent_loops.py callgrind KIND N WARMUP CGMARK_SO RUN_DIR plain|agent
    python agent_loops.py wall KIND N ROUNDS RUN_DIR

KIND is one of the four loops the step model tells apart (a tiny MLP, so
that the loop's own cost is small and the agent's stands out):
  loader  DataLoader over an in-memory TensorDataset (num_workers=0),
          an optimizer step per batch
  slice   no DataLoader: batches sliced from a tensor, an optimizer step
  manual  batches sliced, manual SGD (backward, then p -= lr * grad; no
          torch.optim optimizer)
  accum   DataLoader, gradient accumulation: 4 backward passes per
          optimizer step (a step is an optimizer step)
  gap     nanoGPT's order: the model returns its loss, and the next batch
          is made between the forward and the backward pass (sliced, and
          0.3 ms of waiting for it: a sleep, which valgrind does not slow):
          the work after the forward is measured on every step (the
          agent's forward hook and torch's slow path for the model's call
          each step, docs/DIAGNOSIS.md "After the forward"), the agent's
          most expensive steady state
  rollout an RL loop's: before each optimizer step, ROLLOUT calls of the
          model under torch.no_grad() (the policy acting; a tensor op
          between them stands for the environment), then a sliced batch:
          the agent watches every module call from the rollout's first to
          the training forward (docs/DIAGNOSIS.md "steps.no_grad")

callgrind (under `valgrind --tool=callgrind --instr-atstart=no`): one
process, one block: with `agent`, trainmon.attach() first (as `trainmon
run` does, before the model and optimizer are made), then WARMUP
uninstrumented steps, a gc.collect(), and N steps with the garbage
collector off, bracketed by the client requests of bench/cgmark (one dump,
labelled plain or agent).  Start-up, the torch import and the warm-up are
not counted.  One process per block, not attach()/detach() between blocks
of one process: attaching and detaching patch classes (the optimizer's
step, DataLoader __next__), which resets the interpreter's specialized
attribute loads and its method cache, and those settled at different
points in different blocks (plain blocks of one process differed by up to
1,500 instructions a step, as much as the agent's cost).

wall (no valgrind): ROUNDS rounds of an N-step block without and an N-step
block with attach() (attach and detach between blocks, one process), the
order alternating per round; prints key=value lines: the medians of the
per-step times over all blocks and the median over rounds of the
per-round ratio and difference of the block medians; then one more N-step
block with attach(), whose clock anchors and counter reads per step it
prints (native_anchors, native_tsc_reads: the agent's clock anchors at a
step's end only 10 ms after the last anchor, so natively not every 1 ms
step anchors, while under valgrind, 50-100x slower, every step does).
"""
import ctypes
import gc
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402

KINDS = ("loader", "slice", "manual", "accum", "gap", "rollout")


class WithLoss(torch.nn.Module):
    """nanoGPT's model: the loss computed inside the forward."""

    def __init__(self, model, lossf):
        super().__init__()
        self.model, self.lossf = model, lossf

    def forward(self, x, y):
        return self.lossf(self.model(x), y)
BS, ROWS, ACCUM, LR, ROLLOUT = 16, 4096, 4, 0.01, 4


class Loop:
    """One of the loops, resumable: run(n) does n more steps."""

    def __init__(self, kind):
        torch.manual_seed(0)
        torch.set_num_threads(1)
        self.kind = kind
        self.model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                         torch.nn.Linear(32, 4))
        self.params = list(self.model.parameters())
        self.opt = torch.optim.SGD(self.params, lr=LR) if kind != "manual" else None
        self.lossf = torch.nn.CrossEntropyLoss()
        self.withloss = WithLoss(self.model, self.lossf)
        self.X = torch.randn(ROWS, 32)
        self.Y = torch.randint(0, 4, (ROWS,))
        self.loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(self.X, self.Y), batch_size=BS, shuffle=False,
            num_workers=0)
        self.it = iter(self.loader)
        self.i = 0
        self.run = getattr(self, "run_" + kind)

    def batch(self):
        j = (self.i % (ROWS // BS)) * BS
        self.i += 1
        return self.X[j:j + BS], self.Y[j:j + BS]

    def next_batch(self):
        """The next DataLoader batch; a new epoch (a new iterator, the old
        one dropped) when one ends, as `for x, y in loader` in a loop over
        epochs does."""
        try:
            return next(self.it)
        except StopIteration:
            self.it = iter(self.loader)
            return next(self.it)

    def run_loader(self, n):
        model, opt, lossf, nb = self.model, self.opt, self.lossf, self.next_batch
        for _ in range(n):
            x, y = nb()
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()

    def run_slice(self, n):
        model, opt, lossf = self.model, self.opt, self.lossf
        for _ in range(n):
            x, y = self.batch()
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()

    def run_manual(self, n):
        model, lossf, params = self.model, self.lossf, self.params
        for _ in range(n):
            x, y = self.batch()
            for p in params:
                p.grad = None
            loss = lossf(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p.add_(p.grad, alpha=-LR)

    def run_gap(self, n):
        model, opt = self.withloss, self.opt
        x, y = self.batch()
        for _ in range(n):
            loss = model(x, y)
            x, y = self.batch()  # the next batch, while a GPU would run the forward
            time.sleep(0.0003)   # (0.3 ms of it waiting: every step measured)
            loss.backward()
            opt.step()
            opt.zero_grad()

    def run_rollout(self, n):
        model, opt, lossf = self.model, self.opt, self.lossf
        obs = self.X[:4]
        for _ in range(n):
            for _ in range(ROLLOUT):
                with torch.no_grad():
                    act = model(obs)
                obs = obs + 0.01 * act.sum()  # the environment's step
            x, y = self.batch()
            opt.zero_grad()
            loss = lossf(model(x), y)
            loss.backward()
            opt.step()

    def run_accum(self, n):
        model, opt, lossf, nb = self.model, self.opt, self.lossf, self.next_batch
        for _ in range(n):
            for _ in range(ACCUM):
                x, y = nb()
                loss = lossf(model(x), y) / ACCUM
                loss.backward()
            opt.step()
            opt.zero_grad()


def timed_block(loop, n):
    """Per-step times of n steps, in chunks of 50 (a clock read per step
    would add to the cost measured)."""
    times = []
    for _ in range(n // 50):
        t0 = time.perf_counter_ns()
        loop.run(50)
        times.append((time.perf_counter_ns() - t0) / 50)
    return times


def main():
    mode, kind = sys.argv[1], sys.argv[2]
    if kind not in KINDS:
        sys.exit("agent_loops.py: unknown loop kind %s (one of %s)" % (kind, ", ".join(KINDS)))
    if mode == "callgrind":
        n, warm, so, run_dir = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
        which = sys.argv[7]
        cg = ctypes.CDLL(so)
        cg.cg_end.argtypes = [ctypes.c_char_p]
        if not cg.cg_running():
            sys.exit("agent_loops.py callgrind: not running under valgrind")
        import trainmon
        if which == "agent":
            trainmon.attach(run_dir=run_dir)
        loop = Loop(kind)
        loop.run(warm)
        gc.collect()  # no collection of the warm-up's garbage in the block
        gc.disable()  # and none in it
        s0 = trainmon.stats() if which == "agent" else None
        cg.cg_begin()
        loop.run(n)
        cg.cg_end(which.encode())
        gc.enable()
        if which == "agent":
            s1 = trainmon.stats()
            # the counter reads of the agent's clock in the block: callgrind
            # counts each as one instruction, natively it is ~12 ns
            print("agent_steps=%d agent_tsc_reads=%d agent_anchors=%d clock=%s"
                  % (s1["steps_closed"], s1["clock_tsc_reads"] - s0["clock_tsc_reads"],
                     s1["clock_anchors"] - s0["clock_anchors"], s1["clock"].split(":")[0].replace(" ", "_")))
    elif mode == "wall":
        n, rounds, run_dir = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        import trainmon
        loop = Loop(kind)
        loop.run(n)  # warm-up
        trainmon.attach(run_dir=run_dir)
        loop.run(n)
        trainmon.detach()
        plain, agent, ratios, diffs = [], [], [], []
        for r in range(rounds):
            res = {}
            for attached in ((False, True) if r % 2 == 0 else (True, False)):
                if attached:
                    trainmon.attach(run_dir=run_dir)
                gc.collect()
                res[attached] = timed_block(loop, n)
                if attached:
                    trainmon.detach()
            plain += res[False]
            agent += res[True]
            mp, ma = statistics.median(res[False]), statistics.median(res[True])
            ratios.append(ma / mp)
            diffs.append(ma - mp)
        # the agent's clock natively: a step's end anchors only 10 ms or
        # more after the last anchor (src/lib/fastclock.h), so under
        # valgrind, 50-100x slower, every step anchors; agent_cost.py
        # counts the anchors and counter reads a step makes here
        trainmon.attach(run_dir=run_dir)
        s0 = trainmon.stats()
        loop.run(n)
        s1 = trainmon.stats()
        trainmon.detach()
        print("native_anchors=%.4f native_tsc_reads=%.4f"
              % ((s1["clock_anchors"] - s0["clock_anchors"]) / n,
                 (s1["clock_tsc_reads"] - s0["clock_tsc_reads"]) / n))
        print("plain_min_ns=%.0f" % min(plain))
        print("plain_ns=%.0f agent_ns=%.0f ratio=%.5f diff_ns=%.0f diff_min_ns=%.0f "
              "diff_max_ns=%.0f" % (statistics.median(plain), statistics.median(agent),
                                    statistics.median(ratios), statistics.median(diffs),
                                    min(diffs), max(diffs)))
    else:
        sys.exit("agent_loops.py: unknown mode %s (callgrind or wall)" % mode)


if __name__ == "__main__":
    main()
