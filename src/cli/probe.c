/*
 * probe.c - `trainmon probe PATH [-t SEC] [--json]`: what the storage
 * behind a dataset delivers, read the way the dataset is read (its own
 * files, O_DIRECT so that the page cache is neither used nor filled),
 * sequential and random, at a few queue depths (tm_probe_run).
 *
 * Exit status: 0 measured, 1 the probe failed (a read error, O_DIRECT
 * refused), 2 usage (also a PATH that does not exist).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trainmon.h"

static void probe_usage(FILE *f)
{
    fputs("usage: trainmon probe PATH [-t SEC] [--json]\n"
          "\n"
          "Measures what the storage behind PATH (a dataset directory or file)\n"
          "delivers: reads of its own files with O_DIRECT (the page cache is neither\n"
          "used nor filled), 1 MiB sequential and random at the files' median size,\n"
          "with 1, 4 and 16 reads in flight.  Only reads; about SEC seconds in all.\n"
          "\n"
          "  -t SEC   time for all the tests (default 4; accepts 500ms, 2s)\n"
          "  --json   print probe.json's document (docs/FORMAT.md) instead of a table\n",
          f);
}

/* "48 KiB", "1 MiB", "512 B" */
static void probe_size(char *buf, size_t cap, uint64_t v)
{
    if (v >= (1u << 20) && v % (1u << 20) == 0)
        snprintf(buf, cap, "%llu MiB", (unsigned long long)(v >> 20));
    else if (v >= 1024 && v % 1024 == 0)
        snprintf(buf, cap, "%llu KiB", (unsigned long long)(v >> 10));
    else if (v >= 1024)
        snprintf(buf, cap, "%.1f KiB", (double)v / 1024);
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)v);
}

/* A test's mean read: the size asked for, cut by the files' ends (1 MiB
 * sequential reads of 64 KiB files are 64 KiB reads). */
static uint64_t probe_read_size(const tm_probe_test *t)
{
    return t->requests ? (t->bytes + t->requests / 2) / t->requests : t->block_bytes;
}

/* Milliseconds, or "-" for a test without reads. */
static const char *probe_ms(char *buf, size_t cap, double s)
{
    if (isfinite(s))
        snprintf(buf, cap, "%.2fms", s * 1e3);
    else
        snprintf(buf, cap, "-");
    return buf;
}

static void probe_print(const tm_probe *p)
{
    char med[32];
    probe_size(med, sizeof med, p->file_size_median);
    printf("%s", "storage behind ");
    cli_fput_esc(stdout, TM_ESC_TEXT, p->path, strlen(p->path));
    if (p->device[0])
        printf(" (/dev/%s)", p->device);
    printf(": %llu file(s), reads spread over %llu, median size %s; O_DIRECT, %.1f s\n\n",
           (unsigned long long)p->files, (unsigned long long)p->files_read, med, p->seconds);
    printf("%-11s %8s %5s %10s %9s %10s %10s %10s\n", "pattern", "read", "depth", "MB/s", "IOPS",
           "lat mean", "lat p50", "lat p99");
    for (size_t i = 0; i < p->ntests; i++) {
        const tm_probe_test *t = &p->tests[i];
        char bs[32];
        probe_size(bs, sizeof bs, probe_read_size(t));
        char m[32], p50[32], p99[32];
        printf("%-11s %8s %5u %10.1f %9.0f %10s %10s %10s\n", t->pattern, bs, t->queue_depth,
               t->bytes_per_second / 1e6, t->iops, probe_ms(m, sizeof m, t->lat_mean_s),
               probe_ms(p50, sizeof p50, t->lat_p50_s), probe_ms(p99, sizeof p99, t->lat_p99_s));
    }
    const tm_probe_test *b = tm_probe_best(p, NULL), *r = tm_probe_best(p, "random");
    if (b) {
        char bs[32];
        probe_size(bs, sizeof bs, probe_read_size(b));
        printf("\nceiling: %.1f MB/s (%s %s reads, %u in flight)", b->bytes_per_second / 1e6,
               b->pattern, bs, b->queue_depth);
        if (r && r != b) {
            probe_size(bs, sizeof bs, probe_read_size(r));
            printf("; %s random reads: %.1f MB/s (%u in flight)", bs, r->bytes_per_second / 1e6,
                   r->queue_depth);
        }
        putchar('\n');
    }
}

int cmd_probe(int argc, char **argv)
{
    static const struct option opts[] = {
        {"time", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    double secs = 0;
    bool json = false;
    int c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":t:h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            if (!cli_parse_seconds(optarg, &secs) || secs > 600) {
                cli_err("-t %s: not a time in seconds (at most 600)", optarg);
                return 2;
            }
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            probe_usage(stdout);
            return 0;
        case ':':
            cli_err("%s: needs a value (try 'trainmon probe --help')", argv[optind - 1]);
            return 2;
        default:
            cli_err("%s: unknown option (try 'trainmon probe --help')", argv[optind - 1]);
            return 2;
        }
    }
    if (argc - optind != 1) {
        cli_err("probe: needs one PATH (usage: trainmon probe PATH [-t SEC] [--json])");
        return 2;
    }
    static tm_probe p; /* 5 KB of path and tests: not on the stack */
    int rc = tm_probe_run(argv[optind], secs, &p);
    if (rc < 0) {
        cli_err("%s", tm_last_error());
        return rc == -ENOENT || rc == -ENOTDIR ? 2 : 1;
    }
    if (json) {
        char *s = tm_probe_json(&p, 1);
        if (!s) {
            cli_err("probe: out of memory");
            return 1;
        }
        fputs(s, stdout);
        free(s);
    } else {
        probe_print(&p);
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
