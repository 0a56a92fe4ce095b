/*
 * rules_handoff.c - input.handoff: the loop waits for batches that its
 * DataLoader workers have ready (docs/DIAGNOSIS.md, "input.handoff").
 *
 * A multi-process DataLoader moves each batch from a worker to the main
 * process: the worker collates it into shared memory and queues it, the
 * main process receives it (unpickling, rebuilding the shared tensors) and,
 * with pin_memory, a thread copies it into pinned memory.  With cheap
 * samples (in memory, pre-decoded) that handoff, not the fetch, is what the
 * loop waits for, and it is paid per batch; a new set of workers every
 * epoch (persistent_workers=False) adds their start-up.  The signals:
 *
 *   - the workers' fetching share of their lifetime (worker records):
 *     under TM_AN_HANDOFF_WORKER_UTIL the batches were ready ahead, where
 *     the workers of the loader that serves the steps could make them as
 *     fast as the loop uses them (TM_AN_HANDOFF_BEHIND: else their idle
 *     time is the epochs' ends and the evals, and they are the limit);
 *   - the main process's wait per batch and the training thread's CPU
 *     share of it (step records: wait_cpu_ns), the receiving;
 *   - the workers' own CPU per batch fetched (worker records, layout 2):
 *     what fetching in the main process (num_workers=0) would cost;
 *   - worker restarts and the share of the wait in as many longest waits.
 *
 * The input verdict of rules_input.c asks tm_an_input_is_handoff() first,
 * so that idle workers are never called CPU- or disk-bound.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"

/* The fetch time per batch of the loader that serves the steps, shared
 * among its workers, over the loop's compute per batch of it: over 1, the
 * workers make batches slower than the loop uses them (NAN: unknown). */
static double fetch_per_compute(const tm_an_summary *S)
{
    double per = S->lead_batch_median_s, n = S->lead_workers_per_rank;
    double bps = S->lead_batches_per_step, comp = S->compute_median_s;
    if (!(per > 0) || !(n >= 1) || !(bps > 0) || !(comp > 0))
        return NAN;
    return per * bps / (n * comp);
}

bool tm_an_input_is_handoff(const tm_an_summary *S)
{
    return S->workers > 0 && S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION &&
           S->worker_util < TM_AN_HANDOFF_WORKER_UTIL &&
           !(fetch_per_compute(S) > TM_AN_HANDOFF_BEHIND) && !tm_an_input_is_startup(S) &&
           !tm_an_input_is_newiter(S);
}

void tm_rule_input_handoff(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!tm_an_input_is_handoff(S))
        return;
    size_t nranks = an->a->nranks ? an->a->nranks : 1;
    size_t nw = (S->workers + nranks - 1) / nranks;
    double wpb = S->wait_per_batch_s, cpu = S->worker_cpu_per_batch_s;
    bool restarts =
        S->worker_set_restarts > 0 && S->restart_wait_share >= TM_AN_HANDOFF_RESTART_SHARE;
    size_t sets = (S->worker_set_restarts + nranks - 1) / nranks;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_input_head(&e, S);
    tm_an_ev_num(&e, "workers_per_rank", (double)nw);
    tm_an_ev_num(&e, "worker_fetch_share", S->worker_util);
    tm_an_ev_num(&e, "worker_fetch_share_threshold", TM_AN_HANDOFF_WORKER_UTIL);
    tm_an_ev_num(&e, "worker_fetch_per_compute", fetch_per_compute(S));
    tm_an_ev_num(&e, "worker_batch_time_median_s", S->worker_batch_median_s);
    tm_an_ev_num(&e, "worker_cpu_per_batch_s", cpu);
    tm_an_ev_num(&e, "wait_per_batch_median_s", wpb);
    tm_an_ev_num(&e, "receive_cpu_share", S->recv_cpu_share);
    tm_an_ev_num(&e, "worker_restarts", (double)S->worker_restarts);
    tm_an_ev_num(&e, "restart_wait_share", S->restart_wait_share);
    char title[512], adv[2048];
    snprintf(title, sizeof title,
             "input-bound, handoff: the loop waited for data %.0f%% of the time while its %zu "
             "worker%s per rank fetched only %.0f%% of theirs: the batches were ready, the wait "
             "is handing them over",
             100 * S->data_wait_fraction, nw, nw == 1 ? "" : "s", 100 * S->worker_util);
    adv[0] = '\0';
    tm_an_adv(adv, sizeof adv, "More workers will not help: they are idle.");
    if (restarts)
        tm_an_adv(
            adv, sizeof adv,
            " A new set of workers was started %zu more time%s%s (each epoch), and the %zu "
            "steps that waited for one hold %.0f%% of all the wait: set persistent_workers=True "
            "to keep them.",
            sets, sets == 1 ? "" : "s", nranks > 1 ? " per rank" : "", S->worker_set_restarts,
            100 * S->restart_wait_share);
    if (isfinite(wpb)) {
        tm_an_adv(adv, sizeof adv, " Each batch took %.1f ms to arrive (median)", 1e3 * wpb);
        if (isfinite(S->recv_cpu_share))
            tm_an_adv(adv, sizeof adv,
                      ", %.0f%% of it on the training thread's CPU receiving it (unpickling, "
                      "rebuilding shared tensors)",
                      100 * S->recv_cpu_share);
        tm_an_adv(adv, sizeof adv, ".");
    }
    if (isfinite(cpu) && isfinite(wpb) && cpu < wpb)
        tm_an_adv(adv, sizeof adv,
                  " A worker spends only %.1f ms of CPU fetching a batch, less than its handoff: "
                  "with data this cheap (in memory), num_workers=0 fetches in the main process for "
                  "less, or make batches larger so that the handoff is paid less often.",
                  1e3 * cpu);
    else
        tm_an_adv(adv, sizeof adv,
                  " The handoff is paid per batch and per tensor: return one stacked tensor per "
                  "field rather than many small ones, and larger batches.");
    if (S->ngpus > 0)
        tm_an_adv(
            adv, sizeof adv,
            " With a GPU, pin_memory=True and .to(device, non_blocking=True) overlap the copy "
            "with compute.");
    enum tm_severity sev = tm_an_wait_severity(S->data_wait_fraction);
    tm_an_input_cost(&e, S, title, sizeof title);
    tm_an_add(an, sev,
              S->worker_util < TM_AN_HANDOFF_WORKER_UTIL / 2 ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1,
              &e, title, adv);
}
