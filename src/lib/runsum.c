/*
 * runsum.c - the run summary (runsum.h): what each training process did
 * (steps, memory, DataLoader workers) and what the whole run did (step
 * totals, GPU utilization, the disk behind the data, pressure, the
 * workers' per-process series).  It is computed once, before any rule:
 * the rules (rules_*.c) judge it and the report writers print it.
 *
 * Steps are counted by the one step accounting (steps.c): a step counts
 * when it is complete, its wait is capped at its duration and the first
 * TM_STEP_WARMUP steps of each process stay out of the wait fraction, so
 * the report agrees with /metrics, the run.* alerts and the status line.
 * Which record files are training processes is tm_rec_is_training.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "probe.h"
#include "runsum.h"
#include "series.h"
#include "util.h"

/* --- numbers */

static void swapd(double *a, double *b)
{
    double t = *a;
    *a = *b;
    *b = t;
}

/* The median (upper middle) of a[0..n), which is reordered; NAN when n is
 * 0.  Wirth's selection: the arrays hold a few hundred thousand steps. */
double tm_runsum_median(double *a, size_t n)
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
void tm_runsum_fit(const double *x, const double *y, size_t n, double *slope, double *r2)
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

/* --- series and workers */

/* Mean of a series' points inside the window; NAN when none. */
double tm_runsum_ser_mean(const tm_runview *v, const tm_run_series *s, size_t *count)
{
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->t_ns[i] >= v->w0 && s->t_ns[i] <= v->w1 && isfinite(s->v[i])) {
            sum += s->v[i];
            n++;
        }
    if (count)
        *count = n;
    return n ? sum / (double)n : NAN;
}

double tm_runsum_ser_max(const tm_runview *v, const tm_run_series *s)
{
    double m = NAN;
    for (size_t i = 0; i < s->n; i++)
        if (s->t_ns[i] >= v->w0 && s->t_ns[i] <= v->w1 && (isnan(m) || s->v[i] > m))
            m = s->v[i];
    return m;
}

/* The first series named name whose labels contain "key=value" (key may
 * be NULL: any labels). */
const tm_run_series *tm_runsum_ser_find(const tm_runview *v, const char *name, const char *key,
                                        const char *value)
{
    char buf[128];
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        if (strcmp(s->name, name) != 0)
            continue;
        if (!key || (tm_labels_get(s->labels, key, buf, sizeof buf) && strcmp(buf, value) == 0))
            return s;
    }
    return NULL;
}

/* Mean over every series called name (all labels): the mean of their
 * means.  *nseries gets how many had points. */
