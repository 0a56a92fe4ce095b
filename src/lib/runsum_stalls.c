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
 *   - a stall is a step of more than TM_AN_STALL_FACTOR times the median
 *     and TM_AN_STALL_MIN_S more;
 *   - its excess over the median is explained when a longer data wait
 *     than the median's, or the garbage collector's pauses inside it
 *     (runsum_gc.c) or its torch.compile compilations (runsum_compile.c:
 *     steps.compile says them), or, in a distributed job, another rank's
 *     blocking checkpoint saves, collector pauses and compilations in its
 *     time (that rank stopped
 *     and this one waited for it at the next collective: rank 0's
 *     torch.save every K steps stalls every other rank every K steps;
 *     checkpoint.blocking and gc.pauses say those), or the model run under
 *     no_grad before the step's training forward beyond its median (an RL
 *     rollout every K steps: steps.no_grad says it), make half of it, or when a new set of
 * DataLoader workers started in it (iter() hands the Dataset to the workers outside __next__:
 * input.worker_startup's steps): the input verdicts and gc.pauses say those; the rest is the loop's
 * own work;
 *   - the steps from one unexplained stall to the next: their median K,
 *     and whether they are regular (TM_AN_STALL_REGULAR of them within
 *     K/10 steps of it, exactly for K < 10: a loop's every-K work comes at
 *     exact steps, random slow steps at K = 2 or 3 do not).
 *
 * A process qualifies when its stalls are regular and cost enough; the
 * qualifying one with the largest excess is summarized (else the largest
 * for the record).  Where qualifying processes prepare their own batches
 * (no DataLoader), their stalls' excess in that preparation is no batch
 * preparation: taken out of the run's data wait (pooled over the
 * processes, as the wait is) and out of each one's row.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "runsum.h"
#include "trainmon.h"
#include "util.h"

/* Per training process of a distributed job (header rank >= 0): where it
 * stopped and held the other ranks at their next collective, its blocking
 * checkpoint saves and its collector's pauses, {begin, end} pairs of wall
 * clock, sorted and merged.  Built once for the run, at the first stall a
 * process's own pauses do not explain. */
struct held {
    double *sp;
    size_t n;
};

static int pair_cmp(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Sorts n {begin, end} pairs and merges those that overlap; returns the
 * pairs left. */
static size_t merge_pairs(double *sp, size_t n)
{
    qsort(sp, n, 2 * sizeof *sp, pair_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && sp[2 * i] <= sp[2 * m - 1]) {
            sp[2 * m - 1] = fmax(sp[2 * m - 1], sp[2 * i + 1]);
            continue;
        }
        sp[2 * m] = sp[2 * i];
        sp[2 * m + 1] = sp[2 * i + 1];
        m++;
    }
    return m;
}

static bool is_rank(const tm_runview *v, uint32_t s)
{
    return s < v->nsrc && v->src[s].header.rank >= 0 && tm_rec_is_training(&v->src[s].header);
}

static struct held *held_build(const tm_runview *v)
{
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev);
    struct held *H = calloc(v->nsrc, sizeof *H);
    size_t *cap = calloc(v->nsrc, sizeof *cap);
    if (!H || !cap)
        goto fail;
    for (size_t i = 0; i < nev; i++) {
        const tm_run_event *e = &ev[i];
        if (!e->name || !e->json || !is_rank(v, e->source))
            continue;
        bool save =
            strcmp(e->name, "checkpoint.save") == 0 && strstr(e->json, "\"blocking\":true") != NULL;
        if (!save && !tm_runsum_is_loop_compile(e) && strcmp(e->name, "gc.pause") != 0)
            continue;
        double d = tm_event_num(e->json, "dur_s");
        if (!(d > 0) || !isfinite(d))
            continue;
        struct held *h = &H[e->source];
        if (h->n == cap[e->source]) {
            size_t c = cap[e->source] ? 2 * cap[e->source] : 16;
            double *np = realloc(h->sp, 2 * c * sizeof *np);
            if (!np)
                goto fail;
            h->sp = np;
            cap[e->source] = c;
        }
        h->sp[2 * h->n] = (double)e->t_ns - d * 1e9; /* written at its end */
        h->sp[2 * h->n + 1] = (double)e->t_ns;
        h->n++;
    }
    for (size_t s = 0; s < v->nsrc; s++)
        if (H[s].n)
            H[s].n = merge_pairs(H[s].sp, H[s].n);
    free(cap);
    return H;
