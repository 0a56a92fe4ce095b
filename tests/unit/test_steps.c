/*
 * test_steps.c - the one step accounting (src/lib/steps.c): which step
 * records count, the wait cap, warm-up, ring totals and windows.  Times are
 * in ns in the records and s in the results; every expected number is
 * worked out in the comment beside it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "trainmon.h"

#define MS 1000000LL

static tm_inproc_step step(uint64_t n, int64_t start_ms, int64_t dur_ms, int64_t wait_ms)
{
    return (tm_inproc_step){.step = n,
                            .start_ns = start_ms * MS,
                            .end_ns = (start_ms + dur_ms) * MS,
                            .data_wait_ns = wait_ms * MS};
}

static void test_step_at_exit_or_without_duration_does_not_count(void **st)
{
    (void)st;
    double d = -1, w = -1;
    tm_inproc_step s = step(0, 0, 100, 10);
    s.flags = TM_STEP_ENDED_AT_EXIT;
    assert_false(tm_step_times(&s, &d, &w));
    assert_true(d == -1 && w == -1); /* outputs untouched */
    s = step(0, 50, 0, 0);
    assert_false(tm_step_times(&s, &d, &w));
    s = step(0, 0, 100, 10);
    s.flags = TM_STEP_ENDED_BY_STOP; /* end of an epoch is a complete step */
    assert_true(tm_step_times(&s, &d, &w));
    assert_true(fabs(d - 0.100) < 1e-12 && fabs(w - 0.010) < 1e-12);
}

static void test_wait_is_capped_at_the_step(void **st)
{
    (void)st;
    double d, w;
    tm_inproc_step s = step(3, 0, 100, 250); /* 250 ms of wait in a 100 ms step */
    assert_true(tm_step_times(&s, &d, &w));
    assert_true(fabs(w - 0.100) < 1e-12);
}

static void test_crafted_clocks_do_not_overflow(void **st)
{
    (void)st;
    double d, w;
    tm_inproc_step s = {.step = 0, .start_ns = INT64_MIN, .end_ns = INT64_MAX, .data_wait_ns = -5};
    assert_true(tm_step_times(&s, &d, &w));
    assert_true(d > 1.8e10 && w == 0); /* 2^64 ns = 1.8e10 s, a negative wait is none */
}

static void test_first_step_is_warmup_and_left_out_of_the_fraction(void **st)
{
    (void)st;
    tm_steptally t;
    tm_steptally_init(&t);
    /* warm-up: 1000 ms, 900 waiting; then 3 steps of 100 ms with 20 ms wait */
    assert_true(tm_steptally_add(&t, &(tm_inproc_step){0}) == false); /* no duration */
    tm_inproc_step a = step(0, 0, 1000, 900);
    assert_true(tm_steptally_add(&t, &a));
    assert_true(fabs(tm_steptally_wait_fraction(&t) - 0.9) < 1e-12); /* warm-up is all there is */
    for (int i = 1; i <= 3; i++) {
        tm_inproc_step s = step((uint64_t)i, 1000 + 100 * i, 100, 20);
        assert_true(tm_steptally_add(&t, &s));
    }
    assert_int_equal(t.steps, 4);
    assert_int_equal(t.warmup, 1);
    /* 60 ms of 300 ms */
    assert_true(fabs(tm_steptally_wait_fraction(&t) - 0.2) < 1e-12);
    assert_true(fabs(tm_steptally_step_mean(&t) - 0.1) < 1e-12);
    assert_true(fabs(tm_steptally_wait_mean(&t) - 0.02) < 1e-12);
}

static void test_empty_tally_is_unknown_not_zero(void **st)
{
    (void)st;
    tm_steptally t;
    tm_steptally_init(&t);
    assert_true(isnan(tm_steptally_wait_fraction(&t)));
    assert_true(isnan(tm_steptally_step_mean(&t)));
    assert_int_equal(tm_steptally_total(&t, true), 0);
}

static void test_ring_total_is_the_highest_step_number(void **st)
{
    (void)st;
    tm_steptally t;
    tm_steptally_init(&t);
    /* a ring kept only steps 470..479 of 480 */
    for (uint64_t i = 470; i < 480; i++) {
        tm_inproc_step s = step(i, (int64_t)i * 10, 10, 1);
        tm_steptally_add(&t, &s);
    }
    assert_int_equal(tm_steptally_total(&t, false), 10);
    assert_int_equal(tm_steptally_total(&t, true), 480);
}

