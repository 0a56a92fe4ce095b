/*
 * test_inproc.c - the in-process record payloads (src/lib/inproc.c):
 * encode/decode round trips, refusal of short payloads, the byte layout of
 * docs/FORMAT.md, the schema table, and the lines `trainmon dump` (and,
 * through tm_inproc_json, export jsonl) prints for them.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
    tm_inproc_step s = {.step = 7,
                        .start_ns = 100,
                        .end_ns = 300,
                        .data_wait_ns = 50,
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
    tm_inproc_capture c = {.source = TM_CAPTURE_USER,
                           .device = -1,
                           .step = 3,
                           .allocated = NAN,
                           .reserved = 2e9,
                           .peak_allocated = NAN,
                           .active = NAN,
                           .inactive_split = NAN,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = NAN,
                           .num_alloc_retries = NAN,
                           .num_ooms = NAN,
                           .host_rss = 1e8,
                           .tag = "fwd",
                           .tag_len = 3};
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
    tm_inproc_oom o = {.device = 1,
                       .seq = 2,
                       .step = 40,
                       .source = TM_OOM_OBSERVER,
                       .requested = 1073741824.0,
                       .free_device = 5e6,
                       .total_device = 8e10,
                       .allocated = NAN,
                       .reserved = NAN,
                       .phase = "backward",
                       .phase_len = 8,
                       .snapshot = "oom-rank0-1.pickle",
                       .snapshot_len = 18};
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
    tm_inproc_capture c = {.source = TM_CAPTURE_USER,
                           .device = -1,
                           .allocated = NAN,
                           .reserved = NAN,
                           .peak_allocated = NAN,
                           .active = NAN,
                           .inactive_split = NAN,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = NAN,
                           .num_alloc_retries = NAN,
                           .num_ooms = NAN,
                           .host_rss = 4096,
                           .tag = "a\"b",
                           .tag_len = 3};
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

/* The byte layout of docs/FORMAT.md, read back at its offsets: the schema
 * table must not move a field. */
static uint64_t at_u64(const uint8_t *b, size_t off)
{
    uint64_t v;
    memcpy(&v, b + off, 8);
    return v;
}
static uint32_t at_u32(const uint8_t *b, size_t off)
{
    uint32_t v;
    memcpy(&v, b + off, 4);
    return v;
}
static uint16_t at_u16(const uint8_t *b, size_t off)
{
    uint16_t v;
    memcpy(&v, b + off, 2);
    return v;
}
static double at_f64(const uint8_t *b, size_t off)
{
    double v;
    memcpy(&v, b + off, 8);
    return v;
}