double tm_runsum_ser_mean_all(const tm_runview *v, const char *name, size_t *nseries)
{
    double sum = 0;
    size_t k = 0;
    for (size_t i = 0; i < v->nser; i++) {
        if (strcmp(v->ser[i].name, name) != 0)
            continue;
        double m = tm_runsum_ser_mean(v, &v->ser[i], NULL);
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
    uint32_t x = ((const struct tm_runsum_wpid *)a)->pid,
             y = ((const struct tm_runsum_wpid *)b)->pid;
    return x < y ? -1 : x > y;
}

/* The worker pids (with their host: pids repeat across machines), sorted. */
static int collect_worker_pids(tm_runview *v)
{
    const tm_run_worker *wk;
    size_t nwk = tm_run_workers(v->r, &wk), n = 0;
    v->wp = malloc((nwk ? nwk : 1) * sizeof *v->wp);
    if (!v->wp)
        return -ENOMEM;
    for (size_t i = 0; i < nwk; i++) {
        /* One pid's batches are contiguous in its file. */
        if (i > 0 && wk[i - 1].source == wk[i].source && wk[i - 1].w.pid == wk[i].w.pid)
            continue;
        v->wp[n++] = (struct tm_runsum_wpid){wk[i].w.pid, v->src[wk[i].source].header.host};
    }
    qsort(v->wp, n, sizeof *v->wp, cmp_wpid);
    v->nwp = n;
    return 0;
}

/* The index in v->wp of the worker (pid, host), or -1. */
ptrdiff_t tm_runsum_worker_index(const tm_runview *v, uint32_t pid, const char *host)
{
    struct tm_runsum_wpid key = {pid, NULL};
    const struct tm_runsum_wpid *hit = bsearch(&key, v->wp, v->nwp, sizeof *v->wp, cmp_wpid);
    if (!hit)
        return -1;
    /* Workers of several hosts may share the pid: back to the first. */
    while (hit > v->wp && hit[-1].pid == pid)
        hit--;
    for (; hit < v->wp + v->nwp && hit->pid == pid; hit++)
        if (strcmp(hit->host, host) == 0)
            return hit - v->wp;
    return -1;
}

/* The index in v->wp of the DataLoader worker whose per-process series s
 * is (proc.process_*{pid=P,comm=C} of the same host), or -1. */
ptrdiff_t tm_runsum_worker_series_index(const tm_runview *v, const tm_run_series *s)
{
    char buf[32];
    if (!v->nwp ||
        strncmp(s->name, TM_SER_PROC_PROCESS_PREFIX, strlen(TM_SER_PROC_PROCESS_PREFIX)) != 0 ||
        !tm_labels_get(s->labels, "pid", buf, sizeof buf))
        return -1;
    char *end;
    unsigned long pid = strtoul(buf, &end, 10);
    if (end == buf || *end || pid == 0 || pid > UINT32_MAX)
        return -1;
    return tm_runsum_worker_index(v, (uint32_t)pid, v->src[s->source].header.host);
}

/* --- system signals */

/* Whether dev is among the disks behind the data (watch_target/run_target
 * events name them); true for every disk when no event names any. */
static bool disk_is_target(const tm_runview *v, const char *dev, bool *any_named)
{
    const tm_run_event *ev;
    size_t n = tm_run_events(v->r, &ev);
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
        const char *lb = strchr(d, '['); /* (a crafted "disks":] has none) */
        if (lb && lb < end && end > lb + 1)
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

/* The string after "key": (JSON as json.dumps writes it, with or without
 * a space) into out, printable ASCII only, cut at cap; "" when absent.
 * Escapes are kept as their letters: this is for a report line. */
static void event_str(const char *json, const char *key, char *out, size_t cap)
{
    char pat[64];
    out[0] = '\0';
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p)
        return;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    if (*p++ != '"')
        return;
    size_t k = 0;
    for (; *p && *p != '"' && k + 1 < cap; p++) {
        if (*p == '\\' && p[1])
            p++;
        out[k++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    }
    out[k] = '\0';
}

/* What the in-process agent said of itself: the processes it started in
 * and the boundaries they saw (for a loop it cannot segment). */
static void summarize_agent(const tm_runview *v, tm_an_summary *S)
{
    const tm_run_event *ev;
    size_t n = tm_run_events(v->r, &ev);
    S->seen_optmade = NAN;
    for (size_t i = 0; i < n; i++) {
        const char *js = ev[i].json ? ev[i].json : "";
        if (!strcmp(ev[i].name, "inproc.start")) {
            S->agent_procs++;
            const char *t = strstr(js, "\"torch\": \"");
            size_t skip = 10;
            if (!t) {
                t = strstr(js, "\"torch\":\"");
                skip = 9;
            }
            if (t && !S->torch_version[0]) {
                t += skip;
                size_t k = 0;
                while (t[k] && t[k] != '"' && k + 1 < sizeof S->torch_version &&
                       (isalnum((unsigned char)t[k]) || strchr(".+-_", t[k])))
                    k++;
                memcpy(S->torch_version, t, k);
                S->torch_version[k] = '\0';
            }
        } else if (!strcmp(ev[i].name, "inproc.boundaries")) {
            S->agent_told++;
            double x;
            if (!isnan(x = tm_event_num(js, "loader_batches")))
                S->seen_batches += x;
            if (!isnan(x = tm_event_num(js, "backward_passes")))
                S->seen_backward += x;
            if (!isnan(x = tm_event_num(js, "optimizer_steps")))
                S->seen_optimizer += x;
            if (!isnan(x = tm_event_num(js, "fetches")))
                S->seen_fetches += x;
            if (!isnan(x = tm_event_num(js, "optimizers_made")))
                S->seen_optmade = (isnan(S->seen_optmade) ? 0 : S->seen_optmade) + x;
            if (strstr(js, "\"forward_seen\":true"))
                S->seen_forward = true;
        } else if (!strcmp(ev[i].name, "inproc.measure_off")) {
            if (!S->measures_off++) {
                event_str(js, "measure", S->measure_off, sizeof S->measure_off);
                event_str(js, "why", S->measure_off_why, sizeof S->measure_off_why);
            }
        }
    }
    const tm_run_worker *wk;
    S->worker_batches = tm_run_workers(v->r, &wk);
}

/* The storage ceiling: DIR/probe.json of each run directory (probe.h); the
 * first probe that measured the disk behind the data counts.  An
 * unreadable or crafted file is no probe. */
static void summarize_probe(const tm_runview *v, tm_an_summary *S)
{
    S->probe_rand_bps = S->probe_rand_block = S->probe_rand_qd = NAN;
    S->probe_seq_bps = S->probe_seq_block = S->probe_seq_qd = NAN;
    tm_probe *p = malloc(TM_PROBE_FILE_MAX * sizeof *p);
    if (!p)
        return;
    const char *const *dirs;
    size_t ndirs = tm_run_dirs(v->r, &dirs);
    for (size_t d = 0; d < ndirs && !S->probe_disk[0]; d++) {
        int n = tm_probe_read_dir(dirs[d], p, TM_PROBE_FILE_MAX);
        for (int i = 0; i < n && !S->probe_disk[0]; i++) {
            S->probes++;
            if (!tm_probe_covers(&p[i], S->disk)) {
                if (!S->probe_other[0])
                    tm_strlcpy(S->probe_other, p[i].device, sizeof S->probe_other);
                continue;
            }
            tm_strlcpy(S->probe_disk, S->disk, sizeof S->probe_disk);
            const tm_probe_test *r = tm_probe_best(&p[i], "random");
            const tm_probe_test *q = tm_probe_best(&p[i], "sequential");
            if (r) {
                S->probe_rand_bps = r->bytes_per_second;
                S->probe_rand_block = (double)r->block_bytes;
                S->probe_rand_qd = r->queue_depth;
            }
            if (q) {
                S->probe_seq_bps = q->bytes_per_second;
                S->probe_seq_block = (double)q->block_bytes;
                S->probe_seq_qd = q->queue_depth;
            }
        }
    }
    free(p);
}

/* The job's GPUs' mean utilization (jobgpus.c): another job's GPU on the
 * same machine, idle or busy, is not in it (a one-GPU job on an 8-GPU
 * machine read 1/8 of its GPU's utilization, "underutilized") */
static void summarize_gpus(const tm_runview *v, tm_an_summary *S)
{
    double sum = 0;
    S->ngpus = S->ngpus_recorded = 0;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        if (strcmp(s->name, TM_SER_GPU_UTILIZATION) != 0)
            continue;
        double m = tm_runsum_ser_mean(v, s, NULL);
        if (isnan(m))
            continue;
        S->ngpus_recorded++;
        if (!tm_runsum_is_job_gpu(v, s))
            continue;
        sum += m;
        S->ngpus++;
    }
    S->gpu_util_mean = S->ngpus ? sum / (double)S->ngpus : NAN;
}

static void summarize_system(const tm_runview *v, tm_an_summary *S)
{
    summarize_gpus(v, S);
    /* The disk behind the data: among the target disks, the one that read most. */
    S->disk_read_bps = S->disk_read_bps_max = S->disk_await_s = S->disk_util = NAN;
    S->disk_queue = S->disk_ceiling_share = S->disk_reads_s = S->disk_req_bytes = NAN;
    const tm_run_series *best = NULL;
    double best_mean = -1;
    bool best_named = false;
    char dev[40];
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        if (strcmp(s->name, TM_SER_DISK_READ_BYTES_PER_SECOND) != 0 ||
            !tm_labels_get(s->labels, "device", dev, sizeof dev))
            continue;
        bool named;
        if (!disk_is_target(v, dev, &named))
            continue;
        double m = tm_runsum_ser_mean(v, s, NULL);
        if (!isnan(m) && m > best_mean) {
            best_mean = m;
            best = s;
            best_named = named;
        }
    }
    S->disk_named = best && best_named;
    if (best) {
        tm_labels_get(best->labels, "device", S->disk, sizeof S->disk);
        S->disk_read_bps = best_mean;
        S->disk_read_bps_max = tm_runsum_ser_max(v, best);
        size_t n = 0, near = 0;
        for (size_t i = 0; i < best->n; i++)
            if (best->t_ns[i] >= v->w0 && best->t_ns[i] <= v->w1) {
                n++;
                if (best->v[i] >= TM_AN_DISK_CEILING_NEAR * S->disk_read_bps_max)
                    near++;
            }
        S->disk_ceiling_share =
            n >= TM_AN_DISK_CEILING_MIN_SAMPLES ? (double)near / (double)n : NAN;
        uint32_t src = best->source;
        for (size_t i = 0; i < v->nser; i++) {
            const tm_run_series *s = &v->ser[i];
            if (s->source != src || !tm_labels_get(s->labels, "device", dev, sizeof dev) ||
                strcmp(dev, S->disk) != 0)
                continue;
            if (strcmp(s->name, TM_SER_DISK_READ_AWAIT_SECONDS) == 0)
                S->disk_await_s = tm_runsum_ser_mean(v, s, NULL);
            else if (strcmp(s->name, TM_SER_DISK_UTILIZATION) == 0)
                S->disk_util = tm_runsum_ser_mean(v, s, NULL);
            else if (strcmp(s->name, TM_SER_DISK_QUEUE_DEPTH) == 0)
                S->disk_queue = tm_runsum_ser_mean(v, s, NULL);
            else if (strcmp(s->name, TM_SER_DISK_READS_PER_SECOND) == 0)
                S->disk_reads_s = tm_runsum_ser_mean(v, s, NULL);
        }
        /* iostat's rareq-sz over the window, not the mean of per-sample
         * sizes (an idle sample's 0 is no request size). */
        if (S->disk_reads_s > 0)
            S->disk_req_bytes = S->disk_read_bps / S->disk_reads_s;
    }
    double psi = tm_runsum_ser_mean_all(v, TM_SER_PSI_IO_SOME_AVG10, NULL);
    double cg = tm_runsum_ser_mean_all(v, TM_SER_CGROUP_IO_SOME_AVG10, NULL);
    S->psi_io_some = isnan(cg) ? psi : isnan(psi) ? cg : fmax(psi, cg);
    S->psi_cpu_some = tm_runsum_ser_mean_all(v, TM_SER_PSI_CPU_SOME_AVG10, NULL);
    /* The workers' per-process series (trainmon run records every process
     * of the tree; the workers are the pids of the worker records). */
    S->worker_d_share = S->worker_cpu_sys = S->worker_read_bps = NAN;
    double d_sum = 0, cpu_sum = 0, rd_bytes = 0;
    size_t d_n = 0, cpu_n = 0, rd_n = 0;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        if (tm_runsum_worker_series_index(v, s) < 0)
            continue;
        if (strcmp(s->name, TM_SER_PROC_PROCESS_STATE_D) == 0) {
            /* Pooled: the share of all worker samples in D state. */
            for (size_t k = 0; k < s->n; k++)
                if (s->t_ns[k] >= v->w0 && s->t_ns[k] <= v->w1 && isfinite(s->v[k])) {
                    d_sum += s->v[k];
                    d_n++;
                }
        } else if (strcmp(s->name, TM_SER_PROC_PROCESS_CPU_UTILIZATION) == 0) {
            double m = tm_runsum_ser_mean(v, s, NULL);
            if (!isnan(m)) {
                cpu_sum += m;
                cpu_n++;
            }
        } else if (strcmp(s->name, TM_SER_PROC_PROCESS_READ_BYTES_PER_SECOND) == 0) {
            /* Bytes: each rate over the interval that ends at its sample,
             * the part of it inside the window (a loop shorter than the
             * sampling interval has no sample inside it) */
            for (size_t k = 1; k < s->n; k++) {
                int64_t a = s->t_ns[k - 1] > v->w0 ? s->t_ns[k - 1] : v->w0;
                int64_t b = s->t_ns[k] < v->w1 ? s->t_ns[k] : v->w1;
                if (b > a && isfinite(s->v[k])) {
                    rd_bytes += s->v[k] * tm_ns_diff_s(b, a);
                    rd_n++;
                }
            }
        }
    }
    if (d_n)
        S->worker_d_share = d_sum / (double)d_n;
    if (cpu_n)
        S->worker_cpu_sys = cpu_sum / (double)cpu_n;
    if (rd_n && v->w1 > v->w0)
        S->worker_read_bps = rd_bytes / (tm_ns_diff_s(v->w1, v->w0));
    if (d_n == 0) {
        /* No per-worker series (trainmon watch): the tree's share of
         * processes in D state, the main process left out. */
        const tm_run_series *d = tm_runsum_ser_find(v, TM_SER_PROC_PROCESSES_D_STATE, NULL, NULL);
        const tm_run_series *p = NULL;
        char root[32];
        if (d && tm_labels_get(d->labels, "root", root, sizeof root))
            p = tm_runsum_ser_find(v, TM_SER_PROC_PROCESSES, "root", root);
        if (d && p && p->n == d->n) {
            double sum = 0;
            size_t k = 0;
            for (size_t i = 0; i < d->n; i++)
                if (d->t_ns[i] >= v->w0 && d->t_ns[i] <= v->w1 && p->v[i] > 1) {
                    sum += d->v[i] / (p->v[i] - 1);
                    k++;
                }
            S->worker_d_share = k ? fmin(sum / (double)k, 1.0) : NAN;
        }
    }
}

