/*
 * rules_startup.c - input.worker_startup: the loop waits for DataLoader
 * workers to start, not for their batches (docs/DIAGNOSIS.md,
 * "input.worker_startup").
 *
 * A DataLoader without persistent_workers=True starts a new set of worker
 * processes at every iter() (each epoch, each eval pass) and stops it at
 * the end.  The loop's first fetch from the new iterator waits for the
 * whole start (the agent counts the iter() call that forks or spawns them
 * in that fetch's wait): the processes, the Dataset pickled to each under the spawn
 * and forkserver start methods (macOS's default, and Linux's from Python
 * 3.14) with torch and the main module imported again, worker_init_fn, and
 * the first batch.  That is one long wait per set, however fast the
 * workers are afterwards.  The signals (runsum.c, mark_startups and
 * waits_of):
 *
 *   - the steps that waited for a new set: a worker process's first fetch
 *     began inside the training step of its rank (a new process fetches
 *     at once, while the loop waits for that batch); the set's workers
 *     and loaders restarted together mark one step, an eval pass's
 *     workers none (they fetch between training steps), the first set's
 *     step is warm-up;
 *   - their share of all the data wait, and the wait fraction of the
 *     judged steps without them (the steady state);
 *   - each such wait against the median wait of a step: start-ups are
 *     outliers.
 *
 * Judged before the handoff and the votes, and the one input verdict then:
 * the advice names what the steady state points at (the votes run again on
 * it), so that a second problem is not lost behind the first.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"
#include "units.h"

/* A new set of workers in at least TM_AN_STARTUP_EVERY of the judged
 * steps, holding most of the wait: a new iterator for (almost) every
 * batch. */
static bool startup_every_step(const tm_an_summary *S)
{
    return S->workers > 0 && S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION &&
           S->worker_set_restarts > 0 && S->waits_judged >= TM_AN_STARTUP_STEPS_PER_SET &&
           (double)S->worker_set_restarts >= TM_AN_STARTUP_EVERY * (double)S->waits_judged &&
           S->restart_wait_share >= TM_AN_STARTUP_SHARE;
}

bool tm_an_input_is_startup(const tm_an_summary *S)
{
    if (tm_an_input_is_newiter(S)) /* a new iterator each batch: its own verdict */
        return false;
    if (startup_every_step(S))
        return true;
    if (S->workers == 0 || !(S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION) ||
        S->worker_set_restarts == 0 ||
        S->waits_judged < TM_AN_STARTUP_STEPS_PER_SET * S->worker_set_restarts ||
        !(S->startup_wait_s > 0) ||
        S->startup_wait_s / (double)S->worker_set_restarts <
            TM_AN_STARTUP_OUTLIER * S->wait_median_s)
        return false;
    return S->restart_wait_share >= TM_AN_STARTUP_SHARE ||
           S->steady_wait_fraction < TM_AN_DATA_WAIT_FRACTION;
}

