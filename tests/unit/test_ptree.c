/*
 * test_ptree.c - the /proc/PID parsers and the process-tree collector, on
 * fixture trees (tests/fixtures/ptree_*) and on live processes.
 *
 * The fixture tree (tests/fixtures/ptree_basic/proc):
 *   1 init ── 100 python (threads 100, 105) ── 101 pt_data_worker ── 106 grandchild
 *          │                                ├─ 102 "a) b (c" (state D)
 *          │                                └─ 103 helper (forked by thread 105;
 *          │                                           io a dangling link, no smaps_rollup)
 *          └─ 200 unrelated
 * ptree_nochildren is the same without task/TID/children files.
 *
 * Tests that change counters between samples work on a copy in a temporary
 * directory and rewrite files in place, as the kernel's files change under
 * a kept descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ptree.h"
#include "trainmon.h"

#define S(lit) lit, sizeof(lit) - 1

/* cmocka 1.1's assert_float_equal compares floats: too coarse for byte
 * counts.  This compares doubles and prints both on failure. */
static void assert_near_impl(double a, double b, double eps, const char *expr, const char *file,
                             int line)
{
    if (!(fabs(a - b) <= eps)) {
        print_error("%s: %.17g is not within %g of %.17g\n", expr, a, eps, b);
        _fail(file, line);
    }
}
#define assert_near(a, b, eps) assert_near_impl((a), (b), (eps), #a, __FILE__, __LINE__)

static double hz(void)
{
    return (double)sysconf(_SC_CLK_TCK);
}

static const tm_procinfo *find_proc(const tm_ptree_stats *s, pid_t pid)
{
    for (size_t i = 0; i < s->nproc; i++)
        if (s->procs[i].pid == pid)
            return &s->procs[i];
    return NULL;
}

static double interval_s(const tm_ptree_stats *a, const tm_ptree_stats *b)
{
    return (double)(b->t_ns - a->t_ns) / 1e9;
}

/* ------------------------------------------------------- fixture copies */

static char tmpdir[64];

