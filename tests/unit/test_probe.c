/*
 * test_probe.c - the storage probe (src/lib/probe.c): the request size and
 * the plan, the latency histogram and the rates (numbers worked out by
 * hand in the comments), probe.json written and read back, the reader on
 * crafted files, the walk of a real directory, and the disk verdict's use
 * of the ceiling (src/lib/rules_input.c, docs/DIAGNOSIS.md "The storage
 * ceiling") on run directories written the way `trainmon run --probe`
 * writes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis.h"
#include "probe.h"
#include "rules.h"
#include "trainmon.h"

#define FX_NAME "test_probe"
#define FX_OWN_SETUP
#include "fixture.h"

static int64_t T0;

static int setup(void **st)
{
    (void)st;
    /* Under the working directory (the repository, on a disk), not /tmp,
     * which may be tmpfs: the walk test reads real files with O_DIRECT. */
    snprintf(dir, sizeof dir, "build/test_probe.XXXXXX");
    mkdir("build", 0755);
    if (!mkdtemp(dir))
        return -1;
    T0 = tm_now_mono_ns();
    return 0;
}

static void write_file(const char *name, const char *text, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* --- arithmetic */

static void
test_random_reads_are_the_median_file_size_rounded_up_to_4_KiB_within_4_KiB_and_1_MiB(void **st)
{
    (void)st;
    assert_int_equal(tm_probe_rand_block(49152), 49152);        /* 48 KiB: already aligned */
    assert_int_equal(tm_probe_rand_block(50000), 53248);        /* 12.2 pages -> 13 x 4096 */
    assert_int_equal(tm_probe_rand_block(1000), 4096);          /* at least one page */
    assert_int_equal(tm_probe_rand_block(0), 4096);             /* never 0 */
    assert_int_equal(tm_probe_rand_block(10 << 20), 1 << 20);   /* shards: 1 MiB reads */
    assert_int_equal(tm_probe_rand_block(UINT64_MAX), 1 << 20); /* no overflow */
}

static void test_the_plan_is_sequential_1_MiB_at_depth_1_and_4_then_random_at_1_4_16(void **st)
{
    (void)st;
    tm_probe_test t[TM_PROBE_MAX_TESTS];
    assert_int_equal(tm_probe_plan(65536, t, TM_PROBE_MAX_TESTS), 5);
    const char *pat[] = {"sequential", "sequential", "random", "random", "random"};
    unsigned qd[] = {1, 4, 1, 4, 16};
    uint64_t bs[] = {1 << 20, 1 << 20, 65536, 65536, 65536};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(t[i].pattern, pat[i]);
        assert_int_equal(t[i].queue_depth, qd[i]);
        assert_int_equal(t[i].block_bytes, bs[i]);
    }
    assert_int_equal(tm_probe_plan(65536, t, 2), 2); /* the cap holds */
}

static void test_histogram_buckets_are_exact_below_16_ns_then_16_per_power_of_two(void **st)
{
    (void)st;
    uint64_t lo, w;
    assert_int_equal(tm_probe_hist_bucket(0), 0);
    assert_int_equal(tm_probe_hist_bucket(15), 15);
    assert_int_equal(tm_probe_hist_bucket(16), 16); /* 2^4: (4-3)*16 + 0 */
    assert_int_equal(tm_probe_hist_bucket(31), 31); /* 2^4 + 15: (4-3)*16 + 15 */
    assert_int_equal(tm_probe_hist_bucket(32), 32); /* 2^5: (5-3)*16 + 0 */
    /* 1 ms = 1,000,000 ns: 2^19 = 524,288 <= it < 2^20; the 4 bits below
     * the leading one: 1,000,000 >> 15 = 30 = 16 + 14; bucket (19-3)*16 + 14. */
    assert_int_equal(tm_probe_hist_bucket(1000000), 270);
    tm_probe_hist_bounds(270, &lo, &w);
    assert_int_equal(lo, 983040); /* 30 << 15 */
    assert_int_equal(w, 32768);   /* 1 << 15 */
    assert_true(lo <= 1000000 && 1000000 < lo + w);
    tm_probe_hist_bounds(15, &lo, &w);
    assert_int_equal(lo, 15);
    assert_int_equal(w, 1);
    /* Every bucket's bounds hold the values that map to it. */
    for (uint64_t ns = 1; ns < ((uint64_t)1 << 40); ns = ns * 3 / 2 + 1) {
        tm_probe_hist_bounds(tm_probe_hist_bucket(ns), &lo, &w);
        assert_true(lo <= ns && ns < lo + w);
    }
    /* Beyond 2^42 ns (73 min) everything lands in the last bucket. */
    assert_int_equal(tm_probe_hist_bucket(UINT64_MAX), TM_PROBE_HIST_BUCKETS - 1);
}

