/*
 * rules_amp.c - amp.skipped_steps: optimizer steps that AMP's GradScaler
 * skipped (docs/DIAGNOSIS.md, "amp.skipped_steps").
 *
 * With fp16 autocast, torch.amp.GradScaler multiplies the loss by a scale
 * so that small gradients do not underflow; when the scaled gradients hold
 * inf or NaN it does not call optimizer.step() and halves the scale.  The
 * agent ends such a step at scaler.step() and flags it TM_STEP_SKIPPED (a
 * skipped step's forward and backward passes ran, its update did not), so
 * the steps match the job's own count and the skips are counted apart.  A
 * few skips at the start (the scale backing off from 2^16) and one per
 * growth interval later are how GradScaler works; many are wasted
 * compute, and a run of skips at the end that no scale ends is a model
 * whose loss or weights are NaN: the GPUs go on working and nothing is
 * learnt, which no device metric shows.
 */
#include <math.h>
#include <stdio.h>

#include "rules.h"

void tm_rule_amp_skipped_steps(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!S->skipped_steps || !S->steps_total)
        return;
    double share = (double)S->skipped_steps / (double)S->steps_total;
    bool dead = S->skip_run_end >= TM_AN_AMP_DEAD_RUN;
    /* each process's scaler backs off from 2^16 at its start */
    size_t backoff = TM_AN_AMP_BACKOFF_SKIPS * (S->step_procs ? S->step_procs : 1);
    if (!dead && (S->skipped_steps <= backoff || share < TM_AN_AMP_SKIP_SHARE))
        return; /* the start's backoff, or the growth interval's overflows */
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "skipped_steps", (double)S->skipped_steps);
    tm_an_ev_num(&e, "steps", (double)S->steps_total);
    tm_an_ev_num(&e, "skipped_share", share);
    tm_an_ev_num(&e, "skipped_share_threshold", TM_AN_AMP_SKIP_SHARE);
    tm_an_ev_num(&e, "skipped_in_a_row_max", (double)S->skip_run_max);
    tm_an_ev_num(&e, "skipped_in_a_row_at_end", (double)S->skip_run_end);
    tm_an_ev_num(&e, "last_skipped_step", (double)S->skip_last_step);
    /* the skipped steps' time, computed and thrown away (the headline's
     * cost): their share of all the steps' time (of every process: ranks
     * side by side or one after another alike) of the run's wall time */
    double lost = S->steps_time_s > 0 ? S->skipped_s / S->steps_time_s : NAN;
    tm_an_ev_num(&e, "time_lost_s", isfinite(lost) ? lost * S->run_s : NAN);
    tm_an_ev_num(&e, "time_lost_fraction", isfinite(lost) && S->run_s > 0 ? lost : NAN);
    tm_an_ev_num(&e, "run_s", S->run_s);
    char title[512], adv[1024];
    if (dead) {
        uint64_t from = S->skip_last_step + 1 - S->skip_run_end;
        snprintf(title, sizeof title,
                 "the last %zu optimizer steps were all skipped by AMP's GradScaler (from step "
                 "%llu on): the gradients are inf/NaN at every loss scale, so the model stopped "
                 "learning while the job kept computing",
                 S->skip_run_end, (unsigned long long)from);
        snprintf(adv, sizeof adv,
                 "No loss scale removes an inf/NaN that is in the loss or the weights: stop the "
                 "job and resume from a checkpoint before step %llu. Check the loss for NaN "
                 "(torch.isfinite) and the data of that step, lower the learning rate or clip "
                 "gradients (after scaler.unscale_(optimizer)); on GPUs with bf16 (A100, H100, "
                 "H200) autocast to torch.bfloat16, which needs no GradScaler.",
                 (unsigned long long)from);
    } else {
        snprintf(title, sizeof title,
                 "AMP's GradScaler skipped %zu of %zu optimizer steps (%.1f%%): their forward "
                 "and backward passes were computed and thrown away",
                 S->skipped_steps, S->steps_total, 100.0 * share);
        snprintf(adv, sizeof adv,
                 "The fp16 gradients overflow at the loss scale. A few skips at the start (the "
                 "scale backing off from 65536) and about one per growth_interval (2000 steps) "
                 "are normal; this is more. Autocast to torch.bfloat16 where the GPU has it "
                 "(no GradScaler, no skips), clip gradients after scaler.unscale_(optimizer), "
                 "lower the learning rate, or find the layer that overflows in fp16 (a softmax, "
                 "a norm, a large matmul) and keep it in fp32.");
    }
    tm_an_add(an, dead || share >= TM_AN_AMP_SKIP_HIGH ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_HIGH,
              -1, &e, title, adv);
}
