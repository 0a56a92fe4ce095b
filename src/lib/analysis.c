/*
 * analysis.c - findings from a run (DESIGN.md "Analysis"): each rule is a
 * small function over the run's arrays, its thresholds are the named
 * constants of analysis.h, and docs/DIAGNOSIS.md says why each one is
 * what it is.  Every finding carries, as a JSON object, the numbers it was
 * decided on, and advice with numbers where the data gives them.
 *
 * Rules degrade with the data: with only in-process records (no system
 * series), the input rules still tell "keeps up" from "waits", and the
 * per-batch CPU time of the workers (their own records) still finds
 * CPU-bound workers; a storage verdict needs the system series (workers in
 * D state, the disk behind the data), since a worker off CPU may as well
 * be starved of CPU or asleep.  The workers' per-process series are those
 * of the pids in the worker records.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "util.h"

#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * 1024.0 * 1024.0)

/* --- numbers */

static void swapd(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

/* The median (upper middle) of a[0..n), which is reordered; NAN when n is
 * 0.  Wirth's selection: the arrays hold a few hundred thousand steps. */
static double median_inplace(double *a, size_t n)
{
    if (n == 0)
        return NAN;
    ptrdiff_t k = (ptrdiff_t)(n / 2), l = 0, m = (ptrdiff_t)n - 1;
    while (l < m) {
        double x = a[k];
        ptrdiff_t i = l, j = m;
        do {
            while (a[i] < x)
                i++;
            while (x < a[j])
                j--;
            if (i <= j) {
                swapd(&a[i], &a[j]);
                i++;
                j--;
            }
        } while (i <= j);
        if (j < k)
            l = i;
        if (k < i)
            m = j;
    }
    return a[k];
}

/* Least squares y = a + b x; r2 the coefficient of determination (1 for
 * a flat line of identical points is not a rise: b is 0 then). */
static void fit(const double *x, const double *y, size_t n, double *slope, double *r2)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        sx += x[i];
        sy += y[i];
    }
    double mx = sx / (double)n, my = sy / (double)n;
    for (size_t i = 0; i < n; i++) {
        double dx = x[i] - mx, dy = y[i] - my;
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    *slope = sxx > 0 ? sxy / sxx : 0;
    *r2 = sxx > 0 && syy > 0 ? (sxy * sxy) / (sxx * syy) : 0;
}

struct an {
    const tm_run *r;
    tm_analysis *a;
    const tm_run_source *src;
    size_t nsrc;
    const tm_run_series *ser;
    size_t nser;
    int64_t w0, w1; /* analysis window */
    /* DataLoader worker processes, from their own records: the pids whose
     * per-process series (proc.process_*{pid=P}) are the workers'. */
    struct an_wpid {
        uint32_t pid;
        const char *host;
    } *wp;
    size_t nwp;
    bool nomem;
};

/* Mean of a series' points inside the window; NAN when none. */
static double ser_mean(const struct an *an, const tm_run_series *s, size_t *count)
{
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->t_ns[i] >= an->w0 && s->t_ns[i] <= an->w1 && isfinite(s->v[i])) {
            sum += s->v[i];
            n++;
        }
    if (count)
        *count = n;
    return n ? sum / (double)n : NAN;
}

static double ser_max(const struct an *an, const tm_run_series *s)
{
    double m = NAN;
    for (size_t i = 0; i < s->n; i++)
        if (s->t_ns[i] >= an->w0 && s->t_ns[i] <= an->w1 && (isnan(m) || s->v[i] > m))
            m = s->v[i];
    return m;
}

/* The first series named name whose labels contain "key=value" (key may
 * be NULL: any labels). */
static const tm_run_series *ser_find(const struct an *an, const char *name, const char *key,
                                     const char *value)
{
    char buf[128];
    for (size_t i = 0; i < an->nser; i++) {
        const tm_run_series *s = &an->ser[i];
        if (strcmp(s->name, name) != 0)
            continue;
        if (!key || (tm_labels_get(s->labels, key, buf, sizeof buf) && strcmp(buf, value) == 0))
            return s;
    }
    return NULL;
}

/* Mean over every series called name (all labels): the mean of their
 * means.  *nseries gets how many had points. */
static double ser_mean_all(const struct an *an, const char *name, size_t *nseries)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < an->nser; i++) {
        if (strcmp(an->ser[i].name, name) != 0)
            continue;
        double m = ser_mean(an, &an->ser[i], NULL);
        if (!isnan(m)) {
            sum += m;
            k++;
        }
    }
    if (nseries)
        *nseries = k;
    return k ? sum / (double)k : NAN;
}

static int cmp_wpid(const void *a, const void *b)
{
    uint32_t x = ((const struct an_wpid *)a)->pid, y = ((const struct an_wpid *)b)->pid;
    return x < y ? -1 : x > y;
}

/* The worker pids (with their host: pids repeat across machines), sorted. */
static int collect_worker_pids(struct an *an)
{
    const tm_run_worker *wk;
    size_t nwk = tm_run_workers(an->r, &wk), n = 0;
    an->wp = malloc((nwk ? nwk : 1) * sizeof *an->wp);
    if (!an->wp)
        return -ENOMEM;
    for (size_t i = 0; i < nwk; i++) {
        /* One pid's batches are contiguous in its file. */
        if (i > 0 && wk[i - 1].source == wk[i].source && wk[i - 1].w.pid == wk[i].w.pid)
            continue;
        an->wp[n++] = (struct an_wpid){wk[i].w.pid, an->src[wk[i].source].header.host};
    }
    qsort(an->wp, n, sizeof *an->wp, cmp_wpid);
    an->nwp = n;
    return 0;
}

/* The index in an->wp of the worker (pid, host), or -1. */
static ptrdiff_t worker_index(const struct an *an, uint32_t pid, const char *host)
{
    struct an_wpid key = {pid, NULL};
    const struct an_wpid *hit = bsearch(&key, an->wp, an->nwp, sizeof *an->wp, cmp_wpid);
    if (!hit)
        return -1;
    /* Workers of several hosts may share the pid: back to the first. */
    while (hit > an->wp && hit[-1].pid == pid)
        hit--;
    for (; hit < an->wp + an->nwp && hit->pid == pid; hit++)
        if (strcmp(hit->host, host) == 0)
            return hit - an->wp;
    return -1;
}

/* The index in an->wp of the DataLoader worker whose per-process series s
 * is (proc.process_*{pid=P,comm=C} of the same host), or -1. */
static ptrdiff_t worker_series_index(const struct an *an, const tm_run_series *s)
{
    char buf[32];
    if (!an->nwp || strncmp(s->name, "proc.process_", 13) != 0 ||
        !tm_labels_get(s->labels, "pid", buf, sizeof buf))
        return -1;
    char *end;
    unsigned long v = strtoul(buf, &end, 10);
    if (end == buf || *end || v == 0 || v > UINT32_MAX)
        return -1;
    return worker_index(an, (uint32_t)v, an->src[s->source].header.host);
}

/* --- findings */

