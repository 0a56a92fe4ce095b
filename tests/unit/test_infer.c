/*
 * test_infer.c - inference loops (src/lib/inference.c): a process that
 * never trained has its DataLoader batches, recorded as eval, as its
 * steps; one that trains, or may have, keeps them apart.  Record files
 * written as the extension writes them, loaded by tm_run_load and
 * analysed; every expected number is worked out beside it.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis.h"
#include "infer.h"
#include "trainmon.h"

#define FX_NAME "tm-infer"
#include "fixture.h"

/* n batches of dur seconds from t, wait seconds of each waiting for the
 * batch, as the extension writes them: phase TM_STEP_EVAL (emit_eval:
 * boundary loader, numbered by the training steps written before, 0 here,
 * 2 ms receiving it) or TM_STEP_TRAIN (a loop that fetches with grad
 * enabled and never runs a backward pass: the step model's loader steps,
 * numbered from 0) */
static void put_batches(tm_rec *w, uint32_t phase, size_t n, double t, double dur, double wait,
                        int32_t batches)
{
    uint8_t buf[128];
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step s = {.step = phase == TM_STEP_EVAL ? 0 : i,
                            .start_ns = at(t + (double)i * dur),
                            .end_ns = at(t + (double)(i + 1) * dur),
                            .data_wait_ns = (int64_t)(wait * (double)S_NS),
                            .boundary = TM_STEP_BY_LOADER,
                            .phase = phase,
                            .micro_batches = 0,
                            .batches = batches,
                            .prep_ns = -1,
                            .prep_cpu_ns = -1,
                            .backward_ns = -1,
                            .wait_cpu_ns = phase == TM_STEP_EVAL ? 2000000 : -1,
                            .collective_ns = -1,
                            .opt_start_ns = -1,
                            .optimizer = -1};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
}

#define put_eval_batches(w, n, t, dur, wait, batches)                                              \
    put_batches(w, TM_STEP_EVAL, n, t, dur, wait, batches)
#define put_loader_steps(w, n, t, dur, wait) put_batches(w, TM_STEP_TRAIN, n, t, dur, wait, 1)

static void put_boundaries(tm_rec *w, double t, unsigned bwd, unsigned opt, int made)
{
    char js[256];
    if (made < 0) /* an agent before optimizers_made */
        snprintf(js, sizeof js,
                 "{\"loader_batches\":40,\"backward_passes\":%u,\"optimizer_steps\":%u,"
                 "\"forward_seen\":true,\"steps\":0,\"fetches\":40}",
                 bwd, opt);
    else
        snprintf(js, sizeof js,
                 "{\"loader_batches\":40,\"backward_passes\":%u,\"optimizer_steps\":%u,"
                 "\"forward_seen\":true,\"steps\":0,\"fetches\":40,\"optimizers_made\":%d}",
                 bwd, opt, made);
    assert_int_equal(tm_rec_event(w, at(t), "inproc.boundaries", js), 0);
}

static const tm_run_source *source_named(const tm_run *r, const char *file)
{
    const tm_run_source *src;
    size_t n = tm_run_sources(r, &src);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(src[i].file, file))
            return &src[i];
    fail_msg("no source %s", file);
    return NULL;
}

