/*
 * ringinfo.c - what a flight-recorder ring dropped, per training record
 * file and for a whole run: how many steps the oldest blocks took with
 * them, the true step total and from when the kept data starts.  The
 * report says it (reportfmt.c), so that a ring's few hundred kept steps are
 * not mistaken for the run's length; /metrics can say it from the same
 * numbers.
 *
 * The step accounting is steps.c's: a step record carries its number,
 * counted from 0 in each process, so the steps below the first number kept
 * were dropped, and tm_steptally_total(t, true) is the highest number + 1.
 */
#include <string.h>

#include "trainmon.h"

/* One source's entry from its step records st[0..n). */
static tm_ringinfo ring_of(const tm_run_source *src, uint32_t s, const tm_run_step *st, size_t n)
{
    tm_ringinfo ri = {.source = s, .ring = src->header.max_size > 0, .kept_from_ns = src->first_ns};
    tm_steptally t;
    tm_steptally_init(&t);
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        tm_steptally_add(&t, &st[i].s);
        if (!any || st[i].s.step < ri.first_step)
            ri.first_step = st[i].s.step;
        any = true;
    }
    ri.steps_kept = t.steps;
    ri.steps_total = tm_steptally_total(&t, ri.ring);
    ri.steps_dropped = ri.ring ? ri.first_step : 0;
    /* A crafted first number beyond the highest one kept cannot make more
     * dropped steps than the total. */
    if (ri.steps_dropped > ri.steps_total)
        ri.steps_dropped = ri.steps_total;
    return ri;
}

size_t tm_run_ringinfo(const tm_run *r, tm_ringinfo *out, size_t cap)
{
    const tm_run_source *src;
    size_t nsrc = tm_run_sources(r, &src);
    const tm_run_step *st;
    size_t nst = tm_run_steps(r, &st);
    size_t k = 0, i = 0;
    /* Step records are grouped by source in source order (tm_run_load). */
    for (uint32_t s = 0; s < nsrc; s++) {
        while (i < nst && st[i].source < s)
            i++;
        size_t b = i;
        while (i < nst && st[i].source == s)
            i++;
        if (!tm_rec_is_training(&src[s].header))
            continue;
        if (k < cap)
            out[k] = ring_of(&src[s], s, st + b, i - b);
        k++;
    }
    return k;
}

bool tm_run_ring_summary(const tm_run *r, tm_ringinfo *sum)
{
    memset(sum, 0, sizeof *sum);
    const tm_run_source *src;
    size_t nsrc = tm_run_sources(r, &src);
    const tm_run_step *st;
    size_t nst = tm_run_steps(r, &st);
    size_t i = 0;
    for (uint32_t s = 0; s < nsrc; s++) {
        while (i < nst && st[i].source < s)
            i++;
        size_t b = i;
        while (i < nst && st[i].source == s)
            i++;
        if (!tm_rec_is_training(&src[s].header))
            continue;
        tm_ringinfo ri = ring_of(&src[s], s, st + b, i - b);
        sum->ring |= ri.ring;
        sum->source += ri.ring;
        sum->steps_kept += ri.steps_kept;
        sum->steps_total += ri.steps_total;
        sum->steps_dropped += ri.steps_dropped;
        if (ri.steps_dropped && ri.kept_from_ns > sum->kept_from_ns)
            sum->kept_from_ns = ri.kept_from_ns;
    }
    return sum->ring;
}