/* Evidence: a JSON object built field by field. */
struct ev {
    tm_buf b;
    bool first;
};

static void ev_open(struct ev *e)
{
    tm_buf_init(&e->b, 1u << 20);
    tm_buf_add(&e->b, "{", 1);
    e->first = true;
}

static void ev_key(struct ev *e, const char *k)
{
    tm_buf_printf(&e->b, "%s\"%s\":", e->first ? "" : ",", k);
    e->first = false;
}

static void ev_num(struct ev *e, const char *k, double v)
{
    ev_key(e, k);
    if (!isfinite(v))
        tm_buf_add(&e->b, "null", 4);
    else if (v == floor(v) && fabs(v) < 9e18)
        tm_buf_printf(&e->b, "%.0f", v);
    else
        tm_buf_printf(&e->b, "%.6g", v);
}

static void ev_str(struct ev *e, const char *k, const char *s)
{
    ev_key(e, k);
    tm_buf_add(&e->b, "\"", 1);
    tm_buf_json_str(&e->b, s, strlen(s));
    tm_buf_add(&e->b, "\"", 1);
}

static void add_finding(struct an *an, const char *id, const char *severity,
                        const char *confidence, int32_t rank, struct ev *e, const char *title,
                        const char *advice)
{
    tm_analysis *a = an->a;
    tm_buf_add(&e->b, "}", 1);
    char *ev = e->b.data ? strndup(e->b.data, e->b.len) : NULL;
    tm_buf_free(&e->b);
    char *t = strdup(title), *adv = strdup(advice);
    if (a->nf == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 16;
        tm_finding *f = realloc(a->f, nc * sizeof *f);
        if (!f)
            goto nomem;
        a->f = f;
        a->cap = nc;
    }
    if (!ev || !t || !adv)
        goto nomem;
    a->f[a->nf++] = (tm_finding){.id = id, .severity = severity, .confidence = confidence,
                                 .rank = rank, .title = t, .evidence = ev, .advice = adv};
    return;
nomem:
    free(ev);
    free(t);
    free(adv);
    an->nomem = true;
}

static void human_bytes(char *buf, size_t cap, double v)
{
    if (!isfinite(v))
        snprintf(buf, cap, "n/a");
    else if (fabs(v) >= GiB)
        snprintf(buf, cap, "%.2f GiB", v / GiB);
    else if (fabs(v) >= MiB)
        snprintf(buf, cap, "%.1f MiB", v / MiB);
    else
        snprintf(buf, cap, "%.0f KiB", v / 1024.0);
}

/* --- per-rank summary */

static bool is_training(const tm_run_source *s)
{
    return strncmp(s->header.role, "worker", 6) != 0 && strcmp(s->header.role, "system") != 0;
}

