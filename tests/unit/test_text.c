/*
 * test_text.c - the bounded text buffer the exporters write into
 * (tm_text in src/lib/prom.c): pieces of any length, the hard cap.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "prom.h"
#include "trainmon.h"

static void test_printf_takes_a_piece_longer_than_any_stack_buffer(void **st)
{
    (void)st;
    tm_text *t = tm_text_new(1 << 20);
    assert_non_null(t);
    static char piece[5000];
    memset(piece, 'x', sizeof piece - 1);
    tm_text_printf(t, "a%sb%d", piece, 42); /* 1 + 4999 + 1 + 2 = 5003 bytes */
    assert_int_equal(tm_text_error(t), 0);
    size_t len;
    const char *d = tm_text_data(t, &len);
    assert_int_equal(len, 5003);
    assert_true(d[0] == 'a' && d[5000] == 'b' && memcmp(d + 5001, "42", 2) == 0);
    tm_text_free(&t);
}

static void test_printf_past_the_cap_is_a_sticky_error(void **st)
{
    (void)st;
    tm_text *t = tm_text_new(64);
    assert_non_null(t);
    static char piece[100];
    memset(piece, 'y', sizeof piece - 1);
    tm_text_printf(t, "%s", piece); /* 99 bytes > 64 */
    assert_int_not_equal(tm_text_error(t), 0);
    tm_text_printf(t, "z"); /* ignored after the first failure */
    assert_int_not_equal(tm_text_error(t), 0);
    tm_text_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_printf_takes_a_piece_longer_than_any_stack_buffer),
        cmocka_unit_test(test_printf_past_the_cap_is_a_sticky_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
