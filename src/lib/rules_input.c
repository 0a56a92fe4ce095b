/*
 * rules_input.c - input.*: does the loop wait for data, and is the limit
 * the storage or the workers' CPU (docs/DIAGNOSIS.md, "input.*").  The
 * findings exclude one another: input_verdict() counts the votes once
 * and each rule reports only its own verdict.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "machine.h"
#include "rules.h"
#include "units.h"

enum tm_severity tm_an_wait_severity(double f)
{
    return f >= TM_AN_DATA_WAIT_HIGH     ? TM_SEV_HIGH
           : f >= TM_AN_DATA_WAIT_MEDIUM ? TM_SEV_MEDIUM
                                         : TM_SEV_LOW;
}

void tm_an_ev_input_head(struct ev *e, const tm_an_summary *S)
{
    tm_an_ev_num(e, "data_wait_fraction", S->data_wait_fraction);
    tm_an_ev_num(e, "threshold", TM_AN_DATA_WAIT_FRACTION);
    tm_an_ev_num(e, "steps", (double)S->steps_total);
    tm_an_ev_num(e, "step_time_median_s", S->step_median_s);
    tm_an_ev_num(e, "compute_time_median_s", S->compute_median_s);
}

/* What the wait costs (docs/DIAGNOSIS.md "Time lost and the speed-up"):
 * the evidence (time_lost_s, time_lost_fraction of the run, speedup) and
 * "; 12.3 s lost (41% of the run), about 1.7x faster if the input kept up"
 * appended to the title in buf. */
void tm_an_input_cost(struct ev *e, const tm_an_summary *S, char *buf, size_t cap)
{
    double share = S->run_s > 0 ? S->time_lost_s / S->run_s : NAN;
    tm_an_ev_num(e, "time_lost_s", S->time_lost_s);
    tm_an_ev_num(e, "time_lost_fraction", share);
    tm_an_ev_num(e, "run_s", S->run_s);
    tm_an_ev_num(e, "speedup", S->speedup);
    size_t len = strlen(buf);
    if (len >= cap || !isfinite(S->time_lost_s) || !isfinite(S->speedup))
        return;
    char sh[48] = "";
    if (isfinite(share))
        snprintf(sh, sizeof sh, " (%.0f%% of the run)", 100 * (share > 1 ? 1 : share));
    char lost[48]; /* "12.3 s", "123 s"; under a second in its unit: "85.0 ms", not "0.1 s" */
    if (S->time_lost_s >= 1)
        snprintf(lost, sizeof lost, "%.*f s", S->time_lost_s < 10 ? 1 : 0, S->time_lost_s);
    else
        tm_unit_fmt(lost, sizeof lost, TM_UNIT_SECONDS, S->time_lost_s);
    snprintf(buf + len, cap - len, "; %s lost%s, about %.*fx faster if the input kept up", lost, sh,
             S->speedup < 10 ? 1 : 0, S->speedup);
}

/* Advice that knows the run: what waits for the data ("the GPU" only when
 * the run recorded one), and the -d remedy only when no data path was
 * given (an applied remedy is not proposed again). */
static const char *in_waiter(const tm_an_summary *S)
{
    if (S->gpu)
        return "the GPU";
    /* every process an inference loop (inference.c): nothing trains */
    return S->infer_procs && S->infer_procs >= S->step_procs ? "the inference loop"
                                                             : "the training loop";
}

static const char *in_record_d(const tm_an_summary *S, const char *suggest)
{
    return S->data_paths ? "" : suggest;
}

enum input_kind {
    IN_NONE,
    IN_OK,
    IN_DISK,
    IN_CPU,
    IN_WAIT,
    IN_PREP,
    IN_HANDOFF,
    IN_STARTUP,
    IN_NEWITER,
    IN_OVERLAP
};

/* The loader the workers' arithmetic is about: the one that serves the
 * steps (runsum.c lead_loader: the lane with the most batches), so that a
 * validation loader's workers, idle through training, neither count as
 * workers the training loop has nor lend it their fetch times; all the
 * workers together where that loader is not known. */
struct lead {
    double per; /* fetch time per batch */
    double bps; /* its batches per step (at least 1) */
    double nw;  /* its workers per rank */
};

/* The votes of the system signals and the verdict they give. */
struct votes {
    enum input_kind kind;
    bool v_dstate, c_busy, c_sys, c_starved;
    bool keeps_up; /* a CPU vote, but the workers keep up on paper */
    int disk, cpu;
    double busy, ratio, need, nw;
    struct lead lead;
};

