/*
 * runsum_others.c - the job's other processes, for input.main_prep
 * (docs/DIAGNOSIS.md).
 *
 * `trainmon run` records a CPU series for every process of the job's tree
 * (proc.process_cpu_utilization{pid,comm}, sysrec_procs.c).  Those of a
 * training process (a record file of its own, same host) and of the
 * DataLoader workers (worker records) are the loop's; the rest are the
 * job's other processes: producers feeding a multiprocessing queue, a
 * data server the job started, a launcher, a tracker's service, a
 * subprocess run now and then.  Per host, each one's CPU is averaged over
 * the analysis window (the loop) as far as the sampler covered it,
 * time-weighted: a rate holds for the interval from the tick before its
 * sample, and a process alive for a tenth of the loop counts a tenth (a helper
 * busy for 5 s of a 25 s loop is 0.2 of a core, not the 1.0 of its own
 * samples).  The host where they used
 * most is kept.  A loop fed by producers of its own waits on them, not on
 * its own thread, and rules_input.c then names them instead of a memmap's
 * page faults or slow storage.
 *
 * Not known (NAN), so that no wait is put on them: a host whose series
 * hold no training process's pid (the job in a pid namespace of its own:
 * its pids are not the host's, and the training process would read as
 * "other"), and a run in which a Python process said the recorder did not
 * load in it (agent-<pid>.json: a training process without a record file
 * of its own would read as "other").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "runsum.h"
#include "series.h"
#include "util.h"

/* Whether pid on host is a training process (a record file of its own). */
static bool is_training_pid(const tm_runview *v, uint32_t pid, const char *host)
{
    for (size_t i = 0; i < v->nsrc; i++)
        if (tm_rec_is_training(&v->src[i].header) && v->src[i].header.pid > 0 &&
            (uint32_t)v->src[i].header.pid == pid && strcmp(v->src[i].header.host, host) == 0)
            return true;
    return false;
}

/* The pid of a per-process CPU series, 0 if s is none. */
static uint32_t cpu_series_pid(const tm_run_series *s)
{
    char buf[32];
    if (strcmp(s->name, TM_SER_PROC_PROCESS_CPU_UTILIZATION) != 0 ||
        !tm_labels_get(s->labels, "pid", buf, sizeof buf))
        return 0;
    char *end;
    unsigned long pid = strtoul(buf, &end, 10);
    return end == buf || *end || pid > UINT32_MAX ? 0 : (uint32_t)pid;
}

/* The sampler's last tick before t (the times of ticks, sorted), or
 * INT64_MIN. */
static int64_t tick_before(const tm_run_series *ticks, int64_t t)
{
    size_t lo = 0, hi = ticks ? ticks->n : 0; /* the first tick >= t: hi */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ticks->t_ns[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? ticks->t_ns[lo - 1] : INT64_MIN;
}

/* s's CPU seconds inside [c0, c1]: each rate over the interval that ends
 * at its sample and begins at the sampler's tick before it (ticks: the
 * training process's series, read at every tick), or at the series'
 * sample before, whichever is later.  So a process's first rate (its
 * first reading has none) and a rate after a gap (a tick whose read
 * failed writes nothing) each cover one tick, not back to the sample
 * before. */
static double cpu_s_in(const tm_run_series *s, const tm_run_series *ticks, int64_t c0, int64_t c1)
{
    double sum = 0;
    for (size_t k = 0; k < s->n; k++) {
        int64_t from = tick_before(ticks, s->t_ns[k]);
        if (k && s->t_ns[k - 1] > from)
            from = s->t_ns[k - 1];
        if (from == INT64_MIN)
            continue;
        int64_t a = from > c0 ? from : c0;
        int64_t b = s->t_ns[k] < c1 ? s->t_ns[k] : c1;
        if (b > a && isfinite(s->v[k]) && s->v[k] > 0)
            sum += s->v[k] * tm_ns_diff_s(b, a);
    }
    return sum;
}

struct host_others {
    double cpu, top_cpu;
    size_t n;
    uint32_t top_pid;
    const tm_run_series *top;
};

/* The other processes of host h (NAN cpu: its series hold no training
 * process's pid).  Each one's CPU seconds over the part of the window the
 * sampler covered, [c0, c1]: from the window's start or the training
 * processes' first sample to the window's end or their last (alive all
 * through the loop; a series split by a new comm, setproctitle, joined),
 * the others' intervals clipped to it alike. */
static struct host_others others_on(const tm_runview *v, const char *h)
{
    struct host_others o = {.cpu = NAN, .top_cpu = NAN};
    int64_t first = INT64_MAX, last = INT64_MIN;
    const tm_run_series *ticks = NULL;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        uint32_t pid = cpu_series_pid(s);
        if (!pid || !s->n || strcmp(v->src[s->source].header.host, h) != 0 ||
            !is_training_pid(v, pid, h))
            continue;
        if (s->t_ns[0] < first)
            first = s->t_ns[0];
        if (s->t_ns[s->n - 1] > last)
            last = s->t_ns[s->n - 1];
        if (!ticks || s->n > ticks->n)
            ticks = s;
    }
    int64_t c0 = first > v->w0 ? first : v->w0, c1 = last < v->w1 ? last : v->w1;
    if (!ticks || !(c1 > c0))
        return o;
    double span = tm_ns_diff_s(c1, c0), sum = 0;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        uint32_t pid = cpu_series_pid(s);
        if (!pid || strcmp(v->src[s->source].header.host, h) != 0 || is_training_pid(v, pid, h) ||
            tm_runsum_worker_series_index(v, s) >= 0)
            continue;
        double m = cpu_s_in(s, ticks, c0, c1) / span;
        sum += m;
        if (m >= TM_AN_OTHERS_PROC_CPU)
            o.n++;
        if (!(m <= o.top_cpu)) { /* (the first: NAN) */
            o.top_cpu = m;
            o.top_pid = pid;
            o.top = s;
        }
    }
    o.cpu = sum;
    return o;
}

void tm_runsum_others(const tm_runview *v, tm_an_summary *S)
{
    S->others_cpu = S->others_top_cpu = NAN;
    S->others_n = 0;
    S->others_top_pid = 0;
    S->others_top_comm[0] = S->others_host[0] = '\0';
    if (S->agent_notes.not_loaded > 0 || !(v->w1 > v->w0))
        return;
    size_t hosts = 0;
    for (size_t i = 0; i < v->nsrc; i++) {
        const char *h = v->src[i].header.host;
        if (!tm_rec_is_training(&v->src[i].header))
            continue;
        bool before = false; /* a host of an earlier training process */
        for (size_t j = 0; j < i && !before; j++)
            before = tm_rec_is_training(&v->src[j].header) && strcmp(v->src[j].header.host, h) == 0;
        if (before)
            continue;
        hosts++;
        struct host_others o = others_on(v, h);
        if (!isfinite(o.cpu) || o.cpu <= S->others_cpu)
            continue;
        S->others_cpu = o.cpu;
        S->others_n = o.n;
        S->others_top_pid = o.top_pid;
        S->others_top_cpu = o.top_cpu;
        snprintf(S->others_host, sizeof S->others_host, "%s", h);
        if (!o.top ||
            !tm_labels_get(o.top->labels, "comm", S->others_top_comm, sizeof S->others_top_comm))
            S->others_top_comm[0] = '\0';
    }
    if (hosts < 2)
        S->others_host[0] = '\0'; /* named only among several */
}
