/*
 * test_deadline.c - a call made in a child process with a deadline
 * (src/lib/deadline.c): its result and its error text come back, and a
 * call that blocks is abandoned at the deadline, not waited for.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trainmon.h"
#include "util.h"

struct pair {
    int a, b;
};

static int add_in_child(void *ctx, void *out)
{
    const struct pair *p = ctx;
    struct pair *o = out;
    o->a = p->a + p->b;
    o->b = (int)getpid();
    return 7;
}

static int fail_in_child(void *ctx, void *out)
{
    (void)ctx, (void)out;
    return tm_seterr(-ENOENT, "/no/such: the child's own words");
}

static int block_in_child(void *ctx, void *out)
{
    (void)ctx, (void)out;
    pause(); /* as a stat() on a hung mount: until a signal */
    return 0;
}

static void test_the_result_and_out_come_back_from_the_child(void **st)
{
    (void)st;
    struct pair in = {2, 3}, out = {0, 0};
    assert_int_equal(tm_call_within(5.0, add_in_child, &in, &out, sizeof out), 7);
    assert_int_equal(out.a, 5);
    assert_true(out.b > 0 && out.b != (int)getpid()); /* it ran in another process */
}

static void test_an_error_and_its_text_come_back(void **st)
{
    (void)st;
    struct pair out = {1, 1};
    assert_int_equal(tm_call_within(5.0, fail_in_child, NULL, &out, sizeof out), -ENOENT);
    assert_string_equal(tm_last_error(), "/no/such: the child's own words");
    assert_true(out.a == 1 && out.b == 1); /* out is left alone on an error */
}

static void test_a_call_that_blocks_is_abandoned_at_the_deadline(void **st)
{
    (void)st;
    struct pair out = {1, 1};
    int64_t t0 = tm_now_mono_ns();
    assert_int_equal(tm_call_within(0.3, block_in_child, NULL, &out, sizeof out), -ETIMEDOUT);
    double took = (double)(tm_now_mono_ns() - t0) / 1e9;
    assert_true(took >= 0.29 && took < 5.0); /* the deadline, not the call, ended it */
    assert_non_null(strstr(tm_last_error(), "no answer within 0.3 s"));
    assert_true(out.a == 1 && out.b == 1);
}

static void test_bad_arguments_are_refused(void **st)
{
    (void)st;
    struct pair out;
    assert_int_equal(tm_call_within(0, add_in_child, NULL, &out, sizeof out), -EINVAL);
    assert_int_equal(tm_call_within(1, NULL, NULL, &out, sizeof out), -EINVAL);
    assert_int_equal(tm_call_within(1, add_in_child, NULL, NULL, 8), -EINVAL);
}

static void test_a_path_resolves_through_the_child_as_it_does_in_place(void **st)
{
    (void)st;
    static tm_blkdev a, b;
    assert_int_equal(tm_blkdev_resolve("/tmp", 0, &a), 0);
    assert_int_equal(tm_blkdev_resolve_within("/tmp", 0, &b, 10.0), 0);
    assert_string_equal(a.mountpoint, b.mountpoint);
    assert_string_equal(a.fstype, b.fstype);
    assert_int_equal(a.kind, b.kind);
    assert_int_equal(tm_blkdev_resolve_within("/no/such/path", 0, &b, 10.0), -ENOENT);
    assert_non_null(strstr(tm_last_error(), "/no/such/path"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_result_and_out_come_back_from_the_child),
        cmocka_unit_test(test_an_error_and_its_text_come_back),
        cmocka_unit_test(test_a_call_that_blocks_is_abandoned_at_the_deadline),
        cmocka_unit_test(test_bad_arguments_are_refused),
        cmocka_unit_test(test_a_path_resolves_through_the_child_as_it_does_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