static struct lead lead_of(const tm_an_summary *S, size_t nranks)
{
    if (S->lead_batch_median_s > 0 && S->lead_batches_per_step > 0 && S->lead_workers_per_rank >= 1)
        return (struct lead){.per = S->lead_batch_median_s,
                             .bps = S->lead_batches_per_step >= 1 ? S->lead_batches_per_step : 1,
                             .nw = round(S->lead_workers_per_rank)};
    size_t nw = S->workers;
    if (nranks > 1 && nw)
        nw = (nw + nranks - 1) / nranks;
    return (struct lead){.per = S->worker_batch_median_s,
                         .bps = S->batches_per_step >= 1 ? S->batches_per_step : 1,
                         .nw = (double)nw};
}

/* The workers a rank needs so that batches arrive as fast as steps use
 * them: each worker makes one batch at a time, and a step takes
 * batches_per_step of them (gradient accumulation: several); at least 1,
 * NAN when a time is unknown. */
static double workers_needed(const struct lead *L, const tm_an_summary *S)
{
    double comp = S->compute_median_s;
    double need = comp > 0 && isfinite(L->per) ? ceil(L->per * L->bps / comp - 1e-9) : NAN;
    return need < 1 ? 1 : need;
}

static struct votes verdict_of(const tm_an_summary *S, size_t nranks)
{
    struct votes w = {.kind = IN_NONE};
    if (isnan(S->data_wait_fraction))
        return w;
    if (S->data_wait_fraction < TM_AN_DATA_WAIT_FRACTION) {
        w.kind = IN_OK;
        return w;
    }
    /* The GPU was busy while the loop waited: the host ran ahead of it
     * and waited on work queued before (rules_overlap.c says it); no
     * input verdict, whatever the wait was for. */
    if (tm_an_input_is_overlapped(S, nranks)) {
        w.kind = IN_OVERLAP;
        return w;
    }
    /* No DataLoader (the step model): most judged steps waited on the
     * loop's own batch preparation, on the training thread.  Workers and
     * disks of a DataLoader are not the cause; input.main_prep says it. */
    if (S->prep_steps > 0 && 2 * S->prep_steps > S->steps_total) {
        w.kind = IN_PREP;
        return w;
    }
    /* A new iterator for every batch (rules_newiter.c says it). */
    if (tm_an_input_is_newiter(S)) {
        w.kind = IN_NEWITER;
        return w;
    }
    /* A new set of workers starting each epoch: the waits for their first
     * batches (rules_startup.c says it, and what the rest points at). */
    if (tm_an_input_is_startup(S)) {
        w.kind = IN_STARTUP;
        return w;
    }
    /* Idle workers: their batches were ready, the wait is the handoff
     * (rules_handoff.c says it).  Neither their CPU nor the disk is the
     * limit: more workers would not help. */
    if (tm_an_input_is_handoff(S)) {
        w.kind = IN_HANDOFF;
        return w;
    }
    /* Votes: which resource the waiting points at.  Storage needs positive
     * evidence: the workers in D state, or the disk behind the data busy
     * while the workers read from a disk at all (a busy disk that the
     * workers do not read from is someone else's). */
    bool workers_read = !(S->worker_read_bps < TM_AN_WORKER_READ_MIN_BPS); /* or unknown */
    bool v_dstate = S->worker_d_share >= TM_AN_WORKER_D_SHARE;
    bool v_await = workers_read && (S->disk_await_s >= TM_AN_DISK_AWAIT_S ||
                                    (S->disk_util >= TM_AN_DISK_UTIL && S->disk_queue >= 1.0));
    bool v_ceiling = workers_read && S->disk_read_bps >= TM_AN_DISK_MIN_BPS &&
                     S->disk_ceiling_share >= TM_AN_DISK_CEILING_SHARE;
    bool v_psi = S->psi_io_some >= TM_AN_PSI_IO_SOME;
    bool storage = v_dstate || v_await || v_ceiling;
    /* CPU: the workers busy on a core while they fetch, or starved of one:
     * tasks waited for a CPU (psi) and the workers' CPU time plus that
     * wait covers their fetch time.  CPU taken by other load still makes
     * the input CPU-bound from the job's point of view. */
    double busy = isnan(S->worker_busy) ? S->worker_cpu_sys : S->worker_busy;
    bool c_busy = S->worker_busy >= TM_AN_WORKER_BUSY;
    bool c_sys = S->worker_cpu_sys >= TM_AN_WORKER_BUSY;
    bool c_starved = !v_dstate && S->psi_cpu_some >= TM_AN_PSI_CPU_SOME &&
                     busy >= TM_AN_WORKER_CPU_MIN && busy + S->psi_cpu_some >= TM_AN_WORKER_BUSY;
    int disk = v_dstate + v_await + v_ceiling + (storage && v_psi);
    int cpu = c_busy + c_sys + c_starved;
    double ratio = S->compute_median_s > 0 ? S->step_median_s / S->compute_median_s : NAN;
    w.v_dstate = v_dstate;
    w.c_busy = c_busy;
    w.c_sys = c_sys;
    w.c_starved = c_starved;
    w.disk = disk;
    w.cpu = cpu;
    w.busy = busy;
    w.ratio = ratio;
    w.lead = lead_of(S, nranks);
    w.need = workers_needed(&w.lead, S);
    w.nw = w.lead.nw;
    w.kind = storage && (disk >= 2 || cpu == 0) ? IN_DISK : cpu >= 1 ? IN_CPU : IN_WAIT;
    /* CPU-bound workers are too few for their batch time.  When the
     * workers there are deliver a step's batches faster than it computes
     * (workers_needed <= workers: the medians keep up) and are not
     * fetching nearly all the time (saturated workers are the limit,
     * whatever the medians say), their throughput is not what the loop
     * waits for, however busy their CPU: the wait comes in bursts (slow
     * batches, start-up) or in the handoff, and "add workers" would be
     * wrong.  input.data_wait says so. */
    if (w.kind == IN_CPU && w.need <= w.nw && !(S->worker_util >= TM_AN_WORKER_SATURATED)) {
        w.kind = IN_WAIT;
        w.keeps_up = true;
    }
    return w;
}