static void test_quantiles_and_rates_of_99_fast_reads_and_one_slow_one(void **st)
{
    (void)st;
    static tm_probe_hist h;
    memset(&h, 0, sizeof h);
    assert_true(isnan(tm_probe_hist_quantile(&h, 0.5)));
    for (int i = 0; i < 99; i++)
        tm_probe_hist_add(&h, 100000); /* 100 us */
    tm_probe_hist_add(&h, 10000000);   /* 10 ms */
    /* 100,000 ns: 2^16 <= it < 2^17, 100,000 >> 12 = 24 = 16 + 8: bucket
     * 13*16 + 8 = 216, [98,304, 102,400): middle 100,352 ns. */
    assert_true(fabs(tm_probe_hist_quantile(&h, 0.50) - 100352e-9) < 1e-12);
    /* p99 is the 99th of 100 (ceil(0.99 x 100)): still a fast one. */
    assert_true(fabs(tm_probe_hist_quantile(&h, 0.99) - 100352e-9) < 1e-12);
    /* The 100th: 10,000,000 >> 19 = 19 = 16 + 3, bucket 20*16 + 3, from
     * 19 << 19 = 9,961,472, width 524,288: middle 10,223,616 ns. */
    assert_true(fabs(tm_probe_hist_quantile(&h, 1.0) - 10223616e-9) < 1e-12);
    tm_probe_test t = {.pattern = "random", .block_bytes = 65536, .queue_depth = 1};
    /* 100 reads of 64 KiB (6,553,600 bytes) in 2 s: 3,276,800 B/s, 50 IOPS;
     * mean (99 x 100 us + 10 ms) / 100 = 199 us. */
    tm_probe_finish(&t, 6553600, 100, 2.0, &h);
    assert_true(fabs(t.bytes_per_second - 3276800) < 1e-6);
    assert_true(fabs(t.iops - 50) < 1e-9);
    assert_true(fabs(t.lat_mean_s - 199e-6) < 1e-12);
    assert_true(fabs(t.lat_p99_s - 100352e-9) < 1e-12);
    static tm_probe_hist h2;
    memset(&h2, 0, sizeof h2);
    tm_probe_hist_merge(&h2, &h);
    tm_probe_hist_merge(&h2, &h);
    assert_int_equal(h2.n, 200);
    assert_true(fabs(tm_probe_hist_quantile(&h2, 0.995) - 10223616e-9) < 1e-12);
    /* Nothing read in no time: unknown, not 0. */
    memset(&h2, 0, sizeof h2);
    tm_probe_finish(&t, 0, 0, 0, &h2);
    assert_true(isnan(t.bytes_per_second) && isnan(t.lat_mean_s) && isnan(t.lat_p50_s));
}