static int copy_fixture(void **state)
{
    (void)state;
    strcpy(tmpdir, "/tmp/tm_ptree_XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "cp -a tests/fixtures/ptree_basic/proc %s/", tmpdir);
    if (system(cmd) != 0)
        return -1;
    char proc[128];
    snprintf(proc, sizeof proc, "%s/proc", tmpdir);
    tm_set_proc_root(proc);
    return 0;
}

static int remove_copy(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    tm_set_proc_root(NULL);
    return system(cmd) == 0 ? 0 : -1;
}

static int reset_root(void **state)
{
    (void)state;
    tm_set_proc_root(NULL);
    return 0;
}

/* Rewrites <copy>/proc/<rel> in place (same inode: kept descriptors see it). */
static void put(const char *rel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(const char *rel, const char *fmt, ...)
{
    char path[256];
    snprintf(path, sizeof path, "%s/proc/%s", tmpdir, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    assert_int_equal(fclose(f), 0);
}

static void put_io(pid_t pid, uint64_t rchar, uint64_t wchar, uint64_t rb, uint64_t wb)
{
    char rel[64];
    snprintf(rel, sizeof rel, "%d/io", (int)pid);
    put(rel,
        "rchar: %llu\nwchar: %llu\nsyscr: 1\nsyscw: 1\nread_bytes: %llu\nwrite_bytes: %llu\n"
        "cancelled_write_bytes: 0\n",
        (unsigned long long)rchar, (unsigned long long)wchar, (unsigned long long)rb,
        (unsigned long long)wb);
}

static void put_stat(pid_t pid, const char *comm, char state, pid_t ppid, uint64_t start)
{
    char rel[64];
    snprintf(rel, sizeof rel, "%d/stat", (int)pid);
    put(rel, "%d (%s) %c %d %d %d 0 -1 4194560 0 0 0 0 1 1 0 0 20 0 1 0 %llu 5124096 1001\n",
        (int)pid, comm, state, (int)ppid, (int)pid, (int)pid, (unsigned long long)start);
}

/* --------------------------------------------------------------- parsers */

static void test_stat_comm_with_paren_and_spaces_parsed_after_last_paren(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    uint64_t nthreads = 0;
    assert_int_equal(tm_parse_proc_stat(S("4242 (a) b (c) D 77 4242 4242 0 -1 4194560 1 2 3 4 "
                                          "250 150 0 0 20 0 3 0 987654 5124096 1001 0\n"),
                                        &p, &nthreads),
                     0);
    assert_int_equal(p.pid, 4242);
    assert_string_equal(p.comm, "a) b (c");
    assert_int_equal(p.state, 'D');
    assert_int_equal(p.ppid, 77);
    assert_near(p.utime_s, 250 / hz(), 1e-9);
    assert_near(p.stime_s, 150 / hz(), 1e-9);
    assert_int_equal(nthreads, 3);
    assert_int_equal(p.starttime, 987654);
    assert_true(p.valid & TM_PROC_HAVE_STAT);
}

static void test_stat_rejects_line_cut_before_starttime(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    assert_int_equal(
        tm_parse_proc_stat(S("1 (x) S 0 1 1 0 -1 4194560 1 2 3 4 250 150 0 0 20 0 3 0"), &p, NULL),
        -EINVAL);
    assert_int_equal(tm_parse_proc_stat(S("1 x S 0"), &p, NULL), -EINVAL);
    assert_false(p.valid & TM_PROC_HAVE_STAT);
}

static void test_stat_long_comm_is_truncated(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    assert_int_equal(
        tm_parse_proc_stat(S("9 (kworker/u8:0-events_unbound_with_a_long_name) I 2 0 0 "
                             "0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"),
                           &p, NULL),
        0);
    assert_int_equal(strlen(p.comm), sizeof p.comm - 1);
    assert_int_equal(p.state, 'I');
}

static void test_io_parsed(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    assert_int_equal(tm_parse_proc_io(S("rchar: 2395467\nwchar: 156269\nsyscr: 13973\nsyscw: 446\n"
                                        "read_bytes: 1658880\nwrite_bytes: 401408\n"
                                        "cancelled_write_bytes: 208896\n"),
                                      &p),
                     0);
    assert_int_equal(p.rchar, 2395467);
    assert_int_equal(p.wchar, 156269);
    assert_int_equal(p.read_bytes, 1658880);
    assert_int_equal(p.write_bytes, 401408);
    assert_true(p.valid & TM_PROC_HAVE_IO);
}

static void test_io_without_all_four_keys_is_rejected(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    assert_int_equal(tm_parse_proc_io(S("rchar: 1\nwchar: 2\nread_bytes: 3\n"), &p), -EINVAL);
    assert_false(p.valid & TM_PROC_HAVE_IO);
}

static void test_stat_rss_in_bytes_from_field_24(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    assert_int_equal(
        tm_parse_proc_stat(S("42 (bash) S 1 42 42 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 1 0 "
                             "777 5124096 1032 18446744073709551615\n"),
                           &p, NULL),
        0);
    assert_true(p.valid & TM_PROC_HAVE_RSS);
    assert_int_equal(p.rss_bytes, 1032ull * (uint64_t)sysconf(_SC_PAGESIZE));
}

static void test_stat_of_kernel_thread_has_no_rss(void **state)
{
    (void)state;
    tm_procinfo p;
    memset(&p, 0, sizeof p);
    /* flags 0x208040: PF_KTHREAD (0x00200000) set. */
    assert_int_equal(
        tm_parse_proc_stat(S("2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 1 0 0 20 0 1 0 "
                             "3 0 0 18446744073709551615\n"),
                           &p, NULL),
        0);
    assert_true(p.valid & TM_PROC_HAVE_STAT);
    assert_false(p.valid & TM_PROC_HAVE_RSS);
}

static void test_smaps_rollup_pss_in_bytes(void **state)
{
    (void)state;
    uint64_t pss = 0;
    assert_int_equal(
        tm_parse_smaps_pss(S("5569d28c5000-7ffd9b695000 ---p 00000000 00:00 0   [rollup]\n"
                             "Rss:                1732 kB\nPss:                 375 kB\n"
                             "Pss_Dirty:           112 kB\n"),
                           &pss),
        0);
    assert_int_equal(pss, 375 * 1024);
}

static void test_pid_list_drops_number_cut_at_buffer_end(void **state)
{
    (void)state;
    pid_t pids[8];
    assert_int_equal(tm_parse_pid_list(S("101 102 10"), false, pids, 8), 2);
    assert_int_equal(pids[1], 102);
    assert_int_equal(tm_parse_pid_list(S("101 102 10"), true, pids, 8), 3);
    assert_int_equal(pids[2], 10);
    /* More than cap: counted, not stored. */
    assert_int_equal(tm_parse_pid_list(S("1 2 3 4 "), true, pids, 2), 4);
}

/* ------------------------------------------------------- fixture trees */

static void assert_basic_tree(const tm_ptree_stats *s)
{
    assert_true(s->root_alive);
    assert_int_equal(s->root, 100);
    assert_int_equal(s->nproc, 5);
    assert_int_equal(s->procs[0].pid, 100);
    static const pid_t want[] = {100, 101, 102, 103, 106};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_non_null(find_proc(s, want[i]));
    assert_null(find_proc(s, 200));
    assert_null(find_proc(s, 1));
}

static void test_tree_walks_children_of_every_thread(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_basic/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_basic_tree(&s);
    /* 103 was forked by thread 105, not by the main thread. */
    assert_int_equal(find_proc(&s, 103)->ppid, 100);
    assert_string_equal(find_proc(&s, 102)->comm, "a) b (c");
    tm_ptree_close(&t);
    assert_null(t);
}

static void test_tree_falls_back_to_scanning_stat_without_children_files(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_nochildren/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_basic_tree(&s);
    tm_ptree_close(&t);
}

static void test_tree_counts_d_state(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_basic/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_int_equal(s.nproc_d, 1);
    assert_int_equal(find_proc(&s, 102)->state, 'D');
    assert_int_equal(find_proc(&s, 106)->state, 'R');
    tm_ptree_close(&t);
}

static void test_tree_missing_io_is_unavailable_not_unreadable(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_basic/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    const tm_procinfo *h = find_proc(&s, 103);
    assert_false(h->valid & TM_PROC_HAVE_IO);
    assert_false(h->valid & TM_PROC_HAVE_PSS);
    assert_true(h->valid & TM_PROC_HAVE_RSS);
    assert_int_equal(s.nproc_io_unreadable, 0);
    assert_true(find_proc(&s, 100)->valid & TM_PROC_HAVE_IO);
    tm_ptree_close(&t);
}

static void test_tree_sums_over_processes_that_have_the_data(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_basic/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_near(s.cpu_user_s, (500 + 200 + 30 + 1 + 7) / hz(), 1e-9);
    assert_near(s.cpu_sys_s, (100 + 50 + 70 + 2 + 3) / hz(), 1e-9);
    assert_near(s.read_bytes, 409600 + 204800 + 300000 + 0, 0.5);
    assert_near(s.rchar, 1000000 + 500000 + 300000 + 4000, 0.5);
    assert_near(s.rss_bytes, (102400 + 20480 + 10240 + 1024 + 2048) * 1024.0, 0.5);
    assert_near(s.pss_bytes, (51200 + 10240 + 5120 + 1024) * 1024.0, 0.5);
    tm_ptree_close(&t);
}

static void test_pss_is_reread_at_most_every_5s_rss_every_sample(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 106), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    const tm_procinfo *p = find_proc(&s, 106);
    assert_non_null(p);
    assert_true(p->valid & TM_PROC_HAVE_PSS);
    double pss0 = (double)p->pss_bytes, rss0 = (double)p->rss_bytes;
    put("106/smaps_rollup",
        "00400000-7ffd0000 ---p 00000000 00:00 0 [rollup]\nRss: 9999 kB\nPss: 7777 kB\n");
    put("106/stat", "106 (x) S 101 106 106 0 -1 4194560 0 0 0 0 7 3 0 0 20 0 1 0 1400 5124096 "
                    "2222\n");
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    p = find_proc(&s, 106);
    assert_non_null(p);
    /* smaps_rollup is costly: within 5 s the last PSS stands, still valid;
     * RSS comes from stat every sample. */
    assert_true(p->valid & TM_PROC_HAVE_PSS);
    assert_near((double)p->pss_bytes, pss0, 0.5);
    assert_near((double)p->rss_bytes, 2222.0 * (double)sysconf(_SC_PAGESIZE), 0.5);
    assert_true(rss0 != 2222.0 * (double)sysconf(_SC_PAGESIZE));
    tm_ptree_close(&t);
}

static void test_tree_first_sample_has_no_rates(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_basic/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_true(isnan(s.cpu_pct));
    assert_true(isnan(s.read_bytes_s));
    assert_true(isnan(s.rchar_s));
    assert_true(isnan(s.cache_hit_hint));
    tm_ptree_close(&t);
}

static void test_open_missing_root_is_esrch(void **state)
{
    (void)state;
    tm_set_proc_root("tests/fixtures/ptree_basic/proc");
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 4321), -ESRCH);
    assert_null(t);
    assert_string_equal(tm_last_error(), "pid 4321: No such process");
}

