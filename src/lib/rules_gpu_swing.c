/*
 * rules_gpu_swing.c - gpu.util_swing: a GPU that alternates between busy
 * and idle samples (docs/DIAGNOSIS.md, "gpu.util_swing").  A mean
 * utilization hides it: 50% can be a GPU half as fast as it could be all
 * the time, or one that computes a step flat out and then idles while the
 * loop waits for the next batch.  The second shows in the NVML samples
 * once a step is longer than a sample: busy samples and idle samples in
 * turn, about once per step.  Said with the data wait that explains it, or,
 * when the input keeps up, as host-side stalls at that period.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rules.h"
#include "series.h"

/* The swing of one utilization series inside the window: the shares of
 * idle and busy samples and how many times it went from one to the other
 * (hysteresis: a sample between the two lines keeps the state). */
struct swing {
    size_t n, idle, busy, changes;
    double span_s;
};

static struct swing swing_of(const tm_runview *v, const tm_run_series *s)
{
    struct swing w = {0};
    int state = 0; /* -1 idle, 1 busy, 0 not yet known */
    int64_t t0 = 0, t1 = 0;
    for (size_t i = 0; i < s->n; i++) {
        double u = s->v[i];
        if (s->t_ns[i] < v->w0 || s->t_ns[i] > v->w1 || !isfinite(u))
            continue;
        if (!w.n++)
            t0 = s->t_ns[i];
        t1 = s->t_ns[i];
        int now = u <= TM_AN_GPU_SWING_IDLE ? -1 : u >= TM_AN_GPU_SWING_BUSY ? 1 : state;
        w.idle += now == -1 && u <= TM_AN_GPU_SWING_IDLE;
        w.busy += now == 1 && u >= TM_AN_GPU_SWING_BUSY;
        if (state && now != state)
            w.changes++;
        state = now;
    }
    w.span_s = w.n > 1 ? tm_ns_diff_s(t1, t0) : 0;
    return w;
}

static bool swings(const struct swing *w)
{
    return w->n >= TM_AN_GPU_SWING_MIN_SAMPLES && w->changes >= TM_AN_GPU_SWING_MIN_CHANGES &&
           (double)w->idle >= TM_AN_GPU_SWING_SHARE * (double)w->n &&
           (double)w->busy >= TM_AN_GPU_SWING_SHARE * (double)w->n;
}

void tm_rule_gpu_util_swing(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    const tm_runview *v = an->v;
    /* the GPU that swings most: the most changes among those that swing */
    struct swing best = {0};
    const tm_run_series *bs = NULL;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        if (strcmp(s->name, TM_SER_GPU_UTILIZATION) != 0 || !tm_runsum_is_job_gpu(v, s))
            continue; /* another job's GPU: its swing is not this job's */
        struct swing w = swing_of(v, s);
        if (swings(&w) && (!bs || w.changes > best.changes)) {
            best = w;
            bs = s;
        }
    }
    if (!bs)
        return;
    /* a wait that overlapped the GPU's work (input.overlapped) is not what
     * its idle samples wait for */
    bool waits = S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION &&
                 !tm_an_input_is_overlapped(S, an->a->nranks);
    /* a low mean while the input keeps up is gpu.underutilized's */
    if (!waits && S->gpu_util_mean < TM_AN_GPU_UTIL)
        return;
    /* one busy-idle cycle is two changes */
    double period = best.span_s > 0 ? 2 * best.span_s / (double)best.changes : NAN;
    double step = S->step_median_s;
    double wait = isfinite(step) && isfinite(S->compute_median_s) && step > S->compute_median_s
                      ? step - S->compute_median_s
                      : NAN;
    bool at_step = isfinite(period) && step > 0 && period >= step / TM_AN_GPU_SWING_PERIOD_RATIO &&
                   period <= step * TM_AN_GPU_SWING_PERIOD_RATIO;
    double n = (double)best.n;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_str(&e, "gpu", bs->labels);
    tm_an_ev_num(&e, "samples", n);
    tm_an_ev_num(&e, "busy_sample_share", (double)best.busy / n);
    tm_an_ev_num(&e, "idle_sample_share", (double)best.idle / n);
    tm_an_ev_num(&e, "busy_threshold", TM_AN_GPU_SWING_BUSY);
    tm_an_ev_num(&e, "idle_threshold", TM_AN_GPU_SWING_IDLE);
    tm_an_ev_num(&e, "swings", (double)best.changes);
    tm_an_ev_num(&e, "swing_period_s", period);
    tm_an_ev_num(&e, "step_time_median_s", step);
    tm_an_ev_num(&e, "data_wait_per_step_s", wait);
    tm_an_ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    tm_an_ev_num(&e, "gpu_utilization_mean", S->gpu_util_mean);
    char title[512], adv[1024], per[160] = "";
    if (at_step)
        snprintf(per, sizeof per, ", about once per step (every %.2g s; a step takes %.2g s)",
                 period, step);
    else if (isfinite(period))
        snprintf(per, sizeof per, ", every %.2g s", period);
    snprintf(title, sizeof title,
             "GPU utilization swings: busy in %.0f%% of the samples and idle in %.0f%%%s",
             100 * (double)best.busy / n, 100 * (double)best.idle / n, per);
    if (waits) {
        size_t len = strlen(title);
        if (isfinite(wait))
            snprintf(title + len, sizeof title - len,
                     "; each step waits %.2g s for data (%.0f%% of the step)", wait,
                     100 * S->data_wait_fraction);
        char gain[64] = "";
        if (isfinite(S->speedup))
            snprintf(gain, sizeof gain, ": about %.1fx faster if it kept up", S->speedup);
        snprintf(adv, sizeof adv,
                 "The GPU computes a step, then idles while the loop waits for the next batch: "
                 "the idle samples are the data wait. Fixing the input (the input finding) "
                 "fills them%s.",
                 gain);
    } else {
        char why[160];
        if (S->data_wait_fraction >= TM_AN_DATA_WAIT_FRACTION) /* overlapped */
            snprintf(why, sizeof why,
                     "The loop's wait overlapped the GPU's work (input.overlapped), so its idle "
                     "samples are not the data wait: the GPU");
        else
            snprintf(why, sizeof why,
                     "The input keeps up (the loop waited for data %.0f%% of the time), so the "
                     "GPU",
                     100 * S->data_wait_fraction);
        snprintf(adv, sizeof adv,
                 "%s idles on the host side at that period: synchronizations (.item(), .cpu(), "
                 "printing tensors), per-step logging or checkpointing, or Python overhead "
                 "between kernels. Move them off the step (log every N steps), and consider "
                 "CUDA graphs or torch.compile for launch overhead.",
                 why);
    }
    tm_an_add(an, waits ? TM_SEV_MEDIUM : TM_SEV_LOW, at_step ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1,
              &e, title, adv);
}
