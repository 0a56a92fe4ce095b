/*
 * test_rules_compile.c - steps.compile (src/lib/rules_compile.c) and the
 * summary it reads (src/lib/runsum_compile.c): the agent's compile events
 * laid over the training steps, against the loop's time; and the
 * collector's pauses inside a compilation, which are the compilation's
 * (src/lib/runsum_gc.c).  Every number below is worked out by hand in its
 * comment.
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

#define FX_NAME "test_rules_compile"
#include "fixture.h"

/* One compile event as the agent writes it, at the compilation's end
 * (begin + dur); the step field is the agent's (unused by the summary). */
static void put_compile(tm_rec *w, double begin, double dur, const char *trigger, const char *id,
                        bool training)
{
    char js[256];
    snprintf(js, sizeof js,
             "{\"dur_s\":%.6f,\"cpu_s\":%.6f,\"step\":0,\"training\":%s,\"trigger\":\"%s\","
             "\"id\":\"%s\"}",
             dur, dur, training ? "true" : "false", trigger, id);
    assert_int_equal(tm_rec_event(w, at(begin + dur), "compile", js), 0);
}

/* 100 steps of 0.1 s (the loop: 10.0 s), step k in [0.1k, 0.1k + 0.1).
 * Frame 0 compiled in step 0 (0.08 s from 0.01 s) with its backward graph
 * (0.005 s from 0.092 s), and recompiled in steps 30, 60 and 90 (0.08 s
 * each from 0.01 s in): 0.08 + 0.005 + 3 x 0.08 = 0.325 s, 3.25% of the
 * loop, under 5%; but frame 0 compiled 4 times (TM_AN_COMPILE_FRAME_MANY):
 * said, medium.  After warm-up (steps 1..99): the 3 recompilations,
 * 0.24 s, from step 30. */
static void test_a_frame_that_keeps_recompiling_is_said_under_the_share(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.001);
    put_compile(w, 0.01, 0.08, "DYNAMO", "0/0", true);
    put_compile(w, 0.092, 0.005, "LAZY_BACKWARD", "0/0", true);
    put_compile(w, 3.01, 0.08, "DYNAMO", "0/1", true);
    put_compile(w, 6.01, 0.08, "DYNAMO", "0/2", true);
    put_compile(w, 9.01, 0.08, "DYNAMO", "0/3", true);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.compile");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_true(ev_num(f, "compilations") == 5);
    assert_true(fabs(ev_num(f, "compile_time_s") - 0.325) < 1e-6);
    assert_true(fabs(ev_num(f, "loop_time_s") - 10.0) < 1e-6);
    assert_true(fabs(ev_num(f, "compile_share") - 0.0325) < 1e-6);
    assert_true(ev_num(f, "recompilations") == 3);
    assert_true(ev_num(f, "frames") == 1);
    assert_true(ev_num(f, "most_compilations_of_a_frame") == 4);
    assert_true(ev_num(f, "compilations_after_warmup") == 3);
    assert_true(fabs(ev_num(f, "compile_time_after_warmup_s") - 0.24) < 1e-6);
    assert_true(ev_num(f, "first_step_after_warmup") == 30);
    assert_true(fabs(ev_num(f, "compile_longest_s") - 0.08) < 1e-6);
    assert_non_null(strstr(f->title, "compiling with torch.compile took 325 ms inside the loop, "
                                     "3% of its time: 5 compilations; 3 recompilations, 240 ms "
                                     "of it after warm-up (from step 30)"));
    assert_non_null(strstr(f->advice, "TORCH_LOGS=recompiles"));
    assert_non_null(strstr(f->advice, "drop_last=True"));
    assert_null(strstr(f->advice, "recompile_limit")); /* 4 of 8 */
    /* the report's summary says them, in text and JSON (0.325 / 10.0 is
     * 3.2500000000000004%: "3.3%") */
    tm_text *t = tm_text_new(1 << 20);
    assert_int_equal(tm_report_write(run, a, t, false), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), "  torch.compile      5 compilations (3 "
                                                  "recompilations), 325 ms (3.3% of the "
                                                  "loop), 240 ms after warm-up\n"));
    tm_text_reset(t);
    assert_int_equal(tm_report_write(run, a, t, true), 0);
    const char *js = tm_text_data(t, NULL);
    assert_non_null(strstr(js, "\"compilations\":5,"));
    assert_non_null(strstr(js, "\"recompilations\":3,"));
    assert_non_null(strstr(js, "\"compile_time_s\":0.325"));
    tm_text_free(&t);
    done(&run, &a);
}