static void test_tree_rates_from_deltas_and_cache_hint(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    /* 101 read 4000 bytes, 1000 of them from the disk. */
    put_io(101, 500000 + 4000, 0, 204800 + 1000, 0);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    double dt = interval_s(&s1, &s2);
    assert_near(s2.read_bytes_s * dt, 1000, 1e-3);
    assert_near(s2.rchar_s * dt, 4000, 1e-3);
    assert_near(s2.write_bytes_s, 0, 1e-9);
    assert_near(s2.cache_hit_hint, 0.75, 1e-9);
    assert_near(s2.cpu_pct, 0, 1e-9);
    tm_ptree_close(&t);
}

static void test_tree_counter_going_down_is_clamped_to_zero(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    put_io(101, 10, 0, 10, 0); /* same process, counters went backwards */
    put_io(102, 300000 + 500, 100, 300000 + 500, 0);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    assert_near(s2.read_bytes_s * interval_s(&s1, &s2), 500, 1e-3);
    tm_ptree_close(&t);
}

static void test_pid_reuse_is_a_new_process_without_negative_delta(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    /* 106 exited and its pid went to a process that started after the
     * first sample (a starttime far in the future of this machine's boot
     * clock), with smaller counters than its predecessor had. */
    const uint64_t later = 4000000000000ull;
    put_stat(106, "reused", 'S', 101, later);
    put_io(106, 20, 0, 10, 0);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    const tm_procinfo *p = find_proc(&s2, 106);
    assert_non_null(p);
    assert_int_equal(p->starttime, later);
    assert_string_equal(p->comm, "reused");
    double dt = interval_s(&s1, &s2);
    /* Its whole counters are new in this interval; the predecessor's larger
     * rchar (4000) yields no negative delta. */
    assert_near(s2.rchar_s * dt, 20, 1e-3);
    assert_near(s2.read_bytes_s * dt, 10, 1e-3);
    tm_ptree_close(&t);
}

