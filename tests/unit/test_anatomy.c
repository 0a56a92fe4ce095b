/*
 * test_anatomy.c - the memory anatomy in a run (src/lib/anatomy.c) and its
 * findings (src/lib/rules_anatomy.c, docs/DIAGNOSIS.md "anatomy.*").  Each
 * test writes a run directory with anatomy records as the CPython
 * extension does (tm_inproc_encode_anatomy), loads it and checks the
 * finding against numbers worked out by hand in the comments.
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

#include "anatomy.h"
#include "trainmon.h"

#define FX_NAME "test_anatomy"
#include "fixture.h"

static int64_t T0;

/* Ten steps of 0.1 s, so that the file is a training process. */
static void put_anatomy_steps(tm_rec *w)
{
    uint8_t buf[128];
    for (uint64_t i = 0; i < 10; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = T0 + (int64_t)i * S_NS / 10,
                            .end_ns = T0 + (int64_t)(i + 1) * S_NS / 10};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
}

/* One anatomy record of cuda:0, in GiB; allocated is worked out as the
 * glue measures it (gradients set to None at the backward's start). */
struct anat {
    uint64_t step;
    double params, grads, state, act, reserved, free, total;
    int64_t batch;
};

static void put_anatomy(tm_rec *w, struct anat a)
{
    uint8_t buf[256];
    tm_inproc_anatomy x = {.step = a.step,
                           .device = 0,
                           .params = a.params * GiB,
                           .grads = a.grads * GiB,
                           .optim_state = a.state * GiB,
                           .activations = a.act * GiB,
                           .unknown = 0,
                           .allocated = (a.params + a.state + a.act) * GiB,
                           .reserved = a.reserved * GiB,
                           .free_device = a.free * GiB,
                           .total_device = a.total * GiB,
                           .batch_size = a.batch,
                           .reason = a.step > 1 ? TM_ANATOMY_CHANGED : TM_ANATOMY_FIRST,
                           .kind = "cuda",
                           .kind_len = 4};
    int len = tm_inproc_encode_anatomy(&x, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(
        tm_rec_append(w, TM_REC_ANATOMY, T0 + (int64_t)a.step * S_NS / 10, buf, (uint32_t)len), 0);
}

static size_t count(const tm_analysis *a, const char *id)
{
    const tm_finding *list;
    size_t n = tm_analysis_findings(a, &list), k = 0;
    for (size_t i = 0; i < n; i++)
        k += strcmp(list[i].id, id) == 0;
    return k;
}

static void test_adam_state_over_a_third_says_what_sharding_and_8_bit_save(void **st)
{
    (void)st;
    /* Two ranks, each: 1 G fp32 parameters (4 GiB), gradients 4 GiB, Adam's
     * two moments 8 GiB, activations 2 GiB.  Accounted 4+4+8+2 = 18 GiB;
     * the state is 8/18 = 44% >= 35%.  Sharded over the 2 ranks it saves
     * 8 * (2-1)/2 = 4 GiB per rank; 8-bit moments save 3/4 of 8 = 6 GiB. */
    for (int r = 0; r < 2; r++) {
        char file[32], role[32];
        snprintf(file, sizeof file, "rank%d.tmr", r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec *w = open_rec(file, role, r);
        put_anatomy_steps(w);
        put_anatomy(w, (struct anat){1, 4, 4, 8, 2, 16, 60, 80, 8});
        tm_rec_close(&w);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(count(a, "anatomy.optimizer_state"), 2);
    const tm_finding *f = tm_analysis_find(a, "anatomy.optimizer_state");
    assert_string_equal(tm_severity_name(f->severity), "low");
    assert_true(fabs(ev_num(f, "optim_state_share") - 8.0 / 18) < 1e-5);
    assert_true(ev_num(f, "accounted_bytes") == 18 * GiB);
    assert_true(ev_num(f, "shard_ranks") == 2);
    assert_true(ev_num(f, "sharding_saves_bytes") == 4 * GiB);
    assert_true(ev_num(f, "eight_bit_saves_bytes") == 6 * GiB);
    assert_true(ev_num(f, "state_per_param_byte") == 2);
    assert_non_null(strstr(f->title, "44%"));
    assert_non_null(strstr(f->title, "8.00 GiB of 18.00 GiB"));
    assert_non_null(strstr(f->advice, "saves 4.00 GiB"));
    assert_non_null(strstr(f->advice, "6.00 GiB"));
    /* 2/18 of activations: not dominating */
    assert_int_equal(count(a, "anatomy.activations"), 0);
    done(&run, &a);
}

static void test_activations_over_half_say_what_half_the_micro_batch_saves(void **st)
{
    (void)st;
    /* Parameters 1 GiB, gradients 1, state 2, activations 12 GiB at a
     * batch of 32: accounted 16 GiB, activations 12/16 = 75% >= 50%.  Half
     * the micro-batch saves 6 GiB; per sample 12/32 GiB = 384 MiB.  The
     * state, 2/16 = 12.5%, does not dominate. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_anatomy_steps(w);
    put_anatomy(w, (struct anat){1, 1, 1, 2, 12, 16, 60, 80, 32});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "anatomy.activations");
    assert_non_null(f);
    assert_true(ev_num(f, "activations_share") == 0.75);
    assert_true(ev_num(f, "half_micro_batch_saves_bytes") == 6 * GiB);
    assert_true(ev_num(f, "activations_per_sample_bytes") == 384.0 * 1024 * 1024);
    assert_non_null(strstr(f->title, "75%"));
    assert_non_null(strstr(f->title, "384.0 MiB per sample of a batch of 32"));
    assert_non_null(strstr(f->advice, "saves about 6.00 GiB"));
    assert_int_equal(count(a, "anatomy.optimizer_state"), 0);
    done(&run, &a);
}

static void test_largest_micro_batch_from_activations_per_sample_and_free_memory(void **st)
{
    (void)st;
    /* An 80 GiB device: parameters 4 GiB, gradients 4, state 8, 10 GiB of
     * activations at a batch of 16 (0.625 GiB per sample); reserved 24 GiB,
     * free 56 GiB.  Usable: 90% of (56 + 24) = 72 GiB; less the fixed
     * 4 + 4 + 8 = 16 GiB leaves 56 GiB for activations: 56 / 0.625 = 89.6,
     * so a micro-batch of 89. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_anatomy_steps(w);
    put_anatomy(w, (struct anat){1, 4, 4, 8, 10, 24, 56, 80, 16});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "anatomy.max_micro_batch");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "info");
    assert_true(ev_num(f, "max_micro_batch") == 89);
    assert_true(ev_num(f, "activations_per_sample_bytes") == 0.625 * GiB);
    assert_true(ev_num(f, "fixed_bytes") == 16 * GiB);
    assert_non_null(strstr(f->title, "about 89 would fit on cuda:0 (now 16)"));
    assert_non_null(strstr(f->advice, "linearly"));
    done(&run, &a);
}

static void test_a_full_device_says_no_larger_micro_batch_fits(void **st)
{
    (void)st;
    /* Free 0, reserved 20 GiB: usable 18 GiB, fixed 4 + 4 + 8 = 16 GiB,
     * room 2 GiB / 0.625 = 3.2: 3, below the 16 it runs with. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_anatomy_steps(w);
    put_anatomy(w, (struct anat){1, 4, 4, 8, 10, 20, 0, 80, 16});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "anatomy.max_micro_batch");
    assert_non_null(f);
    assert_true(ev_num(f, "max_micro_batch") == 3);
    assert_non_null(strstr(f->title, "no micro-batch larger than 16 fits"));
    done(&run, &a);
}

static void test_the_latest_anatomy_of_a_device_is_the_one_judged(void **st)
{
    (void)st;
    /* The first record has the state dominating (8 of 18 GiB); a later
     * check found it sharded to 1 GiB (1 of 11): no finding. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_anatomy_steps(w);
    put_anatomy(w, (struct anat){1, 4, 4, 8, 2, 16, 60, 80, -1});
    put_anatomy(w, (struct anat){1024, 4, 4, 1, 2, 16, 60, 80, -1});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(count(a, "anatomy.optimizer_state"), 0);
    /* no batch size: no estimate */
    assert_int_equal(count(a, "anatomy.max_micro_batch"), 0);
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    assert_int_equal(tm_anat_latest(run, UINT32_MAX, rows, TM_ANAT_MAX), 1);
    assert_true(rows[0]->a.step == 1024 && rows[0]->a.optim_state == 1 * GiB);
    assert_true(tm_anat_accounted(&rows[0]->a) == 11 * GiB);
    done(&run, &a);
}

static void test_small_cpu_models_and_unknown_parts_give_no_finding(void **st)
{
    (void)st;
    /* A CPU model of 8320 bytes with Adam (state 16648): the state is 40%
     * of what is accounted, but far below 256 MiB; activations unknown. */
    tm_rec *w = open_rec("pid7.tmr", "pid7", -1);
    put_anatomy_steps(w);
    uint8_t buf[256];
    tm_inproc_anatomy x = {.step = 1,
                           .device = -1,
                           .params = 8320,
                           .grads = 8320,
                           .optim_state = 16648,
                           .activations = NAN,
                           .allocated = NAN,
                           .reserved = NAN,
                           .free_device = NAN,
                           .total_device = NAN,
                           .batch_size = -1,
                           .reason = TM_ANATOMY_FIRST,
                           .kind = "cpu\n<b>",
                           .kind_len = 7};
    int len = tm_inproc_encode_anatomy(&x, buf, sizeof buf);
    assert_int_equal(tm_rec_append(w, TM_REC_ANATOMY, T0, buf, (uint32_t)len), 0);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(count(a, "anatomy.optimizer_state") + count(a, "anatomy.activations") +
                         count(a, "anatomy.max_micro_batch"),
                     0);
    const tm_run_anatomy *rows[4];
    assert_int_equal(tm_anat_latest(run, UINT32_MAX, rows, 4), 1);
    char dev[64];
    tm_anat_device(dev, sizeof dev, &rows[0]->a);
    assert_string_equal(dev, "cpu__b_"); /* a crafted kind cannot reach a report raw */
    assert_true(tm_anat_accounted(&rows[0]->a) == 8320 + 8320 + 16648);
    /* the text report shows the table */
    tm_text *t = tm_text_new(1 << 20);
    assert_non_null(t);
    assert_int_equal(tm_report_write(run, a, t, false), 0);
    size_t tlen;
    const char *out = tm_text_data(t, &tlen);
    assert_non_null(strstr(out, "memory anatomy"));
    assert_non_null(strstr(out, "8.1 KiB"));
    /* and the HTML one a stacked bar: three parts (no activations) */
    tm_text_reset(t);
    assert_int_equal(tm_report_html(run, a, t), 0);
    out = tm_text_data(t, &tlen);
    const char *h = strstr(out, "<h2>Memory anatomy</h2>");
    assert_non_null(h);
    size_t rects = 0;
    for (const char *p = h; (p = strstr(p, "<rect")) && p < strstr(h, "</table>"); p++)
        rects++;
    assert_int_equal(rects, 3);
    assert_null(strstr(out, "cpu\n<b>"));
    tm_text_free(&t);
    done(&run, &a);
}

static void test_metrics_show_the_latest_anatomy_of_each_device(void **st)
{
    (void)st;
    /* The follower behind /metrics reads both records of cuda:0 and keeps
     * the latest (state 1 GiB); activations unknown in neither: 2 GiB. */
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_anatomy_steps(w);
    put_anatomy(w, (struct anat){1, 4, 4, 8, 2, 16, 60, 80, -1});
    put_anatomy(w, (struct anat){1024, 4, 4, 1, 2, 16, 60, 80, -1});
    tm_rec_close(&w);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = tm_follow_rank_at(f, 0, 0);
    assert_non_null(k);
    assert_int_equal(k->nanat, 1);
    assert_string_equal(k->anat[0].device, "cuda:0");
    assert_true(k->anat[0].bytes[TM_ANAT_STATE] == 1 * GiB);
    tm_prom_rank pr;
    tm_prom_rank_set(&pr, k);
    tm_prom_run run = {
        .name = "exp1", .host = "h", .last_record_age_s = NAN, .nranks = 1, .ranks = &pr};
    tm_text *t = tm_text_new(1 << 20);
    assert_int_equal(tm_prom_write_runs(t, &run, 1), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "# TYPE trainmon_run_memory_anatomy_bytes gauge\n"));
    assert_non_null(strstr(s, "trainmon_run_memory_anatomy_bytes{run=\"exp1\",rank=\"0\","
                              "device=\"cuda:0\",part=\"optim_state\"} 1073741824\n"));
    assert_non_null(strstr(s, "part=\"activations\"} 2147483648\n"));
    tm_text_free(&t);
    tm_follow_close(&f);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_adam_state_over_a_third_says_what_sharding_and_8_bit_save),
        T(test_activations_over_half_say_what_half_the_micro_batch_saves),
        T(test_largest_micro_batch_from_activations_per_sample_and_free_memory),
        T(test_a_full_device_says_no_larger_micro_batch_fits),
        T(test_the_latest_anatomy_of_a_device_is_the_one_judged),
        T(test_small_cpu_models_and_unknown_parts_give_no_finding),
        T(test_metrics_show_the_latest_anatomy_of_each_device),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
