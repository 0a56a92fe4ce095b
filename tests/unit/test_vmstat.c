/*
 * test_vmstat.c - the page-cache collector (collect_vmstat.c): the
 * /proc/vmstat and /proc/meminfo parsers on fixtures of a 6.x kernel
 * (tests/fixtures/vmstat/t0, t1: refaults split into _anon and _file) and
 * of an older one (old: one workingset_refault line), the rate arithmetic
 * with hand-computed numbers, and the collector driven by the sampler on a
 * temporary /proc root the test rewrites: series recorded, Prometheus
 * lines, an alert input, and a missing /proc/vmstat said, not fatal.
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
#include <sys/stat.h>
#include <unistd.h>

#include "collect_vmstat.h"
#include "series.h"
#include "trainmon.h"
#include "util.h"

#define FIX "tests/fixtures/vmstat"

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-9 * (fabs(want) > 1 ? fabs(want) : 1))
        fail_msg("got %.12g, want %.12g", got, want);
}

static tm_vmstat parse_dir(const char *dir)
{
    static char buf[65536];
    char path[256];
    tm_vmstat v;
    memset(&v, 0, sizeof v);
    snprintf(path, sizeof path, "%s/vmstat", dir);
    ssize_t len = tm_read_file(path, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_vmstat_parse(buf, (size_t)len, &v), 0);
    snprintf(path, sizeof path, "%s/meminfo", dir);
    len = tm_read_file(path, buf, sizeof buf);
    if (len > 0)
        assert_int_equal(tm_meminfo_parse(buf, (size_t)len, &v), 0);
    return v;
}

/* ----------------------------------------------------------------- parsing */

static void test_vmstat_new_kernel_takes_file_refaults(void **state)
{
    (void)state;
    tm_vmstat v = parse_dir(FIX "/t0");
    assert_int_equal(v.valid, TM_VM_HAVE_MAJFAULT | TM_VM_HAVE_PGPGIN | TM_VM_HAVE_REFAULT |
                                  TM_VM_HAVE_CACHED | TM_VM_HAVE_DIRTY | TM_VM_HAVE_MEMTOTAL);
    assert_int_equal(v.pgmajfault, 6000); /* not pgmajfault_s 17: a longer name */
    assert_int_equal(v.pgpgin_kib, 5000000);
    assert_int_equal(v.refault, 86000); /* workingset_refault_file, not _anon 700 */
    /* meminfo "kB" are KiB: 655020 * 1024 and 8556 * 1024.  SwapCached is
     * not Cached. */
    assert_int_equal(v.cached_bytes, 670740480ull);
    assert_int_equal(v.dirty_bytes, 8761344ull);
    assert_int_equal(v.mem_total_bytes, 25276071936ull); /* 24683664 * 1024 (dscache.c) */
}

static void test_vmstat_old_kernel_plain_refault(void **state)
{
    (void)state;
    tm_vmstat v = parse_dir(FIX "/old");
    assert_int_equal(v.valid, TM_VM_HAVE_MAJFAULT | TM_VM_HAVE_PGPGIN | TM_VM_HAVE_REFAULT);
    assert_int_equal(v.refault, 4242);
    assert_int_equal(v.pgpgin_kib, 2048);
    assert_int_equal(v.pgmajfault, 12);
}

static void test_vmstat_missing_and_malformed_lines_stay_unavailable(void **state)
{
    (void)state;
    const char text[] = "pgmajfault\npgpgin abc\nworkingset_refault_file 18446744073709551616\n"
                        "nr_free_pages 5\n";
    tm_vmstat v;
    memset(&v, 0, sizeof v);
    assert_int_equal(tm_vmstat_parse(text, sizeof text - 1, &v), 0);
    assert_int_equal(v.valid, 0);
    /* Dirty's kB would overflow 64 bits once scaled: unavailable, not wrapped. */
    const char mem[] = "Cached: 5 kB\nDirty: 18014398509481984 kB\n";
    assert_int_equal(tm_meminfo_parse(mem, sizeof mem - 1, &v), 0);
    assert_int_equal(v.valid, TM_VM_HAVE_CACHED);
    assert_int_equal(v.cached_bytes, 5120);
    assert_int_equal(tm_vmstat_parse(NULL, 0, &v), -EINVAL);
}

