/*
 * steps.c - the one step accounting.
 *
 * Every place that speaks of steps and data wait (the report, /metrics of
 * `trainmon serve`, the run.* alert inputs, the status line of `trainmon
 * run` and on_threshold inside the job) takes a step's numbers from here,
 * so that they cannot disagree about the same run:
 *
 *   - A step counts when it is complete: it was closed by the loop itself
 *     (the next step began, or the loader was exhausted), not by the
 *     process stopping (TM_STEP_ENDED_AT_EXIT), and it lasted a positive
 *     time.  Its data wait is capped at its duration (a wait can never be
 *     more than the step it is part of; clocks of a crashed writer can make
 *     it look so).
 *   - The first TM_STEP_WARMUP complete steps of a process are warm-up
 *     (workers starting, first batches, lazy initialisation).  They are
 *     counted as steps but stay out of the data-wait fraction, unless they
 *     are all there is.
 *   - Eval batches (phase TM_STEP_EVAL, the step model) are no training
 *     steps: tm_step_times refuses them, and a tally counts them apart
 *     (eval_steps, eval_s), out of the step total, medians and fractions.
 *   - The step total of a process is the highest step number seen plus one
 *     where records may have been dropped (a flight-recorder ring keeps only
 *     its newest blocks), and the number of complete steps otherwise.
 */
#include <math.h>
#include <string.h>

#include "trainmon.h"

bool tm_rec_is_training(const tm_rec_header *h)
{
    return h && strncmp(h->role, "worker", 6) != 0 && strncmp(h->role, "system", 6) != 0;
}

bool tm_step_times(const tm_inproc_step *s, double *dur_s, double *wait_s)
{
    if (!s || (s->flags & TM_STEP_ENDED_AT_EXIT) || s->end_ns <= s->start_ns ||
        s->phase == TM_STEP_EVAL)
        return false;
    /* The difference of two int64 clocks can overflow for crafted
     * records; take it in unsigned arithmetic, where it is defined. */
    double d = (double)((uint64_t)s->end_ns - (uint64_t)s->start_ns) / 1e9;
    double w = s->data_wait_ns > 0 ? (double)s->data_wait_ns / 1e9 : 0.0;
    if (dur_s)
        *dur_s = d;
    if (wait_s)
        *wait_s = w < d ? w : d;
    return true;
}

void tm_steptally_init(tm_steptally *t)
{
    memset(t, 0, sizeof *t);
}

bool tm_steptally_add(tm_steptally *t, const tm_inproc_step *s)
{
    if (s && s->phase == TM_STEP_EVAL) {
        /* its step number is the training step it ran in: not a new one */
        if (!(s->flags & TM_STEP_ENDED_AT_EXIT) && s->end_ns > s->start_ns) {
            double e = (double)((uint64_t)s->end_ns - (uint64_t)s->start_ns) / 1e9;
            t->eval_steps++;
            t->eval_s += e;
            if (t->warmup >= TM_STEP_WARMUP)
                t->eval_pend_s += e; /* the loop's once a training step follows */
        }
        return false;
    }
    if (s && s->step != UINT64_MAX && s->step + 1 > t->next_step)
        t->next_step = s->step + 1;
    double d, w;
    if (!tm_step_times(s, &d, &w))
        return false;
    t->steps++;
    if (s->end_ns > t->last_end_ns)
        t->last_end_ns = s->end_ns;
    if (s->flags & TM_STEP_SKIPPED) {
        t->skipped_steps++;
        t->skipped_s += d;
        if (++t->skip_run_end > t->skip_run_max)
            t->skip_run_max = t->skip_run_end;
        if (s->step != UINT64_MAX && s->step + 1 > t->skip_last)
            t->skip_last = s->step + 1;
    } else {
        t->skip_run_end = 0;
    }
    if (t->warmup < TM_STEP_WARMUP) {
        t->warmup++;
        t->warm_step_s += d;
        t->warm_wait_s += w;
    } else {
        t->step_s += d;
        t->wait_s += w;
        if (s->flags & TM_STEP_FED_BY_THREAD)
            t->fed_steps++;
        if (s->boundary && s->batches == 0 && s->prep_ns >= 0) {
            /* a loop without a DataLoader: its wait is its own batch
             * preparation (the step model, docs/DIAGNOSIS.md) */
            t->prep_steps++;
            t->prep_s += w;
            if (s->prep_cpu_ns >= 0) {
                /* a read step of the agent's schedule stands for the steps
                 * of its interval (tm_prep_cpu_every) */
                double c = (double)s->prep_cpu_ns / 1e9, k = tm_prep_cpu_weight(s->step);
                t->prep_cpu_s += k * (c < w ? c : w);
                t->prep_cpu_known_s += k * w;
            }
            if (s->prep_fwd_ns >= 0) {
                /* the steps since the one that measured it before */
                /* at most the sample's interval: a ring file's first kept
                 * step, or one after a re-attach, stands for no more */
                double f = (double)s->prep_fwd_ns / 1e9,
                       k = s->step != UINT64_MAX && s->step > t->prep_fwd_last
                               ? (double)(s->step - t->prep_fwd_last)
                               : 1.0;
                if (s->step != UINT64_MAX && k > tm_prep_cpu_every(s->step))
                    k = tm_prep_cpu_every(s->step);
                if (s->step != UINT64_MAX && s->step > t->prep_fwd_last)
                    t->prep_fwd_last = s->step;
                t->prep_fwd_s += k * (f < w ? f : w);
                t->prep_fwd_known_s += k * w;
            }
            if (s->prep_opt_ns > 0) {
                double o = (double)s->prep_opt_ns / 1e9;
                t->prep_opt_s += o < w ? o : w;
            }
        }
        t->eval_loop_s += t->eval_pend_s;
        t->eval_pend_s = 0;
        if (s->nograd_calls > 0 && s->nograd_ns >= 0) {
            double g = (double)s->nograd_ns / 1e9;
            t->nograd_steps++;
            t->nograd_calls += (uint64_t)s->nograd_calls;
            t->nograd_s += g < d - w ? g : (d > w ? d - w : 0);
        }
        if (s->wait_cpu_ns >= 0 && s->batches > 0) {
            /* a multi-process DataLoader: the thread's CPU in the wait is
             * receiving the batches (the handoff, docs/DIAGNOSIS.md) */
            double c = (double)s->wait_cpu_ns / 1e9;
            t->recv_cpu_s += c < w ? c : w;
            t->recv_known_s += w;
        }
    }
    return true;
}