/* The last value of the series name{at} (the dataset readings are
 * taken once each, whenever: not limited to the window), NAN if none. */
static double dataset_value(const tm_runview *v, const char *name, const char *at)
{
    const tm_run_series *s = tm_runsum_ser_find(v, name, "at", at);
    return s && s->n ? s->v[s->n - 1] : NAN;
}

/* The dataset readings of collect_dscache.c: size from the end reading
 * (else the start's: the job may have written its data), residency at
 * both ends. */
static void summarize_dataset(const tm_runview *v, tm_an_summary *S)
{
    S->ds_cached_start = dataset_value(v, TM_SER_DATASET_CACHED_FRACTION, "start");
    S->ds_cached_end = dataset_value(v, TM_SER_DATASET_CACHED_FRACTION, "end");
    const char *at = isnan(dataset_value(v, TM_SER_DATASET_BYTES, "end")) ? "start" : "end";
    S->ds_bytes = dataset_value(v, TM_SER_DATASET_BYTES, at);
    S->ds_files = dataset_value(v, TM_SER_DATASET_FILES, at);
    S->ds_memory = dataset_value(v, TM_SER_DATASET_MEMORY_BYTES, at);
    S->ds_complete = dataset_value(v, TM_SER_DATASET_WALK_COMPLETE, at) == 1.0;
}

/* --- per training process: steps, memory, workers */

/* Scratch arrays of one summary: every complete step's duration and
 * compute time (for the whole-run medians) and room for one rank's values
 * or one set of workers. */
struct scratch {
    double *all, *all_c, *tmp;
    size_t nall;
    uint64_t *keys; /* worker keys, to count distinct ones */
    uint16_t *lane; /* each worker record's loader lane (runsum_sets.c) */
};

/* The steps of one process, st[0..n): the one step accounting (steps.c)
 * counts them, leaves warm-up out of the wait fraction and caps each
 * wait at its step; the medians are over the same complete steps. */
static void rank_steps(tm_an_rank *R, const tm_run_step *st, size_t n, struct scratch *x,
                       tm_steptally *t, int64_t *w0, int64_t *w1)
{
    tm_steptally_init(t);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_step *p = &st[i].s;
        double d, w;
        if (!tm_steptally_add(t, p) || !tm_step_times(p, &d, &w))
            continue;
        x->tmp[k++] = d;
        x->all[x->nall] = d;
        x->all_c[x->nall++] = d - w;
        if (!*w0 || p->start_ns < *w0)
            *w0 = p->start_ns;
        if (p->end_ns > *w1)
            *w1 = p->end_ns;
    }

    R->steps = (size_t)t->steps;
    R->data_wait_fraction = tm_steptally_wait_fraction(t);
    R->step_median_s = tm_runsum_median(x->tmp, k);
    size_t kc = 0;
    for (size_t i = 0; i < n; i++) {
        double d, w;
        if (tm_step_times(&st[i].s, &d, &w))
            x->tmp[kc++] = d - w;
    }
    R->compute_median_s = tm_runsum_median(x->tmp, kc);
    kc = 0;
    for (size_t i = 0; i < n; i++) {
        double w;
        if (tm_step_times(&st[i].s, NULL, &w))
            x->tmp[kc++] = w;
    }
    R->wait_median_s = tm_runsum_median(x->tmp, kc);
    /* backward and collective time per judged step, where recorded */
    size_t kb = 0;
    for (size_t i = 0; i < n; i++)
        if (tm_step_times(&st[i].s, NULL, NULL) && st[i].s.step >= TM_STEP_WARMUP &&
            st[i].s.backward_ns >= 0)
            x->tmp[kb++] = (double)st[i].s.backward_ns / 1e9;
    R->backward_median_s = tm_runsum_median(x->tmp, kb);
    kb = 0;
    for (size_t i = 0; i < n; i++)
        if (tm_step_times(&st[i].s, NULL, NULL) && st[i].s.step >= TM_STEP_WARMUP &&
            st[i].s.collective_ns >= 0)
            x->tmp[kb++] = (double)st[i].s.collective_ns / 1e9;
    R->collective_median_s = tm_runsum_median(x->tmp, kb);
}

