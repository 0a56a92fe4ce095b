/*
 * analysis.h - the rules' thresholds (docs/DIAGNOSIS.md documents each one
 * and where it comes from) and the analysis the report writers
 * (reportfmt.c, reporthtml.c) print: the run summary of runsum.h and the
 * findings of the rules (rules.h).  Internal.
 */
#ifndef TM_ANALYSIS_H
#define TM_ANALYSIS_H

#include <stddef.h>
#include <stdint.h>

#include "runsum.h"
#include "trainmon.h"

/* input.*: the TensorBoard profiler's rule: data loading above 5% of the
 * step time is worth fixing. */
#define TM_AN_DATA_WAIT_FRACTION 0.05
/* input.main_prep: the training thread's CPU share of its batch
 * preparation above which it is CPU work, under which it is waiting */
#define TM_AN_PREP_CPU_BOUND 0.7
#define TM_AN_PREP_WAITING 0.3
/* input.main_prep: the job's other processes (runsum_others.c: neither a
 * training process nor a DataLoader worker) counted from this share of a
 * core over the loop; where together they used TM_AN_PREP_OTHERS_CPU or
 * more while the training thread was on a CPU under TM_AN_PREP_CPU_BOUND
 * of its preparation, the wait is on them (producers of the job's own
 * feeding a multiprocessing queue, a data server it started).  Half a
 * core: a producer process that the loop waits for is busy making the
 * next batch (tests/jobs/producer_queue.py: 0.97 of a core each). */
#define TM_AN_OTHERS_PROC_CPU 0.1
#define TM_AN_PREP_OTHERS_CPU 0.5
/* input.main_prep: a place in the step (before the forward, between the
 * forward and the backward pass, before the optimizer step) that holds at
 * least this share of the preparation is named as where it runs; else
 * each place's share is said */
#define TM_AN_PREP_WHERE 0.6
#define TM_AN_DATA_WAIT_MEDIUM 0.10
#define TM_AN_DATA_WAIT_HIGH 0.30
/* The first step of each training process is warm-up (workers starting,
 * first batches, lazy initialisation): left out of data_wait_fraction.
 * The one step accounting (steps.c) applies it; this name stays for the
 * documentation's sake. */
#define TM_AN_WARMUP_STEPS TM_STEP_WARMUP
/* amp.skipped_steps: AMP's GradScaler skips the optimizer step when the
 * gradients hold inf/NaN at the loss scale and halves the scale
 * (backoff_factor 0.5).  From its default init_scale 2^16, 16 skips bring
 * the scale to 1: the start's backoff, normal.  Later it doubles the scale
 * after growth_interval (2000) steps without a skip and one overflow pulls
 * it back: about one skip per 2,000 steps (0.05%) in a healthy run.  A
 * share of 1% is 20 times that (medium); at 25% a quarter of the run's
 * compute is thrown away (high, and the verdict before an input finding).  More skipped steps in
 * a row than the 20 halvings from 2^16 to below 2^-4 that end the run: no
 * scale removes the inf/NaN, so the loss or the weights are NaN and the
 * model stopped learning (high).  (torch.amp.GradScaler's defaults and
 * documentation, torch/amp/grad_scaler.py.) */
#define TM_AN_AMP_BACKOFF_SKIPS 16
#define TM_AN_AMP_SKIP_SHARE 0.01
#define TM_AN_AMP_SKIP_HIGH 0.25
#define TM_AN_AMP_DEAD_RUN 20
/* Storage signals, each one vote for "the storage is the limit".  A
 * storage verdict needs positive evidence (workers in D state, or the disk
 * behind the data busy while the workers read from it): workers that are
 * merely not at 100% CPU may be starved of CPU or sleeping. */
#define TM_AN_DISK_AWAIT_S 0.010             /* mean read await */
#define TM_AN_DISK_UTIL 0.80                 /* mean %util/100 (with a queue) */
#define TM_AN_DISK_CEILING_NEAR 0.85         /* a sample within 85% of the max ... */
#define TM_AN_DISK_CEILING_SHARE 0.50        /* ... in half the samples: a plateau */
#define TM_AN_DISK_MIN_BPS (1024.0 * 1024.0) /* below 1 MiB/s no plateau counts */
/* a plateau is judged on at least this many samples in the window: one
 * or two samples of a short job (its imports read from a cold page cache)
 * are always "at their own max" */
