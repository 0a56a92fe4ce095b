/*
 * test_units.c - numbers for people (units.c): the unit a key's suffix
 * names, every unit's precision at its edges, evidence objects as one line
 * and the fast fixed-point formatter of `watch --json` against printf.
 * Every expected string is written out.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "prom.h"
#include "trainmon.h"
#include "units.h"

static tm_unit unit_of(const char *k)
{
    return tm_unit_of_key(k, strlen(k));
}

static const char *fmt(tm_unit u, double v)
{
    static char buf[64];
    return tm_unit_fmt(buf, sizeof buf, u, v);
}

static void test_unit_of_key_reads_the_suffix(void **state)
{
    (void)state;
    assert_int_equal(unit_of("step_time_median_s"), TM_UNIT_SECONDS);
    assert_int_equal(unit_of("s"), TM_UNIT_SECONDS);
    assert_int_equal(unit_of("disk_read_bytes_per_second"), TM_UNIT_BYTES_RATE);
    assert_int_equal(unit_of("worst_bytes_per_hour"), TM_UNIT_BYTES_HOUR);
    assert_int_equal(unit_of("trend_bytes_per_step"), TM_UNIT_BYTES_STEP);
    assert_int_equal(unit_of("peak_allocated_bytes"), TM_UNIT_BYTES);
    assert_int_equal(unit_of("data_wait_fraction"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("worker_d_state_share"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("worker_fetch_share_threshold"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("disk_utilization"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("gpu_utilization_mean"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("psi_io_some"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("utilization_gpu_percent"), TM_UNIT_PERCENT);
    assert_int_equal(unit_of("speedup"), TM_UNIT_FACTOR);
    assert_int_equal(unit_of("compute_slowdown"), TM_UNIT_FACTOR);
    assert_int_equal(unit_of("worker_fetch_per_compute"), TM_UNIT_FACTOR);
    assert_int_equal(unit_of("steps"), TM_UNIT_COUNT);
    assert_int_equal(unit_of("worst_pid"), TM_UNIT_COUNT);
    assert_int_equal(unit_of("time_lost_s"), TM_UNIT_SECONDS);
    assert_int_equal(unit_of("time_lost_fraction"), TM_UNIT_FRACTION);
    /* a statistic after the unit keeps it */
    assert_int_equal(unit_of("disk_read_bytes_per_second_max"), TM_UNIT_BYTES_RATE);
    assert_int_equal(unit_of("wait_per_batch_median_s"), TM_UNIT_SECONDS);
    assert_int_equal(unit_of("compute_median"), TM_UNIT_PLAIN);
    assert_int_equal(unit_of("_max"), TM_UNIT_PLAIN);
    /* so does the reading: the dataset's share cached at the start, end */
    assert_int_equal(unit_of("dataset_cached_fraction_start"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("dataset_cached_fraction_end"), TM_UNIT_FRACTION);
    assert_int_equal(unit_of("busy_threshold"), TM_UNIT_FRACTION);
}

/* A suffix counts only after '_': "threads" is not "_s", "process" not
 * "_ss", and an unknown key is a plain number. */
static void test_unit_of_key_needs_a_separator(void **state)
{
    (void)state;
    assert_int_equal(unit_of("threads"), TM_UNIT_PLAIN);
    assert_int_equal(unit_of("usable_cpus"), TM_UNIT_PLAIN);
    assert_int_equal(unit_of("megabytes"), TM_UNIT_PLAIN);
    assert_int_equal(unit_of("awesome"), TM_UNIT_PLAIN);
    assert_int_equal(unit_of("ratio"), TM_UNIT_PLAIN);
    assert_int_equal(unit_of(""), TM_UNIT_PLAIN);
    /* the length given, not the NUL, ends the key */
    assert_int_equal(tm_unit_of_key("wait_s_more", 6), TM_UNIT_SECONDS);
}

