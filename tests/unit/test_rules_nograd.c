/*
 * test_rules_nograd.c - steps.no_grad (src/lib/rules_nograd.c) and the
 * summary it reads (runsum.c, steps.c): the model run without gradients
 * between the training steps, in train mode before a step's training
 * forward (nograd_ns, nograd_calls: an RL rollout, a teacher's forward) or
 * as eval runs; a rollout every K steps is no stall.  Every number below
 * is worked out by hand in its comment.
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

#define FX_NAME "test_rules_nograd"
#include "fixture.h"

/* n optimizer steps of a loop without a DataLoader from 0: step i takes
 * dur[i] s, 1 ms of it preparing its batch, and ng[i] s of it (0: none)
 * running the model under no_grad before its training forward, calls[i]
 * calls.  Returns the end of the last. */
static double put_ng_steps(tm_rec *w, size_t n, const double *dur, const double *ng,
                           const int32_t *calls)
{
    uint8_t buf[sizeof(tm_inproc_step)];
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = at(t),
                            .end_ns = at(t + dur[i]),
                            .data_wait_ns = 1000000,
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = 0,
                            .prep_ns = 1000000,
                            .prep_cpu_ns = 1000000,
                            .backward_ns = -1,
                            .wait_cpu_ns = -1,
                            .collective_ns = -1,
                            .opt_start_ns = at(t + dur[i]) - 1000,
                            .optimizer = 0,
                            .prep_fwd_ns = -1,
                            .prep_opt_ns = -1,
                            .nograd_ns = ng[i] > 0 ? (int64_t)llround(ng[i] * 1e9) : -1,
                            .nograd_calls = ng[i] > 0 ? calls[i] : -1};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_int_equal(len, ng[i] > 0 ? 144 : 112);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
        t += dur[i];
    }
    return t;
}

/* 60 steps of 0.1 s, each running the model under no_grad for ng s in
 * calls calls before its training forward, analysed. */
static tm_analysis *analyze_even(double ng, int32_t calls, tm_run **run)
{
    double dur[60], n[60];
    int32_t c[60];
    for (size_t i = 0; i < 60; i++)
        dur[i] = 0.1, n[i] = ng, c[i] = calls;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_ng_steps(w, 60, dur, n, c);
    tm_rec_close(&w);
    return analyze(run);
}

/* An eval record from t for dur s (an eval span: model.eval() to train()) */
static void put_eval(tm_rec *w, uint64_t step, double t, double dur)
{
    uint8_t buf[sizeof(tm_inproc_step)];
    tm_inproc_step s = {.step = step,
                        .start_ns = at(t),
                        .end_ns = at(t + dur),
                        .boundary = TM_STEP_BY_LOADER,
                        .phase = TM_STEP_EVAL,
                        .micro_batches = 0,
                        .batches = 0,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = -1,
                        .wait_cpu_ns = -1,
                        .collective_ns = -1,
                        .prep_fwd_ns = -1,
                        .prep_opt_ns = -1,
                        .nograd_ns = -1,
                        .nograd_calls = -1};
    int len = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
}

/* CleanRL's PPO: a rollout every 10 steps (steps 10, 20, ... 90), 0.4 s
 * of 128 calls under no_grad, in steps of 0.5 s; the rest 0.1 s.  Judged
 * steps 1..99: 90 x 0.1 + 9 x 0.5 = 13.5 s, of which 9 x 0.4 = 3.6 s
 * rollouts: 26.7%, medium.  The steps of 0.5 s are 5 times the median, but
 * their excess (0.4 s) is the rollout beyond its median (0): explained, no
 * stall.  The wait: 99 x 1 ms / 13.5 s = 0.73%, input.ok. */
