/*
 * rules_startup.c - input.worker_startup: the loop waits for DataLoader
 * workers to start, not for their batches (docs/DIAGNOSIS.md,
 * "input.worker_startup").
 *
 * A DataLoader without persistent_workers=True starts a new set of worker
 * processes at every iter() (each epoch, each eval pass) and stops it at
 * the end.  The loop's first fetch from the new iterator waits for the
 * whole start: the processes, the Dataset pickled to each under the spawn
 * and forkserver start methods (macOS's default, and Linux's from Python
 * 3.14) with torch and the main module imported again, worker_init_fn, and
 * the first batch.  That is one long wait per set, however fast the
 * workers are afterwards.  The signals (runsum.c, waits_of):
 *
 *   - the new sets: worker processes started beyond the first set over the
 *     workers per rank (2 workers restarted each epoch: 2 processes, one
 *     set, one long wait);
 *   - the share of all the data wait in as many longest waits, and the
 *     wait fraction of the judged steps without them (the steady state).
 *
 * Judged before the handoff and the votes: a loop whose wait is its
 * workers' start-up is neither CPU- nor disk-bound in steady state, and
 * more workers make the start slower, not faster.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"
#include "units.h"

bool tm_an_input_is_startup(const tm_an_summary *S)
{
    if (S->workers == 0 || !(S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION) ||
        S->worker_set_restarts == 0 ||
        S->waits_judged < TM_AN_STARTUP_STEPS_PER_SET * S->worker_set_restarts)
        return false;
    return S->restart_wait_share >= TM_AN_STARTUP_SHARE ||
           S->steady_wait_fraction < TM_AN_DATA_WAIT_FRACTION;
}

void tm_rule_input_worker_startup(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!tm_an_input_is_startup(S))
        return;
    size_t nranks = S->step_procs ? S->step_procs : 1;
    size_t nw = (S->workers + nranks - 1) / nranks;
    size_t sets = (S->worker_set_restarts + nranks - 1) / nranks; /* per rank */
    double per_set = S->startup_wait_s / (double)S->worker_set_restarts;
    double steady = S->steady_wait_fraction;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    tm_an_ev_num(&e, "threshold", TM_AN_DATA_WAIT_FRACTION);
    tm_an_ev_num(&e, "steps", (double)S->steps_total);
    tm_an_ev_num(&e, "step_time_median_s", S->step_median_s);
    tm_an_ev_num(&e, "workers_per_rank", (double)nw);
    tm_an_ev_num(&e, "worker_restarts", (double)S->worker_restarts);
    tm_an_ev_num(&e, "worker_set_restarts", (double)S->worker_set_restarts);
    tm_an_ev_num(&e, "startup_wait_s", S->startup_wait_s);
    tm_an_ev_num(&e, "startup_wait_per_set_s", per_set);
    tm_an_ev_num(&e, "startup_wait_share", S->restart_wait_share);
    tm_an_ev_num(&e, "startup_share_threshold", TM_AN_STARTUP_SHARE);
    tm_an_ev_num(&e, "steady_wait_fraction", steady);
    tm_an_ev_num(&e, "worker_fetch_share", S->worker_util);
    tm_an_ev_num(&e, "worker_batch_time_median_s", S->worker_batch_median_s);
    char title[512], adv[2048], each[32];
    tm_unit_fmt(each, sizeof each, TM_UNIT_SECONDS, per_set);
    snprintf(title, sizeof title,
             "input-bound, worker start-up: the loop waited for data %.0f%% of the time, %.0f%% "
             "of that in %zu wait%s for a new set of DataLoader workers to start (%s each)",
             100 * S->data_wait_fraction, 100 * S->restart_wait_share, S->worker_set_restarts,
             S->worker_set_restarts == 1 ? "" : "s", each);
    size_t n = 0;
#define ADV(...)                                                                                   \
    do {                                                                                           \
        int k_ = snprintf(adv + n, sizeof adv - n, __VA_ARGS__);                                   \
        if (k_ > 0)                                                                                \
            n = n + (size_t)k_ < sizeof adv ? n + (size_t)k_ : sizeof adv - 1;                     \
    } while (0)
    ADV("Set persistent_workers=True on the DataLoader: its %zu worker%s then start once, not "
        "at every iter(); here a new set started %zu time%s after the first%s (each epoch or "
        "eval pass). More workers would not help: a larger set starts slower.",
        nw, nw == 1 ? "" : "s", sets, sets == 1 ? "" : "s", nranks > 1 ? " on each rank" : "");
    if (per_set >= TM_AN_STARTUP_SLOW_S)
        ADV(" A set took %s to deliver its first batch, what the spawn and forkserver start "
            "methods cost (the default on macOS, and on Linux from Python 3.14): each worker "
            "imports torch and the main module again and receives the Dataset pickled; keep the "
            "script's top level light (the work under if __name__ == \"__main__\":), open files "
            "in the worker rather than in Dataset.__init__, or on Linux pass "
            "multiprocessing_context=\"fork\".",
            each);
    if (isfinite(steady) && steady >= TM_AN_DATA_WAIT_FRACTION)
        ADV(" Without the start-ups the loop still waited %.0f%% of the time: record again "
            "with persistent workers for the verdict on the rest.",
            100 * steady);
    else if (isfinite(steady))
        ADV(" Without the start-ups the loop waited %.1f%% of the time, under the %.0f%% worth "
            "fixing: the start-ups are the whole input problem.",
            100 * steady, 100 * TM_AN_DATA_WAIT_FRACTION);
#undef ADV
    enum tm_severity sev = tm_an_wait_severity(S->data_wait_fraction);
    tm_an_input_cost(&e, S, title, sizeof title);
    tm_an_add(an, sev,
              S->restart_wait_share >= TM_AN_STARTUP_SHARE &&
                      (isnan(steady) || steady < TM_AN_DATA_WAIT_FRACTION)
                  ? TM_CONF_HIGH
                  : TM_CONF_MEDIUM,
              -1, &e, title, adv);
}
