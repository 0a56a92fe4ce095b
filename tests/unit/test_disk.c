/*
 * test_disk.c - the diskstats parser, the iostat -x arithmetic, the
 * physical-disk test and the collector, on fixture trees under
 * tests/fixtures/disk* and on temporary /proc roots the tests rewrite.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainmon.h"
#include "util.h"

#define FIX_SYS "tests/fixtures/disk/sys"

/* ------------------------------------------------------- allocation count */

/* Counts allocations so that a test can check the steady state allocates
 * nothing.  Sanitizers bring their own malloc, so the count is off there. */
#if defined(__SANITIZE_ADDRESS__)
#define TM_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TM_COUNT_ALLOCS 0
#endif
#endif
#ifndef TM_COUNT_ALLOCS
#define TM_COUNT_ALLOCS 1
#endif

#if TM_COUNT_ALLOCS
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
static unsigned long allocs;
void *malloc(size_t n)
{
    allocs++;
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size)
{
    allocs++;
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n)
{
    allocs++;
    return __libc_realloc(p, n);
}
#endif

/* ---------------------------------------------------------------- helpers */

static void assert_near(double got, double want)
{
    if (fabs(got - want) > 1e-9 * (fabs(want) > 1 ? fabs(want) : 1))
        fail_msg("got %.12g, want %.12g", got, want);
}

static size_t parse_file(const char *path, tm_diskstat *out, size_t cap)
{
    static char buf[65536];
    ssize_t len = tm_read_file(path, buf, sizeof buf);
    if (len < 0)
        fail_msg("%s", tm_last_error());
    int n = tm_diskstats_parse(buf, (size_t)len, out, cap);
    assert_true(n >= 0);
    return (size_t)n;
}

static const tm_diskstat *find_stat(const tm_diskstat *s, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0)
            return &s[i];
    return NULL;
}

/* A temporary root with proc/ and sys/ below it. */
struct tmp_root {
    char dir[64];
    char proc[96];
    char diskstats[128];
};

static void tmp_root_make(struct tmp_root *t)
{
    strcpy(t->dir, "/tmp/tm_test_disk_XXXXXX");
    assert_non_null(mkdtemp(t->dir));
    snprintf(t->proc, sizeof t->proc, "%s/proc", t->dir);
    snprintf(t->diskstats, sizeof t->diskstats, "%s/diskstats", t->proc);
    assert_int_equal(mkdir(t->proc, 0755), 0);
    tm_set_proc_root(t->proc);
}

/* Rewrites diskstats in place (same inode), as the kernel's file changes
 * under a kept-open descriptor. */