static void test_seconds_pick_us_ms_s(void **state)
{
    (void)state;
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0.0357013), "35.7 ms");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 2.4), "2.4 s");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 123.4), "123 s");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0.00085), "850 us");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 1.5e-7), "0.15 us");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0.0042), "4.2 ms");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0.5), "500 ms");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0), "0 s");
    /* 0.99996 s rounds to 1000 ms: said as seconds instead */
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0.99996), "1.0 s");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 0.0009996), "1.0 ms");
    assert_string_equal(fmt(TM_UNIT_SECONDS, -0.012), "-12.0 ms");
    assert_string_equal(fmt(TM_UNIT_SECONDS, 3600), "3600 s");
}

static void test_bytes_binary_rates_decimal(void **state)
{
    (void)state;
    /* 8.06944e+06 B/s, the raw JSON of the issue, is 8.1 MB/s */
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 8.06944e+06), "8.1 MB/s");
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 7.7e6), "7.7 MB/s");
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 0), "0 B/s");
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 512), "512 B/s");
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 250e3), "250 kB/s");
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 1.2e9), "1.2 GB/s");
    /* 999,990 B/s would round to "1000 kB/s": one prefix up */
    assert_string_equal(fmt(TM_UNIT_BYTES_RATE, 999990), "1.0 MB/s");
    assert_string_equal(fmt(TM_UNIT_BYTES, 512), "512 B");
    assert_string_equal(fmt(TM_UNIT_BYTES, 1536), "1.5 KiB");
    /* 1.5 GiB = 1610612736 B */
    assert_string_equal(fmt(TM_UNIT_BYTES, 1610612736.0), "1.5 GiB");
    /* 200 MiB = 209715200 B */
    assert_string_equal(fmt(TM_UNIT_BYTES, 209715200.0), "200 MiB");
    /* 0.75 MiB = 786432 B: 768 KiB */
    assert_string_equal(fmt(TM_UNIT_BYTES, 786432.0), "768 KiB");
    /* 120 MiB per hour = 125829120 B/h */
    assert_string_equal(fmt(TM_UNIT_BYTES_HOUR, 125829120.0), "120 MiB/h");
    /* 1.3 MiB per step = 1363148.8 B */
    assert_string_equal(fmt(TM_UNIT_BYTES_STEP, 1363148.8), "1.3 MiB/step");
}

static void test_fractions_percent_factors_counts(void **state)
{
    (void)state;
    assert_string_equal(fmt(TM_UNIT_FRACTION, 0.873), "87.3%");
    assert_string_equal(fmt(TM_UNIT_FRACTION, 0.41), "41.0%");
    assert_string_equal(fmt(TM_UNIT_FRACTION, 1), "100%");
    assert_string_equal(fmt(TM_UNIT_FRACTION, 0), "0%");
    assert_string_equal(fmt(TM_UNIT_FRACTION, 0.0042), "0.42%");
    assert_string_equal(fmt(TM_UNIT_FRACTION, 0.05), "5.0%");
    assert_string_equal(fmt(TM_UNIT_PERCENT, 87.34), "87.3%");
    assert_string_equal(fmt(TM_UNIT_FACTOR, 1.7), "1.7x");
    assert_string_equal(fmt(TM_UNIT_FACTOR, 1.04), "1.04x");
    assert_string_equal(fmt(TM_UNIT_FACTOR, 2.0), "2x");
    assert_string_equal(fmt(TM_UNIT_FACTOR, 1.666), "1.67x");
    assert_string_equal(fmt(TM_UNIT_FACTOR, 150.4), "150x");
    assert_string_equal(fmt(TM_UNIT_COUNT, 12), "12");
    assert_string_equal(fmt(TM_UNIT_COUNT, 2.6), "3");
    assert_string_equal(fmt(TM_UNIT_PLAIN, 16), "16");
    assert_string_equal(fmt(TM_UNIT_PLAIN, 0.9318), "0.932");
    assert_string_equal(fmt(TM_UNIT_PLAIN, 1.65), "1.65");
    assert_string_equal(fmt(TM_UNIT_PLAIN, 12345.6), "12346");
    assert_string_equal(fmt(TM_UNIT_PLAIN, 1.5e-5), "1.5e-05");
    /* unavailable is not zero */
    assert_string_equal(fmt(TM_UNIT_SECONDS, NAN), "n/a");
    assert_string_equal(fmt(TM_UNIT_FRACTION, INFINITY), "n/a");
}

