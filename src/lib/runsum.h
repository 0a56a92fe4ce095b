/*
 * runsum.h - the run summary: per training process (steps, memory,
 * workers) and for the whole run (totals, GPU, the disk behind the data,
 * pressure, the workers' per-process series).  runsum.c computes it once
 * per analysis; the rules (rules_*.c) judge it and the report writers
 * (reportfmt.c, reporthtml.c) print it.  Step numbers come from the one
 * step accounting (steps.c).  Internal.
 */
#ifndef TM_RUNSUM_H
#define TM_RUNSUM_H

#include <stddef.h>
#include <stdint.h>

#include "agentnote.h"
#include "trainmon.h"

/* One training process (a source with steps, captures or an OOM). */
typedef struct tm_an_rank {
    uint32_t source;
    int32_t rank;
    char label[40]; /* "0", "1" or the role ("pid42") */
    const char *host;
    size_t steps; /* complete steps (tm_steptally) */
    double step_median_s, compute_median_s, wait_median_s, data_wait_fraction;
    double peak_allocated, peak_reserved, total_device, host_rss_peak;
    double alloc_retries;
    size_t ooms;
    size_t workers;               /* distinct DataLoader workers of this rank: ids per loader */
    double worker_batch_median_s; /* per-batch fetch time */
    double worker_busy;           /* CPU s per s of fetching; NAN unknown */
    /* stragglers: per judged step, time in backward passes (a DDP rank's
     * wait for the gradient all-reduce is in it) and in blocking
     * collectives the loop called; NAN unknown */
    double backward_median_s, collective_median_s;
} tm_an_rank;