fail:
    if (H)
        for (size_t s = 0; s < v->nsrc; s++)
            free(H[s].sp);
    free(H);
    free(cap);
    return NULL;
}

static void held_free(struct held *H, size_t nsrc)
{
    if (!H)
        return;
    for (size_t s = 0; s < nsrc; s++)
        free(H[s].sp);
    free(H);
}

/* Appends to *out (grown as needed) the parts inside [a, b] of the sorted,
 * merged pairs sp[0..n); false when out of memory. */
static bool clip_into(const double *sp, size_t n, double a, double b, double **out, size_t *no,
                      size_t *cap)
{
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first that ends after a */
        size_t mid = lo + (hi - lo) / 2;
        if (sp[2 * mid + 1] <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < n && sp[2 * i] < b; i++) {
        if (*no == *cap) {
            size_t c = *cap ? 2 * *cap : 16;
            double *np = realloc(*out, 2 * c * sizeof *np);
            if (!np)
                return false;
            *out = np;
            *cap = c;
        }
        (*out)[2 * *no] = fmax(sp[2 * i], a);
        (*out)[2 * *no + 1] = fmin(sp[2 * i + 1], b);
        (*no)++;
    }
    return true;
}

/* The time inside [a, b] that source s's own collector pauses (gc) or
 * another rank's saves and pauses (H) hold, each instant once. */
static double held_in(const tm_runview *v, uint32_t s, const double *gc, size_t ngc,
                      const struct held *H, double a, double b)
{
    double *pc = NULL, t = 0;
    size_t n = 0, cap = 0;
    bool ok = clip_into(gc, ngc, a, b, &pc, &n, &cap);
    for (uint32_t p = 0; ok && H && is_rank(v, s) && p < v->nsrc; p++)
        if (p != s && H[p].n)
            ok = clip_into(H[p].sp, H[p].n, a, b, &pc, &n, &cap);
    if (ok && n) {
        n = merge_pairs(pc, n);
        for (size_t i = 0; i < n; i++)
            t += pc[2 * i + 1] - pc[2 * i];
    }
    free(pc);
    return t;
}

/* Where source s itself stopped: its collector's pauses and its
 * compilations (steps.compile says those), sorted and merged; NULL and
 * *n 0 when none (or out of memory). */
static double *own_spans(const tm_runview *v, uint32_t s, size_t *n)
{
    size_t ng = 0, nc = 0;
    double *gc = tm_runsum_gc_spans(v, s, &ng);
    double *cs = tm_runsum_compile_spans(v, s, &nc);
    *n = 0;
    if (!nc) {
        free(cs);
        *n = gc ? ng : 0;
        return gc;
    }
    double *all = realloc(gc, 2 * (ng + nc) * sizeof *all);
    if (!all) {
        free(gc);
        free(cs);
        return NULL;
    }
    memcpy(all + 2 * ng, cs, 2 * nc * sizeof *cs);
    free(cs);
    *n = merge_pairs(all, ng + nc);
    return all;
}

/* The model run under no_grad before the step's training forward, s */
static double nograd_of(const tm_inproc_step *y)
{
    return y->nograd_calls > 0 && y->nograd_ns > 0 ? (double)y->nograd_ns / 1e9 : 0;
}

struct proc {
    size_t steps, n, explained, nat;
    double excess, step_s, median_s, every;
    double total_s, prep_excess; /* judged steps' time; the stalls' excess in preparation */
    bool regular;
    uint64_t at[5];
};

/* Scratch of the size of the run's steps */
struct scratch {
    double *d, *w, *tmp, *nos;
    size_t *ix;
};

/* The stalls of source s, whose steps are st[0..n) (marks: the steps a
 * new worker set started in, or NULL; *H: the ranks' saves and pauses,
 * built at the first stall) into *P (P->steps 0: too few) */
