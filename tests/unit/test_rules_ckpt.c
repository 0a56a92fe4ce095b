/*
 * test_rules_ckpt.c - checkpoint.blocking (src/lib/rules_ckpt.c) and the
 * checkpoint summary it reads (src/lib/runsum_ckpt.c): torch.save calls on
 * the training thread, from the agent's checkpoint.save events, against
 * the loop's time (its steps, eval runs and those saves).  Every number
 * below is worked out by hand in its comment.
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

#include "analysis.h"
#include "trainmon.h"

#define FX_NAME "test_rules_ckpt"
#include "fixture.h"

/* One checkpoint.save event as the agent writes it (cpu_s and bytes < 0:
 * null, unknown). */
static void put_save(tm_rec *w, double t, double dur, double cpu, double bytes, unsigned step,
                     bool blocking)
{
    char js[256], c[32] = "null", b[32] = "null";
    if (cpu >= 0)
        snprintf(c, sizeof c, "%.6f", cpu);
    if (bytes >= 0)
        snprintf(b, sizeof b, "%.0f", bytes);
    snprintf(js, sizeof js,
             "{\"dur_s\":%.6f,\"cpu_s\":%s,\"bytes\":%s,\"step\":%u,\"blocking\":%s,\"ok\":true}",
             dur, c, b, step, blocking ? "true" : "false");
    assert_int_equal(tm_rec_event(w, at(t), "checkpoint.save", js), 0);
}

/* One checkpoint.save event with the saver (via) and where it wrote (to);
 * bytes as the JSON says it ("null": unknown). */
static void put_save_via(tm_rec *w, double t, double dur, double cpu, const char *bytes,
                         unsigned step, bool blocking, const char *via, const char *to)
{
    char js[320];
    snprintf(js, sizeof js,
             "{\"dur_s\":%.6f,\"cpu_s\":%.6f,\"bytes\":%s,\"step\":%u,\"blocking\":%s,"
             "\"ok\":true,\"via\":\"%s\",\"to\":\"%s\"}",
             dur, cpu, bytes, step, blocking ? "true" : "false", via, to);
    assert_int_equal(tm_rec_event(w, at(t), "checkpoint.save", js), 0);
}

/* n steps of 10/n s (1 ms of data wait each) from 0 to 10 s and a save
 * ending at 1, 2, ... 10 s (inside the loop: each begins before its last
 * step ends), numbered 10, 20, ... 100: dur s each, cpu of it on a CPU,
 * bytes written. */
static void put_rank_of(const char *file, int rank, size_t n, double dur, double cpu, double bytes,
                        bool blocking)
{
    char role[16];
    snprintf(role, sizeof role, "rank%d", rank);
    tm_rec *r = open_rec(file, role, rank);
    put_steps(r, n, 0, 10.0 / (double)n, 0.001);
    for (unsigned k = 1; k <= 10; k++)
        put_save(r, 1.0 * k, dur, cpu, bytes, 10 * k, blocking);
    tm_rec_close(&r);
}

static void put_rank(const char *file, int rank, double dur, double cpu, double bytes,
                     bool blocking)
{
    put_rank_of(file, rank, 100, dur, cpu, bytes, blocking);
}

/* 10 saves of 0.2 s: 2.0 s of a loop of 10.0 s of steps + 2.0 s = 12.0 s:
 * 16.7%, medium (5% <= share < 20%).  Every 10 steps; under 5% needs
 * m >= 2.0 x 0.95 / (0.05 x 10.0) = 3.8: every 40 steps (0.5 / 10.5 =
 * 4.8%; every 30 would be 0.667 / 10.667 = 6.25%).  On a CPU 0.05 of
 * 0.2 s = 25% < 50%: it waited for the storage, writing 400 MB in 0.2 s =
 * 2 GB/s.  Young: sqrt(2 x 0.2 x 86400) = 185.9 s, "3 min", at 10.0 s /
 * 100 steps = 0.1 s a step: 1859 steps. */
