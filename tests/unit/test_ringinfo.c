/*
 * test_ringinfo.c - what a flight-recorder ring dropped (src/lib/ringinfo.c),
 * from real record files: a rank ring that wrapped, a plain file whose
 * steps do not start at 0 (attached mid-run: not a ring, nothing dropped),
 * and a system ring and a worker ring that are not training files.
 */
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

#define MS 1000000LL

static char dir[64];

static void write_steps(const char *name, const char *role, int rank, uint64_t max_size,
                        uint64_t from, uint64_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    tm_rec_opts o = {.role = role, .rank = rank, .max_size = max_size};
    tm_rec *w = NULL;
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    int64_t t0 = tm_now_mono_ns();
    for (uint64_t i = from; i < from + n; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = t0 + (int64_t)i * MS,
                            .end_ns = t0 + (int64_t)(i + 1) * MS,
                            .data_wait_ns = MS / 2};
        uint8_t buf[128];
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&w);
}

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_ringinfo.XXXXXX");
    assert_non_null(mkdtemp(dir));
    /* 20 KiB: four 4 KiB blocks after the header, about 250 step records;
     * 1000 steps wrap it. */
    write_steps("rank0.tmr", "rank0", 0, 20480, 0, 1000);
    write_steps("pid9.tmr", "pid9", -1, 0, 5, 10);
    write_steps("system.tmr", "system", -1, 20480, 0, 1000);
    write_steps("worker-r0-1.tmr", "worker0", 0, 20480, 0, 1000);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The source index and lowest kept step number of the file named name,
 * worked out from the loaded steps directly. */
static uint32_t source_of(const tm_run *r, const char *name, uint64_t *lowest, size_t *n)
{
    const tm_run_source *src;
    size_t ns = tm_run_sources(r, &src);
    uint32_t s = UINT32_MAX;
    for (uint32_t i = 0; i < ns; i++)
        if (strcmp(src[i].file, name) == 0)
            s = i;
    assert_true(s != UINT32_MAX);
    const tm_run_step *st;
    size_t nst = tm_run_steps(r, &st);
    *lowest = UINT64_MAX;
    *n = 0;
    for (size_t i = 0; i < nst; i++)
        if (st[i].source == s) {
            ++*n;
            if (st[i].s.step < *lowest)
                *lowest = st[i].s.step;
        }
    return s;
}

static void test_wrapped_rank_ring_dropped_the_steps_below_its_first(void **st)
{
    (void)st;
    const char *dirs[] = {dir};
    tm_run *r = NULL;
    assert_int_equal(tm_run_load(&r, dirs, 1), 0);
    uint64_t lowest;
    size_t kept;
    uint32_t s = source_of(r, "rank0.tmr", &lowest, &kept);
    assert_true(lowest > 0 && lowest < 1000); /* it wrapped, and kept some */
    assert_int_equal(kept, 1000 - lowest);

    tm_ringinfo ri[8];
    size_t n = tm_run_ringinfo(r, ri, 8);
    assert_int_equal(n, 2); /* rank0 and pid9: not the system or worker files */
    const tm_ringinfo *k = ri[0].source == s ? &ri[0] : &ri[1];
    assert_int_equal(k->source, s);
    assert_true(k->ring);
    assert_int_equal(k->first_step, lowest);
    assert_int_equal(k->steps_dropped, lowest);
    assert_int_equal(k->steps_total, 1000);
    assert_int_equal(k->steps_kept, 1000 - lowest);
    const tm_run_source *src;
    tm_run_sources(r, &src);
    assert_true(k->kept_from_ns > 0);
    assert_int_equal(k->kept_from_ns, src[s].first_ns);
    /* cap limits what is written, not the count */
    assert_int_equal(tm_run_ringinfo(r, ri, 1), 2);
    tm_run_free(&r);
}

static void test_plain_file_drops_nothing_whatever_its_first_step(void **st)
{
    (void)st;
    const char *dirs[] = {dir};
    tm_run *r = NULL;
    assert_int_equal(tm_run_load(&r, dirs, 1), 0);
    uint64_t lowest;
    size_t kept;
    uint32_t s = source_of(r, "pid9.tmr", &lowest, &kept);
    assert_int_equal(lowest, 5);
    tm_ringinfo ri[2];
    assert_int_equal(tm_run_ringinfo(r, ri, 2), 2);
    const tm_ringinfo *k = ri[0].source == s ? &ri[0] : &ri[1];
    assert_false(k->ring);
    assert_int_equal(k->first_step, 5);
    assert_int_equal(k->steps_dropped, 0);
    assert_int_equal(k->steps_total, 10); /* the steps there, not 5 + 10 */
    tm_run_free(&r);
}

static void test_summary_adds_up_the_training_files(void **st)
{
    (void)st;
    const char *dirs[] = {dir};
    tm_run *r = NULL;
    assert_int_equal(tm_run_load(&r, dirs, 1), 0);
    uint64_t lowest;
    size_t kept;
    uint32_t s = source_of(r, "rank0.tmr", &lowest, &kept);
    const tm_run_source *src;
    tm_run_sources(r, &src);
    tm_ringinfo sum;
    assert_true(tm_run_ring_summary(r, &sum));
    assert_true(sum.ring);
    assert_int_equal(sum.source, 1); /* one ring among the training files */
    assert_int_equal(sum.steps_total, 1000 + 10);
    assert_int_equal(sum.steps_dropped, lowest);
    assert_int_equal(sum.steps_kept, 1000 - lowest + 10);
    assert_int_equal(sum.kept_from_ns, src[s].first_ns);
    tm_run_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrapped_rank_ring_dropped_the_steps_below_its_first),
        cmocka_unit_test(test_plain_file_drops_nothing_whatever_its_first_step),
        cmocka_unit_test(test_summary_adds_up_the_training_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