static void test_the_rate_is_the_slope_of_the_bytes_read_over_time(void **st)
{
    (void)st;
    /* 5 bytes in every half second: 10 B/s, exactly, from any first bin. */
    uint64_t even[8] = {5, 5, 5, 5, 5, 5, 5, 5};
    assert_true(fabs(tm_probe_slope(even, 8, 0.5, 0) - 10) < 1e-9);
    assert_true(fabs(tm_probe_slope(even, 8, 0.5, 6) - 10) < 1e-9);
    /* A staircase, 4 bytes every 2 s: points (1,4) (2,4) (3,8) (4,8); means
     * 2.5 and 6; sum dx dy = 3 + 1 + 1 + 3 = 8, sum dx^2 = 5: 1.6 B/s. */
    uint64_t stair[4] = {4, 0, 4, 0};
    assert_true(fabs(tm_probe_slope(stair, 4, 1.0, 0) - 1.6) < 1e-9);
    /* A burst before the first point counted only lifts the line: a throttle's
     * start-up burst (here 100 bytes in bin 0) does not change the rate. */
    uint64_t burst[8] = {100, 5, 5, 5, 5, 5, 5, 5};
    assert_true(fabs(tm_probe_slope(burst, 8, 0.5, 1) - 10) < 1e-9);
    /* Bursts once per 100 ms (a blk-throttle slice) at 16 MB/s, 64 bins of
     * 12.5 ms over 0.8 s, counted after a 20% ramp: the line is within 1%
     * of 16 MB/s whatever the bursts' phase, where bytes / seconds between
     * two instants is off by up to a burst (1.6 MB, 12-25%). */
    for (int ph = 0; ph < 8; ph++) {
        uint64_t b[64] = {0};
        b[0] = 1600000; /* the slice granted at the start */
        for (int k = ph; k < 64; k += 8)
            b[k] += 1600000;
        double r = tm_probe_slope(b, 64, 0.0125, 12);
        assert_true(fabs(r / 16e6 - 1) < 0.01);
    }
    assert_true(isnan(tm_probe_slope(even, 8, 0.5, 7))); /* one point */
    assert_true(isnan(tm_probe_slope(even, 8, 0, 0)));
}

static void fill_probe(tm_probe *p)
{
    memset(p, 0, sizeof *p);
    snprintf(p->path, sizeof p->path, "/data/imagenet \"train\"");
    snprintf(p->device, sizeof p->device, "dm-0");
    p->ndisks = 2;
    snprintf(p->disks[0], sizeof p->disks[0], "nvme0n1");
    snprintf(p->disks[1], sizeof p->disks[1], "nvme1n1");
    p->files = 1281167;
    p->files_read = 256;
    p->file_size_median = 110000;
    p->start_time = 1796313578.5;
    p->seconds = 4.02;
    p->ntests =
        tm_probe_plan(tm_probe_rand_block(p->file_size_median), p->tests, TM_PROBE_MAX_TESTS);
    double bps[] = {2.1e9, 3.0e9, 0.4e9, 1.3e9, 2.6e9};
    for (size_t i = 0; i < p->ntests; i++) {
        tm_probe_test *t = &p->tests[i];
        t->bytes_per_second = bps[i];
        t->seconds = 0.8;
        t->bytes = (uint64_t)(bps[i] * 0.8);
        t->requests = t->bytes / t->block_bytes;
        t->iops = (double)t->requests / 0.8;
        t->lat_mean_s = 1e-4 * (double)(i + 1);
        t->lat_p50_s = 0.9e-4 * (double)(i + 1);
        t->lat_p99_s = 3e-4 * (double)(i + 1);
    }
}

static void test_best_is_the_fastest_test_of_a_pattern(void **st)
{
    (void)st;
    static tm_probe p;
    fill_probe(&p);
    assert_ptr_equal(tm_probe_best(&p, NULL), &p.tests[1]);         /* 3.0 GB/s sequential */
    assert_ptr_equal(tm_probe_best(&p, "random"), &p.tests[4]);     /* 2.6 GB/s at depth 16 */
    assert_ptr_equal(tm_probe_best(&p, "sequential"), &p.tests[1]); /* 3.0 over 2.1 */
    p.tests[1].bytes_per_second = NAN;                              /* unmeasured: skipped */
    assert_ptr_equal(tm_probe_best(&p, "sequential"), &p.tests[0]);
    assert_null(tm_probe_best(&p, "strided"));
    assert_true(tm_probe_covers(&p, "dm-0"));
    assert_true(tm_probe_covers(&p, "nvme1n1"));
    assert_false(tm_probe_covers(&p, "sda"));
    assert_false(tm_probe_covers(&p, ""));
}

/* --- probe.json */

