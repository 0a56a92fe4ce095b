/*
 * test_oom.c - gpu_mem.oom from the OOM summary (src/lib/rules_gpu_mem.c,
 * docs/DIAGNOSIS.md "gpu_mem.oom"): each test writes a run directory with
 * OOM records and their summaries as the CPython extension does, loads it
 * and checks the cause, the remedy and the numbers, worked out by hand in
 * the comments.
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

#include "trainmon.h"

#include "reportfmt.h"

#define FX_NAME "test_oom"
#include "fixture.h"

static size_t count(const tm_analysis *a, const char *id)
{
    const tm_finding *list;
    size_t n = tm_analysis_findings(a, &list), k = 0;
    for (size_t i = 0; i < n; i++)
        k += strcmp(list[i].id, id) == 0;
    return k;
}

/* One OOM (seq) at step 9 and, unless sum is NULL, its summary. */
static void put_oom(tm_rec *w, uint32_t seq, double req, double free, const tm_inproc_oomsum *sum)
{
    uint8_t buf[2048];
    tm_inproc_oom o = {.device = 0,
                       .seq = seq,
                       .step = 9,
                       .source = TM_OOM_OBSERVER,
                       .requested = req,
                       .free_device = free,
                       .total_device = 80 * GiB,
                       .allocated = 40 * GiB,
                       .reserved = 41 * GiB,
                       .phase = "",
                       .snapshot = "oom-rank0-1.pickle",
                       .snapshot_len = 18};
    int len = tm_inproc_encode_oom(&o, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_OOM, T0 + S_NS, buf, (uint32_t)len), 0);
    if (!sum)
        return;
    len = tm_inproc_encode_oomsum(sum, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_OOMSUM, T0 + S_NS, buf, (uint32_t)len), 0);
}

/* A summary of the live bytes by category (MiB) and the free pieces. */
static tm_inproc_oomsum sum_of(uint32_t seq, double req, double free, double largest, double cached,
                               double pieces, double expandable, double par, double grad,
                               double state, double other)
{
    tm_inproc_oomsum s = {.seq = seq,
                          .device = 0,
                          .step = 9,
                          .status = TM_OOMSUM_OK,
                          .pool = TM_OOMSUM_LARGE,
                          .requested = req * MiB,
                          .free_device = free * MiB,
                          .largest_free = largest * MiB,
                          .free_cached = cached * MiB,
                          .fragments = pieces,
                          .expandable = expandable * MiB,
                          .reserved = (par + grad + state + other + cached) * MiB,
                          .live = (par + grad + state + other) * MiB,
                          .live_params = par * MiB,
                          .live_grads = grad * MiB,
                          .live_optim_state = state * MiB,
                          .live_other = other * MiB,
                          .live_unknown = 0,
                          .blocks = 40,
                          .site1_bytes = 2048 * MiB,
                          .site2_bytes = NAN,
                          .site3_bytes = NAN,
                          .site4_bytes = NAN,
                          .site5_bytes = NAN,
                          .why = "",
                          .site1 = "/job/model.py:88:attention",
                          .site1_len = 26,
                          .site2 = "",
                          .site3 = "",
                          .site4 = "",
                          .site5 = ""};
    return s;
}

static const tm_finding *oom_finding(tm_run **run, tm_analysis **a)
{
    *a = analyze(run);
    assert_int_equal(count(*a, "gpu_mem.oom"), 1);
    return tm_analysis_find(*a, "gpu_mem.oom");
}

static bool ev_has(const tm_finding *f, const char *kv)
{
    return strstr(f->evidence, kv) != NULL;
}

