/*
 * bench_sample.c - CPU time of one trainmon sample (every physical disk, a
 * process tree, pressure) against the floor: the same /proc files read with
 * pread() on descriptors kept open, with no parsing at all.
 *
 * usage: bench_sample ROOT_PID [SAMPLES]
 * Prints "trainmon_us=X floor_us=Y procs=N files=F disks=D sampler_us=S"
 * (medians of per-batch means of CPU time, CLOCK_PROCESS_CPUTIME_ID);
 * sampler_us is one tm_sampler_tick over the same collectors plus the
 * page-cache one.
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

/* The floor reads exactly the files the collectors keep open: after they
 * have sampled, every descriptor of this process that points into /proc or
 * /sys is one of theirs; each is opened again here and read with pread. */
static void add_collector_files(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return;
    int self = dirfd(d);
    char paths[MAXFD][256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAXFD) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == self)
            continue;
        char link[300];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(link, paths[n], sizeof paths[n] - 1);
        if (k <= 0)
            continue;
        paths[n][k] = '\0';
        /* smaps_rollup stays open but is re-read only every 5 s: a sample
         * in a tight loop does not read it. */
        if (strstr(paths[n], "/smaps_rollup"))
            continue;
        if (strncmp(paths[n], "/proc/", 6) == 0 || strncmp(paths[n], "/sys/", 5) == 0)
            n++;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        add_fd(paths[i]);
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
    add_collector_files();
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
    /* The same collectors through the one sampler of watch/run/serve (one
     * tm_sampler_tick; GPUs off, nothing recorded or alerted on), which
     * also reads the page-cache collector's /proc/vmstat and meminfo. */
    double *smv = calloc((size_t)nb, sizeof *smv);
    tm_sampler *smp = NULL;
    tm_sampler_opts so = {.root_pid = root, .pressure_pid = root, .gpu_off = true};
    if (!smv || tm_sampler_new(&smp, &so) < 0) {
        fprintf(stderr, "bench_sample: %s\n", tm_last_error());
        return 1;
    }
    for (int i = 0; i < 20; i++)
        tm_sampler_tick(smp, 0);
    for (int b = 0; b < nb; b++) {
        double t0 = cpu_now_us();
        for (int i = 0; i < BATCH; i++)
            tm_sampler_tick(smp, 0);
        smv[b] = (cpu_now_us() - t0) / BATCH;
    }
    tm_sampler_free(&smp);
    qsort(smv, (size_t)nb, sizeof *smv, cmp_double);
    qsort(tmv, (size_t)nb, sizeof *tmv, cmp_double);
    qsort(flv, (size_t)nb, sizeof *flv, cmp_double);
    printf("trainmon_us=%.2f floor_us=%.2f procs=%zu files=%d disks=%zu sampler_us=%.2f\n",
           tmv[nb / 2], flv[nb / 2], nproc, nfds, nrates, smv[nb / 2]);
    free(smv);
    tm_disk_close(&disk);
    tm_ptree_close(&tree);
    tm_pressure_close(&press);
    free(tmv);
    free(flv);
    return 0;
}