static void tmp_root_write(const struct tmp_root *t, const char *text)
{
    FILE *f = fopen(t->diskstats, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void tmp_root_remove(struct tmp_root *t)
{
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    assert_int_equal(system(cmd), 0);
}

static int reset_roots(void **state)
{
    (void)state;
    tm_set_proc_root(NULL);
    tm_set_sys_root(NULL);
    return 0;
}

/* A known pair over T = 2 s; every delta is chosen so that the expected
 * value is exact (see test_disk_rate_matches_hand_computed_values). */
static tm_diskstat pair_prev(void)
{
    tm_diskstat s = {.major = 8, .minor = 0, .name = "sda", .nfields = 20};
    s.rd_ios = 1000, s.rd_merges = 100, s.rd_sec = 80000, s.rd_ms = 5000;
    s.wr_ios = 2000, s.wr_merges = 500, s.wr_sec = 160000, s.wr_ms = 9000;
    s.inflight = 2, s.io_ms = 100000, s.weighted_ms = 200000;
    s.dc_ios = 10, s.dc_merges = 0, s.dc_sec = 2048, s.dc_ms = 30;
    s.fl_ios = 50, s.fl_ms = 100;
    return s;
}

static tm_diskstat pair_cur(void)
{
    tm_diskstat s = pair_prev();
    s.rd_ios += 400, s.rd_merges += 100, s.rd_sec += 409600, s.rd_ms += 2000;
    s.wr_ios += 100, s.wr_merges += 300, s.wr_sec += 8000, s.wr_ms += 1500;
    s.io_ms += 1500, s.weighted_ms += 3000;
    s.dc_ios += 10, s.dc_merges += 10, s.dc_sec += 20480, s.dc_ms += 40;
    s.fl_ios += 10, s.fl_ms += 25;
    return s;
}

/* ---------------------------------------------------------------- parsing */

static void test_diskstats_parses_20_field_line(void **state)
{
    (void)state;
    tm_diskstat s[16];
    size_t n = parse_file("tests/fixtures/disk/proc/diskstats", s, 16);
    assert_int_equal(n, 6);
    const tm_diskstat *d = find_stat(s, n, "nvme0n1");
    assert_non_null(d);
    assert_int_equal(d->major, 259);
    assert_int_equal(d->minor, 0);
    assert_int_equal(d->nfields, 20);
    assert_int_equal(d->rd_ios, 255999);
    assert_int_equal(d->rd_merges, 814);
    assert_int_equal(d->rd_sec, 12369153);
    assert_int_equal(d->rd_ms, 47919);
    assert_int_equal(d->wr_ios, 996852);
    assert_int_equal(d->wr_merges, 81);
    assert_int_equal(d->wr_sec, 36123024);
    assert_int_equal(d->wr_ms, 425995);
    assert_int_equal(d->inflight, 3);
    assert_int_equal(d->io_ms, 301795);
    assert_int_equal(d->weighted_ms, 580470);
    assert_int_equal(d->dc_ios, 1204);
    assert_int_equal(d->dc_merges, 7);
    assert_int_equal(d->dc_sec, 9830400);
    assert_int_equal(d->dc_ms, 311);
    assert_int_equal(d->fl_ios, 60602);
    assert_int_equal(d->fl_ms, 106555);
}

static void test_diskstats_parses_18_field_line(void **state)
{
    (void)state;
    tm_diskstat s[16];
    size_t n = parse_file("tests/fixtures/disk18/proc/diskstats", s, 16);
    assert_int_equal(n, 3);
    const tm_diskstat *d = find_stat(s, n, "sda");
    assert_non_null(d);
    assert_int_equal(d->nfields, 18);
    assert_int_equal(d->rd_ios, 26389);
    assert_int_equal(d->wr_ms, 2034);
    assert_int_equal(d->weighted_ms, 12156);
    assert_int_equal(d->dc_ios, 4044);
    assert_int_equal(d->dc_merges, 32);
    assert_int_equal(d->dc_sec, 103184);
    assert_int_equal(d->dc_ms, 697);
    assert_int_equal(d->fl_ios, 0);
    assert_int_equal(d->fl_ms, 0);
}

static void test_diskstats_parses_14_field_line(void **state)
{
    (void)state;
    tm_diskstat s[16];
    size_t n = parse_file("tests/fixtures/disk14/proc/diskstats", s, 16);
    const tm_diskstat *d = find_stat(s, n, "hda");
    assert_non_null(d);
    assert_int_equal(d->major, 3);
    assert_int_equal(d->nfields, 14);
    assert_int_equal(d->rd_ios, 446216);
    assert_int_equal(d->rd_merges, 784926);
    assert_int_equal(d->rd_sec, 9550688);
    assert_int_equal(d->rd_ms, 4382310);
    assert_int_equal(d->wr_ios, 424847);
    assert_int_equal(d->wr_merges, 312726);
    assert_int_equal(d->wr_sec, 5922052);
    assert_int_equal(d->wr_ms, 19310380);
    assert_int_equal(d->inflight, 0);
    assert_int_equal(d->io_ms, 3376340);
    assert_int_equal(d->weighted_ms, 23705160);
    assert_int_equal(d->dc_ios, 0);
}

static void test_diskstats_skips_7_field_partition_line(void **state)
{
    (void)state;
    tm_diskstat s[16];
    size_t n = parse_file("tests/fixtures/disk14/proc/diskstats", s, 16);
    assert_int_equal(n, 2);
    assert_string_equal(s[0].name, "hda");
    assert_string_equal(s[1].name, "sda");
    assert_null(find_stat(s, n, "hda1"));
}

static void test_diskstats_skips_garbage_lines(void **state)
{
    (void)state;
    const char text[] =
        "\n"
        "garbage\n"
        "   \t  \n"
        "8 0\n"
        "8 0 sdx\n"
        "8 0 sdx 1 2 3 4 5 6 7 8 9 10\n"                          /* 13 fields */
        "8 0 sdx 1 2 x 4 5 6 7 8 9 10 11\n"                       /* a word among numbers */
        "8 0 sdx 1 2 3 4 5 6 7 8 9 10 11 12abc\n"                 /* a number with a tail */
        "8x 0 sdx 1 2 3 4 5 6 7 8 9 10 11\n"                      /* bad major */
        "99999999999 0 sdx 1 2 3 4 5 6 7 8 9 10 11\n"             /* major beyond 32 bits */
        "8 0 sdx 1 2 99999999999999999999999 4 5 6 7 8 9 10 11\n" /* beyond 64 bits */
        "8 0 sdx 1 2 3 4294967296 5 6 7 8 9 10 11\n"              /* ms beyond 32 bits */
        "8 0 sdx -1 2 3 4 5 6 7 8 9 10 11\n"
        "8 0 abcdefghijklmnopqrstuvwxyz0123456 1 2 3 4 5 6 7 8 9 10 11\n" /* name too long */
        "8 16 sdb 1 2 3 4 5 6 7 8 9 10 11\n"
        "\x01\x02\xff\n"
        "8 32 sdc 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n";
    tm_diskstat s[16];
    int n = tm_diskstats_parse(text, sizeof text - 1, s, 16);
    assert_int_equal(n, 2);
    assert_string_equal(s[0].name, "sdb");
    assert_int_equal(s[0].nfields, 14);
    assert_int_equal(s[0].weighted_ms, 11);
    assert_string_equal(s[1].name, "sdc");
    assert_int_equal(s[1].nfields, 18);
    assert_int_equal(s[1].dc_ms, 15);
}

static void test_diskstats_truncated_buffer_is_not_read_past_len(void **state)
{
    (void)state;
    /* An exact-size heap copy without a NUL: a sanitizer build catches a
     * read past the end. */
    const char text[] = "8 0 sda 1 2 3 4 5 6 7 8 9 10 11\n8 16 sdb 1 2 3 4 5 6 7 8 9 10";
    size_t len = sizeof text - 1;
    char *buf = malloc(len);
    assert_non_null(buf);
    memcpy(buf, text, len);
    tm_diskstat s[4];
    assert_int_equal(tm_diskstats_parse(buf, len, s, 4), 1);
    assert_string_equal(s[0].name, "sda");
    /* Cut inside the first line's name and numbers: nothing, no crash. */
    for (size_t cut = 0; cut < 20; cut++)
        assert_int_equal(tm_diskstats_parse(buf, cut, s, 4), 0);
    free(buf);
}

static void test_diskstats_last_line_needs_no_newline(void **state)
{
    (void)state;
    const char text[] = "8 0 sda 1 2 3 4 5 6 7 8 9 10 11";
    tm_diskstat s[1];
    assert_int_equal(tm_diskstats_parse(text, sizeof text - 1, s, 1), 1);
    assert_int_equal(s[0].weighted_ms, 11);
}

static void test_diskstats_fields_beyond_20_are_ignored(void **state)
{
    (void)state;
    const char text[] = "8 0 sda 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19\n";
    tm_diskstat s[1];
    assert_int_equal(tm_diskstats_parse(text, sizeof text - 1, s, 1), 1);
    assert_int_equal(s[0].nfields, 20);
    assert_int_equal(s[0].fl_ios, 16);
    assert_int_equal(s[0].fl_ms, 17);
}

static void test_diskstats_parse_stops_at_cap(void **state)
{
    (void)state;
    tm_diskstat s[3];
    memset(s, 0xab, sizeof s);
    assert_int_equal(parse_file("tests/fixtures/disk/proc/diskstats", s, 2), 2);
    assert_string_equal(s[1].name, "nvme0n1");
    /* The entry past cap is untouched. */
    assert_int_equal(s[2].major, 0xabababab);
}

static void test_diskstats_parse_rejects_null_arguments(void **state)
{
    (void)state;
    tm_diskstat s[1];
    assert_int_equal(tm_diskstats_parse(NULL, 0, s, 1), -EINVAL);
    assert_int_equal(tm_diskstats_parse("x", 1, NULL, 1), -EINVAL);
}

/* ------------------------------------------------------------------ rates */

static void test_disk_rate_matches_hand_computed_values(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    tm_diskrate r;
    tm_disk_rate(&a, &b, 2.0, &r);
    assert_string_equal(r.name, "sda");
    assert_near(r.r_s, 200);      /* 400 ios / 2 s */
    assert_near(r.w_s, 50);       /* 100 / 2 */
    assert_near(r.rkb_s, 102400); /* 409600 sectors / 2 / 2 s */
    assert_near(r.wkb_s, 2000);   /* 8000 / 2 / 2 */
    assert_near(r.rrqm_s, 50);    /* 100 / 2 */
    assert_near(r.wrqm_s, 150);   /* 300 / 2 */
    assert_near(r.rrqm_pct, 20);  /* 100 * 100 / (100 + 400) */
    assert_near(r.wrqm_pct, 75);  /* 100 * 300 / (300 + 100) */
    assert_near(r.r_await, 5);    /* 2000 ms / 400 */
    assert_near(r.w_await, 15);   /* 1500 / 100 */
    assert_near(r.rareq_sz, 512); /* 409600 / 400 / 2 kB */
    assert_near(r.wareq_sz, 40);  /* 8000 / 100 / 2 */
    assert_near(r.aqu_sz, 1.5);   /* 3000 ms / 1000 / 2 s */
    assert_near(r.util, 75);      /* 100 * 1500 / 2000 */
    assert_near(r.d_s, 5);        /* 10 / 2 */
    assert_near(r.dkb_s, 5120);   /* 20480 / 2 / 2 */
    assert_near(r.drqm_s, 5);
    assert_near(r.drqm_pct, 50);
    assert_near(r.d_await, 4);     /* 40 / 10 */
    assert_near(r.dareq_sz, 1024); /* 20480 / 10 / 2 */
    assert_near(r.f_s, 5);
    assert_near(r.f_await, 2.5); /* 25 / 10 */
}

static void test_diskstats_ms_counter_wraps_at_32_bits(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    a.rd_ms = 4294967000u;
    b.rd_ms = 200; /* 296 ms to the wrap, 200 after it */
    a.io_ms = 4294967000u;
    b.io_ms = 500;
    tm_diskrate r;
    tm_disk_rate(&a, &b, 2.0, &r);
    assert_near(r.r_await, 496.0 / 400.0);
    assert_near(r.util, 100.0 * 796 / 2000);
}

static void test_disk_rate_counter_going_backwards_is_zero_not_negative(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    b.rd_ios = 10; /* device removed and added again */
    b.rd_sec = 80;
    tm_diskrate r;
    tm_disk_rate(&a, &b, 2.0, &r);
    assert_near(r.r_s, 0);
    assert_near(r.rkb_s, 0);
    assert_near(r.r_await, 0);
    assert_near(r.rareq_sz, 0);
    assert_true(r.w_s >= 0);
    assert_near(r.w_s, 50);
}

static void test_disk_rate_after_device_readded_times_do_not_read_as_wrap(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_prev();
    b.rd_ios = 3, b.rd_ms = 4, b.wr_ios = 1, b.wr_ms = 1;
    b.io_ms = 5, b.weighted_ms = 5; /* restarted from 0: modulo 2^32 a huge delta */
    tm_diskrate r;
    tm_disk_rate(&a, &b, 1.0, &r);
    assert_near(r.util, 0);
    assert_near(r.aqu_sz, 0);
    assert_near(r.w_await, 0);
}

static void test_disk_rate_util_capped_at_100(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    b.io_ms = a.io_ms + 2100; /* 2.1 s busy in 2 s: tick rounding at the edges */
    tm_diskrate r;
    tm_disk_rate(&a, &b, 2.0, &r);
    assert_near(r.util, 100);
}

static void test_disk_rate_merge_percent_never_exceeds_100(void **state)
{
    (void)state;
    /* A merge delta beyond 2^53 with one request: 100 * m / (m + 1)
     * multiplied first rounds to 100.00000000000001 (found by the fuzzer). */
    tm_diskstat a = pair_prev(), b = pair_prev();
    a.rd_merges = 0, a.rd_ios = 0;
    b.rd_merges = 16496805170278156200u, b.rd_ios = 1;
    tm_diskrate r;
    tm_disk_rate(&a, &b, 1.0, &r);
    assert_true(r.rrqm_pct <= 100.0);
    assert_near(r.rrqm_pct, 100.0);
}

static void test_disk_rate_await_is_zero_without_ios(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_prev();
    tm_diskrate r;
    tm_disk_rate(&a, &b, 1.0, &r);
    assert_near(r.r_await, 0);
    assert_near(r.w_await, 0);
    assert_near(r.d_await, 0);
    assert_near(r.f_await, 0);
    assert_near(r.rrqm_pct, 0);
    assert_near(r.rareq_sz, 0);
    assert_near(r.util, 0);
}

static void test_disk_rate_discard_is_nan_on_14_fields(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    a.nfields = 14; /* either sample lacking them is enough */
    tm_diskrate r;
    tm_disk_rate(&a, &b, 2.0, &r);
    assert_true(isnan(r.d_s));
    assert_true(isnan(r.dkb_s));
    assert_true(isnan(r.drqm_s));
    assert_true(isnan(r.drqm_pct));
    assert_true(isnan(r.d_await));
    assert_true(isnan(r.dareq_sz));
    assert_true(isnan(r.f_s));
    assert_true(isnan(r.f_await));
    assert_near(r.r_s, 200);
}

static void test_disk_rate_flush_is_nan_on_18_fields(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    b.nfields = 18;
    tm_diskrate r;
    tm_disk_rate(&a, &b, 2.0, &r);
    assert_true(isnan(r.f_s));
    assert_true(isnan(r.f_await));
    assert_near(r.d_s, 5);
    assert_near(r.d_await, 4);
}

static void test_disk_rate_without_interval_has_nan_rates(void **state)
{
    (void)state;
    tm_diskstat a = pair_prev(), b = pair_cur();
    tm_diskrate r;
    tm_disk_rate(&a, &b, 0.0, &r);
    assert_true(isnan(r.r_s));
    assert_true(isnan(r.util));
    /* Per-request values do not need an interval. */
    assert_near(r.r_await, 5);
}

/* ---------------------------------------------------------- physical disk */

static void test_disk_is_physical_on_fixture_tree(void **state)
{
    (void)state;
    tm_set_sys_root(FIX_SYS);
    assert_true(tm_disk_is_physical("sda"));
    assert_true(tm_disk_is_physical("nvme0n1"));
    assert_false(tm_disk_is_physical("sda1"));
    assert_false(tm_disk_is_physical("nvme0n1p1"));
    assert_false(tm_disk_is_physical("loop0"));
    assert_false(tm_disk_is_physical("dm-0"));
    assert_false(tm_disk_is_physical("nosuch"));
    assert_false(tm_disk_is_physical(""));
    assert_false(tm_disk_is_physical(".."));
}

static void test_disk_block_entry_with_partition_file_is_not_physical(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    char p[256];
    snprintf(p, sizeof p, "%s/block", t.dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/block/sdq1", t.dir);
    assert_int_equal(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/block/sdq1/partition", t.dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(p, sizeof p, "%s/block/cciss!c0d0", t.dir);
    assert_int_equal(mkdir(p, 0755), 0);
    tm_set_sys_root(t.dir);
    assert_false(tm_disk_is_physical("sdq1"));
    /* A real directory (old sysfs) cannot be told virtual: taken as a disk,
     * and a '/' in a diskstats name is a '!' in sysfs. */
    assert_true(tm_disk_is_physical("cciss/c0d0"));
    tmp_root_remove(&t);
}

/* -------------------------------------------------------------- collector */

#define LINE(maj, min, name, rd, rdms, io)                                                         \
    maj " " min " " name " " rd " 0 " rd "0 " rdms " 0 0 0 0 0 " io " " io " 0 0 0 0 0 0\n"

static void test_disk_first_sample_has_no_rates(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    tm_set_sys_root(FIX_SYS);
    tmp_root_write(&t,
                   LINE("8", "0", "sda", "100", "50", "10") LINE("7", "0", "loop0", "5", "1", "1"));
    tm_disk *d = NULL;
    assert_int_equal(tm_disk_open(&d, NULL, 0), 0);
    const tm_diskrate *r;
    size_t n = 99;
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 0);
    const tm_diskstat *raw;
    assert_int_equal(tm_disk_last_raw(d, &raw, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(raw[0].name, "sda");
    assert_int_equal(raw[0].rd_ios, 100);
    tm_disk_close(&d);
    assert_null(d);
    tmp_root_remove(&t);
}

static void test_disk_selects_physical_disks_by_default(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    tm_set_sys_root(FIX_SYS);
    tmp_root_write(&t,
                   LINE("7", "0", "loop0", "5", "1", "1") LINE("8", "0", "sda", "100", "50", "10")
                       LINE("8", "1", "sda1", "90", "40", "10")
                           LINE("253", "0", "dm-0", "90", "40", "10"));
    tm_disk *d = NULL;
    assert_int_equal(tm_disk_open(&d, NULL, 0), 0);
    const tm_diskrate *r;
    size_t n;
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    tmp_root_write(&t,
                   LINE("7", "0", "loop0", "9", "2", "2") LINE("8", "0", "sda", "300", "550", "30")
                       LINE("8", "1", "sda1", "190", "90", "20")
                           LINE("253", "0", "dm-0", "190", "90", "20"));
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].name, "sda");
    assert_int_equal(r[0].major, 8);
    assert_near(r[0].r_await, 2.5);  /* 500 ms / 200 reads */
    assert_near(r[0].rareq_sz, 5.0); /* 2000 sectors / 200 / 2 */
    assert_true(r[0].r_s > 0);
    tm_disk_close(&d);
    tmp_root_remove(&t);
}

static void test_disk_named_devices_are_selected(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    tm_set_sys_root(FIX_SYS);
    const char *s1 = LINE("7", "0", "loop0", "5", "1", "1") LINE("8", "0", "sda", "100", "50", "10")
        LINE("8", "1", "sda1", "90", "40", "10");
    const char *s2 = LINE("7", "0", "loop0", "9", "5", "2")
        LINE("8", "0", "sda", "300", "550", "30") LINE("8", "1", "sda1", "190", "90", "20");
    tmp_root_write(&t, s1);
    const char *names[] = {"/dev/sda1", "loop0", "nosuch"};
    tm_disk *d = NULL;
    assert_int_equal(tm_disk_open(&d, names, 3), 0);
    const tm_diskrate *r;
    size_t n;
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    tmp_root_write(&t, s2);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(r[0].name, "loop0");
    assert_near(r[0].r_await, 1.0); /* 4 ms / 4 reads */
    assert_string_equal(r[1].name, "sda1");
    assert_near(r[1].r_await, 0.5); /* 50 ms / 100 reads */
    tm_disk_close(&d);
    tmp_root_remove(&t);
}

static int has_rate(const tm_diskrate *r, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(r[i].name, name) == 0)
            return 1;
    return 0;
}

static void test_disk_vanished_device_is_left_out_and_new_one_rated_from_second_sample(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    tm_set_sys_root(FIX_SYS);
    const char *sda = LINE("8", "0", "sda", "100", "50", "10");
    const char *sda2 = LINE("8", "0", "sda", "200", "60", "20");
    const char *nvme1 = LINE("259", "0", "nvme0n1", "100", "50", "10");
    const char *nvme2 = LINE("259", "0", "nvme0n1", "200", "150", "20");
    const char *nvme3 = LINE("259", "0", "nvme0n1", "300", "350", "30");
    char text[512];
    tm_disk *d = NULL;
    const tm_diskrate *r;
    size_t n;

    tmp_root_write(&t, sda);
    assert_int_equal(tm_disk_open(&d, NULL, 0), 0);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);

    /* sda vanished, nvme0n1 appeared: neither has a rate yet. */
    tmp_root_write(&t, nvme1);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 0);

    /* sda is back (first sample again), nvme0n1 has its second sample. */
    snprintf(text, sizeof text, "%s%s", sda, nvme2);
    tmp_root_write(&t, text);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].name, "nvme0n1");
    assert_near(r[0].r_await, 1.0); /* 100 ms / 100 reads */

    snprintf(text, sizeof text, "%s%s", sda2, nvme3);
    tmp_root_write(&t, text);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 2);
    assert_true(has_rate(r, n, "sda"));
    assert_true(has_rate(r, n, "nvme0n1"));
    assert_string_equal(r[0].name, "sda"); /* diskstats order */
    assert_near(r[0].r_await, 0.1);        /* sda: 10 ms / 100 reads */
    tm_disk_close(&d);
    tmp_root_remove(&t);
}