static void test_a_process_that_only_infers_has_its_batches_as_steps(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid100.tmr", "pid100", -1);
    /* 40 batches of 50 ms, 30 ms of each waiting: batch scoring under
     * inference_mode, and a model.eval() span without a batch (batches 0,
     * no step of anyone's) */
    put_eval_batches(w, 40, 1.0, 0.050, 0.030, 1);
    put_eval_batches(w, 1, 3.0, 0.010, 0.0, 0);
    put_boundaries(w, 3.1, 0, 0, 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_int_equal(source_named(run, "pid100.tmr")->inference, 40);
    const tm_run_step *s;
    size_t n = tm_run_steps(run, &s);
    assert_int_equal(n, 41);
    for (size_t i = 0; i < 40; i++) { /* numbered in order, loader-ended training steps */
        assert_int_equal(s[i].s.phase, TM_STEP_TRAIN);
        assert_int_equal(s[i].s.boundary, TM_STEP_BY_LOADER);
        assert_int_equal(s[i].s.step, i);
        assert_int_equal(s[i].s.wait_cpu_ns, 2000000);
    }
    assert_int_equal(s[40].s.phase, TM_STEP_EVAL); /* the span stays eval */
    const tm_an_summary *S = &a->sum;
    assert_int_equal(S->steps_total, 40);
    assert_int_equal(S->eval_steps, 1);
    assert_int_equal(S->infer_procs, 1);
    /* warm-up: the first step; the rest 30 of 50 ms waiting: 0.6 */
    assert_true(fabs(S->data_wait_fraction - 0.6) < 1e-6);
    assert_null(tm_analysis_find(a, "steps.unsegmented"));
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_non_null(
        strstr(f->advice, "keeps the inference loop waiting")); /* no GPU, no training */
    done(&run, &a);
}

static void test_a_process_that_trained_or_made_an_optimizer_keeps_eval_apart(void **st)
{
    (void)st;
    /* four processes, each with 40 eval batches and no training step
     * record: one whose boundaries saw a backward pass (it died in the
     * first step before writing it), one an optimizer step, one that made
     * an optimizer (a sanity check before training, then a crash), and one
     * whose agent predates optimizers_made and saw neither (inference) */
    static const struct {
        const char *file;
        unsigned bwd, opt;
        int made;
        uint64_t want;
    } c[] = {{"pid201.tmr", 1, 0, 0, 0},
             {"pid202.tmr", 0, 1, 0, 0},
             {"pid203.tmr", 0, 0, 1, 0},
             {"pid204.tmr", 0, 0, -1, 40}};
    for (size_t i = 0; i < 4; i++) { /* each its own run */
        char path[600];
        if (i) {
            snprintf(path, sizeof path, "%s/%s", dir, c[i - 1].file);
            assert_int_equal(unlink(path), 0);
        }
        tm_rec *w = open_rec(c[i].file, c[i].file, (int)i);
        put_eval_batches(w, 40, 1.0, 0.050, 0.030, 1);
        put_boundaries(w, 3.1, c[i].bwd, c[i].opt, c[i].made);
        tm_rec_close(&w);
        tm_run *run = NULL;
        tm_analysis *a = analyze(&run);
        assert_int_equal(source_named(run, c[i].file)->inference, c[i].want);
        assert_int_equal(a->sum.infer_procs, c[i].want ? 1 : 0);
        assert_int_equal(a->sum.eval_steps, c[i].want ? 0 : 40);
        done(&run, &a);
    }
}

static void test_a_scoring_process_beside_a_trainer_stays_eval(void **st)
{
    (void)st;
    /* a trainer (40 optimizer steps) that runs a separate scoring script
     * (60 batches under no_grad, its event with no training): a training
     * run, whose verdict the scorer's wait must not enter */
    tm_rec *w = open_rec("pid601.tmr", "pid601", -1);
    for (size_t i = 0; i < 40; i++)
        put_loader_step_at(w, i, 1.0 + 0.1 * (double)i, 0.1);
    put_boundaries(w, 6.0, 40, 40, 1);
    tm_rec_close(&w);
    w = open_rec("pid602.tmr", "pid602", -1);
    put_eval_batches(w, 60, 6.0, 0.050, 0.045, 1);
    put_boundaries(w, 9.1, 0, 0, 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_int_equal(source_named(run, "pid602.tmr")->inference, 0);
    assert_int_equal(a->sum.infer_procs, 0);
    assert_int_equal(a->sum.steps_total, 40);
    assert_int_equal(a->sum.eval_steps, 60);
    /* the trainer's 1 ms of wait in 100 ms steps, not the scorer's 90% */
    assert_true(a->sum.data_wait_fraction < 0.02);
    done(&run, &a);
}

static void test_a_training_step_or_a_killed_process_decides_by_its_records(void **st)
{
    (void)st;
    /* eval first, then one training step: a training job (no event: it
     * was killed); and a process killed while it scored batches (no event,
     * no training record): not claimed (a training job killed in its
     * warm-up eval, preempted by SIGTERM, looks the same) */
    tm_rec *w = open_rec("pid301.tmr", "pid301", -1);
    put_eval_batches(w, 10, 1.0, 0.050, 0.030, 1);
    put_loader_step_at(w, 0, 2.0, 0.1);
    tm_rec_close(&w);
    w = open_rec("pid302.tmr", "pid302", -1);
    put_eval_batches(w, 10, 1.0, 0.050, 0.030, 1);
    tm_rec_close(&w);
    /* a DataLoader worker's file is nobody's steps */
    put_worker_file(0, 303, 5, 0.05, 0.5, 1e8, 0);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_int_equal(source_named(run, "pid301.tmr")->inference, 0);
    assert_int_equal(source_named(run, "pid302.tmr")->inference, 0);
    assert_int_equal(source_named(run, "worker-r0-303.tmr")->inference, 0);
    done(&run, &a);
}

static void test_a_job_that_made_an_optimizer_and_only_evaluated_is_told_so(void **st)
{
    (void)st;
    /* Lightning's sanity check (2 batches) and then a crash before the
     * first training step: no steps, and the advice is not "iterate a
     * DataLoader" (it did) */
    tm_rec *w = open_rec("pid501.tmr", "pid501", -1);
    put_eval_batches(w, 2, 1.0, 0.050, 0.030, 1);
    put_boundaries(w, 1.5, 0, 0, 1);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.infer_procs, 0);
    const tm_finding *f = tm_analysis_find(a, "steps.unsegmented");
    assert_non_null(f);
    assert_non_null(strstr(f->advice, "stopped before its first training step"));
    assert_null(strstr(f->advice, "iterate a DataLoader"));
    assert_true(ev_num(f, "optimizers_made") == 1 && ev_num(f, "eval_batches") == 2);
    done(&run, &a);
}

static void test_loader_steps_of_a_loop_that_never_trained_are_inference_too(void **st)
{
    (void)st;
    /* the HF Trainer's evaluate(): 20 batches fetched with grad enabled,
     * no backward pass (the step model's loader steps, numbered 0..19),
     * then 4 held batches written as eval at the iterator's end: 24
     * batch steps, the loader steps keeping their numbers (a ring file's
     * highest says what it dropped) */
    tm_rec *w = open_rec("pid401.tmr", "pid401", -1);
    put_loader_steps(w, 20, 1.0, 0.050, 0.010);
    put_eval_batches(w, 4, 2.0, 0.050, 0.010, 1);
    put_boundaries(w, 2.5, 0, 0, 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_int_equal(source_named(run, "pid401.tmr")->inference, 24);
    const tm_run_step *s;
    size_t n = tm_run_steps(run, &s);
    assert_int_equal(n, 24);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(s[i].s.phase, TM_STEP_TRAIN);
        assert_int_equal(s[i].s.step, i < 20 ? i : 0); /* as written */
    }
    assert_int_equal(a->sum.infer_procs, 1);
    assert_int_equal(a->sum.steps_total, 24);
    done(&run, &a);
}

static void test_the_decision_alone(void **st)
{
    (void)st;
    tm_run_step s[3] = {{.s = {.phase = TM_STEP_EVAL, .batches = 1}},
                        {.s = {.phase = TM_STEP_EVAL, .batches = 0}},
                        {.s = {.phase = TM_STEP_EVAL, .batches = 1}}};
    assert_false(tm_infer_is_inference(s, 3, NULL)); /* no event: killed, not claimed */
    assert_true(tm_infer_is_inference(s, 3, ""));    /* an event without numbers */
    assert_true(tm_infer_is_inference(s, 3, "{\"backward_passes\":0}"));
    assert_false(tm_infer_is_inference(s, 3, "{\"optimizers_made\":2}"));
    assert_false(tm_infer_is_inference(s + 1, 1, "")); /* no batch: no step */
    assert_false(tm_infer_is_inference(s, 0, ""));
    s[1].s.phase = 0; /* a file before the step model: every record a step */
    assert_false(tm_infer_is_inference(s, 3, ""));
    s[1].s.phase = TM_STEP_TRAIN; /* a step ended by a backward pass: training */
    s[1].s.boundary = TM_STEP_BY_BACKWARD;
    assert_false(tm_infer_is_inference(s, 3, ""));
    s[1].s.boundary = TM_STEP_BY_OPTIMIZER;
    assert_false(tm_infer_is_inference(s, 3, ""));
    s[1].s.boundary = TM_STEP_BY_LOADER; /* a loader step: a batch */
    assert_true(tm_infer_is_inference(s, 3, ""));
    s[1].s.phase = TM_STEP_EVAL;
    assert_int_equal(tm_infer_convert(s, 3), 2);
    assert_true(s[0].s.step == 0 && s[2].s.step == 1 && s[1].s.phase == TM_STEP_EVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_process_that_only_infers_has_its_batches_as_steps,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_process_that_trained_or_made_an_optimizer_keeps_eval_apart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_scoring_process_beside_a_trainer_stays_eval, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_a_training_step_or_a_killed_process_decides_by_its_records, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_loader_steps_of_a_loop_that_never_trained_are_inference_too, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_job_that_made_an_optimizer_and_only_evaluated_is_told_so, setup, teardown),
        cmocka_unit_test(test_the_decision_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
