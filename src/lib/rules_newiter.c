/*
 * rules_newiter.c - input.new_iterator: the loop makes a new DataLoader
 * iterator for (almost) every batch (docs/DIAGNOSIS.md
 * "input.new_iterator").
 *
 * `next(iter(loader))` inside the loop, as tutorials and notebooks write
 * it, takes one batch from an iterator made for it.  Without
 * persistent_workers each iter() starts the loader's worker processes and
 * the iterator, dropped after its one batch, stops them; with them, each
 * iter() resets the workers, throwing away the batches they made ahead.
 * Either way no batch is ever ready when the loop asks, and every wait is
 * a start: neither an outlier (input.worker_startup) nor the workers'
 * speed (the votes).  The agent flags the steps (TM_STEP_NEW_ITER: the
 * fetch began right after an iter() while the iterator before had not run
 * out), so a loop over epochs of one batch, whose iterators each end in
 * StopIteration, is not this (it is input.worker_startup's, whose advice,
 * persistent_workers=True, fixes it).  Judged before input.worker_startup
 * and the votes, and the one input verdict then.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"
#include "units.h"

bool tm_an_input_is_newiter(const tm_an_summary *S)
{
    return S->workers > 0 && S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION &&
           S->waits_judged >= TM_AN_STARTUP_STEPS_PER_SET &&
           (double)S->newiter_steps >= TM_AN_NEWITER_STEPS * (double)S->waits_judged;
}

void tm_rule_input_new_iterator(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!tm_an_input_is_newiter(S))
        return;
    size_t nranks = an->a->nranks ? an->a->nranks : 1;
    size_t nw = (S->workers + nranks - 1) / nranks;
    double each = S->newiter_wait_s / (double)S->newiter_steps;
    /* new worker sets in most of those steps: started anew each time; else
     * persistent workers, reset */
    bool starts = 2 * S->worker_set_restarts >= S->newiter_steps;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_input_head(&e, S);
    tm_an_ev_num(&e, "new_iterator_steps", (double)S->newiter_steps);
    tm_an_ev_num(&e, "steps_judged", (double)S->waits_judged);
    tm_an_ev_num(&e, "threshold", TM_AN_NEWITER_STEPS);
    tm_an_ev_num(&e, "new_iterator_wait_s", S->newiter_wait_s);
    tm_an_ev_num(&e, "wait_per_step_s", each);
    tm_an_ev_num(&e, "workers_per_rank", (double)nw);
    tm_an_ev_num(&e, "worker_set_restarts", (double)S->worker_set_restarts);
    tm_an_ev_str(&e, "workers", starts ? "started" : "reset");
    char title[512], adv[2048], per[32];
    tm_unit_fmt(per, sizeof per, TM_UNIT_SECONDS, each);
    snprintf(title, sizeof title,
             "input-bound, a new DataLoader iterator for every batch: the loop waited for data "
             "%.0f%% of the time; %zu of %zu steps took their batch from an iterator made for it "
             "(%s a step on average)",
             100 * S->data_wait_fraction, S->newiter_steps, S->waits_judged, per);
    snprintf(adv, sizeof adv,
             "The loop makes a new iterator of its DataLoader for each batch, as "
             "`next(iter(loader))` inside the loop does, so its %zu worker%s never make a batch "
             "ahead: each iter() %s. Make the iterator once, before the loop (`it = "
             "iter(loader)`, then `batch = next(it)` in the loop and a new iter() at "
             "StopIteration), or iterate `for batch in loader`. Without shuffle=True, "
             "`next(iter(loader))` also returns the same first batch every time.",
             nw, nw == 1 ? "" : "s",
             starts ? "starts them anew, and the iterator, dropped after its one batch, stops "
                      "them"
                    : "resets them (persistent_workers=True): the batches they made ahead are "
                      "thrown away and the loop waits for them to resume");
    tm_an_input_cost(&e, S, title, sizeof title);
    tm_an_add(an, tm_an_wait_severity(S->data_wait_fraction), TM_CONF_HIGH, -1, &e, title, adv);
}
