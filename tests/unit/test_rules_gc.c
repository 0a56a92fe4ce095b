/*
 * test_rules_gc.c - gc.pauses (src/lib/rules_gc.c), the summary it reads
 * (src/lib/runsum_gc.c) and the input verdict net of the collector's
 * pauses in the loop's own batch preparation (rules_input.c): the agent's
 * gc.pause and gc.totals events laid over the steps.  Every number below
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

#define FX_NAME "test_rules_gc"
#include "fixture.h"

static void put_totals(tm_rec *w, double t, double frozen)
{
    char js[256];
    snprintf(js, sizeof js,
             "{\"collections\":[900,80,12],\"time_s\":[0.010000,0.020000,0.900000],"
             "\"max_s\":0.06,\"events\":12,\"dropped\":0,\"frozen\":%.0f,"
             "\"threshold\":[700,10,10]}",
             frozen);
    assert_int_equal(tm_rec_event(w, at(t), "gc.totals", js), 0);
}

/* 100 steps of 0.1 s with a DataLoader, but steps 0, 10, ... 90 take
 * 0.16 s: a full collection of 0.06 s begins 0.02 s into each (numbered
 * by the steps written before it: 0, 10, ... 90).  Step k*10 starts at
 * k x 1.06 s.  Returns the end: 90 x 0.1 + 10 x 0.16 = 10.6 s. */
static double put_full_pauses(tm_rec *w, bool autogc)
{
    double dur[100], prep[100];
    for (size_t i = 0; i < 100; i++) {
        dur[i] = i % 10 ? 0.1 : 0.16;
        prep[i] = -1;
    }
    double end = put_opt_steps_of(w, 100, dur, prep);
    for (unsigned k = 0; k < 10; k++)
        put_pause(w, 1.06 * k + 0.02, 0.06, 2, 10 * k, autogc);
    return end;
}

/* 10 pauses of 0.06 s = 0.6 s in a loop of 10.6 s: 5.66%, medium
 * (5% <= share < 20%), "6%".  Judged steps 1..99: 9 held a pause (10, 20,
 * ... 90: 0.16 s), 90 did not (0.1 s).  Full collections every 10 steps;
 * nothing frozen: gc.freeze().  The whole process's totals: young 0.01 +
 * 0.02 = 0.03 s, full 0.9 s. */
