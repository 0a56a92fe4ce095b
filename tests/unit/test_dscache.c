/*
 * test_dscache.c - the dataset's page-cache residency (dscache.c): the
 * estimate by hand, real readings of real files whose pages the test
 * evicts (posix_fadvise DONTNEED, for these files only) and reads back, the
 * walk's bounds and what it refuses to follow or wait on, and the
 * collector's start and end readings through the sampler.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collect_vmstat.h"
#include "dscache.h"
#include "series.h"
#include "trainmon.h"
#include "util.h"

static char root[256];

static void assert_near(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("got %.9g, want %.9g (+-%g)", got, want, tol);
}

/* --- the estimate, by hand */

static void test_estimate_largest_files_as_measured_rest_at_sample_ratio(void **state)
{
    (void)state;
    /* 1000 files, 100 MB.  The two largest (60 MB at the walk) measured:
     * 30 MB cached.  The sample of the others: 10 files, 400 kB, 100 kB
     * cached, a ratio of 0.25.  The other walked bytes, 100 - 60 = 40 MB,
     * at 0.25: 10 MB.  30 + 10 = 40 MB of 100: 0.4. */
    tm_dsc_tally t = {.files = 1000,
                      .bytes = 100000000,
                      .big_walk_bytes = 60000000,
                      .big_bytes = 60000000,
                      .big_cached = 30000000,
                      .rest_files = 10,
                      .rest_bytes = 400000,
                      .rest_cached = 100000};
    double c, f;
    assert_int_equal(tm_dsc_estimate(&t, &c, &f), 0);
    assert_near(c, 40000000.0, 1e-3);
    assert_near(f, 0.4, 1e-12);
}

static void test_estimate_without_sample_takes_the_largest_files_ratio(void **state)
{
    (void)state;
    /* 3 files walked, 30 MB; the 2 largest (25 MB) measured with 20 MB
     * cached (0.8); no other file measured (the third was unreadable):
     * 20 + 0.8 x (30 - 25) = 24 MB of 30: 0.8. */
    tm_dsc_tally t = {.files = 3,
                      .bytes = 30000000,
                      .big_walk_bytes = 25000000,
                      .big_bytes = 25000000,
                      .big_cached = 20000000,
                      .unknown = 1};
    double c, f;
    assert_int_equal(tm_dsc_estimate(&t, &c, &f), 0);
    assert_near(c, 24000000.0, 1e-3);
    assert_near(f, 0.8, 1e-12);
}

static void test_estimate_unavailable_when_nothing_measured_or_no_bytes(void **state)
{
    (void)state;
    double c, f;
    tm_dsc_tally none = {.files = 5, .bytes = 5000, .unknown = 5}; /* all refused */
    assert_int_equal(tm_dsc_estimate(&none, &c, &f), 0);
    assert_true(isnan(c) && isnan(f));
    tm_dsc_tally empty = {.files = 2, .rest_files = 2}; /* two empty files */
    assert_int_equal(tm_dsc_estimate(&empty, &c, &f), 0);
    assert_true(isnan(c) && isnan(f));
    assert_int_equal(tm_dsc_estimate(NULL, &c, &f), -EINVAL);
}

static void test_estimate_clamps_files_that_grew_since_the_walk(void **state)
{
    (void)state;
    /* The walk saw 1 MB; by the measurement the file had grown to 3 MB,
     * all cached: 3 MB "of" 1 MB is still all of it, 1.0. */
    tm_dsc_tally t = {.files = 1,
                      .bytes = 1000000,
                      .big_walk_bytes = 1000000,
                      .big_bytes = 3000000,
                      .big_cached = 3000000};
    double c, f;
    assert_int_equal(tm_dsc_estimate(&t, &c, &f), 0);
    assert_near(f, 1.0, 0);
    assert_near(c, 1000000.0, 0);
}

static void test_meminfo_memtotal_in_bytes(void **state)
{
    (void)state;
    const char txt[] = "MemTotal:       24683664 kB\nMemFree:        1000 kB\n";
    tm_vmstat v = {0};
    assert_int_equal(tm_meminfo_parse(txt, sizeof txt - 1, &v), 0);
    assert_true(v.valid & TM_VM_HAVE_MEMTOTAL);
    assert_true(v.mem_total_bytes == 24683664ull * 1024); /* kB means KiB */
}