#define TM_AN_DISK_CEILING_MIN_SAMPLES 5
/* The storage ceiling (`run --probe`, probe.c): the job's mean read rate
 * from the disk behind the data over the best the probe got from that
 * disk for random reads of the dataset's file size.  Under 30% (the
 * seeds' rule: a device read at under 30% of what it delivers is limited
 * by the access pattern, not the device) the pattern is the limit; from
 * 70% on the device is: a job's mean over its window includes the start
 * and the gaps between epochs, so a job held at a throttle's rate reads
 * at 80-95% of the probe's (tests/e2e/run_storage_bound.sh). */
#define TM_AN_PROBE_PATTERN_SHARE 0.30
#define TM_AN_PROBE_DEVICE_SHARE 0.70
/* sequential reads at this many times the random ones: shards pay */
#define TM_AN_PROBE_SEQ_GAIN 1.5
#define TM_AN_PSI_IO_SOME 0.10    /* mean io "some" avg10 (ratio) */
#define TM_AN_WORKER_D_SHARE 0.25 /* workers in D state in 25% of samples */
/* Below this block-layer read rate (all workers together) the workers do
 * not read from a disk: a busy disk is someone else's. */
#define TM_AN_WORKER_READ_MIN_BPS (256.0 * 1024.0)
/* CPU signals. */
#define TM_AN_WORKER_BUSY 0.80 /* CPU s per s of fetching: CPU-bound fetch */
#define TM_AN_WORKER_IDLE 0.50 /* below: the fetch waits on something */
/* Workers fetching this share of their lifetime or more are saturated:
 * never "they keep up" (input.cpu_bound's workers_needed), whatever the
 * medians say (the mean batch of a heavy tail is longer than the median). */
#define TM_AN_WORKER_SATURATED 0.90
/* input.handoff: the workers fetched less than this share of their
 * lifetime.  A worker holds at most prefetch_factor batches in flight and
 * takes a new index only when the main process has received one of its
 * batches (torch/utils/data/dataloader.py, _try_put_index): a worker that
 * is not fetching has its batches done and waiting to be received, so a
 * loop that still waits, waits on the handoff.  Half, not any idle time:
 * start-up and epoch ends idle the workers too. */
#define TM_AN_HANDOFF_WORKER_UTIL 0.50
/* input.handoff: and only where the workers of the loader that serves the
 * steps could have had the batches ready: their fetch time per batch,
 * shared among them, at most the loop's compute per batch.  Over 1, they
 * make batches slower than the loop uses them, and their idle lifetime is
 * the epochs' ends and the eval runs (tests/jobs/tqdm_epochs.py with 2
 * workers: 15-batch epochs, 31 ms a batch for 8 ms of compute, 1.9; it
 * read "handoff ... they are idle" at a lifetime share of 0.44). */
#define TM_AN_HANDOFF_BEHIND 1.0
/* input.handoff: the longest waits, one per worker restart, above this
 * share of all the wait: the restarts (a new worker set each epoch) are
 * worth persistent_workers=True. */
#define TM_AN_HANDOFF_RESTART_SHARE 0.30
/* input.worker_startup: the wait is the workers starting.  Each new
 * iterator of a DataLoader without persistent_workers starts a new set of
 * workers, and the loop waits for the set's first batch: one long wait per
 * set (the set's start-up: process start, the Dataset pickled to it under
 * spawn/forkserver, worker_init_fn, the first fetch), in the step where
 * the set's first fetch began (runsum.c, mark_startups).  The verdict when
 * those steps' waits are at least half of all the wait, or when without
 * them the loop would wait under TM_AN_DATA_WAIT_FRACTION (the restarts
 * alone make it input-bound); and only with at least
 * TM_AN_STARTUP_STEPS_PER_SET judged steps per set, since in a handful of
 * steps a few waits are a large share of any wait. */
#define TM_AN_STARTUP_SHARE 0.50
#define TM_AN_STARTUP_STEPS_PER_SET 4
/* ... and their mean wait at least this many times the median wait of a
 * judged step: start-ups are outliers; a fork set that costs an ordinary
 * wait is no start-up problem.  Measured: a forkserver set's wait is 1300x
 * the median (0.65 s against 0.5 ms, tests/jobs/loader_variants.py); 4x
 * keeps a fork set's 10-23 ms (below) an outlier in loops waiting up to
 * 2.5 ms a step. */