static struct votes input_verdict(const struct an *an)
{
    return verdict_of(&an->a->sum, an->a->nranks);
}

const char *tm_an_input_steady_verdict(const struct an *an)
{
    tm_an_summary T = an->a->sum;
    T.data_wait_fraction = T.steady_wait_fraction;
    T.worker_set_restarts = 0;
    T.restart_wait_share = T.startup_wait_s = NAN;
    switch (verdict_of(&T, an->a->nranks).kind) {
    case IN_OK:
        return "input.ok";
    case IN_DISK:
        return "input.disk_bound";
    case IN_CPU:
        return "input.cpu_bound";
    case IN_WAIT:
        return "input.data_wait";
    case IN_PREP:
        return "input.main_prep";
    case IN_HANDOFF:
        return "input.handoff";
    case IN_OVERLAP:
        return "input.overlapped";
    default:
        return NULL;
    }
}

/* The evidence of a waiting verdict: every signal and the votes. */
static void ev_input_votes(struct ev *e, const tm_an_summary *S, const struct votes *w)
{
    tm_an_ev_open(e);
    tm_an_ev_input_head(e, S);
    if (S->disk[0])
        tm_an_ev_str(e, "disk", S->disk);
    tm_an_ev_num(e, "disk_read_bytes_per_second", S->disk_read_bps);
    tm_an_ev_num(e, "disk_read_bytes_per_second_max", S->disk_read_bps_max);
    tm_an_ev_num(e, "disk_read_await_s", S->disk_await_s);
    tm_an_ev_num(e, "disk_utilization", S->disk_util);
    tm_an_ev_num(e, "disk_queue_depth", S->disk_queue);
    tm_an_ev_num(e, "disk_ceiling_share", S->disk_ceiling_share);
    tm_an_ev_num(e, "psi_io_some", S->psi_io_some);
    tm_an_ev_num(e, "psi_cpu_some", S->psi_cpu_some);
    tm_an_ev_num(e, "worker_d_state_share", S->worker_d_share);
    tm_an_ev_num(e, "worker_read_bytes_per_second", S->worker_read_bps);
    tm_an_ev_num(e, "worker_cpu_utilization", S->worker_cpu_sys);
    tm_an_ev_num(e, "worker_cpu_per_fetch_second", S->worker_busy);
    tm_an_ev_num(e, "worker_batch_time_median_s", S->worker_batch_median_s);
    tm_an_ev_num(e, "workers", (double)S->workers);
    tm_an_ev_key(e, "votes");
    tm_buf_printf(&e->b, "{\"disk\":%d,\"cpu\":%d}", w->disk, w->cpu);
}

/* The garbage collector's pauses and the periodic stalls taken out of the
 * loop's own batch preparation (runsum_gc.c net_of_pauses, runsum_stalls.c):
 * said where the share is read. */
static void gc_note(char *buf, size_t cap, const tm_an_summary *S)
{
    if (S->gc_wait_fraction >= 0.005)
        tm_an_adv(buf, cap,
                  " (and Python's garbage collector %.0f%% more, pausing in the batch "
                  "preparation)",
                  100 * S->gc_wait_fraction);
    if (S->stall_wait_fraction >= 0.005)
        tm_an_adv(buf, cap,
                  " (and the loop's own work every %.0f steps %.0f%% more, before the next "
                  "forward: steps.stalls)",
                  S->stall_every, 100 * S->stall_wait_fraction);
}

