/*
 * sysrec_procs.c - records per-process series for the processes of a tree
 * (the training job's main process, torchrun ranks, DataLoader workers).
 *
 * The report tells a storage-bound input pipeline from a CPU-bound one by
 * what the workers do: busy on a core, or waiting in D state while their
 * read rate is high.  Those are per-process rates, so this module keeps the
 * previous sample's CPU time and I/O counters per process: the tree's own
 * process table (tm_ptree_stats.procs) is only valid until its next sample,
 * so it cannot serve as the previous sample.  A process is matched to its
 * previous sample by pid and starttime, so that a reused pid starts afresh.
 *
 * Series (labels "pid=<pid>,comm=<comm>", comm with ',' '=' and control
 * characters replaced by '_'):
 *   proc.process_cpu_utilization              cores  (user+system, rate)
 *   proc.process_state_d                             1 in D state, else 0
 *   proc.process_read_bytes_per_second        B/s    (from the block layer)
 *   proc.process_rchar_bytes_per_second       B/s    (read() calls, cache included)
 *   proc.process_rss_bytes                    B
 *   proc.process_pss_bytes                    B      (when smaps_rollup was read)
 * Rates need a previous sample of the same process; state, RSS and PSS are
 * written from the first sample on.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "series.h"
#include "sysrec.h"
#include "util.h"

struct procrec_prev {
    pid_t pid;
    uint64_t starttime;
    unsigned valid; /* TM_PROC_HAVE_* */
    double cpu_s;
    uint64_t read_bytes, rchar;
};

struct tm_procrec {
    int64_t prev_t_ns; /* the tree's sample time of prev, 0 before the first */
    size_t nprev;
    struct procrec_prev prev[TM_PROCREC_MAX];
};

int tm_procrec_new(tm_procrec **out)
{
    if (!out)
        return tm_seterr(-EINVAL, "tm_procrec_new: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return tm_seterr(-ENOMEM, "per-process recording: out of memory");
    return 0;
}

void tm_procrec_free(tm_procrec **pr)
{
    if (!pr || !*pr)
        return;
    free(*pr);
    *pr = NULL;
}

static const struct procrec_prev *procrec_find(const tm_procrec *pr, const tm_procinfo *p)
{
    for (size_t i = 0; i < pr->nprev; i++)
        if (pr->prev[i].pid == p->pid && pr->prev[i].starttime == p->starttime)
            return &pr->prev[i];
    return NULL;
}

/* comm is chosen by the process (prctl PR_SET_NAME): it may hold the
 * separators of the labels text. */
static void procrec_labels(char *buf, size_t cap, const tm_procinfo *p)
{
    char comm[sizeof p->comm];
    size_t i;
    for (i = 0; i + 1 < sizeof comm && p->comm[i]; i++) {
        unsigned char c = (unsigned char)p->comm[i];
        comm[i] = (c == ',' || c == '=' || c < 0x20 || c == 0x7f) ? '_' : (char)c;
    }
    comm[i] = '\0';
    snprintf(buf, cap, "pid=%d,comm=%s", (int)p->pid, comm);
}

int tm_procrec_write(tm_procrec *pr, tm_rec *w, int64_t t_ns, const tm_ptree_stats *ts)
{
    if (!pr || !w || !ts)
        return tm_seterr(-EINVAL, "tm_procrec_write: NULL argument");
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    double dt = pr->prev_t_ns ? (double)(ts->t_ns - pr->prev_t_ns) / 1e9 : NAN;
    if (!(dt > 0))
        dt = NAN; /* no previous sample, or the same one again: no rates */
    size_t n = ts->nproc < TM_PROCREC_MAX ? ts->nproc : TM_PROCREC_MAX;
    if (!ts->procs)
        n = 0;
    int first_err = 0;
    for (size_t i = 0; i < n; i++) {
        const tm_procinfo *p = &ts->procs[i];
        const struct procrec_prev *q = isnan(dt) ? NULL : procrec_find(pr, p);
        double cpu = NAN, rd = NAN, rchar = NAN;
        double cpu_now = p->utime_s + p->stime_s;
        if (q && (p->valid & q->valid & TM_PROC_HAVE_STAT) && cpu_now >= q->cpu_s)
            cpu = (cpu_now - q->cpu_s) / dt;
        if (q && (p->valid & q->valid & TM_PROC_HAVE_IO)) {
            if (p->read_bytes >= q->read_bytes)
                rd = (double)(p->read_bytes - q->read_bytes) / dt;
            if (p->rchar >= q->rchar)
                rchar = (double)(p->rchar - q->rchar) / dt;
        }
        const struct tm_sysrec_val vals[] = {
            {TM_SER_PROC_PROCESS_CPU_UTILIZATION, "cores", cpu},
            {TM_SER_PROC_PROCESS_STATE_D, "",
             (p->valid & TM_PROC_HAVE_STAT) ? (p->state == 'D') : NAN},
            {TM_SER_PROC_PROCESS_READ_BYTES_PER_SECOND, "B/s", rd},
            {TM_SER_PROC_PROCESS_RCHAR_BYTES_PER_SECOND, "B/s", rchar},
            {TM_SER_PROC_PROCESS_RSS_BYTES, "B",
             (p->valid & TM_PROC_HAVE_RSS) ? (double)p->rss_bytes : NAN},
            {TM_SER_PROC_PROCESS_PSS_BYTES, "B",
             (p->valid & TM_PROC_HAVE_PSS) ? (double)p->pss_bytes : NAN},
        };
        char labels[96];
        procrec_labels(labels, sizeof labels, p);
        int rc = tm_sysrec_put(w, t_ns, labels, vals, TM_ARRAY_LEN(vals));
        if (rc < 0 && !first_err)
            first_err = rc;
        if (rc == -ENOSPC)
            break; /* the disk is full: the next ones would fail the same way */
    }
    /* The processes of this sample become the previous ones, also those
     * whose recording failed (their counters are still right). */
    for (size_t i = 0; i < n; i++) {
        const tm_procinfo *p = &ts->procs[i];
        pr->prev[i] = (struct procrec_prev){.pid = p->pid,
                                            .starttime = p->starttime,
                                            .valid = p->valid,
                                            .cpu_s = p->utime_s + p->stime_s,
                                            .read_bytes = p->read_bytes,
                                            .rchar = p->rchar};
    }
    pr->nprev = n;
    pr->prev_t_ns = ts->t_ns;
    if (first_err < 0)
        return tm_seterr(first_err, "recording per-process series: %s", strerror(-first_err));
    return 0;
}