static void test_full_collections_in_the_loop_are_stalls_told_to_freeze(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double end = put_full_pauses(w, true);
    put_totals(w, end + 0.5, 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_int_equal(f->confidence, TM_CONF_HIGH);
    assert_true(ev_num(f, "pauses") == 10 && ev_num(f, "full_collections") == 10);
    assert_true(ev_num(f, "manual_collections") == 0);
    assert_true(fabs(ev_num(f, "pause_time_s") - 0.6) < 1e-6);
    assert_true(fabs(ev_num(f, "loop_time_s") - 10.6) < 1e-6);
    assert_true(fabs(ev_num(f, "pause_share") - 0.6 / 10.6) < 1e-6);
    assert_true(fabs(ev_num(f, "pause_median_s") - 0.06) < 1e-9);
    assert_true(fabs(ev_num(f, "pause_max_s") - 0.06) < 1e-9);
    assert_true(ev_num(f, "steps_between_full_collections") == 10);
    assert_true(ev_num(f, "steps_judged") == 99 && ev_num(f, "steps_with_pause") == 9);
    assert_true(fabs(ev_num(f, "step_median_with_pause_s") - 0.16) < 1e-6);
    assert_true(fabs(ev_num(f, "step_median_without_pause_s") - 0.1) < 1e-6);
    assert_true(fabs(ev_num(f, "young_collections_time_s") - 0.03) < 1e-9);
    assert_true(fabs(ev_num(f, "full_collections_time_s") - 0.9) < 1e-9);
    assert_true(ev_num(f, "frozen_objects") == 0 && ev_num(f, "threshold0") == 700);
    assert_non_null(strstr(f->title, "10 pauses took 6% of the loop's time (median 60.0 ms, "
                                     "longest 60.0 ms)"));
    assert_non_null(strstr(f->advice, "9 of 99 steps held a pause and took 160 ms (median) "
                                      "against 100 ms for the rest"));
    assert_non_null(strstr(f->advice, "10 of them were full collections (generation 2), one "
                                      "every 10 steps"));
    assert_non_null(strstr(f->advice, "Call gc.freeze() once before the loop"));
    assert_non_null(strstr(f->advice, "--manual-gc"));
    assert_null(strstr(f->advice, "DDP"));               /* one process */
    assert_null(strstr(f->advice, "batch preparation")); /* a DataLoader loop */
    done(&run, &a);
}

/* The same pauses with automatic collection off: the job's own
 * gc.collect() every 10 steps.  5.66% / 5% -> every 2 times as many. */
static void test_the_jobs_own_collections_are_told_to_be_fewer(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_full_pauses(w, false);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_true(ev_num(f, "manual_collections") == 10);
    assert_true(isnan(ev_num(f, "young_collections_time_s"))); /* no gc.totals (a crash) */
    /* m = ceil(0.0566 x 0.95 / (0.05 x 0.9434)) = ceil(1.14) = 2: every 20
     * steps, 0.3 s of pauses in 10.3 s = 2.9% (every 10: 5.66%) */
    assert_non_null(strstr(f->advice, "These are the job's own gc.collect() calls, one every 10 "
                                      "steps. Call it less often (2 times fewer calls would cost "
                                      "at most 5% of the time), or gc.freeze()"));
    assert_null(strstr(f->advice, "--manual-gc"));
    done(&run, &a);
}

/* gc.freeze() had run: the walked objects came after it. */
static void test_a_frozen_heap_is_told_to_freeze_later(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double end = put_full_pauses(w, true);
    put_totals(w, end + 0.5, 123456);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_non_null(strstr(f->advice, "gc.freeze() had frozen 123456 objects"));
    assert_null(strstr(f->advice, "Call gc.freeze() once"));
    done(&run, &a);
}

/* 100 steps of 0.125 s, a generation-1 collection of 0.026 s in each:
 * 2.6 s of 12.5 s = 20.8%, high; young collections: the threshold.  Every
 * judged step held one: no steps without one to compare with. */
static void test_young_collections_in_every_step_are_high_and_told_the_threshold(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double end = put_even_steps(w, 100, 0.125);
    for (unsigned k = 0; k < 100; k++)
        put_pause(w, 0.125 * k + 0.05, 0.026, 1, k, true);
    put_totals(w, end + 0.5, 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_true(fabs(ev_num(f, "pause_share") - 2.6 / 12.5) < 1e-6);
    assert_true(ev_num(f, "full_collections") == 0);
    assert_true(isnan(ev_num(f, "steps_between_full_collections")));
    assert_true(ev_num(f, "steps_with_pause") == 99);
    assert_null(strstr(f->advice, "held a pause")); /* no steps without one */
    assert_true(f->advice[0] == 'T');               /* "They were ...": no leading blank */
    assert_non_null(strstr(f->advice, "young-generation collections, started by the loop's own "
                                      "allocations every 700 new objects"));
    assert_non_null(strstr(f->advice, "gc.set_threshold("));
    assert_null(strstr(f->advice, "gc.freeze"));
    done(&run, &a);
}

/* 50 optimizer steps of 0.1 s preparing fast s of batch each, every 5th
 * (0, 5, ... 45) of slow s preparing slow_prep s, with a full collection
 * of pause s beginning at s into it: prep as the agent says (1 or 0), or
 * not said (-1: an older agent) */
static void put_every_fifth(tm_rec *w, double slow, double fast, double slow_prep, double at,
                            double pause, int prep)
{
    double dur[50], pr[50], t = 0;
    for (size_t i = 0; i < 50; i++) {
        dur[i] = i % 5 ? 0.1 : slow;
        pr[i] = i % 5 ? fast : slow_prep;
    }
    put_opt_steps_of(w, 50, dur, pr);
    for (unsigned i = 0; i < 50; t += dur[i], i++)
        if (i % 5 == 0) {
            if (prep < 0)
                put_pause(w, t + at, pause, 2, i, true);
            else
                put_pause_prep(w, t + at, pause, i, prep);
        }
}

/* A loop without a DataLoader: 50 steps of 0.1 s with 2 ms of batch
 * preparation, but steps 0, 5, ... 45 take 0.15 s: a full collection of
 * 0.05 s inside their preparation (0.052 s).  Judged steps 1..49: 40 of
 * 0.1 s waiting 0.002 s, 9 of 0.15 s waiting 0.052 s: 0.08 + 0.468 =
 * 0.548 s of 4.0 + 1.35 = 5.35 s = 10.2%, which the input verdict would
 * read as slow preparation (input.main_prep).  The collector's 9 x 0.05 =
 * 0.45 s of it (82.1% of the preparation) is none: 0.098 / 5.35 = 1.83%
 * waiting, input.ok, and the collector's 0.45 / 5.35 = 8.4% said beside
 * it.  The loop: 40 x 0.1 + 10 x 0.15 = 5.5 s, 10 pauses of 0.05 s =
 * 0.5 s = 9.1%. */
static void test_pauses_in_the_loops_own_preparation_are_no_slow_preparation(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_every_fifth(w, 0.15, 0.002, 0.052, 0.001, 0.05, -1);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "pause_share") - 0.5 / 5.5) < 1e-6);
    assert_true(fabs(ev_num(f, "prep_pause_s") - 0.45) < 1e-6);
    assert_true(fabs(ev_num(f, "prep_pause_share") - 0.45 / 0.548) < 1e-6);
    assert_non_null(strstr(f->advice, "82% of the loop's own batch preparation was the "
                                      "collector"));
    assert_null(tm_analysis_find(a, "input.main_prep"));
    const tm_finding *ok = tm_analysis_find(a, "input.ok");
    assert_non_null(ok);
    assert_true(fabs(a->sum.data_wait_fraction - 0.098 / 5.35) < 1e-6);
    assert_true(fabs(a->sum.gc_wait_fraction - 0.45 / 5.35) < 1e-6);
    /* the time lost and the speed-up, net as well: 0.548 s of wait less
     * 0.45 s = 0.098 s; 5.35 / (5.35 - 0.098) = 1.01866 (gross: 0.548 s,
     * 5.35 / 4.802 = 1.1141); the process's own row too */
    assert_true(fabs(a->sum.time_lost_s - 0.098) < 1e-6);
    assert_true(fabs(a->sum.speedup - 5.35 / 5.252) < 1e-6);
    assert_int_equal(a->nranks, 1);
    assert_true(fabs(a->ranks[0].data_wait_fraction - 0.098 / 5.35) < 1e-6);
    assert_non_null(strstr(ok->title, "waited for data 1.8% of the time (and Python's garbage "
                                      "collector 8% more, pausing in the batch preparation)"));
    done(&run, &a);
}