static int summarize_ranks(struct an *an)
{
    const tm_run_step *st;
    const tm_run_capture *cp;
    const tm_run_worker *wk;
    const tm_run_oom *om;
    size_t nst = tm_run_steps(an->r, &st), ncp = tm_run_captures(an->r, &cp);
    size_t nwk = tm_run_workers(an->r, &wk), nom = tm_run_ooms(an->r, &om);
    tm_an_summary *S = &an->a->sum;
    double *all = malloc((nst ? nst : 1) * sizeof *all);
    double *all_c = malloc((nst ? nst : 1) * sizeof *all_c);
    double *tmp = malloc((nst + nwk + 1) * sizeof *tmp);
    an->a->ranks = calloc(an->nsrc ? an->nsrc : 1, sizeof *an->a->ranks);
    if (!all || !all_c || !tmp || !an->a->ranks) {
        free(all);
        free(all_c);
        free(tmp);
        return -ENOMEM;
    }
    size_t nall = 0;
    double sum_wait = 0, sum_dur = 0;
    int64_t w0 = 0, w1 = 0;
    size_t i = 0, j = 0;
    for (uint32_t s = 0; s < an->nsrc; s++) {
        size_t b = i;
        while (i < nst && st[i].source == s)
            i++;
        size_t cb = j;
        while (j < ncp && cp[j].source == s)
            j++;
        bool has_oom = false;
        for (size_t x = 0; x < nom && !has_oom; x++)
            has_oom = om[x].source == s;
        if (!is_training(&an->src[s]) || (i == b && j == cb && !has_oom))
            continue;
        tm_an_rank *R = &an->a->ranks[an->a->nranks++];
        R->source = s;
        R->rank = an->src[s].header.rank;
        R->host = an->src[s].header.host;
        if (R->rank >= 0)
            snprintf(R->label, sizeof R->label, "%d", (int)R->rank);
        else
            snprintf(R->label, sizeof R->label, "%s", an->src[s].header.role);
        double rw = 0, rd = 0;
        size_t k = 0, kc = 0;
        /* Warm-up: the process's first TM_AN_WARMUP_STEPS steps (by start)
         * wait for the workers to start; they stay out of the waiting
         * fraction when later steps remain to judge. */
        int64_t warm_end = INT64_MIN;
        size_t nvalid = 0;
        for (size_t x = b; x < i; x++)
            if (!(st[x].s.flags & TM_STEP_ENDED_AT_EXIT) && st[x].s.end_ns > st[x].s.start_ns)
                nvalid++;
        if (nvalid > TM_AN_WARMUP_STEPS)
            for (size_t q = 0; q < TM_AN_WARMUP_STEPS; q++) {
                int64_t next = INT64_MAX;
                for (size_t x = b; x < i; x++) {
                    const tm_inproc_step *p = &st[x].s;
                    if (!(p->flags & TM_STEP_ENDED_AT_EXIT) && p->end_ns > p->start_ns &&
                        p->start_ns > warm_end && p->start_ns < next)
                        next = p->start_ns;
                }
                warm_end = next;
            }
        for (size_t x = b; x < i; x++) {
            const tm_inproc_step *p = &st[x].s;
            if (p->flags & TM_STEP_ENDED_AT_EXIT || p->end_ns <= p->start_ns)
                continue;
            double d = (double)(p->end_ns - p->start_ns) / 1e9;
            double w = (double)p->data_wait_ns / 1e9;
            if (w > d)
                w = d;
            if (p->start_ns > warm_end) {
                rw += w;
                rd += d;
            }
            tmp[k++] = d;
            all[nall] = d;
            all_c[nall++] = d - w;
            if (!w0 || p->start_ns < w0)
                w0 = p->start_ns;
            if (p->end_ns > w1)
                w1 = p->end_ns;
        }
        R->steps = k;
        R->step_median_s = median_inplace(tmp, k);
        for (size_t x = b; x < i; x++) {
            const tm_inproc_step *p = &st[x].s;
            if (p->flags & TM_STEP_ENDED_AT_EXIT || p->end_ns <= p->start_ns)
                continue;
            double d = (double)(p->end_ns - p->start_ns) / 1e9;
            double w = fmin((double)p->data_wait_ns / 1e9, d);
            tmp[kc++] = d - w;
        }
        R->compute_median_s = median_inplace(tmp, kc);
        kc = 0;
        for (size_t x = b; x < i; x++) {
            const tm_inproc_step *p = &st[x].s;
            if (p->flags & TM_STEP_ENDED_AT_EXIT || p->end_ns <= p->start_ns)
                continue;
            tmp[kc++] = (double)p->data_wait_ns / 1e9;
        }
        R->wait_median_s = median_inplace(tmp, kc);
        R->data_wait_fraction = rd > 0 ? rw / rd : NAN;
        sum_wait += rw;
        sum_dur += rd;
        R->peak_allocated = R->peak_reserved = R->total_device = R->host_rss_peak = NAN;
        R->alloc_retries = NAN;
        double r0 = NAN;
        for (size_t x = cb; x < j; x++) {
            const tm_inproc_capture *c = &cp[x].c;
            double pk = fmax(c->allocated, c->peak_allocated);
            if (!isnan(pk) && !(pk <= R->peak_allocated))
                R->peak_allocated = pk;
            if (!(c->reserved <= R->peak_reserved) && !isnan(c->reserved))
                R->peak_reserved = c->reserved;
            if (!(c->total_device <= R->total_device) && !isnan(c->total_device))
                R->total_device = c->total_device;
            if (!(c->host_rss <= R->host_rss_peak) && !isnan(c->host_rss))
                R->host_rss_peak = c->host_rss;
            if (!isnan(c->num_alloc_retries)) {
                if (isnan(r0))
                    r0 = c->num_alloc_retries;
                R->alloc_retries = c->num_alloc_retries - r0;
            }
        }
        for (size_t x = 0; x < nom; x++)
            if (om[x].source == s && (x == 0 || om[x - 1].source != s || om[x - 1].o.seq != om[x].o.seq))
                R->ooms++;
        if (isnan(R->total_device)) {
            for (size_t x = 0; x < nom; x++)
                if (om[x].source == s && !isnan(om[x].o.total_device))
                    R->total_device = om[x].o.total_device;
        }
        /* Workers of this rank: worker files carry the rank of their parent. */
        int seen[256] = {0};
        size_t nw = 0, kb = 0;
        double cpu = 0, fetch = 0;
        for (size_t x = 0; x < nwk; x++) {
            if (wk[x].rank != R->rank)
                continue;
            const tm_inproc_worker *w = &wk[x].w;
            double ft = (double)(w->end_ns - w->start_ns) / 1e9;
            if (ft < 0)
                continue;
            tmp[kb++] = ft;
            int id = w->worker_id & 255;
            if (!seen[id]++)
                nw++;
            if (x > 0 && wk[x - 1].source == wk[x].source && wk[x - 1].w.pid == w->pid &&
                !isnan(w->cpu_s) && !isnan(wk[x - 1].w.cpu_s) && w->cpu_s >= wk[x - 1].w.cpu_s) {
                cpu += w->cpu_s - wk[x - 1].w.cpu_s;
                fetch += ft;
            }
        }
        R->workers = nw;
        R->worker_batch_median_s = median_inplace(tmp, kb);
        R->worker_busy = fetch > 0 ? cpu / fetch : NAN;
    }
    S->steps_total = nall;
    for (size_t x = 0; x < an->a->nranks; x++)
        if (an->a->ranks[x].steps > S->steps)
            S->steps = an->a->ranks[x].steps;
    S->data_wait_fraction = sum_dur > 0 ? sum_wait / sum_dur : NAN;
    S->compute_median_s = median_inplace(all_c, nall);
    S->step_median_s = median_inplace(all, nall);
    /* All workers together. */
    size_t kb = 0;
    double cpu = 0, fetch = 0;
    int seen[1024] = {0};
    for (size_t x = 0; x < nwk; x++) {
        const tm_inproc_worker *w = &wk[x].w;
        double ft = (double)(w->end_ns - w->start_ns) / 1e9;
        if (ft < 0)
            continue;
        tmp[kb++] = ft;
        int id = (int)((w->worker_id & 255) + 256 * (wk[x].rank & 3));
        if (!seen[id]++)
            S->workers++;
        if (x > 0 && wk[x - 1].source == wk[x].source && wk[x - 1].w.pid == w->pid &&
            !isnan(w->cpu_s) && !isnan(wk[x - 1].w.cpu_s) && w->cpu_s >= wk[x - 1].w.cpu_s) {
            cpu += w->cpu_s - wk[x - 1].w.cpu_s;
            fetch += ft;
        }
    }
    S->worker_batch_median_s = median_inplace(tmp, kb);
    S->worker_busy = fetch > 0 ? cpu / fetch : NAN;
    if (w1 > w0) {
        an->w0 = w0;
        an->w1 = w1;
    } else {
        tm_run_span(an->r, &an->w0, &an->w1);
    }
    S->win_start = an->w0;
    S->win_end = an->w1;
    free(all);
    free(all_c);
    free(tmp);
    return 0;
}

/* --- system signals */

/* Whether dev is among the disks behind the data (watch_target/run_target
 * events name them); true for every disk when no event names any. */
static bool disk_is_target(const struct an *an, const char *dev, bool *any_named)
{
    const tm_run_event *ev;
    size_t n = tm_run_events(an->r, &ev);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", dev);
    bool named = false;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ev[i].name, "watch_target") != 0 && strcmp(ev[i].name, "run_target") != 0)
            continue;
        const char *d = strstr(ev[i].json, "\"disks\"");
        if (!d)
            continue;
        const char *end = strchr(d, ']');
        if (!end)
            continue;
        if (end > strchr(d, '[') + 1)
            named = true;
        const char *hit = strstr(d, pat);
        if (hit && hit < end) {
            *any_named = true;
            return true;
        }
    }
    *any_named = named;
    return !named;
}