static void test_layouts_stay_at_the_documented_offsets(void **st)
{
    (void)st;
    uint8_t b[512];
    memset(b, 0xee, sizeof b);
    tm_inproc_step s = {.step = 1, .start_ns = 2, .end_ns = 3, .data_wait_ns = 4, .flags = 5};
    assert_int_equal(tm_inproc_encode_step(&s, b, sizeof b), 40);
    assert_true(at_u64(b, 0) == 1 && at_u64(b, 8) == 2 && at_u64(b, 16) == 3 && at_u64(b, 24) == 4);
    assert_true(at_u32(b, 32) == 5 && at_u32(b, 36) == 0);

    memset(b, 0xee, sizeof b);
    tm_inproc_capture c = {.source = 4,
                           .device = -1,
                           .step = 9,
                           .allocated = 16,
                           .reserved = 24,
                           .peak_allocated = 32,
                           .active = 40,
                           .inactive_split = 48,
                           .requested = 56,
                           .free_device = 64,
                           .total_device = 72,
                           .num_alloc_retries = 80,
                           .num_ooms = 88,
                           .host_rss = 96,
                           .tag = "xy",
                           .tag_len = 2};
    assert_int_equal(tm_inproc_encode_capture(&c, b, sizeof b), 110);
    assert_true(at_u32(b, 0) == 4 && at_u32(b, 4) == 0xffffffffu && at_u64(b, 8) == 9);
    for (size_t off = 16; off <= 96; off += 8)
        assert_true(at_f64(b, off) == (double)off);
    assert_true(at_u16(b, 104) == 2 && at_u16(b, 106) == 0 && memcmp(b + 108, "xy", 2) == 0);

    memset(b, 0xee, sizeof b);
    tm_inproc_phase ph = {.kind = TM_PHASE_EXIT, .depth = 2, .step = 7, .name = "n", .name_len = 1};
    assert_int_equal(tm_inproc_encode_phase(&ph, b, sizeof b), 21);
    assert_true(at_u32(b, 0) == 2 && at_u32(b, 4) == 2 && at_u64(b, 8) == 7);
    assert_true(at_u16(b, 16) == 1 && at_u16(b, 18) == 0 && b[20] == 'n');

    memset(b, 0xee, sizeof b);
    tm_inproc_oom o = {.device = 1,
                       .seq = 2,
                       .step = 3,
                       .source = 2,
                       .requested = 24,
                       .free_device = 32,
                       .total_device = 40,
                       .allocated = 48,
                       .reserved = 56,
                       .phase = "p",
                       .phase_len = 1,
                       .snapshot = "sn",
                       .snapshot_len = 2};
    assert_int_equal(tm_inproc_encode_oom(&o, b, sizeof b), 71);
    assert_true(at_u32(b, 0) == 1 && at_u32(b, 4) == 2 && at_u64(b, 8) == 3);
    assert_true(at_u32(b, 16) == 2 && at_u32(b, 20) == 0);
    for (size_t off = 24; off <= 56; off += 8)
        assert_true(at_f64(b, off) == (double)off);
    assert_true(at_u16(b, 64) == 1 && at_u16(b, 66) == 2 && memcmp(b + 68, "psn", 3) == 0);

    memset(b, 0xee, sizeof b);
    tm_inproc_worker w = {.worker_id = -2,
                          .pid = 3,
                          .batch = 4,
                          .start_ns = 5,
                          .end_ns = 6,
                          .cpu_s = 7,
                          .rss_bytes = 8};
    assert_int_equal(tm_inproc_encode_worker(&w, b, sizeof b), 48);
    assert_true(at_u32(b, 0) == (uint32_t)-2 && at_u32(b, 4) == 3 && at_u64(b, 8) == 4);
    assert_true(at_u64(b, 16) == 5 && at_u64(b, 24) == 6 && at_f64(b, 32) == 7 &&
                at_f64(b, 40) == 8);
    /* the layout with the fetch's own CPU and the worker set (layout 3):
     * 72 bytes */
    memset(b, 0xee, sizeof b);
    w.layout = 3;
    w.cpu_start_s = 6.5;
    w.set = 0xfedcba9876543210ull;
    assert_int_equal(tm_inproc_encode_worker(&w, b, sizeof b), 72);
    assert_true(at_f64(b, 40) == 8 && at_u32(b, 48) == 3 && at_u32(b, 52) == 0 &&
                at_f64(b, 56) == 6.5 && at_u64(b, 64) == 0xfedcba9876543210ull);
    tm_record wr = rec_of(TM_REC_WORKER, b, 72);
    tm_inproc_worker wo;
    assert_int_equal(tm_inproc_decode_worker(&wr, &wo), 0);
    assert_true(wo.layout == 3 && wo.cpu_start_s == 6.5 && wo.cpu_s == 7 &&
                wo.set == 0xfedcba9876543210ull);
    memcpy(b + 48, &(uint32_t){2}, 4);
    wr.len = 64; /* an older writer's (layout 2): no set */
    assert_int_equal(tm_inproc_decode_worker(&wr, &wo), 0);
    assert_true(wo.layout == 2 && wo.cpu_start_s == 6.5 && wo.set == 0);
    wr.len = 48; /* an older writer's: cpu_start_s not measured */
    assert_int_equal(tm_inproc_decode_worker(&wr, &wo), 0);
    assert_true(wo.layout == 0 && isnan(wo.cpu_start_s) && wo.cpu_s == 7 && wo.set == 0);

    memset(b, 0xee, sizeof b);
    tm_inproc_optstep op = {.step = 1, .start_ns = 2, .end_ns = 3, .optimizer = 4};
    assert_int_equal(tm_inproc_encode_optstep(&op, b, sizeof b), 32);
    assert_true(at_u64(b, 0) == 1 && at_u64(b, 8) == 2 && at_u64(b, 16) == 3);
    assert_true(at_u32(b, 24) == 4 && at_u32(b, 28) == 0);
}

static size_t ctype_bytes(tm_inproc_ctype t)
{
    return t == TM_INPROC_U32 || t == TM_INPROC_I32 ? 4 : t == TM_INPROC_STR ? 2 : 8;
}