static void test_fragmentation_leads_with_the_largest_piece_and_expandable_segments(void **st)
{
    (void)st;
    /* Asked for 1024 MiB with 256 free; 37 cached pieces hold 1280 MiB, the
     * largest 200: free in total 256 + 1280 = 1536 MiB = 1.50 GiB >= 1024
     * but no piece and not the device fit it: fragmentation.  Expandable
     * segments: 256 + 1382 of whole pages = 1638 MiB = 1.60 GiB >= 1024. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0); /* a training process */
    tm_inproc_oomsum s = sum_of(1, 1024, 256, 200, 1280, 37, 1638, 512, 512, 1024, 3000);
    put_oom(w, 1, 1024 * MiB, 256 * MiB, &s);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = oom_finding(&run, &a);
    assert_true(ev_has(f, "\"cause\":\"fragmentation\""));
    assert_non_null(strstr(f->title, "asked for 1.00 GiB; 1.50 GiB free but the largest piece "
                                     "is 200.0 MiB (37 pieces): fragmentation"));
    assert_non_null(strstr(f->advice, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True would "
                                      "have fit it (1.60 GiB usable"));
    assert_true(f->advice == strstr(f->advice, "PYTORCH_CUDA_ALLOC_CONF"));
    assert_true(ev_num(f, "largest_free_bytes") == 200 * MiB);
    assert_true(ev_num(f, "free_pieces") == 37);
    assert_true(ev_num(f, "expandable_usable_bytes") == 1638 * MiB);
    assert_true(ev_has(f, "\"site1\":\"/job/model.py:88:attention\""));
    assert_true(ev_num(f, "site1_bytes") == 2048 * MiB);
    done(&run, &a);
}

static void test_fragmentation_that_expandable_segments_would_not_fix_says_so(void **st)
{
    (void)st;
    /* 1024 MiB asked; 100 free + 1000 cached = 1100 >= 1024: fragmented,
     * but the pieces' whole pages give only 100 + 900 = 1000 < 1024. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0); /* a training process */
    tm_inproc_oomsum s = sum_of(1, 1024, 100, 300, 1000, 50, 1000, 512, 512, 1024, 3000);
    put_oom(w, 1, 1024 * MiB, 100 * MiB, &s);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = oom_finding(&run, &a);
    assert_true(ev_has(f, "\"cause\":\"fragmentation\""));
    assert_non_null(strstr(f->advice, "would not have fit it alone (1000.0 MiB usable)"));
    done(&run, &a);
}

static void test_live_activations_say_checkpointing_and_the_anatomys_bytes_per_sample(void **st)
{
    (void)st;
    /* 512 MiB asked with 100 free, 20 cached (not enough together: no
     * fragmentation).  Live 256 + 0 + 512 + 3072 = 3840 MiB = 3.75 GiB;
     * other 3072 = 3.00 GiB is 80% >= 50%.  Half the micro-batch saves
     * 1536 MiB = 1.50 GiB.  The anatomy measured 12 GiB of activations at a
     * batch of 32: 12 GiB / 32 = 384 MiB per sample. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0); /* a training process */
    uint8_t buf[256];
    tm_inproc_anatomy x = {.step = 1,
                           .device = 0,
                           .params = 1 * GiB,
                           .grads = 1 * GiB,
                           .optim_state = 2 * GiB,
                           .activations = 12 * GiB,
                           .allocated = 16 * GiB,
                           .reserved = 16 * GiB,
                           .free_device = 60 * GiB,
                           .total_device = 80 * GiB,
                           .batch_size = 32,
                           .reason = TM_ANATOMY_FIRST,
                           .kind = "cuda",
                           .kind_len = 4};
    int len = tm_inproc_encode_anatomy(&x, buf, sizeof buf);
    assert_int_equal(tm_rec_append(w, TM_REC_ANATOMY, T0, buf, (uint32_t)len), 0);
    tm_inproc_oomsum s = sum_of(1, 512, 100, 20, 20, 1, 120, 256, 0, 512, 3072);
    put_oom(w, 1, 512 * MiB, 100 * MiB, &s);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = oom_finding(&run, &a);
    assert_true(ev_has(f, "\"cause\":\"activations\""));
    assert_non_null(strstr(f->title, "activations and temporaries hold 3.00 GiB of the 3.75 GiB "
                                     "live (80%)"));
    assert_true(f->advice == strstr(f->advice, "Activation checkpointing"));
    assert_non_null(strstr(f->advice, "saves about 1.50 GiB"));
    assert_non_null(strstr(f->advice, "384.0 MiB of activations per sample at a batch of 32"));
    assert_true(ev_num(f, "half_micro_batch_saves_bytes") == 1536 * MiB);
    assert_true(ev_num(f, "anatomy_activations_per_sample_bytes") == 384 * MiB);
    done(&run, &a);
}