static void test_probe_json_reads_back_what_it_wrote(void **st)
{
    (void)st;
    static tm_probe p[2], q[3];
    fill_probe(&p[0]);
    fill_probe(&p[1]);
    snprintf(p[1].device, sizeof p[1].device, "sdb");
    p[1].ndisks = 0;
    char *js = tm_probe_json(p, 2);
    assert_non_null(js);
    assert_int_equal(tm_probe_parse(js, strlen(js), q, 3), 2);
    assert_string_equal(q[0].path, "/data/imagenet \"train\"");
    assert_string_equal(q[0].device, "dm-0");
    assert_int_equal(q[0].ndisks, 2);
    assert_string_equal(q[0].disks[1], "nvme1n1");
    assert_int_equal(q[0].files, 1281167);
    assert_int_equal(q[0].files_read, 256);
    assert_int_equal(q[0].file_size_median, 110000);
    assert_true(fabs(q[0].start_time - 1796313578.5) < 1e-6);
    assert_int_equal(q[0].ntests, 5);
    for (size_t i = 0; i < 5; i++) {
        const tm_probe_test *a = &p[0].tests[i], *b = &q[0].tests[i];
        assert_string_equal(a->pattern, b->pattern);
        assert_int_equal(a->block_bytes, b->block_bytes);
        assert_int_equal(a->queue_depth, b->queue_depth);
        assert_int_equal(a->requests, b->requests);
        assert_int_equal(a->bytes, b->bytes);
        assert_true(fabs(a->bytes_per_second - b->bytes_per_second) <= 1e-8 * a->bytes_per_second);
        assert_true(fabs(a->lat_p99_s - b->lat_p99_s) <= 1e-8 * a->lat_p99_s);
    }
    assert_string_equal(q[1].device, "sdb");
    assert_int_equal(q[1].ndisks, 0);
    /* One slot: the second probe is parsed and dropped. */
    assert_int_equal(tm_probe_parse(js, strlen(js), q, 1), 1);
    free(js);
}

static void test_the_reader_takes_crafted_text_safely(void **st)
{
    (void)st;
    static tm_probe q[2];
    const char *bad[] = {
        "",
        "[]",
        "{",
        "{\"probes\": [",
        "{\"probes\": [{\"path\": 1}]}",
        "{\"probes\": [{}]} trailing",
        "{\"probes\": [{\"tests\": [{\"iops\": 1e}]}]}",
        /* nesting deeper than 8 levels in a skipped key */
        "{\"x\": [[[[[[[[[[1]]]]]]]]]]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tm_probe_parse(bad[i], strlen(bad[i]), q, 2), -EINVAL);
    /* Unknown keys skipped, a control character escaped into a string
     * becomes '?', negative and null rates are unknown, a negative count
     * or one out of range is 0, too many disks are dropped, an over-long device is cut. */
    const char *ok = "{\"future\": {\"a\": [1, true, null]}, \"probes\": [{\"path\": "
                     "\"/d\\u001b[2J\\n\", \"device\": \"abcdefghijklmnopqrstuvwxyz0123456789\", "
                     "\"disks\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"], "
                     "\"files\": -5, \"tests\": [{\"pattern\": \"random\", \"bytes_per_second\": "
                     "-1, \"iops\": null, \"queue_depth\": 1e30, \"extra\": {}}]}]}";
    assert_int_equal(tm_probe_parse(ok, strlen(ok), q, 2), 1);
    assert_string_equal(q[0].path, "/d?[2J?");
    assert_int_equal(strlen(q[0].device), TM_DISK_NAME_MAX - 1);
    assert_int_equal(q[0].ndisks, TM_PROBE_MAX_DISKS);
    assert_int_equal(q[0].files, 0);
    assert_int_equal(q[0].ntests, 1);
    assert_true(isnan(q[0].tests[0].bytes_per_second));
    assert_true(isnan(q[0].tests[0].iops));
    assert_int_equal(q[0].tests[0].queue_depth, 0); /* out of range: unknown */
    assert_null(tm_probe_best(&q[0], NULL));
}

