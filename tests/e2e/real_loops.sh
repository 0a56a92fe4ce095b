#!/usr/bin/env bash
# Real training loops under `trainmon run` (issue #14): the step model on
# the loops people write, on torch 1.13 (Debian's /usr/bin/python3) and
# torch 2.x (the virtualenv of `make deps`, tests/lib/venv.sh:
# $VENV_PY, else .venv; that half is skipped with one line when it is missing).
#
# Each job in tests/jobs/ prints, as its last line, its own step count
# (optimizer steps; backward passes for manual SGD) and its data-wait share
# timed inline with time.perf_counter: the oracle.  From `trainmon report
# --json` this asserts: steps equal the job's count (+-1); the data-wait
# fraction within 5 points of the job's share; eval batches recorded apart
# (phase eval in `dump --json`) and not counted as steps; no empty verdict
# (steps > 0 where the report used to say "no steps"); no more eval
# records than the job's eval batches (+2); and the input
# verdict: a loop without a DataLoader whose own batch preparation is slow
# (CPU work here) gets input.main_prep with cause cpu and no DataLoader
# advice (input.data_wait / input.cpu_bound), the same loop with fast
# preparation (llm_memmap_fast: JOB_PREP_S=0, a wider model) gets input.ok;
# a DataLoader whose 2 workers idle over in-memory data while the loop
# waits (idle_workers) gets input.handoff and never input.cpu_bound; the
# memmap loop with nanoGPT's eval every 10 steps (llm_memmap_eval: no
# DataLoader, eval seen through model.eval()/train()) has its eval spans
# recorded apart and out of the steps and the wait share; DataLoader
# features whose internals moved between 1.x and 2.x (loader_persistent:
# persistent_workers and pin_memory over 3 epochs; loader_iterable: an
# IterableDataset with spawn workers; loader_forkserver: forkserver workers
# and torch.compile on 2.x) give the job's own steps and wait share, and a
# spawned worker's start-up (importing torch) is no memory growth; the
# forkserver job's second epoch waits for its new workers to start
# (importing torch again): input.worker_startup, never CPU-bound; so does
# loader_fork (fork, Linux's default before Python 3.14, 4 workers without
# persistent_workers, a 1 GB Dataset in the main process, 10-batch epochs:
# each iter() forks 4 copies of a large process, ~60 ms, which the job
# times as its wait as the agent does and the previous agent counted as
# compute: 17% "input-bound" for the job's 50%); loader_newiter (`x, y =
# next(iter(loader))` in the loop: a new iterator and 2 new workers for
# every batch, the dropped iterator's shutdown of them in the job's fetch
# as in the agent's, which counted it as compute: 66% for the job's 94%,
# and said "cannot tell disk from CPU") gets input.new_iterator, the
# workers started anew; with persistent_workers=True
# (loader_newiter_persistent: each iter() resets them; the previous report
# said "handoff ... the batches were ready"), the workers reset; a loop
# fed by a background thread that iterates the DataLoader into a queue
# (thread_prefetch: prefetch_generator's BackgroundGenerator) has its own
# steps and its wait on the queue, input.data_wait naming the thread
# (thread_fed_steps) when the thread cannot keep up and input.ok when it
# can (thread_prefetch_fast), never input.main_prep; a step fed by two
# DataLoaders (two_loaders_zip: `zip(labeled, unlabeled)`; two_loaders_next:
# the second loader's next() inside a loop over the first, started again
# when it runs out), with an eval loop run with grad enabled every 15 steps,
# has both fetches as its wait and only the eval loop's batches as eval;
# with 2 persistent workers in each loader (two_loaders_workers) the report
# counts 4 workers and no restarts (the worker set tells the loaders' ids
# 0 and 1 apart: it read 2 workers, 2 restarts);
# accumulation over an endless cycle() of a 10-batch DataLoader (a new
# iterator mid-step every 2.5 steps: grad_accum_cycle) counts as grad_accum;
# a GradScaler loop whose weights overflow at a learning-rate spike (amp_nan,
# torch 2.x: GradScaler on the CPU) has every iteration a step and
# amp.skipped_steps with the job's own count of skipped steps and the step
# it stopped learning at (on torch 1.x it runs without a scaler: no finding);
# a GAN (gan_dcgan: PyTorch's DCGAN tutorial, three backward passes and two
# optimizer steps per batch; gan_wgan: WGAN-GP's critic stepped on every
# batch, the generator on every fifth) counts one step per lead optimizer
# step with the loop's own wait, and its memory anatomy holds both
# networks' parameters (the job's own sum), not the lead optimizer's alone;
# a Hugging Face `accelerate` loop without the Trainer (accelerate_loop:
# `accelerator.accumulate(model)` with optimizer.step() called on every
# batch and run by accelerate's wrapper on every 4th and the epoch's last;
# torch 2.x, where accelerate is installed) counts the steps that ran, with
# every batch a micro-batch of one of them; nanoGPT's checkpoint (torch.save
# of the model, the optimizer and 128 MB more every 4 steps on the training
# thread: llm_memmap_ckpt) is no batch preparation (input.ok, as the same
# loop without it) but checkpoint.blocking, with the job's own count of
# checkpoints, their time (within 10%) and bytes (within 1%), one save call
# each; so is the same checkpoint by torch.distributed.checkpoint.save
# (llm_memmap_dcp, torch 2.x: a directory of shards with a torch.save per
# tensor inside, which the previous agent counted as 42 saves a checkpoint
# with half its time, the rest read as steps.stalls and input.main_prep,
# and "serialized into a buffer in memory"); a loop holding 150,000 Python
# objects whose batch preparation memoizes 4,000 more a step
# (llm_memmap_gc: full collections of the garbage collector inside the
# preparation) has the job's own count and time of the pauses (its
# gc.callbacks timer; within 10%), its data wait net of them, input.ok
# and not input.main_prep, and gc.pauses where the pauses took 8% or more
# of the job's time (torch 2.x: 13%; torch 1.13's slower steps made them
# under 1%, no finding: llm_memmap_gc, llm_memmap_log and llm_memmap_fast
# run on torch 2.x only unless REAL_LOOPS_JOBS names them, as the
# collector, a stall and fast preparation are no torch version's); the
# same loop logging every 10 steps after
# optimizer.step() to a tracker whose upload takes 0.3 s (llm_memmap_log,
# as nanoGPT logs) has steps.stalls with the job's count of its logs and
# their time (within 10%), input.ok, not input.main_prep; no other job
# has steps.stalls or gc.pauses.  An inference job (infer_scoring: batch
# scoring under model.eval() and torch.inference_mode(), 2 workers decoding
# items on the CPU; infer_main: torch.no_grad(), the items decoded in the
# main process) has its batches as its steps, the job's count and wait
# share, an input finding and the report's inference_processes (the
# previous agent's report: "no steps to judge ... iterate a DataLoader", of
# a loop that did); a training job that evaluates before its first step
# (train_eval_first) is no inference loop, and no other job is read as one.
# The memmap loop with gradient accumulation over 4 micro-batches, each
# prepared before its forward (llm_memmap_accum: build-nanogpt's and
# nanochat's order; the previous agent timed the first micro-batch's only:
# 5% for the job's 21%) has the job's own wait share and input.main_prep;
# zero_grad() after the optimizer step (as nanoGPT calls it) is no part of
# the preparation.  The memmap loop that makes each next batch where
# nanoGPT's train.py does, between the forward and the backward pass
# (llm_memmap_nanogpt: 2 micro-batches, a disabled GradScaler, unscale_
# and clip_grad_norm_ before the step), and where nanochat's does, after
# the backward pass (llm_memmap_nanochat: from a generator, then
# clip_grad_norm_ and two optimizers), has the job's own wait share and
# input.main_prep saying that place (60% or more of the preparation there;
# the previous agent read both under 1%, input.ok, for the job's 64%).
# On-policy RL loops (tests/jobs/rl.py: rl_ppo, CleanRL's PPO, a rollout of
# 64 steps of 4 CPU-stepped environments under torch.no_grad() every 16
# optimizer steps; rl_a2c, a rollout of 5 before every step; rl_sb3, the
# same with the policy in eval mode, as Stable-Baselines3 runs it) have
# steps.no_grad with the job's own share of its loop in rollouts (within 5
# points) and, in train mode, its rollouts and calls of the model exactly,
# input.ok and no steps.stalls (the previous agent: "every 16 steps a step
# stalls", "input keeps up" and nothing, and SB3's rollouts out of every
# number); every job that times its eval runs (train_eval, llm_memmap_eval,
# two_loaders_*) is held to its own no-grad share the same way: the
# finding from 15%, within 5 points; none under 5%.  A loop fed by a
# producer process of its own through a multiprocessing queue
# (producer_queue: spawn, 12 ms of CPU a batch against a 5 ms step) has the
# job's own wait share and input.main_prep with cause other_processes,
# naming the producer (the previous agent: "made on the training thread
# ... page faults of a memmap or reads of a file on slow storage").  The
# loop most tutorials write (tqdm_epochs: epochs of `for x, y in
# tqdm(loader)` with the bar's postfix from loss.item() each step and a
# tqdm'd validation pass under no_grad after each epoch; torch 2.x, where
# tqdm is installed; the items decoded in the main process) has the job's
# steps, its wait share (tqdm's own refresh in it, as the job can only
# time it) and its validation batches as eval, input.data_wait; with 2
# persistent workers for each loader (tqdm_workers: 34 ms a batch each for
# the loop's 8 ms of compute, idle at each short epoch's end and through
# the validation) no input.handoff (the previous report: "handoff ... more
# workers will not help: they are idle", from the workers' lifetime share,
# 0.44), but input.data_wait or input.cpu_bound; and never "more workers
# will not help" (the 4 workers of both loaders at their median once read
# as keeping up), input.cpu_bound counting the training loader's 2.
# torch.compile (compiled: the model compiled in the first step and again
# for each epoch's short last batch, once): steps.compile with the job's own
# count of its compiling steps after the first (1, at step 12) and of its
# graphs, the compile time inside the job's timing of those steps, and no
# gc.pauses for the collections the compiler's allocations made in it.
# And a forward that branches on a call counter it keeps (compiled_storm):
# recompiled every step until torch's recompile_limit, 8 compilations of
# the frame as the job's dynamo counted them, said with the limit.
# PyTorch's CIFAR-10 tutorial (tutorial_keep: a batch looked at through
# `dataiter = iter(trainloader)` before the epochs; tutorial_drop: through
# `next(iter(trainloader))`, its iterator dropped at once): the loop's steps
# only (the dropped one was a step of its own: one more than the job's).
# Every job's step count must be its own exactly; LLM loops with activation
# checkpointing (llm_memmap_actckpt, _reentrant: the MLP recomputed in the
# backward pass) read as the plain one.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TRAINMON=${TRAINMON:-$root/${BUILD:-build}/trainmon}
[ -x "$TRAINMON" ] || { echo "skipped: $TRAINMON not built"; exit 77; }
scratch=$(mktemp -d /var/tmp/trainmon-loops.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fails=0 ran=0

# check RUN JOB: the report of RUN against the job's own last line
check() {
    local run=$1 job=$2
    "$TRAINMON" report --json "$run" > "$run/report.json" 2> "$run/report.err" ||
        { cat "$run/report.err"; return 1; }
    "$TRAINMON" dump --json "$run"/pid*.tmr > "$run/dump.jsonl" 2>/dev/null
    "$PY" - "$run" "$job" "$root/tests/lib" <<'PYEOF'
import json, sys
run, job = sys.argv[1], sys.argv[2]
sys.path.insert(0, sys.argv[3])
import runcheck
# the input finding each job must get (and the ones it must not)
EXPECT = {"llm_memmap": ("input.main_prep", "cpu"), "manual_sgd": ("input.main_prep", "cpu"),
          "llm_memmap_fast": ("input.ok", None), "grad_accum": (None, None),
          "llm_memmap_ckpt": ("input.ok", None), "llm_memmap_dcp": ("input.ok", None),
          "llm_memmap_gc": ("input.ok", None), "llm_memmap_log": ("input.ok", None),
          "train_eval": (None, None), "break_early": (None, None),
          "idle_workers": ("input.handoff", None), "llm_memmap_eval": ("input.main_prep", "cpu"),
          "loader_persistent": (None, None), "loader_iterable": (None, None),
          "loader_forkserver": ("input.worker_startup", None),
          "loader_fork": ("input.worker_startup", None),
          "loader_newiter": ("input.new_iterator", None),
          "loader_newiter_persistent": ("input.new_iterator", None),
          "thread_prefetch": ("input.data_wait", None),
          "thread_prefetch_fast": ("input.ok", None), "two_loaders_zip": (None, None),
          "two_loaders_next": (None, None), "two_loaders_workers": (None, None),
          "grad_accum_cycle": (None, None),
          "amp_nan": ("amp.skipped_steps", None), "gan_dcgan": ("input.data_wait", None),
          "gan_wgan": ("input.data_wait", None), "accelerate_loop": ("input.data_wait", None),
          "train_eval_first": (None, None),
          # workers decoding on a 2-core machine shared with the loop: the
          # CPU vote depends on the machine's load, the wait does not
          "infer_scoring": (("input.data_wait", "input.cpu_bound"), None),
          "infer_main": ("input.data_wait", None),
          "llm_memmap_accum": ("input.main_prep", "cpu"),
          "llm_memmap_nanogpt": ("input.main_prep", "cpu"),
          "llm_memmap_nanochat": ("input.main_prep", "cpu"),
          "llm_memmap_actckpt": ("input.main_prep", "cpu"),
          "llm_memmap_actckpt_reentrant": ("input.main_prep", "cpu"),
          "rl_ppo": ("steps.no_grad", None), "rl_a2c": ("steps.no_grad", None),
          "rl_sb3": ("steps.no_grad", None),
          "producer_queue": ("input.main_prep", "other_processes"),
          "tqdm_epochs": ("input.data_wait", None),
          # the workers are the limit on 2 cores: the CPU vote depends on the
          # machine's load, the handoff (they are idle) is wrong
          "tqdm_workers": (("input.data_wait", "input.cpu_bound"), None),
          "compiled": ("input.data_wait", None), "compiled_storm": ("steps.compile", None),
          "tutorial_keep": ("input.data_wait", None), "tutorial_drop": ("input.data_wait", None)}
# where in the step the expected input.main_prep must say the batch is made
WHERE = {"llm_memmap_nanogpt": "prep_after_forward_share",
         "llm_memmap_nanochat": "prep_before_step_share"}
# evidence the expected finding must carry
EVIDENCE = {"thread_prefetch": "thread_fed_steps", "loader_forkserver": "startup_wait_per_set_s",
            "loader_fork": "startup_wait_per_set_s"}
# which start-ups input.worker_startup must say (each epoch's), and what
# input.new_iterator must say each iter() does to the workers
RESTARTS = {"loader_forkserver": "epochs", "loader_fork": "epochs"}
NEWITER = {"loader_newiter": "started", "loader_newiter_persistent": "reset"}
# the workers a rank runs, and how many processes beyond them were started:
# two loaders' persistent workers, ids 0 and 1 in each (read as 2 workers
# and 2 restarts before the worker set was recorded)
WORKERS = {"two_loaders_workers": (4, 0)}
LOADER_NEVER = {"input.main_prep", "input.cpu_bound", "input.disk_bound", "host_mem.worker_growth"}
RL_NEVER = {"input.main_prep", "input.data_wait", "input.cpu_bound", "steps.stalls"}
NEVER = {"llm_memmap": {"input.data_wait", "input.cpu_bound", "input.disk_bound"},
         "manual_sgd": {"input.data_wait", "input.cpu_bound", "input.disk_bound"},
         "llm_memmap_fast": {"input.main_prep", "input.data_wait"},
         "llm_memmap_ckpt": {"input.main_prep", "input.data_wait"},
         "llm_memmap_dcp": {"input.main_prep", "input.data_wait"},
         "llm_memmap_gc": {"input.main_prep", "input.data_wait"},
         "llm_memmap_log": {"input.main_prep", "input.data_wait", "gc.pauses"},
         "grad_accum": {"input.main_prep"}, "train_eval": {"input.main_prep"},
         "break_early": {"input.main_prep"},
         "idle_workers": {"input.cpu_bound", "input.disk_bound", "input.data_wait", "input.main_prep"},
         "llm_memmap_eval": {"input.data_wait", "input.cpu_bound", "input.disk_bound"},
         "loader_persistent": LOADER_NEVER, "loader_iterable": LOADER_NEVER,
         "loader_forkserver": LOADER_NEVER, "loader_fork": LOADER_NEVER,
         "loader_newiter": LOADER_NEVER | {"input.worker_startup", "input.handoff"},
         "loader_newiter_persistent": LOADER_NEVER | {"input.worker_startup", "input.handoff"},
         "thread_prefetch": {"input.main_prep", "input.cpu_bound", "input.disk_bound"},
         "thread_prefetch_fast": {"input.main_prep", "input.data_wait"},
         "two_loaders_zip": {"input.main_prep"}, "two_loaders_next": {"input.main_prep"},
         "two_loaders_workers": LOADER_NEVER | {"input.worker_startup", "input.new_iterator"},
         "grad_accum_cycle": {"input.main_prep"}, "amp_nan": set(),
         "gan_dcgan": {"input.main_prep"}, "gan_wgan": {"input.main_prep"},
         "accelerate_loop": {"input.main_prep"}, "train_eval_first": {"input.main_prep"},
         "infer_scoring": {"steps.unsegmented", "input.main_prep", "input.ok", "steps.no_grad"},
         "infer_main": {"steps.unsegmented", "input.main_prep", "input.ok", "steps.no_grad"},
         "llm_memmap_accum": {"input.data_wait", "input.cpu_bound", "input.disk_bound", "input.ok"},
         "llm_memmap_nanogpt": {"input.data_wait", "input.cpu_bound", "input.disk_bound", "input.ok"},
         "llm_memmap_nanochat": {"input.data_wait", "input.cpu_bound", "input.disk_bound", "input.ok"},
         "llm_memmap_actckpt": {"input.data_wait", "input.cpu_bound", "input.disk_bound", "input.ok",
                                "steps.no_grad"},
         "llm_memmap_actckpt_reentrant": {"input.data_wait", "input.cpu_bound", "input.disk_bound",
                                          "input.ok", "steps.no_grad"},
         "rl_ppo": RL_NEVER, "rl_a2c": RL_NEVER, "rl_sb3": RL_NEVER,
         "producer_queue": {"input.data_wait", "input.cpu_bound", "input.disk_bound"},
         "tqdm_epochs": {"input.main_prep", "input.handoff"},
         "tqdm_workers": {"input.main_prep", "input.handoff", "input.ok"},
         "compiled": {"gc.pauses", "input.ok"}, "compiled_storm": {"gc.pauses", "steps.stalls"},
         "tutorial_keep": LOADER_NEVER | {"input.handoff", "input.new_iterator"},
         "tutorial_drop": LOADER_NEVER | {"input.handoff", "input.new_iterator"}}
oracle, rep, train, evals = runcheck.load(run)
S = rep["summary"]
bad = []
import glob
mains = glob.glob(run + "/pid*.tmr")
if len(mains) != 1:  # spawned or forkserver workers must not get files of their own
    bad.append("%d training-process files: %s" % (len(mains), sorted(mains)))
if not S.get("steps"):
    bad.append("no steps in the report (summary %s)" % json.dumps(S)[:300])
elif S["steps"] != oracle["steps"]:
    bad.append("steps %s, the job counted %s" % (S["steps"], oracle["steps"]))
share, dwf = oracle.get("data_wait_share"), S.get("data_wait_fraction")
# an inference loop (no training at all): its batches, recorded as eval,
# are its steps; no other job may be read so
if bool(oracle.get("inference")) != bool(S.get("inference_processes")):
    bad.append("inference_processes %s for a job that %s" % (
        S.get("inference_processes"), "only infers" if oracle.get("inference") else "trains"))
if oracle.get("inference"):  # the file keeps them as eval records: one per batch
    if abs(len(evals) - oracle["steps"]) > 1 or train:
        bad.append("%d eval and %d training records, the job ran %d batches"
                   % (len(evals), len(train), oracle["steps"]))
    evals = []
if share is not None and (dwf is None or abs(dwf - share) > 0.05):
    bad.append("data wait %s, the job's own share %.3f" % (dwf, share))
if oracle.get("eval_batches"):
    if len(evals) < oracle["eval_batches"]:
        bad.append("%d eval records, the job ran %d eval batches" % (len(evals), oracle["eval_batches"]))
# and no more: a training batch written as eval (a second loader's batch,
# a prefetched one) loses its wait from the steps
if len(evals) > oracle.get("eval_batches", 0) + 2:
    bad.append("%d eval records, the job ran %d eval batches" % (len(evals), oracle.get("eval_batches", 0)))
if oracle.get("micro_batches"):
    mb = sum(o.get("micro_batches", 0) for o in train)
    if abs(mb - oracle["micro_batches"]) > 4:
        bad.append("%d micro-batches recorded, the job ran %d" % (mb, oracle["micro_batches"]))
if oracle.get("params_bytes"):
    anat = [a for a in (S.get("anatomy") or []) if a.get("device") == "cpu"]
    if not anat or anat[-1].get("params_bytes") != oracle["params_bytes"]:
        bad.append("anatomy %s, the job's parameters %d bytes"
                   % (json.dumps(anat)[:200], oracle["params_bytes"]))
ids = {f["id"]: f for f in rep.get("findings", [])}
want, cause = EXPECT[job]
if isinstance(want, tuple):  # one of them
    want = next((w for w in want if w in ids), want[0])
if oracle.get("saves"):  # checkpoints: the job's own count, time and share
    # the finding from the rule's 5% of the loop: required from 7% of the
    # job's own clock, forbidden under 3.5% (a fast disk makes the saves
    # short: 9 of 48 MB took 4.6% of a clean-clone CI's loop)
    ck = ids.get("checkpoint.blocking")
    save_share = oracle.get("save_share") or 0
    if not ck and save_share >= 0.07:
        bad.append("no checkpoint.blocking among %s (summary %s checkpoints, %s s; the job's saves took %.1f%%)"
                   % (sorted(ids), S.get("checkpoints"), S.get("checkpoint_time_s"), 100 * save_share))
    elif ck and save_share < 0.035:
        bad.append("checkpoint.blocking, but the job's saves took %.1f%%" % (100 * save_share))
    if S.get("checkpoints") != oracle["saves"]:  # counted with or without the finding
        bad.append("summary %s checkpoints, the job saved %d" % (S.get("checkpoints"), oracle["saves"]))
    if ck:
        ev = ck["evidence"]
        if ev.get("checkpoints") != oracle["saves"]:
            bad.append("%s checkpoints, the job saved %d" % (ev.get("checkpoints"), oracle["saves"]))
        if abs(ev.get("save_time_s", 0) - oracle["save_s"]) > 0.1 * oracle["save_s"] + 0.005:
            bad.append("save time %s s, the job timed %.4f s" % (ev.get("save_time_s"), oracle["save_s"]))
        if abs((ev.get("save_bytes_median") or 0) - oracle["save_bytes"]) > 0.01 * oracle["save_bytes"]:
            bad.append("checkpoint bytes %s, the job's files %d" % (ev.get("save_bytes_median"), oracle["save_bytes"]))
        if ev.get("save_calls") != oracle["saves"]:  # one call each (DCP: no torch.save per tensor)
            bad.append("%s save calls for the job's %d checkpoints" % (ev.get("save_calls"), oracle["saves"]))
elif "checkpoint.blocking" in ids:
    bad.append("checkpoint.blocking in a job that saved nothing")
if oracle.get("gc_pauses") is not None:  # the collector: the job's own gc.callbacks timer
    if S.get("gc_pauses") != oracle["gc_pauses"]:
        bad.append("%s gc pauses, the job timed %d" % (S.get("gc_pauses"), oracle["gc_pauses"]))
    elif abs((S.get("gc_pause_time_s") or 0) - oracle["gc_s"]) > 0.1 * oracle["gc_s"] + 0.005:
        bad.append("gc pause time %s s, the job timed %.4f s" % (S.get("gc_pause_time_s"), oracle["gc_s"]))
    if oracle["gc_pauses"] >= 2 and oracle["gc_share"] >= 0.08 and "gc.pauses" not in ids:
        bad.append("no gc.pauses among %s (the job's pauses took %.1f%%)" % (sorted(ids), 100 * oracle["gc_share"]))
    if oracle["gc_share"] < 0.03 and "gc.pauses" in ids:
        bad.append("gc.pauses, but the job's pauses took %.1f%%" % (100 * oracle["gc_share"]))
elif "gc.pauses" in ids:
    bad.append("gc.pauses in a job without a big Python heap: %s" % ids["gc.pauses"]["title"])
if oracle.get("logs"):  # periodic logging: the job's own count and time of it
    sl = ids.get("steps.stalls")
    if not sl:
        bad.append("no steps.stalls among %s (the job logged %d times, %.3f s)"
                   % (sorted(ids), oracle["logs"], oracle["log_s"]))
    else:
        ev = sl["evidence"]
        if ev.get("stalls") != oracle["logs"]:
            bad.append("%s stalls, the job logged %d times" % (ev.get("stalls"), oracle["logs"]))
        if abs(ev.get("excess_s", 0) - oracle["log_s"]) > 0.1 * oracle["log_s"] + 0.01:
            bad.append("stall excess %s s, the job's logging took %.4f s" % (ev.get("excess_s"), oracle["log_s"]))
elif "steps.stalls" in ids:
    bad.append("steps.stalls in a job without periodic work: %s" % ids["steps.stalls"]["title"])
# the model run without gradients (eval runs, RL rollouts): the job's own
# share of its loop, timed inline, and for a rollout in train mode the
# job's rollouts and calls of its model in each
ng = oracle.get("no_grad_share")
if ng is not None and ng >= 0.15:
    f = ids.get("steps.no_grad")
    if not f:
        bad.append("no steps.no_grad among %s (the job's no-grad runs took %.1f%%)" % (sorted(ids), 100 * ng))
    else:
        ev = f["evidence"]
        if abs(ev.get("no_grad_share", 0) - ng) > 0.05:
            bad.append("no-grad share %s, the job's own %.3f" % (ev.get("no_grad_share"), ng))
        if oracle.get("rollouts") is not None and (ev.get("no_grad_steps"), ev.get("calls_per_run")) != (oracle["rollouts"], oracle["calls"]):
            bad.append("%s rollouts of %s calls, the job made %d of %d"
                       % (ev.get("no_grad_steps"), ev.get("calls_per_run"), oracle["rollouts"], oracle["calls"]))
elif (ng or 0) < 0.05 and "steps.no_grad" in ids:
    bad.append("steps.no_grad, but the job's no-grad runs took %.1f%%: %s" % (100 * (ng or 0), ids["steps.no_grad"]["title"]))
if job == "amp_nan":
    if oracle.get("amp_skipped") is None:  # torch 1.x: no GradScaler on the CPU
        want = None
        if "amp.skipped_steps" in ids:
            bad.append("amp.skipped_steps without a GradScaler")
    elif "amp.skipped_steps" in ids:
        ev = ids["amp.skipped_steps"]["evidence"]
        got = (ev.get("skipped_steps"), ev.get("skipped_in_a_row_at_end"))
        if got != (oracle["amp_skipped"], oracle["steps"] - oracle["amp_dead_from"]):
            bad.append("amp.skipped_steps %s, the job skipped %s from step %s on"
                       % (got, oracle["amp_skipped"], oracle["amp_dead_from"]))
        if "from step %d on" % oracle["amp_dead_from"] not in ids["amp.skipped_steps"]["title"]:
            bad.append("amp.skipped_steps title: %s" % ids["amp.skipped_steps"]["title"])
if want and want not in ids:
    bad.append("no %s among %s" % (want, sorted(ids)))
elif want and cause and ids[want]["evidence"].get("cause") != cause:
    bad.append("%s with cause %s, not %s" % (want, ids[want]["evidence"].get("cause"), cause))
if want in ids and job in EVIDENCE and not ids[want]["evidence"].get(EVIDENCE[job]):
    bad.append("%s without %s: %s" % (want, EVIDENCE[job], json.dumps(ids[want]["evidence"])[:300]))
if want in ids and job in RESTARTS and ids[want]["evidence"].get("restarts") != RESTARTS[job]:
    bad.append("%s restarts %s, not %s" % (want, ids[want]["evidence"].get("restarts"), RESTARTS[job]))
if want in ids and job in NEWITER and ids[want]["evidence"].get("workers") != NEWITER[job]:
    bad.append("%s workers %s, not %s" % (want, ids[want]["evidence"].get("workers"), NEWITER[job]))
if job in WORKERS and (S.get("workers"), S.get("worker_restarts")) != WORKERS[job]:
    bad.append("workers %s, restarts %s: the job runs %d workers, restarts %d"
               % ((S.get("workers"), S.get("worker_restarts")) + WORKERS[job]))
if want in ids and job in WHERE and not (ids[want]["evidence"].get(WHERE[job]) or 0) >= 0.6:
    bad.append("%s %s %s, not 0.6 or more" % (want, WHERE[job], ids[want]["evidence"].get(WHERE[job])))
if job == "compiled":  # torch.compile: the job's own compiling steps and graphs
    f = ids.get("steps.compile")
    if not f:
        bad.append("no steps.compile among %s (the job's %d compiling steps took %.3f s)"
                   % (sorted(ids), oracle["compiled_steps"], oracle["compile_step_s"]))
    else:
        ev = f["evidence"]
        late = oracle["compiled_steps"] - 1  # the first step's is warm-up
        got = (ev.get("compilations_after_warmup"), ev.get("first_step_after_warmup"),
               ev.get("recompilations"))
        if got != (late, 12, oracle["graphs"] - 1):
            bad.append("steps.compile after warm-up, from step, recompilations %s: the job "
                       "compiled %d graphs, in %d steps after the first, from step 12"
                       % (got, oracle["graphs"], late))
        ct = ev.get("compile_time_s") or 0  # inside the steps that compiled, most of them
        if not 0.5 * oracle["compile_step_s"] <= ct <= oracle["compile_step_s"] + 0.01:
            bad.append("compile time %.3f s, the job's compiling steps took %.3f s"
                       % (ct, oracle["compile_step_s"]))
if job == "compiled_storm":  # a guard on a counter: recompiled each step to the limit
    ev = ids.get("steps.compile", {}).get("evidence", {})
    got = (ev.get("most_compilations_of_a_frame"), ev.get("recompilations"))
    if got != (oracle["frames_compiled"], oracle["frames_compiled"] - 1):
        bad.append("steps.compile most compilations of a frame, recompilations %s: the job's "
                   "dynamo compiled its frame %d times" % (got, oracle["frames_compiled"]))
    if "recompile_limit" not in ids.get("steps.compile", {}).get("advice", ""):
        bad.append("steps.compile does not say the recompile limit: %s"
                   % ids.get("steps.compile", {}).get("advice", "")[:200])
if job == "tqdm_workers":  # the training loader's 2 workers are the limit
    for i in sorted(ids):
        if "more workers will not help" in (ids[i].get("advice") or ""):
            bad.append("%s says more workers will not help: %s" % (i, ids[i]["advice"][:200]))
    wpr = ids.get("input.cpu_bound", {}).get("evidence", {}).get("workers_per_rank")
    if wpr is not None and wpr != 2:  # its 2, not the validation loader's 2 besides
        bad.append("input.cpu_bound workers_per_rank %s, the training loader runs 2" % wpr)
for w in sorted(NEVER[job] & set(ids)):
    bad.append("%s among the findings" % w)
print("  %-20s job steps %-3d share %.3f | report steps %s wait %s evals %d boundary %s %s"
      % (job, oracle["steps"], share or 0, S.get("steps"),
         None if dwf is None else round(dwf, 3), len(evals),
         sorted({o.get("boundary") for o in train}),
         " ".join(sorted(i for i in ids if i.startswith(("input.", "checkpoint.", "gc.", "steps.")))) or "-"))
for b in bad:
    print("  FAIL %s: %s" % (job, b))
sys.exit(1 if bad else 0)
PYEOF
}

half() { # name python
    local name=$1
    PY=$2
    if [ ! -x "$PY" ]; then echo "$name: skipped: no interpreter $PY (make deps makes it)"; return 0; fi
    if ! tv=$("$PY" -c 'import torch, numpy; print(torch.__version__)' 2>/dev/null); then
        echo "$name: skipped: $PY has no torch or numpy"; return 0
    fi
    echo "$name: $PY (torch $tv)"
    local jobs=${REAL_LOOPS_JOBS:-}
    # The sanitizer build: the report and dump of the binary under ASan on
    # one loop of each kind of boundary, not the whole matrix again.
    case ${BUILD:-} in *asan*) [ -n "$jobs" ] || jobs="grad_accum manual_sgd idle_workers" ;; esac
    for job in ${jobs:-llm_memmap llm_memmap_fast llm_memmap_ckpt llm_memmap_dcp llm_memmap_gc llm_memmap_log grad_accum train_eval manual_sgd break_early idle_workers llm_memmap_eval loader_persistent loader_iterable loader_forkserver loader_fork loader_newiter loader_newiter_persistent thread_prefetch thread_prefetch_fast two_loaders_zip two_loaders_next two_loaders_workers grad_accum_cycle amp_nan gan_dcgan gan_wgan accelerate_loop train_eval_first infer_scoring infer_main llm_memmap_accum llm_memmap_nanogpt llm_memmap_nanochat llm_memmap_actckpt llm_memmap_actckpt_reentrant rl_ppo rl_a2c rl_sb3 producer_queue tqdm_epochs tqdm_workers compiled compiled_storm tutorial_keep tutorial_drop}; do
        local run=$scratch/$name-$job script=$job envs=()
        [ "$job" = llm_memmap_fast ] && { script=llm_memmap; envs=(JOB_PREP_S=0 JOB_HIDDEN=4096); }
        [ "$job" = llm_memmap_ckpt ] && { script=llm_memmap; envs=(JOB_PREP_S=0 JOB_HIDDEN=4096 JOB_SAVE_EVERY=4 JOB_SAVE_MB=128); }
        [ "$job" = llm_memmap_dcp ] && { script=llm_memmap; envs=(JOB_PREP_S=0 JOB_HIDDEN=4096 JOB_SAVE_EVERY=4 JOB_SAVE_MB=128 JOB_SAVE_DCP=1 PYTHONWARNINGS=ignore); }
        [ "$job" = llm_memmap_eval ] && { script=llm_memmap; envs=(JOB_EVAL_EVERY=10); }
        [ "$job" = llm_memmap_log ] && { script=llm_memmap; envs=(JOB_STEPS=60 JOB_PREP_S=0 JOB_HIDDEN=2048 JOB_LOG_EVERY=10 JOB_LOG_S=0.3); }
        [ "$job" = llm_memmap_accum ] && { script=llm_memmap; envs=(JOB_ACCUM=4); }
        [ "$job" = llm_memmap_nanogpt ] && { script=llm_memmap; envs=(JOB_ORDER=nanogpt JOB_ACCUM=2); }
        [ "$job" = llm_memmap_nanochat ] && { script=llm_memmap; envs=(JOB_ORDER=nanochat); }
        [ "$job" = llm_memmap_actckpt ] && { script=llm_memmap; envs=(JOB_ACT_CKPT=plain); }
        [ "$job" = llm_memmap_actckpt_reentrant ] && { script=llm_memmap; envs=(JOB_ACT_CKPT=reentrant); }
        [ "$job" = llm_memmap_gc ] && { script=llm_memmap; envs=(JOB_STEPS=80 JOB_PREP_S=0 JOB_HIDDEN=6144 JOB_PYHEAP=150000 JOB_KEEP=4000); }
        case $job in loader_*) script=loader_variants; envs=(JOB_VARIANT=${job#loader_}) ;; esac
        [ "$job" = thread_prefetch_fast ] && { script=thread_prefetch; envs=(JOB_ITEM_S=0.0001); }
        [ "$job" = grad_accum_cycle ] && { script=grad_accum; envs=(JOB_CYCLE=1); }
        case $job in two_loaders_*) script=two_loaders; envs=(JOB_VARIANT=${job#two_loaders_}) ;; esac
        [ "$job" = two_loaders_workers ] && { script=two_loaders; envs=(JOB_VARIANT=zip JOB_WORKERS=2); }
        case $job in gan_*) script=gan; envs=(JOB_VARIANT=${job#gan_}) ;; esac
        [ "$job" = train_eval_first ] && { script=train_eval; envs=(JOB_EVAL_FIRST=1); }
        [ "$job" = infer_scoring ] && { script=infer; envs=(JOB_WORKERS=2); }
        [ "$job" = infer_main ] && { script=infer; envs=(JOB_WORKERS=0 JOB_GRAD=no_grad); }
        case $job in rl_*) script=rl; envs=(JOB_VARIANT=${job#rl_}) ;; esac
        [ "$job" = tqdm_epochs ] && envs=(JOB_WORKERS=0)
        [ "$job" = tqdm_workers ] && { script=tqdm_epochs; envs=(JOB_WORKERS=2); }
        [ "$job" = compiled_storm ] && { script=compiled; envs=(JOB_VARIANT=storm JOB_EPOCHS=1); }
        case $job in tutorial_*) script=tutorial; envs=(JOB_VARIANT=${job#tutorial_}) ;; esac
        # The jobs whose checks are CPython's or the report's alone (the
        # collector's callbacks, a stall after the step, fast preparation)
        # run on torch 2.x only unless named: on 1.13's slower model they
        # took 48 s of the half's 150 and said nothing the 2.x half does not.
        case $name:$job in torch1:llm_memmap_fast | torch1:llm_memmap_gc | torch1:llm_memmap_log)
            [ -n "${REAL_LOOPS_JOBS:-}" ] || { echo "  $job: on torch 2.x only (nothing of it differs by torch version)"; continue; } ;;
        esac
        if [ "$job" = llm_memmap_dcp ] && ! "$PY" -c 'import torch.distributed.checkpoint' 2>/dev/null; then
            echo "  $job: skipped: no torch.distributed.checkpoint in torch $tv"; continue
        fi
        if [ "${script:-}" = tqdm_epochs ] && ! "$PY" -c 'import tqdm' 2>/dev/null; then
            echo "  $job: skipped: no tqdm for $PY (make deps installs it in the virtualenv)"; continue
        fi
        if [ "${script:-}" = compiled ] && ! "$PY" -c 'import torch._dynamo.callback as c; c.callback_handler' 2>/dev/null; then
            echo "  $job: skipped: torch $tv has no torch.compile callbacks (torch 2.4 and later)"; continue
        fi
        if [ "$job" = accelerate_loop ] && ! "$PY" -c 'import accelerate' 2>/dev/null; then
            echo "  $job: skipped: no accelerate for $PY (make deps installs it in the virtualenv)"; continue
        fi
        ran=$((ran + 1))
        local t0=$SECONDS
        if ! env "${envs[@]}" "$TRAINMON" run -o "$run" -- "$PY" "$root/tests/jobs/$script.py" > "$run.out" 2>&1; then
            tail -n 20 "$run.out"; echo "  FAIL $job: trainmon run failed"; fails=$((fails + 1))
            echo "$name   FAIL $job: trainmon run failed" >> "$scratch/fails"; continue
        fi
        check "$run" "$job" > "$run.check" 2>&1 || {
            fails=$((fails + 1))
            grep "  FAIL " "$run.check" | sed "s/^/$name /" >> "$scratch/fails"
        }
        sed "1s/\$/ ($((SECONDS - t0))s)/" "$run.check"
        if grep -q "  FAIL " "$run.check"; then tail -n 5 "$run.out"; fi
    done
}

half torch1 /usr/bin/python3
. "$root/tests/lib/venv.sh"
venv=$(tm_venv_python)
half torch2 "${venv:-/nonexistent/.venv/bin/python}"
[ $ran -gt 0 ] || { echo "skipped: no interpreter with torch"; exit 77; }
# the failures again at the end: a runner shows the last lines of a failed test
[ $fails -eq 0 ] || { cat "$scratch/fails"; echo "FAIL: $fails of $ran real-loop jobs"; exit 1; }
echo "PASS: $ran real-loop jobs: steps, data wait and eval as the jobs count them"
