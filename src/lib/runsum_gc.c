/*
 * runsum_gc.c - Python's garbage collector's pauses in the training loop,
 * for gc.pauses (docs/DIAGNOSIS.md).
 *
 * The agent times every collection (a C callback in gc.callbacks) and
 * writes one gc.pause event at the end of each full collection
 * (generation 2) and of any other that took 1 ms or more: generation,
 * duration (dur_s), objects collected, the steps written so far, whether
 * the training thread triggered it, and whether automatic collection was
 * on (auto: false is the job's own gc.collect() with the collector
 * disabled).  At exit, gc.totals: every collection's count and time per
 * generation, the objects gc.freeze() moved out of the collector's reach
 * and the thresholds.
 *
 * A collection holds the GIL, so the training thread stops for it wherever
 * it was: the pause stays in the step it fell in (it is the job's time,
 * unlike a checkpoint's, which the step model takes out).  Here, per
 * process, the pauses that began inside its loop (tm_runsum_loops) are
 * added up against its loop time, and laid over its steps:
 *
 *   - the judged training steps a pause began in, and their median
 *     duration against the other steps' (a pause is a stall of one step,
 *     not a slower loop: the median step hides it);
 *   - the pause time inside each judged step's batch preparation (no
 *     DataLoader), so that the input verdict does not read the collector
 *     as slow batch preparation (rules_input.c): the pauses that began in
 *     the step that the agent found inside a preparation span (prep: true;
 *     the span leaves out the loop's zero_grad() and device waits, and a
 *     micro-batch's is after a forward and backward, so it is not
 *     [start, start + prep_ns]), at most the step's prep_ns.  A record of
 *     an agent before prep was written: the pauses' overlap with
 *     [start, start + prep_ns].
 *
 * The process whose pauses took longest is the one summarized; the sum
 * over all processes is kept for DDP (each rank's pause holds the others
 * at the next all-reduce, and the ranks pause at different steps).
 *
 * The events are the writer's text and not trusted: a number that does not
 * parse, or is negative, is unknown (tm_event_num).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runsum.h"
#include "trainmon.h"
#include "util.h"

/* A pause of the loop's: not one inside a blocking checkpoint save or the
 * agent's own work at a boundary (in_save), whose time the step model has
 * already taken out of the steps (checkpoint.blocking counts it), nor one
 * inside a torch.compile compilation (in_compile: the compilation's
 * allocations made it, its time is the compilation's, and steps.compile
 * counts it; the collector's settings are not what would remove it) */
static bool is_pause(const tm_run_event *e)
{
    return e->name && e->json && strcmp(e->name, "gc.pause") == 0 &&
           !strstr(e->json, "\"in_save\":true") && !strstr(e->json, "\"in_compile\":true");
}

/* A pause: [b, e] in ns (the event is written at its end); prep: begun
 * in a preparation span (1), not (0), not said (-1: an older agent's).
 * In integer ns, as the steps: the run's times are the wall clock's
 * (~1.8e18 ns), where a double is 256 ns apart, and a difference of two
 * such doubles was off by as much (the hand-worked numbers of
 * test_rules_gc.c missed by 55 ns a pause in one run of 50). */
struct pause {
    int64_t b, e;
    int prep;
};

static int prep_of(const tm_run_event *e)
{
    return strstr(e->json, "\"prep\":true") ? 1 : strstr(e->json, "\"prep\":false") ? 0 : -1;
}

static int by_begin(const void *x, const void *y)
{
    const struct pause *p = x, *q = y;
    return (p->b > q->b) - (p->b < q->b);
}

/* The agent's gc.unprep event e takes back the prep of the pauses in a
 * micro-batch span no forward ended (the span after the last backward:
 * clipping, logging, the optimizer step): those of its source (p, n,
 * sorted by begin) that began in [t - span_s, t] and were written as
 * prep. */