/* GPU and host memory of one process: its captures cp[0..n) and the OOMs
 * of its source among om[0..nom). */
static void rank_memory(tm_an_rank *R, const tm_run_capture *cp, size_t n, const tm_run_oom *om,
                        size_t nom)
{
    R->peak_allocated = R->peak_reserved = R->total_device = R->host_rss_peak = NAN;
    R->alloc_retries = NAN;
    double r0 = NAN;
    for (size_t x = 0; x < n; x++) {
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
    /* One OOM may be recorded several times (observer and exception). */
    uint32_t s = R->source;
    for (size_t x = 0; x < nom; x++)
        if (om[x].source == s &&
            (x == 0 || om[x - 1].source != s || om[x - 1].o.seq != om[x].o.seq))
            R->ooms++;
    if (isnan(R->total_device)) {
        for (size_t x = 0; x < nom; x++)
            if (om[x].source == s && !isnan(om[x].o.total_device))
                R->total_device = om[x].o.total_device;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* How many distinct keys[0..n) (which are reordered). */
static size_t count_distinct(uint64_t *keys, size_t n)
{
    qsort(keys, n, sizeof *keys, cmp_u64);
    size_t d = 0;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || keys[i] != keys[i - 1])
            d++;
    return d;
}

/* A worker is its (rank, loader lane, worker id): a worker file carries
 * the rank of its parent, and ids restart at 0 in every rank, in every
 * loader (runsum_sets.c) and again each epoch, with new pids, when the
 * workers are not persistent. */
static uint64_t worker_key(const tm_run_worker *w, uint16_t lane)
{
    return (uint64_t)(uint32_t)w->rank << 32 | (uint64_t)(lane & 0xFF) << 24 |
           ((uint32_t)w->w.worker_id & 0xFFFFFF);
}

/* The DataLoader workers of one rank (all of them when all): how many,
 * their median fetch time per batch and their CPU seconds per second of
 * fetching (from consecutive batches of one pid). */
static void workers_of(const tm_run_worker *wk, size_t nwk, bool all, int32_t rank,
                       struct scratch *x, size_t *nworkers, double *batch_median_s, double *busy)
{
    size_t kb = 0;
    double cpu = 0, fetch = 0;
    for (size_t i = 0; i < nwk; i++) {
        if (!all && wk[i].rank != rank)
            continue;
        const tm_inproc_worker *w = &wk[i].w;
        double ft = tm_ns_diff_s(w->end_ns, w->start_ns);
        if (ft < 0)
            continue;
        x->keys[kb] = worker_key(&wk[i], x->lane ? x->lane[i] : 0);
        x->tmp[kb++] = ft;
        if (i > 0 && wk[i - 1].source == wk[i].source && wk[i - 1].w.pid == w->pid &&
            !isnan(w->cpu_s) && !isnan(wk[i - 1].w.cpu_s) && w->cpu_s >= wk[i - 1].w.cpu_s) {
            cpu += w->cpu_s - wk[i - 1].w.cpu_s;
            fetch += ft;
        }
    }
    *nworkers = count_distinct(x->keys, kb);
    *batch_median_s = tm_runsum_median(x->tmp, kb);
    /* The fetch's own CPU where the worker recorded it at the fetch's
     * start (layout 2): the difference of consecutive batches counts the
     * handoff between them too (pickling into the queue), which made a
     * single-threaded fetch look like more than one CPU. */
    double own = 0, own_fetch = 0;
    for (size_t i = 0; i < nwk; i++) {
        const tm_inproc_worker *w = &wk[i].w;
        double ft = tm_ns_diff_s(w->end_ns, w->start_ns);
        if ((!all && wk[i].rank != rank) || ft < 0 || w->layout < 2 || !(w->cpu_start_s >= 0) ||
            !(w->cpu_s >= w->cpu_start_s))
            continue;
        own += w->cpu_s - w->cpu_start_s;
        own_fetch += ft;
    }
    if (own_fetch > 0) {
        cpu = own;
        fetch = own_fetch;
    }
    *busy = fetch > 0 ? cpu / fetch : NAN;
}

/* The workers' handoff numbers (all ranks): their fetching share of their
 * lifetime (from each worker process's first fetch start to its last
 * fetch end), the worker processes started beyond the first set, and the
 * fetch's own CPU per batch (layout 2). */
static void workers_handoff(const tm_run_worker *wk, size_t nwk, tm_an_summary *S,
                            struct scratch *x)
{
    double util = 0, weight = 0;
    size_t pids = 0, kc = 0;
    for (size_t i = 0; i < nwk;) {
        size_t j = i;
        int64_t first = wk[i].w.start_ns, last = wk[i].w.end_ns;
        double f = 0;
        while (j < nwk && wk[j].source == wk[i].source) {
            const tm_inproc_worker *w = &wk[j].w;
            double ft = tm_ns_diff_s(w->end_ns, w->start_ns);
            if (ft >= 0) {
                f += ft;
                if (w->start_ns < first)
                    first = w->start_ns;
                if (w->end_ns > last)
                    last = w->end_ns;
            }
            if (w->layout >= 2 && w->cpu_start_s >= 0 && w->cpu_s >= w->cpu_start_s)
                x->tmp[kc++] = w->cpu_s - w->cpu_start_s;
            j++;
        }
        pids++;
        /* each process's share weighted by its batches: a persistent
         * eval loader's workers, idle through training and busy a few
         * batches per eval, weigh little */
        double span = tm_ns_diff_s(last, first);
        if (j - i >= 2 && span > 0) {
            util += (double)(j - i) * (f < span ? f / span : 1.0);
            weight += (double)(j - i);
        }
        i = j;
    }
    S->worker_util = weight > 0 ? util / weight : NAN;
    S->worker_restarts = pids > S->workers ? pids - S->workers : 0;
    S->worker_cpu_per_batch_s = tm_runsum_median(x->tmp, kc);
}

/* The loader that serves the steps (S->lead_*): the lane with the most
 * batches fetched, so that a validation loader's workers, idle through
 * training, neither add workers nor their fetch times to the training
 * loader's; batches per step over all the run's steps (a zip of two
 * loaders: one of each a step). */
static void lead_loader(const tm_run_worker *wk, size_t nwk, tm_an_summary *S, struct scratch *x,
                        uint64_t steps)
{
    size_t count[256] = {0}, lead = 0, nb = 0;
    for (size_t i = 0; i < nwk; i++)
        count[x->lane ? x->lane[i] & 0xFF : 0]++;
    for (size_t l = 1; l < 256; l++)
        if (count[l] > count[lead])
            lead = l;
    for (size_t i = 0; i < nwk; i++) {
        uint16_t lane = x->lane ? x->lane[i] : 0;
        double ft = tm_ns_diff_s(wk[i].w.end_ns, wk[i].w.start_ns);
        if ((lane & 0xFF) != lead || ft < 0)
            continue;
        x->keys[nb] = worker_key(&wk[i], lane);
        x->tmp[nb++] = ft;
    }
    size_t workers = count_distinct(x->keys, nb), ranks = 0;
    for (size_t i = 0; i < nb; i++) /* sorted: a rank's keys together */
        if (i == 0 || x->keys[i] >> 32 != x->keys[i - 1] >> 32)
            ranks++;
    S->lead_workers_per_rank = ranks ? (double)workers / (double)ranks : NAN;
    S->lead_batch_median_s = tm_runsum_median(x->tmp, nb);
    S->lead_batches_per_step = steps ? (double)nb / (double)steps : NAN;
}

/* The first index in [b, e) of a source's steps (written in order of
 * their end) whose end is at or after t. */
static size_t step_ending_after(const tm_run_step *st, size_t b, size_t e, int64_t t)
{
    while (b < e) {
        size_t m = b + (e - b) / 2;
        if (st[m].s.end_ns < t)
            b = m + 1;
        else
            e = m;
    }
    return b;
}

/* Marks in mark[] the training steps that waited for a set of DataLoader
 * workers to start: the step of the same rank on the same host whose span
 * holds the earliest first fetch of the set's workers (a new process
 * fetches at once; the loop's step that asked for the first batch is
 * waiting meanwhile).  A set is the worker processes one iter() forked or
 * spawned, in order of their ids: taken in the order of their pids (the
 * order iter() made them, whatever the scheduler did after; where the pids
 * wrapped around during the run, from the pid after the wrap), a worker id
 * that does not rise begins the next set.  So a worker scheduled late (4
 * workers on 2 cores), whose first fetch falls in a later step, marks no
 * step of its own; an eval loader's set between two training sets is a
 * set of its own, whose workers fetch between training steps and mark
 * none; loaders restarted together mark one step.  Returns the steps
 * marked. */
static size_t mark_startups(const tm_run_step *st, size_t nst, const tm_run_worker *wk, size_t nwk,
                            const tm_runview *v, unsigned char *mark);

unsigned char *tm_runsum_startup_marks(const tm_runview *v)
{
    const tm_run_step *st;
    const tm_run_worker *wk;
    size_t nst = tm_run_steps(v->r, &st), nwk = tm_run_workers(v->r, &wk);
    unsigned char *mark = calloc(nst ? nst : 1, 1);
    if (mark && nwk)
        mark_startups(st, nst, wk, nwk, v, mark);
    return mark;
}

/* A worker process (one source): its first fetch's start, pid and id. */
struct wfirst {
    int64_t first;
    uint32_t source, pid;
    int32_t id, rank;
    uint64_t set; /* its worker set (runsum_sets.c); 0 unknown */
};

static int wfirst_by_set(const void *a, const void *b)
{
    const struct wfirst *x = a, *y = b;
    if (x->set != y->set)
        return (x->set > y->set) - (x->set < y->set);
    return (x->first > y->first) - (x->first < y->first);
}

static int wfirst_by_pid(const void *a, const void *b)
{
    const struct wfirst *x = a, *y = b;
    if (x->pid != y->pid)
        return (x->pid > y->pid) - (x->pid < y->pid);
    return (x->first > y->first) - (x->first < y->first);
}

/* Marks the step of source s (steps st[b..e)) that holds time t */
static size_t mark_at(const tm_run_step *st, size_t b, size_t e, int64_t t, unsigned char *mark)
{
    size_t k = step_ending_after(st, b, e, t);
    if (k < e && st[k].s.start_ns <= t && !mark[k]) {
        mark[k] = 1;
        return 1;
    }
    return 0;
}

static size_t mark_startups(const tm_run_step *st, size_t nst, const tm_run_worker *wk, size_t nwk,
                            const tm_runview *v, unsigned char *mark)
{
    size_t *sb = calloc(v->nsrc ? 2 * v->nsrc : 1, sizeof *sb);
    struct wfirst *wf = calloc(nwk, sizeof *wf), *mine = calloc(nwk, sizeof *mine);
    size_t marked = 0, nwf = 0;
    if (!sb || !wf || !mine)
        goto out;
    size_t *se = sb + v->nsrc;
    for (size_t i = 0; i < nst;) { /* each source's step range */
        size_t j = i;
        while (j < nst && st[j].source == st[i].source)
            j++;
        if (st[i].source < v->nsrc) {
            sb[st[i].source] = i;
            se[st[i].source] = j;
        }
        i = j;
    }
    for (size_t i = 0; i < nwk;) { /* each worker process's first fetch */
        size_t j = i;
        int64_t first = INT64_MAX;
        uint64_t set = 0;
        for (; j < nwk && wk[j].source == wk[i].source; j++) {
            if (wk[j].w.end_ns >= wk[j].w.start_ns && wk[j].w.start_ns < first)
                first = wk[j].w.start_ns;
            if (!set && wk[j].w.layout >= 3)
                set = wk[j].w.set;
        }
        if (first != INT64_MAX && wk[i].source < v->nsrc)
            wf[nwf++] = (struct wfirst){first,      wk[i].source, wk[i].w.pid, wk[i].w.worker_id,
                                        wk[i].rank, set};
        i = j;
    }
    qsort(wf, nwf, sizeof *wf, wfirst_by_pid);
    for (uint32_t s = 0; s < v->nsrc; s++) {
        if (se[s] == sb[s] || !tm_rec_is_training(&v->src[s].header))
            continue;
        size_t n = 0, r0 = 0, known = 0; /* this rank's workers, by pid, from mine[r0] */
        for (size_t i = 0; i < nwf; i++)
            if (wf[i].rank == v->src[s].header.rank &&
                strcmp(v->src[wf[i].source].header.host, v->src[s].header.host) == 0) {
                known += wf[i].set != 0;
                mine[n++] = wf[i];
            }
        if (n && known == n) {
            /* every worker says its set: a set is the workers one iter()
             * started, whatever their pids and ids (two loaders' sets, both
             * ids 0..N-1, started in one step mark it once) */
            qsort(mine, n, sizeof *mine, wfirst_by_set);
            for (size_t k = 0; k < n; k++)
                if (k == 0 || mine[k].set != mine[k - 1].set)
                    marked += mark_at(st, sb[s], se[s], mine[k].first, mark);
            continue;
        }
        if (n > 1 && mine[0].first > mine[n - 1].first) {
            /* the lowest pid fetched after the highest: the pids wrapped
             * around; the order begins after the largest step back in time */
            int64_t back = 0;
            for (size_t k = 1; k < n; k++)
                if (mine[k - 1].first - mine[k].first > back) {
                    back = mine[k - 1].first - mine[k].first;
                    r0 = k;
                }
        }
        int64_t first = INT64_MAX; /* the set's earliest first fetch */
        int32_t last_id = 0;
        for (size_t k = 0; k < n; k++) {
            const struct wfirst *w = &mine[(r0 + k) % n];
            if (k > 0 && w->id <= last_id) { /* the next set */
                marked += mark_at(st, sb[s], se[s], first, mark);
                first = INT64_MAX;
            }
            if (w->first < first)
                first = w->first;
            last_id = w->id;
        }
        if (n)
            marked += mark_at(st, sb[s], se[s], first, mark);
    }
out:
    free(sb);
    free(wf);
    free(mine);
    return marked;
}

/* Over the judged steps of every process: the data wait per batch
 * (median); the steps that waited for a new set of workers to start
 * (mark_startups: the first set's is warm-up), their wait and its share
 * of all the wait, and the wait fraction without them. */
static void waits_of(const tm_run_step *st, size_t nst, const tm_run_worker *wk, size_t nwk,
                     const tm_runview *v, tm_an_summary *S, struct scratch *x)
{
    size_t k = 0, kb = 0, nset = 0, newit = 0;
    double total = 0, dur = 0, top = 0, batches = 0, newit_w = 0;
    unsigned char *mark = S->worker_restarts ? calloc(nst ? nst : 1, 1) : NULL;
    if (mark)
        mark_startups(st, nst, wk, nwk, v, mark);
    for (size_t i = 0; i < nst; i++) {
        const tm_inproc_step *s = &st[i].s;
        double d, w;
        if (st[i].source >= v->nsrc || !tm_rec_is_training(&v->src[st[i].source].header) ||
            !tm_step_times(s, &d, &w) || s->step < TM_STEP_WARMUP)
            continue;
        total += w;
        dur += d;
        x->all[k++] = w;
        if (s->batches > 0) {
            x->tmp[kb++] = w / s->batches;
            batches += s->batches;
        }
        if (mark && mark[i]) {
            nset++;
            top += w;
        }
        if (s->flags & TM_STEP_NEW_ITER) {
            newit++;
            newit_w += w;
        }
    }
    free(mark);
    S->newiter_steps = newit;
    S->newiter_wait_s = newit_w;
    S->wait_per_batch_s = tm_runsum_median(x->tmp, kb);
    S->batches_per_step = kb ? batches / (double)kb : NAN;
    S->waits_judged = k;
    S->wait_median_s = tm_runsum_median(x->all, k);
    S->worker_set_restarts = nset;
    S->restart_wait_share = S->startup_wait_s = S->steady_wait_fraction = NAN;
    if (nset && total > 0) {
        S->restart_wait_share = top / total;
        S->startup_wait_s = top;
        if (dur > top)
            S->steady_wait_fraction = (total - top) / (dur - top);
    }
}

/* Records of source s in a source-grouped array: [*b, *e) from *e on. */
#define SOURCE_RANGE(arr, n, s, b, e)                                                              \
    do {                                                                                           \
        (b) = (e);                                                                                 \
        while ((e) < (n) && (arr)[e].source == (s))                                                \
            (e)++;                                                                                 \
    } while (0)

static bool source_has_oom(const tm_run_oom *om, size_t nom, uint32_t s)
{
    for (size_t x = 0; x < nom; x++)
        if (om[x].source == s)
            return true;
    return false;
}

/* One entry per training process that has steps, captures or an OOM. */
static void summarize_ranks(tm_runview *v, tm_an_summary *S, tm_an_rank *ranks, size_t *nranks,
                            struct scratch *x, tm_steptally *all, int64_t *w0, int64_t *w1)
{
    const tm_run_step *st;
    const tm_run_capture *cp;
    const tm_run_worker *wk;
    const tm_run_oom *om;
    size_t nst = tm_run_steps(v->r, &st), ncp = tm_run_captures(v->r, &cp);
    size_t nwk = tm_run_workers(v->r, &wk), nom = tm_run_ooms(v->r, &om);
    size_t i = 0, j = 0, sb, cb;
    tm_steptally_init(all);
    for (uint32_t s = 0; s < v->nsrc; s++) {
        SOURCE_RANGE(st, nst, s, sb, i);
        SOURCE_RANGE(cp, ncp, s, cb, j);
        if (!tm_rec_is_training(&v->src[s].header) ||
            (i == sb && j == cb && !source_has_oom(om, nom, s)))
            continue;
        tm_an_rank *R = &ranks[(*nranks)++];
        R->source = s;
        R->rank = v->src[s].header.rank;
        R->host = v->src[s].header.host;
        if (R->rank >= 0)
            snprintf(R->label, sizeof R->label, "%d", (int)R->rank);
        else
            snprintf(R->label, sizeof R->label, "%s", v->src[s].header.role);
        tm_steptally t;
        rank_steps(R, st + sb, i - sb, x, &t, w0, w1);
        S->infer_procs += v->src[s].inference > 0 && R->steps > 0;
        tm_steptally_merge(all, &t);
        rank_memory(R, cp + cb, j - cb, om, nom);
        workers_of(wk, nwk, false, R->rank, x, &R->workers, &R->worker_batch_median_s,
                   &R->worker_busy);
    }
}

/* The time lost to the data wait and the speed-up if the input kept up
 * (tm_an_summary).  The pooled figures are sums over every rank's judged
 * steps: divided by the ranks that have judged steps they are one rank's
 * (the ranks wait side by side, not one after another). */
static void time_lost(const tm_runview *v, tm_an_summary *S, const tm_an_rank *ranks, size_t nranks,
                      const tm_steptally *all)
{
    size_t n = 0;
    for (size_t i = 0; i < nranks; i++)
        n += ranks[i].steps > 0;
    int64_t s0, s1;
    tm_run_span(v->r, &s0, &s1);
    S->run_s = s1 > s0 ? tm_ns_diff_s(s1, s0) : NAN;
    double compute = all->step_s - all->wait_s;
    if (!n || !(all->step_s > 0) || !(compute > 0)) {
        S->time_lost_s = S->speedup = NAN;
        return;
    }
    S->time_lost_s = all->wait_s / (double)n;
    S->speedup = all->step_s / compute;
}

/* Whole-run totals: the most steps of one process, all complete steps,
 * the pooled wait fraction, the medians over every step and the workers of
 * every rank together. */
static void summarize_run(tm_runview *v, tm_an_summary *S, const tm_an_rank *ranks, size_t nranks,
                          struct scratch *x, const tm_steptally *all)
{
    const tm_run_worker *wk;
    size_t nwk = tm_run_workers(v->r, &wk);
    S->steps_total = (size_t)all->steps;
    for (size_t i = 0; i < nranks; i++)
        if (ranks[i].steps > S->steps)
            S->steps = ranks[i].steps;
    S->data_wait_fraction = tm_steptally_wait_fraction(all);
    time_lost(v, S, ranks, nranks, all);
    S->compute_median_s = tm_runsum_median(x->all_c, x->nall);
    S->step_median_s = tm_runsum_median(x->all, x->nall);
    workers_of(wk, nwk, true, -1, x, &S->workers, &S->worker_batch_median_s, &S->worker_busy);
    S->eval_steps = (size_t)all->eval_steps;
    S->prep_steps = (size_t)all->prep_steps;
    S->fed_steps = (size_t)all->fed_steps;
    S->skipped_steps = (size_t)all->skipped_steps;
    S->skipped_s = all->skipped_s;
    S->steps_time_s = all->step_s + all->warm_step_s;
    for (size_t i = 0; i < nranks; i++)
        S->step_procs += ranks[i].steps > 0;
    S->skip_run_end = (size_t)all->skip_run_end;
    S->skip_run_max = (size_t)all->skip_run_max;
    S->skip_last_step = all->skip_last ? all->skip_last - 1 : 0;
    S->prep_cpu_share = all->prep_cpu_known_s > 0 ? all->prep_cpu_s / all->prep_cpu_known_s : NAN;
    S->prep_fwd_share = all->prep_fwd_known_s > 0 ? all->prep_fwd_s / all->prep_fwd_known_s : NAN;
    S->prep_opt_share = all->prep_s > 0 ? all->prep_opt_s / all->prep_s : NAN;
    S->recv_cpu_share = all->recv_known_s > 0 ? all->recv_cpu_s / all->recv_known_s : NAN;
    S->nograd_steps = (size_t)all->nograd_steps;
    S->nograd_judged = (size_t)(all->steps - all->warmup);
    S->nograd_s = all->nograd_s;
    S->nograd_calls = (double)all->nograd_calls;
    S->nograd_eval_s = all->eval_loop_s;
    S->nograd_share = S->nograd_judged && all->step_s + all->eval_loop_s > 0
                          ? (all->nograd_s + all->eval_loop_s) / (all->step_s + all->eval_loop_s)
                          : NAN;
    workers_handoff(wk, nwk, S, x);
    lead_loader(wk, nwk, S, x, all->steps);
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st);
    x->nall = 0; /* all[] is free again: the medians above are taken */
    waits_of(st, nst, wk, nwk, v, S, x);
}

/* --- the machine and its threads (host.cpu_oversubscribed, the advice) */

/* The positive number under top-level key "key" of a meta.json text; NAN
 * when absent or not a positive number. */
static double meta_num(const char *meta, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = meta ? strstr(meta, pat) : NULL;
    if (!p)
        return NAN;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p++ != ':')
        return NAN;
    char *end;
    double d = strtod(p, &end);
    return end == p || !isfinite(d) || d <= 0 ? NAN : d;
}