static void test_pid_reuse_predecessor_reaped_by_parent_counted_once(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    /* Old 106 (last seen rchar 4000) read 100 more bytes and was reaped by
     * 101; a new process got pid 106 and read 20 bytes. */
    put_io(101, 500000 + 4100, 0, 204800, 0);
    put_stat(106, "reused", 'S', 101, 4000000000000ull);
    put_io(106, 20, 0, 0, 0);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    assert_near(s2.rchar_s * interval_s(&s1, &s2), 100 + 20, 1e-3);
    tm_ptree_close(&t);
}

static void test_process_first_seen_that_started_before_previous_sample_adds_nothing(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    /* 106 is replaced by a process with an old starttime: it existed
     * before the previous sample, so its counters are not this interval's. */
    put_stat(106, "old", 'S', 101, 1450);
    put_io(106, 777777, 0, 777777, 0);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    assert_near(s2.rchar_s, 0, 1e-9);
    assert_near(s2.read_bytes_s, 0, 1e-9);
    tm_ptree_close(&t);
}

static void test_reaped_child_io_folded_into_parent_counted_once(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    /* 106 (last seen: rchar 4000, read_bytes 0) read 6000 more bytes, 4096
     * from the disk, exited and was reaped by 101, whose own reads were
     * 1000 bytes: 101's counters now hold 106's lifetime totals. */
    put("101/task/101/children", "%s", "");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s/proc/106", tmpdir);
    assert_int_equal(system(cmd), 0);
    put_io(101, 500000 + 1000 + 10000, 5000, 204800 + 4096, 8192);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    assert_int_equal(s2.nproc, 4);
    double dt = interval_s(&s1, &s2);
    assert_near(s2.rchar_s * dt, 1000 + 6000, 1e-3);
    assert_near(s2.read_bytes_s * dt, 4096, 1e-3);
    assert_near(s2.write_bytes_s * dt, 0, 1e-3);
    tm_ptree_close(&t);
}