void tm_rule_input_ok(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (input_verdict(an).kind != IN_OK)
        return;
    struct ev e;
    char buf[1024];
    tm_an_ev_open(&e);
    tm_an_ev_input_head(&e, S);
    snprintf(buf, sizeof buf, "input keeps up: the loop waited for data %.1f%% of the time",
             100 * S->data_wait_fraction);
    gc_note(buf, sizeof buf, S);
    tm_an_add(an, TM_SEV_INFO, TM_CONF_HIGH, -1, &e, buf, "Nothing to do for the input pipeline.");
}

/* The storage ceiling (docs/DIAGNOSIS.md "The storage ceiling"): what
 * the job read from the disk against what `run --probe` got from it for
 * random reads of the dataset's file size.  Evidence and words only: the
 * votes do not use it. */
enum ceiling { CEIL_UNKNOWN, CEIL_PATTERN, CEIL_BETWEEN, CEIL_DEVICE };

static enum ceiling disk_ceiling(const tm_an_summary *S, double *share)
{
    *share = NAN;
    if (!S->probe_disk[0] || !(S->probe_rand_bps > 0) || !isfinite(S->disk_read_bps))
        return CEIL_UNKNOWN;
    *share = S->disk_read_bps / S->probe_rand_bps;
    return *share < TM_AN_PROBE_PATTERN_SHARE   ? CEIL_PATTERN
           : *share >= TM_AN_PROBE_DEVICE_SHARE ? CEIL_DEVICE
                                                : CEIL_BETWEEN;
}

static void ev_ceiling(struct ev *e, const tm_an_summary *S, enum ceiling c, double share)
{
    static const char *const names[] = {"unknown", "pattern", "between", "device"};
    tm_an_ev_str(e, "storage_ceiling", names[c]);
    if (c == CEIL_UNKNOWN) {
        if (S->probes && S->probe_other[0])
            tm_an_ev_str(e, "probe_disk", S->probe_other); /* another disk's */
        return;
    }
    tm_an_ev_str(e, "probe_disk", S->probe_disk);
    tm_an_ev_num(e, "ceiling_share", share);
    tm_an_ev_num(e, "probe_random_read_bytes_per_second", S->probe_rand_bps);
    tm_an_ev_num(e, "probe_random_request_bytes", S->probe_rand_block);
    tm_an_ev_num(e, "probe_random_queue_depth", S->probe_rand_qd);
    tm_an_ev_num(e, "probe_sequential_read_bytes_per_second", S->probe_seq_bps);
    tm_an_ev_num(e, "probe_sequential_request_bytes", S->probe_seq_block);
}