/* Two processes of the loop above (ranks 0 and 1), only rank 0
 * collecting: rank 1's 50 ms every 5th step is its own preparation.  The
 * run's wait, pooled, is net of rank 0's pauses alone: judged steps 2 x
 * 5.35 s, wait 2 x 0.548 s less 0.45 s = 0.646 s: 6.04%, input.main_prep
 * (netting the pooled wait by rank 0's share, 82%, had said 1.8%,
 * input.ok, and hidden rank 1's 10.2%); each row net of its own. */
static void test_the_runs_wait_is_net_of_each_processs_own_pauses(void **st)
{
    (void)st;
    double dur[50], prep[50];
    for (size_t i = 0; i < 50; i++) {
        dur[i] = i % 5 ? 0.1 : 0.15;
        prep[i] = i % 5 ? 0.002 : 0.052;
    }
    for (int r = 0; r < 2; r++) {
        char file[32], role[16];
        snprintf(file, sizeof file, "rank%d.tmr", r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec *w = open_rec(file, role, r);
        put_opt_steps_of(w, 50, dur, prep);
        double t = 0;
        for (unsigned i = 0; r == 0 && i < 50; t += dur[i], i++)
            if (i % 5 == 0)
                put_pause(w, t + 0.001, 0.05, 2, i, true);
        tm_rec_close(&w);
    }
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_true(fabs(a->sum.gc_wait_fraction - 0.45 / 10.7) < 1e-6);
    assert_true(fabs(a->sum.data_wait_fraction - 0.646 / 10.7) < 1e-6);
    assert_non_null(tm_analysis_find(a, "input.main_prep"));
    assert_null(tm_analysis_find(a, "input.ok"));
    assert_int_equal(a->nranks, 2);
    for (size_t r = 0; r < 2; r++)
        assert_true(fabs(a->ranks[r].data_wait_fraction -
                         (a->ranks[r].rank == 0 ? 0.098 / 5.35 : 0.548 / 5.35)) < 1e-6);
    done(&run, &a);
}

/* The same loop without the pauses: its 20 ms of preparation on a CPU all
 * of the time is CPU-bound preparation, told as such (the advice of the
 * "cpu" cause, not the mixed one). */
static void test_cpu_bound_preparation_is_told_it_is_cpu_bound(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double dur[50], prep[50];
    for (size_t i = 0; i < 50; i++)
        dur[i] = 0.1, prep[i] = 0.02;
    put_opt_steps_of(w, 50, dur, prep);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.main_prep");
    assert_non_null(f);
    assert_null(tm_analysis_find(a, "gc.pauses"));
    assert_true(fabs(ev_num(f, "prep_cpu_share") - 1.0) < 1e-9);
    assert_non_null(strstr(f->advice, "that work is CPU-bound (the thread was on a CPU 100%"));
    assert_null(strstr(f->advice, "partly on a CPU and partly waiting"));
    assert_null(strstr(f->title, "garbage collector"));
    done(&run, &a);
}

/* The loop above, waiting 30 ms for its device before it prepares each
 * batch (build-nanogpt's torch.cuda.synchronize() after the optimizer
 * step, left out of prep_ns by the agent): the pause in every 5th step
 * begins 31 ms in, inside the preparation (prep: true), and the
 * preparation is not [start, start + prep_ns].  All of the pauses' 9 x
 * 0.05 = 0.45 s come off the wait, as in the test above: 0.098 / 5.35 =
 * 1.83%, input.ok.  The overlap with [start, start + 0.052] was 0.021 s a
 * pause: 0.548 - 9 x 0.021 = 0.359 s, 6.7%, read as slow preparation. */
static void test_pauses_after_a_device_wait_are_netted_whole(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_every_fifth(w, 0.15, 0.002, 0.052, 0.031, 0.05, 1);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "prep_pause_s") - 0.45) < 1e-6);
    assert_true(fabs(a->sum.gc_wait_fraction - 0.45 / 5.35) < 1e-6);
    assert_true(fabs(a->sum.data_wait_fraction - 0.098 / 5.35) < 1e-6);
    assert_non_null(tm_analysis_find(a, "input.ok"));
    assert_null(tm_analysis_find(a, "input.main_prep"));
    done(&run, &a);
}