void tm_rule_input_worker_startup(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!tm_an_input_is_startup(S))
        return;
    size_t nranks = an->a->nranks ? an->a->nranks : 1; /* as input.handoff's */
    size_t nw = (S->workers + nranks - 1) / nranks;
    size_t sets = (S->worker_set_restarts + nranks - 1) / nranks; /* per rank */
    double per_set = S->startup_wait_s / (double)S->worker_set_restarts;
    double steady = S->steady_wait_fraction;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_input_head(&e, S);
    tm_an_ev_num(&e, "workers_per_rank", (double)nw);
    tm_an_ev_num(&e, "worker_restarts", (double)S->worker_restarts);
    tm_an_ev_num(&e, "worker_set_restarts", (double)S->worker_set_restarts);
    tm_an_ev_num(&e, "startup_wait_s", S->startup_wait_s);
    tm_an_ev_num(&e, "startup_wait_per_set_s", per_set);
    tm_an_ev_num(&e, "startup_wait_share", S->restart_wait_share);
    tm_an_ev_num(&e, "startup_share_threshold", TM_AN_STARTUP_SHARE);
    tm_an_ev_num(&e, "steady_wait_fraction", steady);
    tm_an_ev_num(&e, "wait_median_s", S->wait_median_s);
    tm_an_ev_num(&e, "worker_fetch_share", S->worker_util);
    tm_an_ev_num(&e, "worker_batch_time_median_s", S->worker_batch_median_s);
    char title[512], adv[2048], each[32];
    tm_unit_fmt(each, sizeof each, TM_UNIT_SECONDS, per_set);
    bool every = startup_every_step(S);
    tm_an_ev_str(&e, "restarts", every ? "every_step" : "epochs");
    snprintf(title, sizeof title,
             "input-bound, worker start-up: the loop waited for data %.0f%% of the time, %.0f%% "
             "of that in %zu step%s waiting for a new set of DataLoader workers to start (%s "
             "on average)",
             100 * S->data_wait_fraction, 100 * S->restart_wait_share, S->worker_set_restarts,
             S->worker_set_restarts == 1 ? "" : "s", each);
    adv[0] = '\0';
    tm_an_adv(
        adv, sizeof adv,
        "Set persistent_workers=True on the DataLoader: its %zu worker%s then start once, not "
        "at every iter(); here a new set started %zu time%s after the first%s (%s). More "
        "workers would not help: a larger set starts slower.",
        nw, nw == 1 ? "" : "s", sets, sets == 1 ? "" : "s", nranks > 1 ? " on each rank" : "",
        every ? "in nearly every step: epochs of a batch or two" : "each epoch or eval pass");
    if (per_set >= TM_AN_STARTUP_SLOW_S)
        tm_an_adv(
            adv, sizeof adv,
            " The loop waited %s on average for a new set's first batch. That is what the spawn "
            "and forkserver start methods cost (the default on macOS, and on Linux from Python "
            "3.14; fork takes tens of ms): each worker imports torch and the main module again "
            "and receives the Dataset pickled. With one of them, keep the script's top level "
            "light (the work under if __name__ == \"__main__\":) and open files in the worker "
            "rather than in Dataset.__init__, or on Linux pass multiprocessing_context=\"fork\"; "
            "with fork, look at worker_init_fn and the cost of a first batch.",
            each);
    const char *rest = isfinite(steady) && steady >= TM_AN_DATA_WAIT_FRACTION
                           ? tm_an_input_steady_verdict(an)
                           : NULL;
    if (rest)
        tm_an_ev_str(&e, "steady_verdict", rest);
    if (rest && strcmp(rest, "input.data_wait") != 0)
        tm_an_adv(
            adv, sizeof adv,
            " Without the start-ups the loop still waited %.0f%% of the time, and for that the "
            "signals point at %s: fix the start-ups, then record again to confirm it.",
            100 * steady, rest);
    else if (isfinite(steady) && steady >= TM_AN_DATA_WAIT_FRACTION)
        tm_an_adv(adv, sizeof adv,
                  " Without the start-ups the loop still waited %.0f%% of the time: record again "
                  "with persistent workers for the verdict on the rest.",
                  100 * steady);
    else if (isfinite(steady))
        tm_an_adv(
            adv, sizeof adv,
            " Without the start-ups the loop waited %.1f%% of the time, under the %.0f%% worth "
            "fixing: the start-ups are the whole input problem.",
            100 * steady, 100 * TM_AN_DATA_WAIT_FRACTION);
    enum tm_severity sev = tm_an_wait_severity(S->data_wait_fraction);
    tm_an_input_cost(&e, S, title, sizeof title);
    tm_an_add(an, sev,
              S->restart_wait_share >= TM_AN_STARTUP_SHARE &&
                      (isnan(steady) || steady < TM_AN_DATA_WAIT_FRACTION)
                  ? TM_CONF_HIGH
                  : TM_CONF_MEDIUM,
              -1, &e, title, adv);
}