void tm_rule_input_disk_bound(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    struct votes w = input_verdict(an);
    if (w.kind != IN_DISK)
        return;
    enum tm_severity sev = tm_an_wait_severity(S->data_wait_fraction);
    bool v_dstate = w.v_dstate;
    int disk = w.disk;
    double ratio = w.ratio;
    struct ev e;
    char buf[1024], adv[2048];
    ev_input_votes(&e, S, &w);
    double need = S->disk_read_bps * ratio;
    tm_an_ev_num(&e, "needed_read_bytes_per_second", need);
    tm_an_dataset_evidence(&e, S); /* rules_cache.c: the page cache's share */
    double share;
    enum ceiling ceil = disk_ceiling(S, &share);
    ev_ceiling(&e, S, ceil, share);
    char dl[256] = "", got[32], nd[32], cl[384] = "", blk[32] = "";
    snprintf(got, sizeof got, "%.1f MB/s", S->disk_read_bps / 1e6);
    snprintf(nd, sizeof nd, "%.1f MB/s", need / 1e6);
    if (S->disk[0])
        snprintf(dl, sizeof dl, "; /dev/%s read %s at %.1f ms await", S->disk, got,
                 S->disk_await_s * 1e3);
    if (ceil != CEIL_UNKNOWN) {
        tm_an_bytes(blk, sizeof blk, S->probe_rand_block);
        snprintf(cl, sizeof cl,
                 "; read at %.0f%% of what /dev/%s delivered for %s random reads: %s", 100 * share,
                 S->probe_disk, blk,
                 ceil == CEIL_PATTERN  ? "the pattern is the limit"
                 : ceil == CEIL_DEVICE ? "the device is the limit"
                                       : "the pattern and the device share the limit");
    }
    snprintf(buf, sizeof buf,
             "input-bound, storage-bound: the loop waited for data %.0f%% of the time%s%s%s",
             100 * S->data_wait_fraction, dl,
             v_dstate ? "; the workers were mostly in D state (waiting on I/O)" : "", cl);
    /* The remedy the ceiling points at comes first (the report's headline
     * shows the advice's first sentence), then what the loop needs. */
    char rem[1024], rg[32], sq[32];
    snprintf(rg, sizeof rg, "%.1f MB/s", S->probe_rand_bps / 1e6);
    snprintf(sq, sizeof sq, "%.1f MB/s", S->probe_seq_bps / 1e6);
    double seq_gain = S->probe_seq_bps / S->probe_rand_bps;
    bool shards = ceil != CEIL_UNKNOWN && seq_gain >= TM_AN_PROBE_SEQ_GAIN;
    if (ceil == CEIL_DEVICE && shards)
        snprintf(rem, sizeof rem,
                 "Pack the files into large shards read in order (WebDataset/tar, TFRecord, "
                 "LMDB): the probe got %s sequentially from /dev/%s, %.1fx the %s it got for %s "
                 "random reads, which the job reads at. More workers will not help; faster "
                 "storage (local NVMe) or the page cache would too.",
                 sq, S->probe_disk, seq_gain, rg, blk);
    else if (ceil == CEIL_DEVICE)
        snprintf(rem, sizeof rem,
                 "More workers will not help: the probe got at most %s from /dev/%s for %s "
                 "random reads with %.0f in flight, and the job reads at that; put the data on "
                 "faster storage (local NVMe) or keep it in the page cache.",
                 rg, S->probe_disk, blk, S->probe_rand_qd);
    else if (ceil == CEIL_PATTERN || ceil == CEIL_BETWEEN) {
        snprintf(rem, sizeof rem,
                 "Keep more reads in flight: the probe got %s from /dev/%s for %s random reads "
                 "with %.0f in flight, %.1fx what the job read; more DataLoader workers (each has "
                 "one read at a time), threads inside __getitem__ or a prefetching reader get "
                 "closer to it.",
                 rg, S->probe_disk, blk, S->probe_rand_qd, 1 / share);
        if (shards) {
            size_t len = strlen(rem);
            snprintf(rem + len, sizeof rem - len,
                     " The same device read %s sequentially (%.1fx): packing the files into "
                     "large shards read in order (WebDataset/tar, TFRecord, LMDB) gains up to "
                     "that.",
                     sq, seq_gain);
        }
    } else
        snprintf(rem, sizeof rem,
                 "More workers will not help: put the data on faster storage (local NVMe), keep "
                 "it in the page cache, read larger sequential shards (WebDataset, TFRecord) or "
                 "cache decoded samples.");
    const char *unknown = ceil == CEIL_UNKNOWN
                              ? " What the storage can deliver is unknown: `trainmon run --probe "
                                "-d DATA` (or `trainmon probe DATA`) measures it, to tell a slow "
                                "device from a slow access pattern."
                              : "";
    if (isfinite(need) && S->disk[0])
        snprintf(adv, sizeof adv,
                 "%s To keep %s busy the loop needs about %s from /dev/%s; it delivered %s "
                 "(%.0f%% of the need).%s",
                 rem, S->gpu ? "the GPU" : "compute", nd, S->disk, got,
                 need > 0 ? 100 * S->disk_read_bps / need : 0, unknown);
    else if (ceil != CEIL_UNKNOWN)
        snprintf(adv, sizeof adv, "%s The workers wait on I/O, not on CPU.", rem);
    else
        snprintf(adv, sizeof adv,
                 "The workers wait on I/O, not on CPU. Put the data on faster storage, keep "
                 "it in the page cache or read larger sequential shards%s.",
                 in_record_d(S, "; record with `trainmon run -d DATA` to measure the disk "
                                "behind it"));
    tm_an_input_cost(&e, S, buf, sizeof buf);
    tm_an_dataset_advice(adv, sizeof adv, S);
    tm_an_add(an, sev,
              disk >= 3   ? TM_CONF_HIGH
              : disk == 2 ? TM_CONF_MEDIUM
                          : TM_CONF_LOW,
              -1, &e, buf, adv);
}