static void test_merge_adds_ranks(void **st)
{
    (void)st;
    tm_steptally a, b, all;
    tm_steptally_init(&a);
    tm_steptally_init(&b);
    tm_steptally_init(&all);
    for (int i = 0; i < 3; i++) {
        tm_inproc_step s = step((uint64_t)i, i * 100, 100, 50); /* rank a: half waiting */
        tm_steptally_add(&a, &s);
        s = step((uint64_t)i, i * 100, 100, 0); /* rank b: none */
        tm_steptally_add(&b, &s);
    }
    tm_steptally_merge(&all, &a);
    tm_steptally_merge(&all, &b);
    assert_int_equal(all.steps, 6);
    /* after warm-up: 2 x 50 ms of 4 x 100 ms */
    assert_true(fabs(tm_steptally_wait_fraction(&all) - 0.25) < 1e-12);
}

/* Steps fed by a background thread (the step model's prefetcher): their
 * wait is the loop's, in the wait fraction, and they are no batch
 * preparation of the loop's own (prep_ns -1), counted apart after warm-up
 * and added across ranks. */
static void test_thread_fed_steps_are_counted_apart_not_as_preparation(void **st)
{
    (void)st;
    tm_steptally a, all;
    tm_steptally_init(&a);
    tm_steptally_init(&all);
    for (int i = 0; i < 4; i++) {
        tm_inproc_step s = step((uint64_t)i, i * 100, 100, 60); /* 60 ms on the queue */
        s.boundary = TM_STEP_BY_OPTIMIZER;
        s.batches = 1;
        s.prep_ns = s.prep_cpu_ns = -1;
        s.flags = TM_STEP_FED_BY_THREAD;
        tm_steptally_add(&a, &s);
    }
    assert_int_equal(a.steps, 4);
    assert_int_equal(a.fed_steps, 3); /* step 0 is warm-up */
    assert_int_equal(a.prep_steps, 0);
    assert_true(fabs(tm_steptally_wait_fraction(&a) - 0.6) < 1e-12); /* 3 x 60 / 3 x 100 */
    tm_steptally_merge(&all, &a);
    tm_steptally_merge(&all, &a);
    assert_int_equal(all.fed_steps, 6);
}

/* Where the loop's own preparation ran (prep_fwd_ns, prep_opt_ns: parts of
 * prep_ns), after warm-up (step 0's 40 ms left out): steps of 100 ms with
 * 60 ms of preparation; step 1 measured 50 ms of it after the forward,
 * step 2 did not measure that (-1), step 3 measured 0, step 4 a crafted 500
 * ms, counted as its 60 ms of wait.  Each measured step stands for the
 * steps since the one before it that measured: step 1 for 1, step 3 for 2
 * (steps 2 and 3), step 4 for 1.  prep_fwd_s = 1 x 50 + 2 x 0 + 1 x 60 =
 * 110 ms over prep_fwd_known_s = (1 + 2 + 1) x 60 = 240 ms; prep_opt_s =
 * 10 ms in steps 1-3 (step 4 none, -1).  Merged, they add. */
static void test_preparation_after_the_forward_is_summed_where_measured(void **st)
{
    (void)st;
    tm_steptally a, all;
    tm_steptally_init(&a);
    tm_steptally_init(&all);
    int64_t fwd[5] = {40, 50, -1, 0, 500};
    for (int i = 0; i < 5; i++) {
        tm_inproc_step s = step((uint64_t)i, i * 100, 100, 60);
        s.boundary = TM_STEP_BY_OPTIMIZER;
        s.batches = 0;
        s.prep_ns = 60 * MS;
        s.prep_cpu_ns = -1;
        s.prep_fwd_ns = fwd[i] >= 0 ? fwd[i] * MS : -1;
        s.prep_opt_ns = i == 4 ? -1 : 10 * MS;
        tm_steptally_add(&a, &s);
    }
    assert_int_equal(a.prep_steps, 4);                     /* step 0 is warm-up */
    assert_true(fabs(a.prep_s - 0.240) < 1e-12);           /* 4 x 60 ms */
    assert_true(fabs(a.prep_fwd_s - 0.110) < 1e-12);       /* 50 + 2 x 0 + 60 (500 capped) */
    assert_true(fabs(a.prep_fwd_known_s - 0.240) < 1e-12); /* (1 + 2 + 1) x 60 */
    assert_int_equal(a.prep_fwd_last, 4);
    assert_true(fabs(a.prep_opt_s - 0.030) < 1e-12); /* steps 1, 2, 3 */
    tm_steptally_merge(&all, &a);
    tm_steptally_merge(&all, &a);
    assert_true(fabs(all.prep_fwd_s - 0.220) < 1e-12 && fabs(all.prep_fwd_known_s - 0.480) < 1e-12);
    assert_true(fabs(all.prep_opt_s - 0.060) < 1e-12);
}