static void test_schema_fields_have_unique_keys_and_do_not_overlap(void **st)
{
    (void)st;
    size_t types = 0;
    for (unsigned t = 0; t < 64; t++) {
        const tm_inproc_field *f;
        size_t n = tm_inproc_fields((uint16_t)t, &f);
        assert_int_equal(n > 0, tm_inproc_is((uint16_t)t));
        assert_int_equal(tm_inproc_type_name((uint16_t)t) != NULL, n > 0);
        if (!n)
            continue;
        types++;
        assert_true(n <= TM_INPROC_FIELDS_MAX);
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++) {
                assert_string_not_equal(f[i].key, f[j].key);
                bool apart = f[i].offset + ctype_bytes(f[i].type) <= f[j].offset ||
                             f[j].offset + ctype_bytes(f[j].type) <= f[i].offset;
                assert_true(apart);
            }
    }
    assert_int_equal(types, 8);
}

static void test_json_members_are_the_dump_line_after_its_type(void **st)
{
    (void)st;
    uint8_t buf[256];
    char line[TM_INPROC_FORMAT_MAX], members[TM_INPROC_FORMAT_MAX];
    tm_inproc_oom o = {.device = 0,
                       .seq = 1,
                       .step = 40,
                       .source = TM_OOM_OBSERVER,
                       .requested = 2e9,
                       .free_device = NAN,
                       .total_device = 8e9,
                       .allocated = NAN,
                       .reserved = NAN,
                       .phase = "fwd",
                       .phase_len = 3,
                       .snapshot = "",
                       .snapshot_len = 0};
    tm_record r = rec_of(TM_REC_OOM, buf, tm_inproc_encode_oom(&o, buf, sizeof buf));
    tm_inproc_any a;
    assert_int_equal(tm_inproc_decode(&r, &a), 0);
    int n = tm_inproc_json(TM_REC_OOM, &a, members, sizeof members);
    assert_int_equal(n, (int)strlen(members));
    assert_string_equal(members, ",\"seq\":1,\"device\":0,\"step\":40,\"phase\":\"fwd\","
                                 "\"requested\":2000000000,\"total_device\":8000000000,"
                                 "\"source\":\"observer\"");
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    char want[TM_INPROC_FORMAT_MAX];
    snprintf(want, sizeof want, "\"type\":\"oom\"%s}", members);
    assert_string_equal(line, want);
    assert_int_equal(tm_inproc_json(TM_REC_EVENT, &a, members, sizeof members), -ENOENT);
}

static void test_phase_prints_its_action_and_an_unknown_enum_as_unknown(void **st)
{
    (void)st;
    uint8_t buf[64];
    char line[TM_INPROC_FORMAT_MAX];
    tm_inproc_phase p = {
        .kind = TM_PHASE_ENTER, .depth = 1, .step = 3, .name = "eval", .name_len = 4};
    tm_record r = rec_of(TM_REC_PHASE, buf, tm_inproc_encode_phase(&p, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, false, line, sizeof line) > 0);
    assert_string_equal(line, "phase enter \"eval\" depth=1 step=3");
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_string_equal(line, "\"type\":\"phase\",\"action\":\"enter\",\"name\":\"eval\","
                              "\"depth\":1,\"step\":3}");
    p.kind = 77;
    r = rec_of(TM_REC_PHASE, buf, tm_inproc_encode_phase(&p, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"action\":\"unknown\""));
}

static void test_crafted_clocks_give_a_bounded_duration(void **st)
{
    (void)st;
    uint8_t buf[64];
    char line[TM_INPROC_FORMAT_MAX];
    /* end - start overflows int64: the span saturates instead (UBSan would
     * abort on the plain subtraction) */
    tm_inproc_step s = {.step = 1, .start_ns = INT64_MIN, .end_ns = INT64_MAX};
    tm_record r = rec_of(TM_REC_STEP, buf, tm_inproc_encode_step(&s, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"duration_s\":9223372036.85"));
    tm_inproc_worker w = {.start_ns = INT64_MAX, .end_ns = INT64_MIN};
    r = rec_of(TM_REC_WORKER, buf, tm_inproc_encode_worker(&w, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"batch_time_s\":-9223372036.85"));
    assert_true(tm_clock_diff_s(INT64_MIN, 1) < -9.2e9);
}

static void test_step_flags_show_as_booleans_in_both_forms(void **st)
{
    (void)st;
    uint8_t buf[64];
    char line[TM_INPROC_FORMAT_MAX];
    tm_inproc_step s = {.step = 2,
                        .start_ns = 0,
                        .end_ns = 1000000000,
                        .flags = TM_STEP_ENDED_BY_STOP | TM_STEP_ENDED_AT_EXIT};
    tm_record r = rec_of(TM_REC_STEP, buf, tm_inproc_encode_step(&s, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, false, line, sizeof line) > 0);
    assert_string_equal(line,
                        "step 2 dur=1.000000s wait=0.000000s start_ns=0 end_of_epoch at_exit");
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, ",\"end_of_epoch\":true,\"at_exit\":true}"));
}