void tm_rule_input_cpu_bound(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    struct votes w = input_verdict(an);
    if (w.kind != IN_CPU)
        return;
    enum tm_severity sev = tm_an_wait_severity(S->data_wait_fraction);
    bool c_busy = w.c_busy, c_sys = w.c_sys, c_starved = w.c_starved;
    int cpu = w.cpu;
    double busy = w.busy;
    struct ev e;
    char buf[1024], adv[2048];
    ev_input_votes(&e, S, &w);
    double per = w.lead.per, comp = S->compute_median_s;
    double need = w.need, nw = w.nw;
    tm_an_ev_num(&e, "workers_per_rank", nw);
    tm_an_ev_num(&e, "workers_needed", need);
    tm_an_ev_num(&e, "loader_batch_time_median_s", per);
    tm_an_ev_num(&e, "batches_per_step", w.lead.bps);
    /* The count advised fits the cores the job may use (machine.c). */
    char why[128] = "";
    double bps = w.lead.bps;
    if (isfinite(per) && isfinite(comp) && bps >= 1.05)
        snprintf(why, sizeof why, "%.3f s per batch x %.1f batches / %.3f s of compute per step",
                 per, bps, comp);
    else if (isfinite(per) && isfinite(comp))
        snprintf(why, sizeof why, "%.3f s per batch / %.3f s of compute per step", per, comp);
    size_t host_ranks = S->host_ranks ? S->host_ranks : an->a->nranks ? an->a->nranks : 1;
    double advised = tm_machine_workers_advice(adv, sizeof adv, need, nw, S->usable_cpus,
                                               host_ranks, S->gpu, why, NULL);
    tm_an_ev_num(&e, "workers_advised", advised);
    tm_an_ev_num(&e, "usable_cpus", S->usable_cpus);
    snprintf(buf, sizeof buf,
             "input-bound, CPU-bound workers: the loop waited for data %.0f%% of the time; "
             "a worker takes %.3f s per batch, a step computes in %.3f s",
             100 * S->data_wait_fraction, per, comp);
    if (c_starved && !c_busy && !c_sys) {
        tm_an_adv(adv, sizeof adv,
                  " The workers were on a core only %.0f%% of their fetch time while tasks "
                  "waited for a CPU %.0f%% of the time: other processes take the cores, so "
                  "free cores first (or pin the job to its own).",
                  100 * busy, 100 * S->psi_cpu_some);
    }
    tm_an_input_cost(&e, S, buf, sizeof buf);
    tm_an_add(an, sev, cpu >= 2 ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1, &e, buf, adv);
}

void tm_rule_input_data_wait(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    struct votes w = input_verdict(an);
    if (w.kind != IN_WAIT)
        return;
    enum tm_severity sev = tm_an_wait_severity(S->data_wait_fraction);
    struct ev e;
    char buf[1024], adv[2048];
    ev_input_votes(&e, S, &w);
    snprintf(buf, sizeof buf, "input-bound: the loop waited for data %.0f%% of the time",
             100 * S->data_wait_fraction);
    if (S->workers == 0 && 2 * S->fed_steps > S->steps_total) {
        /* a background thread fetches the batches (the step model) */
        tm_an_ev_num(&e, "thread_fed_steps", (double)S->fed_steps);
        snprintf(buf, sizeof buf,
                 "input-bound: the loop waited %.0f%% of the time for batches that a "
                 "background thread fetches",
                 100 * S->data_wait_fraction);
        snprintf(adv, sizeof adv,
                 "The batches come from another thread of the training process (a prefetcher "
                 "such as prefetch_generator's BackgroundGenerator, iterating a DataLoader "
                 "without workers), and it does not keep up. A thread shares the interpreter "
                 "lock with the loop: its __getitem__ and collate run only while the loop "
                 "leaves the lock. Give the DataLoader behind it worker processes "
                 "(num_workers>0%s), which prefetch by themselves%s.",
                 S->gpu ? ", pin_memory=True" : "",
                 in_record_d(S, "; record with `trainmon run -d DATA` to tell a slow disk "
                                "from slow CPU work"));
    } else if (w.keeps_up) {
        /* CPU-busy workers that are enough in the medians (verdict_of) */
        tm_an_ev_num(&e, "workers_per_rank", w.nw);
        tm_an_ev_num(&e, "workers_needed", w.need);
        tm_an_ev_num(&e, "loader_batch_time_median_s", w.lead.per);
        tm_an_ev_num(&e, "batches_per_step", w.lead.bps);
        tm_an_ev_num(&e, "worker_fetch_share", S->worker_util);
        double bps = w.lead.bps, per = w.lead.per;
        snprintf(adv, sizeof adv,
                 "%s %.0f worker%s per rank %s %.1f ms per batch, busy on a CPU; "
                 "with the median batch %s would deliver a step's %.3g batch%s every "
                 "%.1f ms, within the %.1f ms a step computes, so more workers will "
                 "not help. The loop waits in bursts instead: on a few slow batches "
                 "(uneven samples: prefetch_factor above 2 lets the workers run "
                 "further ahead)%s. The chart of data wait per step in `trainmon "
                 "report --html FILE` shows when.",
                 w.nw == 1 ? "Its" : "The", w.nw, w.nw == 1 ? "" : "s",
                 w.nw == 1 ? "takes" : "take", 1e3 * per, w.nw == 1 ? "it" : "they", bps,
                 bps == 1 ? "" : "es", 1e3 * per * bps / w.nw, 1e3 * S->compute_median_s,
                 S->worker_restarts ? ", or at each epoch's start, where a new set of "
                                      "workers starts (persistent_workers=True keeps "
                                      "them)"
                                    : "");
    } else if (S->workers == 0)
        snprintf(adv, sizeof adv,
                 "The data loading keeps %s waiting. Try DataLoader(num_workers>0%s)%s.",
                 in_waiter(S), S->gpu ? ", pin_memory=True" : "",
                 in_record_d(S, "; record with `trainmon run -d DATA` to tell a slow disk from "
                                "slow CPU work"));
    else if (S->worker_busy < TM_AN_WORKER_IDLE && S->worker_d_share < TM_AN_WORKER_D_SHARE)
        snprintf(adv, sizeof adv,
                 "The workers were on a CPU %.0f%% of their fetch time and seldom waited on the "
                 "disk (D state in %.0f%% of samples): they wait on something else, such as a "
                 "remote store, a sleep or a lock, or on CPU taken by other processes. Profile "
                 "one __getitem__ (py-spy dump on a worker pid).",
                 100 * S->worker_busy, 100 * S->worker_d_share);
    else
        snprintf(adv, sizeof adv,
                 "The data loading keeps %s waiting, and the recording cannot tell disk "
                 "from CPU.%s",
                 in_waiter(S),
                 S->data_paths ? " The disk behind the data showed no limit: profile one "
                                 "__getitem__ (py-spy dump on a worker pid)."
                               : " Record with `trainmon run -d DATA` (disk and worker states) "
                                 "for a verdict.");
    tm_an_input_cost(&e, S, buf, sizeof buf);
    tm_an_add(an, sev, TM_CONF_LOW, -1, &e, buf, adv);
}

