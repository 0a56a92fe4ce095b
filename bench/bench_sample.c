/*
 * bench_sample.c - CPU time of one trainmon sample (every physical disk, a
 * process tree, pressure) against the floor: the same /proc files read with
 * pread() on descriptors kept open, with no parsing at all.
 *
 * usage: bench_sample ROOT_PID [SAMPLES]
 * Prints "trainmon_us=X floor_us=Y procs=N" (medians of per-batch means of
 * CPU time, CLOCK_PROCESS_CPUTIME_ID).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainmon.h"

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

#define BATCH 50
#define MAXFD 512

static int fds[MAXFD];
static int nfds;

static void add_fd(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && nfds < MAXFD)
        fds[nfds++] = fd;
}

/* The files a tree sample reads for one process on every sample: the same
 * set the ptree collector reads (smaps_rollup is re-read only every 5 s, so
 * a sample taken in a tight loop does not read it). */
static void add_proc_files(pid_t pid)
{
    char p[512];
    static const char *files[] = {"stat", "io"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "/proc/%d/%s", (int)pid, files[i]);
        add_fd(p);
    }
    snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
    DIR *d = opendir(p);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "/proc/%d/task/%s/children", (int)pid, e->d_name);
        add_fd(p);
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_sample ROOT_PID [SAMPLES]\n");
        return 2;
    }
    pid_t root = (pid_t)atoi(argv[1]);
    int samples = argc > 2 ? atoi(argv[2]) : 2000;
    int nb = samples / BATCH;
    if (nb < 3)
        nb = 3;
    double *tmv = calloc((size_t)nb, sizeof *tmv), *flv = calloc((size_t)nb, sizeof *flv);

    tm_disk *disk;
    tm_ptree *tree;
    tm_pressure *press;
    if (tm_disk_open(&disk, NULL, 0) < 0 || tm_ptree_open(&tree, root) < 0 ||
        tm_pressure_open(&press, root) < 0) {
        fprintf(stderr, "bench_sample: %s\n", tm_last_error());
        return 1;
    }
    const tm_diskrate *rates;
    size_t nrates;
    tm_ptree_stats ts;
    tm_pressure_stats ps;
    for (int i = 0; i < 20; i++) {
        tm_disk_sample(disk, &rates, &nrates);
        tm_ptree_sample(tree, &ts);
        tm_pressure_sample(press, &ps);
    }
    size_t nproc = ts.nproc;

    /* The floor: the same files, kept open, pread into a buffer. */
    add_fd("/proc/diskstats");
    add_fd("/proc/pressure/io");
    add_fd("/proc/pressure/cpu");
    add_fd("/proc/pressure/memory");
    for (size_t i = 0; i < ts.nproc; i++)
        add_proc_files(ts.procs[i].pid);
    static char buf[65536];

    for (int b = 0; b < nb; b++) {
        double t0 = cpu_now_us();
        for (int i = 0; i < BATCH; i++) {
            tm_disk_sample(disk, &rates, &nrates);
            tm_ptree_sample(tree, &ts);
            tm_pressure_sample(press, &ps);
        }
        double t1 = cpu_now_us();
        for (int i = 0; i < BATCH; i++)
            for (int k = 0; k < nfds; k++)
                if (pread(fds[k], buf, sizeof buf, 0) < 0)
                    perror("pread");
        double t2 = cpu_now_us();
        tmv[b] = (t1 - t0) / BATCH;
        flv[b] = (t2 - t1) / BATCH;
    }
    qsort(tmv, (size_t)nb, sizeof *tmv, cmp_double);
    qsort(flv, (size_t)nb, sizeof *flv, cmp_double);
    printf("trainmon_us=%.2f floor_us=%.2f procs=%zu files=%d disks=%zu\n", tmv[nb / 2],
           flv[nb / 2], nproc, nfds, nrates);
    tm_disk_close(&disk);
    tm_ptree_close(&tree);
    tm_pressure_close(&press);
    free(tmv);
    free(flv);
    return 0;
}