/* 10 steps of 0.1 s (1.0 s): the first compiled for 0.09 s (from 0.005 s):
 * 9% of the loop, said; nothing after warm-up: low, and the advice is the
 * first compilation's (the caches), not the recompilations'.  A
 * compilation in another thread (a background warm-up) is counted apart. */
static void test_a_first_compilation_of_a_short_loop_is_low_and_told_to_cache(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0.001);
    put_compile(w, 0.005, 0.09, "DYNAMO", "0/0", true);
    put_compile(w, 0.5, 0.3, "DYNAMO", "1/0", false);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.compile");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_LOW);
    assert_true(ev_num(f, "compilations") == 1);
    assert_true(fabs(ev_num(f, "compile_share") - 0.09) < 1e-6);
    assert_true(ev_num(f, "recompilations") == 0);
    assert_true(ev_num(f, "compilations_after_warmup") == 0);
    assert_true(isnan(ev_num(f, "first_step_after_warmup")));
    assert_true(ev_num(f, "other_thread_compilations") == 1);
    assert_non_null(strstr(f->title, "took 90.0 ms inside the loop, 9% of its time: 1 "
                                     "compilation"));
    assert_null(strstr(f->title, "recompilation"));
    assert_non_null(strstr(f->advice, "TORCHINDUCTOR_FX_GRAPH_CACHE"));
    assert_null(strstr(f->advice, "TORCH_LOGS"));
    assert_non_null(strstr(f->advice, "1 other compilation ran outside the training thread"));
    done(&run, &a);
}

/* 100 steps of 0.1 s; frame 2 compiled 8 times (2/0 .. 2/7), in steps 0,
 * 10, ... 70, 0.08 s each: 0.64 s, 6.4%; after warm-up 7 x 0.08 = 0.56 s,
 * 5.6%: medium.  8 compilations: torch's recompile_limit, said. */
static void test_a_frame_at_the_recompile_limit_is_said_to_run_uncompiled(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.001);
    for (int k = 0; k < 8; k++) {
        char id[16];
        snprintf(id, sizeof id, "2/%d", k);
        put_compile(w, 1.0 * k + 0.01, 0.08, "DYNAMO", id, true);
    }
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.compile");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_true(fabs(ev_num(f, "compile_share") - 0.064) < 1e-6);
    assert_true(ev_num(f, "recompilations") == 7);
    assert_true(ev_num(f, "most_compilations_of_a_frame") == 8);
    assert_true(fabs(ev_num(f, "compile_time_after_warmup_s") - 0.56) < 1e-6);
    assert_true(ev_num(f, "first_step_after_warmup") == 10);
    assert_non_null(strstr(f->advice, "One function was compiled 8 times: at "
                                      "torch._dynamo.config.recompile_limit (8 by default)"));
    done(&run, &a);
}

/* 100 steps of 0.1 s, one compilation of 0.08 s in step 0: 0.8%, one
 * frame once: no finding; the summary has it. */
static void test_a_compilation_under_a_twentieth_is_no_finding(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.001);
    put_compile(w, 0.01, 0.08, "DYNAMO", "0/0", true);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "steps.compile"));
    assert_int_equal(a->sum.compile_n, 1);
    assert_true(fabs(a->sum.compile_s - 0.08) < 1e-9);
    done(&run, &a);
}

/* Ids as torch writes them and as nobody does: "!1/2/3" (compiled
 * autograd: frame 2's fourth) is a recompilation of frame 2; "x/y", "0/",
 * "/1", "1/2/3", "0/1x", "" and an id over 64 bytes are compilations of
 * no known frame; a negative or unreadable duration is 0.  10 steps of
 * 0.1 s: compilations 0.05 s each (9 that parse a duration: 0.45 s). */
static void test_crafted_compile_events_are_read_as_unknown(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0.001);
    const char *ids[] = {"!1/2/3", "x/y", "0/", "/1", "1/2/3", "0/1x", ""};
    for (size_t k = 0; k < sizeof ids / sizeof *ids; k++)
        put_compile(w, 0.1 * (double)k + 0.01, 0.05, "DYNAMO", ids[k], true);
    char longid[100];
    memset(longid, '7', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    longid[10] = '/';
    put_compile(w, 0.71, 0.05, "DYNAMO", longid, true);
    put_compile(w, 0.81, 0.05, "DYNAMO", "3/0", true);
    assert_int_equal(tm_rec_event(w, at(0.95), "compile", "{\"dur_s\":-1,\"training\":true}"), 0);
    assert_int_equal(tm_rec_event(w, at(0.96), "compile", "{\"dur_s\":\"x\",\"training\":true}"),
                     0);
    assert_int_equal(tm_rec_event(w, at(0.97), "compile", "{\"training\":true,\"id\":\"5/"), 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.compile_n, 12);
    assert_true(fabs(a->sum.compile_s - 0.45) < 1e-9);
    assert_int_equal(a->sum.compile_recompiles, 1); /* !1/2/3 */
    assert_int_equal(a->sum.compile_frames, 2);     /* 2 and 3 */
    assert_int_equal(a->sum.compile_max_per_frame, 1);
    done(&run, &a);
}