/* Where in the step the loop's own preparation ran (S->prep_fwd_share,
 * prep_opt_share: the step model's spans), as the finding says it: the
 * place holding TM_AN_PREP_WHERE of it, else each place's share. */
static void prep_where(const tm_an_summary *S, char *buf, size_t cap)
{
    double fwd = isfinite(S->prep_fwd_share) ? S->prep_fwd_share : 0;
    double opt = isfinite(S->prep_opt_share) ? S->prep_opt_share : 0;
    double before = fmax(0, 1 - fwd - opt);
    if (fwd >= TM_AN_PREP_WHERE)
        snprintf(buf, cap,
                 "between the model's forward and its backward pass (%.0f%% of it), where "
                 "nanoGPT's train.py calls get_batch",
                 100 * fwd);
    else if (opt >= TM_AN_PREP_WHERE)
        snprintf(buf, cap,
                 "between the last backward pass and the optimizer step (%.0f%% of it), where "
                 "nanochat fetches its next batch",
                 100 * opt);
    else if (before >= TM_AN_PREP_WHERE)
        snprintf(buf, cap, "between one step's optimizer or backward pass and the next forward");
    else
        snprintf(buf, cap,
                 "%.0f%% of it before the forward, %.0f%% between the forward and the backward "
                 "pass, %.0f%% between the last backward pass and the optimizer step",
                 100 * before, 100 * fwd, 100 * opt);
}

/* input.main_prep: the loop prepares its batches itself (no DataLoader) and
 * the training thread spends the data wait doing it; the thread's CPU time
 * in that span tells CPU work (tokenizing, augmenting) from waiting (a
 * memmap or file on slow storage). */
