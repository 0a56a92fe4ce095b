/*
 * bench_report - the cost of `trainmon report` on a long run: generates a
 * 24-hour recording at 1 s (system.tmr with disk, pressure, process-tree
 * and 8 GPUs' series every second; 8 rank files with a step and an
 * allocator capture every second) into a temporary directory, then times
 * tm_run_load + tm_analyze + the JSON report.
 *
 *   bench_report [HOURS] [RANKS]
 *   bench_report --load DIR     (time an existing run directory only)
 *
 * Prints one line: report_s=X load_s=X analyze_s=X json_s=X data_mb=X
 * records=N peak_rss_mb=X (peak RSS of the whole process, generation
 * included: the writer maps one block at a time, so it is the reader's).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainmon.h"

#define NGPU 8

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static off_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : 0;
}

static int die(const char *what)
{
    fprintf(stderr, "bench_report: %s: %s\n", what, tm_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "--load") == 0) {
        const char *dirs[] = {argv[2]};
        tm_run *run;
        double a = now_s();
        if (tm_run_load(&run, dirs, 1) < 0)
            return die("load");
        printf("load_s=%.3f\n", now_s() - a);
        tm_run_free(&run);
        return 0;
    }
    double hours = argc > 1 ? atof(argv[1]) : 24;
    int nranks = argc > 2 ? atoi(argv[2]) : 8;
    long secs = (long)(hours * 3600);
    char dir[] = "/tmp/bench_report.XXXXXX";
    if (!mkdtemp(dir))
        return 1;
    char path[256];
    int64_t t0 = tm_now_mono_ns();
    double bytes = 0;

    /* system.tmr */
    snprintf(path, sizeof path, "%s/system.tmr", dir);
    tm_rec_opts so = {.role = "system", .rank = -1};
    tm_rec *w;
    if (tm_rec_open(&w, path, &so) < 0)
        return die(path);
    tm_rec_event(w, t0, "run_target", "{\"path\":\"/data\",\"disks\":[\"nvme0n1\"]}");
    tm_diskrate dr = {.name = "nvme0n1",
                      .r_s = 900,
                      .w_s = 10,
                      .d_s = 0,
                      .f_s = 1,
                      .rkb_s = 400000,
                      .wkb_s = 100,
                      .dkb_s = 0,
                      .rrqm_s = 1,
                      .wrqm_s = 1,
                      .r_await = 0.3,
                      .w_await = 0.2,
                      .d_await = 0,
                      .f_await = 0.1,
                      .rareq_sz = 128,
                      .wareq_sz = 4,
                      .aqu_sz = 0.5,
                      .util = 40};
    tm_pressure_stats ps = {.valid =
                                TM_PRESSURE_HAVE_IO | TM_PRESSURE_HAVE_CPU | TM_PRESSURE_HAVE_MEM};
    ps.io = ps.cpu = ps.mem = (tm_psi){.has_some = true, .has_full = true, .some_avg10 = 2};
    tm_ptree_stats ts = {.root = 4242,
                         .root_alive = true,
                         .nproc = 33,
                         .nproc_d = 1,
                         .cpu_pct = 800,
                         .read_bytes_s = 4e8,
                         .rss_bytes = 6e10,
                         .pss_bytes = 4e10,
                         .cache_hit_hint = 0.5};
    tm_gpu_stats g[NGPU];
    memset(g, 0, sizeof g);
    for (int i = 0; i < NGPU; i++) {
        g[i].index = (unsigned)i;
        snprintf(g[i].uuid, sizeof g[i].uuid, "GPU-%08d", i);
        g[i].valid = TM_GPU_HAVE_MEM | TM_GPU_HAVE_UTIL | TM_GPU_HAVE_TEMP | TM_GPU_HAVE_POWER |
                     TM_GPU_HAVE_PCIE | TM_GPU_HAVE_CLOCK | TM_GPU_HAVE_THROTTLE;
        g[i].mem_total = 80ull << 30;
        g[i].mem_used = 60ull << 30;
        g[i].mem_free = 20ull << 30;
        g[i].util_gpu = 95;
        g[i].util_mem = 40;
        g[i].temp_c = 60;
        g[i].power_w = 500;
        g[i].sm_clock_mhz = 1980;
    }
    for (long s = 0; s < secs; s++) {
        int64_t t = t0 + s * 1000000000LL;
        dr.rkb_s = 400000 + (double)(s % 17) * 1000;
        g[0].util_gpu = 90 + (double)(s % 10);
        if (tm_sysrec_disk(w, t, &dr, 1) < 0 || tm_sysrec_pressure(w, t, &ps) < 0 ||
            tm_sysrec_ptree(w, t, &ts) < 0 || tm_sysrec_gpu(w, t, g, NGPU) < 0)
            return die("system.tmr");
    }
    tm_rec_close(&w);
    bytes += (double)file_size(path);

    /* rank files */
    for (int r = 0; r < nranks; r++) {
        char role[16];
        snprintf(path, sizeof path, "%s/rank%d.tmr", dir, r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec_opts ro = {.role = role, .rank = r};
        if (tm_rec_open(&w, path, &ro) < 0)
            return die(path);
        uint8_t buf[256];
        for (long s = 0; s < secs; s++) {
            int64_t t = t0 + s * 1000000000LL;
            tm_inproc_step st = {.step = (uint64_t)s,
                                 .start_ns = t - 1000000000LL,
                                 .end_ns = t,
                                 .data_wait_ns = 20000000};
            int len = tm_inproc_encode_step(&st, buf, sizeof buf);
            if (len < 0 || tm_rec_append(w, TM_REC_STEP, t, buf, (uint32_t)len) < 0)
                return die(path);
            tm_inproc_capture c = {.source = TM_CAPTURE_STEP,
                                   .device = r,
                                   .step = (uint64_t)s,
                                   .allocated = 40e9 + (double)(s % 100) * 1e6,
                                   .reserved = 60e9,
                                   .peak_allocated = 55e9,
                                   .active = 41e9,
                                   .inactive_split = 1e9,
                                   .requested = 40e9,
                                   .free_device = NAN,
                                   .total_device = 85e9,
                                   .num_alloc_retries = 0,
                                   .num_ooms = 0,
                                   .host_rss = 8e9,
                                   .tag = "step",
                                   .tag_len = 4};
            len = tm_inproc_encode_capture(&c, buf, sizeof buf);
            if (len < 0 || tm_rec_append(w, TM_REC_CAPTURE, t, buf, (uint32_t)len) < 0)
                return die(path);
        }
        tm_rec_close(&w);
        bytes += (double)file_size(path);
    }

    /* the measured part, once the kernel has written the files back (a
     * report reads a recording that is done, not one being flushed) */
    sync();
    const char *dirs[] = {dir};
    tm_run *run;
    tm_analysis *an;
    double a = now_s();
    if (tm_run_load(&run, dirs, 1) < 0)
        return die("load");
    double b = now_s();
    if (tm_analyze(run, &an) < 0)
        return die("analyze");
    double c = now_s();
    tm_text *t = tm_text_new(64u << 20);
    if (!t || tm_report_write(run, an, t, true) < 0)
        return die("report");
    double d = now_s();
    const tm_run_source *src;
    size_t nsrc = tm_run_sources(run, &src);
    unsigned long long records = 0;
    for (size_t i = 0; i < nsrc; i++)
        records += src[i].records;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("report_s=%.3f load_s=%.3f analyze_s=%.3f json_s=%.3f data_mb=%.1f records=%llu "
           "hours=%.1f ranks=%d peak_rss_mb=%.1f\n",
           d - a, b - a, c - b, d - c, bytes / 1e6, records, hours, nranks,
           (double)ru.ru_maxrss / 1024.0);
    tm_text_free(&t);
    tm_analysis_free(&an);
    tm_run_free(&run);
    if (getenv("BENCH_KEEP")) {
        fprintf(stderr, "kept %s\n", dir);
        return 0;
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