/* The step model's fields (72-byte layout) round-trip; a 40-byte step (a
 * file from before the step model) still decodes, its newer fields absent:
 * -1 in the struct, left out of dump and jsonl. */
/* The memory anatomy record (type 22): its documented offsets, a round
 * trip with NAN for what the CPU cannot say, the dump line, a payload that
 * is too short refused and a longer one (a later writer's) still read. */
static void test_anatomy_round_trips_at_its_documented_offsets(void **st)
{
    (void)st;
    uint8_t b[256];
    memset(b, 0xee, sizeof b);
    tm_inproc_anatomy a = {.step = 7,
                           .device = 1,
                           .optimizer = 2,
                           .params = 8320,
                           .grads = 8320,
                           .optim_state = 16648,
                           .activations = 1e9,
                           .unknown = 0,
                           .allocated = 2e9,
                           .reserved = 3e9,
                           .free_device = 4e9,
                           .total_device = 8e9,
                           .batch_size = 32,
                           .reason = TM_ANATOMY_CHANGED,
                           .kind = "cuda",
                           .kind_len = 4};
    assert_int_equal(tm_inproc_encode_anatomy(&a, b, sizeof b), 102 + 4);
    assert_true(at_u64(b, 0) == 7 && at_u32(b, 8) == 1 && at_u32(b, 12) == 2);
    assert_true(at_f64(b, 16) == 8320 && at_f64(b, 24) == 8320 && at_f64(b, 32) == 16648);
    assert_true(at_f64(b, 40) == 1e9 && at_f64(b, 48) == 0 && at_f64(b, 56) == 2e9);
    assert_true(at_f64(b, 64) == 3e9 && at_f64(b, 72) == 4e9 && at_f64(b, 80) == 8e9);
    assert_true(at_u64(b, 88) == 32 && at_u32(b, 96) == 2 && at_u16(b, 100) == 4);
    assert_memory_equal(b + 102, "cuda", 4);

    tm_record r = rec_of(TM_REC_ANATOMY, b, 106);
    tm_inproc_anatomy o;
    assert_int_equal(tm_inproc_decode_anatomy(&r, &o), 0);
    assert_true(o.step == 7 && o.device == 1 && o.optim_state == 16648 && o.batch_size == 32);
    assert_true(o.kind_len == 4 && memcmp(o.kind, "cuda", 4) == 0);

    char line[TM_INPROC_FORMAT_MAX];
    assert_true(tm_inproc_format(&r, false, line, sizeof line) > 0);
    assert_non_null(strstr(line, "anatomy \"cuda\" step=7 device=1"));
    assert_non_null(strstr(line, "reason=changed"));
    assert_non_null(strstr(line, "batch_size=32"));

    /* the CPU: no allocator, no activations, no batch size: left out */
    a = (tm_inproc_anatomy){.device = -1,
                            .params = 1,
                            .activations = NAN,
                            .allocated = NAN,
                            .reserved = NAN,
                            .free_device = NAN,
                            .total_device = NAN,
                            .batch_size = -1,
                            .reason = TM_ANATOMY_FIRST,
                            .kind = "cpu",
                            .kind_len = 3};
    r = rec_of(TM_REC_ANATOMY, b, tm_inproc_encode_anatomy(&a, b, sizeof b));
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"type\":\"anatomy\""));
    assert_null(strstr(line, "activations"));
    assert_null(strstr(line, "batch_size"));
    assert_null(strstr(line, "\"device\""));
    assert_int_equal(tm_inproc_decode_anatomy(&r, &o), 0);
    assert_true(isnan(o.activations) && o.batch_size == -1 && o.params == 1);

    /* too short for its fixed part, or its string: refused */
    r.len = 101;
    assert_int_equal(tm_inproc_decode_anatomy(&r, &o), -EINVAL);
    r.len = 102; /* kind_len 3 says 3 more bytes */
    assert_int_equal(tm_inproc_decode_anatomy(&r, &o), -EINVAL);
    /* a later writer may append: the fields known are read */
    r.len = 120;
    assert_int_equal(tm_inproc_decode_anatomy(&r, &o), 0);
    assert_true(o.params == 1 && o.kind_len == 3);
}

