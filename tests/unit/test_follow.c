/*
 * test_follow.c - the live-run follower (src/lib/follow.c): which record
 * files it follows, reading only what was appended, replaced and vanished
 * files, the per-pass bound, live runs under a directory of runs, and the
 * numbers it hands to /metrics (tm_prom_rank_set) and to the run.* alerts
 * (tm_alert_feed_runs), which must be those of the one step accounting.
 *
 * Each test writes record files with the library's own writer into its
 * own directory under /tmp, removed afterwards.  Times are in ms in the
 * step records written; every expected number is worked out beside it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainmon.h"

#define MS 1000000LL

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_follow.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static void rm_tree(const char *d)
{
    DIR *dh = opendir(d);
    if (!dh)
        return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(dh))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof p, "%s/%s", d, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(p);
        else
            unlink(p);
    }
    closedir(dh);
    rmdir(d);
}

static int teardown(void **state)
{
    (void)state;
    rm_tree(dir);
    return 0;
}

/* A record file in dir/sub (sub may be ""), role and rank in its header. */
static tm_rec *open_file(const char *sub, const char *name, const char *role, int rank,
                         uint64_t max_size)
{
    char p[512];
    if (sub[0]) {
        snprintf(p, sizeof p, "%s/%s", dir, sub);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/%s/%s", dir, sub, name);
    } else {
        snprintf(p, sizeof p, "%s/%s", dir, name);
    }
    tm_rec_opts o = {.role = role, .rank = rank, .max_size = max_size};
    tm_rec *w = NULL;
    assert_int_equal(tm_rec_open(&w, p, &o), 0);
    return w;
}

static void put_step(tm_rec *w, uint64_t n, int64_t start_ms, int64_t dur_ms, int64_t wait_ms,
                     uint32_t flags)
{
    tm_inproc_step s = {.step = n,
                        .start_ns = start_ms * MS,
                        .end_ns = (start_ms + dur_ms) * MS,
                        .data_wait_ns = wait_ms * MS,
                        .flags = flags};
    uint8_t buf[128];
    int len = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
}

static void put_capture(tm_rec *w, double allocated, double reserved, double total)
{
    tm_inproc_capture c = {.source = TM_CAPTURE_STEP,
                           .device = 0,
                           .allocated = allocated,
                           .reserved = reserved,
                           .peak_allocated = allocated,
                           .active = NAN,
                           .inactive_split = NAN,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = total,
                           .num_alloc_retries = 0,
                           .num_ooms = 0,
                           .host_rss = NAN,
                           .tag = "step",
                           .tag_len = 4};
    uint8_t buf[512];
    int len = tm_inproc_encode_capture(&c, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_CAPTURE, 0, buf, (uint32_t)len), 0);
}

/* n steps of 100 ms with 10 ms of wait, numbered from first. */
static void put_steps(tm_rec *w, uint64_t first, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        put_step(w, first + i, (int64_t)(first + i) * 100, 100, 10, 0);
}

static const tm_follow_rank *rank_by_label(const tm_follow *f, size_t run, const char *label)
{
    const tm_follow_rank *k;
    for (size_t j = 0; (k = tm_follow_rank_at(f, run, j)); j++)
        if (strcmp(k->label, label) == 0)
            return k;
    return NULL;
}