static void test_skipped_steps_are_counted_with_their_runs(void **st)
{
    (void)st;
    tm_steptally a, b, all;
    tm_steptally_init(&a);
    tm_steptally_init(&b);
    tm_steptally_init(&all);
    /* steps 0..9: 0 and 1 skipped (the scale backing off), 5..6 skipped,
     * then 8 and 9 skipped: the run at the end is 2, the longest 2 */
    for (int i = 0; i < 10; i++) {
        tm_inproc_step s = step((uint64_t)i, i * 100, 100, 0);
        s.boundary = TM_STEP_BY_OPTIMIZER;
        if (i < 2 || i == 5 || i == 6 || i >= 8)
            s.flags = TM_STEP_SKIPPED;
        tm_steptally_add(&a, &s);
    }
    assert_int_equal(a.steps, 10);        /* a skipped step is a step */
    assert_int_equal(a.skipped_steps, 6); /* warm-up's included: 0, 1, 5, 6, 8, 9 */
    assert_int_equal(a.skip_run_end, 2);
    assert_int_equal(a.skip_run_max, 2);
    assert_int_equal(a.skip_last, 10); /* step 9, + 1 */
    /* another rank: 3 skipped in a row, then one that was not */
    for (int i = 0; i < 4; i++) {
        tm_inproc_step s = step((uint64_t)i, i * 100, 100, 0);
        s.flags = i < 3 ? TM_STEP_SKIPPED : 0;
        tm_steptally_add(&b, &s);
    }
    assert_int_equal(b.skip_run_end, 0);
    assert_int_equal(b.skip_run_max, 3);
    tm_steptally_merge(&all, &a);
    tm_steptally_merge(&all, &b);
    assert_int_equal(all.skipped_steps, 9);
    assert_int_equal(all.skip_run_end, 2); /* a's: its steps ended last (1 s; b's 0.4 s) */
    assert_int_equal(all.skip_run_max, 3);
    assert_int_equal(all.skip_last, 10);
    /* the job resumed in the same run after a died skipping: a process
     * whose steps end later, none skipped, is the run's end */
    tm_steptally c, all2;
    tm_steptally_init(&c);
    tm_steptally_init(&all2);
    for (int i = 0; i < 3; i++) {
        tm_inproc_step s = step((uint64_t)(10 + i), 2000 + i * 100, 100, 0);
        tm_steptally_add(&c, &s);
    }
    tm_steptally_merge(&all2, &c); /* in either order */
    tm_steptally_merge(&all2, &a);
    assert_int_equal(all2.skip_run_end, 0);
    assert_int_equal(all2.skip_last, 0);
    assert_int_equal(all2.skip_run_max, 2);
    assert_int_equal(all2.skipped_steps, 6);
}

static void test_window_sums_the_last_steps(void **st)
{
    (void)st;
    static tm_stepwin w; /* 4 KiB: keep it off the test's stack */
    memset(&w, 0, sizeof w);
    double d, q;
    assert_int_equal(tm_stepwin_sum(&w, 10, &d, &q), 0);
    for (int i = 0; i < 300; i++)
        tm_stepwin_add(&w, 0.1, i < 290 ? 0.0 : 0.2); /* last 10 wait more than they last */
    assert_int_equal(tm_stepwin_sum(&w, 10, &d, &q), 10);
    assert_true(fabs(d - 1.0) < 1e-9 && fabs(q - 1.0) < 1e-9); /* capped: 10 x 0.1 */
    assert_int_equal(tm_stepwin_sum(&w, 1000, &d, &q), TM_STEPWIN_MAX);
}

/* Eval batches (the step model's phase eval) are no training steps: out
 * of the count, the fraction and the step total, counted apart. */
static void test_eval_batches_are_counted_apart(void **st)
{
    (void)st;
    tm_steptally t;
    tm_steptally_init(&t);
    tm_inproc_step s = step(0, 0, 100, 10);
    s.phase = TM_STEP_TRAIN;
    assert_true(tm_steptally_add(&t, &s));
    s = step(1, 100, 100, 10);
    assert_true(tm_steptally_add(&t, &s));
    /* three eval batches of 300 ms, all waiting, numbered as training step 2 */
    for (int i = 0; i < 3; i++) {
        tm_inproc_step e = step(2, 200 + 300 * i, 300, 300);
        e.phase = TM_STEP_EVAL;
        assert_false(tm_step_times(&e, NULL, NULL));
        assert_false(tm_steptally_add(&t, &e));
    }
    assert_int_equal(t.steps, 2);
    assert_int_equal(t.eval_steps, 3);
    assert_true(fabs(t.eval_s - 0.9) < 1e-9);
    assert_int_equal(tm_steptally_total(&t, true), 2); /* not 3 from the eval's number */
    /* the judged step (the second: the first is warm-up) waits 10 of 100 ms */
    assert_true(fabs(tm_steptally_wait_fraction(&t) - 0.1) < 1e-12);
}