static void test_optimizer_state_says_what_sharding_over_the_ranks_and_8_bit_save(void **st)
{
    (void)st;
    /* Two ranks, each: 2048 MiB asked with 1024 free, 256 cached; live
     * 2048 + 2048 + 4096 + 512 = 8704 MiB = 8.50 GiB, the state 4096/8704 =
     * 47% >= 35% (other 6% < 50%).  Over the 2 ranks sharding saves
     * 4096 x 1/2 = 2048 MiB = 2.00 GiB; 8-bit 4096 x 3/4 = 3072 = 3.00 GiB. */
    for (int r = 0; r < 2; r++) {
        char file[32], role[32];
        snprintf(file, sizeof file, "rank%d.tmr", r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec *w = open_rec(file, role, r);
        put_steps(w, 10, 0, 0.1, 0); /* a training process */
        tm_inproc_oomsum s = sum_of(1, 2048, 1024, 256, 256, 1, 1280, 2048, 2048, 4096, 512);
        put_oom(w, 1, 2048 * MiB, 1024 * MiB, &s);
        tm_rec_close(&w);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(count(a, "gpu_mem.oom"), 2);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.oom");
    assert_true(ev_has(f, "\"cause\":\"optimizer_state\""));
    assert_non_null(strstr(f->title, "the optimizer's state holds 4.00 GiB of the 8.50 GiB live "
                                     "(47%)"));
    assert_true(f->advice == strstr(f->advice, "Shard the optimizer's state over 2 ranks"));
    assert_non_null(strstr(f->advice, "saving 2.00 GiB"));
    assert_non_null(strstr(f->advice, "3.00 GiB"));
    assert_true(ev_num(f, "sharding_saves_bytes") == 2048 * MiB);
    assert_true(ev_num(f, "eight_bit_saves_bytes") == 3072 * MiB);
    done(&run, &a);
}

static void test_parameters_and_gradients_over_half_say_sharding_them(void **st)
{
    (void)st;
    /* Live 3072 + 3072 + 0 + 1024 = 7168 MiB; other 1024/7168 = 14%, state
     * 0; parameters and gradients 6144/7168 = 86% >= 50%.  One process: 8
     * ranks as the example, 6144 x 7/8 = 5376 MiB = 5.25 GiB. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0); /* a training process */
    tm_inproc_oomsum s = sum_of(1, 2048, 10, 2, 2, 1, 12, 3072, 3072, 0, 1024);
    put_oom(w, 1, 2048 * MiB, 10 * MiB, &s);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a;
    const tm_finding *f = oom_finding(&run, &a);
    assert_true(ev_has(f, "\"cause\":\"parameters\""));
    assert_non_null(strstr(f->title, "the parameters and their gradients hold 6.00 GiB of the "
                                     "7.00 GiB live (86%)"));
    assert_non_null(strstr(f->advice, "saving 5.25 GiB"));
    done(&run, &a);
}

static void test_a_summary_without_a_snapshot_or_an_optimizer_falls_back_to_the_peak(void **st)
{
    (void)st;
    /* OOM 1 has a summary that could not read a snapshot: the OOM record's
     * own numbers judge it, as before summaries: 100 MiB free plus the
     * cached 41 - 40 = 1 GiB >= 512 MiB asked: fragmentation.  OOM 2's
     * summary read 20 MiB cached (100 + 20 < 512: not fragmented) and its
     * live bytes are all unknown (no optimizer): not split by category, it
     * says the peak.  Each OOM is joined to its own summary by seq. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0); /* a training process */
    tm_inproc_oomsum s1 = {.seq = 1,
                           .device = 0,
                           .status = TM_OOMSUM_NO_SNAPSHOT,
                           .pool = TM_OOMSUM_LARGE,
                           .requested = 512 * MiB,
                           .free_device = 100 * MiB,
                           .largest_free = NAN,
                           .free_cached = NAN,
                           .fragments = NAN,
                           .expandable = NAN,
                           .reserved = NAN,
                           .live = NAN,
                           .live_params = NAN,
                           .live_grads = NAN,
                           .live_optim_state = NAN,
                           .live_other = NAN,
                           .live_unknown = NAN,
                           .blocks = NAN,
                           .site1_bytes = NAN,
                           .site2_bytes = NAN,
                           .site3_bytes = NAN,
                           .site4_bytes = NAN,
                           .site5_bytes = NAN,
                           .why = "the allocator snapshot failed",
                           .why_len = 29,
                           .site1 = "",
                           .site2 = "",
                           .site3 = "",
                           .site4 = "",
                           .site5 = ""};
    put_oom(w, 1, 512 * MiB, 100 * MiB, &s1);
    tm_inproc_oomsum s2 = sum_of(2, 512, 100, 20, 20, 1, 120, 0, 0, 0, 3840);
    s2.live_params = s2.live_grads = s2.live_optim_state = s2.live_other = NAN;
    s2.live_unknown = 3840 * MiB;
    put_oom(w, 2, 512 * MiB, 100 * MiB, &s2);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(count(a, "gpu_mem.oom"), 2);
    const tm_finding *list;
    size_t n = tm_analysis_findings(a, &list), seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(list[i].id, "gpu_mem.oom") != 0)
            continue;
        const tm_finding *f = &list[i];
        if (seen++ == 0) {
            assert_true(ev_has(f, "\"cause\":\"fragmentation\""));
            assert_true(ev_has(f, "\"snapshot_status\":\"no_snapshot\""));
            assert_true(ev_has(f, "\"snapshot_why\":\"the allocator snapshot failed\""));
        } else {
            assert_true(ev_has(f, "\"cause\":\"peak\""));
            assert_true(ev_has(f, "\"snapshot_status\":\"ok\""));
            assert_true(ev_num(f, "live_unknown_bytes") == 3840 * MiB);
        }
    }
    assert_int_equal(seen, 2);
    done(&run, &a);
}