#define TM_AN_STARTUP_OUTLIER 4.0
/* ... or a new set in at least TM_AN_STARTUP_EVERY of the judged steps,
 * with those steps' waits at least TM_AN_STARTUP_SHARE of all: a loader of
 * one batch an epoch without persistent workers, whose start-ups are no
 * outliers but every wait (neither the steps-per-set nor the outlier test
 * applies).  Nine in ten: a loader of two batches an epoch (a set every
 * other step) is not said so.  (`next(iter(loader))` makes a set every
 * step too: input.new_iterator, judged first, says it.) */
#define TM_AN_STARTUP_EVERY 0.9
/* input.new_iterator: at least this share of the judged steps took a
 * batch from a DataLoader iterator made for it (TM_STEP_NEW_ITER), as for
 * TM_AN_STARTUP_EVERY: a loop that breaks its epochs off after a few
 * batches makes one every few steps, and that is no such loop. */
#define TM_AN_NEWITER_STEPS 0.9
/* checkpoint.blocking: torch.save on the training thread stops the loop
 * for its whole time (runsum_ckpt.c).  As for the input
 * (TM_AN_DATA_WAIT_FRACTION), a twentieth of the loop's time is worth
 * fixing (medium) and a fifth is high.  At least TM_AN_CKPT_MIN
 * checkpoints: one save (the final model) is no habit of the loop.  The
 * interval advice is Young's: J. W. Young, "A first order approximation
 * to the optimum checkpoint interval", CACM 17(9), 1974: the interval
 * that loses least to saves and to reruns after a failure together is
 * sqrt(2 x save time x mean time between failures), named for a failure a
 * day (TM_AN_CKPT_MTBF_S).  A save on a CPU under TM_AN_CKPT_CPU_WAITING
 * of its time waited (for the storage, writeback of dirty pages, a
 * network filesystem); over it, it was serializing and copying. */
#define TM_AN_CKPT_SHARE 0.05
#define TM_AN_CKPT_SHARE_HIGH 0.20
#define TM_AN_CKPT_MIN 2
#define TM_AN_CKPT_MTBF_S 86400.0
#define TM_AN_CKPT_CPU_WAITING 0.5

/* steps.compile: torch.compile's compilations ran inside the loop's steps
 * (runsum_compile.c).  As for checkpoints (TM_AN_CKPT_SHARE), a twentieth
 * of the loop's time is worth saying and a fifth is high; recompilations
 * after warm-up make it medium at least (they stall training mid-run).  A
 * frame compiled TM_AN_COMPILE_FRAME_MANY times (three recompilations) is
 * said whatever it cost: its guards keep failing (a shape that changes
 * each time), and at torch._dynamo.config.recompile_limit compilations
 * (TM_AN_COMPILE_LIMIT: 8 in torch 2.x, cache_size_limit before 2.6)
 * dynamo gives up and that frame runs uncompiled from then on. */
#define TM_AN_COMPILE_SHARE 0.05
#define TM_AN_COMPILE_SHARE_HIGH 0.20
#define TM_AN_COMPILE_FRAME_MANY 4
#define TM_AN_COMPILE_LIMIT 8
/* gc.pauses: Python's garbage collector stopped the loop (runsum_gc.c).
 * As for checkpoints, a twentieth of the loop's time is worth fixing
 * (medium) and a fifth is high, with at least TM_AN_GC_MIN pauses in the
 * loop.  In a job of several training processes (DDP) each process's
 * pause holds the others at the next collective, at steps of its own: the
 * pauses of all of them are summed against the loop (an upper bound, so
 * the confidence is lower), as Megatron-LM's --manual-gc argues (the ranks
 * collect at the same step, instead of each stalling the others).  Where
 * full collections are at least TM_AN_GC_FULL_SHARE of the pauses the
 * heap of long-lived objects is the cost (gc.freeze()); else the young
 * generations' thresholds are.  The collector's share of the loop's own
 * batch preparation (no DataLoader) is no preparation a prefetcher would
 * hide: the input verdict reads the preparation without it
 * (tm_an_input_wait). */