/* Whether meta.json's "host" is host (a host name has no escapes). */
static bool meta_host_is(const char *meta, const char *host)
{
    const char *p = meta ? strstr(meta, "\"host\"") : NULL;
    if (!p)
        return false;
    p += 6;
    while (*p == ' ' || *p == ':')
        p++;
    size_t n = strlen(host);
    return *p == '"' && strncmp(p + 1, host, n) == 0 && p[1 + n] == '"';
}

/* The thread counts of source s: its last torch_threads event (written
 * after each torch.set_num_threads), else those of its inproc.start event
 * (the agent's meta at attach): intra-op, inter-op threads and the
 * affinity the agent saw (each NAN when unknown). */
static void source_threads(const tm_runview *v, uint32_t s, double *intra, double *inter,
                           double *affinity)
{
    const tm_run_event *ev;
    size_t n = tm_run_events(v->r, &ev);
    int64_t last = INT64_MIN;
    bool from_set = false;
    *intra = *inter = *affinity = NAN;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].source != s)
            continue;
        bool set = strcmp(ev[i].name, "torch_threads") == 0;
        if (!set && (from_set || strcmp(ev[i].name, "inproc.start") != 0))
            continue;
        if (set == from_set && ev[i].t_ns < last)
            continue;
        double t = tm_event_num(ev[i].json, "intra_op");
        if (!(t >= 1))
            continue;
        last = ev[i].t_ns;
        from_set = set;
        *intra = t;
        *inter = tm_event_num(ev[i].json, "inter_op");
        *affinity = tm_event_num(ev[i].json, "affinity_cpus");
    }
}

