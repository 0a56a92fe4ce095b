/*
 * test_fastclock.c - the counter-derived clock (src/lib/fastclock.c): the
 * anchors' arithmetic on hand-made pairs of a 2.5 GHz counter (0.4 ns a
 * tick, every number worked out in its comment), then the real counter of
 * this machine against CLOCK_MONOTONIC where the kernel keeps that clock
 * from it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "fastclock.h"
#include "trainmon.h"

#define T0 1000000ULL                    /* the first pair's counter */
#define N0 5000000000LL                  /* and its clock: 5 s */
#define GHZ25(ns) ((uint64_t)(ns)*5 / 2) /* ticks of a 2.5 GHz counter in ns */

/* an exact pair: both counter reads at tsc */
static int64_t upd(tm_fastclock *c, uint64_t tsc, int64_t ns)
{
    return tm_fastclock_update(c, tsc, ns, tsc);
}

/* a pair whose counter reads are w ticks apart around tsc */
static int64_t upd_wide(tm_fastclock *c, uint64_t tsc, int64_t ns, uint64_t w)
{
    return tm_fastclock_update(c, tsc - w / 2, ns, tsc + w / 2);
}

/* a clock past init on a usable counter: the first pair (T0, N0) */
static tm_fastclock calib(void)
{
    tm_fastclock c;
    memset(&c, 0, sizeof c);
    c.state = TM_FASTCLOCK_CALIB;
    c.tsc0 = c.base_tsc = c.mid_tsc = T0;
    c.ns0 = c.base_ns = c.mid_ns = N0;
    return c;
}

/* ...and 200 ms later, calibrated */
static tm_fastclock on(void)
{
    tm_fastclock c = calib();
    upd(&c, T0 + GHZ25(200000000), N0 + 200000000);
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    return c;
}

static void test_no_rate_before_the_baseline_is_200_ms_old(void **st)
{
    (void)st;
    tm_fastclock c = calib();
    /* 10 ms: 25,000,000 ticks; a baseline that young is not used */
    assert_int_equal(upd(&c, T0 + 25000000, N0 + 10000000), N0 + 10000000);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
    assert_int_equal(c.mult, 0);
    assert_int_equal(c.anchors, 1);
    /* the anchor moved, the baseline did not */
    assert_int_equal(c.tsc0, T0 + 25000000);
    assert_int_equal(c.base_tsc, T0);
}

static void test_the_rate_is_ns_per_tick_over_the_baseline(void **st)
{
    (void)st;
    tm_fastclock c = calib();
    /* 100 ms = 250,000,000 ticks: too young */
    upd(&c, T0 + 250000000, N0 + 100000000);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
    /* 200 ms = 500,000,000 ticks: 0.4 ns a tick, 0.4 * 2^32 = 1717986918.4
     * in 32.32 (truncated) */
    upd(&c, T0 + 500000000, N0 + 200000000);
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    assert_int_equal(c.mult, 1717986918ULL);
    /* the span: 1 s / 0.4 ns = 2,500,000,000 ticks */
    assert_true(c.span_ticks >= 2499999999ULL && c.span_ticks <= 2500000000ULL);
    /* a step's end anchors 10 ms on: 25,000,000 ticks */
    assert_true(c.step_ticks >= 24999999ULL && c.step_ticks <= 25000000ULL);
    /* 2500 ticks: 2500 * 1717986918 / 2^32 = 4294967295000 / 4294967296 =
     * 999.9999998 -> 999 ns (the conversion truncates: under 1 ns) */
    assert_int_equal(tm_fastclock_conv(&c, 2500), 999);
    /* 1 s of ticks: 2.5e9 * 1717986918 / 2^32 = 999,999,999.77 -> 999,999,999 */
    assert_int_equal(tm_fastclock_conv(&c, 2500000000ULL), 999999999);
}

static void test_an_anchor_within_the_tolerance_keeps_it_on(void **st)
{
    (void)st;
    tm_fastclock c = on();
    uint64_t t = c.tsc0 + GHZ25(100000000); /* 100 ms of ticks later */
    /* the tolerance: 10 us + 20 ppm of 100 ms (2 us) = 12 us (pair_ns 0
     * here: exact pairs); 11 us off */
    int64_t n = c.ns0 + 100000000 + 11000;
    assert_int_equal(upd(&c, t, n), n);
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    assert_int_equal(c.tsc0, t);
    assert_int_equal(c.ns0, n);
}