/* The OOM summary: offsets as docs/FORMAT.md shows them, a round trip
 * with its six strings, NAN fields left out of the line. */
static void test_oom_summary_offsets_round_trip_and_dump_line(void **st)
{
    (void)st;
    uint8_t b[512];
    memset(b, 0xee, sizeof b);
    tm_inproc_oomsum s = {.seq = 3,
                          .device = 1,
                          .step = 40,
                          .status = TM_OOMSUM_OK,
                          .pool = TM_OOMSUM_LARGE,
                          .requested = 1e9,
                          .free_device = 2e8,
                          .largest_free = 3e8,
                          .free_cached = 9e8,
                          .fragments = 4,
                          .expandable = 1.1e9,
                          .reserved = 5e9,
                          .live = 4e9,
                          .live_params = 1e9,
                          .live_grads = 1e9,
                          .live_optim_state = 1.5e9,
                          .live_other = 0.5e9,
                          .live_unknown = 0,
                          .blocks = 12,
                          .site1_bytes = 2e9,
                          .site2_bytes = NAN,
                          .site3_bytes = NAN,
                          .site4_bytes = NAN,
                          .site5_bytes = NAN,
                          .why = "",
                          .site1 = "t.py:3:f",
                          .site1_len = 8,
                          .site2 = "",
                          .site3 = "",
                          .site4 = "",
                          .site5 = ""};
    assert_int_equal(tm_inproc_encode_oomsum(&s, b, sizeof b), 188 + 8);
    assert_true(at_u32(b, 0) == 3 && at_u32(b, 4) == 1 && at_u64(b, 8) == 40);
    assert_true(at_u32(b, 16) == 1 && at_u32(b, 20) == 2 && at_f64(b, 24) == 1e9);
    assert_true(at_f64(b, 40) == 3e8 && at_f64(b, 56) == 4 && at_f64(b, 64) == 1.1e9);
    assert_true(at_f64(b, 80) == 4e9 && at_f64(b, 104) == 1.5e9 && at_f64(b, 128) == 12);
    assert_true(at_f64(b, 136) == 2e9 && isnan(at_f64(b, 144)));
    assert_true(at_u16(b, 176) == 0 && at_u16(b, 178) == 8 && at_u16(b, 186) == 0);
    assert_memory_equal(b + 188, "t.py:3:f", 8);

    tm_record r = rec_of(TM_REC_OOMSUM, b, 196);
    tm_inproc_oomsum o;
    assert_int_equal(tm_inproc_decode_oomsum(&r, &o), 0);
    assert_true(o.seq == 3 && o.device == 1 && o.largest_free == 3e8 && o.live_other == 0.5e9);
    assert_true(o.site1_len == 8 && memcmp(o.site1, "t.py:3:f", 8) == 0 && o.site2_len == 0);
    assert_true(isnan(o.site2_bytes) && o.why_len == 0);

    char line[TM_INPROC_FORMAT_MAX];
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"type\":\"oom_summary\""));
    assert_non_null(strstr(line, "\"status\":\"ok\""));
    assert_non_null(strstr(line, "\"pool\":\"large\""));
    assert_non_null(strstr(line, "\"site1\":\"t.py:3:f\""));
    assert_null(strstr(line, "site2"));
    assert_null(strstr(line, "\"why\""));

    /* too short for its fixed part or its string: refused; longer: read */
    r.len = 187;
    assert_int_equal(tm_inproc_decode_oomsum(&r, &o), -EINVAL);
    r.len = 190;
    assert_int_equal(tm_inproc_decode_oomsum(&r, &o), -EINVAL);
    r.len = 300;
    assert_int_equal(tm_inproc_decode_oomsum(&r, &o), 0);
    assert_true(o.live == 4e9 && o.site1_len == 8);
}

/* A reader that does not know a type skips it: what a reader older than
 * type 23 does with an OOM summary (tm_inproc_format says it is not its
 * own, the run loader's default case drops it). */
static void test_a_type_past_the_known_ones_is_not_in_process(void **st)
{
    (void)st;
    uint8_t b[128] = {0};
    char line[64];
    tm_record r = rec_of(TM_REC_OOMSUM + 1, b, 128);
    assert_false(tm_inproc_is(TM_REC_OOMSUM + 1));
    assert_true(tm_inproc_is(TM_REC_OOMSUM));
    assert_true(tm_inproc_is(TM_REC_ANATOMY));
    assert_int_equal(tm_inproc_format(&r, false, line, sizeof line), -ENOENT);
    assert_string_equal(tm_inproc_type_name(TM_REC_ANATOMY), "anatomy");
    assert_string_equal(tm_inproc_type_name(TM_REC_OOMSUM), "oom_summary");
}