static void stalls_of(const tm_runview *v, uint32_t s, const tm_run_step *st, size_t n,
                      const unsigned char *marks, struct held **H, bool *H_read, struct scratch *x,
                      bool ng_said, struct proc *P)
{
    memset(P, 0, sizeof *P);
    P->every = P->median_s = P->step_s = NAN;
    size_t k = 0, nprep = 0;
    for (size_t i = 0; i < n; i++) {
        double dd, ww;
        if (!tm_step_times(&st[i].s, &dd, &ww) || st[i].s.step < TM_STEP_WARMUP)
            continue;
        x->d[k] = dd;
        x->w[k] = ww;
        x->ix[k++] = i;
        P->total_s += dd;
        nprep += st[i].s.prep_ns >= 0 && st[i].s.batches == 0;
    }
    if (k < TM_AN_STALL_MIN_STEPS)
        return;
    P->steps = k;
    memcpy(x->tmp, x->d, k * sizeof *x->tmp);
    double m = tm_runsum_median(x->tmp, k);
    memcpy(x->tmp, x->w, k * sizeof *x->tmp);
    double mw = tm_runsum_median(x->tmp, k);
    P->step_s = m;
    /* the model run under no_grad before the training forward (an RL
     * rollout every K steps), beyond its median: where steps.no_grad says
     * it (else a stall says the periodic work) */
    for (size_t j = 0; j < k; j++)
        x->tmp[j] = ng_said ? nograd_of(&st[x->ix[j]].s) : 0;
    double mng = tm_runsum_median(x->tmp, k);
    double T = fmax(TM_AN_STALL_FACTOR * m, m + TM_AN_STALL_MIN_S);
    bool own_prep = 2 * nprep > k;
    double *sp = NULL; /* the collector's pauses, read at the first stall */
    size_t nsp = 0, ns = 0;
    bool sp_read = false;
    /* Two passes: the second leaves out the stalls far smaller than the
     * median one (TM_AN_STALL_NOISE of its excess): random slow steps of a
     * busy machine beside a loop's every-K work, which broke the gaps'
     * regularity (one such step between two logs of 0.3 s, 10 steps
     * apart, and the logs read as 71% batch preparation). */
    double cut = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t explained = 0;
        double excess = 0, prep_excess = 0;
        ns = 0;
        for (size_t j = 0; j < k; j++) {
            if (!(x->d[j] > T))
                continue;
            const tm_inproc_step *y = &st[x->ix[j]].s;
            if (marks && marks[x->ix[j]]) { /* a new worker set started in it */
                explained++;
                continue;
            }
            if (!sp_read) {
                sp = own_spans(v, s, &nsp);
                sp_read = true;
            }
            if (!*H_read && is_rank(v, s)) {
                *H = held_build(v);
                *H_read = true;
            }
            double ex = x->d[j] - m;
            double gc =
                held_in(v, s, sp, sp ? nsp : 0, *H, (double)y->start_ns, (double)y->end_ns) / 1e9;
            /* a longer wait explains it, but for a loop that prepares its own
             * batches (no DataLoader): its "wait" is its own code from the
             * optimizer step to the next forward, where a loop logs, samples
             * or evaluates every K steps (nanoGPT logs there) */
            bool prep = own_prep && y->prep_ns >= 0 && y->batches == 0;
            double wex = fmax(0, x->w[j] - mw);
            double ng = fmax(0, nograd_of(y) - mng);
            double own = ex - (prep ? 0 : wex) - gc - ng;
            if (own < 0.5 * ex) {
                explained++;
                continue;
            }
            if (ex < cut)
                continue; /* noise beside the every-K stalls: none of theirs */
            excess += own;
            if (prep)
                prep_excess += fmin(wex, own);
            x->tmp[ns] = x->d[j];
            x->nos[ns++] = (double)y->step;
        }
        P->explained = explained;
        P->excess = excess;
        P->prep_excess = prep_excess;
        if (pass == 0 && ns > 0) {
            double med = tm_runsum_median(x->tmp, ns); /* reorders tmp: pass 1 refills it */
            cut = TM_AN_STALL_NOISE * (med - m);
        }
    }
    free(sp);
    P->n = ns;
    if (ns == 0)
        return;
    P->median_s = tm_runsum_median(x->tmp, ns);
    for (size_t j = 0; j < ns && j < 5; j++)
        P->at[P->nat++] = (uint64_t)x->nos[j];
    size_t ng = 0;
    for (size_t j = 1; j < ns; j++)
        x->tmp[ng++] = x->nos[j] - x->nos[j - 1];
    if (ng == 0)
        return;
    memcpy(x->d, x->tmp, ng * sizeof *x->d); /* the median reorders its input */
    P->every = tm_runsum_median(x->d, ng);
    double tol = floor(P->every / 10);
    size_t near = 0;
    for (size_t j = 0; j < ng; j++)
        near += fabs(x->tmp[j] - P->every) <= tol;
    P->regular = P->every >= 2 && (double)near >= TM_AN_STALL_REGULAR * (double)ng;
}