static void test_root_exit_keeps_what_is_left_of_the_tree(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    /* The kernel's kept stat descriptor of an exited process reads ESRCH;
     * an unlinked fixture file would still read, so it is emptied first. */
    put("100/stat", "%s", "");
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s/proc/100", tmpdir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_false(s.root_alive);
    assert_int_equal(s.nproc, 4);
    assert_null(find_proc(&s, 100));
    assert_non_null(find_proc(&s, 106));
    /* And on the sample after. */
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_false(s.root_alive);
    assert_int_equal(s.nproc, 4);
    tm_ptree_close(&t);
}

static void test_root_pid_reused_means_root_gone(void **state)
{
    (void)state;
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, 100), 0);
    tm_ptree_stats s;
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    put_stat(100, "other", 'S', 1, 999999);
    assert_int_equal(tm_ptree_sample(t, &s), 0);
    assert_false(s.root_alive);
    assert_null(find_proc(&s, 100));
    tm_ptree_close(&t);
}

/* ------------------------------------------------------------ live tests */

static volatile sig_atomic_t got_usr1;
static void on_usr1(int sig)
{
    (void)sig;
    got_usr1 = 1;
}

/* Installs the handler and blocks SIGUSR1, so that forked children can
 * wait for it with sigsuspend() without missing it. */
static void prepare_usr1(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
}

static void wait_usr1(void)
{
    sigset_t none;
    sigemptyset(&none);
    while (!got_usr1)
        sigsuspend(&none);
}

static void xfer(int fd, size_t n, bool writing)
{
    static char buf[65536];
    while (n > 0) {
        size_t k = n < sizeof buf ? n : sizeof buf;
        ssize_t r = writing ? write(fd, buf, k) : read(fd, buf, k);
        if (r <= 0)
            _exit(90);
        n -= (size_t)r;
    }
}

static void read_exact(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        assert_true(r > 0);
        got += (size_t)r;
    }
}

static pid_t live_root;
static sigset_t live_oldmask;

/* Starts a live test: this process becomes a subreaper, so that orphaned
 * grandchildren come back to it and are reaped by the teardown. */
static int live_setup(void **state)
{
    (void)state;
    live_root = 0;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    sigprocmask(SIG_SETMASK, NULL, &live_oldmask);
    return 0;
}

/* Kills and reaps everything a live test started, also after a failed
 * assertion. */
static int live_teardown(void **state)
{
    (void)state;
    if (live_root > 0) {
        kill(-live_root, SIGKILL);
        kill(live_root, SIGKILL);
    }
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
    sigprocmask(SIG_SETMASK, &live_oldmask, NULL);
    live_root = 0;
    return 0;
}

enum { LIVE_K = 3, LIVE_N = 300000 };

static void test_live_children_counted_and_their_writes_exact(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    prepare_usr1();
    /* The tree's root is a child R, so that this process's own reads of
     * /proc do not count in the tree. */
    pid_t r = fork();
    assert_true(r >= 0);
    live_root = r;
    setpgid(r, r); /* in both processes: the group exists before either goes on */
    if (r == 0) {
        pid_t kids[LIVE_K];
        for (int i = 0; i < LIVE_K; i++) {
            kids[i] = fork();
            if (kids[i] == 0) {
                wait_usr1();
                int null = open("/dev/null", O_WRONLY);
                xfer(null, LIVE_N, true);
                xfer(pfd[1], 1, true);
                for (;;)
                    pause();
            }
        }
        if (write(pfd[1], kids, sizeof kids) != sizeof kids)
            _exit(91);
        for (;;)
            pause();
    }
    pid_t kids[LIVE_K];
    read_exact(pfd[0], kids, sizeof kids);

    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, r), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    assert_int_equal(s1.nproc, LIVE_K + 1);
    for (int i = 0; i < LIVE_K; i++)
        kill(kids[i], SIGUSR1);
    char done[LIVE_K];
    read_exact(pfd[0], done, sizeof done);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    assert_true(s2.root_alive);
    assert_int_equal(s2.nproc, LIVE_K + 1);
    /* Each child wrote LIVE_N bytes to /dev/null and one to the pipe. */
    assert_near(s2.wchar - s1.wchar, LIVE_K * (LIVE_N + 1.0), 0.5);
    for (int i = 0; i < LIVE_K; i++)
        assert_true(find_proc(&s2, kids[i])->valid & TM_PROC_HAVE_IO);
    tm_ptree_close(&t);
    close(pfd[0]);
    close(pfd[1]);
}