static void test_training_files_are_followed_and_system_and_worker_files_are_not(void **st)
{
    (void)st;
    tm_rec *r0 = open_file("", "rank0.tmr", "rank0", 0, 0);
    tm_rec *p = open_file("", "pid42.tmr", "pid42", -1, 0);
    tm_rec *sys = open_file("", "system.tmr", "system", -1, 0);
    tm_rec *wk = open_file("", "worker-r0-77.tmr", "worker-r0-77", 0, 0);
    put_steps(r0, 0, 3);
    put_steps(wk, 0, 3); /* even with step records, a worker is not a rank */
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_nruns(f), 1);
    const tm_follow_run *R = tm_follow_run_at(f, 0);
    assert_non_null(R);
    assert_string_equal(R->name, strrchr(dir, '/') + 1);
    assert_true(R->host[0] != '\0');
    assert_int_equal(R->nranks, 2);
    assert_true(R->newest_mtime_s > 0);
    const tm_follow_rank *k0 = rank_by_label(f, 0, "0");
    const tm_follow_rank *kp = rank_by_label(f, 0, "pid42"); /* no rank: its role */
    assert_non_null(k0);
    assert_non_null(kp);
    assert_int_equal(k0->rank, 0);
    assert_int_equal(kp->rank, -1);
    assert_string_equal(k0->file, "rank0.tmr");
    assert_int_equal(k0->tally.steps, 3);
    assert_int_equal(kp->step_records, 0);
    assert_null(tm_follow_rank_at(f, 0, 2));
    assert_null(tm_follow_run_at(f, 1));
    tm_follow_close(&f);
    assert_null(f);
    tm_rec_close(&r0);
    tm_rec_close(&p);
    tm_rec_close(&sys);
    tm_rec_close(&wk);
}

/* A process that learned its rank after the live view classified its
 * file (pid42, rank -1): its process.rank event is its label from then on;
 * a crafted one is not. */
static void test_a_rank_learned_late_relabels_the_live_row(void **st)
{
    (void)st;
    tm_rec *p = open_file("", "pid42.tmr", "pid42", -1, 0);
    tm_rec *q = open_file("", "pid43.tmr", "pid43", -1, 0);
    put_steps(p, 0, 2);
    put_steps(q, 0, 2);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_non_null(rank_by_label(f, 0, "pid42"));
    assert_int_equal(tm_rec_event(p, 0, "process.rank", "{\"rank\":2,\"world_size\":4}"), 0);
    assert_int_equal(tm_rec_event(q, 0, "process.rank", "{\"rank\":-3}"), 0);
    put_steps(p, 2, 2);
    put_steps(q, 2, 2);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = rank_by_label(f, 0, "2");
    assert_non_null(k);
    assert_int_equal(k->rank, 2);
    assert_int_equal(k->tally.steps, 4);
    assert_null(rank_by_label(f, 0, "pid42"));
    assert_non_null(rank_by_label(f, 0, "pid43"));
    tm_follow_close(&f);
    tm_rec_close(&p);
    tm_rec_close(&q);
}

/* The training thread's stops, from the agent's events (stops.c): each
 * kind counted and its seconds summed, once each: a pause inside a
 * compilation or a save is that one's, and those of other threads or
 * without a duration are none.  Through tm_prom_rank_set as /metrics
 * exports them. */