/* A loop preparing 52 ms of batches a step (four micro-batches of 13 ms,
 * each before its forward), 50 steps of 0.1 s, every 5th of 0.14 s: a
 * collection of 0.04 s began 3 ms in, in the first micro-batch's forward
 * (prep: false).  None of it is preparation, though it lies inside
 * [start, start + 0.052]: judged steps 1..49, 40 x 0.1 + 9 x 0.14 =
 * 5.26 s, waiting 49 x 0.052 = 2.548 s: 48.4% (the window had taken
 * 9 x 0.04 = 0.36 s off: 41.6%). */
static void test_pauses_outside_the_preparation_stay_in_the_wait(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_every_fifth(w, 0.14, 0.052, 0.052, 0.003, 0.04, 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_true(ev_num(f, "prep_pause_s") == 0);
    assert_true(a->sum.gc_wait_fraction == 0);
    assert_true(fabs(a->sum.data_wait_fraction - 2.548 / 5.26) < 1e-6);
    assert_non_null(tm_analysis_find(a, "input.main_prep"));
    done(&run, &a);
}

/* A pause can take out no more than the step's preparation: every 5th
 * step of 0.15 s prepares 20 ms and holds a 50 ms pause the agent found
 * in its preparation span (prep: true), begun 1 ms in: 20 ms of each is
 * netted, 9 judged steps x 0.02 = 0.18 s (not 0.45 s). */
static void test_a_pause_nets_at_most_the_steps_preparation(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_every_fifth(w, 0.15, 0.002, 0.02, 0.001, 0.05, 1);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "prep_pause_s") - 0.18) < 1e-6);
    done(&run, &a);
}