static void test_an_anchor_off_by_more_calibrates_again(void **st)
{
    (void)st;
    tm_fastclock c = on();
    uint64_t t = c.tsc0 + GHZ25(100000000);
    /* 13 us off: more than the 12 us allowed; a new baseline from here */
    int64_t n = c.ns0 + 100000000 + 13000;
    assert_int_equal(upd(&c, t, n), n);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
    assert_int_equal(c.recalibs, 1);
    assert_int_equal(c.base_tsc, t);
    assert_int_equal(c.base_ns, n);
    /* 200 ms later at 0.5 ns a tick (the kernel's rate moved: 400,000,000
     * ticks): on again at the new rate, 0.5 * 2^32 = 2147483648 */
    upd(&c, t + 400000000, n + 200000000);
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    assert_int_equal(c.mult, 2147483648ULL);
}

static void test_disagreeing_8_times_turns_it_off_for_good(void **st)
{
    (void)st;
    tm_fastclock c = on();
    /* each calibration ends 100 ms after it was on in a 20 us disagreement */
    for (unsigned i = 0; i < TM_FASTCLOCK_RECALIB_MAX; i++) {
        if (c.state == TM_FASTCLOCK_CALIB)
            upd(&c, c.tsc0 + GHZ25(200000000), c.ns0 + 200000000);
        assert_int_equal(c.state, TM_FASTCLOCK_ON);
        upd(&c, c.tsc0 + GHZ25(100000000), c.ns0 + 100000000 + 20000);
    }
    assert_int_equal(c.state, TM_FASTCLOCK_OFF);
    assert_string_equal(c.off_why, "the time-stamp counter keeps disagreeing with CLOCK_MONOTONIC");
    /* later pairs that agree change nothing */
    upd(&c, c.tsc0 + GHZ25(1000000), c.ns0 + 1000000);
    assert_int_equal(c.state, TM_FASTCLOCK_OFF);
}

static void test_a_counter_that_goes_back_turns_it_off(void **st)
{
    (void)st;
    tm_fastclock c = on();
    upd(&c, c.tsc0 - 1, c.ns0 + 1000);
    assert_int_equal(c.state, TM_FASTCLOCK_OFF);
    assert_string_equal(c.off_why, "the time-stamp counter went back");
    c = calib(); /* also while calibrating */
    upd(&c, T0 - 5, N0 + 1000);
    assert_int_equal(c.state, TM_FASTCLOCK_OFF);
}

static void test_a_pair_read_too_far_apart_is_not_used(void **st)
{
    (void)st;
    tm_fastclock c = calib();
    /* while calibrating: counter reads 5000 ticks apart (> 4096): the
     * clock's reading is returned, nothing moves */
    assert_int_equal(tm_fastclock_update(&c, T0 + 100000, N0 + 200000000, T0 + 105000),
                     N0 + 200000000);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
    assert_int_equal(c.tsc0, T0);
    assert_int_equal(c.bad_pairs, 1);
    /* a close pair (4000 ticks apart): its midpoint is the anchor, and
     * 200 ms = 500,000,000 ticks from the baseline to it: 0.4 ns a tick */
    tm_fastclock_update(&c, T0 + 499998000, N0 + 200000000, T0 + 500002000);
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    assert_int_equal(c.tsc0, T0 + 500000000);
    assert_int_equal(c.mult, 1717986918ULL);
    /* on: 1 us is 2500 ticks; reads 2600 apart are not a pair */
    assert_true(c.pair_ticks >= 2499 && c.pair_ticks <= 2500);
    tm_fastclock_update(&c, c.tsc0 + 1000, c.ns0 + 400, c.tsc0 + 3600);
    assert_int_equal(c.bad_pairs, 2);
    assert_int_equal(c.tsc0, T0 + 500000000);
}

static void test_pairs_never_close_while_calibrating_turn_it_off(void **st)
{
    (void)st;
    tm_fastclock c = calib();
    /* 63 pairs of reads 10,000 ticks apart: still calibrating; the 64th: off */
    for (unsigned i = 1; i < TM_FASTCLOCK_CALIB_BAD; i++)
        upd_wide(&c, T0 + i * 100000, N0 + (int64_t)i * 40000, 10000);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
    upd_wide(&c, T0 + 9000000, N0 + 3600000, 10000);
    assert_int_equal(c.state, TM_FASTCLOCK_OFF);
    assert_string_equal(c.off_why, "counter and clock reads are never close together");
}

static void test_a_rate_out_of_range_turns_it_off(void **st)
{
    (void)st;
    tm_fastclock c = calib();
    /* 200 ms in 5 ticks: 40 ms a tick, above the 10 ns allowed */
    upd(&c, T0 + 5, N0 + 200000000);
    assert_int_equal(c.state, TM_FASTCLOCK_OFF);
    assert_string_equal(c.off_why, "the time-stamp counter's rate is out of range");
}