static void test_stops_of_the_training_thread_are_counted_once_each(void **st)
{
    (void)st;
    tm_rec *w = open_file("", "rank0.tmr", "rank0", 0, 0);
    put_steps(w, 0, 3);
    static const struct {
        const char *name, *json;
    } ev[] = {
        /* compile: 1.5 + 0.25 s counted; a background thread's is not */
        {"compile", "{\"dur_s\":1.500000,\"cpu_s\":1.4,\"step\":1,\"training\":true,"
                    "\"trigger\":\"DYNAMO\",\"id\":\"0/0\"}"},
        {"compile", "{\"dur_s\":0.250000,\"step\":5,\"training\":true,\"id\":\"0/1\"}"},
        {"compile", "{\"dur_s\":9.000000,\"step\":5,\"training\":false,\"id\":\"1/0\"}"},
        /* checkpoint: the blocking save of 2 s; an async one's 7 s is not */
        {"checkpoint.save", "{\"dur_s\":2.000000,\"bytes\":100,\"step\":3,\"blocking\":true,"
                            "\"ok\":true,\"via\":\"torch.save\"}"},
        {"checkpoint.save", "{\"dur_s\":7.000000,\"step\":3,\"blocking\":false}"},
        /* gc: 0.125 s counted; one in a compilation, one in a save, one on
         * a worker thread, one with no duration and one of "-1" are not */
        {"gc.pause", "{\"gen\":2,\"dur_s\":0.125000,\"collected\":3,\"step\":4,\"train\":true,"
                     "\"auto\":true,\"in_save\":false,\"in_compile\":false}"},
        {"gc.pause", "{\"gen\":2,\"dur_s\":0.5,\"train\":true,\"in_save\":false,"
                     "\"in_compile\":true}"},
        {"gc.pause", "{\"gen\":2,\"dur_s\":0.5,\"train\":true,\"in_save\":true}"},
        {"gc.pause", "{\"gen\":2,\"dur_s\":0.5,\"train\":false}"},
        {"gc.pause", "{\"gen\":2,\"train\":true}"},
        {"gc.pause", "{\"gen\":2,\"dur_s\":-1,\"train\":true}"},
        /* not a stop */
        {"checkpoint", "{\"dur_s\":4.0,\"blocking\":true}"},
    };
    for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
        assert_int_equal(tm_rec_event(w, 0, ev[i].name, ev[i].json), 0);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = rank_by_label(f, 0, "0");
    assert_non_null(k);
    assert_int_equal(k->stops[TM_STOP_COMPILE], 2);
    assert_float_equal(k->stop_s[TM_STOP_COMPILE], 1.75, 1e-9);
    assert_int_equal(k->stops[TM_STOP_CHECKPOINT], 1);
    assert_float_equal(k->stop_s[TM_STOP_CHECKPOINT], 2.0, 1e-9);
    assert_int_equal(k->stops[TM_STOP_GC], 1);
    assert_float_equal(k->stop_s[TM_STOP_GC], 0.125, 1e-9);
    tm_prom_rank pr;
    tm_prom_rank_set(&pr, k);
    assert_int_equal(pr.stops[TM_STOP_COMPILE], 2);
    assert_float_equal(pr.stop_s[TM_STOP_GC], 0.125, 1e-9);
    /* only what was appended: a second poll adds the new stop alone */
    assert_int_equal(tm_rec_event(w, 0, "compile", "{\"dur_s\":0.5,\"training\":true}"), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    k = rank_by_label(f, 0, "0");
    assert_int_equal(k->stops[TM_STOP_COMPILE], 3);
    assert_float_equal(k->stop_s[TM_STOP_COMPILE], 2.25, 1e-9);
    tm_follow_close(&f);
    tm_rec_close(&w);
}

static void test_each_poll_reads_only_what_was_appended(void **st)
{
    (void)st;
    tm_rec *w = open_file("", "rank0.tmr", "rank0", 0, 0);
    put_steps(w, 0, 3);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_rank_at(f, 0, 0)->tally.steps, 3);
    assert_int_equal(tm_follow_poll(f, 1000), 0); /* nothing new: nothing counted twice */
    assert_int_equal(tm_follow_rank_at(f, 0, 0)->tally.steps, 3);
    put_steps(w, 3, 2);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = tm_follow_rank_at(f, 0, 0);
    assert_int_equal(k->tally.steps, 5);
    assert_int_equal(k->records, 5);
    assert_int_equal(k->last_t_ns, 500 * MS); /* the last step ended at 400 + 100 ms */
    /* In wall-clock time: the header's real - mono start, added. */
    char p[512];
    snprintf(p, sizeof p, "%s/rank0.tmr", dir);
    tm_reader *rd = NULL;
    assert_int_equal(tm_reader_open(&rd, p), 0);
    const tm_rec_header *h = tm_reader_header(rd);
    assert_int_equal(k->last_real_ns, 500 * MS + h->start_real_ns - h->start_mono_ns);
    tm_reader_close(&rd);
    tm_follow_close(&f);
    tm_rec_close(&w);
}

