/*
 * bench_gpu.c - CPU time of one GPU sample per device, on the fake NVML
 * (tests/fakes/fake_nvml.c): 4 devices with 8 compute processes each and
 * fresh per-process utilization samples at every call, so every path of a
 * sample runs.  The fake's calls cost next to nothing, so this measures
 * trainmon's own work around NVML (the budget: 50 us per device).  A real
 * driver adds its own cost (an ioctl per call, and nvmlDeviceGetPcieThroughput
 * waits about 20 ms of wall time; see docs/GPU.md).
 *
 * usage: bench_gpu [FAKE_LIB [SAMPLES]]
 *   FAKE_LIB defaults to build/tests/fakes/fake_nvml.so (run from the repo root).
 * Prints "gpu_us_per_device=X devices=4 procs_per_device=8" (the median of
 * per-batch means of CPU time, CLOCK_PROCESS_CPUTIME_ID).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainmon.h"

#define NDEV 4
#define NPROC 8
#define BATCH 100

static double cpu_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *lib = argc > 1 ? argv[1] : "build/tests/fakes/fake_nvml.so";
    int samples = argc > 2 ? atoi(argv[2]) : 5000;
    if (samples < BATCH)
        samples = BATCH;

    char script[4096];
    size_t len = (size_t)snprintf(script, sizeof script, "devices=%d", NDEV);
    for (int d = 0; d < NDEV; d++) {
        len += (size_t)snprintf(
            script + len, sizeof script - len,
            ";d%d.uuid=GPU-bench-%d;d%d.throttle=0x4;d%d.putil_fresh=1;d%d.procs=", d, d, d, d, d);
        for (int p = 0; p < NPROC; p++)
            len += (size_t)snprintf(script + len, sizeof script - len, "%s%d:%llu", p ? "," : "",
                                    10000 + d * 100 + p, (unsigned long long)(p + 1) << 28);
    }
    setenv("TRAINMON_NVML_LIB", lib, 1);
    setenv("FAKE_NVML", script, 1);

    tm_gpu *g = NULL;
    if (tm_gpu_open(&g, NULL, 0) != 0) {
        fprintf(stderr, "bench_gpu: %s: %s\n", lib, tm_last_error());
        return 1;
    }
    const tm_gpu_stats *s;
    size_t n = 0;
    for (int i = 0; i < BATCH; i++) /* warm-up: buffers grown, caches hot */
        tm_gpu_sample(g, &s, &n);
    if (n != NDEV || s[0].nprocs != NPROC || !(s[0].valid & TM_GPU_HAVE_PROC_UTIL) ||
        s[0].procs[0].sm_util != s[0].procs[0].sm_util /* NAN */) {
        fprintf(stderr,
                "bench_gpu: the fake did not give %d GPUs of %d processes with "
                "utilization\n",
                NDEV, NPROC);
        return 1;
    }
    int nb = samples / BATCH;
    double *per = calloc((size_t)nb, sizeof *per);
    if (!per)
        return 1;
    for (int b = 0; b < nb; b++) {
        double t0 = cpu_now_us();
        for (int i = 0; i < BATCH; i++)
            tm_gpu_sample(g, &s, &n);
        per[b] = (cpu_now_us() - t0) / BATCH / NDEV;
    }
    qsort(per, (size_t)nb, sizeof *per, cmp_double);
    printf("gpu_us_per_device=%.3f devices=%d procs_per_device=%d\n", per[nb / 2], NDEV, NPROC);
    const char *w;
    while ((w = tm_gpu_next_warning(g)) != NULL)
        fprintf(stderr, "bench_gpu: warning: %s\n", w);
    free(per);
    tm_gpu_close(&g);
    return 0;
}