/* The usable and online CPUs of host from meta.json (the directory whose
 * "host" it is; a single directory's whatever its host). */
static void host_cpus(const tm_runview *v, const char *host, double *usable, double *online)
{
    const char *const *dirs;
    size_t nd = tm_run_dirs(v->r, &dirs);
    *usable = *online = NAN;
    for (size_t i = 0; i < nd; i++) {
        const char *meta = tm_run_meta(v->r, i);
        if (!meta || (nd > 1 && !meta_host_is(meta, host)))
            continue;
        *usable = meta_num(meta, "usable_cpus");
        *online = meta_num(meta, "online_cpus");
        if (!isnan(*usable))
            return;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Compute per judged step of every training process: the fastest tenth
 * and the median of each process's first tenth (pooled). */
static void compute_baselines(const tm_runview *v, tm_an_summary *S, const tm_an_rank *ranks,
                              size_t nranks)
{
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st);
    S->compute_fast_s = S->compute_early_s = NAN;
    double *all = malloc((nst ? nst : 1) * sizeof *all);
    double *early = malloc((nst ? nst : 1) * sizeof *early);
    size_t na = 0, ne = 0;
    if (!all || !early)
        goto out;
    for (size_t r = 0; r < nranks; r++) {
        tm_steptally t;
        tm_steptally_init(&t);
        size_t first = na;
        for (size_t i = 0; i < nst; i++) {
            double d, w;
            if (st[i].source != ranks[r].source || !tm_steptally_add(&t, &st[i].s) ||
                !tm_step_times(&st[i].s, &d, &w) || t.steps <= TM_STEP_WARMUP)
                continue;
            all[na++] = d - w;
        }
        size_t k = (na - first) / 10;
        if (k < 3)
            k = na - first < 3 ? na - first : 3;
        for (size_t i = 0; i < k; i++)
            early[ne++] = all[first + i];
    }
    if (na) {
        qsort(all, na, sizeof *all, cmp_double);
        S->compute_fast_s = all[na / 10];
    }
    S->compute_early_s = tm_runsum_median(early, ne);
out:
    free(all);
    free(early);
}

/* The thread arithmetic of each host (training processes x intra-op
 * threads + DataLoader workers against its usable CPUs); the summary
 * keeps the host with the most runnable threads per usable CPU. */
static void summarize_machine(const tm_runview *v, tm_an_summary *S, const tm_an_rank *ranks,
                              size_t nranks)
{
    S->usable_cpus = S->online_cpus = S->torch_threads = S->interop_threads = NAN;
    S->runnable_threads = NAN;
    S->job_cpu_cores = tm_runsum_ser_mean_all(v, TM_SER_PROC_CPU_UTILIZATION, NULL);
    S->gpu = S->ngpus > 0;
    for (size_t i = 0; i < nranks; i++)
        if (ranks[i].total_device > 0 || ranks[i].peak_reserved > 0)
            S->gpu = true;
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev);
    S->data_hung_wait_s = NAN;
    for (size_t i = 0; i < nev; i++) {
        if (!strcmp(ev[i].name, "run_target") || !strcmp(ev[i].name, "watch_target")) {
            S->data_paths = true;
        } else if (!strcmp(ev[i].name, "run_target_unanswered")) {
            S->data_paths = true;
            if (S->data_hung++ == 0) {
                event_str(ev[i].json, "path", S->data_hung_path, sizeof S->data_hung_path);
                S->data_hung_wait_s = tm_event_num(ev[i].json, "wait_s");
            }
        }
    }
    compute_baselines(v, S, ranks, nranks);
    double worst = -1;
    for (size_t i = 0; i < nranks; i++) {
        const char *host = ranks[i].host ? ranks[i].host : "";
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = !strcmp(ranks[j].host ? ranks[j].host : "", host);
        if (seen)
            continue;
        double threads = NAN, interop = NAN, aff = NAN;
        size_t nr = 0, nw = 0;
        for (size_t j = i; j < nranks; j++) {
            if (strcmp(ranks[j].host ? ranks[j].host : "", host) != 0)
                continue;
            double t, it, a;
            source_threads(v, ranks[j].source, &t, &it, &a);
            if (!(t <= threads))
                threads = t;
            if (!(it <= interop))
                interop = it;
            if (!isnan(a))
                aff = a;
            nr++;
            nw += ranks[j].workers;
        }
        double usable, online;
        host_cpus(v, host, &usable, &online);
        if (isnan(usable))
            usable = aff;
        double runnable = threads * (double)nr + (double)nw;
        double load = runnable / usable;
        if (isnan(load) ? worst >= 0 : load <= worst)
            continue;
        worst = isnan(load) ? 0 : load;
        snprintf(S->cpu_host, sizeof S->cpu_host, "%s", host);
        S->usable_cpus = usable;
        S->online_cpus = online;
        S->torch_threads = threads;
        S->interop_threads = interop;
        S->runnable_threads = runnable;
        S->host_ranks = nr;
        S->host_workers = nw;
    }
}