static void test_records_read_per_pass_are_bounded(void **st)
{
    (void)st;
    tm_rec *w = open_file("", "rank0.tmr", "rank0", 0, 0);
    put_steps(w, 0, 10);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 4), 0);
    assert_int_equal(tm_follow_rank_at(f, 0, 0)->tally.steps, 4);
    assert_int_equal(tm_follow_poll(f, 4), 0);
    assert_int_equal(tm_follow_rank_at(f, 0, 0)->tally.steps, 8);
    assert_int_equal(tm_follow_poll(f, 4), 0);
    assert_int_equal(tm_follow_rank_at(f, 0, 0)->tally.steps, 10);
    tm_follow_close(&f);
    tm_rec_close(&w);
}

/* Steps: 0 warm-up (100 ms, 50 waiting), 1 (100 ms, 10 waiting), 2 (100 ms
 * "waiting" 250: capped at 100), 3 closed at exit (does not count). */
static void put_accounting_steps(tm_rec *w)
{
    put_step(w, 0, 0, 100, 50, 0);
    put_step(w, 1, 100, 100, 10, 0);
    put_step(w, 2, 200, 100, 250, TM_STEP_ENDED_BY_STOP);
    put_step(w, 3, 300, 100, 10, TM_STEP_ENDED_AT_EXIT);
}

static void test_steps_are_those_of_the_one_step_accounting(void **st)
{
    (void)st;
    tm_rec *w = open_file("", "rank0.tmr", "rank0", 0, 0);
    put_accounting_steps(w);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = tm_follow_rank_at(f, 0, 0);
    assert_int_equal(k->step_records, 4);
    assert_int_equal(k->tally.steps, 3);
    /* Judged: steps 1 and 2, (10 + 100) / (100 + 100). */
    assert_true(fabs(tm_steptally_wait_fraction(&k->tally) - 0.55) < 1e-9);
    /* The window holds the judged steps only. */
    double d, q;
    assert_int_equal(tm_stepwin_sum(&k->win, TM_FOLLOW_WINDOW, &d, &q), 2);
    assert_true(fabs(d - 0.2) < 1e-9 && fabs(q - 0.11) < 1e-9);
    assert_int_equal(tm_stepwin_sum(&k->win, 1, &d, &q), 1);
    assert_true(fabs(d - 0.1) < 1e-9 && fabs(q - 0.1) < 1e-9); /* step 2 alone */

    /* /metrics: counters over every complete step (warm-up included, waits
     * capped), the fraction as the tally's. */
    tm_prom_rank pr;
    tm_prom_rank_set(&pr, k);
    assert_string_equal(pr.rank, "0");
    assert_true(pr.steps_valid);
    assert_int_equal(pr.steps, 3);
    assert_true(fabs(pr.step_seconds - 0.3) < 1e-9);
    assert_true(fabs(pr.data_wait_seconds - 0.16) < 1e-9); /* 50 + 10 + 100 ms */
    assert_true(fabs(pr.data_wait_fraction - 0.55) < 1e-9);
    assert_false(pr.memory_valid);
    tm_prom_run run = {.name = "r", .host = "h", .last_record_age_s = 0, .nranks = 1, .ranks = &pr};
    tm_text *t = tm_text_new(1 << 16);
    assert_int_equal(tm_prom_write_runs(t, &run, 1), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "# TYPE trainmon_run_data_wait_fraction gauge\n"
                              "trainmon_run_data_wait_fraction{run=\"r\",rank=\"0\"} 0.55\n"));
    assert_non_null(strstr(s, "trainmon_run_steps_total{run=\"r\",rank=\"0\"} 3\n"));
    assert_null(strstr(s, "trainmon_run_gpu_allocated_bytes"));
    tm_text_free(&t);
    tm_follow_close(&f);
    tm_rec_close(&w);
}