/* --- real readings */

static void path_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", root, name);
}

/* Writes size bytes at root/name, flushes them and evicts its pages. */
static void put_file(const char *name, size_t size)
{
    char p[512];
    path_of(p, sizeof p, name);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    char buf[4096];
    memset(buf, 'x', sizeof buf);
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof buf ? size - done : sizeof buf;
        assert_true(write(fd, buf, n) == (ssize_t)n);
        done += n;
    }
    assert_int_equal(fdatasync(fd), 0);
    assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(fd);
}

static void read_file(const char *name)
{
    char p[512], buf[65536];
    path_of(p, sizeof p, name);
    int fd = open(p, O_RDONLY);
    assert_true(fd >= 0);
    while (read(fd, buf, sizeof buf) > 0)
        ;
    close(fd);
}

static tm_dsc_reading measure_root(void)
{
    const char *paths[] = {root};
    tm_dsc_reading r;
    assert_int_equal(tm_dsc_measure(paths, 1, &r), 0);
    return r;
}

static int make_root(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "build/test-dscache.XXXXXX");
    assert_non_null(mkdtemp(root));
    return 0;
}

static int remove_root(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void test_reading_counts_the_pages_read_and_only_those(void **state)
{
    (void)state;
    char name[32];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof name, "f%d.bin", i);
        put_file(name, 65536);
    }
    tm_dsc_reading r = measure_root();
    assert_near(r.files, 8, 0);
    assert_near(r.bytes, 8 * 65536.0, 0);
    assert_near(r.files_measured, 8, 0);
    assert_true(r.complete);
    assert_true(r.method == TM_DSC_CACHESTAT || r.method == TM_DSC_MINCORE);
    assert_near(r.cached_fraction, 0.0, 0);
    assert_true(r.memory_bytes > 0);
    /* Four of the eight files read whole: half of the bytes. */
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "f%d.bin", i);
        read_file(name);
    }
    r = measure_root();
    assert_near(r.cached_fraction, 0.5, 0);
    assert_near(r.cached_bytes, 4 * 65536.0, 0);
    /* Measuring read nothing: still half. */
    r = measure_root();
    assert_near(r.cached_fraction, 0.5, 0);
}

static void test_mincore_reading_agrees_with_cachestat(void **state)
{
    (void)state;
    /* A file of 10 pages and one of 3, the second read: 3 of 13 pages
     * resident, counted by mincore over 64 MiB windows as cachestat counts
     * them (kernels before 6.5 have only mincore). */
    put_file("ten.bin", 10 * 4096);
    put_file("three.bin", 3 * 4096);
    read_file("three.bin");
    tm_dsc_force_mincore(true);
    tm_dsc_reading m = measure_root();
    tm_dsc_force_mincore(false);
    tm_dsc_reading c = measure_root();
    assert_int_equal(m.method, TM_DSC_MINCORE);
    assert_near(m.cached_fraction, 3.0 / 13.0, 1e-12);
    assert_near(m.cached_bytes, 3 * 4096.0, 1e-6);
    if (c.method == TM_DSC_CACHESTAT)
        assert_near(c.cached_fraction, m.cached_fraction, 0);
}

static void test_walk_skips_symlinks_fifos_and_counts_subdirectories(void **state)
{
    (void)state;
    char p[512], q[512];
    put_file("a.bin", 8192);
    path_of(p, sizeof p, "sub");
    assert_int_equal(mkdir(p, 0755), 0);
    put_file("sub/b.bin", 4096);
    read_file("sub/b.bin");
    /* A FIFO (a reader that opened it without O_NONBLOCK would wait for a
     * writer forever), a symlink to a file outside and a dangling one. */
    path_of(p, sizeof p, "sub/fifo");
    assert_int_equal(mkfifo(p, 0644), 0);
    path_of(p, sizeof p, "outside");
    assert_int_equal(symlink("/etc/passwd", p), 0);
    path_of(q, sizeof q, "dangling");
    assert_int_equal(symlink("/nonexistent/x", q), 0);
    tm_dsc_reading r = measure_root();
    assert_near(r.files, 2, 0);
    assert_near(r.bytes, 12288, 0);
    assert_near(r.files_measured, 2, 0);
    assert_near(r.cached_fraction, 4096.0 / 12288.0, 1e-12); /* b.bin read, a.bin not */
}