static void test_live_sleeping_child_is_in_state_s(void **state)
{
    (void)state;
    pid_t r = fork();
    assert_true(r >= 0);
    live_root = r;
    if (r == 0) {
        for (;;)
            pause();
    }
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, r), 0);
    tm_ptree_stats s;
    char st = '?';
    for (int i = 0; i < 200 && st != 'S'; i++) {
        assert_int_equal(tm_ptree_sample(t, &s), 0);
        st = s.nproc ? s.procs[0].state : '?';
        if (st != 'S')
            usleep(10000);
    }
    assert_int_equal(st, 'S');
    assert_int_equal(s.nproc_d, 0);
    tm_ptree_close(&t);
}

static void test_live_reaped_child_io_counted_once(void **state)
{
    (void)state;
    enum { N1 = 1 << 20, N2 = 3 << 20 };
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    prepare_usr1();
    pid_t r = fork();
    assert_true(r >= 0);
    live_root = r;
    setpgid(r, r); /* in both processes: the group exists before either goes on */
    if (r == 0) {
        pid_t c = fork();
        if (c == 0) {
            int zero = open("/dev/zero", O_RDONLY);
            xfer(zero, N1, false);
            pid_t me = getpid();
            if (write(pfd[1], &me, sizeof me) != sizeof me)
                _exit(92);
            wait_usr1();
            xfer(zero, N2, false);
            _exit(0);
        }
        /* R reaps its child (folding the child's counters into its own)
         * and says so through the pipe, which is a write, not a read. */
        waitpid(c, NULL, 0);
        xfer(pfd[1], 1, true);
        for (;;)
            pause();
    }
    pid_t c;
    read_exact(pfd[0], &c, sizeof c);
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, r), 0);
    tm_ptree_stats s1, s2;
    assert_int_equal(tm_ptree_sample(t, &s1), 0);
    assert_int_equal(s1.nproc, 2);
    kill(c, SIGUSR1);
    char done;
    read_exact(pfd[0], &done, 1);
    assert_int_equal(tm_ptree_sample(t, &s2), 0);
    assert_int_equal(s2.nproc, 1);
    /* R's counters jumped by N1 + N2; N1 was already seen in the child. */
    assert_near(s2.rchar_s * interval_s(&s1, &s2), N2, 0.5);
    tm_ptree_close(&t);
    close(pfd[0]);
    close(pfd[1]);
}

static int thread_pipe = -1;

static void *fork_from_thread(void *arg)
{
    (void)arg;
    pid_t c = fork();
    if (c == 0) {
        for (;;)
            pause();
    }
    if (write(thread_pipe, &c, sizeof c) != sizeof c)
        _exit(93);
    for (;;)
        pause();
    return NULL;
}

static void test_live_child_of_non_main_thread_is_found(void **state)
{
    (void)state;
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t r = fork();
    assert_true(r >= 0);
    live_root = r;
    setpgid(r, r);
    if (r == 0) {
        thread_pipe = pfd[1];
        pthread_t th;
        if (pthread_create(&th, NULL, fork_from_thread, NULL))
            _exit(94);
        for (;;)
            pause();
    }
    pid_t c;
    read_exact(pfd[0], &c, sizeof c);
    tm_ptree *t = NULL;
    assert_int_equal(tm_ptree_open(&t, r), 0);
    tm_ptree_stats s;
    /* Twice: the second walk re-reads the kept task directory. */
    for (int i = 0; i < 2; i++) {
        assert_int_equal(tm_ptree_sample(t, &s), 0);
        assert_int_equal(s.nproc, 2);
        assert_non_null(find_proc(&s, c));
        assert_int_equal(find_proc(&s, c)->ppid, r);
    }
    tm_ptree_close(&t);
    close(pfd[0]);
    close(pfd[1]);
}