void tm_rule_input_main_prep(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    struct votes w = input_verdict(an);
    if (w.kind != IN_PREP)
        return;
    double cpu = S->prep_cpu_share;
    /* CPU work starved of a core: on a CPU part of the time and waiting
     * for one (CPU pressure) the rest, as for the workers' votes: CPU
     * taken by other load still makes the preparation CPU-bound. */
    bool starved = cpu >= TM_AN_WORKER_CPU_MIN && cpu < TM_AN_PREP_CPU_BOUND &&
                   cpu + S->psi_cpu_some >= TM_AN_PREP_CPU_BOUND;
    /* Waiting while the job's other processes kept half a core or more
     * busy: the batches are theirs (runsum_others.c). */
    bool others = isfinite(cpu) && cpu < TM_AN_PREP_CPU_BOUND && !starved &&
                  S->others_cpu >= TM_AN_PREP_OTHERS_CPU && S->others_n > 0;
    const char *cause = others                                   ? "other_processes"
                        : isnan(cpu)                             ? "unknown"
                        : cpu >= TM_AN_PREP_CPU_BOUND || starved ? "cpu"
                        : cpu <= TM_AN_PREP_WAITING              ? "waiting"
                                                                 : "mixed";
    struct ev e;
    char buf[1024], adv[2048];
    tm_an_ev_open(&e);
    tm_an_ev_input_head(&e, S);
    tm_an_ev_num(&e, "prep_steps", (double)S->prep_steps);
    tm_an_ev_num(&e, "prep_cpu_share", cpu);
    tm_an_ev_num(&e, "prep_after_forward_share", S->prep_fwd_share);
    tm_an_ev_num(&e, "prep_before_step_share", S->prep_opt_share);
    tm_an_ev_num(&e, "psi_cpu_some", S->psi_cpu_some);
    tm_an_ev_str(&e, "cause", cause);
    if (others) {
        tm_an_ev_num(&e, "other_processes", (double)S->others_n);
        tm_an_ev_num(&e, "other_processes_cpu", S->others_cpu);
        tm_an_ev_num(&e, "other_process_top_pid", (double)S->others_top_pid);
    }
    char where[256];
    prep_where(S, where, sizeof where);
    if (others)
        snprintf(buf, sizeof buf,
                 "input-bound: the loop waited %.0f%% of the step time for its batches (no "
                 "DataLoader) while the job's other processes kept %.2f cores busy",
                 100 * S->data_wait_fraction, S->others_cpu);
    else
        snprintf(buf, sizeof buf,
                 "input-bound: the loop's own batch preparation (no DataLoader) took %.0f%% of "
                 "the step time",
                 100 * S->data_wait_fraction);
    gc_note(buf, sizeof buf, S);
    if (!strcmp(cause, "cpu"))
        snprintf(adv, sizeof adv,
                 "The batches are made on the training thread, %s, and that work is CPU-bound "
                 "(the thread was on a CPU %.0f%% of it: tokenizing, augmenting, slicing, "
                 "copying). Take it off the training thread: a DataLoader over an "
                 "IterableDataset that yields the same batches, with num_workers>0, overlaps it "
                 "with compute; or prepare the data once ahead (pre-tokenize, store tensors).",
                 where, 100 * cpu);
    if (!strcmp(cause, "cpu")) {
        if (starved)
            tm_an_adv(adv, sizeof adv,
                      " Tasks waited for a CPU %.0f%% of the time: the thread was runnable, not "
                      "waiting on I/O, and other processes took the cores; free cores first.",
                      100 * S->psi_cpu_some);
    } else if (others) {
        char top[160], at[16] = "";
        if (S->others_n > 1)
            snprintf(at, sizeof at, " at %.2f", S->others_top_cpu);
        snprintf(top, sizeof top, "%s pid %u%s%s%s%s%s%s", S->others_n > 1 ? ", the busiest" : ":",
                 S->others_top_pid, S->others_top_comm[0] ? " (" : "", S->others_top_comm,
                 S->others_top_comm[0] ? ")" : "", S->others_host[0] ? " on " : "", S->others_host,
                 at);
        char cores[64] = "";
        if (S->usable_cpus > 0)
            snprintf(cores, sizeof cores, " (%.0f usable CPUs, the loop's thread one of them)",
                     S->usable_cpus);
        snprintf(adv, sizeof adv,
                 "The training thread %s waits for its batches (on a CPU %.0f%% of that time), "
                 "%s, while the job's other %s (neither training processes nor DataLoader "
                 "workers) kept %.2f cores busy%s. If they make the batches (processes feeding "
                 "a multiprocessing queue, a data server the job started), they do not keep up: "
                 "start more of them while cores are free%s, make each batch cheaper, or make "
                 "the batches in a DataLoader with num_workers>0, whose workers trainmon times "
                 "batch by batch. If they do not, the loop waits on storage or a lock "
                 "(`trainmon run -d DATA` shows the disk).",
                 cpu <= TM_AN_PREP_WAITING ? "mostly" : "partly", 100 * cpu, where,
                 S->others_n > 1 ? "processes" : "process", S->others_cpu, top, cores);
    } else if (!strcmp(cause, "waiting"))
        snprintf(adv, sizeof adv,
                 "The batches are made on the training thread, %s, and that mostly waits (on a "
                 "CPU only %.0f%% of it): page faults of a memmap or reads of a file on slow "
                 "storage, or a lock. Put the data on fast local storage or in the page cache, "
                 "or prefetch batches in a background thread or DataLoader workers%s.",
                 where, 100 * cpu, in_record_d(S, "; `trainmon run -d DATA` shows the disk"));
    else
        snprintf(adv, sizeof adv,
                 "The batches are made on the training thread, %s%s. Prefetch them in a "
                 "background thread, or in a DataLoader over an IterableDataset with "
                 "num_workers>0, so that they overlap with compute.",
                 where, isnan(cpu) ? "" : ", partly on a CPU and partly waiting");
    if (isfinite(S->prep_fwd_share) && S->prep_fwd_share >= TM_AN_PREP_WHERE)
        tm_an_adv(adv, sizeof adv,
                  " On a GPU that work runs while the forward's kernels do, and the GPU waits "
                  "for it once it takes longer than they do.");
    tm_an_input_cost(&e, S, buf, sizeof buf);
    tm_an_add(an, tm_an_wait_severity(S->data_wait_fraction),
              isnan(cpu) ? TM_CONF_MEDIUM : TM_CONF_HIGH, -1, &e, buf, adv);
}
