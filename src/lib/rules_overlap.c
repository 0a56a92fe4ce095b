/*
 * rules_overlap.c - input.overlapped: the loop waited, but its GPU did not
 * (docs/DIAGNOSIS.md, "input.overlapped").
 *
 * The step model times the loop on the host: the data wait is how long the
 * training thread spent in the DataLoader's __next__, or, without a
 * DataLoader, between a step's end and the next forward.  CUDA calls
 * return before the GPU has run them, so the host runs ahead of the GPU
 * and waits at the next call that blocks: for a batch, or in that span at
 * a blocking copy (.to(device) from pageable memory synchronizes its
 * stream), float(loss) or print(loss), while the GPU still works through
 * the forward, backward and optimizer kernels queued before.  Such a wait
 * costs the GPU nothing, and host time alone cannot tell it from a GPU
 * starved of data.  The GPU's own utilization can: if the GPU had idled
 * for the wait, it was busy at most 1 - wait of the time; NVML read it
 * busy well above that.  The input verdict of rules_input.c asks
 * tm_an_input_is_overlapped() first, so that such a run is not told to
 * fix an input that kept up (a build-nanogpt-style loop on a GPU read
 * 85% batch preparation: its torch.cuda.synchronize() after each step,
 * now left out by the agent, and the blocking copies that are not).
 *
 * The GPU: the mean utilization of the samples inside the training
 * process's steps (not an eval run's between them), of the GPUs on which
 * the process held memory (gpu.process_memory_bytes{pid} of its pid, in
 * the same record; such a GPU without a utilization series: unknown),
 * its own only (jobgpus.c: not a stray context on another GPU);
 * where no series of its host names it (NVML's pids are the host's, a
 * container's process has another), of every GPU of its host, if the
 * process's captures hold CUDA memory (a CPU job beside another's busy GPU
 * is not overlapped), which on a machine with idle GPUs beside the job's
 * reads low and keeps the verdict.  Each GPU read needs its own samples.
 * One training process only: in a multi-process job NCCL's kernels spin on
 * the GPU while its rank waits for the others, and read as busy.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "series.h"

struct span {
    int64_t lo, hi;
};

static int cmp_span(const void *a, const void *b)
{
    int64_t x = ((const struct span *)a)->lo, y = ((const struct span *)b)->lo;
    return x < y ? -1 : x > y;
}

/* Whether t lies in one of the sorted, disjoint spans sp[0..n). */
static bool in_spans(const struct span *sp, size_t n, int64_t t)
{
    size_t lo = 0, hi = n;
    while (lo < hi) { /* the first span that starts after t */
        size_t mid = lo + (hi - lo) / 2;
        if (sp[mid].lo <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && t <= sp[lo - 1].hi;
}

void tm_runsum_overlap(const tm_runview *v, tm_an_summary *S, const tm_an_rank *ranks,
                       size_t nranks)
{
    S->job_gpu_util = NAN;
    S->job_gpu_samples = 0;
    S->job_gpus = 0;
    S->job_gpus_by_pid = false;
    if (nranks != 1 || ranks[0].source >= v->nsrc)
        return; /* one training process only (tm_an_input_is_overlapped) */
    const tm_an_rank *R = &ranks[0];
    int32_t pid = v->src[R->source].header.pid;
    const char *host = v->src[R->source].header.host;
    /* Which GPUs: those the process held memory on; where NVML names it
     * on none (a container's pid), every GPU, but only for a process that
     * used a GPU at all (device memory in its captures): a CPU job beside
     * another's busy GPU is not overlapped.  The process on a GPU without
     * a utilization series (MIG): unknown. */
    bool by_pid = pid > 0 && tm_runsum_pid_on_a_gpu(v, host, pid);
    if (!by_pid && !(R->peak_reserved > 0)) /* (total_device: CUDA initialised, no more) */
        return;
    /* The samples inside its training steps: not those of an eval run or
     * a rollout between them, whose GPU work is not the steps'. */
    const tm_run_step *st;
    size_t nst = tm_run_steps(v->r, &st), n = 0;
    struct span *sp = malloc((nst ? nst : 1) * sizeof *sp);
    if (!sp)
        return;
    for (size_t i = 0; i < nst; i++)
        if (st[i].source == R->source && st[i].s.phase == TM_STEP_TRAIN &&
            st[i].s.end_ns > st[i].s.start_ns && st[i].s.end_ns >= v->w0 &&
            st[i].s.start_ns <= v->w1)
            sp[n++] = (struct span){st[i].s.start_ns, st[i].s.end_ns};
    qsort(sp, n, sizeof *sp, cmp_span);
    size_t m = 0; /* merged: disjoint */
    for (size_t i = 0; i < n; i++) {
        if (m && sp[i].lo <= sp[m - 1].hi) {
            if (sp[i].hi > sp[m - 1].hi)
                sp[m - 1].hi = sp[i].hi;
        } else
            sp[m++] = sp[i];
    }
    /* its own GPUs (jobgpus.c: a stray context of a few hundred MiB on
     * another GPU, torch's cuda:0 before set_device, idle or another
     * job's, is none), else every GPU of its host */
    double sum = 0;
    size_t k = 0, least = SIZE_MAX;
    for (size_t i = 0; i < v->nser; i++) {
        const tm_run_series *s = &v->ser[i];
        if (strcmp(s->name, TM_SER_GPU_UTILIZATION) != 0 ||
            strcmp(v->src[s->source].header.host, host) != 0 || !tm_runsum_is_job_gpu(v, s))
            continue;
        double su = 0;
        size_t c = 0;
        for (size_t j = 0; j < s->n; j++)
            if (isfinite(s->v[j]) && in_spans(sp, m, s->t_ns[j])) {
                su += s->v[j];
                c++;
            }
        if (!c)
            continue;
        sum += su / (double)c;
        k++;
        if (c < least)
            least = c;
    }
    free(sp);
    if (k) {
        S->job_gpu_util = sum / (double)k;
        S->job_gpu_samples = least;
        S->job_gpus = k;
        S->job_gpus_by_pid = by_pid;
    }
}

bool tm_an_input_is_overlapped(const tm_an_summary *S, size_t nranks)
{
    double u = S->job_gpu_util, w = S->data_wait_fraction;
    return nranks <= 1 && S->step_procs <= 1 && w >= TM_AN_DATA_WAIT_FRACTION &&
           S->job_gpu_samples >= TM_AN_OVERLAP_MIN_SAMPLES && u >= TM_AN_OVERLAP_GPU_BUSY &&
           u >= 1 - w + TM_AN_OVERLAP_MARGIN;
}

void tm_rule_input_overlapped(struct an *an)
{
    const tm_an_summary *S = &an->a->sum;
    if (!tm_an_input_is_overlapped(S, an->a->nranks))
        return;
    bool prep = S->prep_steps > 0 && 2 * S->prep_steps > S->steps_total;
    struct ev e;
    tm_an_ev_open(&e);
    tm_an_ev_input_head(&e, S);
    tm_an_ev_num(&e, "gpu_utilization_mean", S->job_gpu_util);
    tm_an_ev_num(&e, "gpu_busy_if_starved", 1 - S->data_wait_fraction);
    tm_an_ev_num(&e, "gpu_busy_margin", TM_AN_OVERLAP_MARGIN);
    tm_an_ev_num(&e, "gpus", (double)S->job_gpus);
    tm_an_ev_str(&e, "gpus_of", S->job_gpus_by_pid ? "the training process" : "all recorded");
    tm_an_ev_num(&e, "gpu_samples", (double)S->job_gpu_samples);
    tm_an_ev_num(&e, "prep_steps", (double)S->prep_steps);
    char title[512], adv[2048];
    snprintf(title, sizeof title,
             "input overlapped with the GPU: %s %.0f%% of the step time%s, but the GPU was busy "
             "%.0f%% of the time, so it did not wait for the data",
             prep ? "the loop spent" : "the loop waited for data", 100 * S->data_wait_fraction,
             prep ? " preparing its batches (no DataLoader)" : "", 100 * S->job_gpu_util);
    snprintf(adv, sizeof adv,
             "CUDA calls return before the GPU runs them, so the host runs ahead and waits at "
             "the next call that blocks%s, while the GPU still works through the kernels queued "
             "before. Had the GPU idled for that wait it could have been busy at most %.0f%% of "
             "the time; it was busy %.0f%%. Nothing to do for the input pipeline: the GPU's "
             "own work is the limit (torch.profiler shows its kernels).",
             prep ? ": in the span before the forward, a blocking copy (.to(device) without "
                    "pin_memory and non_blocking=True synchronizes the stream), loss.item(), "
                    "float(loss) or print(loss)"
                  : ", here the DataLoader's",
             100 * (1 - S->data_wait_fraction), 100 * S->job_gpu_util);
    tm_an_add(an, TM_SEV_LOW, TM_CONF_MEDIUM, -1, &e, title, adv);
}