/* ------------------------------------------------------------------- rates */

static void test_vmstat_rates_by_hand(void **state)
{
    (void)state;
    tm_vmstat a = parse_dir(FIX "/t0"), b = parse_dir(FIX "/t1");
    tm_vmrate r;
    tm_vmstat_rate(&a, &b, 2.0, &r);
    assert_near(r.majfault_s, 125.0); /* (6250 - 6000) / 2 s */
    assert_near(r.pagein_bytes_s,
                209715200.0);                 /* (5409600 - 5000000) KiB * 1024 / 2 s = 200 MiB/s */
    assert_near(r.refault_s, 250.0);          /* (86500 - 86000) / 2 s */
    assert_near(r.cached_bytes, 716800000.0); /* 700000 kB * 1024, the newer sample */
    assert_near(r.dirty_bytes, 102400.0);     /* 100 kB * 1024 */
}

static void test_vmstat_rates_first_sample_backwards_and_no_time(void **state)
{
    (void)state;
    tm_vmstat a = parse_dir(FIX "/t0"), b = parse_dir(FIX "/t1");
    tm_vmrate r;
    tm_vmstat_rate(NULL, &a, 1.0, &r); /* first sample: gauges only */
    assert_true(isnan(r.majfault_s) && isnan(r.pagein_bytes_s) && isnan(r.refault_s));
    assert_near(r.cached_bytes, 670740480.0);
    tm_vmstat_rate(&b, &a, 1.0, &r); /* counters went backwards (a reboot): 0, as iostat */
    assert_near(r.majfault_s, 0.0);
    assert_near(r.refault_s, 0.0);
    tm_vmstat_rate(&a, &b, 0.0, &r); /* no time elapsed: unavailable */
    assert_true(isnan(r.majfault_s));
    tm_vmstat old = parse_dir(FIX "/old");
    tm_vmstat_rate(&old, &old, 1.0, &r); /* no meminfo: no gauges */
    assert_true(isnan(r.cached_bytes) && isnan(r.dirty_bytes));
    assert_near(r.majfault_s, 0.0);
}

/* -------------------------------------------------- through the sampler */

static char root[64], rec_path[96];

static void copy_file(const char *from, const char *to)
{
    static char buf[65536];
    ssize_t len = tm_read_file(from, buf, sizeof buf);
    assert_true(len > 0);
    /* Rewritten in place (same inode): the collector keeps the file open. */
    FILE *f = fopen(to, "r+");
    if (!f)
        f = fopen(to, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, (size_t)len, f), (size_t)len);
    assert_int_equal(ftruncate(fileno(f), len), 0);
    fclose(f);
}

static void put_sample(const char *dir)
{
    char from[128], to[128];
    snprintf(from, sizeof from, "%s/vmstat", dir);
    snprintf(to, sizeof to, "%s/vmstat", root);
    copy_file(from, to);
    snprintf(from, sizeof from, "%s/meminfo", dir);
    snprintf(to, sizeof to, "%s/meminfo", root);
    copy_file(from, to);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/test_vmstat.XXXXXX");
    if (!mkdtemp(root))
        return -1;
    snprintf(rec_path, sizeof rec_path, "%s/system.tmr", root);
    tm_set_proc_root(root);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char p[128];
    const char *names[] = {"vmstat", "meminfo", "system.tmr"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", root, names[i]);
        unlink(p);
    }
    rmdir(root);
    tm_set_proc_root(NULL);
    return 0;
}