int tm_runsum_build(tm_runview *v, tm_an_summary *S, tm_an_rank **ranks, size_t *nranks)
{
    const tm_run_step *st;
    const tm_run_worker *wk;
    size_t nst = tm_run_steps(v->r, &st), nwk = tm_run_workers(v->r, &wk);
    struct scratch x = {
        .all = malloc((nst ? nst : 1) * sizeof *x.all),
        .all_c = malloc((nst ? nst : 1) * sizeof *x.all_c),
        .tmp = malloc((nst + nwk + 1) * sizeof *x.tmp),
        .keys = malloc((nwk ? nwk : 1) * sizeof *x.keys),
        .lane = malloc((nwk ? nwk : 1) * sizeof *x.lane),
    };
    *nranks = 0;
    *ranks = calloc(v->nsrc ? v->nsrc : 1, sizeof **ranks);
    if (!x.all || !x.all_c || !x.tmp || !x.keys || !x.lane || !*ranks) {
        free(x.all);
        free(x.all_c);
        free(x.tmp);
        free(x.keys);
        free(x.lane);
        free(*ranks);
        *ranks = NULL;
        return -ENOMEM;
    }
    memset(S, 0, sizeof *S);
    tm_runsum_worker_lanes(v, wk, nwk, x.lane);
    tm_steptally all;
    int64_t w0 = 0, w1 = 0;
    summarize_ranks(v, S, *ranks, nranks, &x, &all, &w0, &w1);
    summarize_run(v, S, *ranks, *nranks, &x, &all);
    /* The window: the span of the complete steps, else the whole run. */
    if (w1 > w0) {
        v->w0 = w0;
        v->w1 = w1;
    } else {
        tm_run_span(v->r, &v->w0, &v->w1);
    }
    S->win_start = v->w0;
    S->win_end = v->w1;
    (void)tm_runsum_job_gpus(v, *ranks, *nranks); /* out of memory: every GPU */
    summarize_system(v, S);
    summarize_dataset(v, S);
    summarize_machine(v, S, *ranks, *nranks);
    summarize_agent(v, S);
    tm_runsum_checkpoints(v, S);
    tm_runsum_compiles(v, S);
    tm_runsum_gc(v, S, *ranks, *nranks); /* each row net of its own pauses, as the run's */
    tm_runsum_stalls(v, S, *ranks, *nranks);
    tm_runsum_overlap(v, S, *ranks, *nranks);
    /* The Python processes in which the in-process recorder did not load
     * said so in their run directory (agentnote.h). */
    const char *const *dirs;
    size_t ndirs = tm_run_dirs(v->r, &dirs);
    for (size_t i = 0; i < ndirs; i++)
        (void)tm_agent_notes_scan(dirs[i], &S->agent_notes);
    tm_runsum_others(v, S); /* (after the notes) */
    summarize_probe(v, S);
    free(x.all);
    free(x.all_c);
    free(x.tmp);
    free(x.keys);
    free(x.lane);
    return 0;
}