static void test_probe_json_in_a_run_directory_is_not_followed_or_waited_for(void **st)
{
    (void)st;
    static tm_probe q[2];
    assert_int_equal(tm_probe_read_dir(dir, q, 2), 0); /* none: no probe, no error */
    char path[512], target[512];
    snprintf(target, sizeof target, "%s/elsewhere.json", dir);
    const char *doc = "{\"probes\": [{\"device\": \"sda\"}]}";
    write_file("elsewhere.json", doc, strlen(doc));
    snprintf(path, sizeof path, "%s/probe.json", dir);
    assert_int_equal(symlink("elsewhere.json", path), 0);
    assert_true(tm_probe_read_dir(dir, q, 2) < 0);
    assert_non_null(strstr(tm_last_error(), "symlink"));
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0); /* a reader would block on it */
    assert_true(tm_probe_read_dir(dir, q, 2) < 0);
    unlink(path);
    write_file("probe.json", doc, strlen(doc));
    assert_int_equal(tm_probe_read_dir(dir, q, 2), 1);
    assert_string_equal(q[0].device, "sda");
    write_file("probe.json", "{\"probes\": 7}", 13);
    assert_int_equal(tm_probe_read_dir(dir, q, 2), -EINVAL);
}

/* --- the measurement on a real directory */