typedef struct tm_an_summary {
    int64_t win_start, win_end; /* the steps' span (else the run's) */
    size_t steps, steps_total;  /* most steps of one process; all processes */
    double step_median_s, compute_median_s, data_wait_fraction;
    /* What the data wait costs (docs/DIAGNOSIS.md "Time lost and the
     * speed-up"): the judged steps' data wait per training process (the
     * ranks wait side by side: the mean over those with judged steps),
     * the run's wall time (tm_run_span), and the speed-up if the input
     * kept up: judged step time / (step time - data wait), pooled over
     * every rank.  NAN: no judged step. */
    double time_lost_s, run_s, speedup;
    double gpu_util_mean;  /* NAN: no GPU series */
    size_t ngpus;          /* the job's GPUs in gpu_util_mean (jobgpus.c) */
    size_t ngpus_recorded; /* every GPU with a utilization in the window */
    char disk[40];         /* the disk behind the data ("" if none) */
    double disk_read_bps, disk_read_bps_max, disk_await_s, disk_util, disk_queue;
    double disk_ceiling_share;
    /* the same disk's reads per second and mean read request (iostat's
     * rareq-sz over the window: read bytes / reads), NAN unknown */
    double disk_reads_s, disk_req_bytes;
    bool disk_named; /* a -d target names the disk (else: the busiest disk) */
    /* The dataset behind -d (collect_dscache.c, the dataset.* series): its
     * regular files and bytes (lower bounds when the walk was cut short:
     * ds_complete false), the share of it in the page cache as the job
     * started and as it ended, and the host's MemTotal.  NAN: not
     * measured. */
    double ds_files, ds_bytes, ds_cached_start, ds_cached_end, ds_memory;
    bool ds_complete;
    double psi_io_some;
    double worker_d_share, worker_cpu_sys; /* from per-worker system series */
    double worker_read_bps;                /* workers' block-layer reads, B/s over the window */
    double psi_cpu_some;
    /* The job's other processes (runsum_others.c): neither a training
     * process nor a DataLoader worker; on the host where they used most,
     * their CPU over the window summed (cores; NAN: not known), how many
     * used at least TM_AN_OTHERS_PROC_CPU, the busiest (pid, comm, cores),
     * and that host, named where the run has several. */
    double others_cpu;
    size_t others_n;
    uint32_t others_top_pid;
    char others_top_comm[32];
    double others_top_cpu;
    char others_host[64];
    double worker_busy; /* from worker records, all ranks */
    double worker_batch_median_s;
    size_t workers; /* distinct (rank, worker id) pairs */
    /* the loader that serves the steps: the lane with the most batches
     * (runsum_sets.c; the only one without sets): its workers per rank,
     * their median fetch time and its batches per step of the run */
    double lead_workers_per_rank, lead_batch_median_s, lead_batches_per_step;
    /* the step model: eval batches recorded apart; judged steps whose data
     * wait is the loop's own batch preparation (no DataLoader) and the
     * share of it the training thread spent on a CPU (NAN: not measured);
     * judged steps fed by a background thread (TM_STEP_FED_BY_THREAD) */
    size_t eval_steps, prep_steps, fed_steps;
    /* processes read as inference loops (inference.c: they never trained,
     * their DataLoader batches are their steps) */
    size_t infer_procs;
    /* steps whose optimizer step AMP's GradScaler skipped (all of them), the
     * skipped steps in a row at the end of the run (of the process that
     * ended last) and the longest run of them, the last skipped step (0:
     * none) */
    size_t skipped_steps, skip_run_end, skip_run_max;
    uint64_t skip_last_step;
    /* the skipped steps' summed duration and all complete steps' (all
     * processes'), and the training processes that have steps */
    double skipped_s, steps_time_s;
    size_t step_procs;
    double prep_cpu_share;
    /* where in the step that preparation ran (shares of it; NAN unknown):
     * between the forward and the backward pass (nanoGPT's get_batch), and
     * from the last backward pass to the optimizer step (nanochat's next
     * batch); the rest before the forward */
    double prep_fwd_share, prep_opt_share;
    /* The machine the job ran on and the threads that ran on it
     * (summarize_machine): the host with the most runnable threads per
     * usable CPU.  usable_cpus from meta.json of `trainmon run` (else the
     * agent's affinity count); torch_threads the intra-op threads of a rank
     * (the largest recorded: torch_threads events); runnable_threads =
     * torch_threads x host_ranks + host_workers (one thread each: torch
     * sets 1 in a DataLoader worker).  NAN: unknown. */
    char cpu_host[64];
    double usable_cpus, online_cpus, torch_threads, interop_threads, runnable_threads;
    double
        job_cpu_cores; /* the job's process tree on a CPU, cores (mean of proc.cpu_utilization) */
    size_t host_ranks, host_workers;
    /* Compute per step (duration - data wait) over the judged steps of
     * every rank: the fastest tenth (10th percentile) and the median of
     * each rank's first tenth of judged steps (at least 3).  NAN: none. */
    double compute_fast_s, compute_early_s;
    bool gpu;        /* a GPU was recorded: a gpu.* series or device memory in captures */
    bool data_paths; /* data paths were given (-d: run_target / watch_target events) */
    /* -d paths whose filesystem did not answer when the run started (a hung
     * mount; run_target_unanswered events): how many, the first, and how
     * long trainmon waited for it */
    size_t data_hung;
    char data_hung_path[256];
    double data_hung_wait_s;
    /* the handoff from DataLoader workers (docs/DIAGNOSIS.md input.handoff):
     * the share of their lifetime the workers spent fetching (per worker
     * process, weighted by its batches), how many worker processes were
     * started beyond one per (rank, worker id) (a new iterator each epoch,
     * a second loader), the share of the data wait in the steps that
     * waited for a new set to start (worker_set_restarts below), the data
     * wait per batch (median over judged steps),
     * the training thread's CPU share of the waits of a multi-process
     * loader (receiving), and the workers' CPU per batch fetched (median) */
    double worker_util;
    size_t worker_restarts;
    double restart_wait_share, wait_per_batch_s, recv_cpu_share, worker_cpu_per_batch_s;
    /* worker start-up (docs/DIAGNOSIS.md input.worker_startup): the judged
     * training steps that waited for a new set of workers to start (a
     * worker process's first fetch began in the step; all ranks), their
     * data wait (s, summed over the ranks; restart_wait_share above is its
     * share of all the wait), the wait fraction of the judged steps
     * without them (NAN without such steps), how many steps were judged
     * and the median wait of one */
    size_t worker_set_restarts, waits_judged;
    double startup_wait_s, steady_wait_fraction, wait_median_s;
    /* judged training steps with a batch from a DataLoader iterator made
     * for it (TM_STEP_NEW_ITER: `next(iter(loader))`), all ranks; their
     * data wait (s) */
    size_t newiter_steps;
    double newiter_wait_s;
    /* DataLoader batches per judged step, mean over the steps that took
     * any (gradient accumulation: several; NAN: none recorded) */
    double batches_per_step;
    /* the agent's own account (inproc.start / inproc.boundaries events):
     * processes it ran in, what step boundaries they saw in all, whether
     * any ran a module forward, and the torch version of the first;
     * optimizers made (NAN: no agent said) */
    size_t agent_procs, agent_told;
    double seen_batches, seen_backward, seen_optimizer, seen_fetches, seen_optmade;
    bool seen_forward;
    size_t worker_batches; /* TM_REC_WORKER records: batches fetched in workers */
    /* measures the agent could not install (inproc.measure_off events):
     * how many, and the first's name and reason */
    size_t measures_off;
    char measure_off[96], measure_off_why[160];
    char torch_version[32];
    /* Python processes of the job in which the in-process recorder did not
     * load, from their DIR/agent-<pid>.json (run.agent_not_loaded) */
    tm_agent_notes agent_notes;
    /* The storage ceiling (DIR/probe.json of `run --probe`, probe.h): how
     * many probes the run directories hold, and of the one that measured
     * the disk behind the data (probe_disk; "" when none did, then
     * probe_other names a device one did measure) the best random test
     * (reads of the dataset's median file size) and the best sequential
     * one: rate, request size, reads in flight.  NAN: unknown. */
    size_t probes;
    char probe_disk[40], probe_other[40];
    double probe_rand_bps, probe_rand_block, probe_rand_qd;
    double probe_seq_bps, probe_seq_block, probe_seq_qd;
    /* Checkpoint saves (torch.save and the frameworks' savers:
     * checkpoint.save events of the agent; runsum_ckpt.c).  Only blocking
     * saves (on the training thread) that began inside their process's
     * loop count; the others are counted apart: before or after the loop
     * (ckpt_outside), in other threads (ckpt_bg_saves, their time
     * ckpt_bg_s).  The processes with such saves; of the one whose saves
     * took longest: its checkpoints (consecutive saves at the same step
     * are one) and the save calls, the calls that wrote to memory (a
     * buffer written out after them, untimed), their summed time, the
     * median checkpoint's time and bytes (NAN unknown), bytes per second
     * of save time and the share of it on a CPU (NAN unknown), the median
     * steps from one checkpoint to the next (NAN: fewer than 2), its loop
     * time (training steps, eval runs and those saves) and its mean
     * training step (NAN: none); ckpt_async of its calls were
     * torch.distributed.checkpoint.async_save's blocking part (staging the
     * state; its write is a background save). */
    size_t ckpt_procs, ckpt_saves, ckpt_calls, ckpt_to_memory, ckpt_bg_saves, ckpt_outside;
    size_t ckpt_async;
    double ckpt_s, ckpt_median_s, ckpt_bytes, ckpt_write_bps, ckpt_cpu_share;
    double ckpt_every_steps, ckpt_loop_s, ckpt_step_s, ckpt_bg_s;
    /* torch.compile (compile events of the agent; runsum_compile.c).  Of
     * the process whose training thread compiled longest: its
     * compilations and their time, the longest one, the recompilations
     * (a frame's second and later: a guard failed), the frames, the most
     * compilations of one frame, those in judged steps (after warm-up:
     * compile_late_*) and the first such step (counted from 0; NAN:
     * none), its loop time (training steps, eval runs; NAN: no
     * compilation); compilations in other threads, all processes. */
    size_t compile_n, compile_recompiles, compile_late_n, compile_bg_n;
    size_t compile_frames, compile_max_per_frame;
    double compile_s, compile_late_s, compile_loop_s, compile_longest_s, compile_first_late_step;
    /* Python's garbage collector (gc.pause and gc.totals events of the
     * agent; runsum_gc.c).  A pause is a full collection (generation 2),
     * or any of 1 ms or more, that began inside its process's loop.  Of
     * the process whose pauses took longest: the pauses, the full ones
     * among them, those made while automatic collection was off (the job's
     * own gc.collect()), their summed time, median and longest, its loop
     * time (training steps and eval runs; the pauses are in them) and the
     * share; its judged training steps, those a pause began in and the
     * median duration of each kind (NAN: none); the pause time inside the
     * judged steps' batch preparation (no DataLoader) and its share of
     * that preparation (NAN: none); the median steps from one full
     * collection to the next (NAN: fewer than 2).  From its gc.totals
     * (NAN unknown: a crash writes none): all collections' time in the
     * young generations (0, 1) and in full ones over the whole process,
     * the objects gc.freeze() had frozen, threshold0.  All processes:
     * those with pauses in their loop and the time at least one of them
     * was in one (the union: in a DDP job each rank's pause holds the
     * others, and ranks that collect at the same step stall once); events
     * the summarized process did not write (rate limit).  Pauses inside a
     * blocking checkpoint save or the agent's own work (in_save) are none
     * of these: the step model took that time out of the steps. */
    size_t gc_procs, gc_pauses, gc_full, gc_manual, gc_steps, gc_steps_hit, gc_dropped;
    double gc_s, gc_median_s, gc_max_s, gc_loop_s, gc_share, gc_hit_step_s, gc_other_step_s;
    double gc_prep_s, gc_prep_share, gc_every_steps, gc_young_s, gc_full_all_s, gc_frozen;
    double gc_threshold0, gc_ranks_s;
    uint32_t gc_src; /* the summarized process's source (UINT32_MAX: none) */
    /* The collector's part of the data wait: where the judged steps wait
     * mostly on the loop's own batch preparation, the pauses inside it are
     * no preparation (a prefetcher would not hide them; gc.pauses says
     * them), and data_wait_fraction, steady_wait_fraction, time_lost_s
     * and speedup above are net of them (and prep_cpu_share: a collection
     * is on a CPU all of its time), as is that process's data wait in its
     * tm_an_rank; this is the fraction of the step time taken out (0:
     * none). */
    double gc_wait_fraction;
    /* Stalls (runsum_stalls.c, steps.stalls): judged training steps that
     * took TM_AN_STALL_FACTOR times the median and TM_AN_STALL_MIN_S more,
     * of which neither a longer data wait nor a garbage-collector pause
     * makes half the excess (the loop's own work at that step).  Of the
     * process whose such excess is largest: its judged steps, the stalls,
     * those explained by data wait or the collector (counted apart), the
     * excess over the median summed, the median step and the median stall,
     * its loop time (training steps and eval runs) and the share, the
     * median steps from one stall to the next and whether the gaps are
     * regular (at least 2/3 within one step of it), the first stalls' step
     * numbers (stall_at[0..stall_nat)). */
    size_t stall_steps, stall_n, stall_explained, stall_nat;
    double stall_excess_s, stall_step_s, stall_median_s, stall_loop_s, stall_share;
    double stall_every;
    bool stall_regular;
    uint64_t stall_at[5];
    /* the process summarized (UINT32_MAX: none) and, where steps.stalls
     * claims its stalls and it prepares its own batches (no DataLoader),
     * the stalls' excess in that preparation as a fraction of all the
     * judged step time (pooled over the processes whose stalls are
     * claimed): taken out of the data wait as the collector's (0: none) */
    uint32_t stall_src;
    double stall_wait_fraction;
    /* The model run without gradients between the training steps
     * (steps.no_grad): the judged steps that ran it under no_grad in train
     * mode before their training forward (nograd_calls > 0: an RL
     * rollout), that time and the module calls made in it; the eval runs'
     * time after warm-up (eval batches and model.eval() spans); the judged
     * steps, and the share of the loop's time (judged steps and eval runs)
     * both are (NAN: no judged step). */
    size_t nograd_steps, nograd_judged;
    double nograd_s, nograd_calls, nograd_eval_s, nograd_share;
    /* The job's GPUs (rules_overlap.c tm_runsum_overlap): the mean
     * utilization over the window of the GPUs the training process held
     * memory on (job_gpus_by_pid; its own: jobgpus.c), else of every
     * GPU of its host; how many
     * GPUs and samples per GPU.  NAN / 0: no GPU series. */
    double job_gpu_util;
    size_t job_gpus, job_gpu_samples;
    bool job_gpus_by_pid;
} tm_an_summary;