int tm_runsum_view_open(tm_runview *v, const tm_run *r)
{
    memset(v, 0, sizeof *v);
    v->r = r;
    v->nsrc = tm_run_sources(r, &v->src);
    v->nser = tm_run_series_list(r, &v->ser);
    return collect_worker_pids(v);
}

void tm_runsum_view_close(tm_runview *v)
{
    free(v->job_gpu);
    v->job_gpu = NULL;
    free(v->wp);
    v->wp = NULL;
    v->nwp = 0;
}

tm_run_loop *tm_runsum_loops(const tm_runview *v)
{
    tm_run_loop *L = calloc(v->nsrc ? v->nsrc : 1, sizeof *L);
    if (!L)
        return NULL;
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st);
    for (size_t i = 0; i < nst; i++) {
        if (st[i].source >= v->nsrc)
            continue;
        tm_run_loop *l = &L[st[i].source];
        const tm_inproc_step *x = &st[i].s;
        double d;
        if (tm_step_times(x, &d, NULL)) {
            if (!l->train_n || x->start_ns < l->lo)
                l->lo = x->start_ns;
            if (!l->train_n || x->end_ns > l->hi)
                l->hi = x->end_ns;
            l->train_s += d;
            l->train_n++;
        } else if (x->phase == TM_STEP_EVAL && x->end_ns > x->start_ns &&
                   !(x->flags & TM_STEP_ENDED_AT_EXIT)) {
            l->eval_s += (double)((uint64_t)x->end_ns - (uint64_t)x->start_ns) / 1e9;
        }
    }
    return L;
}

void tm_runsum_net_wait(tm_an_summary *S, double g)
{
    if (!(g > 0))
        return;
    g = fmin(g, 1);
    S->data_wait_fraction *= 1 - g;
    if (isfinite(S->steady_wait_fraction))
        S->steady_wait_fraction *= 1 - g;
    if (isfinite(S->time_lost_s))
        S->time_lost_s *= 1 - g;
    if (S->speedup >= 1) /* step / (step - wait): the wait's share is 1 - 1/speedup */
        S->speedup = 1 / (1 - (1 - 1 / S->speedup) * (1 - g));
}