static bool qualifies(const struct proc *P, const tm_run_loop *l)
{
    double loop = l->train_s + l->eval_s;
    return P->n >= TM_AN_STALL_MIN && P->regular && loop > 0 && P->excess / loop >= TM_AN_GC_SHARE;
}

void tm_runsum_stalls(const tm_runview *v, tm_an_summary *S, tm_an_rank *ranks, size_t nranks)
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
    struct scratch x = {malloc(nst * sizeof(double)), malloc(nst * sizeof(double)),
                        malloc(nst * sizeof(double)), malloc(nst * sizeof(double)),
                        malloc(nst * sizeof(size_t))};
    tm_run_loop *L = tm_runsum_loops(v);
    unsigned char *marks = tm_runsum_startup_marks(v);
    struct held *H = NULL; /* the ranks' saves and pauses, at the first stall */
    bool H_read = false;
    /* the run under no_grad is no stall where steps.no_grad says it */
    bool ng_said = S->nograd_share >= TM_AN_NOGRAD_SHARE && !S->infer_procs;
    if (!x.d || !x.w || !x.tmp || !x.nos || !x.ix || !L)
        goto out;
    struct proc best = {0}, P;
    uint32_t bs = UINT32_MAX;
    bool best_q = false;
    double prep_excess = 0, total = 0;
    for (size_t i = 0; i < nst;) { /* each source's steps are one range */
        size_t j = i;
        while (j < nst && st[j].source == st[i].source)
            j++;
        uint32_t s = st[i].source;
        if (s >= v->nsrc) {
            i = j;
            continue;
        }
        stalls_of(v, s, st + i, j - i, marks ? marks + i : NULL, &H, &H_read, &x, ng_said, &P);
        total += P.total_s;
        if (P.explained > S->stall_explained) /* told when no process has others */
            S->stall_explained = P.explained;
        bool q = qualifies(&P, &L[s]);
        if (q && P.prep_excess > 0) {
            prep_excess += P.prep_excess;
            for (size_t r = 0; r < nranks; r++) /* its own row, its own fraction */
                if (ranks[r].source == s && isfinite(ranks[r].data_wait_fraction))
                    ranks[r].data_wait_fraction =
                        fmax(0, ranks[r].data_wait_fraction - P.prep_excess / P.total_s);
        }
        if (P.n > 0 &&
            (bs == UINT32_MAX || (q && !best_q) || (q == best_q && P.excess > best.excess))) {
            best = P;
            bs = s;
            best_q = q;
        }
        i = j;
    }
    if (bs == UINT32_MAX)
        goto out;
    S->stall_steps = best.steps;
    S->stall_n = best.n;
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
    /* the claimed stalls are no batch preparation of a loop without a
     * DataLoader: the run's data wait (pooled: its share of all the judged
     * step time) is read without them, as without the collector's pauses */
    if (prep_excess > 0 && total > 0 && S->data_wait_fraction > 0) {
        double f = fmin(prep_excess / total, S->data_wait_fraction);
        S->stall_wait_fraction = f;
        tm_runsum_net_wait(S, f / S->data_wait_fraction);
    }
out:
    held_free(H, v->nsrc);
    free(x.d);
    free(x.w);
    free(x.tmp);
    free(x.nos);
    free(x.ix);
    free(L);
    free(marks);
}