static void summarize_system(struct an *an)
{
    tm_an_summary *S = &an->a->sum;
    S->gpu_util_mean = ser_mean_all(an, "gpu.utilization", &S->ngpus);
    /* The disk behind the data: among the target disks, the one that read most. */
    S->disk_read_bps = S->disk_read_bps_max = S->disk_await_s = S->disk_util = NAN;
    S->disk_queue = S->disk_ceiling_share = NAN;
    const tm_run_series *best = NULL;
    double best_mean = -1;
    char dev[40];
    for (size_t i = 0; i < an->nser; i++) {
        const tm_run_series *s = &an->ser[i];
        if (strcmp(s->name, "disk.read_bytes_per_second") != 0 ||
            !tm_labels_get(s->labels, "device", dev, sizeof dev))
            continue;
        bool named;
        if (!disk_is_target(an, dev, &named))
            continue;
        double m = ser_mean(an, s, NULL);
        if (!isnan(m) && m > best_mean) {
            best_mean = m;
            best = s;
        }
    }
    if (best) {
        tm_labels_get(best->labels, "device", S->disk, sizeof S->disk);
        S->disk_read_bps = best_mean;
        S->disk_read_bps_max = ser_max(an, best);
        size_t n = 0, near = 0;
        for (size_t i = 0; i < best->n; i++)
            if (best->t_ns[i] >= an->w0 && best->t_ns[i] <= an->w1) {
                n++;
                if (best->v[i] >= TM_AN_DISK_CEILING_NEAR * S->disk_read_bps_max)
                    near++;
            }
        S->disk_ceiling_share = n ? (double)near / (double)n : NAN;
        uint32_t src = best->source;
        for (size_t i = 0; i < an->nser; i++) {
            const tm_run_series *s = &an->ser[i];
            if (s->source != src || !tm_labels_get(s->labels, "device", dev, sizeof dev) ||
                strcmp(dev, S->disk) != 0)
                continue;
            if (strcmp(s->name, "disk.read_await_seconds") == 0)
                S->disk_await_s = ser_mean(an, s, NULL);
            else if (strcmp(s->name, "disk.utilization") == 0)
                S->disk_util = ser_mean(an, s, NULL);
            else if (strcmp(s->name, "disk.queue_depth") == 0)
                S->disk_queue = ser_mean(an, s, NULL);
        }
    }
    double psi = ser_mean_all(an, "psi.io.some_avg10", NULL);
    double cg = ser_mean_all(an, "cgroup.io.some_avg10", NULL);
    S->psi_io_some = isnan(cg) ? psi : isnan(psi) ? cg : fmax(psi, cg);
    S->psi_cpu_some = ser_mean_all(an, "psi.cpu.some_avg10", NULL);
    /* The workers' per-process series (trainmon run records every process
     * of the tree; the workers are the pids of the worker records). */
    S->worker_d_share = S->worker_cpu_sys = S->worker_read_bps = NAN;
    double d_sum = 0, cpu_sum = 0, rd_bytes = 0;
    size_t d_n = 0, cpu_n = 0, rd_n = 0;
    for (size_t i = 0; i < an->nser; i++) {
        const tm_run_series *s = &an->ser[i];
        if (worker_series_index(an, s) < 0)
            continue;
        if (strcmp(s->name, "proc.process_state_d") == 0) {
            /* Pooled: the share of all worker samples in D state. */
            for (size_t k = 0; k < s->n; k++)
                if (s->t_ns[k] >= an->w0 && s->t_ns[k] <= an->w1 && isfinite(s->v[k])) {
                    d_sum += s->v[k];
                    d_n++;
                }
        } else if (strcmp(s->name, "proc.process_cpu_utilization") == 0) {
            double m = ser_mean(an, s, NULL);
            if (!isnan(m)) {
                cpu_sum += m;
                cpu_n++;
            }
        } else if (strcmp(s->name, "proc.process_read_bytes_per_second") == 0) {
            /* Bytes: each rate over the interval that ends at its sample. */
            for (size_t k = 1; k < s->n; k++)
                if (s->t_ns[k] >= an->w0 && s->t_ns[k] <= an->w1 && isfinite(s->v[k])) {
                    rd_bytes += s->v[k] * (double)(s->t_ns[k] - s->t_ns[k - 1]) / 1e9;
                    rd_n++;
                }
        }
    }
    if (d_n)
        S->worker_d_share = d_sum / (double)d_n;
    if (cpu_n)
        S->worker_cpu_sys = cpu_sum / (double)cpu_n;
    if (rd_n && an->w1 > an->w0)
        S->worker_read_bps = rd_bytes / ((double)(an->w1 - an->w0) / 1e9);
    if (d_n == 0) {
        /* No per-worker series (trainmon watch): the tree's share of
         * processes in D state, the main process left out. */
        const tm_run_series *d = ser_find(an, "proc.processes_d_state", NULL, NULL);
        const tm_run_series *p = NULL;
        char root[32];
        if (d && tm_labels_get(d->labels, "root", root, sizeof root))
            p = ser_find(an, "proc.processes", "root", root);
        if (d && p && p->n == d->n) {
            double sum = 0;
            size_t k = 0;
            for (size_t i = 0; i < d->n; i++)
                if (d->t_ns[i] >= an->w0 && d->t_ns[i] <= an->w1 && p->v[i] > 1) {
                    sum += d->v[i] / (p->v[i] - 1);
                    k++;
                }
            S->worker_d_share = k ? fmin(sum / (double)k, 1.0) : NAN;
        }
    }
}

/* --- rules */

static const char *wait_severity(double f)
{
    return f >= TM_AN_DATA_WAIT_HIGH ? "high" : f >= TM_AN_DATA_WAIT_MEDIUM ? "medium" : "low";
}

static void ev_input_common(struct ev *e, const tm_an_summary *S)
{
    ev_num(e, "data_wait_fraction", S->data_wait_fraction);
    ev_num(e, "threshold", TM_AN_DATA_WAIT_FRACTION);
    ev_num(e, "steps", (double)S->steps_total);
    ev_num(e, "step_time_median_s", S->step_median_s);
    ev_num(e, "compute_time_median_s", S->compute_median_s);
}

