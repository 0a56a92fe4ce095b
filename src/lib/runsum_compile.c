/*
 * runsum_compile.c - torch.compile's compilations in a run, for
 * steps.compile (docs/DIAGNOSIS.md).
 *
 * The agent registers callbacks with torch._dynamo (_trainmon.c
 * compile_enter/compile_exit) and writes one compile event at the end of
 * each compilation: its wall time (dur_s), the thread's CPU time, the steps
 * begun so far (step: the compilation ran in step step-1, counted from 0),
 * whether the training thread compiled (training), what started it
 * (trigger: DYNAMO, a frame traced; LAZY_BACKWARD, a backward graph at its
 * first run) and torch's compile id, "F/N": frame F's compilation N, 0 the
 * first and 1.. recompilations after a guard failed (a new input shape,
 * dtype, a changed global), "!A/F/N" under compiled autograd.
 *
 * The compilation runs inside the step that hit it: the step model counts
 * it as compute.  Here it is added up:
 *
 *   - per process, the training thread's compilations and their time
 *     (those of other threads are counted apart: compile_bg_n);
 *   - the process that compiled longest is summarized (every rank of a
 *     DDP job compiles the same graphs);
 *   - its loop time: complete training steps (warm-up included, where the
 *     first compilation falls) and eval runs;
 *   - the recompilations (N >= 1 of a DYNAMO compile), the frames and the
 *     most compilations one frame took (torch's recompile_limit, 8 by
 *     default, then runs that frame uncompiled);
 *   - the compilations after warm-up (begun inside a judged training
 *     step of that process: its number TM_STEP_WARMUP or later): stalls
 *     in the middle of training, and the first step that had one.  By the
 *     time the compilation began, not by its event's step (the steps
 *     begun so far, which a loop without a DataLoader begins at its
 *     boundary, one later than a DataLoader's).
 *
 * The events are the writer's text and not trusted: a number that does
 * not parse, or is negative, is unknown (tm_event_num); an id that
 * does not parse is no recompilation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runsum.h"
#include "trainmon.h"
#include "util.h"

#define COMPILE_FRAMES 64 /* distinct frames tracked (more: counted, not told apart) */

static bool is_compile(const tm_run_event *e)
{
    return e->name && strcmp(e->name, "compile") == 0 && e->json;
}

bool tm_runsum_is_loop_compile(const tm_run_event *e)
{
    return is_compile(e) && strstr(e->json, "\"training\":true") != NULL;
}

/* A non-negative decimal of at most 9 digits at *p (advanced past it), or -1. */
static long digits(const char **p, const char *end)
{
    long v = 0;
    int n = 0;
    while (*p < end && **p >= '0' && **p <= '9' && n < 9) {
        v = v * 10 + (**p - '0');
        (*p)++;
        n++;
    }
    return n ? v : -1;
}

/* The frame and its compilation number of the event's id ("F/N" or
 * "!A/F/N"); false when it does not parse. */
static bool compile_id(const char *js, long *frame, long *n)
{
    const char *k = strstr(js, "\"id\":\"");
    if (!k)
        return false;
    const char *p = k + 6, *end = p;
    while (*end && *end != '"' && end - p < 64)
        end++;
    if (*end != '"')
        return false;
    if (p < end && *p == '!') { /* compiled autograd: !A/F/N */
        p++;
        if (digits(&p, end) < 0 || p >= end || *p != '/')
            return false;
        p++;
    }
    long f = digits(&p, end);
    if (f < 0 || p >= end || *p != '/')
        return false;
    p++;
    long c = digits(&p, end);
    if (c < 0 || p != end)
        return false;
    *frame = f;
    *n = c;
    return true;
}

/* A compilation: when it began (ns) and its duration (s) */
struct cbeg {
    int64_t b;
    double d;
};

static int by_begin(const void *x, const void *y)
{
    const struct cbeg *p = x, *q = y;
    return (p->b > q->b) - (p->b < q->b);
}

static double event_dur(const tm_run_event *e)
{
    double d = tm_event_num(e->json, "dur_s");
    return isfinite(d) ? d : 0;
}