static void test_disk_physical_verdict_is_cached_per_device(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    tm_set_sys_root(FIX_SYS);
    tmp_root_write(&t, LINE("8", "0", "sda", "100", "50", "10"));
    tm_disk *d = NULL;
    const tm_diskrate *r;
    size_t n;
    assert_int_equal(tm_disk_open(&d, NULL, 0), 0);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    /* sysfs is gone: a cached verdict keeps sda, a new device is asked
     * about and found not physical. */
    tm_set_sys_root(t.dir);
    tmp_root_write(&t, LINE("8", "0", "sda", "200", "60", "20")
                           LINE("259", "0", "nvme0n1", "1", "1", "1"));
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    tmp_root_write(&t, LINE("8", "0", "sda", "300", "70", "30")
                           LINE("259", "0", "nvme0n1", "2", "2", "2"));
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].name, "sda");
    tm_disk_close(&d);
    tmp_root_remove(&t);
}

static void test_disk_sample_grows_for_a_large_file(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    /* 3000 devices, about 200 kB: beyond the initial buffer and arrays. */
    tm_buf b;
    tm_buf_init(&b, 1 << 20);
    for (int i = 0; i < 3000; i++)
        assert_int_equal(
            tm_buf_printf(&b, "%4d %7d dev%d 10 0 40 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", 7, i, i), 0);
    tmp_root_write(&t, b.data);
    tm_buf_free(&b);
    const char *names[] = {"dev2999"};
    tm_disk *d = NULL;
    const tm_diskrate *r;
    size_t n;
    assert_int_equal(tm_disk_open(&d, names, 1), 0);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    const tm_diskstat *raw;
    assert_int_equal(tm_disk_last_raw(d, &raw, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(raw[0].name, "dev2999");
    assert_int_equal(raw[0].rd_sec, 40);
    tm_disk_close(&d);
    tmp_root_remove(&t);
}

static void test_disk_sample_fails_on_file_over_cap(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    size_t len = (1u << 20) + 100;
    char *big = malloc(len + 1);
    assert_non_null(big);
    memset(big, ' ', len);
    big[len] = '\0';
    tmp_root_write(&t, big);
    free(big);
    tm_disk *d = NULL;
    const tm_diskrate *r;
    size_t n;
    assert_int_equal(tm_disk_open(&d, NULL, 0), 0);
    assert_int_equal(tm_disk_sample(d, &r, &n), -EFBIG);
    assert_non_null(strstr(tm_last_error(), "larger than"));
    tm_disk_close(&d);
    tmp_root_remove(&t);
}

static void test_disk_open_fails_without_diskstats(void **state)
{
    (void)state;
    struct tmp_root t;
    tmp_root_make(&t);
    tm_disk *d = (tm_disk *)1;
    assert_int_equal(tm_disk_open(&d, NULL, 0), -ENOENT);
    assert_null(d);
    assert_non_null(strstr(tm_last_error(), "diskstats"));
    tmp_root_remove(&t);
}

static void test_disk_open_rejects_overlong_name(void **state)
{
    (void)state;
    const char *names[] = {"a-device-name-longer-than-thirty-one-bytes"};
    tm_disk *d = (tm_disk *)1;
    assert_int_equal(tm_disk_open(&d, names, 1), -ENAMETOOLONG);
    assert_null(d);
}

static void test_disk_sample_does_not_allocate_in_steady_state(void **state)
{
    (void)state;
#if TM_COUNT_ALLOCS
    struct tmp_root t;
    tmp_root_make(&t);
    tm_set_sys_root(FIX_SYS);
    tmp_root_write(&t,
                   LINE("7", "0", "loop0", "5", "1", "1") LINE("8", "0", "sda", "100", "50", "10")
                       LINE("259", "0", "nvme0n1", "100", "50", "10"));
    tm_disk *d = NULL;
    const tm_diskrate *r;
    size_t n;
    assert_int_equal(tm_disk_open(&d, NULL, 0), 0);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    unsigned long before = allocs;
    for (int i = 0; i < 100; i++)
        assert_int_equal(tm_disk_sample(d, &r, &n), 0);
    unsigned long after = allocs;
    assert_int_equal(n, 2);
    assert_int_equal(after - before, 0);
    tm_disk_close(&d);
    tmp_root_remove(&t);
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_diskstats_parses_20_field_line),
        cmocka_unit_test(test_diskstats_parses_18_field_line),
        cmocka_unit_test(test_diskstats_parses_14_field_line),
        cmocka_unit_test(test_diskstats_skips_7_field_partition_line),
        cmocka_unit_test(test_diskstats_skips_garbage_lines),
        cmocka_unit_test(test_diskstats_truncated_buffer_is_not_read_past_len),
        cmocka_unit_test(test_diskstats_last_line_needs_no_newline),
        cmocka_unit_test(test_diskstats_fields_beyond_20_are_ignored),
        cmocka_unit_test(test_diskstats_parse_stops_at_cap),
        cmocka_unit_test(test_diskstats_parse_rejects_null_arguments),
        cmocka_unit_test(test_disk_rate_matches_hand_computed_values),
        cmocka_unit_test(test_diskstats_ms_counter_wraps_at_32_bits),
        cmocka_unit_test(test_disk_rate_counter_going_backwards_is_zero_not_negative),
        cmocka_unit_test(test_disk_rate_after_device_readded_times_do_not_read_as_wrap),
        cmocka_unit_test(test_disk_rate_util_capped_at_100),
        cmocka_unit_test(test_disk_rate_merge_percent_never_exceeds_100),
        cmocka_unit_test(test_disk_rate_await_is_zero_without_ios),
        cmocka_unit_test(test_disk_rate_discard_is_nan_on_14_fields),
        cmocka_unit_test(test_disk_rate_flush_is_nan_on_18_fields),
        cmocka_unit_test(test_disk_rate_without_interval_has_nan_rates),
        cmocka_unit_test_teardown(test_disk_is_physical_on_fixture_tree, reset_roots),
        cmocka_unit_test_teardown(test_disk_block_entry_with_partition_file_is_not_physical,
                                  reset_roots),
        cmocka_unit_test_teardown(test_disk_first_sample_has_no_rates, reset_roots),
        cmocka_unit_test_teardown(test_disk_selects_physical_disks_by_default, reset_roots),
        cmocka_unit_test_teardown(test_disk_named_devices_are_selected, reset_roots),
        cmocka_unit_test_teardown(
            test_disk_vanished_device_is_left_out_and_new_one_rated_from_second_sample,
            reset_roots),
        cmocka_unit_test_teardown(test_disk_physical_verdict_is_cached_per_device, reset_roots),
        cmocka_unit_test_teardown(test_disk_sample_grows_for_a_large_file, reset_roots),
        cmocka_unit_test_teardown(test_disk_sample_fails_on_file_over_cap, reset_roots),
        cmocka_unit_test_teardown(test_disk_open_fails_without_diskstats, reset_roots),
        cmocka_unit_test_teardown(test_disk_open_rejects_overlong_name, reset_roots),
        cmocka_unit_test_teardown(test_disk_sample_does_not_allocate_in_steady_state, reset_roots),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