static void unprep(const tm_run_event *e, struct pause *p, size_t n)
{
    double span;
    if (!n || !e->name || strcmp(e->name, "gc.unprep") != 0 || !e->json ||
        !isfinite(span = tm_event_num(e->json, "span_s")) || span >= 3.2e7)
        return;
    int64_t lo = tm_sat_sub64(e->t_ns, (int64_t)llround(span * 1e9));
    for (size_t k = 0; k < n && p[k].b <= e->t_ns; k++)
        if (p[k].prep > 0 && p[k].b >= lo)
            p[k].prep = 0;
}

/* The first pause ending after t (pauses sorted, none inside another) */
static size_t first_after(const struct pause *p, size_t n, int64_t t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p[mid].e <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The k-th number of the array after "key":[ in js (NAN when absent) */
static double json_arr_num(const char *js, const char *key, int k)
{
    char pat[40];
    snprintf(pat, sizeof pat, "\"%s\":[", key);
    const char *p = strstr(js, pat);
    if (!p)
        return NAN;
    p += strlen(pat);
    for (int i = 0;; i++) {
        char *end;
        double x = strtod(p, &end);
        if (end == p)
            return NAN;
        if (i == k)
            return isfinite(x) && x >= 0 ? x : NAN;
        p = end;
        while (*p == ' ')
            p++;
        if (*p++ != ',')
            return NAN;
    }
}

/* A pause's duration in ns (NAN unknown: at most a year, as a text may
 * say anything) */
static double pause_ns(const tm_run_event *e)
{
    double d = tm_event_num(e->json, "dur_s");
    return isfinite(d) && d < 3.2e7 ? d * 1e9 : NAN;
}

/* Its begin: the event's time less its duration d (ns, pause_ns) */
static int64_t begin_of(const tm_run_event *e, double d)
{
    return tm_sat_sub64(e->t_ns, (int64_t)llround(d));
}

static bool in_loop(const tm_run_loop *l, int64_t b)
{
    return l->lo < l->hi && b >= l->lo && b < l->hi;
}

/* The pauses of source s (ALL: of every process) inside their process's
 * loop, sorted by begin; *n of them */
#define ALL UINT32_MAX
static struct pause *pauses_of(const tm_runview *v, const tm_run_loop *L, uint32_t s, size_t *n)
{
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev), k = 0;
    struct pause *p = malloc((nev ? nev : 1) * sizeof *p);
    if (!p)
        return NULL;
    for (size_t i = 0; i < nev; i++) {
        double d;
        if ((s != ALL && ev[i].source != s) || ev[i].source >= v->nsrc || !is_pause(&ev[i]) ||
            isnan(d = pause_ns(&ev[i])))
            continue;
        int64_t b = begin_of(&ev[i], d);
        if (in_loop(&L[ev[i].source], b))
            p[k++] = (struct pause){b, ev[i].t_ns, prep_of(&ev[i])};
    }
    qsort(p, k, sizeof *p, by_begin);
    for (size_t i = 0; s != ALL && i < nev; i++)
        if (ev[i].source == s)
            unprep(&ev[i], p, k);
    *n = k;
    return p;
}

double *tm_runsum_gc_spans(const tm_runview *v, uint32_t s, size_t *n)
{
    *n = 0;
    tm_run_loop *L = tm_runsum_loops(v);
    struct pause *p = L ? pauses_of(v, L, s, n) : NULL;
    free(L);
    double *sp = p ? malloc((*n ? *n : 1) * 2 * sizeof *sp) : NULL;
    for (size_t i = 0; sp && i < *n; i++) {
        sp[2 * i] = (double)p[i].b;
        sp[2 * i + 1] = (double)p[i].e;
    }
    if (!sp)
        *n = 0;
    free(p);
    return sp; /* {begin, end} pairs */
}

/* The pause time in ns inside step x's batch preparation (x->prep_ns >= 0;
 * q: its process's pauses, sorted): the pauses begun in the step inside a
 * preparation span, or without that word the overlap with
 * [start, start + prep_ns]; at most prep_ns */
static double in_prep(const struct pause *q, size_t nq, const tm_inproc_step *x)
{
    int64_t a = x->start_ns, z = x->end_ns, pe = tm_sat_add64(a, x->prep_ns);
    double g = 0; /* each term exact: at most a pause's duration */
    for (size_t k = first_after(q, nq, a); k < nq && q[k].b < z; k++) {
        if (q[k].prep > 0) /* (clipped at a: the pauses' clock and the steps' differ by ns) */
            g += (double)((q[k].e < z ? q[k].e : z) - (q[k].b > a ? q[k].b : a));
        else if (q[k].prep < 0 && q[k].b < pe)
            g += (double)((q[k].e < pe ? q[k].e : pe) - (q[k].b > a ? q[k].b : a));
    }
    return fmin(g, (double)x->prep_ns);
}

/* The steps of source s: hit by a pause or not, and the pause time in
 * their batch preparation */
static void over_steps(const tm_runview *v, uint32_t s, const struct pause *p, size_t np,
                       tm_an_summary *S)
{
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st), nh = 0, no = 0;
    double *hit = malloc((nst ? nst : 1) * sizeof *hit);
    double *other = malloc((nst ? nst : 1) * sizeof *other);
    double prep = 0, gcprep = 0;
    if (!hit || !other)
        goto out;
    for (size_t i = 0; i < nst; i++) {
        const tm_inproc_step *x = &st[i].s;
        double d;
        if (st[i].source != s || !tm_step_times(x, &d, NULL) || x->step < TM_STEP_WARMUP)
            continue;
        int64_t a = x->start_ns, z = x->end_ns;
        size_t j = first_after(p, np, a);
        bool h = false;
        for (size_t k = j; k < np && p[k].b < z; k++)
            h = h || p[k].b >= a;
        if (h)
            hit[nh++] = d;
        else
            other[no++] = d;
        if (x->prep_ns >= 0) {
            prep += (double)x->prep_ns;
            gcprep += in_prep(p, np, x);
        }
    }
    S->gc_steps = nh + no;
    S->gc_steps_hit = nh;
    S->gc_hit_step_s = tm_runsum_median(hit, nh);
    S->gc_other_step_s = tm_runsum_median(other, no);
    S->gc_prep_s = gcprep / 1e9;
    if (prep > 0)
        S->gc_prep_share = gcprep / prep;
out:
    free(hit);
    free(other);
}