/* The run as the summary and the rules read it: its arrays, the analysis
 * window and the DataLoader workers' pids.  Pointers are the run's, valid
 * until tm_run_free; wp is owned (tm_runsum_view_close frees it). */
typedef struct tm_runview {
    const tm_run *r;
    const tm_run_source *src;
    size_t nsrc;
    const tm_run_series *ser;
    size_t nser;
    int64_t w0, w1; /* analysis window, set by tm_runsum_build */
    /* DataLoader worker processes, from their own records: the pids whose
     * per-process series (proc.process_*{pid=P}) are the workers'. */
    struct tm_runsum_wpid {
        uint32_t pid;
        const char *host;
    } * wp;
    size_t nwp;
    /* per series: a gpu.utilization of one of the job's GPUs (jobgpus.c);
     * owned, NULL: every GPU */
    bool *job_gpu;
} tm_runview;

/* Fills v from r (the worker pids sorted).  0 or -ENOMEM. */
int tm_runsum_view_open(tm_runview *v, const tm_run *r);
void tm_runsum_view_close(tm_runview *v);

/* The summary of the run: per training process (*ranks, malloc'ed, the
 * caller frees it) and for the whole run; sets v's window to the span of
 * the complete steps (else the run's).  0 or -ENOMEM. */
int tm_runsum_build(tm_runview *v, tm_an_summary *S, tm_an_rank **ranks, size_t *nranks);

