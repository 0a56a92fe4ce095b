/*
 * runsum_others.c - the job's other processes, for input.main_prep
 * (docs/DIAGNOSIS.md).
 *
 * `trainmon run` records a CPU series for every process of the job's tree
 * (proc.process_cpu_utilization{pid,comm}, sysrec_procs.c).  Those of a
 * training process (a record file of its own, same host) and of the
 * DataLoader workers (worker records) are the loop's; the rest are the
 * job's other processes: producers feeding a multiprocessing queue, a
 * data server the job started, a launcher, a tracker's service.  Their
 * mean CPU over the analysis window (the loop) is summed here.  A loop
 * fed by producers of its own waits on them, not on its own thread: the
 * training thread is off a CPU in its "batch preparation" (a queue's
 * get), and rules_input.c then names them instead of a memmap's page
 * faults or slow storage.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "runsum.h"
#include "series.h"

/* Whether pid on host is a training process (a record file of its own). */
static bool is_training_pid(const tm_runview *v, uint32_t pid, const char *host)
{
    for (size_t i = 0; i < v->nsrc; i++)
        if (tm_rec_is_training(&v->src[i].header) && v->src[i].header.pid > 0 &&
            (uint32_t)v->src[i].header.pid == pid && strcmp(v->src[i].header.host, host) == 0)
            return true;
    return false;
}

void tm_runsum_others(const tm_runview *v, tm_an_summary *S)
{
    S->others_cpu = S->others_top_cpu = NAN;
    S->others_n = 0;
    S->others_top_pid = 0;
    S->others_top_comm[0] = '\0';
    double sum = 0;
    bool any = false;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        char buf[32];
        if (strcmp(s->name, TM_SER_PROC_PROCESS_CPU_UTILIZATION) != 0 ||
            tm_runsum_worker_series_index(v, s) >= 0 ||
            !tm_labels_get(s->labels, "pid", buf, sizeof buf))
            continue;
        char *end;
        unsigned long pid = strtoul(buf, &end, 10);
        if (end == buf || *end || pid == 0 || pid > UINT32_MAX ||
            is_training_pid(v, (uint32_t)pid, v->src[s->source].header.host))
            continue;
        double m = tm_runsum_ser_mean(v, s, NULL);
        if (!isfinite(m) || m < 0)
            continue;
        any = true;
        sum += m;
        if (m >= TM_AN_OTHERS_PROC_CPU)
            S->others_n++;
        if (!(m <= S->others_top_cpu)) { /* (the first: NAN) */
            S->others_top_cpu = m;
            S->others_top_pid = (uint32_t)pid;
            if (!tm_labels_get(s->labels, "comm", S->others_top_comm, sizeof S->others_top_comm))
                S->others_top_comm[0] = '\0';
        }
    }
    if (any)
        S->others_cpu = sum;
}