static void test_a_rollout_every_k_steps_is_no_grad_time_not_a_stall(void **st)
{
    (void)st;
    double dur[100], ng[100];
    int32_t calls[100];
    for (size_t i = 0; i < 100; i++) {
        bool roll = i % 10 == 0 && i > 0;
        dur[i] = roll ? 0.5 : 0.1;
        ng[i] = roll ? 0.4 : 0;
        calls[i] = 128;
    }
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_ng_steps(w, 100, dur, ng, calls);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.no_grad");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_true(fabs(ev_num(f, "no_grad_share") - 3.6 / 13.5) < 1e-6);
    assert_true(ev_num(f, "no_grad_steps") == 9 && ev_num(f, "steps_judged") == 99);
    assert_true(ev_num(f, "calls_per_run") == 128);
    assert_true(fabs(ev_num(f, "no_grad_run_s") - 0.4) < 1e-6);
    assert_true(ev_num(f, "eval_s") == 0);
    assert_non_null(strstr(f->title, "without gradients 27% of its time: before 9 of 99 training "
                                     "steps, 128 calls under no_grad in 400 ms (an RL rollout"));
    assert_non_null(strstr(f->advice, "gymnasium.vector.AsyncVectorEnv"));
    assert_null(tm_analysis_find(a, "steps.stalls"));
    assert_int_equal(a->sum.stall_explained, 9);
    assert_non_null(tm_analysis_find(a, "input.ok"));
    done(&run, &a);
}

/* A2C: a rollout of 10 calls, 60 ms, before every 100 ms step: 60%,
 * high, the verdict (input.ok is info). */
static void test_a_rollout_before_every_step_is_the_verdict(void **st)
{
    (void)st;
    tm_run *run = NULL;
    tm_analysis *a = analyze_even(0.06, 10, &run);
    const tm_finding *f = tm_analysis_find(a, "steps.no_grad");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_true(fabs(ev_num(f, "no_grad_share") - 0.6) < 1e-6); /* 59 x 60 ms / 59 x 100 ms */
    assert_non_null(strstr(f->title, "60% of its time: before every training step, 10 calls"));
    const tm_finding *list;
    assert_true(tm_analysis_findings(a, &list) > 0 && strcmp(list[0].id, "steps.no_grad") == 0);
    done(&run, &a);
}

/* Distillation: a teacher's forward, one call under no_grad, 50 ms of
 * every 100 ms step: 50%, but the step's own compute: low, and said so. */
static void test_one_call_a_step_is_a_frozen_models_forward_low(void **st)
{
    (void)st;
    tm_run *run = NULL;
    tm_analysis *a = analyze_even(0.05, 1, &run);
    const tm_finding *f = tm_analysis_find(a, "steps.no_grad");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_LOW);
    assert_non_null(strstr(f->title, "50% of its time: once before every training step, 50.0 ms "
                                     "(a frozen model's forward"));
    assert_non_null(strstr(f->advice, "part of the step's compute"));
    assert_null(strstr(f->advice, "environments"));
    done(&run, &a);
}

/* DQN with epsilon-greedy actions: 60 steps of 0.1 s, each with 60 ms
 * under no_grad, of which 7 in 10 call the policy and the target network
 * (2 calls), the rest the target only (1): 1.7 calls a run on average, an
 * agent acting, not a frozen model's forward (under 1.5), medium or more. */
static void test_runs_of_mostly_two_calls_are_a_rollout_not_a_teacher(void **st)
{
    (void)st;
    double dur[60], ng[60];
    int32_t calls[60];
    for (size_t i = 0; i < 60; i++)
        dur[i] = 0.1, ng[i] = 0.06, calls[i] = i % 10 < 7 ? 2 : 1;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_ng_steps(w, 60, dur, ng, calls);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.no_grad");
    assert_non_null(f);
    /* steps 1..59: 41 of 2 calls (i % 10 < 7, less step 0), 18 of 1: 100 / 59 */
    assert_true(fabs(ev_num(f, "calls_per_run") - 100.0 / 59) < 1e-3); /* 1.695 */
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_non_null(strstr(f->title, "2 calls under no_grad"));
    assert_null(strstr(f->title, "frozen"));
    done(&run, &a);
}

/* A DataLoader loop of 100 steps of 0.1 s with an eval run of 1 s after
 * steps 30, 60 and 90, and one of 1 s before it trained (left out: no part
 * of the loop).  The loop: 99 judged steps, 9.9 s, and 3 s of eval: 3 /
 * 12.9 = 23.3%, low (under 25%). */