/* A training process's loop: from its first complete training step's
 * start to its last one's end (lo >= hi: no such step), the time of those
 * steps and of its eval runs, and how many steps. */
typedef struct tm_run_loop {
    int64_t lo, hi;
    double train_s, eval_s;
    size_t train_n;
} tm_run_loop;

/* Each source's loop, indexed by source (calloc'ed, the caller frees it;
 * NULL: no memory). */
tm_run_loop *tm_runsum_loops(const tm_runview *v);
/* The loader lane of each worker record wk[i] (runsum_sets.c): lane[i],
 * nwk of them (0 where the worker recorded no set). */
void tm_runsum_worker_lanes(const tm_runview *v, const tm_run_worker *wk, size_t nwk,
                            uint16_t *lane);
/* The job's other processes into S's others_* (runsum_others.c). */
void tm_runsum_others(const tm_runview *v, tm_an_summary *S);

/* Python's garbage collector's pauses into S's gc_* (runsum_gc.c); the run's data wait
 * and each rank row net of the pauses in their own batch preparation. */
void tm_runsum_gc(const tm_runview *v, tm_an_summary *S, tm_an_rank *ranks, size_t nranks);
/* The loop pauses of source s as {begin, end} pairs in ns, sorted, none
 * inside another (malloc'ed, *n pairs; NULL: none or no memory). */
