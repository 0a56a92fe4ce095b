/*
 * test_tbevent.c - TensorBoard event files: CRC-32C, the TFRecord framing
 * and the Event encoding against the test vectors of docs/FORMAT.md "Exports", and
 * the writer's file (name, first record, scalars) read back.
 */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "rec.h"
#include "tbevent.h"
#include "trainmon.h"

/* Hex text (blanks ignored) into bytes; returns the count. */
static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = hex; *p;) {
        if (*p == ' ') {
            p++;
            continue;
        }
        unsigned v;
        assert_int_equal(sscanf(p, "%2x", &v), 1);
        assert_true(n < cap);
        out[n++] = (uint8_t)v;
        p += 2;
    }
    return n;
}

static void assert_record(const uint8_t *ev, int evlen, const char *want_hex)
{
    uint8_t want[256], rec[256];
    size_t wlen = unhex(want_hex, want, sizeof want);
    assert_true(evlen > 0);
    int n = tm_tb_frame(rec, sizeof rec, ev, (size_t)evlen);
    assert_int_equal(n, (int)wlen);
    assert_memory_equal(rec, want, wlen);
}

static void test_crc32c_of_123456789_is_e3069283(void **state)
{
    (void)state;
    assert_int_equal(tm_crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(tm_crc32c(0, "", 0), 0u);
}

static void test_masked_crc_rotates_and_adds_the_constant(void **state)
{
    (void)state;
    uint32_t x = 0xE3069283u;
    assert_int_equal(tm_tb_masked_crc("123456789", 9),
                     (uint32_t)(((x >> 15) | (x << 17)) + 0xA282EAD8u));
    assert_int_equal(tm_tb_masked_crc("", 0), 0xA282EAD8u);
}

static void test_file_version_record_matches_the_reference_vector(void **state)
{
    (void)state;
    uint8_t ev[128];
    int n = tm_tb_encode_event(ev, sizeof ev, 1.0, false, 0, "brain.Event:2", NULL, 0);
    assert_record(ev, n,
                  "1800000000000000 a37f4b22 "
                  "09000000000000f03f1a0d627261696e2e4576656e743a32 86bf577a");
}

static void test_scalar_record_matches_the_reference_vector(void **state)
{
    (void)state;
    uint8_t ev[128];
    int n = tm_tb_encode_event(ev, sizeof ev, 1.0, true, 1, NULL, "loss", 0.5f);
    assert_record(ev, n,
                  "1a00000000000000 129bd82d "
                  "09000000000000f03f10012a0d0a0b0a046c6f7373150000003f 27f95db1");
}

static void test_long_tag_uses_multibyte_varint_lengths(void **state)
{
    (void)state;
    char tag[201];
    memset(tag, 'a', 200);
    tag[200] = '\0';
    uint8_t ev[512];
    int n = tm_tb_encode_event(ev, sizeof ev, 2.0, true, 300, NULL, tag, 1.0f);
    /* 9 wall_time + 3 step (300 = ac 02) + 1+2 summary key/len + 1+2 value
     * key/len + 1+2+200 tag + 5 simple_value */
    assert_int_equal(n, 9 + 3 + 3 + 3 + 203 + 5);
    assert_int_equal(ev[9], 0x10);
    assert_int_equal(ev[10], 0xac);
    assert_int_equal(ev[11], 0x02);
    assert_int_equal(ev[12], 0x2a);
    assert_int_equal(ev[13], 0x80 | ((3 + 203 + 5) & 0x7f));
    assert_int_equal(ev[14], (3 + 203 + 5) >> 7);
}

static void test_encode_refuses_a_buffer_too_small(void **state)
{
    (void)state;
    uint8_t ev[16];
    assert_int_equal(tm_tb_encode_event(ev, sizeof ev, 1.0, true, 1, NULL, "loss", 0.5f), -ENOSPC);
}

static void test_negative_step_is_ten_byte_varint(void **state)
{
    (void)state;
    uint8_t ev[64];
    int n = tm_tb_encode_event(ev, sizeof ev, 0.0, true, -1, NULL, NULL, 0);
    assert_int_equal(n, 9 + 1 + 10);
    assert_int_equal(ev[19], 0x01);
}

static void test_writer_names_file_and_writes_version_then_scalars(void **state)
{
    (void)state;
    char dir[] = "/tmp/tm-tbtest.XXXXXX";
    assert_non_null(mkdtemp(dir));
    tm_tb_writer *w = NULL;
    assert_int_equal(tm_tb_open(&w, dir, 1.0), 0);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char want[512];
    snprintf(want, sizeof want, "%s/events.out.tfevents.0000000001.%s.%d.", dir, host,
             (int)getpid());
    assert_memory_equal(tm_tb_path(w), want, strlen(want));
    assert_int_equal(tm_tb_scalar(w, "loss", 1, 1.0, 0.5f), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s", tm_tb_path(w));
    assert_int_equal(tm_tb_close(&w), 0);
    assert_null(w);

    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint8_t got[256], exp[256];
    size_t n = fread(got, 1, sizeof got, f);
    fclose(f);
    size_t m = unhex("1800000000000000a37f4b22"
                     "09000000000000f03f1a0d627261696e2e4576656e743a3286bf577a"
                     "1a00000000000000129bd82d"
                     "09000000000000f03f10012a0d0a0b0a046c6f7373150000003f27f95db1",
                     exp, sizeof exp);
    assert_int_equal(n, m);
    assert_memory_equal(got, exp, m);
    unlink(path);
    rmdir(dir);
}

static void test_two_writers_in_one_second_get_different_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/tm-tbtest.XXXXXX";
    assert_non_null(mkdtemp(dir));
    tm_tb_writer *a = NULL, *b = NULL;
    assert_int_equal(tm_tb_open(&a, dir, 5.0), 0);
    assert_int_equal(tm_tb_open(&b, dir, 5.0), 0);
    assert_string_not_equal(tm_tb_path(a), tm_tb_path(b));
    unlink(tm_tb_path(a));
    unlink(tm_tb_path(b));
    tm_tb_close(&a);
    tm_tb_close(&b);
    rmdir(dir);
}

static void test_open_in_missing_directory_fails_with_message(void **state)
{
    (void)state;
    tm_tb_writer *w = NULL;
    assert_int_equal(tm_tb_open(&w, "/nonexistent/tm-tb", 0), -ENOENT);
    assert_null(w);
    assert_non_null(strstr(tm_last_error(), "/nonexistent/tm-tb/events.out.tfevents."));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c_of_123456789_is_e3069283),
        cmocka_unit_test(test_masked_crc_rotates_and_adds_the_constant),
        cmocka_unit_test(test_file_version_record_matches_the_reference_vector),
        cmocka_unit_test(test_scalar_record_matches_the_reference_vector),
        cmocka_unit_test(test_long_tag_uses_multibyte_varint_lengths),
        cmocka_unit_test(test_encode_refuses_a_buffer_too_small),
        cmocka_unit_test(test_negative_step_is_ten_byte_varint),
        cmocka_unit_test(test_writer_names_file_and_writes_version_then_scalars),
        cmocka_unit_test(test_two_writers_in_one_second_get_different_files),
        cmocka_unit_test(test_open_in_missing_directory_fails_with_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