static double last_value(const char *name)
{
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, rec_path), 0);
    uint32_t want = 0;
    double v = NAN;
    tm_record rec;
    while (tm_reader_next(r, &rec) == 1) {
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def d;
            assert_int_equal(tm_rec_decode_series(&rec, &d), 0);
            if (d.name_len == strlen(name) && memcmp(d.name, name, d.name_len) == 0)
                want = d.id;
        } else if (rec.type == TM_REC_SAMPLE && want) {
            uint32_t ids[64];
            double vals[64];
            int n = tm_rec_decode_sample(&rec, ids, vals, 64);
            for (int i = 0; i < n && i < 64; i++)
                if (ids[i] == want)
                    v = vals[i];
        }
    }
    tm_reader_close(&r);
    return v;
}

static tm_sampler *open_sampler(tm_rec *w, tm_alert_engine *e)
{
    /* Only the page-cache collector can open on this /proc root (no
     * diskstats, no pressure files), and GPUs are off. */
    tm_sampler_opts o = {.gpu_off = true, .rec = w, .alerts = e, .prom = true};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0);
    assert_true(tm_sampler_on(s, "vmstat"));
    return s;
}

static void test_collector_records_series_over_two_ticks(void **state)
{
    (void)state;
    put_sample(FIX "/t0");
    tm_rec *w = NULL;
    tm_rec_opts ro = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, rec_path, &ro), 0);
    tm_sampler *s = open_sampler(w, NULL);
    assert_int_equal(tm_sampler_tick(s, 1000000000), 0);
    put_sample(FIX "/t1");
    assert_int_equal(tm_sampler_tick(s, 6000000000), 0); /* 5 s later: re-read */
    tm_sampler_free(&s);
    tm_rec_close(&w);
    /* The differences of test_vmstat_rates_by_hand (250 faults, 400 MiB
     * paged in, 500 refaults between t0 and t1), over 5 s instead of 2. */
    assert_near(last_value(TM_SER_VM_MAJOR_FAULTS_PER_SECOND), 50.0);         /* 250 / 5 */
    assert_near(last_value(TM_SER_VM_PAGEIN_BYTES_PER_SECOND), 83886080.0);   /* 400 MiB / 5 */
    assert_near(last_value(TM_SER_VM_PAGE_CACHE_REFAULTS_PER_SECOND), 100.0); /* 500 / 5 */
    assert_near(last_value(TM_SER_VM_PAGE_CACHE_BYTES), 716800000.0);
    assert_near(last_value(TM_SER_VM_DIRTY_BYTES), 102400.0);
}

static void test_collector_reads_at_most_every_five_seconds(void **state)
{
    (void)state;
    put_sample(FIX "/t0");
    tm_rec *w = NULL;
    tm_rec_opts ro = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, rec_path, &ro), 0);
    tm_sampler *s = open_sampler(w, NULL);
    assert_int_equal(tm_sampler_tick(s, 1000000000), 0);
    put_sample(FIX "/t1");
    /* 2 s later the files are not read again: t0's reading stands, so
     * there is still no rate and Cached is t0's, and nothing new is
     * recorded. */
    assert_int_equal(tm_sampler_tick(s, 3000000000), 0);
    tm_sampler_free(&s);
    tm_rec_close(&w);
    assert_true(isnan(last_value(TM_SER_VM_MAJOR_FAULTS_PER_SECOND)));
    tm_vmstat t0 = {0};
    char buf[16384];
    ssize_t n = tm_read_file(FIX "/t0/meminfo", buf, sizeof buf);
    assert_true(n > 0);
    tm_meminfo_parse(buf, (size_t)n, &t0);
    assert_near(last_value(TM_SER_VM_PAGE_CACHE_BYTES), (double)t0.cached_bytes);
}