static void test_the_baseline_moves_every_30_s(void **st)
{
    (void)st;
    tm_fastclock c = on();
    /* 30 s after the first pair: the baseline becomes the first pair (it
     * was), the next one this pair */
    uint64_t t30 = T0 + GHZ25(30000000000LL);
    upd(&c, t30, N0 + 30000000000LL);
    assert_int_equal(c.base_tsc, T0);
    assert_int_equal(c.mid_tsc, t30);
    /* 45 s: no move (the next one is 15 s old) */
    upd(&c, T0 + GHZ25(45000000000LL), N0 + 45000000000LL);
    assert_int_equal(c.base_tsc, T0);
    /* 60 s: the baseline is the 30 s pair, 30 s old */
    uint64_t t60 = T0 + GHZ25(60000000000LL);
    upd(&c, t60, N0 + 60000000000LL);
    assert_int_equal(c.base_tsc, t30);
    assert_int_equal(c.base_ns, N0 + 30000000000LL);
    assert_int_equal(c.mid_tsc, t60);
    /* the counter's rate jumps: 0.5 ns a tick from 60 s (2 GHz), and the
     * next anchor at 90 s is 30 s = 60e9 ticks on.  Converted at 0.4 ns:
     * 24 s, not 30: 6 s off, against the 10 us + 20 ppm of 30 s (610 us)
     * allowed: calibrated again from that anchor */
    upd(&c, t60 + 60000000000ULL, N0 + 90000000000LL);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
    assert_int_equal(c.recalibs, 1);
}

static void test_off_reads_are_the_clock(void **st)
{
    (void)st;
    tm_fastclock c;
    memset(&c, 0, sizeof c);
    int64_t a = tm_now_mono_ns();
    int64_t f = tm_fastclock_now(&c);
    int64_t b = tm_now_mono_ns();
    assert_true(a <= f && f <= b);
    assert_int_equal(c.anchors, 0); /* no pair read */
}

/* A read never returns a time before the latest one returned: here the
 * latest is far in the future, the next read turns the clock off (its
 * hand-made anchor is nowhere near the real counter) and still returns it. */
static void test_no_read_goes_back(void **st)
{
    (void)st;
    tm_fastclock c = on();
    c.last = INT64_MAX / 2;
    assert_int_equal(tm_fastclock_now(&c), INT64_MAX / 2);
    assert_int_equal(tm_fastclock_anchor(&c), INT64_MAX / 2);
    assert_int_equal(c.last, INT64_MAX / 2);
    /* an earlier latest: the clock's own reading */
    c.last = 0;
    int64_t a = tm_now_mono_ns();
    int64_t f = tm_fastclock_now(&c);
    assert_true(f >= a && f <= tm_now_mono_ns());
}

/* TRAINMON_FASTCLOCK_PAIR_NS below 1 us narrows the bound on a pair
 * (4096 ticks a microsecond before the rate is known: 500 ns -> 2048) and
 * keeps the counter in use (it once rounded the bound to 0 ticks). */
static void test_a_pair_bound_below_1_us(void **st)
{
    (void)st;
    setenv("TRAINMON_FASTCLOCK_PAIR_NS", "500", 1);
    tm_fastclock c;
    tm_fastclock_init(&c);
    unsetenv("TRAINMON_FASTCLOCK_PAIR_NS");
    if (c.state == TM_FASTCLOCK_OFF &&
        strcmp(c.off_why, "no close pair of counter and clock reads") != 0) {
        printf("  (skipped: %s)\n", c.off_why);
        return;
    }
    assert_int_equal(c.pair_ns, 500);
    assert_int_equal(c.pair_calib, 2048);
    assert_int_equal(c.state, TM_FASTCLOCK_CALIB);
}

/* The real counter: where the kernel keeps CLOCK_MONOTONIC from it, after
 * 200 ms the reads are converted, and each lies between the clock read
 * just before and just after it (within 2 us); a read 0.6 s after an
 * anchor, the rate's error at its largest in a span, within 10 us; and a
 * converted read never goes back either. */