#define TM_AN_GC_SHARE 0.05
#define TM_AN_GC_SHARE_HIGH 0.20
#define TM_AN_GC_MIN 2
#define TM_AN_GC_FULL_SHARE 0.5
/* steps.stalls: a judged training step is a stall when it takes
 * TM_AN_STALL_FACTOR times the process's median step and TM_AN_STALL_MIN_S
 * more (a 1 ms step's 3 ms is scheduling noise, not a stall), and neither
 * a longer data wait nor the collector's pauses make half its excess over
 * the median.  Judged only with TM_AN_STALL_MIN_STEPS judged steps and at
 * least TM_AN_STALL_MIN stalls whose gaps are regular (at least
 * TM_AN_STALL_REGULAR of them within one step of their median: something
 * the loop does every K steps; scattered stalls on a shared machine are
 * the machine's, and not claimed), costing TM_AN_GC_SHARE of the loop
 * (medium) or TM_AN_GC_SHARE_HIGH (high), as the other costs of the loop. */
#define TM_AN_STALL_FACTOR 3.0
#define TM_AN_STALL_MIN_S 0.020
#define TM_AN_STALL_MIN_STEPS 20
#define TM_AN_STALL_MIN 4
#define TM_AN_STALL_REGULAR (2.0 / 3.0)
/* steps.stalls: a stall whose excess over the median step is under this
 * share of the median stall's is a random slow step (a busy machine), not
 * the every-K work: left out of the stalls' count, gaps and excess. */
#define TM_AN_STALL_NOISE 0.25
/* steps.no_grad: the model run without gradients between the training
 * steps (an RL rollout, sampling, eval runs) costing TM_AN_NOGRAD_SHARE of
 * the loop's time or more is said (low), TM_AN_NOGRAD_MEDIUM medium,
 * TM_AN_NOGRAD_HIGH high: twice the data wait's threshold, since some of
 * it is work the job chose (a usual eval schedule is far under it:
 * nanoGPT's defaults evaluate 400 forwards every 2,000 steps of 40
 * micro-batches, 0.2%); a rollout at half the loop is the job's main cost.
 * Runs of fewer than TM_AN_NOGRAD_CALLS calls on average (most of them
 * one call) are a frozen model's forward (a teacher's in distillation, a
 * target network's): the step's compute, low at most; a DQN loop whose
 * epsilon-greedy steps call the policy on 70% of them (1.8 a run) is
 * acting, not that. */
#define TM_AN_NOGRAD_SHARE 0.10
#define TM_AN_NOGRAD_MEDIUM 0.25
#define TM_AN_NOGRAD_HIGH 0.50
#define TM_AN_NOGRAD_CALLS 1.5

/* A set slower than this to deliver its first batch re-imports the job.
 * Measured on the 2-core test VM, iter() to the first batch of 2 workers
 * over an in-memory Dataset, 4 epochs each, torch 1.13 and 2.13: fork
 * 0.010-0.023 s, forkserver 0.58-0.80 s, spawn 0.61-0.84 s (each worker
 * imports torch and the main module again; a heavier main script is
 * slower still: 0.65 s in tests/jobs/loader_variants.py forkserver). */
#define TM_AN_STARTUP_SLOW_S 0.30
#define TM_AN_PSI_CPU_SOME 0.10   /* mean cpu "some" avg10: tasks wait for a core */
#define TM_AN_WORKER_CPU_MIN 0.20 /* starved: still this much CPU per fetch-second */
/* host.cpu_oversubscribed: more runnable threads (intra-op threads x
 * ranks + DataLoader workers) than the CPUs the job may use (affinity,
 * cgroup quota), confirmed by tasks waiting for a CPU (PSI cpu some, the
 * input rules' TM_AN_PSI_CPU_SOME) or by compute per step at twice its own
 * fastest tenth or more: half of a step's compute spent waiting.  Measured
 * background: 1.65-1.7 on a shared 2-core machine for jobs that do not
 * oversubscribe it themselves (make demo; the control of
 * tests/e2e/run_cpu_oversub.sh), so 2.0 stays clear of another's load.
 * High severity: the kernel's "some" pressure above 30% (the input rules'
 * TM_AN_DATA_WAIT_HIGH scale) or compute at 4x its fastest tenth. */
#define TM_AN_CPU_OVERSUB_RATIO 1.0 /* runnable threads per usable CPU above this */
#define TM_AN_CPU_SLOWDOWN 2.0      /* compute median / fastest tenth */
/* the job's process tree kept its usable CPUs this full (mean cores on a
 * CPU / usable): with more runnable threads than cores, they queue for
 * them, whatever the system-wide pressure (PSI averages over every CPU: a
 * job pinned to one of two cores shows little of it) */