double *tm_runsum_gc_spans(const tm_runview *v, uint32_t s, size_t *n);
/* Takes the share g of the data wait out of S's data_wait_fraction,
 * steady_wait_fraction, time_lost_s and speedup (runsum.c). */
void tm_runsum_net_wait(tm_an_summary *S, double g);
/* Periodic stalls of the steps into S's stall_* (runsum_stalls.c); the
 * rows of the processes whose stalls are no batch preparation are net of
 * them. */
void tm_runsum_stalls(const tm_runview *v, tm_an_summary *S, tm_an_rank *ranks, size_t nranks);
/* Which gpu.utilization series are of the job's GPUs (jobgpus.c): into
 * v->job_gpu, once the training processes are known.  0, or -ENOMEM (then
 * every GPU counts). */
int tm_runsum_job_gpus(tm_runview *v, const tm_an_rank *ranks, size_t nranks);
/* Whether utilization series s is of one of the job's GPUs */
bool tm_runsum_is_job_gpu(const tm_runview *v, const tm_run_series *s);
/* Whether NVML lists process pid of host on a GPU (gpu.process_memory_bytes) */
bool tm_runsum_pid_on_a_gpu(const tm_runview *v, const char *host, int32_t pid);
/* The job's GPU utilization into S's job_gpu_* (rules_overlap.c). */
void tm_runsum_overlap(const tm_runview *v, tm_an_summary *S, const tm_an_rank *ranks,
                       size_t nranks);
