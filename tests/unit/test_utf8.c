/*
 * test_utf8.c - valid UTF-8 out (src/lib/util.c: tm_utf8_decode,
 * tm_utf8_valid_prefix, tm_escape): well-formed UTF-8 passes unchanged,
 * each maximal ill-formed subpart becomes one U+FFFD (the practice of
 * Python's decode(errors="replace") and the WHATWG decoder, so each
 * expected output below is also what Python gives), and each format
 * escapes its own characters.  Every expected output is written out.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "trainmon.h"
#include "util.h"

#define R "\xEF\xBF\xBD" /* U+FFFD */

/* s[0..len) through tm_escape(how), as a NUL-terminated string. */
static const char *esc_n(tm_esc how, const char *s, size_t len)
{
    static tm_buf b;
    tm_buf_free(&b);
    tm_buf_init(&b, 1 << 16);
    assert_int_equal(tm_buf_esc(&b, how, s, len), 0);
    return b.data ? b.data : "";
}

static const char *esc(tm_esc how, const char *s)
{
    return esc_n(how, s, strlen(s));
}

static void test_well_formed_multibyte_passes_unchanged(void **st)
{
    (void)st;
    /* U+00E9, U+20AC, U+1D11E, U+D7FF (last before the surrogates),
     * U+E000 (first after), U+FFFF, U+10000, U+10FFFF (the last code point) */
    static const char *const ok[] = {
        "\xC3\xA9",         "\xE2\x82\xAC",     "\xF0\x9D\x84\x9E",
        "\xED\x9F\xBF",     "\xEE\x80\x80",     "\xEF\xBF\xBF",
        "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF", "caf\xC3\xA9 \xE2\x82\xAC"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_string_equal(esc(TM_ESC_JSON, ok[i]), ok[i]);
        assert_int_equal(tm_utf8_valid_prefix(ok[i], strlen(ok[i])), strlen(ok[i]));
    }
    uint32_t cp;
    assert_int_equal(tm_utf8_decode("\xC3\xA9", 2, &cp), 2);
    assert_int_equal(cp, 0xE9);
    assert_int_equal(tm_utf8_decode("\xE2\x82\xAC", 3, &cp), 3);
    assert_int_equal(cp, 0x20AC);
    assert_int_equal(tm_utf8_decode("\xF0\x9D\x84\x9E", 4, &cp), 4);
    assert_int_equal(cp, 0x1D11E);
    assert_int_equal(tm_utf8_decode("\xF4\x8F\xBF\xBF", 4, &cp), 4);
    assert_int_equal(cp, 0x10FFFF);
    assert_int_equal(tm_utf8_decode("A", 1, &cp), 1);
    assert_int_equal(cp, 'A');
    assert_int_equal(tm_utf8_decode("", 0, &cp), 0);
    assert_int_equal(cp, TM_UTF8_BAD);
}

static void test_every_byte_0x80_to_0xff_alone_is_replaced(void **st)
{
    (void)st;
    for (unsigned c = 0x80; c <= 0xFF; c++) {
        char s[4] = {'a', (char)c, 'b', 0};
        uint32_t cp;
        assert_int_equal(tm_utf8_decode(s + 1, 1, &cp), 1);
        assert_int_equal(cp, TM_UTF8_BAD);
        assert_string_equal(esc(TM_ESC_JSON, s), "a" R "b");
        assert_int_equal(tm_utf8_valid_prefix(s, 3), 1);
    }
}

static void test_overlong_forms_are_replaced_byte_by_byte(void **st)
{
    (void)st;
    /* '/' as 2, 3 and 4 bytes; NUL as 2 bytes (Java's "modified UTF-8"):
     * C0, C1 never lead; E0 needs A0..BF and F0 needs 90..BF next, so
     * each byte is its own ill-formed subpart. */
    assert_string_equal(esc(TM_ESC_JSON, "\xC0\xAF"), R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xC0\x80"), R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xC1\xBF"), R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xE0\x80\xAF"), R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xE0\x9F\xBF"), R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xF0\x80\x80\xAF"), R R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xF0\x8F\xBF\xBF"), R R R R);
}

static void test_surrogates_are_replaced(void **st)
{
    (void)st;
    /* U+D800, U+DBFF, U+DC00, U+DFFF: ED must be followed by 80..9F. */
    assert_string_equal(esc(TM_ESC_JSON, "\xED\xA0\x80"), R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xED\xAF\xBF"), R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xED\xB0\x80"), R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xED\xBF\xBF"), R R R);
    /* A CESU-8 pair (U+1F600 as two surrogates) is six bytes of damage. */
    assert_string_equal(esc(TM_ESC_JSON, "\xED\xA0\xBD\xED\xB8\x80"), R R R R R R);
    uint32_t cp;
    assert_int_equal(tm_utf8_decode("\xED\xA0\x80", 3, &cp), 1);
    assert_int_equal(cp, TM_UTF8_BAD);
}

