/*
 * test_sysrec_procs.c - per-process series of a process tree (tm_procrec):
 * rates from two samples of the same process, instantaneous values from the
 * first, a reused pid starting afresh, labels that cannot be broken by a
 * process name, and the cap per sample.  Samples are built by hand and
 * written to a real record file, then read back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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
    snprintf(path, sizeof path, "/tmp/test_procrec.XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(path);
    return 0;
}

static tm_procinfo proc(pid_t pid, uint64_t start, const char *comm, char state, double cpu_s,
                        uint64_t read_bytes)
{
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    p.pid = pid;
    p.starttime = start;
    snprintf(p.comm, sizeof p.comm, "%s", comm);
    p.state = state;
    p.valid = TM_PROC_HAVE_STAT | TM_PROC_HAVE_IO | TM_PROC_HAVE_RSS;
    p.utime_s = cpu_s * 0.75;
    p.stime_s = cpu_s * 0.25;
    p.read_bytes = read_bytes;
    p.rchar = read_bytes * 2;
    p.rss_bytes = 1000u * (unsigned)pid;
    return p;
}

static tm_ptree_stats tree(int64_t t_ns, const tm_procinfo *procs, size_t n)
{
    tm_ptree_stats s;
    memset(&s, 0, sizeof s);
    s.t_ns = t_ns;
    s.root = procs[0].pid;
    s.root_alive = true;
    s.nproc = n;
    s.procs = procs;
    return s;
}

/* The last value of series name{labels} in the file, NAN if never written. */
static double last_value(const char *name, const char *labels)
{
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    uint32_t want = 0;
    double v = NAN;
    tm_record rec;
    while (tm_reader_next(r, &rec) == 1) {
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def d;
            assert_int_equal(tm_rec_decode_series(&rec, &d), 0);
            if (d.name_len == strlen(name) && memcmp(d.name, name, d.name_len) == 0 &&
                d.labels_len == strlen(labels) && memcmp(d.labels, labels, d.labels_len) == 0)
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

static void write_samples(const tm_ptree_stats *s, size_t n)
{
    tm_rec *w = NULL;
    tm_rec_opts o = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    tm_procrec *pr = NULL;
    assert_int_equal(tm_procrec_new(&pr), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(tm_procrec_write(pr, w, s[i].t_ns, &s[i]), 0);
    tm_procrec_free(&pr);
    assert_null(pr);
    tm_rec_close(&w);
}

static void test_cpu_and_read_rates_come_from_two_samples_of_a_process(void **state)
{
    (void)state;
    tm_procinfo a[] = {proc(100, 5, "python3", 'R', 1.0, 0), proc(101, 6, "python3", 'D', 0, 0)};
    tm_procinfo b[] = {proc(100, 5, "python3", 'R', 2.5, 0),
                       proc(101, 6, "python3", 'D', 0.5, 8u << 20)};
    tm_ptree_stats s[] = {tree(1000000000, a, 2), tree(3000000000, b, 2)};
    write_samples(s, 2);
    assert_float_equal(last_value("proc.process_cpu_utilization", "pid=100,comm=python3"), 0.75,
                       1e-9);
    assert_float_equal(last_value("proc.process_cpu_utilization", "pid=101,comm=python3"), 0.25,
                       1e-9);
    assert_float_equal(last_value("proc.process_read_bytes_per_second", "pid=101,comm=python3"),
                       4194304.0, 1e-6);
    assert_float_equal(last_value("proc.process_rchar_bytes_per_second", "pid=101,comm=python3"),
                       8388608.0, 1e-6);
    assert_float_equal(last_value("proc.process_state_d", "pid=101,comm=python3"), 1.0, 0);
    assert_float_equal(last_value("proc.process_state_d", "pid=100,comm=python3"), 0.0, 0);
}

static void test_first_sample_has_state_and_memory_but_no_rates(void **state)
{
    (void)state;
    tm_procinfo a[] = {proc(100, 5, "python3", 'S', 1.0, 4096)};
    tm_ptree_stats s[] = {tree(1000000000, a, 1)};
    write_samples(s, 1);
    assert_float_equal(last_value("proc.process_rss_bytes", "pid=100,comm=python3"), 100000.0, 0);
    assert_float_equal(last_value("proc.process_state_d", "pid=100,comm=python3"), 0.0, 0);
    assert_true(isnan(last_value("proc.process_cpu_utilization", "pid=100,comm=python3")));
    assert_true(isnan(last_value("proc.process_read_bytes_per_second", "pid=100,comm=python3")));
    /* PSS was not read (no valid bit): left out, not 0. */
    assert_true(isnan(last_value("proc.process_pss_bytes", "pid=100,comm=python3")));
}

static void test_reused_pid_with_another_starttime_has_no_rate(void **state)
{
    (void)state;
    tm_procinfo a[] = {proc(100, 5, "python3", 'R', 50.0, 0)};
    tm_procinfo b[] = {proc(100, 9, "python3", 'R', 1.0, 0)};
    tm_ptree_stats s[] = {tree(1000000000, a, 1), tree(2000000000, b, 1)};
    write_samples(s, 2);
    assert_true(isnan(last_value("proc.process_cpu_utilization", "pid=100,comm=python3")));
}

static void test_separators_in_the_process_name_are_replaced(void **state)
{
    (void)state;
    tm_procinfo a[] = {proc(7, 1, "evil,pid=9\n", 'S', 0, 0)};
    tm_ptree_stats s[] = {tree(1000000000, a, 1)};
    write_samples(s, 1);
    assert_float_equal(last_value("proc.process_state_d", "pid=7,comm=evil_pid_9_"), 0.0, 0);
}

static void test_at_most_TM_PROCREC_MAX_processes_are_recorded(void **state)
{
    (void)state;
    size_t n = TM_PROCREC_MAX + 10;
    tm_procinfo *a = calloc(n, sizeof *a);
    assert_non_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = proc((pid_t)(1000 + i), 1, "w", 'S', 0, 0);
    tm_ptree_stats s[] = {tree(1000000000, a, n)};
    write_samples(s, 1);
    char last_in[64], first_out[64];
    snprintf(last_in, sizeof last_in, "pid=%d,comm=w", 1000 + TM_PROCREC_MAX - 1);
    snprintf(first_out, sizeof first_out, "pid=%d,comm=w", 1000 + TM_PROCREC_MAX);
    assert_false(isnan(last_value("proc.process_state_d", last_in)));
    assert_true(isnan(last_value("proc.process_state_d", first_out)));
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cpu_and_read_rates_come_from_two_samples_of_a_process,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_sample_has_state_and_memory_but_no_rates, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_reused_pid_with_another_starttime_has_no_rate, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_separators_in_the_process_name_are_replaced, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_at_most_TM_PROCREC_MAX_processes_are_recorded, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