static void test_fmt_truncates_to_cap(void **state)
{
    (void)state;
    char buf[4];
    tm_unit_fmt(buf, sizeof buf, TM_UNIT_SECONDS, 0.0357);
    assert_string_equal(buf, "35.");
}

/* pid 4242 is rank 0's worker 1; no other pid is known. */
static bool test_namer(void *ctx, long pid, char *buf, size_t cap)
{
    (void)ctx;
    if (pid != 4242)
        return false;
    snprintf(buf, cap, "rank 0 worker 1");
    return true;
}

static tm_unit_pid_namer namer;

/* The evidence line of a finding, as the text report prints it. */
static const char *line(const char *json)
{
    static char out[1024];
    tm_text *t = tm_text_new(1 << 16);
    assert_non_null(t);
    tm_unit_evidence_line(t, TM_ESC_TEXT, json, namer, NULL);
    snprintf(out, sizeof out, "%s", tm_text_data(t, NULL));
    tm_text_free(&t);
    return out;
}

static void test_evidence_line_units_by_key(void **state)
{
    (void)state;
    assert_string_equal(
        line("{\"data_wait_fraction\":0.412,\"step_time_median_s\":0.0357013,"
             "\"disk\":\"vdb\",\"disk_read_bytes_per_second\":8.06944e+06,\"workers\":4}"),
        "data_wait_fraction 41.2%, step_time_median_s 35.7 ms, disk vdb, "
        "disk_read_bytes_per_second 8.1 MB/s, workers 4");
}

static void test_evidence_line_lists_nulls_apart(void **state)
{
    (void)state;
    assert_string_equal(line("{\"psi_io_some\":null,\"data_wait_s\":1.5,\"gpus\":null}"),
                        "data_wait_s 1.5 s; not measured: psi_io_some, gpus");
    assert_string_equal(line("{\"a_s\":null}"), "not measured: a_s");
    assert_string_equal(line("{}"), "");
}

/* Maps take the parent key's unit; a per_rank map's digit keys are ranks. */
static void test_evidence_line_nested_maps(void **state)
{
    (void)state;
    assert_string_equal(line("{\"per_rank_sync_wait_s\":{\"0\":0.012,\"1\":0.0005},"
                             "\"votes\":{\"disk\":3,\"cpu\":0}}"),
                        "per_rank_sync_wait_s {rank 0: 12.0 ms, rank 1: 500 us}, "
                        "votes {disk: 3, cpu: 0}");
    assert_string_equal(line("{\"per_rank\":{\"pid42\":1.5}}"), "per_rank {pid42: 1.5}");
}

static void test_evidence_line_keeps_bad_json_as_written(void **state)
{
    (void)state;
    assert_string_equal(line("[1,2]"), "[1,2]");
    assert_string_equal(line("{\"a\":1,"), "{\"a\":1,");
    assert_string_equal(line("{\"a\" 1}"), "{\"a\" 1}");
    assert_string_equal(line("{\"a\":}"), "{\"a\":}");
    /* found by fuzz_evidence: an object of whitespace, then stray '}' */
    assert_string_equal(line("{\r\r\r}}}}"), "");
    /* control characters of a string are not written to a terminal */
    assert_string_equal(line("{\"why\":\"a\\u0007b\",\"ok\":true}"), "why a\\u0007b, ok true");
}

/* A pid the run knows is named by rank; others stay numbers. */
static void test_evidence_line_names_pids_by_rank(void **state)
{
    (void)state;
    namer = test_namer;
    assert_string_equal(line("{\"worst_pid\":4242,\"pid\":17,\"rapid\":4242}"),
                        "worst_pid 4242 (rank 0 worker 1), pid 17, rapid 4242");
    namer = NULL;
    assert_string_equal(line("{\"worst_pid\":4242}"), "worst_pid 4242");
}