static void test_data_path_may_be_one_file(void **state)
{
    (void)state;
    put_file("one.bin", 3 * 4096);
    read_file("one.bin");
    char p[512];
    path_of(p, sizeof p, "one.bin");
    const char *paths[] = {p};
    tm_dsc_reading r;
    assert_int_equal(tm_dsc_measure(paths, 1, &r), 0);
    assert_near(r.files, 1, 0);
    assert_near(r.cached_fraction, 1.0, 0);
}

static void test_the_same_path_twice_counts_once(void **state)
{
    (void)state;
    put_file("a.bin", 4096);
    char slash[300];
    snprintf(slash, sizeof slash, "%s/", root);
    const char *paths[] = {root, slash};
    tm_dsc_reading r;
    assert_int_equal(tm_dsc_measure(paths, 2, &r), 0);
    assert_near(r.files, 1, 0);
}

static void test_walk_deeper_than_the_limit_is_cut_and_said(void **state)
{
    (void)state;
    char p[4096];
    size_t len = (size_t)snprintf(p, sizeof p, "%s", root);
    for (int i = 0; i < TM_DSC_DEPTH + 3; i++) {
        len += (size_t)snprintf(p + len, sizeof p - len, "/d");
        assert_int_equal(mkdir(p, 0755), 0);
    }
    put_file("top.bin", 4096);
    tm_dsc_reading r = measure_root();
    assert_false(r.complete);
    assert_near(r.files, 1, 0);
}

/* The true resident share of root/s000.bin .. s<n-1>.bin: each file
 * measured alone (one file is measured whole). */
static double true_fraction(int n)
{
    double cached = 0, bytes = 0;
    for (int i = 0; i < n; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/s%03d.bin", root, i);
        const char *paths[] = {p};
        tm_dsc_reading r;
        assert_int_equal(tm_dsc_measure(paths, 1, &r), 0);
        cached += r.cached_bytes;
        bytes += r.bytes;
    }
    return cached / bytes;
}

static void test_sample_is_bounded_and_estimates_the_whole(void **state)
{
    (void)state;
    /* 600 files of 8 KiB, every other one read: 256 measured (16 largest
     * + 240 of the others), and the estimate near the true share (0.5,
     * unless another process drops the page cache meanwhile: the truth is
     * measured file by file around the estimate).  The sample is drawn
     * with a fixed seed; its error for 240 of 600 draws at p = 0.5 is
     * about 0.025 (one standard deviation), so 0.15 is six of them. */
    char name[32];
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "s%03d.bin", i);
        put_file(name, 8192);
        if (i % 2)
            read_file(name);
    }
    double before = true_fraction(600);
    tm_dsc_reading r = measure_root();
    double after = true_fraction(600);
    assert_near(r.files, 600, 0);
    assert_near(r.files_measured, TM_DSC_SAMPLE, 0);
    if (before != after || before != 0.5) {
        print_message("truth %g then %g: the page cache changed under the test\n", before, after);
        skip();
    } /* a drop_caches elsewhere */
    assert_near(r.cached_fraction, before, 0.15);
    /* The same tree, the same sample: the same estimate. */
    tm_dsc_reading again = measure_root();
    if (true_fraction(600) == after)
        assert_near(again.cached_fraction, r.cached_fraction, 0);
}

static void test_missing_path_is_one_clear_error(void **state)
{
    (void)state;
    const char *paths[] = {"/nonexistent/trainmon-dataset"};
    tm_dsc_reading r;
    assert_int_equal(tm_dsc_measure(paths, 1, &r), -ENOENT);
    assert_non_null(strstr(tm_last_error(), "/nonexistent/trainmon-dataset"));
    assert_true(isnan(r.cached_fraction));
}

/* --- the collector */

