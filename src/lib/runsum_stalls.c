/*
 * runsum_stalls.c - steps that stall every K steps, for steps.stalls
 * (docs/DIAGNOSIS.md).
 *
 * The medians every other finding reads hide a step in K that takes ten
 * times as long: a loop that logs to a tracker, syncs a metric with
 * .item() or samples text every 50 steps spends its time there, and the
 * median step says nothing of it.  Per training process, over its judged
 * training steps (warm-up left out; eval runs and blocking checkpoint
 * saves are no step time already):
 *
 *   - a stall is a step of at least TM_AN_STALL_FACTOR times the median
 *     and TM_AN_STALL_MIN_S more;
 *   - its excess over the median is explained when a longer data wait
 *     than the median's, or the garbage collector's pauses inside it
 *     (runsum_gc.c), make half of it: the input verdicts and gc.pauses say
 *     those; the rest is the loop's own work at that step;
 *   - the steps from one unexplained stall to the next: their median, and
 *     whether they are regular (TM_AN_STALL_REGULAR within one step of it).
 *
 * The process whose unexplained excess is largest is summarized.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "runsum.h"
#include "trainmon.h"

/* The collector's pause time inside [a, b] (spans sorted, none nested) */
static double gc_in(const double *sp, size_t n, double a, double b)
{
    double t = 0;
    for (size_t i = 0; i < n && sp[2 * i] < b; i++)
        if (sp[2 * i + 1] > a)
            t += fmin(sp[2 * i + 1], b) - fmax(sp[2 * i], a);
    return t;
}

struct proc {
    size_t steps, n, explained, nat;
    double excess, step_s, median_s, every;
    double total_s, prep_excess; /* judged steps' time; the stalls' excess in preparation */
    bool regular;
    uint64_t at[5];
};

/* Source s's stalls into *P (P->steps 0: too few judged steps) */
static void stalls_of(const tm_runview *v, uint32_t s, double *d, double *w, uint64_t *no,
                      struct proc *P)
{
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st), k = 0;
    memset(P, 0, sizeof *P);
    P->every = P->median_s = P->step_s = NAN;
    size_t nprep = 0;
    for (size_t i = 0; i < nst; i++) {
        double dd, ww;
        if (st[i].source != s || !tm_step_times(&st[i].s, &dd, &ww) ||
            st[i].s.step < TM_STEP_WARMUP)
            continue;
        d[k] = dd;
        w[k] = ww;
        no[k++] = i; /* the step's index in st */
        P->total_s += dd;
        nprep += st[i].s.prep_ns >= 0 && st[i].s.batches == 0;
    }
    if (k < TM_AN_STALL_MIN_STEPS)
        return;
    P->steps = k;
    double *tmp = malloc(k * sizeof *tmp);
    if (!tmp)
        return;
    memcpy(tmp, d, k * sizeof *tmp);
    double m = tm_runsum_median(tmp, k);
    memcpy(tmp, w, k * sizeof *tmp);
    double mw = tm_runsum_median(tmp, k);
    P->step_s = m;
    double T = fmax(TM_AN_STALL_FACTOR * m, m + TM_AN_STALL_MIN_S);
    size_t nsp = 0;
    double *sp = tm_runsum_gc_spans(v, s, &nsp);
    size_t ns = 0;
    for (size_t j = 0; j < k; j++) {
        if (!(d[j] > T))
            continue;
        const tm_inproc_step *x = &st[no[j]].s;
        double ex = d[j] - m;
        double gc = sp ? gc_in(sp, nsp, (double)x->start_ns, (double)x->end_ns) / 1e9 : 0;
        /* a longer wait explains it, but for a loop that prepares its own
         * batches (no DataLoader): its "wait" is its own code from the
         * optimizer step to the next forward, where a loop logs, samples
         * or evaluates every K steps (nanoGPT logs there) */
        bool prep = x->prep_ns >= 0 && x->batches == 0 && 2 * nprep > k;
        double wex = fmax(0, w[j] - mw);
        double own = ex - (prep ? 0 : wex) - gc;
        if (own < 0.5 * ex) {
            P->explained++;
            continue;
        }
        P->excess += own;
        if (prep)
            P->prep_excess += fmin(wex, own);
        tmp[ns] = d[j];
        /* reuse w[] for the stalls' step numbers (j only grows past them) */
        w[ns++] = (double)x->step;
    }
    free(sp);
    P->n = ns;
    if (ns == 0) {
        free(tmp);
        return;
    }
    P->median_s = tm_runsum_median(tmp, ns);
    for (size_t j = 0; j < ns && j < 5; j++)
        P->at[P->nat++] = (uint64_t)w[j];
    size_t ng = 0;
    for (size_t j = 1; j < ns; j++)
        tmp[ng++] = w[j] - w[j - 1];
    if (ng > 0) {
        double *g = malloc(ng * sizeof *g);
        if (g) {
            memcpy(g, tmp, ng * sizeof *g);
            P->every = tm_runsum_median(g, ng);
            size_t near = 0;
            for (size_t j = 0; j < ng; j++)
                near += fabs(tmp[j] - P->every) <= 1;
            P->regular = P->every >= 2 && (double)near >= TM_AN_STALL_REGULAR * (double)ng;
            free(g);
        }
    }
    free(tmp);
}