/* The loop of test_pauses_after_a_device_wait_are_netted_whole (50 ms
 * pauses 31 ms into every 5th step, prep: true), with the agent's
 * gc.unprep after two of
 * them (steps 10 and 20: the span they began in ended without a forward,
 * at 0.09 s into the step, 0.07 s long: [0.02, 0.09] holds their begin at
 * 0.031): 7 of the 9 judged pauses are netted, 0.35 s, and the wait is
 * 0.548 - 0.35 = 0.198 s of 5.35 s. */
static void test_an_unprep_event_takes_pauses_back(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_every_fifth(w, 0.15, 0.002, 0.052, 0.031, 0.05, 1);
    /* step k starts at 0.1 k + 0.05 * (k / 5 rounded up): 10 -> 1.1, 20 -> 2.2 */
    assert_int_equal(tm_rec_event(w, at(1.1 + 0.09), "gc.unprep", "{\"pauses\":1,\"span_s\":0.07}"),
                     0);
    assert_int_equal(tm_rec_event(w, at(2.2 + 0.09), "gc.unprep", "{\"pauses\":1,\"span_s\":0.07}"),
                     0);
    /* crafted: no window, a negative or huge one: nothing taken back */
    assert_int_equal(tm_rec_event(w, at(3.3 + 0.09), "gc.unprep", "{\"pauses\":1}"), 0);
    assert_int_equal(tm_rec_event(w, at(3.3 + 0.09), "gc.unprep", "{\"span_s\":-1}"), 0);
    assert_int_equal(tm_rec_event(w, at(4.4 + 0.09), "gc.unprep", "{\"span_s\":1e300}"), 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "prep_pause_s") - 0.35) < 1e-6);
    assert_true(fabs(a->sum.gc_wait_fraction - 0.35 / 5.35) < 1e-6);
    assert_true(fabs(a->sum.data_wait_fraction - 0.198 / 5.35) < 1e-6);
    done(&run, &a);
}

/* Two DDP ranks of 100 steps of 0.1 s; each pauses 4 x 0.1 s in full
 * collections, at 0.5, 2.5, 4.5 and 6.5 s, rank 1 shift s later (10 steps
 * a second) */