#define TM_AN_CPU_SATURATED 0.90
#define TM_AN_CPU_SLOWDOWN_HIGH 4.0
#define TM_AN_PSI_CPU_SOME_HIGH 0.30
/* data.page_cache (rules_cache.c): the dataset's page-cache residency,
 * read as the job starts and as it ends (collect_dscache.c).  Cached: at
 * least 95% of its bytes resident (a few files evicted or not yet read do
 * not make an epoch disk-bound).  Larger than memory: more bytes than the
 * host's MemTotal; the page cache shares the RAM with the job itself, and
 * a scan of a file set larger than the cache finds what it needs evicted
 * by the time it comes round again (the kernel's LRU lists,
 * Documentation/mm/multigen_lru.rst and mm/workingset.c: pages are only
 * protected once they are re-read while still resident). */
#define TM_AN_CACHED_FULL 0.95
#define TM_AN_DATASET_RAM_RATIO 1.0
/* data.small_files: the disk behind the data served read requests of
 * 32 KiB or less on average (iostat's rareq-sz over the window) at 50 or
 * more per second while the loop waited for data.  A shard read
 * sequentially is read in readahead windows: 128 KiB by default
 * (read_ahead_kb, VM_READAHEAD_PAGES in include/linux/mm.h), the request
 * size the expected gain assumes; 32 KiB is where that gain reaches 4x,
 * worth rewriting a dataset for (and an eighth of the 256 KiB I/O that
 * AWS EBS SSD volumes count as one operation: a volume limited in IOPS
 * pays a whole operation for each small read).  Files count as small
 * below 1 MiB on average (the dataset walk, when there is one): such a
 * file is read in a handful of requests plus its inode and directory
 * blocks. */
#define TM_AN_SMALL_REQ_BYTES (32.0 * 1024)
#define TM_AN_SMALL_REQ_RATE 50.0
#define TM_AN_SHARD_REQ_BYTES (128.0 * 1024)
#define TM_AN_SMALL_FILE_BYTES (1024.0 * 1024)
/* gpu.underutilized: the TensorBoard profiler's "GPU util < 50%". */
#define TM_AN_GPU_UTIL 0.50
/* gpu.util_swing: NVML's utilization is the share of its sample period
 * (1/6 s to 1 s by product, nvml.h nvmlDeviceGetUtilizationRates) in which
 * a kernel ran.  A GPU that computes a step and idles while the loop waits
 * gives busy and idle samples in turn once a step is longer than a sample:
 * at most 20% busy is idle, at least 70% busy (the profiler's 50% line
 * with margin on both sides); each at least 20% of at least 10 samples,
 * with at least 4 changes (two cycles) between them.  The swing is "at the
 * step period" when its period is within a factor of 2 of the median step
 * (sampling aliases a period it cannot resolve). */
#define TM_AN_GPU_SWING_IDLE 0.20
#define TM_AN_GPU_SWING_BUSY 0.70
#define TM_AN_GPU_SWING_SHARE 0.20
#define TM_AN_GPU_SWING_MIN_SAMPLES 10
#define TM_AN_GPU_SWING_MIN_CHANGES 4
#define TM_AN_GPU_SWING_PERIOD_RATIO 2.0
/* input.overlapped: NVML's utilization (the share of its sample period in
 * which a kernel ran, as above) of a GPU that idled while the loop waited
 * a share w of the time is at most 1 - w.  Read at least 20 points above
 * that, and at least 85% busy (well above the swing's busy line), over at
 * least 10 samples: the GPU did not wait; the host waited on work queued
 * before (it runs ahead of the GPU).  The margin covers NVML counting a
 * sample period busy for any kernel in it. */
#define TM_AN_OVERLAP_GPU_BUSY 0.85
#define TM_AN_OVERLAP_MARGIN 0.20
#define TM_AN_OVERLAP_MIN_SAMPLES 10
/* gpu_mem.near_capacity: the profiler's "peak > 90% of device memory". */
#define TM_AN_MEM_NEAR 0.90
/* gpu_mem.growth: a steady rise of the per-step floor of allocated. */
#define TM_AN_GROWTH_MIN_STEPS 20
#define TM_AN_GROWTH_WARMUP 0.10 /* first 10% of steps left out */
#define TM_AN_GROWTH_R2 0.80
#define TM_AN_GROWTH_MIN_BYTES (32.0 * 1024 * 1024)
/* gpu_mem.fragmentation: inactive split blocks at peak reserved. */
#define TM_AN_FRAG_RATIO 0.25
#define TM_AN_FRAG_MIN_BYTES (256.0 * 1024 * 1024)
/* gpu_mem.oom: the live data's cause, from the OOM summary's live bytes
 * by category (docs/DIAGNOSIS.md "gpu_mem.oom").  Activations and other
 * temporaries at half of what is live or more, as anatomy.activations
 * (TM_AN_ANAT_ACT_SHARE); the optimizer's state at 35% or more, as
 * anatomy.optimizer_state (TM_AN_ANAT_STATE_SHARE: Adam's two fp32
 * moments are half of weights + gradients + state); parameters with their
 * gradients at half or more (fp32 weights and gradients of a model
 * without Adam's state: SGD without momentum, or inference). */