static void test_the_walk_reads_regular_files_only_and_never_follows_a_symlink(void **st)
{
    (void)st;
    char sub[512], path[600];
    snprintf(sub, sizeof sub, "%s/ds", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    static char data[65536];
    memset(data, 'x', sizeof data);
    for (int i = 0; i < 6; i++) {
        char name[64];
        snprintf(name, sizeof name, "ds/%d.bin", i);
        write_file(name, data, i < 5 ? 16384 : 65536); /* median 16 KiB */
    }
    write_file("ds/empty", "", 0);
    snprintf(path, sizeof path, "%s/ds/fifo", dir);
    assert_int_equal(mkfifo(path, 0600), 0); /* opening it would block */
    snprintf(path, sizeof path, "%s/ds/link", dir);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    snprintf(path, sizeof path, "%s/ds/deeper", dir);
    assert_int_equal(mkdir(path, 0700), 0);
    write_file("ds/deeper/7.bin", data, 16384);
    static tm_probe p;
    int rc = tm_probe_run(sub, 0.25, &p);
    if (rc == -EINVAL) {
        print_message("skipped: %s\n", tm_last_error()); /* a filesystem without O_DIRECT */
        skip();
    }
    assert_int_equal(rc, 0);
    assert_int_equal(p.files, 7); /* 6 + deeper/7.bin; not empty, fifo or link */
    assert_int_equal(p.files_read, 7);
    assert_int_equal(p.file_size_median, 16384);
    assert_int_equal(p.ntests, 5);
    assert_int_equal(p.tests[2].block_bytes, 16384);
    for (size_t i = 0; i < p.ntests; i++) {
        assert_true(p.tests[i].requests > 0);
        assert_true(p.tests[i].bytes_per_second > 0);
        assert_true(p.tests[i].lat_p50_s > 0 && p.tests[i].lat_p50_s <= p.tests[i].lat_p99_s);
    }
    assert_true(p.seconds >= 0.25 && p.seconds < 2.0);
    /* A symlink given as the path itself is refused, not followed. */
    snprintf(path, sizeof path, "%s/ds/link", dir);
    assert_int_equal(tm_probe_run(path, 0.1, &p), -ELOOP);
    assert_int_equal(tm_probe_run("/nonexistent-trainmon", 0.1, &p), -ENOENT);
}

/* --- the disk verdict */

/* A storage-bound run: 100 steps of 0.1 s waiting 60%, the disk behind the
 * data (vdb) at a plateau of mean read_mbs MB/s with 25 ms await and a
 * queue: the votes say input.disk_bound whatever the probe says. */
static void put_disk_bound_run(double read_mbs)
{
    uint8_t buf[64];
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    for (size_t i = 0; i < 100; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = at((double)i * 0.1),
                            .end_ns = at((double)(i + 1) * 0.1),
                            .data_wait_ns = (int64_t)(0.06 * (double)S_NS)};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(r0, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    assert_int_equal(tm_rec_event(s, at(0), "run_target",
                                  "{\"path\":\"/data\",\"kind\":\"block\",\"device\":\"vdb\","
                                  "\"disks\":[\"vdb\"],\"why\":\"\"}"),
                     0);
    for (int i = 0; i <= 100; i++) {
        double t = i * 0.1;
        put_value(s, t, "disk.read_bytes_per_second", "device=vdb", read_mbs * 1e6);
        put_value(s, t, "disk.read_await_seconds", "device=vdb", 0.025);
        put_value(s, t, "disk.utilization", "device=vdb", 1.0);
        put_value(s, t, "disk.queue_depth", "device=vdb", 8);
    }
    tm_rec_close(&s);
}

/* probe.json of a probe of device (random 64 KiB reads best at rand_mbs
 * with 16 in flight, sequential 1 MiB at seq_mbs). */
static void put_probe(const char *device, double rand_mbs, double seq_mbs)
{
    static tm_probe p;
    memset(&p, 0, sizeof p);
    snprintf(p.path, sizeof p.path, "/data");
    snprintf(p.device, sizeof p.device, "%s", device);
    p.ntests = tm_probe_plan(65536, p.tests, TM_PROBE_MAX_TESTS);
    double mbs[] = {seq_mbs * 0.8, seq_mbs, rand_mbs * 0.3, rand_mbs * 0.7, rand_mbs};
    for (size_t i = 0; i < p.ntests; i++)
        p.tests[i].bytes_per_second = mbs[i] * 1e6;
    char *js = tm_probe_json(&p, 1);
    assert_non_null(js);
    write_file("probe.json", js, strlen(js));
    free(js);
}

static const tm_finding *disk_bound(tm_run **run, tm_analysis **a)
{
    const char *dirs[] = {dir};
    assert_int_equal(tm_run_load(run, dirs, 1), 0);
    assert_int_equal(tm_analyze(*run, a), 0);
    const tm_finding *f = tm_analysis_find(*a, "input.disk_bound");
    assert_non_null(f);
    return f;
}

static void test_reading_at_11_percent_of_the_probes_random_ceiling_is_the_pattern(void **st)
{
    (void)st;
    put_disk_bound_run(5.5);
    put_probe("vdb", 50, 400); /* 5.5 / 50 = 11% */
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = disk_bound(&run, &a);
    assert_non_null(strstr(f->title, "read at 11% of what /dev/vdb delivered for 64 KiB random "
                                     "reads: the pattern is the limit"));
    assert_non_null(strstr(f->evidence, "\"storage_ceiling\":\"pattern\""));
    assert_non_null(strstr(f->evidence, "\"probe_disk\":\"vdb\""));
    assert_true(fabs(ev_num(f, "ceiling_share") - 0.11) < 1e-9);
    assert_true(fabs(ev_num(f, "probe_random_read_bytes_per_second") - 50e6) < 1e-3);
    assert_int_equal(ev_num(f, "probe_random_request_bytes"), 65536);
    assert_int_equal(ev_num(f, "probe_random_queue_depth"), 16);
    assert_true(fabs(ev_num(f, "probe_sequential_read_bytes_per_second") - 400e6) < 1e-3);
    /* 50 / 5.5 = 9.1x more with more reads in flight, said first (the
     * headline's remedy); sequential 8x random. */
    assert_true(
        strncmp(f->advice,
                "Keep more reads in flight: the probe got 50.0 MB/s from /dev/vdb for 64 KiB "
                "random reads with 16 in flight, 9.1x what the job read;",
                strlen("Keep more reads in flight: the probe got 50.0 MB/s from /dev/vdb "
                       "for 64 KiB random reads with 16 in flight, 9.1x what the job "
                       "read;")) == 0);
    assert_non_null(strstr(f->advice, "400.0 MB/s sequentially (8.0x)"));
    assert_null(strstr(f->advice, "will not help"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_reading_at_94_percent_of_the_probes_random_ceiling_is_the_device(void **st)
{
    (void)st;
    put_disk_bound_run(4.7);
    put_probe("vdb", 5, 5.2); /* 4.7 / 5 = 94%; sequential no faster */
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = disk_bound(&run, &a);
    assert_non_null(strstr(f->title, "read at 94% of what /dev/vdb delivered for 64 KiB random "
                                     "reads: the device is the limit"));
    assert_non_null(strstr(f->evidence, "\"storage_ceiling\":\"device\""));
    const char *want = "More workers will not help: the probe got at most 5.0 MB/s from /dev/vdb "
                       "for 64 KiB random reads with 16 in flight, and the job reads at that;";
    assert_true(strncmp(f->advice, want, strlen(want)) == 0);
    assert_null(strstr(f->advice, "sequentially"));             /* 5.2 / 5 < 1.5: no shard advice */
    assert_non_null(strstr(f->advice, "the loop needs about")); /* what it needs, after */
    tm_analysis_free(&a);
    tm_run_free(&run);
    /* The same device reading 4x faster in order: shards first. */
    put_probe("vdb", 5, 20);
    f = disk_bound(&run, &a);
    want = "Pack the files into large shards read in order (WebDataset/tar, TFRecord, LMDB): the "
           "probe got 20.0 MB/s sequentially from /dev/vdb, 4.0x the 5.0 MB/s it got for 64 KiB "
           "random reads, which the job reads at.";
    assert_true(strncmp(f->advice, want, strlen(want)) == 0);
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_half_the_ceiling_is_shared_and_the_votes_do_not_change(void **st)
{
    (void)st;
    put_disk_bound_run(25);
    put_probe("vdb", 50, 50); /* 50% */
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = disk_bound(&run, &a);
    assert_non_null(strstr(f->title, "the pattern and the device share the limit"));
    assert_non_null(strstr(f->evidence, "\"storage_ceiling\":\"between\""));
    assert_non_null(strstr(f->evidence, "\"votes\":{\"disk\":2,\"cpu\":0}"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_without_a_probe_of_that_disk_the_ceiling_is_unknown(void **st)
{
    (void)st;
    put_disk_bound_run(5.5);
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = disk_bound(&run, &a);
    assert_non_null(strstr(f->evidence, "\"storage_ceiling\":\"unknown\""));
    assert_null(strstr(f->evidence, "probe_"));
    assert_null(strstr(f->title, "% of what"));
    assert_non_null(strstr(f->advice, "What the storage can deliver is unknown"));
    assert_non_null(strstr(f->advice, "--probe"));
    const char *votes = strstr(f->evidence, "\"votes\"");
    assert_non_null(votes);
    char before[64];
    snprintf(before, sizeof before, "%.40s", votes);
    tm_analysis_free(&a);
    tm_run_free(&run);
    /* A probe of another disk says which it measured, and is no ceiling. */
    put_probe("sda", 50, 400);
    f = disk_bound(&run, &a);
    assert_non_null(strstr(f->evidence, "\"storage_ceiling\":\"unknown\""));
    assert_non_null(strstr(f->evidence, "\"probe_disk\":\"sda\""));
    assert_null(strstr(f->evidence, "\"ceiling_share\""));
    assert_non_null(strstr(f->evidence, before)); /* same votes with and without */
    tm_analysis_free(&a);
    tm_run_free(&run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_random_reads_are_the_median_file_size_rounded_up_to_4_KiB_within_4_KiB_and_1_MiB),
        T(test_the_plan_is_sequential_1_MiB_at_depth_1_and_4_then_random_at_1_4_16),
        T(test_histogram_buckets_are_exact_below_16_ns_then_16_per_power_of_two),
        T(test_quantiles_and_rates_of_99_fast_reads_and_one_slow_one),
        T(test_the_rate_is_the_slope_of_the_bytes_read_over_time),
        T(test_best_is_the_fastest_test_of_a_pattern),
        T(test_probe_json_reads_back_what_it_wrote),
        T(test_the_reader_takes_crafted_text_safely),
        T(test_probe_json_in_a_run_directory_is_not_followed_or_waited_for),
        T(test_the_walk_reads_regular_files_only_and_never_follows_a_symlink),
        T(test_reading_at_11_percent_of_the_probes_random_ceiling_is_the_pattern),
        T(test_reading_at_94_percent_of_the_probes_random_ceiling_is_the_device),
        T(test_half_the_ceiling_is_shared_and_the_votes_do_not_change),
        T(test_without_a_probe_of_that_disk_the_ceiling_is_unknown),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