static void test_saves_taking_a_sixth_of_the_loop_are_medium_with_an_interval_that_fits(void **st)
{
    (void)st;
    put_rank("rank0.tmr", 0, 0.2, 0.05, 400e6, true);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_int_equal(f->confidence, TM_CONF_HIGH);
    assert_true(ev_num(f, "checkpoints") == 10);
    assert_true(fabs(ev_num(f, "save_time_s") - 2.0) < 1e-6);
    assert_true(fabs(ev_num(f, "loop_time_s") - 12.0) < 1e-6);
    assert_true(fabs(ev_num(f, "save_share") - 2.0 / 12.0) < 1e-6);
    assert_true(fabs(ev_num(f, "save_median_s") - 0.2) < 1e-9);
    assert_true(ev_num(f, "save_bytes_median") == 400e6);
    assert_true(fabs(ev_num(f, "save_bytes_per_second") - 2e9) < 1);
    assert_true(fabs(ev_num(f, "save_cpu_share") - 0.25) < 1e-6);
    assert_true(ev_num(f, "steps_between_checkpoints") == 10);
    assert_true(fabs(ev_num(f, "young_interval_s") - sqrt(34560.0)) < 1e-3); /* %.6g */
    assert_non_null(strstr(f->title, "10 checkpoints saved on the training thread took 17%"));
    assert_non_null(strstr(f->title, "every 10 steps"));
    assert_non_null(strstr(f->advice, "A checkpoint every 10 steps costs 17% of the time; every "
                                      "40 steps would cost at most 5%."));
    assert_non_null(strstr(f->advice, "about 3 min for a failure a day (1859 steps)"));
    assert_non_null(strstr(f->advice, "on a CPU only 25% of their time, at 2.0 GB/s"));
    assert_non_null(strstr(f->advice, "write to a local disk"));
    assert_null(strstr(f->advice, "GPU")); /* no GPU recorded: no GPU words */
    assert_non_null(strstr(f->advice, "async_save"));
    /* the saves are no step time: the input verdict is the steps' own */
    assert_non_null(tm_analysis_find(a, "input.ok"));
    assert_int_equal(a->sum.ckpt_saves, 10);
    done(&run, &a);
}

/* 10 saves of 0.25 s: 2.5 / 12.5 = 20%: high.  On a CPU 0.225 of 0.25 s =
 * 90%: serializing, not the disk. */
static void test_saves_taking_a_fifth_are_high_and_cpu_bound_ones_are_serializing(void **st)
{
    (void)st;
    put_rank("rank0.tmr", 0, 0.25, 0.225, 400e6, true);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_true(fabs(ev_num(f, "save_cpu_share") - 0.9) < 1e-6);
    assert_non_null(strstr(f->advice, "on a CPU 90% of their time"));
    assert_non_null(strstr(f->advice, "serializing the state"));
    assert_null(strstr(f->advice, "write to a local disk"));
    done(&run, &a);
}

/* 10 saves of 0.04 s: 0.4 / 10.4 = 3.8% < 5%: nothing to fix, but the
 * summary has them. */
static void test_saves_under_a_twentieth_of_the_loop_are_no_finding(void **st)
{
    (void)st;
    put_rank("rank0.tmr", 0, 0.04, 0.03, 1e6, true);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "checkpoint.blocking"));
    assert_int_equal(a->sum.ckpt_saves, 10);
    assert_true(fabs(a->sum.ckpt_s - 0.4) < 1e-6);
    done(&run, &a);
}

/* A save of 5 s before the first step (the initial weights), one inside
 * the loop, one of 5 s after the last step (the final model): only the
 * one inside is the loop's, and one checkpoint is no habit of it: no
 * finding; the two outside are counted apart. */
static void test_saves_before_and_after_the_loop_are_not_the_loops(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_save(r, 0.0, 5.0, 4.0, 1e9, 0, true); /* began at -5 s */
    put_steps(r, 100, 0, 0.1, 0.001);
    put_save(r, 5.0, 0.5, 0.4, 1e9, 50, true);
    put_save(r, 15.0, 5.0, 4.0, 1e9, 100, true); /* began at 10 s: the last step's end */
    tm_rec_close(&r);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "checkpoint.blocking"));
    assert_int_equal(a->sum.ckpt_saves, 1);
    assert_int_equal(a->sum.ckpt_outside, 2);
    assert_true(fabs(a->sum.ckpt_s - 0.5) < 1e-9);
    assert_true(isnan(a->sum.ckpt_every_steps)); /* one checkpoint: no interval */
    done(&run, &a);
}

/* Saves in a background thread (async checkpointing) do not stop the
 * loop: counted apart, no finding, however long. */