/* Each source's pauses in its loop, bucketed once: the pauses of source s
 * are p[off[s] .. off[s + 1]), sorted (cnt: the counts pauses_of would
 * give, as tm_runsum_gc counted them).  NULL when out of memory. */
static struct pause *pauses_by_source(const tm_runview *v, const tm_run_loop *L, const size_t *cnt,
                                      size_t **off_out)
{
    size_t *off = calloc(v->nsrc + 1, sizeof *off), *fill = calloc(v->nsrc, sizeof *fill);
    struct pause *p = NULL;
    if (!off || !fill)
        goto fail;
    for (size_t s = 0; s < v->nsrc; s++)
        off[s + 1] = off[s] + cnt[s];
    p = malloc((off[v->nsrc] ? off[v->nsrc] : 1) * sizeof *p);
    if (!p)
        goto fail;
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev);
    for (size_t i = 0; i < nev; i++) {
        double d;
        uint32_t s = ev[i].source;
        if (s >= v->nsrc || !is_pause(&ev[i]) || isnan(d = pause_ns(&ev[i])))
            continue;
        int64_t b = begin_of(&ev[i], d);
        if (in_loop(&L[s], b) && fill[s] < cnt[s])
            p[off[s] + fill[s]++] = (struct pause){b, ev[i].t_ns, prep_of(&ev[i])};
    }
    for (size_t s = 0; s < v->nsrc; s++)
        qsort(p + off[s], fill[s], sizeof *p, by_begin);
    for (size_t i = 0; i < nev; i++)
        if (ev[i].source < v->nsrc)
            unprep(&ev[i], p + off[ev[i].source], fill[ev[i].source]);
    free(fill);
    *off_out = off;
    return p;
fail:
    free(off);
    free(fill);
    free(p);
    return NULL;
}

/* A loop whose steps wait mostly on its own batch preparation: the data
 * wait without the pauses inside that preparation (they would stay if it
 * were prefetched).  Pooled as the run's wait is: each process's pause
 * time inside its judged steps' preparation over all processes' judged
 * step time (a process without pauses keeps all of its wait); each rank's
 * row net of its own. */
