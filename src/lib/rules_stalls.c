/*
 * rules_stalls.c - steps.stalls: every K steps a step takes many times the
 * median, and nothing trainmon sees explains it (docs/DIAGNOSIS.md,
 * "steps.stalls").
 *
 * runsum_stalls.c finds the stalls and takes out those a longer data wait
 * or the garbage collector's pauses explain (the input verdicts and
 * gc.pauses say those); eval runs and blocking checkpoint saves are no
 * step time already.  What is left is the loop's own work at those steps,
 * which trainmon cannot name: the finding says when (every K steps, from
 * which step), what it costs, and the usual suspects with the way to time
 * one.  Only regular stalls are claimed: scattered ones on a shared
 * machine may be the machine's.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"
#include "units.h"

bool tm_an_stalls_claimed(const tm_an_summary *S)
{
    return S->stall_n >= TM_AN_STALL_MIN && S->stall_regular && S->stall_nat > 0 &&
           S->stall_share >= TM_AN_GC_SHARE;
}

void tm_rule_steps_stalls(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    double share = S->stall_share;
    if (!tm_an_stalls_claimed(S))
        return;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "stalls", (double)S->stall_n);
    tm_an_ev_num(&e, "steps_judged", (double)S->stall_steps);
    tm_an_ev_num(&e, "every_steps", S->stall_every);
    tm_an_ev_num(&e, "step_median_s", S->stall_step_s);
    tm_an_ev_num(&e, "stall_median_s", S->stall_median_s);
    tm_an_ev_num(&e, "excess_s", S->stall_excess_s);
    tm_an_ev_num(&e, "loop_time_s", S->stall_loop_s);
    tm_an_ev_num(&e, "excess_share", share);
    tm_an_ev_num(&e, "threshold", TM_AN_GC_SHARE);
    tm_an_ev_num(&e, "stalls_explained", (double)S->stall_explained);
    tm_an_ev_key(&e, "first_stalls");
    tm_buf_printf(&e.b, "[");
    for (size_t i = 0; i < S->stall_nat; i++)
        tm_buf_printf(&e.b, "%s%llu", i ? "," : "", (unsigned long long)S->stall_at[i]);
    tm_buf_printf(&e.b, "]");
    char title[512], adv[2048], med[32], stall[32], at[96] = "";
    tm_unit_fmt(med, sizeof med, TM_UNIT_SECONDS, S->stall_step_s);
    tm_unit_fmt(stall, sizeof stall, TM_UNIT_SECONDS, S->stall_median_s);
    for (size_t i = 0; i < S->stall_nat && i < 4; i++)
        tm_an_adv(at, sizeof at, "%s%llu", i ? ", " : "", (unsigned long long)S->stall_at[i]);
    snprintf(title, sizeof title,
             "every %.0f steps a step stalls: %zu steps took %s (median) instead of %s, %.0f%% "
             "of the loop's time",
             S->stall_every, S->stall_n, stall, med, 100 * share);
    snprintf(adv, sizeof adv,
             "Time one of those steps (`py-spy dump --pid PID` during a stall, or "
             "torch.profiler with schedule(skip_first=%.0f, wait=%.0f, warmup=0, active=1) and "
             "prof.step() after each step) and do its work less often or off the training "
             "thread. Steps %s%s took longer than the rest by %.0f%% of the "
             "loop in all, and no data wait, garbage collection, eval run or checkpoint save "
             "trainmon saw explains it: it is the loop's own work at those steps%s. The usual "
             "ones: logging to a tracker (a synchronous upload), a metric read with .item() or "
             ".cpu() that waits for the queued %s work, text or image sampling, an eval not run "
             "under model.eval() and torch.no_grad(), a metrics all-reduce across ranks.",
             fmax((double)S->stall_at[0] - (S->stall_every - 1), 0), fmax(S->stall_every - 1, 0),
             at, S->stall_n > S->stall_nat || S->stall_nat > 4 ? ", ..." : "", 100 * share,
             S->stall_wait_fraction > 0 ? " (between the optimizer step and the next forward, "
                                          "where a loop without a DataLoader prepares its batch: "
                                          "no batch preparation)"
                                        : "",
             S->gpu ? "GPU" : "device");
    tm_an_add(an, share >= TM_AN_GC_SHARE_HIGH ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_MEDIUM, -1,
              &e, title, adv);
}
