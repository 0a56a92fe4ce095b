/*
 * test_sampler.c - the one sampler of watch, run and serve (sampler.c and
 * the collector adapters): what is opened for which options, that a tick
 * samples, records and exposes every open collector, that prime records
 * nothing, that set_root opens the tree late (run's fork), and that a
 * collector that cannot open is said through open_error, not fatal.  On
 * this machine's /proc (rates are not checked here: test_disk,
 * test_ptree, test_psi and test_vmstat do that on fixtures).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainmon.h"

static char path[64];

static int setup(void **state)
{
    (void)state;
    snprintf(path, sizeof path, "/tmp/test_sampler.XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    unlink(path); /* tm_rec_open creates it */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    tm_set_proc_root(NULL);
    return 0;
}

/* Sample records in the file, and whether a series of that name exists. */
static size_t count_samples(const char *series, bool *found)
{
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    size_t n = 0;
    *found = false;
    tm_record rec;
    while (tm_reader_next(r, &rec) == 1) {
        if (rec.type == TM_REC_SAMPLE)
            n++;
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def d;
            assert_int_equal(tm_rec_decode_series(&rec, &d), 0);
            if (d.name_len == strlen(series) && memcmp(d.name, series, d.name_len) == 0)
                *found = true;
        }
    }
    tm_reader_close(&r);
    return n;
}

static void test_tick_samples_records_and_exposes_every_open_collector(void **state)
{
    (void)state;
    tm_rec *w = NULL;
    tm_rec_opts ro = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, path, &ro), 0);
    tm_sampler_opts o = {.root_pid = getpid(), .gpu_off = true, .per_process = true, .rec = w};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_true(tm_sampler_on(s, "ptree"));
    assert_true(tm_sampler_on(s, "disk"));
    assert_false(tm_sampler_on(s, "gpu"));
    assert_null(tm_sampler_open_error(s, "gpu")); /* off by option: nothing to say */
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    const tm_ptree_stats *ts = tm_sampler_ptree(s);
    assert_non_null(ts);
    assert_int_equal(ts->root, getpid());
    assert_true(ts->root_alive);
    assert_true(ts->nproc >= 1);
    const tm_diskrate *rates;
    size_t n;
    assert_true(tm_sampler_disks(s, &rates, &n));
    const tm_gpu_stats *g = (const tm_gpu_stats *)1;
    assert_false(tm_sampler_gpus(s, &g, &n));
    assert_null(g);
    assert_int_equal(n, 0);
    tm_sampler_warning wn;
    assert_int_equal(tm_sampler_next_warning(s, &wn), 0);
    tm_sampler_free(&s);
    assert_null(s);
    tm_rec_close(&w);
    bool found;
    assert_true(count_samples("proc.processes", &found) >= 2);
    assert_true(found);
    count_samples("proc.process_rss_bytes", &found); /* per_process */
    assert_true(found);
}

static void test_prime_records_and_feeds_nothing(void **state)
{
    (void)state;
    tm_rec *w = NULL;
    tm_rec_opts ro = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, path, &ro), 0);
    tm_alert_engine *e = NULL;
    assert_int_equal(tm_alert_new(&e), 0);
    assert_true(tm_alert_add_rule(e, "proc.rss_bytes > 0") >= 0);
    tm_sampler_opts o = {.root_pid = getpid(), .gpu_off = true, .rec = w, .alerts = e};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_int_equal(tm_sampler_prime(s), 0);
    assert_non_null(tm_sampler_ptree(s)); /* sampled ... */
    tm_alert a;
    assert_int_equal(tm_alert_next(e, &a), 0); /* ... but not fed */
    tm_rec_close(&w);
    bool found;
    assert_int_equal(count_samples("proc.processes", &found), 0); /* ... nor recorded */
    /* A tick feeds: our own RSS is above 0 at once. */
    tm_sampler_set_rec(s, NULL);
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    assert_int_equal(tm_alert_next(e, &a), 1);
    assert_string_equal(a.metric, "proc.rss_bytes");
    tm_sampler_free(&s);
    tm_alert_free(&e);
}