static void net_of_pauses(const tm_runview *v, const tm_run_loop *L, const size_t *cnt,
                          tm_an_summary *S, tm_an_rank *ranks, size_t nranks)
{
    if (!(S->prep_steps > 0 && 2 * S->prep_steps > S->steps_total) || !(S->data_wait_fraction > 0))
        return;
    size_t *off = NULL;
    struct pause *p = pauses_by_source(v, L, cnt, &off);
    if (!p)
        return;
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st);
    double all_step = 0, all_gc = 0, all_prep = 0;
    for (size_t i = 0; i < nst;) { /* each source's steps are one range */
        size_t j = i;
        while (j < nst && st[j].source == st[i].source)
            j++;
        uint32_t s = st[i].source;
        double step = 0, gc = 0, prep = 0;
        const struct pause *q = s < v->nsrc ? p + off[s] : NULL;
        size_t nq = s < v->nsrc ? off[s + 1] - off[s] : 0;
        for (size_t k = i; k < j; k++) {
            const tm_inproc_step *x = &st[k].s;
            double d;
            if (!tm_step_times(x, &d, NULL) || x->step < TM_STEP_WARMUP)
                continue;
            step += d;
            if (x->prep_ns < 0)
                continue;
            prep += (double)x->prep_ns / 1e9;
            gc += in_prep(q, nq, x) / 1e9;
        }
        all_step += step;
        all_gc += gc;
        all_prep += prep;
        for (size_t r = 0; gc > 0 && step > 0 && r < nranks; r++)
            if (ranks[r].source == s && isfinite(ranks[r].data_wait_fraction))
                ranks[r].data_wait_fraction = fmax(0, ranks[r].data_wait_fraction - gc / step);
        i = j;
    }
    free(p);
    free(off);
    if (!(all_gc > 0) || !(all_step > 0))
        return;
    double f = fmin(all_gc / all_step, S->data_wait_fraction);
    S->gc_wait_fraction = f;
    tm_runsum_net_wait(S, f / S->data_wait_fraction);
    /* a collection is on a CPU all of its time: the preparation's own CPU
     * share is what is left of it (a preparation that sleeps and collects
     * is waiting, not CPU-bound) */
    double g = all_prep > 0 ? fmin(all_gc / all_prep, 1) : 0;
    if (g > 0 && isfinite(S->prep_cpu_share))
        S->prep_cpu_share = g < 1 ? fmax(0, (S->prep_cpu_share - g) / (1 - g)) : NAN;
}

/* The time at least one process was in a loop pause: the union of all
 * processes' (in wall-clock time: a DDP job that collects at the same step
 * on every rank, Megatron-LM's --manual-gc, stalls once, not once a rank) */
static double all_pauses_s(const tm_runview *v, const tm_run_loop *L)
{
    size_t k = 0;
    struct pause *p = pauses_of(v, L, ALL, &k);
    if (!p)
        return NAN;
    double u = 0;
    int64_t hi = INT64_MIN;
    for (size_t i = 0; i < k; i++) {
        if (p[i].e <= hi)
            continue;
        u += (double)(p[i].e - (p[i].b > hi ? p[i].b : hi));
        hi = p[i].e;
    }
    free(p);
    return u / 1e9;
}

