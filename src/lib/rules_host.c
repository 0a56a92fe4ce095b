/*
 * rules_host.c - host_mem.*: DataLoader workers whose memory keeps
 * growing, copy-on-read of the parent's Python objects
 * (docs/DIAGNOSIS.md, "host_mem.worker_growth").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "series.h"
#include "util.h"

/* One worker's memory: a steadily rising PSS (or RSS) is copy-on-read. */
struct wgrowth {
    size_t growing, checked;
    double worst_rise, total_rise, worst_rate_per_hour, worst_first;
    unsigned worst_pid;
    const char *what;
};

/* t in seconds, v in bytes, n readings in time order. */
static void check_growth(struct wgrowth *g, const double *t, const double *v, size_t n,
                         unsigned pid, const char *what)
{
    if (n < TM_AN_WORKER_GROWTH_MIN_POINTS || t[n - 1] - t[0] < TM_AN_WORKER_GROWTH_MIN_SPAN_S)
        return;
    g->checked++;
    size_t skip = (size_t)((double)n * TM_AN_GROWTH_WARMUP);
    double slope, r2;
    tm_runsum_fit(t + skip, v + skip, n - skip, &slope, &r2);
    double rise = slope * (t[n - 1] - t[skip]);
    if (!(slope > 0 && r2 >= TM_AN_WORKER_GROWTH_R2 && rise >= TM_AN_WORKER_GROWTH_MIN_BYTES &&
          rise >= TM_AN_WORKER_GROWTH_REL * v[skip]))
        return;
    g->growing++;
    g->total_rise += rise;
    if (rise > g->worst_rise) {
        g->worst_rise = rise;
        g->worst_rate_per_hour = slope * 3600;
        g->worst_pid = pid;
        g->worst_first = v[skip];
        g->what = what;
    }
}

/* A series' readings as (seconds from its first, bytes); with stale,
 * a value equal to the one before is the same reading again (PSS is
 * re-read every 5 s and repeated in between) and is left out. */
static size_t series_points(const tm_run_series *s, bool stale, int64_t from_ns, double *t,
                            double *v)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->v[i]) || s->t_ns[i] < from_ns || (stale && k > 0 && s->v[i] == v[k - 1]))
            continue;
        t[k] = tm_ns_diff_s(s->t_ns[i], s->t_ns[0]);
        v[k++] = s->v[i];
    }
    return k;
}

void tm_rule_host_mem_worker_growth(struct an *an)
{
    const tm_run_worker *wk;
    size_t nwk = tm_run_workers(an->v->r, &wk);
    size_t cap = nwk;
    for (size_t i = 0; i < an->v->nser; i++)
        if (an->v->ser[i].n > cap)
            cap = an->v->ser[i].n;
    double *t = malloc((cap ? cap : 1) * sizeof *t), *v = malloc((cap ? cap : 1) * sizeof *v);
    if (!t || !v) {
        free(t);
        free(v);
        an->nomem = true;
        return;
    }
    /* Each worker's PSS and RSS series, in one pass over the series. */
    const tm_run_series **pss_of = calloc(an->v->nwp ? an->v->nwp : 1, sizeof *pss_of);
    const tm_run_series **rss_of = calloc(an->v->nwp ? an->v->nwp : 1, sizeof *rss_of);
    if (!pss_of || !rss_of) {
        free(pss_of);
        free(rss_of);
        free(t);
        free(v);
        an->nomem = true;
        return;
    }
    for (size_t i = 0; i < an->v->nser; i++) {
        const tm_run_series *s = &an->v->ser[i];
        ptrdiff_t w = tm_runsum_worker_series_index(an->v, s);
        if (w < 0)
            continue;
        if (strcmp(s->name, TM_SER_PROC_PROCESS_PSS_BYTES) == 0 && !pss_of[w])
            pss_of[w] = s;
        else if (strcmp(s->name, TM_SER_PROC_PROCESS_RSS_BYTES) == 0 && !rss_of[w])
            rss_of[w] = s;
    }
    struct wgrowth g = {0};
    /* Per worker: the sampler's PSS when it was read (copy-on-read turns
     * shared pages private: RSS stays, PSS grows), else its RSS, else the
     * RSS in the worker's own records. */
    for (size_t i = 0; i < nwk;) {
        size_t j = i;
        while (j < nwk && wk[j].source == wk[i].source && wk[j].w.pid == wk[i].w.pid)
            j++;
        uint32_t pid = wk[i].w.pid;
        const char *host = an->v->src[wk[i].source].header.host;
        ptrdiff_t w = tm_runsum_worker_index(an->v, pid, host);
        const tm_run_series *pss = w >= 0 ? pss_of[w] : NULL;
        const tm_run_series *rss = w >= 0 ? rss_of[w] : NULL;
        /* From the worker's first batch on: a worker started by spawn or
         * forkserver imports torch and the job's module first, a rise of
         * 100 MiB or more that is start-up, not growth. */
        int64_t from = wk[i].w.end_ns;
        for (size_t x = i; x < j; x++)
            if (wk[x].w.end_ns < from)
                from = wk[x].w.end_ns;
        size_t k = 0;
        const char *what = "pss";
        if (pss)
            k = series_points(pss, true, from, t, v);
        if (k < TM_AN_WORKER_GROWTH_MIN_POINTS && rss) {
            k = series_points(rss, false, from, t, v);
            what = "rss";
        }
        if (k < TM_AN_WORKER_GROWTH_MIN_POINTS) {
            k = 0;
            what = "rss";
            for (size_t x = i; x < j; x++)
                if (!isnan(wk[x].w.rss_bytes)) {
                    t[k] = tm_ns_diff_s(wk[x].w.end_ns, wk[i].w.end_ns);
                    v[k++] = wk[x].w.rss_bytes;
                }
        }
        check_growth(&g, t, v, k, pid, what);
        i = j;
    }
    free(pss_of);
    free(rss_of);
    free(t);
    free(v);
    if (!g.growing)
        return;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_num(&e, "workers_growing", (double)g.growing);
    tm_an_ev_num(&e, "workers_checked", (double)g.checked);
    tm_an_ev_num(&e, "worst_pid", g.worst_pid);
    tm_an_ev_str(&e, "measure", g.what);
    tm_an_ev_num(&e, "worst_rise_bytes", g.worst_rise);
    tm_an_ev_num(&e, "worst_first_bytes", g.worst_first);
    tm_an_ev_num(&e, "worst_bytes_per_hour", g.worst_rate_per_hour);
    tm_an_ev_num(&e, "total_rise_bytes", g.total_rise);
    char buf[512], h1[32], h2[32], adv[1024];
    tm_an_bytes(h1, sizeof h1, g.worst_rise);
    tm_an_bytes(h2, sizeof h2, g.worst_rate_per_hour);
    snprintf(buf, sizeof buf,
             "DataLoader worker memory keeps growing: %zu worker(s), worst +%s (%s per hour)",
             g.growing, h1, h2);
    snprintf(adv, sizeof adv,
             "Copy-on-read (pytorch/pytorch#13246): workers touching the parent's Python objects "
             "(lists, dicts of paths or labels) copy the pages. Keep dataset metadata in numpy "
             "arrays, Arrow or a memory-mapped file instead of Python lists of objects. Growing "
             "%s per hour per worker, the host runs out of memory in a long epoch.",
             h2);
    tm_an_add(an, TM_SEV_MEDIUM, g.checked > 1 ? TM_CONF_HIGH : TM_CONF_MEDIUM, -1, &e, buf, adv);
}