void tm_runsum_compiles(const tm_runview *v, tm_an_summary *S)
{
    S->compile_n = S->compile_recompiles = S->compile_late_n = S->compile_bg_n = 0;
    S->compile_frames = S->compile_max_per_frame = 0;
    S->compile_s = S->compile_late_s = 0;
    S->compile_loop_s = S->compile_longest_s = S->compile_first_late_step = NAN;
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev), n = 0;
    for (size_t i = 0; i < nev; i++)
        n += is_compile(&ev[i]);
    if (n == 0 || v->nsrc == 0)
        return;
    double *per = calloc(v->nsrc, sizeof *per);
    struct cbeg *beg = malloc(n * sizeof *beg);
    tm_run_loop *L = tm_runsum_loops(v);
    if (!per || !beg || !L)
        goto out;
    for (size_t i = 0; i < nev; i++) {
        if (!is_compile(&ev[i]) || ev[i].source >= v->nsrc)
            continue;
        if (!tm_runsum_is_loop_compile(&ev[i])) {
            S->compile_bg_n++;
            continue;
        }
        per[ev[i].source] += event_dur(&ev[i]);
    }
    size_t best = v->nsrc;
    for (size_t s = 0; s < v->nsrc; s++)
        if (per[s] > 0 && (best == v->nsrc || per[s] > per[best]))
            best = s;
    if (best == v->nsrc)
        goto out;
    long fid[COMPILE_FRAMES];
    size_t fcount[COMPILE_FRAMES], nf = 0, nb = 0;
    double longest = 0;
    for (size_t i = 0; i < nev; i++) {
        if (!tm_runsum_is_loop_compile(&ev[i]) || ev[i].source != best)
            continue;
        double d = event_dur(&ev[i]);
        S->compile_n++;
        S->compile_s += d;
        if (d > longest)
            longest = d;
        if (d < 3.2e7) /* a year: a text may say anything */
            beg[nb++] = (struct cbeg){tm_sat_sub64(ev[i].t_ns, (int64_t)llround(d * 1e9)), d};
        long f, c;
        if (!strstr(ev[i].json, "\"trigger\":\"DYNAMO\"") || !compile_id(ev[i].json, &f, &c))
            continue;
        S->compile_recompiles += c > 0;
        size_t k = 0;
        while (k < nf && fid[k] != f)
            k++;
        if (k == nf && nf < COMPILE_FRAMES) {
            fid[nf] = f;
            fcount[nf++] = 0;
        }
        if (k < nf && ++fcount[k] > S->compile_max_per_frame)
            S->compile_max_per_frame = fcount[k];
    }
    qsort(beg, nb, sizeof *beg, by_begin);
    /* each judged training step of that process: the compilations begun in it */
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st);
    for (size_t i = 0; i < nst; i++) {
        const tm_inproc_step *x = &st[i].s;
        if (st[i].source != best || x->step < TM_STEP_WARMUP || x->phase == TM_STEP_EVAL ||
            x->end_ns <= x->start_ns)
            continue;
        size_t lo = 0, hi = nb;
        while (lo < hi) { /* the first begun at or after the step's start */
            size_t mid = lo + (hi - lo) / 2;
            if (beg[mid].b < x->start_ns)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t k = lo; k < nb && beg[k].b < x->end_ns; k++) {
            S->compile_late_n++;
            S->compile_late_s += beg[k].d;
            if (!(S->compile_first_late_step <= (double)x->step))
                S->compile_first_late_step = (double)x->step;
        }
    }
    S->compile_frames = nf;
    S->compile_longest_s = longest;
    S->compile_loop_s = L[best].train_s + L[best].eval_s;
out:
    free(per);
    free(beg);
    free(L);
}

double *tm_runsum_compile_spans(const tm_runview *v, uint32_t s, size_t *n)
{
    *n = 0;
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev), k = 0;
    for (size_t i = 0; i < nev; i++)
        k += is_compile(&ev[i]) && ev[i].source == s;
    if (k == 0)
        return NULL;
    double *sp = malloc(2 * k * sizeof *sp);
    if (!sp)
        return NULL;
    for (size_t i = 0; i < nev; i++) {
        if (!tm_runsum_is_loop_compile(&ev[i]) || ev[i].source != s)
            continue;
        double d = event_dur(&ev[i]);
        if (!(d > 0) || d >= 3.2e7)
            continue;
        sp[2 * *n] = (double)ev[i].t_ns - d * 1e9; /* written at its end */
        sp[2 * *n + 1] = (double)ev[i].t_ns;
        (*n)++;
    }
    return sp; /* {begin, end} pairs, in the order written */
}