void tm_runsum_gc(const tm_runview *v, tm_an_summary *S, tm_an_rank *ranks, size_t nranks)
{
    S->gc_wait_fraction = 0;
    S->gc_src = UINT32_MAX;
    S->gc_procs = S->gc_pauses = S->gc_full = S->gc_manual = 0;
    S->gc_steps = S->gc_steps_hit = S->gc_dropped = 0;
    S->gc_s = S->gc_prep_s = S->gc_ranks_s = 0;
    S->gc_median_s = S->gc_max_s = S->gc_loop_s = S->gc_share = NAN;
    S->gc_hit_step_s = S->gc_other_step_s = S->gc_prep_share = S->gc_every_steps = NAN;
    S->gc_young_s = S->gc_full_all_s = S->gc_frozen = S->gc_threshold0 = NAN;
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev), npause = 0;
    for (size_t i = 0; i < nev; i++)
        npause += is_pause(&ev[i]);
    if (npause == 0 || v->nsrc == 0)
        return;
    tm_run_loop *L = tm_runsum_loops(v);
    double *sum = calloc(v->nsrc, sizeof *sum);
    size_t *cnt = calloc(v->nsrc, sizeof *cnt);
    double *tmp = malloc(npause * sizeof *tmp);
    struct pause *p = NULL;
    if (!L || !sum || !cnt || !tmp)
        goto out;
    for (size_t i = 0; i < nev; i++) {
        double d;
        if (!is_pause(&ev[i]) || ev[i].source >= v->nsrc || isnan(d = pause_ns(&ev[i])))
            continue;
        uint32_t s = ev[i].source;
        if (!in_loop(&L[s], begin_of(&ev[i], d)))
            continue;
        S->gc_procs += cnt[s]++ == 0;
        sum[s] += d / 1e9;
    }
    S->gc_ranks_s = all_pauses_s(v, L);
    uint32_t best = (uint32_t)v->nsrc;
    for (uint32_t s = 0; s < v->nsrc; s++)
        if (cnt[s] && (best == v->nsrc || sum[s] > sum[best]))
            best = s;
    if (best == v->nsrc)
        goto out;
    S->gc_src = best;
    S->gc_s = sum[best];
    S->gc_loop_s = L[best].train_s + L[best].eval_s;
    if (S->gc_loop_s > 0)
        S->gc_share = S->gc_s / S->gc_loop_s;
    /* its pauses: durations, full ones, manual ones, steps between full ones */
    size_t k = 0, ks = 0;
    double *gs = malloc(npause * sizeof *gs), last = NAN;
    for (size_t i = 0; gs && i < nev; i++) {
        double d;
        if (ev[i].source != best || !is_pause(&ev[i]) || isnan(d = pause_ns(&ev[i])))
            continue;
        if (!in_loop(&L[best], begin_of(&ev[i], d)))
            continue;
        tmp[k++] = d / 1e9;
        if (strstr(ev[i].json, "\"auto\":false"))
            S->gc_manual++;
        if (tm_event_num(ev[i].json, "gen") == 2) {
            S->gc_full++;
            double n = tm_event_num(ev[i].json, "step");
            if (!isnan(last) && !isnan(n) && n > last)
                gs[ks++] = n - last;
            last = n;
        }
        if (d / 1e9 > S->gc_max_s || isnan(S->gc_max_s))
            S->gc_max_s = d / 1e9;
    }
    S->gc_pauses = k;
    S->gc_median_s = tm_runsum_median(tmp, k);
    if (gs)
        S->gc_every_steps = tm_runsum_median(gs, ks);
    free(gs);
    /* its steps */
    size_t np = 0;
    p = pauses_of(v, L, best, &np);
    if (p)
        over_steps(v, best, p, np, S);
    /* its totals (the last written: shutdown may write them again) */
    for (size_t i = 0; i < nev; i++) {
        if (ev[i].source != best || !ev[i].name || !ev[i].json ||
            strcmp(ev[i].name, "gc.totals") != 0)
            continue;
        double y0 = json_arr_num(ev[i].json, "time_s", 0);
        double y1 = json_arr_num(ev[i].json, "time_s", 1);
        S->gc_young_s = y0 + y1;
        S->gc_full_all_s = json_arr_num(ev[i].json, "time_s", 2);
        S->gc_frozen = tm_event_num(ev[i].json, "frozen");
        S->gc_threshold0 = json_arr_num(ev[i].json, "threshold", 0);
        double dr = tm_event_num(ev[i].json, "dropped");
        S->gc_dropped = isfinite(dr) && dr < 1e15 ? (size_t)dr : 0;
    }
    net_of_pauses(v, L, cnt, S, ranks, nranks);
out:
    free(L);
    free(sum);
    free(cnt);
    free(tmp);
    free(p);
}