static void put_ddp_ranks(double shift, bool autogc)
{
    for (int r = 0; r < 2; r++) {
        char file[32], role[16];
        snprintf(file, sizeof file, "rank%d.tmr", r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec *w = open_rec(file, role, r);
        put_even_steps(w, 100, 0.1);
        for (unsigned k = 0; k < 4; k++)
            put_pause(w, 2.0 * k + shift * r + 0.5, 0.1, 2, 20 * k + (unsigned)(10 * shift) * r,
                      autogc);
        tm_rec_close(&w);
    }
}

/* Two DDP ranks, 100 steps of 0.1 s each; each pauses 4 x 0.1 s at steps
 * of its own: 4% each, under 5%, but each pause holds the other at the
 * next all-reduce: 0.8 s of 10 s = 8% together, medium, with medium
 * confidence (an upper bound). */
static void test_ranks_pausing_at_different_steps_are_summed(void **st)
{
    (void)st;
    put_ddp_ranks(1.0, true);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_int_equal(f->confidence, TM_CONF_MEDIUM);
    assert_true(ev_num(f, "processes_pausing") == 2);
    assert_true(fabs(ev_num(f, "all_processes_pause_time_s") - 0.8) < 1e-6);
    assert_true(fabs(ev_num(f, "pause_share") - 0.04) < 1e-6);
    assert_non_null(strstr(f->title, "2 processes paused for 8% of the loop's time together "
                                     "(each at most 4%"));
    assert_non_null(strstr(f->advice, "in DDP every rank then collects at the same step"));
    done(&run, &a);
}

/* Pauses before the first step (building the dataset) and after the last
 * are no loop's; two inside of 0.02 s in a loop of 10 s: 0.4%, no
 * finding, but the summary has them. */
static void test_pauses_outside_the_loop_are_not_counted(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_pause(w, -3.0, 2.5, 2, 0, true);
    put_even_steps(w, 100, 0.1);
    put_pause(w, 3.01, 0.02, 2, 30, true);
    put_pause(w, 6.01, 0.02, 2, 60, true);
    put_pause(w, 10.5, 2.5, 2, 100, true);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gc.pauses"));
    assert_int_equal(a->sum.gc_pauses, 2);
    assert_true(fabs(a->sum.gc_s - 0.04) < 1e-6);
    assert_true(a->sum.gc_every_steps == 30);
    done(&run, &a);
}

/* Events as a crafted file may hold them: no duration, a negative one,
 * no generation, arrays cut short.  Unknowns, no crash, no finding from
 * one readable pause. */
static void test_crafted_gc_events_are_read_as_unknown(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_even_steps(w, 20, 0.1);
    assert_int_equal(tm_rec_event(w, at(0.5), "gc.pause", "{\"gen\":2}"), 0);
    assert_int_equal(tm_rec_event(w, at(0.6), "gc.pause", "{\"dur_s\":-1,\"gen\":2}"), 0);
    assert_int_equal(tm_rec_event(w, at(0.7), "gc.pause", "{\"dur_s\":0.05}"), 0);
    assert_int_equal(tm_rec_event(w, at(0.8), "gc.pause", ""), 0);
    assert_int_equal(tm_rec_event(w, at(3.0), "gc.totals", "{\"time_s\":[0.1,"), 0);
    assert_int_equal(tm_rec_event(w, at(3.1), "gc.totals", "{\"time_s\":[x],\"threshold\":[]}"), 0);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gc.pauses"));
    assert_int_equal(a->sum.gc_pauses, 1);
    assert_int_equal(a->sum.gc_full, 0); /* its generation unknown */
    assert_true(isnan(a->sum.gc_young_s) && isnan(a->sum.gc_threshold0));
    done(&run, &a);
}

/* The job's own gc.collect() at every step: 100 steps of 0.25 s, 0.15 s
 * of it a collection with automatic collection off: 15 of 25 s = 60%.
 * m = ceil(0.6 x 0.95 / (0.05 x 0.4)) = ceil(28.5) = 29: every 29 steps,
 * 0.517 s in 10.517 s = 4.9% (every 28: 5.09%). */
static void test_a_collect_at_every_step_is_told_how_many_times_fewer(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_even_steps(w, 100, 0.25);
    for (unsigned k = 0; k < 100; k++)
        put_pause(w, 0.25 * k + 0.05, 0.15, 2, k, false);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gc.pauses");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_true(fabs(ev_num(f, "pause_share") - 0.6) < 1e-6);
    assert_true(ev_num(f, "steps_between_full_collections") == 1);
    assert_non_null(strstr(f->advice, "These are the job's own gc.collect() calls, one every "
                                      "step. Call it less often (29 times fewer calls would cost "
                                      "at most 5% of the time)"));
    done(&run, &a);
}

/* Two DDP ranks collecting at the same moments (the job's own gc.collect()
 * at the same step on every rank): 4 x 0.1 s each, 4% each, and the time
 * any of them was in a pause is the same 0.4 s: 4% together, no finding
 * (a sum would say 8%). */
static void test_ranks_collecting_together_stall_once(void **st)
{
    (void)st;
    put_ddp_ranks(0, false);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gc.pauses"));
    assert_int_equal(a->sum.gc_procs, 2);
    /* each file's wall clock is anchored when it is opened: the two
     * ranks' "same" moments differ by the microseconds between */
    assert_true(fabs(a->sum.gc_ranks_s - 0.4) < 1e-4);
    done(&run, &a);
}

/* Collections inside a blocking checkpoint save (its pickling allocates)
 * or the agent's own work: the step model took that time out of the
 * steps, and checkpoint.blocking counts it: no pause of the loop's.  The
 * 10 pauses of the first test, all in saves. */
static void test_pauses_inside_a_save_are_not_the_loops(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_even_steps(w, 100, 0.1);
    for (unsigned k = 0; k < 10; k++)
        put_pause_in(w, 1.0 * k + 0.02, 0.06, 2, 10 * k, true, true);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gc.pauses"));
    assert_int_equal(a->sum.gc_pauses, 0);
    done(&run, &a);
}

/* A loop whose preparation sleeps 20 ms (a slow read) and collects for
 * 50 ms on a CPU: 0.05 of its 0.07 s on a CPU (71%, CPU-bound by the
 * 70% line) is the collector's; net of it the preparation waits (0%):
 * input.main_prep with cause "waiting", at 0.02 / 0.17 = 11.8%. */
static void test_the_preparations_cpu_share_is_net_of_the_collector(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    double dur[50], prep[50];
    for (size_t i = 0; i < 50; i++)
        dur[i] = 0.17, prep[i] = 0.07;
    put_opt_steps_cpu(w, 50, dur, prep, 0.05);
    for (unsigned i = 0; i < 50; i++)
        put_pause(w, 0.17 * i + 0.01, 0.05, 2, i, true);
    tm_rec_close(&w);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.main_prep");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "prep_cpu_share")) < 1e-6);
    assert_non_null(strstr(f->evidence, "\"cause\":\"waiting\""));
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.02 / 0.17) < 1e-6);
    assert_non_null(tm_analysis_find(a, "gc.pauses"));
    done(&run, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_full_collections_in_the_loop_are_stalls_told_to_freeze,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_jobs_own_collections_are_told_to_be_fewer, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_frozen_heap_is_told_to_freeze_later, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_young_collections_in_every_step_are_high_and_told_the_threshold, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_pauses_in_the_loops_own_preparation_are_no_slow_preparation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_runs_wait_is_net_of_each_processs_own_pauses,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_pauses_after_a_device_wait_are_netted_whole, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pauses_outside_the_preparation_stay_in_the_wait, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_pause_nets_at_most_the_steps_preparation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_an_unprep_event_takes_pauses_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cpu_bound_preparation_is_told_it_is_cpu_bound, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_ranks_pausing_at_different_steps_are_summed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pauses_outside_the_loop_are_not_counted, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_crafted_gc_events_are_read_as_unknown, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_collect_at_every_step_is_told_how_many_times_fewer,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranks_collecting_together_stall_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pauses_inside_a_save_are_not_the_loops, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_preparations_cpu_share_is_net_of_the_collector,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