static void test_prep_cpu_schedule_thins_out_and_weights_each_read_step(void **st)
{
    (void)st;
    /* read steps: 1 and every 16th to 64, every 64th to 1024, every 256th after */
    static const uint64_t due[] = {1, 17, 33, 49, 65, 129, 961, 1025, 1281, 1537};
    static const uint64_t not_due[] = {0, 2, 16, 64, 66, 81, 1024, 1089, 1280};
    for (size_t i = 0; i < sizeof due / sizeof due[0]; i++)
        assert_true(tm_prep_cpu_due(due[i]));
    for (size_t i = 0; i < sizeof not_due / sizeof not_due[0]; i++)
        assert_false(tm_prep_cpu_due(not_due[i]));
    unsigned n40 = 0, n1000 = 0;
    for (uint64_t k = 0; k < 1000; k++) {
        n40 += k < 40 && tm_prep_cpu_due(k);
        n1000 += tm_prep_cpu_due(k);
    }
    assert_int_equal(n40, 3);    /* steps 1, 17, 33 */
    assert_int_equal(n1000, 19); /* 1, 17, 33, 49, then 65 + 64 k up to 961: 15 */

    /* A loop whose preparation is all CPU in its first steps and all I/O
     * later: read step 17 (100 ms prep, 100 ms CPU, weight 16: steps 2-17)
     * and read step 129 (100 ms prep, 0 CPU, weight 64: steps 66-129).  The share is
     * (16 * 0.1) / (16 * 0.1 + 64 * 0.1) = 0.2, what the 80 steps they
     * stand for had; unweighted it would say 0.5. */
    tm_steptally t;
    tm_steptally_init(&t);
    tm_inproc_step w0 = step(0, 0, 100, 100); /* warm-up */
    w0.boundary = TM_STEP_BY_OPTIMIZER;
    w0.prep_ns = 100 * MS;
    w0.prep_cpu_ns = -1;
    tm_steptally_add(&t, &w0);
    tm_inproc_step a = w0, b = w0;
    a.step = 17, a.start_ns = 1000 * MS, a.end_ns = 1200 * MS, a.prep_cpu_ns = 100 * MS;
    b.step = 129, b.start_ns = 2000 * MS, b.end_ns = 2200 * MS, b.prep_cpu_ns = 0;
    tm_steptally_add(&t, &a);
    tm_steptally_add(&t, &b);
    assert_true(fabs(t.prep_cpu_s / t.prep_cpu_known_s - 0.2) < 1e-12);
    assert_int_equal(t.prep_steps, 2); /* steps are counted once each */
    assert_true(fabs(t.prep_s - 0.2) < 1e-12);

    /* Each read stands for the interval that ends at it: step 65 (after
     * 49) for 16 steps, 129 for 64, 1281 for 256, and the first, step 1,
     * for 16.  A 70-step job's reads 1, 17, 33, 49, 65 weigh the same, so
     * its last read (of 5) is a fifth of the share, not half of it. */
    assert_true(tm_prep_cpu_weight(1) == 16 && tm_prep_cpu_weight(65) == 16);
    assert_true(tm_prep_cpu_weight(129) == 64 && tm_prep_cpu_weight(1025) == 64);
    assert_true(tm_prep_cpu_weight(1281) == 256);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_at_exit_or_without_duration_does_not_count),
        cmocka_unit_test(test_wait_is_capped_at_the_step),
        cmocka_unit_test(test_crafted_clocks_do_not_overflow),
        cmocka_unit_test(test_first_step_is_warmup_and_left_out_of_the_fraction),
        cmocka_unit_test(test_empty_tally_is_unknown_not_zero),
        cmocka_unit_test(test_ring_total_is_the_highest_step_number),
        cmocka_unit_test(test_merge_adds_ranks),
        cmocka_unit_test(test_thread_fed_steps_are_counted_apart_not_as_preparation),
        cmocka_unit_test(test_skipped_steps_are_counted_with_their_runs),
        cmocka_unit_test(test_window_sums_the_last_steps),
        cmocka_unit_test(test_eval_batches_are_counted_apart),
        cmocka_unit_test(test_prep_cpu_schedule_thins_out_and_weights_each_read_step),
        cmocka_unit_test(test_preparation_after_the_forward_is_summed_where_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
