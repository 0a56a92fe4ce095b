/*
 * test_chrome.c - the Chrome/Perfetto trace writer: the document's shape,
 * escaping, counters without unavailable values, and slices that nest per
 * thread after sorting and clipping.  tests/e2e/chrome_trace.sh parses a
 * written trace with Python's json module.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "trainmon.h"

static char tpath[64];

static int setup(void **state)
{
    (void)state;
    snprintf(tpath, sizeof tpath, "/tmp/tm-chrome-%d.json", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(tpath);
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Position of needle in hay, failing when absent. */
static size_t pos_of(const char *hay, const char *needle)
{
    const char *p = strstr(hay, needle);
    if (!p)
        print_error("missing: %s\nin: %s\n", needle, hay);
    assert_non_null(p);
    return (size_t)(p - hay);
}

static void test_empty_trace_is_a_document_with_no_events(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    assert_null(c);
    assert_string_equal(slurp(tpath), "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n]}\n");
}

static void test_metadata_names_processes_and_threads(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_process_name(c, 1, "rank 0"), 0);
    assert_int_equal(tm_chrome_thread_name(c, 1, 2, "phases"), 0);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    const char *t = slurp(tpath);
    pos_of(t,
           "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"args\":{\"name\":\"rank 0\"}},\n");
    pos_of(t, "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":2,"
              "\"args\":{\"name\":\"phases\"}}\n]}");
}

static void test_times_are_microseconds_with_three_decimals(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "step 0", 1234567, 2000, NULL), 0);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    pos_of(slurp(tpath), "{\"ph\":\"X\",\"name\":\"step 0\",\"pid\":1,\"tid\":1,"
                         "\"ts\":1234.567,\"dur\":2.000}");
}

static void test_strings_escape_quote_backslash_and_controls_only(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_instant(c, 1, 1, "a\"b\\c\nd\te\x01 \xc3\xa9", 1000, 'p', NULL), 0);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    pos_of(slurp(tpath), "\"name\":\"a\\\"b\\\\c\\nd\\te\\u0001 \xc3\xa9\",\"s\":\"p\"");
}

static void test_counter_leaves_out_unavailable_values(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    const char *keys[] = {"allocated", "reserved"};
    double v1[] = {1024, NAN}, v2[] = {NAN, NAN};
    assert_int_equal(tm_chrome_counter(c, 3, "gpu_mem", 5000, keys, v1, 2), 0);
    assert_int_equal(tm_chrome_counter(c, 3, "gpu_mem", 6000, keys, v2, 2), 0);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    const char *t = slurp(tpath);
    pos_of(
        t,
        "{\"ph\":\"C\",\"name\":\"gpu_mem\",\"pid\":3,\"ts\":5.000,\"args\":{\"allocated\":1024}}");
    assert_null(strstr(t, "reserved"));
    assert_null(strstr(t, "\"ts\":6.000"));
}

static void test_slices_are_sorted_by_start_parent_first(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    /* Given child first, as a timeline of exit records gives them. */
    assert_int_equal(tm_chrome_slice(c, 1, 2, "forward", 1000, 3000, NULL), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 2, "train", 1000, 9000, NULL), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 2, "backward", 5000, 4000, NULL), 0);
    size_t clipped = 99;
    assert_int_equal(tm_chrome_close(&c, &clipped), 0);
    assert_int_equal(clipped, 0);
    const char *t = slurp(tpath);
    size_t a = pos_of(t, "\"train\""), b = pos_of(t, "\"forward\""), d = pos_of(t, "\"backward\"");
    assert_true(a < b && b < d);
}

static void test_child_overrunning_its_parent_is_clipped(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "step", 0, 10000, NULL), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "late", 8000, 5000, NULL), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "next", 10000, 1000, NULL), 0);
    size_t clipped = 0;
    assert_int_equal(tm_chrome_close(&c, &clipped), 0);
    assert_int_equal(clipped, 1);
    const char *t = slurp(tpath);
    pos_of(t, "\"name\":\"late\",\"pid\":1,\"tid\":1,\"ts\":8.000,\"dur\":2.000}");
    /* A slice starting where the parent ends is its sibling: not clipped. */
    pos_of(t, "\"name\":\"next\",\"pid\":1,\"tid\":1,\"ts\":10.000,\"dur\":1.000}");
}

static void test_slices_on_other_threads_do_not_clip_each_other(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "step", 0, 10000, NULL), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 2, "phase", 5000, 10000, NULL), 0);
    assert_int_equal(tm_chrome_slice(c, 2, 1, "step", 5000, 10000, NULL), 0);
    size_t clipped = 9;
    assert_int_equal(tm_chrome_close(&c, &clipped), 0);
    assert_int_equal(clipped, 0);
}

static void test_slice_args_are_copied_in(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "step 3", 0, 1000, "{\"data_wait_s\":0.25}"), 0);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    pos_of(slurp(tpath), "\"dur\":1.000,\"args\":{\"data_wait_s\":0.25}}");
}

static void test_bad_slices_are_refused(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, tpath), 0);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "neg", 10, -1, NULL), -EINVAL);
    assert_int_equal(tm_chrome_slice(c, 1, 1, "args", 10, 1, "not json"), -EINVAL);
    assert_int_equal(tm_chrome_close(&c, NULL), 0);
    assert_null(strstr(slurp(tpath), "\"ph\":\"X\""));
}

static void test_open_in_missing_directory_fails(void **state)
{
    (void)state;
    tm_chrome *c = NULL;
    assert_int_equal(tm_chrome_open(&c, "/nonexistent/x/trace.json"), -ENOENT);
    assert_null(c);
    assert_non_null(strstr(tm_last_error(), "/nonexistent/x/trace.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_empty_trace_is_a_document_with_no_events, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_metadata_names_processes_and_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_times_are_microseconds_with_three_decimals, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_strings_escape_quote_backslash_and_controls_only,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_counter_leaves_out_unavailable_values, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_slices_are_sorted_by_start_parent_first, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_child_overrunning_its_parent_is_clipped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_slices_on_other_threads_do_not_clip_each_other, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_slice_args_are_copied_in, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_slices_are_refused, setup, teardown),
        cmocka_unit_test(test_open_in_missing_directory_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