static void test_step_model_fields_round_trip_and_old_steps_still_read(void **st)
{
    (void)st;
    uint8_t buf[144];
    char line[TM_INPROC_FORMAT_MAX];
    tm_inproc_step s = {.step = 3,
                        .start_ns = 100,
                        .end_ns = 900,
                        .data_wait_ns = 200,
                        .boundary = TM_STEP_BY_OPTIMIZER,
                        .phase = TM_STEP_TRAIN,
                        .micro_batches = 4,
                        .batches = 4,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = 300,
                        .wait_cpu_ns = -1,
                        .collective_ns = 20,
                        .prep_fwd_ns = -1,
                        .prep_opt_ns = -1,
                        .nograd_ns = -1,
                        .nograd_calls = -1};
    int n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 96);
    assert_true(at_u64(buf, 72) == 300 && at_u64(buf, 80) == UINT64_MAX && at_u64(buf, 88) == 20);
    assert_int_equal(at_u32(buf, 40), TM_STEP_BY_OPTIMIZER);
    assert_int_equal(at_u32(buf, 44), TM_STEP_TRAIN);
    assert_int_equal(at_u32(buf, 48), 4);
    assert_int_equal(at_u32(buf, 52), 4);
    assert_true(at_u64(buf, 56) == UINT64_MAX && at_u64(buf, 64) == UINT64_MAX);
    tm_record r = rec_of(TM_REC_STEP, buf, n);
    tm_inproc_step o;
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.boundary == TM_STEP_BY_OPTIMIZER && o.phase == TM_STEP_TRAIN &&
                o.micro_batches == 4 && o.batches == 4 && o.prep_ns == -1);
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"boundary\":\"optimizer\",\"phase\":\"train\","
                                 "\"micro_batches\":4,\"batches\":4"));
    assert_null(strstr(line, "prep_ns")); /* -1: not measured */
    assert_null(strstr(line, "wait_cpu_ns"));
    assert_non_null(strstr(line, "\"backward_ns\":300,\"collective_ns\":20"));
    assert_true(o.backward_ns == 300 && o.wait_cpu_ns == -1 && o.collective_ns == 20);

    /* the layout of the step model's first version (72 bytes): the fields
     * after it read as not measured */
    r.len = 72;
    memset(&o, 0x55, sizeof o);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.micro_batches == 4 && o.prep_cpu_ns == -1);
    assert_true(o.backward_ns == -1 && o.wait_cpu_ns == -1 && o.collective_ns == -1);
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_null(strstr(line, "backward_ns"));

    /* an eval batch with batch preparation measured */
    s.phase = TM_STEP_EVAL;
    s.prep_ns = 50;
    s.prep_cpu_ns = 40;
    r = rec_of(TM_REC_STEP, buf, tm_inproc_encode_step(&s, buf, sizeof buf));
    assert_true(tm_inproc_format(&r, false, line, sizeof line) > 0);
    assert_non_null(strstr(line, " phase=eval "));
    assert_non_null(strstr(line, " prep_ns=50 prep_cpu_ns=40"));

    /* the old layout: 40 bytes, as before the step model */
    tm_inproc_step old = {.step = 5, .start_ns = 1, .end_ns = 2, .data_wait_ns = 1};
    n = tm_inproc_encode_step(&old, buf, sizeof buf);
    assert_int_equal(n, 40);
    r = rec_of(TM_REC_STEP, buf, n);
    memset(&o, 0x55, sizeof o);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.step == 5 && o.boundary == 0 && o.phase == 0);
    assert_true(o.micro_batches == -1 && o.batches == -1 && o.prep_ns == -1 && o.prep_cpu_ns == -1);
    assert_true(o.backward_ns == -1 && o.wait_cpu_ns == -1 && o.collective_ns == -1);
    const tm_inproc_field *f;
    size_t nf = tm_inproc_fields(TM_REC_STEP, &f);
    tm_inproc_any a = {.step = o};
    size_t absent = 0;
    for (size_t i = 0; i < nf; i++)
        absent += tm_inproc_get(&f[i], &a).absent;
    assert_int_equal(absent, 15); /* boundary .. nograd_calls */
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_null(strstr(line, "boundary"));
    assert_null(strstr(line, "phase"));
    /* shorter than the old layout: refused */
    r.len = 39;
    assert_int_equal(tm_inproc_decode_step(&r, &o), -EINVAL);

    /* the lead optimizer's step folded in (one record a step): 112 bytes,
     * opt_start_ns at 96, optimizer at 104, the last 4 bytes padding */
    s.phase = TM_STEP_TRAIN;
    s.opt_start_ns = 850;
    s.optimizer = 1;
    memset(buf, 0xee, sizeof buf);
    n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 112);
    assert_true(at_u64(buf, 96) == 850 && at_u32(buf, 104) == 1 && at_u32(buf, 108) == 0);
    assert_int_equal(at_u32(buf, 36), 0); /* the payload's own padding */
    r = rec_of(TM_REC_STEP, buf, n);
    memset(&o, 0x55, sizeof o);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.opt_start_ns == 850 && o.optimizer == 1 && o.collective_ns == 20);
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"opt_start_ns\":850,\"optimizer\":1"));
    assert_int_equal(tm_inproc_encode_step(&s, buf, 111), -ENOSPC);
    /* a step no optimizer step ended: 96 bytes, read as -1, left out */
    s.opt_start_ns = -1;
    n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 96);
    r = rec_of(TM_REC_STEP, buf, n);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.opt_start_ns == -1 && o.optimizer == -1);
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_null(strstr(line, "opt_start_ns"));
    assert_null(strstr(line, "\"optimizer\":"));
    assert_true(o.prep_fwd_ns == -1 && o.prep_opt_ns == -1);
    assert_null(strstr(line, "prep_fwd_ns"));

    /* the work after the forward measured: 128 bytes, prep_fwd_ns at 112,
     * prep_opt_ns at 120 (-1 here: no work before the optimizer step) */
    s.opt_start_ns = 850;
    s.optimizer = 1;
    s.prep_fwd_ns = 70;
    memset(buf, 0xee, sizeof buf);
    n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 128);
    assert_true(at_u64(buf, 112) == 70 && at_u64(buf, 120) == UINT64_MAX);
    assert_true(at_u64(buf, 96) == 850 && at_u32(buf, 108) == 0);
    r = rec_of(TM_REC_STEP, buf, n);
    memset(&o, 0x55, sizeof o);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.prep_fwd_ns == 70 && o.prep_opt_ns == -1 && o.opt_start_ns == 850);
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"optimizer\":1,\"prep_fwd_ns\":70"));
    assert_null(strstr(line, "prep_opt_ns"));
    assert_int_equal(tm_inproc_encode_step(&s, buf, 127), -ENOSPC);
    /* read as the 112-byte layout: the two absent */
    r.len = 112;
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.opt_start_ns == 850 && o.prep_fwd_ns == -1 && o.prep_opt_ns == -1);
    /* no optimizer step, the tail alone measured: still 128, the
     * optimizer's fields -1 */
    s.opt_start_ns = -1;
    s.optimizer = -1;
    s.prep_fwd_ns = -1;
    s.prep_opt_ns = 5;
    n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 128);
    r = rec_of(TM_REC_STEP, buf, n);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.opt_start_ns == -1 && o.optimizer == -1 && o.prep_fwd_ns == -1 &&
                o.prep_opt_ns == 5);
    assert_true(o.nograd_ns == -1 && o.nograd_calls == -1);
    assert_null(strstr(line, "nograd"));

    /* the model run under no_grad before the training forward: 144 bytes,
     * nograd_ns at 128, nograd_calls at 136, the last 4 bytes padding; the
     * fields before it as they are (-1 where absent) */
    s.nograd_ns = 76000000;
    s.nograd_calls = 128;
    memset(buf, 0xee, sizeof buf);
    n = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_int_equal(n, 144);
    assert_true(at_u64(buf, 128) == 76000000 && at_u32(buf, 136) == 128 && at_u32(buf, 140) == 0);
    assert_true(at_u64(buf, 112) == UINT64_MAX && at_u64(buf, 120) == 5);
    r = rec_of(TM_REC_STEP, buf, n);
    memset(&o, 0x55, sizeof o);
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.nograd_ns == 76000000 && o.nograd_calls == 128 && o.prep_opt_ns == 5);
    assert_true(tm_inproc_format(&r, true, line, sizeof line) > 0);
    assert_non_null(strstr(line, "\"prep_opt_ns\":5,\"nograd_ns\":76000000,\"nograd_calls\":128"));
    assert_int_equal(tm_inproc_encode_step(&s, buf, 143), -ENOSPC);
    /* read as the 128-byte layout: the two absent */
    r.len = 128;
    assert_int_equal(tm_inproc_decode_step(&r, &o), 0);
    assert_true(o.nograd_ns == -1 && o.nograd_calls == -1 && o.prep_opt_ns == 5);
    /* no calls counted (a zeroed struct): not written */
    s.nograd_calls = 0;
    assert_int_equal(tm_inproc_encode_step(&s, buf, sizeof buf), 128);
}