#define TM_AN_OOM_ACT_SHARE 0.50
#define TM_AN_OOM_STATE_SHARE 0.35
#define TM_AN_OOM_PARAMS_SHARE 0.50
/* gpu_mem.alloc_retries: any; high above this many per step. */
#define TM_AN_RETRIES_PER_STEP_HIGH 0.05
/* anatomy.*: judged on the latest memory anatomy of each device.  Below
 * TM_AN_ANAT_MIN_BYTES a part is no concern on any GPU (and a CPU test
 * model says nothing).  optimizer_state: the state's share of the bytes
 * accounted for (parameters, gradients, state, unknown, activations) at
 * or above 35%: Adam's fp32 moments are 2x the fp32 weights, half of
 * weights + gradients + state (torch/optim/adam.py: exp_avg, exp_avg_sq);
 * 35% leaves room for activations beside them.  An 8-bit optimizer
 * (bitsandbytes) stores each moment in 1 byte instead of 4: it saves 3/4. */
#define TM_AN_ANAT_MIN_BYTES (256.0 * 1024 * 1024)
#define TM_AN_ANAT_STATE_SHARE 0.35
#define TM_AN_ANAT_8BIT_SAVES 0.75
/* activations: half of what is accounted for or more. */
#define TM_AN_ANAT_ACT_SHARE 0.50
/* max_micro_batch: the share of the usable memory (free + reserved) kept
 * back for fragmentation and the transient buffers of a backward pass. */
#define TM_AN_ANAT_MARGIN 0.10
/* host_mem.worker_growth: a worker's PSS (RSS without PSS) rising
 * steadily.  Stale repeats (PSS is re-read every 5 s) are one reading. */
#define TM_AN_WORKER_GROWTH_MIN_BYTES (64.0 * 1024 * 1024)
#define TM_AN_WORKER_GROWTH_REL 0.10
#define TM_AN_WORKER_GROWTH_R2 0.80
#define TM_AN_WORKER_GROWTH_MIN_POINTS 4
#define TM_AN_WORKER_GROWTH_MIN_SPAN_S 5.0
/* The job's GPUs (jobgpus.c): a GPU on which a training process holds at
 * least this share of the most it holds on any GPU is its own; a CUDA
 * context on cuda:0 (300-600 MiB) beside a GPU it trains on is not */
#define TM_AN_JOB_GPU_SHARE 0.10
/* ranks.imbalance */
#define TM_AN_RANK_RATIO 1.20
#define TM_AN_RANK_MIN_DIFF_S 0.005
#define TM_AN_RANK_MEM_MIN_DIFF (1024.0 * 1024 * 1024)
#define TM_AN_RANK_MIN_STEPS 10
/* ranks.straggler: the other ranks wait for one rank in the gradient sync
 * (their backward passes are longer than its by the wait: DDP's reducer
 * finishes backward only when every rank's buckets are reduced,
 * torch/csrc/distributed/c10d/reducer.cpp finalize_backward) or in the
 * collectives the loop calls.  A straggler when the others' median wait
 * is at least this share of the step and TM_AN_RANK_MIN_DIFF_S. */
#define TM_AN_STRAGGLER_WAIT_SHARE 0.10

/* The result of tm_analyze: the run summary (runsum.h) the report writers
 * print, and the findings, most severe first.  Everything is owned:
 * tm_analysis_free frees it. */
struct tm_analysis {
    tm_an_summary sum;
    tm_an_rank *ranks;
    size_t nranks;
    tm_finding *f;
    size_t nf, cap;
};

/* Which GPUs S's gpu_util_mean is of, for the report: "mean of 2 GPU(s)",
 * or, where the job ran on some of the machine's, "mean of the job's 1
 * GPU(s) of 8 recorded" */
void tm_an_gpus_of(char *buf, size_t cap, const tm_an_summary *S);

#endif