static void test_window_never_holds_the_warmup(void **st)
{
    (void)st;
    tm_steptally t;
    tm_stepwin w = {0};
    tm_steptally_init(&t);
    double d, q;
    /* Step 0 waited for the workers to start: 90 of its 100 ms. */
    tm_inproc_step s = {.step = 0, .start_ns = 0, .end_ns = 100 * MS, .data_wait_ns = 90 * MS};
    assert_true(tm_follow_step(&t, &w, &s));
    assert_int_equal(t.steps, 1);
    assert_int_equal(tm_stepwin_sum(&w, 10, &d, &q), 0); /* no windowed value yet */
    s = (tm_inproc_step){
        .step = 1, .start_ns = 100 * MS, .end_ns = 300 * MS, .data_wait_ns = 20 * MS};
    assert_true(tm_follow_step(&t, &w, &s));
    assert_int_equal(tm_stepwin_sum(&w, 10, &d, &q), 1);
    assert_true(fabs(d - 0.2) < 1e-9 && fabs(q - 0.02) < 1e-9);
    s.flags = TM_STEP_ENDED_AT_EXIT;
    assert_false(tm_follow_step(&t, &w, &s));
    assert_int_equal(w.n, 1);
}

static void test_a_ring_file_counts_steps_from_the_highest_step_number(void **st)
{
    (void)st;
    /* Steps 0..9 were dropped by the ring before anyone read them. */
    tm_rec *w = open_file("", "rank0.tmr", "rank0", 0, 1u << 20);
    put_steps(w, 10, 5);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = tm_follow_rank_at(f, 0, 0);
    assert_true(k->ring);
    assert_int_equal(k->tally.steps, 5);
    tm_prom_rank pr;
    tm_prom_rank_set(&pr, k);
    assert_int_equal(pr.steps, 15);
    /* /metrics says what the ring dropped and from when it keeps data:
     * 15 steps, 5 read; the first read (step 10) began 1000 ms after the
     * writer's monotonic zero, i.e. at the header's wall clock + (1 s - its
     * monotonic start). */
    assert_true(pr.ring_steps_dropped == 10.0);
    const tm_rec_header *h = NULL;
    tm_reader *r = NULL;
    char p[512];
    snprintf(p, sizeof p, "%s/rank0.tmr", dir);
    assert_int_equal(tm_reader_open(&r, p), 0);
    h = tm_reader_header(r);
    double want = (double)(h->start_real_ns + (1000 * MS - h->start_mono_ns)) / 1e9;
    assert_true(fabs(pr.ring_kept_from_s - want) < 1e-3);
    tm_reader_close(&r);
    tm_text *t = tm_text_new(1 << 16);
    tm_prom_run run = {.name = "r", .host = "h", .last_record_age_s = 0, .nranks = 1, .ranks = &pr};
    assert_int_equal(tm_prom_write_runs(t, &run, 1), 0);
    assert_non_null(strstr(tm_text_data(t, NULL),
                           "trainmon_run_ring_steps_dropped{run=\"r\",rank=\"0\"} 10\n"));
    tm_text_free(&t);
    tm_follow_close(&f);
    tm_rec_close(&w);
}

static void test_a_replaced_file_starts_from_nothing_and_a_vanished_one_is_dropped(void **st)
{
    (void)st;
    char p[512];
    tm_rec *w0 = open_file("", "rank0.tmr", "rank0", 0, 0);
    tm_rec *w1 = open_file("", "rank1.tmr", "rank1", 1, 0);
    put_steps(w0, 0, 5);
    put_steps(w1, 0, 4);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_run_at(f, 0)->nranks, 2);
    assert_int_equal(rank_by_label(f, 0, "0")->tally.steps, 5);
    /* rank 0 restarts: a new file under the old name (the follower still
     * holds the old one open, so the inode differs). */
    tm_rec_close(&w0);
    snprintf(p, sizeof p, "%s/rank0.tmr", dir);
    assert_int_equal(unlink(p), 0);
    w0 = open_file("", "rank0.tmr", "rank0", 0, 0);
    put_steps(w0, 0, 2);
    /* rank 1 goes away. */
    snprintf(p, sizeof p, "%s/rank1.tmr", dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_run_at(f, 0)->nranks, 1);
    assert_null(rank_by_label(f, 0, "1"));
    assert_int_equal(rank_by_label(f, 0, "0")->tally.steps, 2);
    tm_follow_close(&f);
    tm_rec_close(&w0);
    tm_rec_close(&w1);
}