/* The full collections of test_rules_gc.c's loop (10 of 0.06 s, 5.66% of
 * it: gc.pauses there), each inside a compilation (in_compile): the
 * compilation's time, not the loop's pauses: no gc.pauses, no pause. */
static void test_pauses_inside_a_compilation_are_not_the_loops(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double dur[100], prep[100];
    for (size_t i = 0; i < 100; i++) {
        dur[i] = i % 10 ? 0.1 : 0.16;
        prep[i] = -1;
    }
    put_opt_steps_of(w, 100, dur, prep);
    for (unsigned k = 0; k < 10; k++) {
        char js[256];
        snprintf(js, sizeof js,
                 "{\"gen\":2,\"dur_s\":0.060000,\"collected\":0,\"step\":%u,\"train\":true,"
                 "\"auto\":true,\"in_save\":false,\"in_compile\":true,\"prep\":false}",
                 10 * k);
        assert_int_equal(tm_rec_event(w, at(1.06 * k + 0.08), "gc.pause", js), 0);
    }
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gc.pauses"));
    assert_int_equal(a->sum.gc_pauses, 0);
    done(&run, &a);
}

/* 100 steps of a DataLoader loop, 0.1 s each but steps 0, 10, ... 90 of
 * 0.5 s: step 10k starts at 10k steps before it, k of 0.5 s and 9k of
 * 0.1 s, 1.4k s; the loop 90 x 0.1 + 10 x 0.5 = 14.0 s.  In each long
 * step a compilation of 0.4 s from 0.05 s in (frames 0..9, once each: no
 * recompilation) with_compile, else nothing in them. */
static void put_compiling_every_tenth(bool with_compile)
{
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    double dur[100], prep[100];
    for (size_t i = 0; i < 100; i++) {
        dur[i] = i % 10 ? 0.1 : 0.5;
        prep[i] = -1;
    }
    put_opt_steps_of(w, 100, dur, prep);
    for (int k = 0; with_compile && k < 10; k++) {
        char id[16];
        snprintf(id, sizeof id, "%d/0", k);
        put_compile(w, 1.4 * k + 0.05, 0.4, "DYNAMO", id, true);
    }
    tm_rec_close(&w);
}

/* The loop's long steps every 10 are its compilations: 4.0 s of 14.0 s,
 * 28.6%; after warm-up steps 10 .. 90, 3.6 s, 25.7%: high, from step 10.
 * Not steps.stalls: 0.4 of each stall's 0.4 s excess over the 0.1 s
 * median is compiling.  The same loop without the events: steps.stalls,
 * every 10 steps (the check is not vacuous). */
static void test_stalls_that_are_compilations_are_steps_compile_not_stalls(void **st)
{
    (void)st;
    put_compiling_every_tenth(true);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.compile");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_true(fabs(ev_num(f, "compile_share") - 4.0 / 14.0) < 1e-6);
    assert_true(fabs(ev_num(f, "compile_time_after_warmup_s") - 3.6) < 1e-6);
    assert_true(ev_num(f, "compilations_after_warmup") == 9);
    assert_true(ev_num(f, "first_step_after_warmup") == 10);
    assert_true(ev_num(f, "recompilations") == 0);
    assert_null(tm_analysis_find(a, "steps.stalls"));
    done(&run, &a);
    assert_int_equal(teardown(NULL), 0);
    assert_int_equal(setup(NULL), 0);
    put_compiling_every_tenth(false);
    a = analyze(&run);
    assert_null(tm_analysis_find(a, "steps.compile"));
    assert_non_null(tm_analysis_find(a, "steps.stalls"));
    done(&run, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_frame_that_keeps_recompiling_is_said_under_the_share,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_first_compilation_of_a_short_loop_is_low_and_told_to_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_frame_at_the_recompile_limit_is_said_to_run_uncompiled, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_compilation_under_a_twentieth_is_no_finding, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_crafted_compile_events_are_read_as_unknown, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pauses_inside_a_compilation_are_not_the_loops, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_stalls_that_are_compilations_are_steps_compile_not_stalls, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