static void test_io_of_other_user_is_unreadable_not_zero(void **state)
{
    (void)state;
    if (geteuid() != 0)
        skip(); /* needs to drop to another uid */
    /* A child drops to nobody and watches pid 1 (root's): /proc/1/io is
     * mode 0400 and needs the same uid or CAP_SYS_PTRACE.  Running as root
     * cannot show this otherwise: root reads even mode-000 files. */
    pid_t c = fork();
    assert_true(c >= 0);
    live_root = c;
    if (c == 0) {
        tm_set_proc_root(NULL);
        if (setgid(65534) || setuid(65534))
            _exit(10);
        tm_ptree *t = NULL;
        if (tm_ptree_open(&t, 1))
            _exit(11);
        tm_ptree_stats s;
        for (int i = 0; i < 2; i++) { /* the refusal is remembered, still counted */
            if (tm_ptree_sample(t, &s))
                _exit(12);
            if (s.nproc < 1 || s.procs[0].pid != 1 || !(s.procs[0].valid & TM_PROC_HAVE_STAT))
                _exit(13);
            if (s.procs[0].valid & TM_PROC_HAVE_IO)
                _exit(14);
            if (s.nproc_io_unreadable < 1)
                _exit(15);
        }
        tm_ptree_close(&t);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stat_comm_with_paren_and_spaces_parsed_after_last_paren),
        cmocka_unit_test(test_stat_rejects_line_cut_before_starttime),
        cmocka_unit_test(test_stat_long_comm_is_truncated),
        cmocka_unit_test(test_io_parsed),
        cmocka_unit_test(test_io_without_all_four_keys_is_rejected),
        cmocka_unit_test(test_stat_rss_in_bytes_from_field_24),
        cmocka_unit_test(test_stat_of_kernel_thread_has_no_rss),
        cmocka_unit_test(test_smaps_rollup_pss_in_bytes),
        cmocka_unit_test(test_pid_list_drops_number_cut_at_buffer_end),
        cmocka_unit_test_teardown(test_tree_walks_children_of_every_thread, reset_root),
        cmocka_unit_test_teardown(test_tree_falls_back_to_scanning_stat_without_children_files,
                                  reset_root),
        cmocka_unit_test_teardown(test_tree_counts_d_state, reset_root),
        cmocka_unit_test_teardown(test_tree_missing_io_is_unavailable_not_unreadable, reset_root),
        cmocka_unit_test_teardown(test_tree_sums_over_processes_that_have_the_data, reset_root),
        cmocka_unit_test_teardown(test_tree_first_sample_has_no_rates, reset_root),
        cmocka_unit_test_teardown(test_open_missing_root_is_esrch, reset_root),
        cmocka_unit_test_setup_teardown(test_tree_rates_from_deltas_and_cache_hint, copy_fixture,
                                        remove_copy),
        cmocka_unit_test_setup_teardown(test_tree_counter_going_down_is_clamped_to_zero,
                                        copy_fixture, remove_copy),
        cmocka_unit_test_setup_teardown(test_pss_is_reread_at_most_every_5s_rss_every_sample,
                                        copy_fixture, remove_copy),
        cmocka_unit_test_setup_teardown(test_pid_reuse_is_a_new_process_without_negative_delta,
                                        copy_fixture, remove_copy),
        cmocka_unit_test_setup_teardown(test_pid_reuse_predecessor_reaped_by_parent_counted_once,
                                        copy_fixture, remove_copy),
        cmocka_unit_test_setup_teardown(
            test_process_first_seen_that_started_before_previous_sample_adds_nothing, copy_fixture,
            remove_copy),
        cmocka_unit_test_setup_teardown(test_reaped_child_io_folded_into_parent_counted_once,
                                        copy_fixture, remove_copy),
        cmocka_unit_test_setup_teardown(test_root_exit_keeps_what_is_left_of_the_tree, copy_fixture,
                                        remove_copy),
        cmocka_unit_test_setup_teardown(test_root_pid_reused_means_root_gone, copy_fixture,
                                        remove_copy),
        cmocka_unit_test_setup_teardown(test_live_children_counted_and_their_writes_exact,
                                        live_setup, live_teardown),
        cmocka_unit_test_setup_teardown(test_live_sleeping_child_is_in_state_s, live_setup,
                                        live_teardown),
        cmocka_unit_test_setup_teardown(test_live_reaped_child_io_counted_once, live_setup,
                                        live_teardown),
        cmocka_unit_test_setup_teardown(test_live_child_of_non_main_thread_is_found, live_setup,
                                        live_teardown),
        cmocka_unit_test_setup_teardown(test_io_of_other_user_is_unreadable_not_zero, live_setup,
                                        live_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