static void rule_input(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (isnan(S->data_wait_fraction))
        return;
    struct ev e;
    char buf[1024], adv[2048];
    if (S->data_wait_fraction < TM_AN_DATA_WAIT_FRACTION) {
        ev_open(&e);
        ev_input_common(&e, S);
        snprintf(buf, sizeof buf, "input keeps up: the loop waited for data %.1f%% of the time",
                 100 * S->data_wait_fraction);
        add_finding(an, "input.ok", "info", "high", -1, &e, buf,
                    "Nothing to do for the input pipeline.");
        return;
    }
    /* Votes: which resource the waiting points at.  Storage needs positive
     * evidence: the workers in D state, or the disk behind the data busy
     * while the workers read from a disk at all (a busy disk that the
     * workers do not read from is someone else's). */
    bool workers_read = !(S->worker_read_bps < TM_AN_WORKER_READ_MIN_BPS); /* or unknown */
    bool v_dstate = S->worker_d_share >= TM_AN_WORKER_D_SHARE;
    bool v_await = workers_read && (S->disk_await_s >= TM_AN_DISK_AWAIT_S ||
                                    (S->disk_util >= TM_AN_DISK_UTIL && S->disk_queue >= 1.0));
    bool v_ceiling = workers_read && S->disk_read_bps >= TM_AN_DISK_MIN_BPS &&
                     S->disk_ceiling_share >= TM_AN_DISK_CEILING_SHARE;
    bool v_psi = S->psi_io_some >= TM_AN_PSI_IO_SOME;
    bool storage = v_dstate || v_await || v_ceiling;
    /* CPU: the workers busy on a core while they fetch, or starved of one:
     * tasks waited for a CPU (psi) and the workers' CPU time plus that
     * wait covers their fetch time.  CPU taken by other load still makes
     * the input CPU-bound from the job's point of view. */
    double busy = isnan(S->worker_busy) ? S->worker_cpu_sys : S->worker_busy;
    bool c_busy = S->worker_busy >= TM_AN_WORKER_BUSY;
    bool c_sys = S->worker_cpu_sys >= TM_AN_WORKER_BUSY;
    bool c_starved = !v_dstate && S->psi_cpu_some >= TM_AN_PSI_CPU_SOME &&
                     busy >= TM_AN_WORKER_CPU_MIN && busy + S->psi_cpu_some >= TM_AN_WORKER_BUSY;
    int disk = v_dstate + v_await + v_ceiling + (storage && v_psi);
    int cpu = c_busy + c_sys + c_starved;
    double ratio = S->compute_median_s > 0 ? S->step_median_s / S->compute_median_s : NAN;
    const char *sev = wait_severity(S->data_wait_fraction);
    ev_open(&e);
    ev_input_common(&e, S);
    if (S->disk[0])
        ev_str(&e, "disk", S->disk);
    ev_num(&e, "disk_read_bytes_per_second", S->disk_read_bps);
    ev_num(&e, "disk_read_bytes_per_second_max", S->disk_read_bps_max);
    ev_num(&e, "disk_read_await_s", S->disk_await_s);
    ev_num(&e, "disk_utilization", S->disk_util);
    ev_num(&e, "disk_queue_depth", S->disk_queue);
    ev_num(&e, "disk_ceiling_share", S->disk_ceiling_share);
    ev_num(&e, "psi_io_some", S->psi_io_some);
    ev_num(&e, "psi_cpu_some", S->psi_cpu_some);
    ev_num(&e, "worker_d_state_share", S->worker_d_share);
    ev_num(&e, "worker_read_bytes_per_second", S->worker_read_bps);
    ev_num(&e, "worker_cpu_utilization", S->worker_cpu_sys);
    ev_num(&e, "worker_cpu_per_fetch_second", S->worker_busy);
    ev_num(&e, "worker_batch_time_median_s", S->worker_batch_median_s);
    ev_num(&e, "workers", (double)S->workers);
    ev_key(&e, "votes");
    tm_buf_printf(&e.b, "{\"disk\":%d,\"cpu\":%d}", disk, cpu);
    if (storage && (disk >= 2 || cpu == 0)) {
        double need = S->disk_read_bps * ratio;
        ev_num(&e, "needed_read_bytes_per_second", need);
        char dl[256] = "", got[32], nd[32];
        snprintf(got, sizeof got, "%.1f MB/s", S->disk_read_bps / 1e6);
        snprintf(nd, sizeof nd, "%.1f MB/s", need / 1e6);
        if (S->disk[0])
            snprintf(dl, sizeof dl, "; /dev/%s read %s at %.1f ms await", S->disk, got,
                     S->disk_await_s * 1e3);
        snprintf(buf, sizeof buf,
                 "input-bound, storage-bound: the loop waited for data %.0f%% of the time%s%s",
                 100 * S->data_wait_fraction, dl,
                 v_dstate ? "; the workers were mostly in D state (waiting on I/O)" : "");
        if (isfinite(need) && S->disk[0])
            snprintf(adv, sizeof adv,
                     "To keep the GPU busy the loop needs about %s from /dev/%s; it delivered %s "
                     "(%.0f%% of the need). More workers will not help: put the data on faster "
                     "storage (local NVMe), keep it in the page cache, read larger sequential "
                     "shards (WebDataset, TFRecord) or cache decoded samples.",
                     nd, S->disk, got, need > 0 ? 100 * S->disk_read_bps / need : 0);
        else
            snprintf(adv, sizeof adv,
                     "The workers wait on I/O, not on CPU. Put the data on faster storage, keep "
                     "it in the page cache or read larger sequential shards; record with "
                     "`trainmon run -d DATA` to measure the disk behind it.");
        add_finding(an, "input.disk_bound", sev, disk >= 3 ? "high" : disk == 2 ? "medium" : "low",
                    -1, &e, buf, adv);
        return;
    }
    if (cpu >= 1) {
        double per = S->worker_batch_median_s, comp = S->compute_median_s;
        double need = comp > 0 && isfinite(per) ? ceil(per / comp) : NAN;
        if (need < 1)
            need = 1;
        size_t nw = S->workers;
        if (an->a->nranks > 1 && nw)
            nw = (nw + an->a->nranks - 1) / an->a->nranks;
        ev_num(&e, "workers_per_rank", (double)nw);
        ev_num(&e, "workers_needed", need);
        snprintf(buf, sizeof buf,
                 "input-bound, CPU-bound workers: the loop waited for data %.0f%% of the time; "
                 "a worker takes %.3f s per batch, a step computes in %.3f s",
                 100 * S->data_wait_fraction, per, comp);
        snprintf(adv, sizeof adv,
                 "About %.0f workers per rank would keep up (%.3f s per batch / %.3f s of compute "
                 "per step; now %zu). Set num_workers=%.0f if the machine has %.0f free cores per "
                 "rank; otherwise make each sample cheaper (decode smaller images, move "
                 "augmentation to the GPU, cache decoded data).",
                 need, per, comp, nw, need, need);
        if (c_starved && !c_busy && !c_sys) {
            size_t len = strlen(adv);
            snprintf(adv + len, sizeof adv - len,
                     " The workers were on a core only %.0f%% of their fetch time while tasks "
                     "waited for a CPU %.0f%% of the time: other processes take the cores, so "
                     "free cores first (or pin the job to its own).",
                     100 * busy, 100 * S->psi_cpu_some);
        }
        add_finding(an, "input.cpu_bound", sev, cpu >= 2 ? "high" : "medium", -1, &e, buf, adv);
        return;
    }
    snprintf(buf, sizeof buf, "input-bound: the loop waited for data %.0f%% of the time",
             100 * S->data_wait_fraction);
    if (S->workers == 0)
        snprintf(adv, sizeof adv,
                 "The data loading keeps the GPU waiting. Try DataLoader(num_workers>0, "
                 "pin_memory=True); record with `trainmon run -d DATA` to tell a slow disk from "
                 "slow CPU work.");
    else if (S->worker_busy < TM_AN_WORKER_IDLE && S->worker_d_share < TM_AN_WORKER_D_SHARE)
        snprintf(adv, sizeof adv,
                 "The workers were on a CPU %.0f%% of their fetch time and seldom waited on the "
                 "disk (D state in %.0f%% of samples): they wait on something else, such as a "
                 "remote store, a sleep or a lock, or on CPU taken by other processes. Profile "
                 "one __getitem__ (py-spy dump on a worker pid).",
                 100 * S->worker_busy, 100 * S->worker_d_share);
    else
        snprintf(adv, sizeof adv,
                 "The data loading keeps the GPU waiting, and the recording cannot tell disk "
                 "from CPU. Record with `trainmon run -d DATA` (disk and worker states) for a "
                 "verdict.");
    add_finding(an, "input.data_wait", sev, "low", -1, &e, buf, adv);
}