void tm_runsum_stalls(const tm_runview *v, tm_an_summary *S)
{
    S->stall_steps = S->stall_n = S->stall_explained = S->stall_nat = 0;
    S->stall_excess_s = 0;
    S->stall_step_s = S->stall_median_s = S->stall_loop_s = S->stall_share = NAN;
    S->stall_every = NAN;
    S->stall_regular = false;
    S->stall_wait_fraction = 0;
    S->stall_src = UINT32_MAX;
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st);
    if (nst < TM_AN_STALL_MIN_STEPS || v->nsrc == 0)
        return;
    double *d = malloc(nst * sizeof *d), *w = malloc(nst * sizeof *w);
    uint64_t *no = malloc(nst * sizeof *no);
    tm_run_loop *L = tm_runsum_loops(v);
    if (!d || !w || !no || !L)
        goto out;
    struct proc best = {0}, P;
    uint32_t bs = UINT32_MAX;
    for (uint32_t s = 0; s < v->nsrc; s++) {
        stalls_of(v, s, d, w, no, &P);
        if (P.explained > S->stall_explained) /* told when no process has others */
            S->stall_explained = P.explained;
        if (P.n > 0 && (bs == UINT32_MAX || P.excess > best.excess)) {
            best = P;
            bs = s;
        }
    }
    if (bs == UINT32_MAX)
        goto out;
    S->stall_steps = best.steps;
    S->stall_n = best.n;
    S->stall_explained = best.explained;
    S->stall_excess_s = best.excess;
    S->stall_step_s = best.step_s;
    S->stall_median_s = best.median_s;
    S->stall_loop_s = L[bs].train_s + L[bs].eval_s;
    if (S->stall_loop_s > 0)
        S->stall_share = best.excess / S->stall_loop_s;
    S->stall_every = best.every;
    S->stall_regular = best.regular;
    S->stall_nat = best.nat;
    memcpy(S->stall_at, best.at, sizeof S->stall_at);
    S->stall_src = bs;
    /* the stalls steps.stalls claims are no batch preparation of a loop
     * without a DataLoader: its data wait is read without them, as without
     * the collector's pauses (tm_runsum_net_wait) */
    if (best.prep_excess > 0 && best.total_s > 0 && S->stall_n >= TM_AN_STALL_MIN &&
        S->stall_regular && S->stall_share >= TM_AN_GC_SHARE && S->data_wait_fraction > 0) {
        double f = fmin(best.prep_excess / best.total_s, S->data_wait_fraction);
        S->stall_wait_fraction = f;
        tm_runsum_net_wait(S, f / S->data_wait_fraction);
    }
out:
    free(d);
    free(w);
    free(no);
    free(L);
}
