/*
 * test_inproc.c - the in-process record payloads (src/lib/inproc.c):
 * encode/decode round trips, refusal of short payloads, and the lines
 * `trainmon dump` prints for them.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "trainmon.h"

static tm_record rec_of(uint16_t type, const uint8_t *buf, int len)
{
    tm_record r = {.type = type, .t_ns = 1000, .len = (uint32_t)len, .payload = buf};
    return r;
}

static void test_step_round_trips(void **st)
{
    (void)st;
    uint8_t buf[64];
    tm_inproc_step s = {.step = 7, .start_ns = 100, .end_ns = 300, .data_wait_ns = 50,
                        .flags = TM_STEP_ENDED_BY_STOP};
    int n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 40);
    tm_record r = rec_of(TM_REC_STEP, buf, n);
    tm_inproc_step o;
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.step == 7 && o.start_ns == 100 && o.end_ns == 300 && o.data_wait_ns == 50);
    assert_int_equal(o.flags, TM_STEP_ENDED_BY_STOP);
}

static void test_capture_round_trips_with_nan_and_tag(void **st)
{
    (void)st;
    uint8_t buf[256];
    tm_inproc_capture c = {.source = TM_CAPTURE_USER, .device = -1, .step = 3,
                           .allocated = NAN, .reserved = 2e9, .peak_allocated = NAN,
                           .active = NAN, .inactive_split = NAN, .requested = NAN,
                           .free_device = NAN, .total_device = NAN,
                           .num_alloc_retries = NAN, .num_ooms = NAN, .host_rss = 1e8,
                           .tag = "fwd", .tag_len = 3};
    int n = tm_inproc_encode_capture(&c, buf, sizeof buf);
    assert_int_equal(n, 108 + 3);
    tm_record r = rec_of(TM_REC_CAPTURE, buf, n);
    tm_inproc_capture o;
    assert_int_equal(tm_inproc_decode_capture(&r, &o), 0);
    assert_true(isnan(o.allocated));
    assert_true(o.reserved == 2e9 && o.host_rss == 1e8 && o.device == -1 && o.step == 3);
    assert_int_equal(o.tag_len, 3);
    assert_memory_equal(o.tag, "fwd", 3);
}

static void test_capture_whose_tag_runs_past_the_payload_is_refused(void **st)
{
    (void)st;
    uint8_t buf[256];
    tm_inproc_capture c = {.tag = "abcdef", .tag_len = 6};
    int n = tm_inproc_encode_capture(&c, buf, sizeof buf);
    tm_record r = rec_of(TM_REC_CAPTURE, buf, n - 1);
    tm_inproc_capture o;
    assert_int_equal(tm_inproc_decode_capture(&r, &o), -EINVAL);
}

static void test_oom_round_trips_phase_and_snapshot(void **st)
{
    (void)st;
    uint8_t buf[256];
    tm_inproc_oom o = {.device = 1, .seq = 2, .step = 40, .source = TM_OOM_OBSERVER,
                       .requested = 1073741824.0, .free_device = 5e6, .total_device = 8e10,
                       .allocated = NAN, .reserved = NAN, .phase = "backward", .phase_len = 8,
                       .snapshot = "oom-rank0-1.pickle", .snapshot_len = 18};
    int n = tm_inproc_encode_oom(&o, buf, sizeof buf);
    tm_record r = rec_of(TM_REC_OOM, buf, n);
    tm_inproc_oom d;
    assert_int_equal(tm_inproc_decode_oom(&r, &d), 0);
    assert_true(d.device == 1 && d.seq == 2 && d.step == 40 && d.requested == 1073741824.0);
    assert_memory_equal(d.phase, "backward", 8);
    assert_memory_equal(d.snapshot, "oom-rank0-1.pickle", 18);
}

static void test_encoder_refuses_a_small_buffer(void **st)
{
    (void)st;
    uint8_t buf[16];
    tm_inproc_worker w = {.worker_id = 1};
    assert_int_equal(tm_inproc_encode_worker(&w, buf, sizeof buf), -ENOSPC);
}

static void test_format_prints_step_as_text_and_json(void **st)
{
    (void)st;
    uint8_t buf[64];
    char line[TM_INPROC_FORMAT_MAX];
    tm_inproc_step s = {.step = 12, .start_ns = 0, .end_ns = 100000000, .data_wait_ns = 25000000};
    tm_record r = rec_of(TM_REC_STEP, buf, tm_inproc_encode_step(&s, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, false, line, sizeof line) > 0);
    assert_string_equal(line, "step 12 dur=0.100000s wait=0.025000s start_ns=0");
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_string_equal(line, "\"type\":\"step\",\"step\":12,\"duration_s\":0.100000000,"
                              "\"data_wait_s\":0.025000000,\"start_ns\":0}");
}

static void test_format_leaves_unavailable_fields_out_and_escapes_tags(void **st)
{
    (void)st;
    uint8_t buf[256];
    char line[TM_INPROC_FORMAT_MAX];
    tm_inproc_capture c = {.source = TM_CAPTURE_USER, .device = -1, .allocated = NAN,
                           .reserved = NAN, .peak_allocated = NAN, .active = NAN,
                           .inactive_split = NAN, .requested = NAN, .free_device = NAN,
                           .total_device = NAN, .num_alloc_retries = NAN, .num_ooms = NAN,
                           .host_rss = 4096, .tag = "a\"b", .tag_len = 3};
    tm_record r = rec_of(TM_REC_CAPTURE, buf, tm_inproc_encode_capture(&c, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_string_equal(line, "\"type\":\"capture\",\"source\":\"user\",\"tag\":\"a\\\"b\","
                              "\"step\":0,\"host_rss\":4096}");
}

static void test_format_says_which_records_are_not_its_own(void **st)
{
    (void)st;
    char line[64];
    uint8_t b[8] = {0};
    tm_record r = rec_of(TM_REC_EVENT, b, 8);
    assert_int_equal(tm_inproc_format(&r, false, line, sizeof line), -ENOENT);
    r = rec_of(TM_REC_STEP, b, 8);
    assert_int_equal(tm_inproc_format(&r, false, line, sizeof line), -EINVAL);
    uint8_t sb[64];
    tm_inproc_step s = {.step = 1};
    r = rec_of(TM_REC_STEP, sb, tm_inproc_encode_step(&s, sb, sizeof sb));
    assert_int_equal(tm_inproc_format(&r, false, line, 8), -ENOSPC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_round_trips),
        cmocka_unit_test(test_capture_round_trips_with_nan_and_tag),
        cmocka_unit_test(test_capture_whose_tag_runs_past_the_payload_is_refused),
        cmocka_unit_test(test_oom_round_trips_phase_and_snapshot),
        cmocka_unit_test(test_encoder_refuses_a_small_buffer),
        cmocka_unit_test(test_format_prints_step_as_text_and_json),
        cmocka_unit_test(test_format_leaves_unavailable_fields_out_and_escapes_tags),
        cmocka_unit_test(test_format_says_which_records_are_not_its_own),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