/* A job that waited for data 60% of each step (input.data_wait, high) and
 * then ran out of memory (high): the OOM ended the run, so it leads the
 * findings and is the report's verdict, though the input rule comes first
 * in the rule table. */
static void test_the_oom_that_ended_the_run_leads_a_slowdown_of_the_same_severity(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.06);
    tm_inproc_oomsum s = sum_of(1, 512, 100, 20, 20, 1, 120, 256, 0, 512, 3072);
    put_oom(w, 1, 512 * MiB, 100 * MiB, &s);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *list;
    size_t n = tm_analysis_findings(a, &list);
    assert_true(n >= 2);
    const tm_finding *in = tm_analysis_find(a, "input.data_wait");
    assert_non_null(in);
    assert_int_equal(in->severity, TM_SEV_HIGH);
    assert_string_equal(list[0].id, "gpu_mem.oom");
    tm_rpt_head h;
    tm_rpt_headline(a, &h);
    assert_ptr_equal(h.f, &list[0]);
    assert_non_null(strstr(h.verdict, "CUDA out of memory"));
    done(&run, &a);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_fragmentation_leads_with_the_largest_piece_and_expandable_segments),
        T(test_fragmentation_that_expandable_segments_would_not_fix_says_so),
        T(test_live_activations_say_checkpointing_and_the_anatomys_bytes_per_sample),
        T(test_optimizer_state_says_what_sharding_over_the_ranks_and_8_bit_save),
        T(test_parameters_and_gradients_over_half_say_sharding_them),
        T(test_a_summary_without_a_snapshot_or_an_optimizer_falls_back_to_the_peak),
        T(test_the_oom_that_ended_the_run_leads_a_slowdown_of_the_same_severity),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