static size_t samples_of(const char *recpath, const char *name, const char *labels, double *last)
{
    tm_reader *rd = NULL;
    assert_int_equal(tm_reader_open(&rd, recpath), 0);
    uint32_t want = 0;
    size_t n = 0;
    tm_record rec;
    while (tm_reader_next(rd, &rec) == 1) {
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def d;
            assert_int_equal(tm_rec_decode_series(&rec, &d), 0);
            if (d.name_len == strlen(name) && !memcmp(d.name, name, d.name_len) &&
                d.labels_len == strlen(labels) && !memcmp(d.labels, labels, d.labels_len))
                want = d.id;
        } else if (rec.type == TM_REC_SAMPLE && want) {
            uint32_t ids[64];
            double vals[64];
            int k = tm_rec_decode_sample(&rec, ids, vals, 64);
            for (int i = 0; i < k && i < 64; i++)
                if (ids[i] == want) {
                    n++;
                    *last = vals[i];
                }
        }
    }
    tm_reader_close(&rd);
    return n;
}

static void test_collector_records_start_once_and_end_after_finish(void **state)
{
    (void)state;
    put_file("a.bin", 16384);
    put_file("b.bin", 16384);
    char recpath[512];
    snprintf(recpath, sizeof recpath, "%s.tmr", root);
    tm_rec *w = NULL;
    tm_rec_opts ro = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, recpath, &ro), 0);
    const char *paths[] = {root};
    tm_sampler_opts o = {
        .gpu_off = true, .disks_off = true, .rec = w, .data_paths = paths, .ndata_paths = 1};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0); /* the start reading: nothing cached */
    assert_true(tm_sampler_on(s, "dscache"));
    read_file("a.bin"); /* the job reads half */
    assert_int_equal(tm_sampler_tick(s, 1000000000), 0);
    assert_int_equal(tm_sampler_tick(s, 2000000000), 0);
    tm_sampler_finish(s);
    assert_int_equal(tm_sampler_tick(s, 3000000000), 0);
    assert_int_equal(tm_sampler_tick(s, 4000000000), 0);
    tm_sampler_free(&s);
    tm_rec_close(&w);
    double v = NAN;
    assert_int_equal(samples_of(recpath, TM_SER_DATASET_CACHED_FRACTION, "at=start", &v), 1);
    assert_near(v, 0.0, 0); /* taken before the job read */
    assert_int_equal(samples_of(recpath, TM_SER_DATASET_CACHED_FRACTION, "at=end", &v), 1);
    assert_near(v, 0.5, 0);
    assert_int_equal(samples_of(recpath, TM_SER_DATASET_FILES, "at=end", &v), 1);
    assert_near(v, 2, 0);
    assert_int_equal(samples_of(recpath, TM_SER_DATASET_WALK_COMPLETE, "at=end", &v), 1);
    assert_near(v, 1, 0);
    unlink(recpath);
}

static void test_collector_is_off_without_data_paths(void **state)
{
    (void)state;
    tm_sampler_opts o = {.gpu_off = true, .disks_off = true};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_false(tm_sampler_on(s, "dscache"));
    assert_null(tm_sampler_open_error(s, "dscache"));
    tm_sampler_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_largest_files_as_measured_rest_at_sample_ratio),
        cmocka_unit_test(test_estimate_without_sample_takes_the_largest_files_ratio),
        cmocka_unit_test(test_estimate_unavailable_when_nothing_measured_or_no_bytes),
        cmocka_unit_test(test_estimate_clamps_files_that_grew_since_the_walk),
        cmocka_unit_test(test_meminfo_memtotal_in_bytes),
        cmocka_unit_test_setup_teardown(test_reading_counts_the_pages_read_and_only_those,
                                        make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_mincore_reading_agrees_with_cachestat, make_root,
                                        remove_root),
        cmocka_unit_test_setup_teardown(test_walk_skips_symlinks_fifos_and_counts_subdirectories,
                                        make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_data_path_may_be_one_file, make_root, remove_root),
        cmocka_unit_test_setup_teardown(test_the_same_path_twice_counts_once, make_root,
                                        remove_root),
        cmocka_unit_test_setup_teardown(test_walk_deeper_than_the_limit_is_cut_and_said, make_root,
                                        remove_root),
        cmocka_unit_test_setup_teardown(test_sample_is_bounded_and_estimates_the_whole, make_root,
                                        remove_root),
        cmocka_unit_test(test_missing_path_is_one_clear_error),
        cmocka_unit_test_setup_teardown(test_collector_records_start_once_and_end_after_finish,
                                        make_root, remove_root),
        cmocka_unit_test(test_collector_is_off_without_data_paths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
