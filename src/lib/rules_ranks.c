/*
 * rules_ranks.c - ranks.*: one rank standing apart from the others in
 * step time, compute time, data wait or peak GPU memory
 * (docs/DIAGNOSIS.md, "ranks.imbalance").
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

void tm_rule_ranks_imbalance(struct an *an)
{
    tm_an_rank *R = an->a->ranks;
    size_t n = an->a->nranks, ok = 0;
    for (size_t i = 0; i < n; i++)
        if (R[i].steps >= TM_AN_RANK_MIN_STEPS)
            ok++;
    if (n < 2)
        return;
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
        if (!m[k].mem && ok < 2)
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
                           : "All ranks wait for the slowest at every gradient sync: check "
                             "that rank's host (disk, CPU, thermal throttling), its data "
                             "shard (sample sizes) and rank-0-only work in the loop.");
    }
}
