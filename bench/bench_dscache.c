/*
 * bench_dscache.c - CPU and wall time of one reading of a dataset's
 * page-cache residency (tm_dsc_measure: the walk, the sample, cachestat or
 * mincore per sampled file), on a dataset made here: FILES files of BYTES
 * bytes in DIR (created, then removed).
 *
 * usage: bench_dscache DIR FILES BYTES [READINGS]
 * Prints "files=N reading_us=X reading_wall_us=Y measured=M method=cachestat|mincore"
 * (medians over READINGS readings, CPU time of the process).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dscache.h"
#include "trainmon.h"

static double clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_dscache DIR FILES BYTES [READINGS]\n");
        return 2;
    }
    const char *dir = argv[1];
    long nfiles = atol(argv[2]), size = atol(argv[3]);
    int k = argc > 4 ? atoi(argv[4]) : 21;
    if (nfiles <= 0 || size < 0 || k <= 0 || k > 1000 || mkdir(dir, 0755) != 0) {
        fprintf(stderr, "bench_dscache: bad arguments or %s exists\n", dir);
        return 2;
    }
    char *buf = calloc(1, size ? (size_t)size : 1);
    char path[4096];
    for (long i = 0; i < nfiles; i++) {
        /* 100 files a directory, as image datasets are laid out by class */
        if (i % 100 == 0) {
            snprintf(path, sizeof path, "%s/c%05ld", dir, i / 100);
            mkdir(path, 0755);
        }
        snprintf(path, sizeof path, "%s/c%05ld/f%07ld.bin", dir, i / 100, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, buf, (size_t)size) != (ssize_t)size) {
            perror(path);
            return 1;
        }
        close(fd);
    }
    free(buf);
    double *cpu = calloc((size_t)k, sizeof *cpu), *wall = calloc((size_t)k, sizeof *wall);
    const char *paths[] = {dir};
    tm_dsc_reading r = {0};
    for (int i = 0; i < k; i++) {
        double c0 = clock_us(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_us(CLOCK_MONOTONIC);
        if (tm_dsc_measure(paths, 1, &r) != 0) {
            fprintf(stderr, "bench_dscache: %s\n", tm_last_error());
            return 1;
        }
        cpu[i] = clock_us(CLOCK_PROCESS_CPUTIME_ID) - c0;
        wall[i] = clock_us(CLOCK_MONOTONIC) - w0;
    }
    qsort(cpu, (size_t)k, sizeof *cpu, cmp_double);
    qsort(wall, (size_t)k, sizeof *wall, cmp_double);
    printf("files=%.0f reading_us=%.1f reading_wall_us=%.1f measured=%.0f method=%s\n", r.files,
           cpu[k / 2], wall[k / 2], r.files_measured,
           r.method == TM_DSC_CACHESTAT ? "cachestat"
           : r.method == TM_DSC_MINCORE ? "mincore"
                                        : "none");
    free(cpu);
    free(wall);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