static void test_on_this_machine_the_counter_agrees_with_the_clock(void **st)
{
    (void)st;
    tm_fastclock c;
    tm_fastclock_init(&c);
    if (c.state == TM_FASTCLOCK_OFF) {
        printf("  (the counter is not used here: %s; only the clock is checked)\n", c.off_why);
        test_off_reads_are_the_clock(st);
        return;
    }
    struct timespec nap = {0, 3000000}; /* 3 ms */
    int converted = 0;
    int64_t worst = 0; /* the furthest outside [a, b] */
    for (int i = 0; i < 150; i++) {
        nanosleep(&nap, NULL);
        int64_t a = tm_now_mono_ns();
        int64_t f = tm_fastclock_now(&c);
        int64_t b = tm_now_mono_ns();
        /* within 2 us: the rate over a baseline of close pairs is good to
         * ~1e-7 (40 ns over 200 ms), the anchor's pair to ~50 ns */
        assert_true(f >= a - 2000 && f <= b + 2000);
        worst = f < a   ? (a - f > worst ? a - f : worst)
                : f > b ? (f - b > worst ? f - b : worst)
                        : worst;
        converted += c.state == TM_FASTCLOCK_ON;
        /* reads and anchors in a row, as a step's: none before the last */
        int64_t p = f;
        for (int j = 0; j < 20; j++) {
            int64_t r = j % 5 == 4 ? tm_fastclock_anchor(&c) : tm_fastclock_now(&c);
            assert_true(r >= p);
            p = r;
        }
    }
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    assert_true(converted >= 50); /* on from 200 ms of the 450 */
    /* 0.6 s after an anchor: converted (no pair read), within 10 us (20 ppm
     * of 0.6 s would be 12 us; a rate over ~0.5 s of 60 ns pairs is good to
     * ~0.2 ppm) */
    tm_fastclock_anchor(&c);
    struct timespec long_nap = {0, 600000000};
    nanosleep(&long_nap, NULL);
    uint64_t pairs = c.anchors;
    int64_t a = tm_now_mono_ns();
    int64_t f = tm_fastclock_now(&c);
    int64_t b = tm_now_mono_ns();
    assert_int_equal(c.anchors, pairs);
    printf("  (0.6 s after an anchor: %lld ns after the clock's read before it, %lld ns before "
           "the one after)\n",
           (long long)(f - a), (long long)(b - f));
    assert_true(f >= a - 10000 && f <= b + 10000);
    /* a step's end right after an anchor is a counter read; one 12 ms
     * after it is an anchor (TM_FASTCLOCK_STEP_NS) */
    a = tm_fastclock_anchor(&c);
    pairs = c.anchors;
    f = tm_fastclock_step_end(&c);
    b = tm_now_mono_ns();
    if (b - a < TM_FASTCLOCK_STEP_NS - 1000000) /* not preempted for 9 ms in between */
        assert_int_equal(c.anchors, pairs);
    assert_true(f >= a && f <= b + 2000);
    struct timespec step_nap = {0, 12000000};
    nanosleep(&step_nap, NULL);
    pairs = c.anchors;
    a = tm_now_mono_ns();
    f = tm_fastclock_step_end(&c);
    b = tm_now_mono_ns();
    assert_int_equal(c.anchors, pairs + 1); /* a pair read */
    assert_true(f >= a && f <= b);
    /* a converted read returns the latest time returned if that is later */
    pairs = c.anchors;
    c.last = f + 1000000000;
    assert_int_equal(tm_fastclock_now(&c), f + 1000000000);
    assert_int_equal(c.anchors, pairs);
    assert_int_equal(c.state, TM_FASTCLOCK_ON);
    printf("  (%.7f ns a tick; %llu pairs read for 150 reads, %llu not used; worst %lld ns "
           "outside the clock's reads)\n",
           (double)c.mult / 4294967296.0, (unsigned long long)c.anchors,
           (unsigned long long)c.bad_pairs, (long long)worst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_rate_before_the_baseline_is_200_ms_old),
        cmocka_unit_test(test_the_rate_is_ns_per_tick_over_the_baseline),
        cmocka_unit_test(test_an_anchor_within_the_tolerance_keeps_it_on),
        cmocka_unit_test(test_an_anchor_off_by_more_calibrates_again),
        cmocka_unit_test(test_disagreeing_8_times_turns_it_off_for_good),
        cmocka_unit_test(test_a_counter_that_goes_back_turns_it_off),
        cmocka_unit_test(test_a_pair_read_too_far_apart_is_not_used),
        cmocka_unit_test(test_pairs_never_close_while_calibrating_turn_it_off),
        cmocka_unit_test(test_a_rate_out_of_range_turns_it_off),
        cmocka_unit_test(test_the_baseline_moves_every_30_s),
        cmocka_unit_test(test_off_reads_are_the_clock),
        cmocka_unit_test(test_no_read_goes_back),
        cmocka_unit_test(test_a_pair_bound_below_1_us),
        cmocka_unit_test(test_on_this_machine_the_counter_agrees_with_the_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
