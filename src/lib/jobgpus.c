/*
 * jobgpus.c - which of the recorded GPUs are the job's (docs/DIAGNOSIS.md,
 * "gpu.underutilized").
 *
 * `trainmon run` and `watch` record every GPU of the machine, and a job
 * often runs on some of them: a one-GPU experiment on an eight-GPU node, a
 * DDP job on four of eight.  The GPU findings judge the job's GPUs only:
 * the mean of all eight read a one-GPU job 95% busy as "underutilized,
 * 12%", and another job's GPU swinging beside it as this job's swing.
 *
 * NVML lists the compute processes on each GPU with the memory they hold
 * (gpu.process_memory_bytes{gpu,pid} in the host's system record).  A
 * training process (a rank, or the one process of a job) of that host
 * whose pid NVML lists, while the process recorded (a pid is reused), is
 * on those GPUs; of them, its own are those where
 * it holds at least TM_AN_JOB_GPU_SHARE of the most it holds on any: a
 * CUDA context of a few hundred MiB on cuda:0, made by a call before
 * torch.cuda.set_device (every rank of a DDP job that does so has one
 * there), is no GPU of its own beside its 20 GB, while a pipeline stage's
 * 10 GB beside another's 70 GB is.  A GPU is the job's when it is one of
 * some training process's own.  Where NVML lists none of a host's
 * training processes on any GPU (a container's pids are not the
 * driver's; a run without a training process), every GPU of that host
 * counts, as before.  The driver's "not available" memory counts as 1
 * byte: present, of unknown size.
 *
 * Computed once per analysis (tm_runsum_build) into the view: one walk over
 * the series for the processes' memory, one for the utilizations.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis.h"
#include "runsum.h"
#include "series.h"

/* A training process's memory on one GPU: its gpu.process_memory_bytes
 * series (the source is the record holding it, gpu its label) */
struct held {
    size_t rank; /* index in ranks */
    uint32_t source;
    char gpu[16];
    double most; /* bytes, at least 1 */
};

/* The index of the training process of host with this pid, or SIZE_MAX */
static size_t rank_of(const tm_runview *v, const tm_an_rank *ranks, size_t nranks, const char *host,
                      long pid)
{
    for (size_t r = 0; r < nranks; r++) {
        if (ranks[r].source >= v->nsrc)
            continue;
        const tm_run_source *s = &v->src[ranks[r].source];
        if (s->header.pid == pid && pid > 0 && strcmp(s->header.host, host) == 0)
            return r;
    }
    return SIZE_MAX;
}

int tm_runsum_job_gpus(tm_runview *v, const tm_an_rank *ranks, size_t nranks)
{
    free(v->job_gpu);
    v->job_gpu = calloc(v->nser ? v->nser : 1, sizeof *v->job_gpu);
    struct held *h = malloc((v->nser ? v->nser : 1) * sizeof *h);
    double *top = calloc(nranks ? nranks : 1, sizeof *top); /* each process's most */
    if (!v->job_gpu || !h || !top) {
        free(v->job_gpu);
        v->job_gpu = NULL; /* every GPU the job's (tm_runsum_is_job_gpu) */
        free(h);
        free(top);
        return -ENOMEM;
    }
    size_t nh = 0;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *m = &v->ser[i];
        char p[16], *end;
        if (strcmp(m->name, TM_SER_GPU_PROCESS_MEMORY_BYTES) != 0 || m->source >= v->nsrc ||
            !tm_labels_get(m->labels, "pid", p, sizeof p))
            continue;
        long pid = strtol(p, &end, 10);
        if (end == p || *end)
            continue;
        size_t r = rank_of(v, ranks, nranks, v->src[m->source].header.host, pid);
        struct held x = {.rank = r, .source = m->source, .most = 1};
        if (r == SIZE_MAX || !tm_labels_get(m->labels, "gpu", x.gpu, sizeof x.gpu))
            continue;
        /* while the process ran: NVML's pid may be another's before or after */
        const tm_run_source *rs = &v->src[ranks[r].source];
        bool seen = false;
        for (size_t j = 0; j < m->n; j++) {
            if (m->t_ns[j] < rs->first_ns || m->t_ns[j] > rs->last_ns)
                continue;
            seen = true;
            if (isfinite(m->v[j]) && m->v[j] > x.most)
                x.most = m->v[j];
        }
        if (!seen)
            continue;
        if (x.most > top[r])
            top[r] = x.most;
        h[nh++] = x;
    }
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        char gpu[16];
        if (strcmp(s->name, TM_SER_GPU_UTILIZATION) != 0 || s->source >= v->nsrc)
            continue;
        const char *host = v->src[s->source].header.host;
        bool named = false, own = false;
        bool labelled = tm_labels_get(s->labels, "gpu", gpu, sizeof gpu);
        for (size_t k = 0; k < nh && !own; k++) {
            if (strcmp(v->src[h[k].source].header.host, host) != 0)
                continue;
            named = true;
            own = labelled && h[k].source == s->source && strcmp(h[k].gpu, gpu) == 0 &&
                  h[k].most >= TM_AN_JOB_GPU_SHARE * top[h[k].rank];
        }
        v->job_gpu[i] = own || !named;
    }
    free(h);
    free(top);
    return 0;
}

bool tm_runsum_is_job_gpu(const tm_runview *v, const tm_run_series *s)
{
    size_t i = (size_t)(s - v->ser);
    return !v->job_gpu || i >= v->nser || v->job_gpu[i];
}

void tm_job_gpus_live(const tm_gpu_stats *gpus, size_t n, const tm_procinfo *procs, size_t np,
                      bool *mark)
{
    bool named = false;
    for (size_t i = 0; i < n; i++)
        mark[i] = false;
    for (size_t k = 0; k < np; k++) {
        uint64_t most = 0;
        bool on = false;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < gpus[i].nprocs; j++)
                if (gpus[i].procs[j].pid == procs[k].pid) {
                    on = true;
                    if (gpus[i].procs[j].mem_valid && gpus[i].procs[j].used_bytes > most)
                        most = gpus[i].procs[j].used_bytes;
                }
        if (!on)
            continue;
        named = true;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < gpus[i].nprocs; j++) {
                const tm_gpu_proc *g = &gpus[i].procs[j];
                if (g->pid == procs[k].pid &&
                    (!g->mem_valid || !most ||
                     (double)g->used_bytes >= TM_AN_JOB_GPU_SHARE * (double)most))
                    mark[i] = true;
            }
    }
    for (size_t i = 0; !named && i < n; i++)
        mark[i] = true;
}

bool tm_runsum_pid_on_a_gpu(const tm_runview *v, const char *host, int32_t pid)
{
    char want[16], p[16];
    snprintf(want, sizeof want, "%d", (int)pid);
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *m = &v->ser[i];
        if (strcmp(m->name, TM_SER_GPU_PROCESS_MEMORY_BYTES) == 0 && m->source < v->nsrc &&
            strcmp(v->src[m->source].header.host, host) == 0 &&
            tm_labels_get(m->labels, "pid", p, sizeof p) && strcmp(p, want) == 0)
            return true;
    }
    return false;
}