static void test_off_collectors_are_not_listed_for_metrics(void **state)
{
    (void)state;
    tm_sampler_opts o = {.disks_off = true, .gpu_off = true};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_false(tm_sampler_on(s, "disk"));
    assert_false(tm_sampler_on(s, "ptree"));
    assert_null(tm_sampler_open_error(s, "disk"));
    assert_null(tm_sampler_open_error(s, "ptree"));
    assert_null(tm_sampler_ptree(s));
    assert_false(tm_sampler_disks(s, NULL, NULL));
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    const char *names[16];
    bool ok[16];
    size_t n = tm_sampler_collectors(s, names, ok, 16);
    for (size_t i = 0; i < n; i++) {
        assert_string_not_equal(names[i], "disk");
        assert_string_not_equal(names[i], "gpu");
        assert_string_not_equal(names[i], "ptree"); /* exports nothing */
    }
    assert_int_equal(tm_sampler_collectors(s, names, ok, 0), 0);
    tm_sampler_free(&s);
}

static void test_set_root_opens_the_tree_late(void **state)
{
    (void)state;
    tm_sampler_opts o = {.gpu_off = true};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_false(tm_sampler_on(s, "ptree"));
    assert_int_equal(tm_sampler_set_root(s, getpid()), 0);
    assert_true(tm_sampler_on(s, "ptree"));
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    assert_int_equal(tm_sampler_ptree(s)->root, getpid());
    /* A pid that cannot exist (above pid_max): said, not fatal. */
    assert_int_equal(tm_sampler_set_root(s, 999999999), 0);
    assert_false(tm_sampler_on(s, "ptree"));
    assert_non_null(tm_sampler_open_error(s, "ptree"));
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    assert_null(tm_sampler_ptree(s));
    assert_int_equal(tm_sampler_set_root(NULL, 1), -EINVAL);
    tm_sampler_free(&s);
}

static void test_collector_that_cannot_open_is_said_not_fatal(void **state)
{
    (void)state;
    char empty[] = "/tmp/test_sampler_root.XXXXXX";
    assert_non_null(mkdtemp(empty));
    tm_set_proc_root(empty); /* no diskstats, no vmstat */
    tm_sampler_opts o = {.gpu_off = true};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_false(tm_sampler_on(s, "disk"));
    const char *why = tm_sampler_open_error(s, "disk");
    assert_non_null(why);
    assert_non_null(strstr(why, "diskstats"));
    /* Asked for and failed: /metrics reports it as failing (GPUs aside). */
    const char *names[16];
    bool ok[16];
    size_t n = tm_sampler_collectors(s, names, ok, 16);
    bool disk_listed = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], "disk") == 0) {
            disk_listed = true;
            assert_false(ok[i]);
        }
    assert_true(disk_listed);
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    tm_sampler_free(&s);
    rmdir(empty);
}

static void test_null_arguments(void **state)
{
    (void)state;
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, NULL), -EINVAL);
    assert_int_equal(tm_sampler_tick(NULL, 0), -EINVAL);
    assert_int_equal(tm_sampler_prime(NULL), -EINVAL);
    assert_false(tm_sampler_on(NULL, "disk"));
    assert_null(tm_sampler_pressure(NULL));
    tm_sampler_free(&s);
    tm_sampler_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tick_samples_records_and_exposes_every_open_collector,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_prime_records_and_feeds_nothing, setup, teardown),
        cmocka_unit_test(test_off_collectors_are_not_listed_for_metrics),
        cmocka_unit_test(test_set_root_opens_the_tree_late),
        cmocka_unit_test_setup_teardown(test_collector_that_cannot_open_is_said_not_fatal, setup,
                                        teardown),
        cmocka_unit_test(test_null_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