static void rule_gpu_util(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (isnan(S->gpu_util_mean) || S->gpu_util_mean >= TM_AN_GPU_UTIL)
        return;
    if (!(S->data_wait_fraction < TM_AN_DATA_WAIT_FRACTION) && !isnan(S->data_wait_fraction))
        return; /* the input finding explains the idle GPU */
    struct ev e;
    ev_open(&e);
    ev_num(&e, "gpu_utilization_mean", S->gpu_util_mean);
    ev_num(&e, "threshold", TM_AN_GPU_UTIL);
    ev_num(&e, "gpus", (double)S->ngpus);
    ev_num(&e, "data_wait_fraction", S->data_wait_fraction);
    char buf[256];
    snprintf(buf, sizeof buf, "GPU underutilized: busy %.0f%% of the time while the input keeps up",
             100 * S->gpu_util_mean);
    add_finding(an, "gpu.underutilized", "medium", isnan(S->data_wait_fraction) ? "low" : "high",
                -1, &e, buf,
                "The GPU waits on something other than data: increase the batch size, remove "
                "synchronisations in the loop (.item(), .cpu(), printing tensors), and look at "
                "CPU-side overhead (torch.compile, CUDA graphs, AMP).");
}

/* Captures of source s: [b, e). */
static void captures_of(const tm_run_capture *cp, size_t n, uint32_t s, size_t *b, size_t *e)
{
    size_t i = 0;
    while (i < n && cp[i].source != s)
        i++;
    *b = i;
    while (i < n && cp[i].source == s)
        i++;
    *e = i;
}

/* The per-step floor of allocated (the minimum over each step's captures),
 * as x = step, y = bytes.  Returns the number of points. */
static size_t step_floor(const tm_run_capture *cp, size_t b, size_t e, double *x, double *y)
{
    size_t k = 0;
    for (size_t i = b; i < e; i++) {
        double v = cp[i].c.allocated;
        if (isnan(v))
            continue;
        double st = (double)cp[i].c.step;
        if (k && x[k - 1] == st) {
            if (v < y[k - 1])
                y[k - 1] = v;
        } else {
            x[k] = st;
            y[k] = v;
            k++;
        }
    }
    return k;
}