static void test_last_capture_is_kept_and_the_device_size_is_remembered(void **st)
{
    (void)st;
    tm_rec *w = open_file("", "rank0.tmr", "rank0", 0, 0);
    put_capture(w, 1e9, 2e9, 8e9);
    put_capture(w, NAN, NAN, NAN); /* an allocator that could not be read: ignored */
    put_capture(w, 3e9, 4e9, NAN); /* a capture that did not ask the device */
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    const tm_follow_rank *k = tm_follow_rank_at(f, 0, 0);
    assert_true(k->allocated == 3e9 && k->reserved == 4e9 && k->peak_allocated == 3e9);
    assert_true(k->total_device == 8e9);
    tm_prom_rank pr;
    tm_prom_rank_set(&pr, k);
    assert_true(pr.memory_valid && pr.allocated_bytes == 3e9);
    assert_false(pr.steps_valid); /* no step record: no step series */
    tm_follow_close(&f);
    tm_rec_close(&w);
}

static void test_under_a_runs_dir_only_live_runs_are_followed(void **st)
{
    (void)st;
    tm_rec *a = open_file("live", "rank0.tmr", "rank0", 0, 0);
    tm_rec *b = open_file("old", "rank0.tmr", "rank0", 0, 0);
    put_steps(a, 0, 2);
    put_steps(b, 0, 2);
    char p[512];
    snprintf(p, sizeof p, "%s/notarun", dir);
    assert_int_equal(mkdir(p, 0755), 0); /* no record file: not a live run */
    snprintf(p, sizeof p, "%s/old/rank0.tmr", dir);
    struct timespec ts[2] = {{.tv_sec = time(NULL) - 2 * (time_t)TM_FOLLOW_LIVE_S},
                             {.tv_sec = time(NULL) - 2 * (time_t)TM_FOLLOW_LIVE_S}};
    assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, true), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_nruns(f), 1);
    assert_string_equal(tm_follow_run_at(f, 0)->name, "live");
    assert_int_equal(tm_follow_rank_at(f, 0, 0)->tally.steps, 2);
    assert_false(tm_follow_truncated(f));
    /* The old run comes back to life. */
    assert_int_equal(utimensat(AT_FDCWD, p, NULL, 0), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_nruns(f), 2);
    tm_follow_close(&f);
    tm_rec_close(&a);
    tm_rec_close(&b);
}

static void test_a_symlinked_run_in_the_runs_dir_is_not_followed(void **st)
{
    (void)st;
    /* dir/elsewhere/real is a live run outside the runs directory dir/runs;
     * dir/runs/link points at it: a root exporter must not follow it. */
    tm_rec *a = open_file("elsewhere", "rank0.tmr", "rank0", 0, 0);
    put_steps(a, 0, 2);
    char runs[256], link[512], target[512];
    snprintf(runs, sizeof runs, "%s/runs", dir);
    assert_int_equal(mkdir(runs, 0755), 0);
    snprintf(target, sizeof target, "%s/elsewhere", dir);
    snprintf(link, sizeof link, "%s/link", runs);
    assert_int_equal(symlink(target, link), 0);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, runs, true), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    assert_int_equal(tm_follow_nruns(f), 0);
    tm_follow_close(&f);
    unlink(link);
    tm_rec_close(&a);
}

static void test_a_missing_directory_is_an_error(void **st)
{
    (void)st;
    char p[512];
    snprintf(p, sizeof p, "%s/nope", dir);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, p, false), 0);
    assert_int_equal(tm_follow_poll(f, 10), -ENOENT);
    assert_non_null(strstr(tm_last_error(), "nope"));
    tm_follow_close(&f);
    assert_int_equal(tm_follow_open(&f, p, true), 0);
    assert_int_equal(tm_follow_poll(f, 10), -ENOENT);
    tm_follow_close(&f);
    tm_follow_close(&f); /* twice is harmless */
}