/* The judged steps: those after warm-up, or the warm-up when nothing
 * else is there. */
static bool steptally_judged(const tm_steptally *t, double *dur, double *wait, uint64_t *n)
{
    if (t->steps > t->warmup) {
        *dur = t->step_s;
        *wait = t->wait_s;
        *n = t->steps - t->warmup;
    } else {
        *dur = t->warm_step_s;
        *wait = t->warm_wait_s;
        *n = t->warmup;
    }
    return *n > 0;
}

double tm_steptally_wait_fraction(const tm_steptally *t)
{
    double d, w;
    uint64_t n;
    if (!steptally_judged(t, &d, &w, &n) || !(d > 0))
        return NAN;
    return w / d;
}

double tm_steptally_step_mean(const tm_steptally *t)
{
    double d, w;
    uint64_t n;
    return steptally_judged(t, &d, &w, &n) ? d / (double)n : NAN;
}

double tm_steptally_wait_mean(const tm_steptally *t)
{
    double d, w;
    uint64_t n;
    return steptally_judged(t, &d, &w, &n) ? w / (double)n : NAN;
}

uint64_t tm_steptally_total(const tm_steptally *t, bool ring)
{
    return ring && t->next_step > t->steps ? t->next_step : t->steps;
}

void tm_steptally_merge(tm_steptally *into, const tm_steptally *from)
{
    into->steps += from->steps;
    into->warmup += from->warmup;
    if (from->next_step > into->next_step)
        into->next_step = from->next_step;
    into->step_s += from->step_s;
    into->wait_s += from->wait_s;
    into->warm_step_s += from->warm_step_s;
    into->warm_wait_s += from->warm_wait_s;
    into->eval_steps += from->eval_steps;
    into->eval_s += from->eval_s;
    into->prep_steps += from->prep_steps;
    into->prep_s += from->prep_s;
    into->prep_cpu_s += from->prep_cpu_s;
    into->prep_cpu_known_s += from->prep_cpu_known_s;
    into->prep_fwd_s += from->prep_fwd_s;
    into->prep_fwd_known_s += from->prep_fwd_known_s;
    into->prep_opt_s += from->prep_opt_s;
    if (from->prep_fwd_last > into->prep_fwd_last)
        into->prep_fwd_last = from->prep_fwd_last;
    into->recv_cpu_s += from->recv_cpu_s;
    into->recv_known_s += from->recv_known_s;
    into->fed_steps += from->fed_steps;
    into->skipped_steps += from->skipped_steps;
    into->skipped_s += from->skipped_s;
    if (from->steps && (!into->last_end_ns || from->last_end_ns > into->last_end_ns)) {
        into->skip_run_end = from->skip_run_end; /* the process that ended last */
        into->skip_last = from->skip_last;
        into->last_end_ns = from->last_end_ns;
    }
    if (from->skip_run_max > into->skip_run_max)
        into->skip_run_max = from->skip_run_max;
    into->nograd_steps += from->nograd_steps;
    into->nograd_calls += from->nograd_calls;
    into->nograd_s += from->nograd_s;
    into->eval_loop_s += from->eval_loop_s;
    into->eval_pend_s += from->eval_pend_s;
}

void tm_stepwin_add(tm_stepwin *w, double dur_s, double wait_s)
{
    size_t k = (size_t)(w->n % TM_STEPWIN_MAX);
    w->dur[k] = dur_s;
    w->wait[k] = wait_s < dur_s ? wait_s : dur_s;
    w->n++;
}

size_t tm_stepwin_sum(const tm_stepwin *w, size_t last, double *dur_s, double *wait_s)
{
    size_t n = last < TM_STEPWIN_MAX ? last : TM_STEPWIN_MAX;
    if (w->n < n)
        n = (size_t)w->n;
    double d = 0, q = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = (size_t)((w->n - 1 - i) % TM_STEPWIN_MAX);
        d += w->dur[k];
        q += w->wait[k];
    }
    if (dur_s)
        *dur_s = d;
    if (wait_s)
        *wait_s = q;
    return n;
}