static void rule_gpu_mem(struct an *an)
{
    const tm_run_capture *cp;
    size_t ncp = tm_run_captures(an->r, &cp);
    const tm_run_oom *om;
    size_t nom = tm_run_ooms(an->r, &om);
    double *x = malloc((ncp ? ncp : 1) * sizeof *x), *y = malloc((ncp ? ncp : 1) * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        an->nomem = true;
        return;
    }
    char buf[1024], adv[2048], h1[32], h2[32], h3[32];
    for (size_t ri = 0; ri < an->a->nranks; ri++) {
        const tm_an_rank *R = &an->a->ranks[ri];
        size_t b, e;
        captures_of(cp, ncp, R->source, &b, &e);
        struct ev ev;
        /* near capacity */
        double peak = fmax(R->peak_reserved, R->peak_allocated);
        if (R->total_device > 0 && peak / R->total_device > TM_AN_MEM_NEAR) {
            ev_open(&ev);
            ev_num(&ev, "peak_reserved_bytes", R->peak_reserved);
            ev_num(&ev, "peak_allocated_bytes", R->peak_allocated);
            ev_num(&ev, "device_total_bytes", R->total_device);
            ev_num(&ev, "peak_ratio", peak / R->total_device);
            ev_num(&ev, "threshold", TM_AN_MEM_NEAR);
            human_bytes(h1, sizeof h1, peak);
            human_bytes(h2, sizeof h2, R->total_device);
            snprintf(buf, sizeof buf, "rank %s: GPU memory near capacity: peak %s of %s (%.0f%%)",
                     R->label, h1, h2, 100 * peak / R->total_device);
            add_finding(an, "gpu_mem.near_capacity", "medium", "high", R->rank, &ev, buf,
                        "One larger batch or sequence away from an OOM: use activation "
                        "(gradient) checkpointing, mixed precision (AMP, bf16), or a smaller "
                        "batch with gradient accumulation.");
        }
        /* growth: the per-step floor keeps rising */
        size_t k = step_floor(cp, b, e, x, y);
        if (k >= TM_AN_GROWTH_MIN_STEPS) {
            size_t skip = (size_t)((double)k * TM_AN_GROWTH_WARMUP);
            if (skip < 1)
                skip = 1;
            double slope, r2;
            fit(x + skip, y + skip, k - skip, &slope, &r2);
            double rise = slope * (x[k - 1] - x[skip]);
            if (slope > 0 && r2 >= TM_AN_GROWTH_R2 && rise >= TM_AN_GROWTH_MIN_BYTES) {
                ev_open(&ev);
                ev_num(&ev, "bytes_per_step", slope);
                ev_num(&ev, "r2", r2);
                ev_num(&ev, "rise_bytes", rise);
                ev_num(&ev, "from_step", x[skip]);
                ev_num(&ev, "to_step", x[k - 1]);
                ev_num(&ev, "allocated_first_bytes", y[skip]);
                ev_num(&ev, "allocated_last_bytes", y[k - 1]);
                double left = R->total_device - fmax(y[k - 1], R->peak_reserved);
                double steps_left = R->total_device > 0 && left > 0 ? floor(left / slope) : NAN;
                ev_num(&ev, "device_total_bytes", R->total_device);
                ev_num(&ev, "steps_until_full", steps_left);
                human_bytes(h1, sizeof h1, slope);
                human_bytes(h2, sizeof h2, rise);
                snprintf(buf, sizeof buf,
                         "rank %s: GPU memory grows steadily: +%s per step (+%s over steps "
                         "%.0f-%.0f): a leak",
                         R->label, h1, h2, x[skip], x[k - 1]);
                if (isfinite(steps_left))
                    snprintf(adv, sizeof adv,
                             "At this rate the device is full in about %.0f more steps. Look for "
                             "tensors kept across steps: a loss accumulated without .item() or "
                             ".detach(), lists of outputs, hooks holding activations.",
                             steps_left);
                else
                    snprintf(adv, sizeof adv,
                             "Look for tensors kept across steps: a loss accumulated without "
                             ".item() or .detach(), lists of outputs, hooks holding activations.");
                add_finding(an, "gpu_mem.growth",
                            R->total_device > 0 && rise >= 0.1 * R->total_device ? "high"
                                                                                 : "medium",
                            r2 >= 0.95 ? "high" : "medium", R->rank, &ev, buf, adv);
            }
        }
        /* fragmentation at peak reserved */
        size_t at = e;
        for (size_t i = b; i < e; i++)
            if (!isnan(cp[i].c.reserved) && !isnan(cp[i].c.inactive_split) &&
                (at == e || cp[i].c.reserved > cp[at].c.reserved))
                at = i;
        if (at < e) {
            const tm_inproc_capture *c = &cp[at].c;
            double ratio = c->reserved > 0 ? c->inactive_split / c->reserved : 0;
            if (ratio >= TM_AN_FRAG_RATIO && c->inactive_split >= TM_AN_FRAG_MIN_BYTES) {
                ev_open(&ev);
                ev_num(&ev, "inactive_split_bytes", c->inactive_split);
                ev_num(&ev, "reserved_bytes", c->reserved);
                ev_num(&ev, "allocated_bytes", c->allocated);
                ev_num(&ev, "ratio", ratio);
                ev_num(&ev, "threshold", TM_AN_FRAG_RATIO);
                ev_num(&ev, "step", (double)c->step);
                human_bytes(h1, sizeof h1, c->inactive_split);
                human_bytes(h2, sizeof h2, c->reserved);
                snprintf(buf, sizeof buf,
                         "rank %s: GPU memory fragmented: %s of %s reserved are unusable split "
                         "blocks (%.0f%%)",
                         R->label, h1, h2, 100 * ratio);
                bool near = R->total_device > 0 && c->reserved / R->total_device > TM_AN_MEM_NEAR;
                add_finding(an, "gpu_mem.fragmentation", near || R->ooms ? "high" : "medium",
                            "high", R->rank, &ev, buf,
                            "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (torch >= 2.1) "
                            "or max_split_size_mb:128; keep tensor shapes stable between steps "
                            "(pad variable-length batches to a few sizes).");
            }
        }
        /* allocation retries */
        if (R->alloc_retries > 0) {
            double first_step = NAN, r0 = NAN;
            for (size_t i = b; i < e; i++) {
                double v = cp[i].c.num_alloc_retries;
                if (isnan(v))
                    continue;
                if (isnan(r0))
                    r0 = v;
                else if (v > r0) {
                    first_step = (double)cp[i].c.step;
                    break;
                }
            }
            double per = R->steps ? R->alloc_retries / (double)R->steps : NAN;
            ev_open(&ev);
            ev_num(&ev, "alloc_retries", R->alloc_retries);
            ev_num(&ev, "steps", (double)R->steps);
            ev_num(&ev, "retries_per_step", per);
            ev_num(&ev, "first_seen_step", first_step);
            snprintf(buf, sizeof buf,
                     "rank %s: %.0f allocation retries: the allocator freed its cache and "
                     "retried (a synchronising cudaFree each time)",
                     R->label, R->alloc_retries);
            add_finding(an, "gpu_mem.alloc_retries",
                        per >= TM_AN_RETRIES_PER_STEP_HIGH ? "high" : "medium", "high", R->rank,
                        &ev, buf,
                        "Memory is at its limit and each retry stalls the GPU: lower the peak "
                        "(smaller batch, checkpointing, AMP) or reduce fragmentation "
                        "(expandable_segments:True).");
        }
        /* OOMs: one finding per distinct OOM (the observer may fire several times) */
        for (size_t i = 0; i < nom; i++) {
            if (om[i].source != R->source ||
                (i > 0 && om[i - 1].source == om[i].source && om[i - 1].o.seq == om[i].o.seq))
                continue;
            const tm_inproc_oom *o = &om[i].o;
            /* trend: the allocated floor over the 50 steps before it */
            size_t kk = 0;
            for (size_t q = 0; q < k; q++)
                if (x[q] <= (double)o->step && x[q] + 50 >= (double)o->step)
                    kk++;
            double slope = NAN, r2 = NAN;
            size_t q0 = 0;
            while (q0 < k && !(x[q0] <= (double)o->step && x[q0] + 50 >= (double)o->step))
                q0++;
            if (kk >= 3)
                fit(x + q0, y + q0, kk, &slope, &r2);
            double cached = o->reserved - o->allocated;
            bool frag = isfinite(o->free_device) && isfinite(cached) &&
                        o->free_device + cached >= o->requested && o->free_device < o->requested;
            bool leak = kk >= 3 && slope > 0 && r2 >= TM_AN_GROWTH_R2 &&
                        slope * (double)kk >= TM_AN_GROWTH_MIN_BYTES;
            const tm_run_source *src = &an->src[R->source];
            ev_open(&ev);
            ev_num(&ev, "step", (double)o->step);
            ev_str(&ev, "phase", o->phase);
            ev_num(&ev, "device", o->device);
            ev_num(&ev, "requested_bytes", o->requested);
            ev_num(&ev, "free_device_bytes", o->free_device);
            ev_num(&ev, "device_total_bytes", o->total_device);
            ev_num(&ev, "allocated_bytes", o->allocated);
            ev_num(&ev, "reserved_bytes", o->reserved);
            ev_num(&ev, "trend_bytes_per_step", slope);
            ev_num(&ev, "trend_steps", (double)kk);
            ev_str(&ev, "source", o->source == TM_OOM_OBSERVER ? "observer" : "exception");
            ev_str(&ev, "cause", frag ? "fragmentation" : leak ? "growth" : "peak");
            if (o->snapshot[0]) {
                char path[4200];
                snprintf(path, sizeof path, "%s/%s", src->dir, o->snapshot);
                ev_str(&ev, "snapshot", path);
            }
            human_bytes(h1, sizeof h1, o->requested);
            human_bytes(h2, sizeof h2, o->free_device);
            human_bytes(h3, sizeof h3, o->total_device);
            snprintf(buf, sizeof buf,
                     "rank %s: CUDA out of memory at step %" PRIu64 "%s%s: asked for %s with %s "
                     "free of %s",
                     R->label, o->step, o->phase[0] ? " in " : "", o->phase, h1, h2, h3);
            if (frag)
                snprintf(adv, sizeof adv,
                         "Enough memory was free in total (%s free plus cached blocks) but not "
                         "in one piece: fragmentation. Set "
                         "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.%s%s",
                         h2, o->snapshot[0] ? " The allocator snapshot " : "",
                         o->snapshot[0] ? "opens at pytorch.org/memory_viz." : "");
            else if (leak)
                snprintf(adv, sizeof adv,
                         "Memory grew by %.1f MiB per step before it: a leak (tensors kept "
                         "across steps), not a single large step.%s",
                         slope / MiB,
                         o->snapshot[0] ? " The snapshot (pytorch.org/memory_viz) shows who "
                                          "holds the memory."
                                        : "");
            else
                snprintf(adv, sizeof adv,
                         "The step's peak does not fit: smaller batch (with gradient "
                         "accumulation), activation checkpointing or AMP.%s",
                         o->snapshot[0] ? " The snapshot (pytorch.org/memory_viz) shows the "
                                          "largest allocations."
                                        : "");
            add_finding(an, "gpu_mem.oom", "high", "high", R->rank, &ev, buf, adv);
        }
    }
    free(x);
    free(y);
}

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
    fit(t + skip, v + skip, n - skip, &slope, &r2);
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
static size_t series_points(const tm_run_series *s, bool stale, double *t, double *v)
{
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (!isfinite(s->v[i]) || (stale && k > 0 && s->v[i] == v[k - 1]))
            continue;
        t[k] = (double)(s->t_ns[i] - s->t_ns[0]) / 1e9;
        v[k++] = s->v[i];
    }
    return k;
}