static void test_alert_inputs_are_fed_per_rank(void **st)
{
    (void)st;
    tm_rec *w0 = open_file("", "rank0.tmr", "rank0", 0, 0);
    tm_rec *w1 = open_file("", "rank1.tmr", "rank1", 1, 0);
    put_accounting_steps(w0);
    put_steps(w1, 0, 2);
    put_capture(w1, 6e9, 7e9, 8e9);
    tm_follow *f = NULL;
    assert_int_equal(tm_follow_open(&f, dir, false), 0);
    assert_int_equal(tm_follow_poll(f, 1000), 0);
    tm_alert_engine *e = NULL;
    assert_int_equal(tm_alert_new(&e), 0);
    assert_true(tm_alert_add_rule(e, "run.steps{rank=\"0\"} >= 3") >= 0);
    assert_true(tm_alert_add_rule(e, "run.data_wait_fraction > 0.5") >= 0);
    assert_true(tm_alert_add_rule(e, "run.gpu_memory_allocated_fraction > 0.7") >= 0);
    assert_true(tm_alert_add_rule(e, "run.gpu_memory_reserved_bytes >= 7000000000") >= 0);
    assert_true(tm_alert_add_rule(e, "run.step_time_seconds > 0.099") >= 0);
    tm_alert_feed_runs(e, f, 0);
    char want[300];
    snprintf(want, sizeof want, "run=%s,", strrchr(dir, '/') + 1);
    tm_alert a;
    int fired[5] = {0};
    while (tm_alert_next(e, &a) == 1) {
        assert_int_equal(a.status, TM_ALERT_FIRING);
        assert_true(strncmp(a.labels, want, strlen(want)) == 0);
        if (strcmp(a.metric, "run.steps") == 0) {
            assert_true(a.value == 3 && strstr(a.labels, ",rank=0"));
            fired[0]++;
        } else if (strcmp(a.metric, "run.data_wait_fraction") == 0) {
            /* rank 0: 0.55; rank 1: its one judged step, 10/100 */
            assert_true(fabs(a.value - 0.55) < 1e-9 && strstr(a.labels, ",rank=0"));
            fired[1]++;
        } else if (strcmp(a.metric, "run.gpu_memory_allocated_fraction") == 0) {
            assert_true(fabs(a.value - 0.75) < 1e-9 && strstr(a.labels, ",rank=1"));
            fired[2]++;
        } else if (strcmp(a.metric, "run.gpu_memory_reserved_bytes") == 0) {
            assert_true(a.value == 7e9 && strstr(a.labels, ",rank=1"));
            fired[3]++;
        } else if (strcmp(a.metric, "run.step_time_seconds") == 0) {
            fired[4]++; /* both ranks: every judged step lasted 100 ms */
        }
    }
    assert_int_equal(fired[0], 1);
    assert_int_equal(fired[1], 1);
    assert_int_equal(fired[2], 1);
    assert_int_equal(fired[3], 1);
    assert_int_equal(fired[4], 2);
    tm_alert_free(&e);
    tm_follow_close(&f);
    tm_rec_close(&w0);
    tm_rec_close(&w1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_training_files_are_followed_and_system_and_worker_files_are_not, setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_rank_learned_late_relabels_the_live_row, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_each_poll_reads_only_what_was_appended, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_records_read_per_pass_are_bounded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_steps_are_those_of_the_one_step_accounting, setup,
                                        teardown),
        cmocka_unit_test(test_window_never_holds_the_warmup),
        cmocka_unit_test_setup_teardown(test_a_ring_file_counts_steps_from_the_highest_step_number,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_replaced_file_starts_from_nothing_and_a_vanished_one_is_dropped, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_last_capture_is_kept_and_the_device_size_is_remembered,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_under_a_runs_dir_only_live_runs_are_followed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_symlinked_run_in_the_runs_dir_is_not_followed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_missing_directory_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alert_inputs_are_fed_per_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stops_of_the_training_thread_are_counted_once_each,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