static void test_background_saves_are_counted_apart_and_no_finding(void **st)
{
    (void)st;
    put_rank("rank0.tmr", 0, 0.5, 0.4, 400e6, false);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "checkpoint.blocking"));
    assert_int_equal(a->sum.ckpt_saves, 0);
    assert_int_equal(a->sum.ckpt_bg_saves, 10);
    assert_true(fabs(a->sum.ckpt_bg_s - 5.0) < 1e-6);
    done(&run, &a);
}

/* The Hugging Face Trainer saves a checkpoint in several calls (model,
 * optimizer, scheduler, RNG state) at one step: 5 checkpoints every 20
 * steps, each 0.3 s (optimizer, 300 MB) + 0.1 s (model, 100 MB) + 0.01 s
 * (RNG, bytes unknown): 5 checkpoints of 0.41 s, 2.05 s of 10 + 2.05 =
 * 17.0%; a checkpoint's bytes are unknown when one of its calls' are, so
 * the median is of none: unknown; the rate is of the calls with bytes:
 * 400 MB per 0.4 s = 1 GB/s. */
static void test_calls_at_one_step_are_one_checkpoint(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r, 100, 0, 0.1, 0.001);
    for (unsigned k = 1; k <= 5; k++) {
        put_save(r, 2.0 * k - 1.0, 0.3, 0.2, 300e6, 20 * k, true);
        put_save(r, 2.0 * k - 0.7, 0.1, 0.05, 100e6, 20 * k, true);
        put_save(r, 2.0 * k - 0.6, 0.01, 0.01, -1, 20 * k, true);
    }
    tm_rec_close(&r);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_true(ev_num(f, "checkpoints") == 5);
    assert_true(fabs(ev_num(f, "save_median_s") - 0.41) < 1e-6);
    assert_true(ev_num(f, "steps_between_checkpoints") == 20);
    assert_true(isnan(ev_num(f, "save_bytes_median")));
    assert_true(fabs(ev_num(f, "save_bytes_per_second") - 1e9) < 1);
    done(&run, &a);
}

/* DDP: rank 0 saves 0.3 s every 10 steps, rank 1 0.01 s: rank 0's saves
 * are the job's (the others wait for it): 3.0 / 13.0 = 23%, 2 processes
 * saving.  Rank 1 made 200 steps of 0.05 s: Young's interval in steps is
 * rank 0's, sqrt(2 x 0.3 x 86400) = 227.7 s at 0.1 s a step: 2277 steps
 * (at the most steps of any process, 200 in the same 10 s, it would be
 * 4554). */
static void test_the_process_that_blocked_longest_is_the_one_judged(void **st)
{
    (void)st;
    put_rank_of("rank1.tmr", 1, 200, 0.01, 0.01, 1e6, true);
    put_rank("rank0.tmr", 0, 0.3, 0.2, 400e6, true);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_true(ev_num(f, "processes_saving") == 2);
    assert_true(fabs(ev_num(f, "save_time_s") - 3.0) < 1e-6);
    assert_true(fabs(ev_num(f, "save_share") - 3.0 / 13.0) < 1e-6);
    assert_true(fabs(ev_num(f, "step_time_mean_s") - 0.1) < 1e-9);
    assert_non_null(strstr(f->advice, "(2277 steps)"));
    done(&run, &a);
}

/* Saves into a buffer in memory (Lightning's torch.save into an
 * io.BytesIO, written out afterwards): their CPU share says nothing of
 * the storage, and the advice says the write is not timed. */
static void test_saves_to_memory_say_the_write_is_not_timed(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r, 100, 0, 0.1, 0.001);
    for (unsigned k = 1; k <= 10; k++)
        put_save_via(r, 1.0 * k, 0.2, 0.05, "1000", 10 * k, true, "torch.save", "memory");
    tm_rec_close(&r);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_true(ev_num(f, "save_calls_to_memory") == 10 && ev_num(f, "save_calls") == 10);
    assert_non_null(strstr(f->advice, "into a buffer in memory"));
    /* a CPU share of 25% would otherwise blame the storage */
    assert_null(strstr(f->advice, "write to a local disk"));
    done(&run, &a);
}

/* torch.distributed.checkpoint.async_save: each call blocks while it
 * stages the state (0.2 s of 12.0 s: 17%, as the first test) and its
 * write is a background save of the thread (not the loop's).  The advice
 * is not "use async_save" but its staging: an async_stager with options
 * that work without a GPU, and the background writes are counted apart;
 * the CPU share of staging says nothing of storage. */