/* The encoder copies the fields of a type without strings in merged runs
 * (its copy plan): the payload is byte for byte the one a copy of each
 * field into its documented offset makes, padding zero, for every such type
 * and both layouts of the step. */
static void test_plan_encoding_equals_a_copy_per_field(void **st)
{
    (void)st;
    for (uint16_t type = TM_REC_STEP; tm_inproc_is(type); type++) {
        const tm_inproc_field *f;
        size_t nf = tm_inproc_fields(type, &f);
        int has_str = 0;
        for (size_t i = 0; i < nf; i++)
            has_str |= f[i].type == TM_INPROC_STR;
        if (has_str)
            continue;
        /* the step: 128 bytes (the work after the forward measured), 40
         * (before the step model), 96 (no optimizer step, nothing after
         * the forward measured), 112 (an optimizer step folded in), 144
         * (a model run under no_grad before the training forward) */
        for (int old = 0; old <= (type == TM_REC_STEP ? 4 : 0); old++) {
            tm_inproc_any rec;
            uint8_t *b = (uint8_t *)&rec;
            for (size_t i = 0; i < sizeof rec; i++)
                b[i] = (uint8_t)(i * 7 + 1);
            if (type == TM_REC_STEP)
                rec.step.opt_start_ns = old == 2 ? -1 : 12345;
            if (type == TM_REC_STEP && old >= 2)
                rec.step.prep_fwd_ns = rec.step.prep_opt_ns = -1;
            if (type == TM_REC_STEP) { /* 144 bytes with a no-grad run, else without */
                rec.step.nograd_ns = old == 4 ? 777 : -1;
                rec.step.nograd_calls = old == 4 ? 3 : -1;
            }
            if (old == 1)
                rec.step.boundary = 0; /* the old 40-byte layout */
            uint8_t got[256], want[256];
            int n = tm_inproc_encode(type, &rec, got, sizeof got);
            assert_true(n > 0);
            memset(want, 0, sizeof want);
            for (size_t i = 0; i < nf; i++) {
                size_t w = f[i].type == TM_INPROC_U32 || f[i].type == TM_INPROC_I32 ? 4 : 8;
                if (f[i].offset + w <= (size_t)n)
                    memcpy(want + f[i].offset, b + f[i].member, w);
            }
            if (type == TM_REC_STEP)
                assert_int_equal(n, old == 1   ? 40
                                    : old == 2 ? 96
                                    : old == 3 ? 112
                                    : old == 4 ? 144
                                               : 128);
            assert_memory_equal(got, want, (size_t)n);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_round_trips),
        cmocka_unit_test(test_plan_encoding_equals_a_copy_per_field),
        cmocka_unit_test(test_capture_round_trips_with_nan_and_tag),
        cmocka_unit_test(test_capture_whose_tag_runs_past_the_payload_is_refused),
        cmocka_unit_test(test_oom_round_trips_phase_and_snapshot),
        cmocka_unit_test(test_encoder_refuses_a_small_buffer),
        cmocka_unit_test(test_format_prints_step_as_text_and_json),
        cmocka_unit_test(test_format_leaves_unavailable_fields_out_and_escapes_tags),
        cmocka_unit_test(test_format_says_which_records_are_not_its_own),
        cmocka_unit_test(test_layouts_stay_at_the_documented_offsets),
        cmocka_unit_test(test_schema_fields_have_unique_keys_and_do_not_overlap),
        cmocka_unit_test(test_json_members_are_the_dump_line_after_its_type),
        cmocka_unit_test(test_phase_prints_its_action_and_an_unknown_enum_as_unknown),
        cmocka_unit_test(test_crafted_clocks_give_a_bounded_duration),
        cmocka_unit_test(test_step_flags_show_as_booleans_in_both_forms),
        cmocka_unit_test(test_step_model_fields_round_trip_and_old_steps_still_read),
        cmocka_unit_test(test_anatomy_round_trips_at_its_documented_offsets),
        cmocka_unit_test(test_oom_summary_offsets_round_trip_and_dump_line),
        cmocka_unit_test(test_a_type_past_the_known_ones_is_not_in_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