static void test_evidence_num_reads_one_key(void **state)
{
    (void)state;
    const char *ev = "{\"speedup\":1.7,\"time_lost_s\":123,\"x\":null,\"s\":\"1\"}";
    assert_true(tm_unit_evidence_num(ev, "speedup") == 1.7);
    assert_true(tm_unit_evidence_num(ev, "time_lost_s") == 123);
    assert_true(isnan(tm_unit_evidence_num(ev, "x")));
    assert_true(isnan(tm_unit_evidence_num(ev, "s")));
    assert_true(isnan(tm_unit_evidence_num(ev, "missing")));
    assert_true(isnan(tm_unit_evidence_num("not json", "speedup")));
}

static const char *fixed(double v, int prec)
{
    static char buf[400];
    size_t n = tm_fmt_fixed(buf, sizeof buf, v, prec);
    assert_int_equal(n, strlen(buf));
    return buf;
}

static void test_fmt_fixed_writes_printf_digits(void **state)
{
    (void)state;
    assert_string_equal(fixed(0, 2), "0.00");
    assert_string_equal(fixed(12.345678, 2), "12.35");
    assert_string_equal(fixed(0.004, 2), "0.00");
    assert_string_equal(fixed(-1.5, 1), "-1.5");
    assert_string_equal(fixed(-0.001, 2), "-0.00"); /* as printf */
    assert_string_equal(fixed(99.999, 2), "100.00");
    assert_string_equal(fixed(1796313239.952, 3), "1796313239.952");
    assert_string_equal(fixed(563.377622, 6), "563.377622");
    assert_string_equal(fixed(123456789.0, 0), "123456789");
    assert_string_equal(fixed(0.5, 0), "1"); /* a tie rounds up (printf: "0") */
    /* beyond 1e15 printf's own text */
    char want[400];
    snprintf(want, sizeof want, "%.2f", 1e300);
    assert_string_equal(fixed(1e300, 2), want);
    assert_string_equal(fixed(NAN, 2), "nan");
    assert_string_equal(fixed(-INFINITY, 2), "-inf");
}

/* Against printf on many values: the same text, or (at a tie within one
 * rounding error) one unit of the last digit up. */
static void test_fmt_fixed_matches_printf(void **state)
{
    (void)state;
    srand(11);
    for (int i = 0; i < 200000; i++) {
        int prec = i % 7;
        double v = ((double)rand() / RAND_MAX - 0.3) * pow(10, i % 13 - 4);
        char want[64], got[64];
        snprintf(want, sizeof want, "%.*f", prec, v);
        tm_fmt_fixed(got, sizeof got, v, prec);
        if (strcmp(want, got) == 0)
            continue;
        double d = fabs(strtod(got, NULL) - strtod(want, NULL)) * pow(10, prec);
        if (!(d > 0.5 && d < 1.5)) {
            print_error("%.17g prec %d: printf %s, tm_fmt_fixed %s\n", v, prec, want, got);
            fail();
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unit_of_key_reads_the_suffix),
        cmocka_unit_test(test_unit_of_key_needs_a_separator),
        cmocka_unit_test(test_seconds_pick_us_ms_s),
        cmocka_unit_test(test_bytes_binary_rates_decimal),
        cmocka_unit_test(test_fractions_percent_factors_counts),
        cmocka_unit_test(test_fmt_truncates_to_cap),
        cmocka_unit_test(test_evidence_line_units_by_key),
        cmocka_unit_test(test_evidence_line_lists_nulls_apart),
        cmocka_unit_test(test_evidence_line_nested_maps),
        cmocka_unit_test(test_evidence_line_keeps_bad_json_as_written),
        cmocka_unit_test(test_evidence_line_names_pids_by_rank),
        cmocka_unit_test(test_evidence_num_reads_one_key),
        cmocka_unit_test(test_fmt_fixed_writes_printf_digits),
        cmocka_unit_test(test_fmt_fixed_matches_printf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
