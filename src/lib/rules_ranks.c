/*
 * rules_ranks.c - ranks.*: the rank the others wait for (ranks.straggler)
 * and one rank standing apart in step time, compute time, data wait or
 * peak GPU memory (ranks.imbalance); docs/DIAGNOSIS.md, "ranks.*".
 *
 * In synchronous data parallelism every rank's step lasts as long as the
 * slowest rank's: the others wait for it in the gradient all-reduce (the
 * DDP reducer, inside their backward pass) or in a collective the loop
 * calls.  A rank's sync wait is therefore its backward time beyond the
 * shortest backward of all ranks (the same model and batch size: the
 * difference is waiting) plus its time in blocking collectives.  The
 * straggler is the rank that waits least while the others wait; its cause
 * is what it spends more on than the others: data wait, or compute of its
 * own (compute without the sync wait).  A waiting rank is never blamed:
 * with a straggler found, ranks.imbalance judges compute without the sync
 * wait and leaves step time and data wait to ranks.straggler.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of the ranks' values of field f. */
static double ranks_median(const tm_an_rank *r, size_t n, size_t off)
{
    double v[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 64; i++) {
        double x;
        memcpy(&x, (const char *)&r[i] + off, sizeof x);
        if (!isnan(x))
            v[k++] = x;
    }
    if (!k)
        return NAN;
    qsort(v, k, sizeof *v, cmp_double);
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

/* Each rank's sync wait per step (NAN where unknown): backward beyond the
 * shortest backward of the judged ranks, plus blocking collectives. */
static void sync_waits(const tm_an_rank *R, size_t n, double *wait)
{
    double bmin = INFINITY;
    for (size_t i = 0; i < n; i++)
        if (R[i].steps >= TM_AN_RANK_MIN_STEPS && isfinite(R[i].backward_median_s) &&
            R[i].backward_median_s < bmin)
            bmin = R[i].backward_median_s;
    for (size_t i = 0; i < n; i++) {
        wait[i] = NAN;
        if (R[i].steps < TM_AN_RANK_MIN_STEPS)
            continue;
        double w = 0;
        bool known = false;
        if (isfinite(R[i].backward_median_s) && isfinite(bmin)) {
            w += R[i].backward_median_s - bmin;
            known = true;
        }
        if (isfinite(R[i].collective_median_s)) {
            w += R[i].collective_median_s;
            known = true;
        }
        if (known)
            wait[i] = w;
    }
}

#define STRAGGLER_MAX_RANKS 1024

/* The straggler among R[0..n) (its index), or n: the others' median sync
 * wait (*others) is large enough and this rank waits least. */
static size_t find_straggler(const tm_an_rank *R, size_t n, const double *wait, double *others)
{
    size_t best = n;
    for (size_t i = 0; i < n; i++)
        if (isfinite(wait[i]) && (best == n || wait[i] < wait[best]))
            best = i;
    if (best == n)
        return n;
    double v[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 64; i++)
        if (i != best && isfinite(wait[i]))
            v[k++] = wait[i];
    if (!k)
        return n;
    qsort(v, k, sizeof *v, cmp_double);
    *others = k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
    double step = R[best].step_median_s;
    if (!(*others - wait[best] >= TM_AN_RANK_MIN_DIFF_S) ||
        !(*others - wait[best] >= TM_AN_STRAGGLER_WAIT_SHARE * step))
        return n;
    return best;
}

void tm_rule_ranks_straggler(struct an *an)
{
    const tm_an_rank *R = an->a->ranks;
    size_t n = an->a->nranks;
    if (n < 2 || n > STRAGGLER_MAX_RANKS)
        return;
    double wait[STRAGGLER_MAX_RANKS], others = NAN;
    sync_waits(R, n, wait);
    size_t s = find_straggler(R, n, wait, &others);
    if (s == n)
        return;
    /* What the straggler spends more on than the others (medians of the
     * other judged ranks): data wait, or compute of its own. */
    double dw[64], oc[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k < 64; i++)
        if (i != s && isfinite(wait[i])) {
            dw[k] = R[i].wait_median_s;
            oc[k++] = R[i].compute_median_s - wait[i];
        }
    qsort(dw, k, sizeof *dw, cmp_double);
    qsort(oc, k, sizeof *oc, cmp_double);
    double dw_o = k % 2 ? dw[k / 2] : (dw[k / 2 - 1] + dw[k / 2]) / 2;
    double oc_o = k % 2 ? oc[k / 2] : (oc[k / 2 - 1] + oc[k / 2]) / 2;
    double dw_s = R[s].wait_median_s, oc_s = R[s].compute_median_s - wait[s];
    double d_data = dw_s - dw_o, d_comp = oc_s - oc_o;
    const char *cause = d_data >= d_comp ? "data" : "compute";
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_str(&e, "rank", R[s].label);
    if (R[s].host && R[s].host[0])
        tm_an_ev_str(&e, "host", R[s].host);
    tm_an_ev_str(&e, "cause", cause);
    tm_an_ev_num(&e, "others_sync_wait_s", others);
    tm_an_ev_num(&e, "sync_wait_s", wait[s]);
    tm_an_ev_num(&e, "data_wait_s", dw_s);
    tm_an_ev_num(&e, "others_data_wait_s", dw_o);
    tm_an_ev_num(&e, "own_compute_s", oc_s);
    tm_an_ev_num(&e, "others_own_compute_s", oc_o);
    tm_an_ev_num(&e, "step_time_median_s", R[s].step_median_s);
    tm_an_ev_num(&e, "threshold_share", TM_AN_STRAGGLER_WAIT_SHARE);
    tm_an_ev_key(&e, "per_rank_sync_wait_s");
    tm_buf_add(&e.b, "{", 1);
    for (size_t i = 0; i < n; i++) {
        tm_buf_printf(&e.b, "%s\"", i ? "," : "");
        tm_buf_json_str(&e.b, R[i].label, strlen(R[i].label));
        if (isfinite(wait[i]))
            tm_buf_printf(&e.b, "\":%.6g", wait[i]);
        else
            tm_buf_printf(&e.b, "\":null");
    }
    tm_buf_add(&e.b, "}", 1);
    char title[512], adv[1024], on[96] = "";
    bool hosts = false; /* the ranks ran on more than one host: name the straggler's */
    for (size_t i = 0; i < n && !hosts; i++)
        hosts = R[i].host && R[s].host && strcmp(R[i].host, R[s].host) != 0;
    if (hosts)
        snprintf(on, sizeof on, " on %.80s", R[s].host);
    if (!strcmp(cause, "data"))
        snprintf(title, sizeof title,
                 "rank %s%s is the straggler: the other ranks waited for it %.0f ms per step in "
                 "gradient sync; its data wait is %.0f ms per step against %.0f ms on the others",
                 R[s].label, on, 1e3 * (others - wait[s]), 1e3 * dw_s, 1e3 * dw_o);
    else
        snprintf(title, sizeof title,
                 "rank %s%s is the straggler: the other ranks waited for it %.0f ms per step in "
                 "gradient sync; its own compute is %.0f ms per step against %.0f ms on the "
                 "others",
                 R[s].label, on, 1e3 * (others - wait[s]), 1e3 * oc_s, 1e3 * oc_o);
    if (!strcmp(cause, "data"))
        snprintf(adv, sizeof adv,
                 "Every rank runs at rank %s's pace. Its input is slower: look at that rank's "
                 "input finding, its data shard (sample sizes, a slow file or disk) and its "
                 "DataLoader workers; the other ranks' wait is not theirs to fix.",
                 R[s].label);
    else
        snprintf(adv, sizeof adv,
                 "Every rank runs at rank %s's pace. Its compute is slower: check that rank's "
                 "host (other load, CPU pinning, thermal throttling), its batches (uneven "
                 "lengths) and work only it does (logging, evaluation, checkpoints on rank 0).",
                 R[s].label);
    double share = R[s].step_median_s > 0 ? (others - wait[s]) / R[s].step_median_s : 0;
    tm_an_add(an, share >= 0.25 ? TM_SEV_HIGH : TM_SEV_MEDIUM, TM_CONF_MEDIUM, R[s].rank, &e, title,
              adv);
}

void tm_rule_ranks_imbalance(struct an *an)
{
    tm_an_rank *R = an->a->ranks;
    size_t n = an->a->nranks, ok = 0;
    for (size_t i = 0; i < n; i++)
        if (R[i].steps >= TM_AN_RANK_MIN_STEPS)
            ok++;
    if (n < 2)
        return;
    /* every rank an inference loop (inference.c): no gradient sync */
    const tm_an_summary *S = &an->a->sum;
    bool infer = S->infer_procs > 0 && S->infer_procs >= S->step_procs;
    /* A straggler is ranks.straggler's: the times of a waiting rank are
     * not its own, so only memory is judged here then. */
    bool straggler = false;
    if (n <= STRAGGLER_MAX_RANKS) {
        double wait[STRAGGLER_MAX_RANKS], others;
        sync_waits(R, n, wait);
        straggler = find_straggler(R, n, wait, &others) != n;
    }
    static const struct {
        const char *what;
        size_t off;
        double min_diff;
        bool mem;
    } m[] = {
        {"step time", offsetof(tm_an_rank, step_median_s), TM_AN_RANK_MIN_DIFF_S, false},
        {"compute time", offsetof(tm_an_rank, compute_median_s), TM_AN_RANK_MIN_DIFF_S, false},
        {"data wait", offsetof(tm_an_rank, wait_median_s), TM_AN_RANK_MIN_DIFF_S, false},
        {"peak GPU memory", offsetof(tm_an_rank, peak_reserved), TM_AN_RANK_MEM_MIN_DIFF, true},
    };
    for (size_t k = 0; k < TM_ARRAY_LEN(m); k++) {
        if (!m[k].mem && (ok < 2 || straggler))
            continue;
        double med = ranks_median(R, n, m[k].off);
        if (!(med > 0))
            continue;
        size_t worst = n;
        double wv = 0;
        for (size_t i = 0; i < n; i++) {
            double x;
            memcpy(&x, (const char *)&R[i] + m[k].off, sizeof x);
            if (!m[k].mem && R[i].steps < TM_AN_RANK_MIN_STEPS)
                continue;
            if (x >= med * TM_AN_RANK_RATIO && x - med >= m[k].min_diff && x > wv) {
                wv = x;
                worst = i;
            }
        }
        if (worst == n)
            continue;
        struct ev e;
        tm_an_ev_open(&e);
        tm_an_ev_str(&e, "measure", m[k].what);
        tm_an_ev_str(&e, "rank", R[worst].label);
        tm_an_ev_num(&e, "value", wv);
        tm_an_ev_num(&e, "median_of_ranks", med);
        tm_an_ev_num(&e, "ratio", wv / med);
        tm_an_ev_num(&e, "threshold", TM_AN_RANK_RATIO);
        tm_an_ev_key(&e, "per_rank");
        tm_buf_add(&e.b, "{", 1);
        for (size_t i = 0; i < n; i++) {
            double x;
            memcpy(&x, (const char *)&R[i] + m[k].off, sizeof x);
            tm_buf_printf(&e.b, "%s\"", i ? "," : "");
            tm_buf_json_str(&e.b, R[i].label, strlen(R[i].label));
            if (isfinite(x))
                tm_buf_printf(&e.b, "\":%.6g", x);
            else
                tm_buf_printf(&e.b, "\":null");
        }
        tm_buf_add(&e.b, "}", 1);
        char buf[512];
        if (m[k].mem)
            snprintf(buf, sizeof buf,
                     "rank %s stands apart: %s %.2f GiB against a median of %.2f GiB",
                     R[worst].label, m[k].what, wv / TM_AN_GiB, med / TM_AN_GiB);
        else
            snprintf(buf, sizeof buf,
                     "rank %s stands apart: %s %.3f s against a median of %.3f s (%.0f%% more)",
                     R[worst].label, m[k].what, wv, med, 100 * (wv / med - 1));
        tm_an_add(an, m[k].mem ? TM_SEV_LOW : TM_SEV_MEDIUM, TM_CONF_MEDIUM, R[worst].rank, &e, buf,
                  m[k].mem ? "One rank holds more memory: uneven batches (variable lengths), "
                             "rank-0-only work (logging, evaluation, checkpoints) or a model "
                             "part placed on one device."
                  : infer  ? "The ranks of an inference job do not wait for each other at each "
                             "batch, but the job is done (and a final gather waits) when the "
                             "slowest rank is: check that rank's host (disk, CPU, thermal "
                             "throttling) and its data shard (sample sizes), or hand out the "
                             "work in smaller pieces."
                           : "All ranks wait for the slowest at every gradient sync: check "
                             "that rank's host (disk, CPU, thermal throttling), its data "
                             "shard (sample sizes) and rank-0-only work in the loop.");
    }
}
