/*
 * rules_gc.c - gc.pauses: Python's garbage collector stopped the training
 * loop (docs/DIAGNOSIS.md, "gc.pauses").
 *
 * A collection holds the GIL: the training thread stops wherever it was
 * until it ends.  A full collection (generation 2) walks every container
 * object the process keeps, so a job that holds its dataset, a cache or a
 * log as Python lists, dicts and strings pays a pause in proportion to all
 * of them, again and again (CPython starts one when the objects that
 * survived the young collections grow by a quarter of the long-lived
 * ones).  runsum_gc.c adds the pauses inside the loop up against its time
 * and lays them over the steps.  What it costs, which steps stalled, and
 * the remedy by kind: gc.freeze() for a large long-lived heap, the
 * thresholds for young collections, fewer gc.collect() calls of the job's
 * own, and collecting at chosen steps (all ranks at the same step in DDP).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"
#include "units.h"

/* ", one every K steps" (nothing when K is unknown) */
static void every_steps(char *adv, size_t cap, double k)
{
    if (k == 1)
        tm_an_adv(adv, cap, ", one every step");
    else if (isfinite(k))
        tm_an_adv(adv, cap, ", one every %.0f steps", k);
}

void tm_rule_gc_pauses(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    double g = S->gc_s, L = S->gc_loop_s;
    if (S->gc_pauses < TM_AN_GC_MIN || !(g > 0) || !isfinite(L) || !(L > 0))
        return;
    double share = g / L;
    /* DDP: every process's pauses hold the others (the time any of them
     * was in one: an upper bound, since a rank may be waiting anyway) */
    double ranks = S->gc_procs > 1 ? fmin(S->gc_ranks_s / L, 1) : share;
    double judged = fmax(share, ranks);
    if (judged < TM_AN_GC_SHARE)
        return;
    bool by_ranks = share < TM_AN_GC_SHARE;
    bool full = (double)S->gc_full >= TM_AN_GC_FULL_SHARE * (double)S->gc_pauses;
    bool manual = 2 * S->gc_manual >= S->gc_pauses;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "pauses", (double)S->gc_pauses);
    tm_an_ev_num(&e, "full_collections", (double)S->gc_full);
    tm_an_ev_num(&e, "manual_collections", (double)S->gc_manual);
    tm_an_ev_num(&e, "pause_time_s", g);
    tm_an_ev_num(&e, "loop_time_s", L);
    tm_an_ev_num(&e, "pause_share", share);
    tm_an_ev_num(&e, "threshold", TM_AN_GC_SHARE);
    tm_an_ev_num(&e, "pause_median_s", S->gc_median_s);
    tm_an_ev_num(&e, "pause_max_s", S->gc_max_s);
    tm_an_ev_num(&e, "steps_between_full_collections", S->gc_every_steps);
    tm_an_ev_num(&e, "steps_judged", (double)S->gc_steps);
    tm_an_ev_num(&e, "steps_with_pause", (double)S->gc_steps_hit);
    tm_an_ev_num(&e, "step_median_with_pause_s", S->gc_hit_step_s);
    tm_an_ev_num(&e, "step_median_without_pause_s", S->gc_other_step_s);
    tm_an_ev_num(&e, "prep_pause_s", S->gc_prep_s);
    tm_an_ev_num(&e, "prep_pause_share", S->gc_prep_share);
    tm_an_ev_num(&e, "young_collections_time_s", S->gc_young_s);
    tm_an_ev_num(&e, "full_collections_time_s", S->gc_full_all_s);
    tm_an_ev_num(&e, "frozen_objects", S->gc_frozen);
    tm_an_ev_num(&e, "threshold0", S->gc_threshold0);
    tm_an_ev_num(&e, "processes_pausing", (double)S->gc_procs);
    tm_an_ev_num(&e, "all_processes_pause_time_s", S->gc_ranks_s);
    tm_an_ev_num(&e, "events_dropped", (double)S->gc_dropped);
    char title[512], adv[2048], med[32], mx[32];
    tm_unit_fmt(med, sizeof med, TM_UNIT_SECONDS, S->gc_median_s);
    tm_unit_fmt(mx, sizeof mx, TM_UNIT_SECONDS, S->gc_max_s);
    if (by_ranks)
        snprintf(title, sizeof title,
                 "Python's garbage collector stopped training: %zu processes paused for %.0f%% "
                 "of the loop's time together (each at most %.0f%%; median pause %s, longest %s)",
                 S->gc_procs, 100 * ranks, 100 * share, med, mx);
    else
        snprintf(title, sizeof title,
                 "Python's garbage collector stopped training: %zu pauses took %.0f%% of the "
                 "loop's time (median %s, longest %s)",
                 S->gc_pauses, 100 * share, med, mx);
    adv[0] = '\0';
    if (S->gc_steps_hit > 0 && S->gc_steps > 0 && isfinite(S->gc_hit_step_s) &&
        isfinite(S->gc_other_step_s)) {
        char hs[32], os[32];
        tm_unit_fmt(hs, sizeof hs, TM_UNIT_SECONDS, S->gc_hit_step_s);
        tm_unit_fmt(os, sizeof os, TM_UNIT_SECONDS, S->gc_other_step_s);
        tm_an_adv(adv, sizeof adv,
                  "%zu of %zu steps held a pause and took %s (median) against %s for the rest: "
                  "stalls the median step hides.",
                  S->gc_steps_hit, S->gc_steps, hs, os);
    }
    if (S->gc_prep_share >= 0.25)
        tm_an_adv(adv, sizeof adv,
                  " %.0f%% of the loop's own batch preparation was the collector (it runs "
                  "where the allocations are): that is no slow preparation.",
                  100 * S->gc_prep_share);
    if (manual) {
        /* every m times as many steps: share (g/m) / (L - g + g/m) <= s, as
         * for checkpoints (rules_ckpt.c) */
        double m = judged < 1
                       ? ceil(judged * (1 - TM_AN_GC_SHARE) / (TM_AN_GC_SHARE * (1 - judged)))
                       : NAN;
        tm_an_adv(adv, sizeof adv, " These are the job's own gc.collect() calls");
        every_steps(adv, sizeof adv, S->gc_every_steps);
        tm_an_adv(adv, sizeof adv, ". Call it less often");
        if (m > 1 && isfinite(m))
            tm_an_adv(adv, sizeof adv,
                      " (%.0f times fewer calls would cost at most %.0f%% of the time)", m,
                      100 * TM_AN_GC_SHARE);
        tm_an_adv(adv, sizeof adv,
                  ", or gc.freeze() before the loop so that each walks fewer objects.");
    } else if (full) {
        tm_an_adv(adv, sizeof adv, " %zu of them were full collections (generation 2)", S->gc_full);
        every_steps(adv, sizeof adv, S->gc_every_steps);
        tm_an_adv(adv, sizeof adv,
                  ": each walks every object the process keeps (a dataset, cache or log held as "
                  "Python lists, dicts and strings).");
        if (S->gc_frozen > 0)
            tm_an_adv(adv, sizeof adv,
                      " gc.freeze() had frozen %.0f objects; the walked ones were made after "
                      "it: freeze later (after the caches fill), or keep the data in tensors, "
                      "NumPy arrays or Arrow tables (no Python object per sample).",
                      S->gc_frozen);
        else
            tm_an_adv(adv, sizeof adv,
                      " Call gc.freeze() once before the loop, after the model, the optimizer "
                      "and the data are built: the objects alive then are never walked again. "
                      "Keeping the data in tensors, NumPy arrays or Arrow tables (no Python "
                      "object per sample) removes the cost at its source.");
    } else {
        tm_an_adv(adv, sizeof adv,
                  " They were young-generation collections, started by the loop's own "
                  "allocations");
        if (isfinite(S->gc_threshold0))
            tm_an_adv(adv, sizeof adv, " every %.0f new objects (gc.get_threshold()[0])",
                      S->gc_threshold0);
        tm_an_adv(adv, sizeof adv,
                  ": raise it (gc.set_threshold(50000, 50, 100) collects far less often), or "
                  "allocate fewer Python objects per step.");
    }
    if (!manual)
        tm_an_adv(adv, sizeof adv,
                  " Or collect when it suits the loop: gc.disable() before it and gc.collect() "
                  "every N steps (Megatron-LM's --manual-gc)%s.",
                  S->gc_procs > 1 ? "; in DDP every rank then collects at the same step, instead "
                                    "of each rank's pause holding the others at the next "
                                    "all-reduce at a step of its own"
                                  : "");
    if (S->gc_dropped > 0)
        tm_an_adv(adv, sizeof adv,
                  " (%zu pauses beyond 50 a second were counted but not recorded: the share is "
                  "a lower bound.)",
                  S->gc_dropped);
    if (adv[0] == ' ') /* no stall sentence came first */
        memmove(adv, adv + 1, strlen(adv));
    tm_an_add(an, judged >= TM_AN_GC_SHARE_HIGH ? TM_SEV_HIGH : TM_SEV_MEDIUM,
              by_ranks ? TM_CONF_MEDIUM : TM_CONF_HIGH, -1, &e, title, adv);
}