static void test_collector_writes_prometheus_counters(void **state)
{
    (void)state;
    put_sample(FIX "/t1");
    tm_sampler *s = open_sampler(NULL, NULL);
    assert_int_equal(tm_sampler_tick(s, 1000000000), 0);
    tm_text *t = tm_text_new(1 << 16);
    assert_non_null(t);
    assert_int_equal(tm_sampler_prom(s, t), 0);
    const char *txt = tm_text_data(t, NULL);
    assert_non_null(strstr(txt, "# TYPE trainmon_vmstat_major_faults_total counter\n"
                                "trainmon_vmstat_major_faults_total 6250\n"));
    /* 5409600 KiB * 1024 */
    assert_non_null(strstr(txt, "\ntrainmon_vmstat_pagein_bytes_total 5539430400\n"));
    assert_non_null(strstr(txt, "\ntrainmon_vmstat_page_cache_refaults_total 86500\n"));
    assert_non_null(strstr(txt, "\ntrainmon_memory_page_cache_bytes 716800000\n"));
    assert_non_null(strstr(txt, "\ntrainmon_memory_dirty_bytes 102400\n"));
    /* The exporter's own list names it, with a working last sample. */
    const char *names[8];
    bool ok[8];
    size_t n = tm_sampler_collectors(s, names, ok, 8);
    bool found = false;
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], "vmstat") == 0)
            found = ok[i];
    assert_true(found);
    tm_text_free(&t);
    tm_sampler_free(&s);
}

static void test_collector_feeds_alert_inputs(void **state)
{
    (void)state;
    assert_non_null(tm_alert_metric_help("vm.major_faults_s"));
    assert_non_null(tm_alert_metric_help("vm.refaults_s"));
    tm_alert_engine *e = NULL;
    assert_int_equal(tm_alert_new(&e), 0);
    assert_true(tm_alert_add_rule(e, "vm.major_faults_s > 40") >= 0);
    assert_true(tm_alert_add_rule(e, "vm.refaults_s > 300") >= 0);
    put_sample(FIX "/t0");
    tm_sampler *s = open_sampler(NULL, e);
    assert_int_equal(tm_sampler_tick(s, 1000000000), 0);
    tm_alert a;
    assert_int_equal(tm_alert_next(e, &a), 0); /* the first sample has no rate */
    put_sample(FIX "/t1");
    assert_int_equal(tm_sampler_tick(s, 6000000000), 0);
    /* 250 faults over 5 s = 50/s > 40 fires; 100 refaults/s is not > 300. */
    assert_int_equal(tm_alert_next(e, &a), 1);
    assert_int_equal(a.status, TM_ALERT_FIRING);
    assert_string_equal(a.metric, "vm.major_faults_s");
    assert_near(a.value, 50.0);
    assert_int_equal(tm_alert_next(e, &a), 0);
    tm_sampler_free(&s);
    tm_alert_free(&e);
}

static void test_collector_without_proc_vmstat_is_said_not_fatal(void **state)
{
    (void)state;
    tm_sampler_opts o = {.gpu_off = true};
    tm_sampler *s = NULL;
    assert_int_equal(tm_sampler_new(&s, &o), 0); /* the root has no vmstat yet */
    assert_false(tm_sampler_on(s, "vmstat"));
    const char *why = tm_sampler_open_error(s, "vmstat");
    assert_non_null(why);
    assert_non_null(strstr(why, "/vmstat"));
    assert_int_equal(tm_sampler_tick(s, 0), 0);
    tm_sampler_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vmstat_new_kernel_takes_file_refaults),
        cmocka_unit_test(test_vmstat_old_kernel_plain_refault),
        cmocka_unit_test(test_vmstat_missing_and_malformed_lines_stay_unavailable),
        cmocka_unit_test(test_vmstat_rates_by_hand),
        cmocka_unit_test(test_vmstat_rates_first_sample_backwards_and_no_time),
        cmocka_unit_test_setup_teardown(test_collector_without_proc_vmstat_is_said_not_fatal, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_collector_reads_at_most_every_five_seconds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_collector_records_series_over_two_ticks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_collector_writes_prometheus_counters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_collector_feeds_alert_inputs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