static void test_async_save_staging_is_told_as_staging(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r, 100, 0, 0.1, 0.001);
    for (unsigned k = 1; k <= 10; k++) {
        put_save_via(r, 1.0 * k, 0.2, 0.18, "null", 10 * k, true,
                     "torch.distributed.checkpoint.async_save", "file");
        put_save_via(r, 1.0 * k + 0.5, 0.5, 0.3, "400000000", 10 * k, false,
                     "torch.distributed.checkpoint", "file");
    }
    tm_rec_close(&r);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "save_share") - 2.0 / 12.0) < 1e-6);
    assert_true(ev_num(f, "save_calls_async") == 10 && ev_num(f, "save_calls") == 10);
    assert_true(ev_num(f, "background_save_calls") == 10);
    assert_non_null(strstr(f->advice, "These are torch.distributed.checkpoint.async_save calls"));
    assert_non_null(strstr(f->advice, "use_async_staging=True"));
    /* no GPU in the run: a non-blocking copy would raise there */
    assert_non_null(strstr(f->advice, "use_non_blocking_copy=False"));
    assert_non_null(strstr(f->advice, "upload_completion"));
    assert_null(strstr(f->advice, "Take the save off the training thread"));
    /* staging writes nothing: no word of storage or serializing */
    assert_null(strstr(f->advice, "storage ("));
    assert_null(strstr(f->advice, "serializing"));
    done(&run, &a);
}

/* Blocking torch.distributed.checkpoint saves with one async_save among
 * them: the advice is still to take the saves off the thread. */
static void test_some_async_saves_among_blocking_ones_keep_the_async_advice(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r, 100, 0, 0.1, 0.001);
    for (unsigned k = 1; k <= 10; k++)
        put_save_via(r, 1.0 * k, 0.2, 0.18, "1000", 10 * k, true,
                     k == 5 ? "torch.distributed.checkpoint.async_save"
                            : "torch.distributed.checkpoint",
                     "file");
    tm_rec_close(&r);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_true(ev_num(f, "save_calls_async") == 1);
    assert_non_null(strstr(f->advice, "Take the save off the training thread"));
    done(&run, &a);
}

/* Events as a crashed or hostile writer leaves them: a duration that is
 * no number, negative bytes, no step, a name alone: read as unknown, no
 * crash.  The two whole saves (0.5 s each, steps 10 and 20) remain:
 * 1.0 / 11.0 = 9.1%. */
static void test_crafted_save_events_are_read_as_unknown(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r, 100, 0, 0.1, 0.001);
    assert_int_equal(
        tm_rec_event(r, at(1), "checkpoint.save", "{\"dur_s\":\"x\",\"blocking\":true}"), 0);
    assert_int_equal(tm_rec_event(r, at(2), "checkpoint.save", NULL), 0);
    assert_int_equal(
        tm_rec_event(r, at(3), "checkpoint.save", "{\"dur_s\":0.5,\"bytes\":-5,\"blocking\":true}"),
        0);
    assert_int_equal(tm_rec_event(r, at(4), "checkpoint.save",
                                  "{\"dur_s\":0.5,\"cpu_s\":9,\"bytes\":1e308,\"step\":20,"
                                  "\"blocking\":true}"),
                     0);
    tm_rec_close(&r);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "checkpoint.blocking");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "save_time_s") - 1.0) < 1e-6);
    assert_true(ev_num(f, "save_cpu_share") <= 1.0); /* cpu_s capped at the save's time */
    assert_true(isnan(ev_num(f, "steps_between_checkpoints")));
    done(&run, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_saves_taking_a_sixth_of_the_loop_are_medium_with_an_interval_that_fits, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_saves_taking_a_fifth_are_high_and_cpu_bound_ones_are_serializing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_saves_under_a_twentieth_of_the_loop_are_no_finding,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_saves_before_and_after_the_loop_are_not_the_loops,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_background_saves_are_counted_apart_and_no_finding,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_calls_at_one_step_are_one_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_process_that_blocked_longest_is_the_one_judged,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_saves_to_memory_say_the_write_is_not_timed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_async_save_staging_is_told_as_staging, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_some_async_saves_among_blocking_ones_keep_the_async_advice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crafted_save_events_are_read_as_unknown, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