static void rule_worker_growth(struct an *an)
{
    const tm_run_worker *wk;
    size_t nwk = tm_run_workers(an->r, &wk);
    size_t cap = nwk;
    for (size_t i = 0; i < an->nser; i++)
        if (an->ser[i].n > cap)
            cap = an->ser[i].n;
    double *t = malloc((cap ? cap : 1) * sizeof *t), *v = malloc((cap ? cap : 1) * sizeof *v);
    if (!t || !v) {
        free(t);
        free(v);
        an->nomem = true;
        return;
    }
    /* Each worker's PSS and RSS series, in one pass over the series. */
    const tm_run_series **pss_of = calloc(an->nwp ? an->nwp : 1, sizeof *pss_of);
    const tm_run_series **rss_of = calloc(an->nwp ? an->nwp : 1, sizeof *rss_of);
    if (!pss_of || !rss_of) {
        free(pss_of);
        free(rss_of);
        free(t);
        free(v);
        an->nomem = true;
        return;
    }
    for (size_t i = 0; i < an->nser; i++) {
        const tm_run_series *s = &an->ser[i];
        ptrdiff_t w = worker_series_index(an, s);
        if (w < 0)
            continue;
        if (strcmp(s->name, "proc.process_pss_bytes") == 0 && !pss_of[w])
            pss_of[w] = s;
        else if (strcmp(s->name, "proc.process_rss_bytes") == 0 && !rss_of[w])
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
        const char *host = an->src[wk[i].source].header.host;
        ptrdiff_t w = worker_index(an, pid, host);
        const tm_run_series *pss = w >= 0 ? pss_of[w] : NULL;
        const tm_run_series *rss = w >= 0 ? rss_of[w] : NULL;
        size_t k = 0;
        const char *what = "pss";
        if (pss)
            k = series_points(pss, true, t, v);
        if (k < TM_AN_WORKER_GROWTH_MIN_POINTS && rss) {
            k = series_points(rss, false, t, v);
            what = "rss";
        }
        if (k < TM_AN_WORKER_GROWTH_MIN_POINTS) {
            k = 0;
            what = "rss";
            for (size_t x = i; x < j; x++)
                if (!isnan(wk[x].w.rss_bytes)) {
                    t[k] = (double)(wk[x].w.end_ns - wk[i].w.end_ns) / 1e9;
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
    ev_open(&e);
    ev_num(&e, "workers_growing", (double)g.growing);
    ev_num(&e, "workers_checked", (double)g.checked);
    ev_num(&e, "worst_pid", g.worst_pid);
    ev_str(&e, "measure", g.what);
    ev_num(&e, "worst_rise_bytes", g.worst_rise);
    ev_num(&e, "worst_first_bytes", g.worst_first);
    ev_num(&e, "worst_bytes_per_hour", g.worst_rate_per_hour);
    ev_num(&e, "total_rise_bytes", g.total_rise);
    char buf[512], h1[32], h2[32], adv[1024];
    human_bytes(h1, sizeof h1, g.worst_rise);
    human_bytes(h2, sizeof h2, g.worst_rate_per_hour);
    snprintf(buf, sizeof buf,
             "DataLoader worker memory keeps growing: %zu worker(s), worst +%s (%s per hour)",
             g.growing, h1, h2);
    snprintf(adv, sizeof adv,
             "Copy-on-read (pytorch/pytorch#13246): workers touching the parent's Python objects "
             "(lists, dicts of paths or labels) copy the pages. Keep dataset metadata in numpy "
             "arrays, Arrow or a memory-mapped file instead of Python lists of objects. Growing "
             "%s per hour per worker, the host runs out of memory in a long epoch.",
             h2);
    add_finding(an, "host_mem.worker_growth", "medium", g.checked > 1 ? "high" : "medium", -1, &e,
                buf, adv);
}

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

static void rule_ranks(struct an *an)
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
        ev_open(&e);
        ev_str(&e, "measure", m[k].what);
        ev_str(&e, "rank", R[worst].label);
        ev_num(&e, "value", wv);
        ev_num(&e, "median_of_ranks", med);
        ev_num(&e, "ratio", wv / med);
        ev_num(&e, "threshold", TM_AN_RANK_RATIO);
        ev_key(&e, "per_rank");
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
            snprintf(buf, sizeof buf, "rank %s stands apart: %s %.2f GiB against a median of %.2f GiB",
                     R[worst].label, m[k].what, wv / GiB, med / GiB);
        else
            snprintf(buf, sizeof buf, "rank %s stands apart: %s %.3f s against a median of %.3f s (%.0f%% more)",
                     R[worst].label, m[k].what, wv, med, 100 * (wv / med - 1));
        add_finding(an, "ranks.imbalance", m[k].mem ? "low" : "medium", "medium", R[worst].rank,
                    &e, buf,
                    m[k].mem ? "One rank holds more memory: uneven batches (variable lengths), "
                               "rank-0-only work (logging, evaluation, checkpoints) or a model "
                               "part placed on one device."
                             : "All ranks wait for the slowest at every gradient sync: check "
                               "that rank's host (disk, CPU, thermal throttling), its data "
                               "shard (sample sizes) and rank-0-only work in the loop.");
    }
}

static int sev_rank(const char *s)
{
    return strcmp(s, "high") == 0 ? 0 : strcmp(s, "medium") == 0 ? 1 : strcmp(s, "low") == 0 ? 2 : 3;
}

int tm_analyze(const tm_run *r, tm_analysis **out)
{
    *out = NULL;
    tm_analysis *a = calloc(1, sizeof *a);
    if (!a)
        return tm_seterr(-ENOMEM, "analysis: out of memory");
    struct an an = {.r = r, .a = a};
    an.nsrc = tm_run_sources(r, &an.src);
    an.nser = tm_run_series_list(r, &an.ser);
    if (summarize_ranks(&an) < 0 || collect_worker_pids(&an) < 0) {
        free(an.wp);
        tm_analysis_free(&a);
        return tm_seterr(-ENOMEM, "analysis: out of memory");
    }
    summarize_system(&an);
    rule_input(&an);
    rule_gpu_util(&an);
    rule_gpu_mem(&an);
    rule_worker_growth(&an);
    rule_ranks(&an);
    free(an.wp);
    if (an.nomem) {
        tm_analysis_free(&a);
        return tm_seterr(-ENOMEM, "analysis: out of memory");
    }
    /* Most severe first, stable (insertion sort: a handful of findings). */
    for (size_t i = 1; i < a->nf; i++) {
        tm_finding f = a->f[i];
        size_t j = i;
        while (j > 0 && sev_rank(a->f[j - 1].severity) > sev_rank(f.severity)) {
            a->f[j] = a->f[j - 1];
            j--;
        }
        a->f[j] = f;
    }
    *out = a;
    return 0;
}

size_t tm_analysis_findings(const tm_analysis *a, const tm_finding **list)
{
    *list = a->f;
    return a->nf;
}

const tm_finding *tm_analysis_find(const tm_analysis *a, const char *id)
{
    for (size_t i = 0; i < a->nf; i++)
        if (strcmp(a->f[i].id, id) == 0)
            return &a->f[i];
    return NULL;
}

void tm_analysis_free(tm_analysis **pa)
{
    tm_analysis *a = pa ? *pa : NULL;
    if (!a)
        return;
    for (size_t i = 0; i < a->nf; i++) {
        free((char *)a->f[i].title);
        free((char *)a->f[i].evidence);
        free((char *)a->f[i].advice);
    }
    free(a->f);
    free(a->ranks);
    free(a);
    *pa = NULL;
}