static void test_eval_runs_are_no_grad_time_of_the_loop(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_eval(w, 0, -1.5, 1.0);
    double t = 0;
    for (size_t i = 0; i < 100; i++) {
        put_loader_step_at(w, i, t, 0.1);
        t += 0.1;
        if (i == 30 || i == 60 || i == 90) {
            put_eval(w, i + 1, t, 1.0);
            t += 1.0;
        }
    }
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "steps.no_grad");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_LOW);
    assert_true(fabs(ev_num(f, "no_grad_share") - 3.0 / 12.9) < 1e-6);
    assert_true(fabs(ev_num(f, "eval_s") - 3.0) < 1e-6);
    assert_true(ev_num(f, "eval_records") == 4 && ev_num(f, "no_grad_steps") == 0);
    assert_non_null(strstr(f->title, "23% of its time: eval runs took 3.0 s"));
    assert_non_null(strstr(f->advice, "evaluate less often"));
    done(&run, &a);
}

/* The same with one eval run of 0.5 s: 0.5 / 10.4 = 4.8%, under 10%:
 * nothing to say. */
static void test_a_usual_eval_schedule_is_not_said(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double t = 0;
    for (size_t i = 0; i < 100; i++) {
        put_loader_step_at(w, i, t, 0.1);
        t += 0.1;
        if (i == 50) {
            put_eval(w, i + 1, t, 0.5);
            t += 0.5;
        }
    }
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "steps.no_grad"));
    assert_true(fabs(a->sum.nograd_share - 0.5 / 10.4) < 1e-6);
    done(&run, &a);
}

/* The tally (steps.c): no-grad time capped at the step net of its wait,
 * warm-up out, calls summed, merged across ranks; eval time in the loop
 * only between judged steps (not before the first, nor after the last). */
static void test_the_tally_counts_no_grad_runs_after_warm_up(void **st)
{
    (void)st;
    tm_steptally t, all;
    tm_steptally_init(&t);
    tm_steptally_init(&all);
    tm_inproc_step e = {.step = 0, .start_ns = 0, .end_ns = 200 * 1000000LL, .phase = TM_STEP_EVAL};
    tm_steptally_add(&t, &e); /* before warm-up: eval_s only */
    for (uint64_t i = 0; i < 4; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = (int64_t)i * 100 * 1000000LL,
                            .end_ns = (int64_t)(i + 1) * 100 * 1000000LL,
                            .data_wait_ns = 10 * 1000000LL,
                            .phase = TM_STEP_TRAIN,
                            .nograd_ns = i == 3 ? 500 * 1000000LL : 40 * 1000000LL,
                            .nograd_calls = i == 2 ? 0 : 5};
        tm_steptally_add(&t, &s);
    }
    tm_steptally_add(&t, &e); /* after the last step so far: not yet the loop's */
    assert_true(fabs(t.eval_s - 0.4) < 1e-12 && t.eval_loop_s == 0 &&
                fabs(t.eval_pend_s - 0.2) < 1e-12);
    tm_inproc_step s4 = {.step = 4,
                         .start_ns = 600 * 1000000LL,
                         .end_ns = 700 * 1000000LL,
                         .phase = TM_STEP_TRAIN,
                         .nograd_ns = -1,
                         .nograd_calls = -1};
    tm_steptally_add(&t, &s4); /* a step after it: the eval was the loop's */
    /* steps 1 and 3 (0 is warm-up, 2 has no calls): 40 ms + 500 ms capped
     * at 100 - 10 = 90 ms */
    assert_int_equal(t.nograd_steps, 2);
    assert_int_equal(t.nograd_calls, 10);
    assert_true(fabs(t.nograd_s - 0.130) < 1e-12);
    assert_true(fabs(t.eval_s - 0.4) < 1e-12 && fabs(t.eval_loop_s - 0.2) < 1e-12);
    assert_true(t.eval_pend_s == 0);
    tm_steptally_merge(&all, &t);
    tm_steptally_merge(&all, &t);
    assert_true(all.nograd_steps == 4 && all.nograd_calls == 20);
    assert_true(fabs(all.nograd_s - 0.260) < 1e-12 && fabs(all.eval_loop_s - 0.4) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_rollout_every_k_steps_is_no_grad_time_not_a_stall,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_rollout_before_every_step_is_the_verdict, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_one_call_a_step_is_a_frozen_models_forward_low, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_eval_runs_are_no_grad_time_of_the_loop, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_runs_of_mostly_two_calls_are_a_rollout_not_a_teacher,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_usual_eval_schedule_is_not_said, setup, teardown),
        cmocka_unit_test(test_the_tally_counts_no_grad_runs_after_warm_up),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