/* Whether steps.stalls claims S's stalls (regular, enough of them,
 * costing enough; rules_stalls.c): the report's summary line says them
 * then. */
bool tm_an_stalls_claimed(const tm_an_summary *S);
/* Per step of the run (tm_run_steps' order, calloc'ed, the caller frees
 * it; NULL: no memory): 1 where a new set of DataLoader workers started
 * (a worker process's first fetch began in the step; runsum.c). */
unsigned char *tm_runsum_startup_marks(const tm_runview *v);
/* The checkpoint saves of the run into S's ckpt_* (runsum_ckpt.c). */
void tm_runsum_checkpoints(const tm_runview *v, tm_an_summary *S);
/* torch.compile's compilations into S's compile_* (runsum_compile.c). */
void tm_runsum_compiles(const tm_runview *v, tm_an_summary *S);
/* Whether e is a compile event of a training thread: the loop's time. */
bool tm_runsum_is_loop_compile(const tm_run_event *e);
/* Source s's training-thread compilations, {begin, end} pairs of wall
 * clock ns in the order written (malloc'ed, the caller frees it; NULL and
 * *n 0: none or no memory): the time a stall spent compiling
 * (runsum_stalls.c). */
double *tm_runsum_compile_spans(const tm_runview *v, uint32_t s, size_t *n);

/* Mean of a series' finite points inside the window (NAN when none);
 * *count (may be NULL) gets how many. */
double tm_runsum_ser_mean(const tm_runview *v, const tm_run_series *s, size_t *count);
/* Largest point inside the window, NAN when none. */
double tm_runsum_ser_max(const tm_runview *v, const tm_run_series *s);
/* The first series named name whose labels contain "key=value" (key NULL:
 * any labels), or NULL. */
const tm_run_series *tm_runsum_ser_find(const tm_runview *v, const char *name, const char *key,
                                        const char *value);
/* Mean of the means of every series called name; *nseries (may be NULL)
 * gets how many had points. */
double tm_runsum_ser_mean_all(const tm_runview *v, const char *name, size_t *nseries);
/* The index in v->wp of the worker (pid, host), or -1. */
ptrdiff_t tm_runsum_worker_index(const tm_runview *v, uint32_t pid, const char *host);
/* The index in v->wp of the worker whose per-process series s is
 * (proc.process_*{pid=P} of the same host), or -1. */
ptrdiff_t tm_runsum_worker_series_index(const tm_runview *v, const tm_run_series *s);

/* The median (upper middle) of a[0..n), which is reordered; NAN for n 0. */
double tm_runsum_median(double *a, size_t n);
/* Least squares y = a + b x over n points: slope b and r2 (0 for a flat
 * line: identical points are not a rise). */
void tm_runsum_fit(const double *x, const double *y, size_t n, double *slope, double *r2);

#endif