static void test_beyond_u10ffff_is_replaced(void **st)
{
    (void)st;
    /* U+110000 (F4 90 80 80): F4 needs 80..8F next. */
    assert_string_equal(esc(TM_ESC_JSON, "\xF4\x90\x80\x80"), R R R R);
    /* F5..F7 would start U+140000 and up; F8..FD were the 5- and 6-byte forms. */
    assert_string_equal(esc(TM_ESC_JSON, "\xF5\x80\x80\x80"), R R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xF8\x88\x80\x80\x80"), R R R R R);
    assert_string_equal(esc(TM_ESC_JSON, "\xFC\x84\x80\x80\x80\x80"), R R R R R R);
}

static void test_truncated_sequence_is_one_replacement(void **st)
{
    (void)st;
    /* The well-formed start of a sequence, cut short, is one maximal
     * ill-formed subpart: one U+FFFD, and what follows is read afresh. */
    assert_string_equal(esc(TM_ESC_JSON, "a\xC3"), "a" R);
    assert_string_equal(esc(TM_ESC_JSON, "a\xE2\x82"), "a" R);
    assert_string_equal(esc(TM_ESC_JSON, "a\xE2\x82"
                                         "b"),
                        "a" R "b");
    assert_string_equal(esc(TM_ESC_JSON, "\xF0\x9F\x98"), R);
    assert_string_equal(esc(TM_ESC_JSON, "\xF0\x9F\x98\xC3\xA9"), R "\xC3\xA9");
    assert_string_equal(esc(TM_ESC_JSON, "\xF0\x9F"
                                         "\"x"),
                        R "\\\"x");
    uint32_t cp;
    assert_int_equal(tm_utf8_decode("\xF0\x9F\x98"
                                    "x",
                                    4, &cp),
                     3);
    assert_int_equal(cp, TM_UTF8_BAD);
    /* A sequence cut by the length given, not by a NUL. */
    assert_int_equal(tm_utf8_decode("\xE2\x82\xAC", 2, &cp), 2);
    assert_int_equal(cp, TM_UTF8_BAD);
    assert_int_equal(tm_utf8_valid_prefix("ab\xE2\x82\xAC", 4), 2);
}

static void test_json_escapes_quote_backslash_and_control_characters(void **st)
{
    (void)st;
    assert_string_equal(esc(TM_ESC_JSON, "a\"b\\c\nd\te\rf"), "a\\\"b\\\\c\\nd\\te\\rf");
    assert_string_equal(esc(TM_ESC_JSON, "\x01\x08\x0c\x1f\x7f/"),
                        "\\u0001\\u0008\\u000c\\u001f\\u007f/");
    /* An embedded NUL (a length-delimited string from a record). */
    assert_string_equal(esc_n(TM_ESC_JSON, "a\0b", 3), "a\\u0000b");
    /* The JSON helper the library's writers use is the same routine. */
    tm_buf b;
    tm_buf_init(&b, 64);
    assert_int_equal(tm_buf_json_str(&b, "t\xFF\"", 3), 0);
    assert_string_equal(b.data, "t" R "\\\"");
    tm_buf_free(&b);
}

static void test_each_format_escapes_its_own_characters(void **st)
{
    (void)st;
    const char *in = "<a\\'&\"\n\x01\x7f\xFF>";
    assert_string_equal(esc(TM_ESC_UTF8, in), "<a\\'&\"\n\x01\x7f" R ">");
    assert_string_equal(esc(TM_ESC_PROM, in), "<a\\\\'&\\\"\\n\x01\x7f" R ">");
    assert_string_equal(esc(TM_ESC_HTML, in), "&lt;a\\&#39;&amp;&quot;\n" R R R "&gt;");
    assert_string_equal(esc(TM_ESC_CSV, in), "<a\\'&\"\"\n\x01\x7f" R ">");
    assert_string_equal(esc(TM_ESC_TEXT, in), "<a\\'&\"??"
                                              "?" R ">");
    assert_string_equal(esc(TM_ESC_HTML, "tab\there\r\n"), "tab\there\r\n");
}

static void test_prometheus_label_value_is_utf8(void **st)
{
    (void)st;
    /* A comm name with a cut sequence, as a label value of /metrics. */
    tm_text *t = tm_text_new(1024);
    assert_non_null(t);
    assert_int_equal(tm_prom_escape(t, "py\xE2\x82\"x\\\n"), 0);
    assert_string_equal(tm_text_data(t, NULL), "py" R "\\\"x\\\\\\n");
    tm_text_free(&t);
}

static int put_fails(void *ctx, const char *p, size_t n)
{
    (void)p, (void)n;
    ++*(int *)ctx;
    return -ENOSPC;
}

static void test_an_error_from_put_ends_the_call(void **st)
{
    (void)st;
    int calls = 0;
    assert_int_equal(tm_escape(TM_ESC_JSON, "ab\"cd\"", 6, put_fails, &calls), -ENOSPC);
    assert_int_equal(calls, 1);
    calls = 0;
    assert_int_equal(tm_escape(TM_ESC_JSON, "", 0, put_fails, &calls), 0);
    assert_int_equal(calls, 0); /* nothing to write: put is not called */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_well_formed_multibyte_passes_unchanged),
        cmocka_unit_test(test_every_byte_0x80_to_0xff_alone_is_replaced),
        cmocka_unit_test(test_overlong_forms_are_replaced_byte_by_byte),
        cmocka_unit_test(test_surrogates_are_replaced),
        cmocka_unit_test(test_beyond_u10ffff_is_replaced),
        cmocka_unit_test(test_truncated_sequence_is_one_replacement),
        cmocka_unit_test(test_json_escapes_quote_backslash_and_control_characters),
        cmocka_unit_test(test_each_format_escapes_its_own_characters),
        cmocka_unit_test(test_prometheus_label_value_is_utf8),
        cmocka_unit_test(test_an_error_from_put_ends_the_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
