/*
 * test_rec.c - record files: the writer (rec.c), the reader (recread.c) and
 * the format they share (docs/FORMAT.md).
 *
 * Every test works in its own directory under /tmp, removed afterwards.
 * Most tests write numbered events ("n", {"n":N}) and check what reads back.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../helpers/tmr_craft.h"
#include "rec.h"
#include "trainmon.h"

static char dir[64];
static char path[256];
static char mnt[128];
static bool mounted;

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_rec.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/f.tmr", dir);
    return 0;
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
    if (mounted) {
        umount2(mnt, MNT_DETACH);
        mounted = false;
    }
    rm_tree(dir);
    return 0;
}

/* ------------------------------------------------------------- helpers */

static tm_rec *open_w(uint64_t max_size, uint32_t block_size)
{
    tm_rec_opts o = {.role = "test", .rank = 3, .max_size = max_size, .block_size = block_size};
    tm_rec *w = NULL;
    int rc = tm_rec_open(&w, path, &o);
    if (rc)
        fail_msg("tm_rec_open: %s", tm_last_error());
    return w;
}

static int put_n(tm_rec *w, long n, size_t pad)
{
    char json[512];
    char padding[400];
    if (pad >= sizeof padding)
        pad = sizeof padding - 1;
    memset(padding, 'x', pad);
    padding[pad] = '\0';
    snprintf(json, sizeof json, "{\"n\":%ld,\"pad\":\"%s\"}", n, padding);
    return tm_rec_event(w, 0, "n", json);
}

static long event_n(const tm_record *rec)
{
    tm_rec_event_def ev;
    assert_int_equal(tm_rec_decode_event(rec, &ev), 0);
    assert_int_equal(ev.name_len, 1);
    assert_memory_equal(ev.name, "n", 1);
    char buf[600];
    assert_true(ev.json_len < sizeof buf);
    memcpy(buf, ev.json, ev.json_len);
    buf[ev.json_len] = '\0';
    long n = -1;
    assert_int_equal(sscanf(buf, "{\"n\":%ld", &n), 1);
    return n;
}

/* What a reader of the whole file saw. */
typedef struct readout {
    long *nums;
    size_t count, cap;
    uint64_t *offsets;
    size_t ndamage;
    tm_damage damage[8];
    bool torn;
} readout;

/* Reads every event of r (other types are skipped) into out. */
static void drain(tm_reader *r, readout *out)
{
    tm_record rec;
    int rc;
    while ((rc = tm_reader_next(r, &rec)) == 1) {
        if (rec.type != TM_REC_EVENT)
            continue;
        if (out->count == out->cap) {
            out->cap = out->cap ? out->cap * 2 : 1024;
            out->nums = realloc(out->nums, out->cap * sizeof *out->nums);
            out->offsets = realloc(out->offsets, out->cap * sizeof *out->offsets);
            assert_true(out->nums && out->offsets);
        }
        out->nums[out->count] = event_n(&rec);
        out->offsets[out->count] = rec.offset;
        out->count++;
    }
    assert_int_equal(rc, 0);
    const tm_damage *d;
    out->ndamage = tm_reader_damage(r, &d);
    for (size_t i = 0; i < out->ndamage && i < 8; i++)
        out->damage[i] = d[i];
    out->torn = tm_reader_torn_tail(r);
}

static readout read_all(void)
{
    readout out = {0};
    tm_reader *r = NULL;
    if (tm_reader_open(&r, path) != 0)
        fail_msg("tm_reader_open: %s", tm_last_error());
    drain(r, &out);
    tm_reader_close(&r);
    assert_null(r);
    return out;
}

static void free_readout(readout *o)
{
    free(o->nums);
    free(o->offsets);
}

/* nums are first, first+1, ..., first+count-1. */
static void assert_consecutive(const readout *o, long first)
{
    for (size_t i = 0; i < o->count; i++)
        if (o->nums[i] != first + (long)i)
            fail_msg("record %zu is %ld, expected %ld", i, o->nums[i], first + (long)i);
}

static void flip_bytes(uint64_t off, size_t n)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b[64];
    assert_true(n <= sizeof b);
    assert_int_equal(pread(fd, b, n, (off_t)off), (ssize_t)n);
    for (size_t i = 0; i < n; i++)
        b[i] ^= 0x5a;
    assert_int_equal(pwrite(fd, b, n, (off_t)off), (ssize_t)n);
    close(fd);
}

/* --------------------------------------------------------------- tests */

static void test_crc32c_matches_the_castagnoli_check_value(void **state)
{
    (void)state;
    assert_int_equal(tm_crc32c(0, "123456789", 9), 0xE3069283u);
    /* In pieces, as the record CRC is computed. */
    assert_int_equal(tm_crc32c(tm_crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    assert_int_equal(tm_crc32c(0, "", 0), 0u);
}

/* The 32-byte test vectors of RFC 3720 (iSCSI), B.4, and every length to
 * 200 against the bit-at-a-time definition (reflected polynomial
 * 0x82F63B78): the 8- and 1-byte turns of the hardware path (or the
 * table's slices) agree with it, at every alignment. */
static uint32_t crc32c_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c_rfc3720_vectors_and_every_length(void **state)
{
    (void)state;
    uint8_t b[32];
    memset(b, 0, 32);
    assert_int_equal(tm_crc32c(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, 32);
    assert_int_equal(tm_crc32c(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    assert_int_equal(tm_crc32c(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    assert_int_equal(tm_crc32c(0, b, 32), 0x113FDB5Cu);
    uint8_t big[208];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 131u + 7u);
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 200; n++) {
            assert_int_equal(tm_crc32c(0, big + off, n), crc32c_bitwise(big + off, n));
            /* in two pieces, split anywhere */
            size_t k = n / 3;
            assert_int_equal(tm_crc32c(tm_crc32c(0, big + off, k), big + off + k, n - k),
                             crc32c_bitwise(big + off, n));
        }
}

/* A record's CRC, taken in one pass, is the documented one: CRC-32C of the
 * block's seq, then type, flags, len and t_ns, then the payload. */
static void test_record_crc_is_seq_header_then_payload(void **state)
{
    (void)state;
    tm_rec_hdr h = {.type = 16, .flags = 0, .len = 13, .t_ns = 123456789012345};
    const char payload[] = "thirteen byte";
    uint64_t seq = 0x0102030405060708ull;
    uint8_t b[24];
    memcpy(b, &seq, 8);
    memcpy(b + 8, &h, 16);
    assert_int_equal(tm_rec_crc(seq, &h, payload), tm_crc32c(tm_crc32c(0, b, 24), payload, 13));
}

/* tm_rec_appendv writes its records in order, each as tm_rec_append would
 * (path: the setup's file in its temporary directory). */
static void test_appendv_writes_records_in_order(void **state)
{
    (void)state;
    tm_rec *w = NULL;
    tm_rec_opts o = {.role = "test"};
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    uint32_t a = 1, b = 2;
    tm_rec_item v[2] = {{.type = 200, .t_ns = 10, .payload = &a, .len = 4},
                        {.type = 201, .t_ns = 11, .payload = &b, .len = 4}};
    assert_int_equal(tm_rec_appendv(w, v, 2), 0);
    assert_int_equal(tm_rec_append(w, 202, 12, &a, 4), 0);
    tm_rec_close(&w);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    tm_record rec;
    uint16_t types[3];
    int n = 0;
    while (n < 3 && tm_reader_next(r, &rec) > 0)
        if (rec.type >= 200)
            types[n++] = rec.type;
    assert_int_equal(n, 3);
    assert_true(types[0] == 200 && types[1] == 201 && types[2] == 202);
    tm_reader_close(&r);
}

static void test_header_round_trips_role_rank_pid_host_and_sizes(void **state)
{
    (void)state;
    int64_t before = tm_now_real_ns();
    tm_rec *w = open_w(0, 8192);
    tm_rec_close(&w);
    assert_null(w);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    const tm_rec_header *h = tm_reader_header(r);
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    assert_int_equal(h->version, 1);
    assert_int_equal(h->block_size, 8192);
    assert_int_equal(h->max_size, 0);
    assert_int_equal(h->pid, getpid());
    assert_int_equal(h->rank, 3);
    assert_string_equal(h->role, "test");
    assert_string_equal(h->host, host);
    assert_true(h->start_real_ns >= before && h->start_real_ns <= tm_now_real_ns());
    assert_true(h->start_mono_ns > 0 && h->start_mono_ns <= tm_now_mono_ns());
    tm_reader_close(&r);
}

/* A rank learned after the file was made (tm_rec_set_rank): the header
 * says it, its CRC still holds (no damage), and a ring that wrapped many
 * times keeps it; a forked child may not write it. */
static void test_the_headers_rank_is_set_in_place(void **state)
{
    (void)state;
    tm_rec *w = open_w(64 * 1024, 4096); /* a ring of 16 blocks */
    assert_int_equal(tm_rec_event(w, 0, "before", "{}"), 0);
    assert_int_equal(tm_rec_set_rank(w, 7), 0);
    char big[2000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 200; i++) /* 400 KB through a 64 KiB ring */
        assert_int_equal(tm_rec_event(w, 0, "fill", big), 0);
    pid_t c = fork();
    if (c == 0)
        _exit(tm_rec_set_rank(w, 9) == -ECHILD ? 0 : 1);
    int status = 0;
    assert_int_equal(waitpid(c, &status, 0), c);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tm_rec_close(&w);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    assert_int_equal(tm_reader_header(r)->rank, 7);
    assert_string_equal(tm_reader_header(r)->role, "test");
    tm_record rec;
    while (tm_reader_next(r, &rec) == 1)
        ;
    const tm_damage *d;
    assert_int_equal(tm_reader_damage(r, &d), 0);
    tm_reader_close(&r);
}

static void test_series_sample_event_round_trip_with_exact_values_and_times(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 0);
    int a = tm_rec_series(w, "disk.r_s", "device=vda", "1/s");
    int b = tm_rec_series(w, "gpu.util", NULL, NULL);
    assert_int_equal(a, 1);
    assert_int_equal(b, 2);
    uint32_t ids[2] = {(uint32_t)a, (uint32_t)b};
    double vals[2] = {1.5, 0.1 + 0.2};
    assert_int_equal(tm_rec_sample(w, 123456789, ids, vals, 2), 0);
    assert_int_equal(tm_rec_event(w, 987654321, "oom", "{\"bytes\":42}"), 0);
    int64_t t0 = tm_now_mono_ns();
    assert_int_equal(tm_rec_event(w, 0, "now", NULL), 0);
    int64_t t1 = tm_now_mono_ns();
    assert_true(tm_rec_bytes(w) > 0);
    tm_rec_close(&w);

    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    tm_record rec;
    tm_rec_series_def sd;
    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, TM_REC_SERIES);
    assert_int_equal(tm_rec_decode_series(&rec, &sd), 0);
    assert_int_equal(sd.id, 1);
    assert_int_equal(sd.name_len, 8);
    assert_memory_equal(sd.name, "disk.r_s", 8);
    assert_int_equal(sd.labels_len, 10);
    assert_memory_equal(sd.labels, "device=vda", 10);
    assert_int_equal(sd.unit_len, 3);
    assert_memory_equal(sd.unit, "1/s", 3);
    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_int_equal(tm_rec_decode_series(&rec, &sd), 0);
    assert_int_equal(sd.id, 2);
    assert_int_equal(sd.labels_len, 0);
    assert_int_equal(sd.unit_len, 0);

    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, TM_REC_SAMPLE);
    assert_int_equal(rec.t_ns, 123456789);
    uint32_t rid[4];
    double rv[4];
    assert_int_equal(tm_rec_decode_sample(&rec, rid, rv, 4), 2);
    assert_int_equal(rid[0], 1);
    assert_int_equal(rid[1], 2);
    assert_true(rv[0] == 1.5);
    assert_true(rv[1] == 0.1 + 0.2); /* bit-exact */

    tm_rec_event_def ev;
    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, TM_REC_EVENT);
    assert_int_equal(rec.t_ns, 987654321);
    assert_int_equal(tm_rec_decode_event(&rec, &ev), 0);
    assert_int_equal(ev.name_len, 3);
    assert_memory_equal(ev.name, "oom", 3);
    assert_int_equal(ev.json_len, 12);
    assert_memory_equal(ev.json, "{\"bytes\":42}", 12);

    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_true(rec.t_ns >= t0 && rec.t_ns <= t1);
    assert_int_equal(tm_rec_decode_event(&rec, &ev), 0);
    assert_int_equal(ev.json_len, 0);

    assert_int_equal(tm_reader_next(r, &rec), 0);
    assert_int_equal(tm_reader_damage(r, NULL), 0);
    assert_false(tm_reader_torn_tail(r));
    tm_reader_close(&r);
}

static void test_series_same_name_and_labels_get_the_same_id(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 0);
    int a = tm_rec_series(w, "disk.r_s", "device=vda", "1/s");
    int b = tm_rec_series(w, "disk.r_s", "device=vdb", "1/s");
    int c = tm_rec_series(w, "disk.w_s", "device=vda", "1/s");
    assert_true(a >= 1 && b >= 1 && c >= 1);
    assert_int_not_equal(a, b);
    assert_int_not_equal(a, c);
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof name, "s%d", i);
        assert_true(tm_rec_series(w, name, "", "") > 0);
    }
    assert_int_equal(tm_rec_series(w, "disk.r_s", "device=vda", "1/s"), a);
    assert_int_equal(tm_rec_series(w, "disk.r_s", "device=vdb", "other"), b);
    tm_rec_close(&w);

    /* Defined once each in the file. */
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    tm_record rec;
    int nseries = 0;
    while (tm_reader_next(r, &rec) == 1)
        nseries += rec.type == TM_REC_SERIES;
    assert_int_equal(nseries, 1003);
    tm_reader_close(&r);
}

static void test_sample_leaves_out_nan_values(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 0);
    uint32_t ids[3] = {1, 2, 3};
    double vals[3] = {NAN, 0.0, NAN};
    assert_int_equal(tm_rec_sample(w, 5, ids, vals, 3), 0);
    tm_rec_close(&w);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    tm_record rec;
    assert_int_equal(tm_reader_next(r, &rec), 1);
    uint32_t rid[3];
    double rv[3];
    assert_int_equal(tm_rec_decode_sample(&rec, rid, rv, 3), 1);
    assert_int_equal(rid[0], 2);
    assert_true(rv[0] == 0.0);
    tm_reader_close(&r);
}

static void test_many_records_span_many_blocks_in_order(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 4096);
    for (long i = 0; i < 20000; i++)
        assert_int_equal(put_n(w, i, (size_t)(i % 97)), 0);
    tm_rec_close(&w);
    readout o = read_all();
    assert_int_equal(o.count, 20000);
    assert_consecutive(&o, 0);
    assert_true(o.offsets[o.count - 1] > 100 * 4096); /* many blocks */
    assert_int_equal(o.ndamage, 0);
    assert_false(o.torn);
    free_readout(&o);
}

typedef struct thread_arg {
    tm_rec *w;
    long base;
} thread_arg;

static void *append_thread(void *p)
{
    thread_arg *a = p;
    for (long i = 0; i < 5000; i++)
        if (put_n(a->w, a->base + i, 0) != 0)
            return (void *)1;
    return NULL;
}

static void test_appends_from_several_threads_are_all_kept_whole(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 4096);
    pthread_t th[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){w, i * 1000000L};
        assert_int_equal(pthread_create(&th[i], NULL, append_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *ret;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
    tm_rec_close(&w);
    readout o = read_all();
    assert_int_equal(o.count, 20000);
    long next[4] = {0, 1000000, 2000000, 3000000};
    for (size_t i = 0; i < o.count; i++) {
        long t = o.nums[i] / 1000000;
        assert_true(t >= 0 && t < 4);
        assert_int_equal(o.nums[i], next[t]); /* each thread's own order */
        next[t]++;
    }
    assert_int_equal(o.ndamage, 0);
    free_readout(&o);
}

static void test_record_larger_than_a_block_is_e2big(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 4096);
    static uint8_t big[4096];
    assert_int_equal(tm_rec_append(w, 99, 0, big, sizeof big), -E2BIG);
    assert_non_null(strstr(tm_last_error(), "does not fit"));
    /* The largest record that fits still does, and the writer goes on. */
    assert_int_equal(tm_rec_append(w, 99, 0, big, 4096 - 16 - 24), 0);
    assert_int_equal(put_n(w, 0, 0), 0);
    tm_rec_close(&w);
    readout o = read_all();
    assert_int_equal(o.count, 1);
    free_readout(&o);
}

/* Starts the writer helper (or, without it, a forked writer loop) and
 * returns its pid once it has written its first record. */
static pid_t start_writer(const char *max_size)
{
    char helper[256];
    const char *build = getenv("BUILD");
    snprintf(helper, sizeof helper, "%s/tests/helpers/rec_writer", build ? build : "build");
    bool have_helper = access(helper, X_OK) == 0;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        if (have_helper) {
            execl(helper, helper, path, "--max-size", max_size, (char *)NULL);
            _exit(127);
        }
        tm_rec_opts o = {.max_size = strtoull(max_size, NULL, 0)};
        tm_rec *w = NULL;
        if (tm_rec_open(&w, path, &o))
            _exit(1);
        for (long n = 0;; n++) {
            put_n(w, n, 0);
            if (n == 0 && write(1, "ready\n", 6) != 6)
                _exit(1);
        }
    }
    close(p[1]);
    char buf[16] = "";
    ssize_t got = read(p[0], buf, sizeof buf - 1);
    close(p[0]);
    if (got < 5 || strncmp(buf, "ready", 5) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("writer did not start (%s)", have_helper ? helper : "forked loop");
    }
    return pid;
}

static void kill_after(pid_t pid, long us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void test_sigkilled_writer_leaves_every_complete_record_readable(void **state)
{
    (void)state;
    long delays[] = {0, 2000, 30000};
    for (size_t i = 0; i < 3; i++) {
        pid_t pid = start_writer("0");
        kill_after(pid, delays[i]);
        readout o = read_all();
        assert_true(o.count >= 1);
        assert_consecutive(&o, 0);
        assert_int_equal(o.ndamage, 0);
        free_readout(&o);
    }
}

static void test_sigkilled_ring_writer_leaves_the_newest_records_readable(void **state)
{
    (void)state;
    pid_t pid = start_writer("65536");
    kill_after(pid, 50000);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size <= 65536);
    readout o = read_all();
    assert_true(o.count >= 1);
    assert_consecutive(&o, o.nums[0]);
    assert_int_equal(o.ndamage, 0);
    free_readout(&o);
}

/* Writes n numbered events to an unbounded file of 4 KiB blocks and returns
 * what reads back. */
static readout write_n(long n)
{
    tm_rec *w = open_w(0, 4096);
    for (long i = 0; i < n; i++)
        assert_int_equal(put_n(w, i, 0), 0);
    tm_rec_close(&w);
    readout o = read_all();
    assert_int_equal(o.count, (size_t)n);
    return o;
}

static void test_torn_tail_by_truncation_is_ignored_and_flagged(void **state)
{
    (void)state;
    readout o = write_n(500);
    assert_int_equal(truncate(path, (off_t)o.offsets[499] + 30), 0);
    free_readout(&o);
    o = read_all();
    assert_int_equal(o.count, 499);
    assert_consecutive(&o, 0);
    assert_true(o.torn);
    assert_int_equal(o.ndamage, 0);
    free_readout(&o);
}

static void test_torn_tail_by_scribble_is_ignored_and_flagged(void **state)
{
    (void)state;
    readout o = write_n(500);
    flip_bytes(o.offsets[499] + 26, 20);
    free_readout(&o);
    o = read_all();
    assert_int_equal(o.count, 499);
    assert_consecutive(&o, 0);
    assert_true(o.torn);
    assert_int_equal(o.ndamage, 0);
    free_readout(&o);
}

/* The record in the middle of the third block (block index 2). */
static size_t middle_of_block_2(const readout *o)
{
    uint64_t lo = 4096 + 2 * 4096, hi = lo + 4096;
    size_t first = 0, last = 0;
    for (size_t i = 0; i < o->count; i++) {
        if (o->offsets[i] >= lo && o->offsets[i] < hi) {
            if (!first)
                first = i;
            last = i;
        }
    }
    assert_true(first > 0 && last > first);
    return (first + last) / 2;
}

static void test_corrupted_record_in_block_2_is_reported_and_the_rest_read(void **state)
{
    (void)state;
    readout o = write_n(1000);
    size_t bad = middle_of_block_2(&o);
    uint64_t off = o.offsets[bad];
    flip_bytes(off + 30, 4); /* payload bytes */
    free_readout(&o);
    o = read_all();
    assert_int_equal(o.count, 999);
    for (size_t i = 0; i < o.count; i++)
        assert_int_equal(o.nums[i], (long)(i < bad ? i : i + 1));
    assert_int_equal(o.ndamage, 1);
    assert_int_equal(o.damage[0].offset, off);
    assert_string_equal(o.damage[0].what, "bad checksum");
    assert_false(o.torn);
    free_readout(&o);
}

static void test_corrupted_record_length_is_reported_and_the_rest_read(void **state)
{
    (void)state;
    readout o = write_n(1000);
    size_t bad = middle_of_block_2(&o);
    uint64_t off = o.offsets[bad];
    flip_bytes(off + 6, 1); /* high byte of len */
    free_readout(&o);
    o = read_all();
    assert_int_equal(o.count, 999);
    assert_int_equal(o.ndamage, 1);
    assert_int_equal(o.damage[0].offset, off);
    assert_string_equal(o.damage[0].what, "bad length");
    assert_false(o.torn);
    free_readout(&o);
}

static void test_ring_holds_max_size_and_keeps_the_newest_records(void **state)
{
    (void)state;
    const uint64_t max = 256 * 1024;
    tm_rec *w = open_w(max, 0);
    long n = 0;
    while (tm_rec_bytes(w) < 10u * 1024 * 1024)
        assert_int_equal(put_n(w, n++, 64), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true((uint64_t)st.st_size <= max);
    tm_rec_close(&w);
    assert_int_equal(stat(path, &st), 0);
    assert_true((uint64_t)st.st_size <= max);

    readout o = read_all();
    assert_true(o.count > 1000); /* most of the ring */
    assert_int_equal(o.nums[o.count - 1], n - 1);
    assert_consecutive(&o, n - (long)o.count);
    assert_int_equal(o.ndamage, 0);
    assert_false(o.torn);
    free_readout(&o);
}

static void test_ring_reads_consistently_while_the_writer_is_mid_way(void **state)
{
    (void)state;
    tm_rec *w = open_w(64 * 1024, 0);
    tm_reader *live = NULL;
    assert_int_equal(tm_reader_open(&live, path), 0);
    readout lo = {0};
    long n = 0;
    for (int batch = 0; batch < 12; batch++) {
        for (int i = 0; i < 150 * (batch + 1); i++)
            assert_int_equal(put_n(w, n++, 40), 0);
        /* A fresh reader sees the newest records, in order, up to the last. */
        readout o = read_all();
        assert_true(o.count > 0);
        assert_int_equal(o.nums[o.count - 1], n - 1);
        assert_consecutive(&o, n - (long)o.count);
        assert_int_equal(o.ndamage, 0);
        assert_false(o.torn);
        free_readout(&o);
        /* A kept reader catches up: increasing, ending at the last. */
        size_t before = lo.count;
        assert_int_equal(tm_reader_refresh(live), 0);
        drain(live, &lo);
        assert_true(lo.count > before);
        assert_int_equal(lo.nums[lo.count - 1], n - 1);
        for (size_t i = 1; i < lo.count; i++)
            assert_true(lo.nums[i] > lo.nums[i - 1]);
        assert_int_equal(lo.ndamage, 0);
    }
    tm_reader_close(&live);
    free_readout(&lo);
    tm_rec_close(&w);
}

static void test_ring_defines_every_series_in_every_block(void **state)
{
    (void)state;
    tm_rec *w = open_w(32 * 1024, 4096);
    uint32_t ids[3];
    ids[0] = (uint32_t)tm_rec_series(w, "a", "x=1", "s");
    ids[1] = (uint32_t)tm_rec_series(w, "b", "", "");
    ids[2] = (uint32_t)tm_rec_series(w, "c", "y=2", "B");
    for (int i = 0; i < 5000; i++) {
        double v[3] = {i, -i, 0.5 * i};
        assert_int_equal(tm_rec_sample(w, 0, ids, v, 3), 0);
    }
    tm_rec_close(&w);
    /* The oldest blocks with the definitions are long gone, yet every
     * sample's series is defined before it. */
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    tm_record rec;
    bool defined[4] = {false};
    int samples = 0;
    while (tm_reader_next(r, &rec) == 1) {
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def sd;
            assert_int_equal(tm_rec_decode_series(&rec, &sd), 0);
            assert_true(sd.id >= 1 && sd.id <= 3);
            defined[sd.id] = true;
        } else if (rec.type == TM_REC_SAMPLE) {
            uint32_t rid[3];
            double rv[3];
            assert_int_equal(tm_rec_decode_sample(&rec, rid, rv, 3), 3);
            for (int i = 0; i < 3; i++)
                assert_true(defined[rid[i]]);
            samples++;
        }
    }
    assert_true(samples > 100 && samples < 5000);
    tm_reader_close(&r);
}

static void test_forked_child_cannot_append_and_the_parent_file_stays_clean(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 4096);
    for (long i = 0; i < 100; i++)
        assert_int_equal(put_n(w, i, 0), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int bad = 0;
        bad |= put_n(w, 999999, 0) != -ECHILD;
        bad |= tm_rec_append(w, 99, 0, "x", 1) != -ECHILD;
        bad |= tm_rec_series(w, "child", "", "") != -ECHILD;
        double v = 1;
        uint32_t id = 1;
        bad |= tm_rec_sample(w, 0, &id, &v, 1) != -ECHILD;
        tm_rec_close(&w); /* unmaps only: must not truncate the parent's file */
        _exit(bad);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    for (long i = 100; i < 2000; i++)
        assert_int_equal(put_n(w, i, 0), 0);
    tm_rec_close(&w);
    readout o = read_all();
    assert_int_equal(o.count, 2000);
    assert_consecutive(&o, 0);
    assert_int_equal(o.ndamage, 0);
    assert_false(o.torn);
    free_readout(&o);
}

static void test_disk_full_fails_appends_with_enospc_and_keeps_what_was_written(void **state)
{
    (void)state;
    if (getuid() != 0)
        skip();
    snprintf(mnt, sizeof mnt, "%s/mnt", dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0)
        skip();
    mounted = true;
    snprintf(path, sizeof path, "%s/full.tmr", mnt);
    tm_rec *w = open_w(0, 0);
    long n = 0;
    int rc = 0;
    while (n < 1000000 && (rc = put_n(w, n, 100)) == 0)
        n++;
    assert_int_equal(rc, -ENOSPC);
    assert_true(tm_rec_full(w));
    assert_true(n > 1000);
    assert_int_equal(put_n(w, n, 0), -ENOSPC);
    assert_int_equal(tm_rec_series(w, "late", "", ""), -ENOSPC);
    tm_rec_close(&w);
    readout o = read_all();
    assert_int_equal(o.count, (size_t)n);
    assert_consecutive(&o, 0);
    assert_int_equal(o.ndamage, 0);
    free_readout(&o);
}

static void test_a_file_that_is_not_ours_is_einval_not_a_record_file(void **state)
{
    (void)state;
    tm_reader *r = NULL;
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 500; i++)
        fputs("this is a text file, not a record file\n", f);
    fclose(f);
    assert_int_equal(tm_reader_open(&r, path), -EINVAL);
    assert_null(r);
    assert_non_null(strstr(tm_last_error(), path));
    assert_non_null(strstr(tm_last_error(), "not a trainmon record file"));

    f = fopen(path, "w"); /* empty */
    fclose(f);
    assert_int_equal(tm_reader_open(&r, path), -EINVAL);
    assert_non_null(strstr(tm_last_error(), "not a trainmon record file"));

    assert_int_equal(tm_reader_open(&r, "/nonexistent/x.tmr"), -ENOENT);
    assert_non_null(strstr(tm_last_error(), "/nonexistent/x.tmr"));
}

static void test_a_newer_format_version_is_einval_naming_the_version(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 0);
    tm_rec_close(&w);
    int fd = open(path, O_RDWR);
    uint32_t v = 2;
    assert_int_equal(pwrite(fd, &v, 4, 8), 4);
    close(fd);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), -EINVAL);
    assert_non_null(strstr(tm_last_error(), "version 2"));
}

static void test_a_header_checksum_error_is_damage_and_records_still_read(void **state)
{
    (void)state;
    readout o = write_n(10);
    free_readout(&o);
    flip_bytes(offsetof(tm_rec_filehdr, role) + 20, 1); /* a pad byte of role */
    o = read_all();
    assert_int_equal(o.count, 10);
    assert_int_equal(o.ndamage, 1);
    assert_int_equal(o.damage[0].offset, 0);
    assert_non_null(strstr(o.damage[0].what, "header"));
    free_readout(&o);
}

static void test_live_reader_picks_up_appends_after_refresh(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 4096);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    readout o = {0};
    long n = 0;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 10 + 300 * round; i++) /* later rounds cross blocks */
            assert_int_equal(put_n(w, n++, 0), 0);
        assert_int_equal(tm_reader_refresh(r), 0);
        drain(r, &o);
        assert_int_equal(o.count, (size_t)n);
        assert_consecutive(&o, 0);
        assert_false(o.torn);
        assert_int_equal(o.ndamage, 0);
        tm_record rec;
        assert_int_equal(tm_reader_next(r, &rec), 0); /* at the end, stays there */
    }
    tm_rec_close(&w);
    tm_reader_close(&r);
    free_readout(&o);
}

static void test_live_reader_retries_a_record_still_being_written(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 4096);
    for (long i = 0; i < 5; i++)
        assert_int_equal(put_n(w, i, 0), 0);
    readout o = read_all();
    uint64_t last = o.offsets[4];
    free_readout(&o);
    /* As a reader sees a record whose CRC is not stored yet. */
    uint32_t crc;
    int fd = open(path, O_RDWR);
    assert_int_equal(pread(fd, &crc, 4, (off_t)last + 16), 4);
    uint32_t zero = 0;
    assert_int_equal(pwrite(fd, &zero, 4, (off_t)last + 16), 4);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    o = (readout){0};
    drain(r, &o);
    assert_int_equal(o.count, 4);
    assert_true(o.torn);
    /* The writer finishes it: the same reader now reads it, torn no more. */
    assert_int_equal(pwrite(fd, &crc, 4, (off_t)last + 16), 4);
    close(fd);
    assert_int_equal(tm_reader_refresh(r), 0);
    drain(r, &o);
    assert_int_equal(o.count, 5);
    assert_consecutive(&o, 0);
    assert_false(o.torn);
    assert_int_equal(o.ndamage, 0);
    tm_reader_close(&r);
    tm_rec_close(&w);
    free_readout(&o);
}

static void test_decoders_reject_payloads_too_short_for_their_lengths(void **state)
{
    (void)state;
    uint8_t p[32] = {0};
    tm_record rec = {.type = TM_REC_SERIES, .len = 11, .payload = p};
    tm_rec_series_def sd;
    assert_int_equal(tm_rec_decode_series(&rec, &sd), -EINVAL);
    rec.len = 14;
    p[4] = 3; /* name_len 3: 12 + 3 > 14 */
    assert_int_equal(tm_rec_decode_series(&rec, &sd), -EINVAL);

    rec = (tm_record){.type = TM_REC_SAMPLE, .len = 23, .payload = p};
    memset(p, 0, sizeof p);
    p[0] = 1; /* one pair needs 24 bytes */
    assert_int_equal(tm_rec_decode_sample(&rec, NULL, NULL, 0), -EINVAL);
    rec.len = 24;
    assert_int_equal(tm_rec_decode_sample(&rec, NULL, NULL, 0), 1);

    rec = (tm_record){.type = TM_REC_EVENT, .len = 10, .payload = p};
    memset(p, 0, sizeof p);
    p[0] = 1;
    p[4] = 2; /* 8 + 1 + 2 > 10 */
    tm_rec_event_def ev;
    assert_int_equal(tm_rec_decode_event(&rec, &ev), -EINVAL);
    rec.type = TM_REC_SAMPLE; /* the wrong type */
    rec.len = 11;
    assert_int_equal(tm_rec_decode_event(&rec, &ev), -EINVAL);
}

static void test_unknown_record_types_read_back_with_their_payload(void **state)
{
    (void)state;
    tm_rec *w = open_w(0, 0);
    assert_int_equal(tm_rec_append(w, 40, 77, "hello", 5), 0);
    assert_int_equal(tm_rec_append(w, 41, 78, NULL, 0), 0);
    tm_rec_close(&w);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    tm_record rec;
    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, 40);
    assert_int_equal(rec.t_ns, 77);
    assert_int_equal(rec.len, 5);
    assert_memory_equal(rec.payload, "hello", 5);
    assert_int_equal(tm_reader_next(r, &rec), 1);
    assert_int_equal(rec.type, 41);
    assert_int_equal(rec.len, 0);
    assert_int_equal(tm_reader_next(r, &rec), 0);
    tm_reader_close(&r);
}

static void test_ring_below_the_minimum_size_is_einval(void **state)
{
    (void)state;
    tm_rec_opts o = {.max_size = 8192};
    tm_rec *w = NULL;
    assert_int_equal(tm_rec_open(&w, path, &o), -EINVAL);
    assert_null(w);
    assert_int_equal(access(path, F_OK), -1); /* nothing half-made left */
    o = (tm_rec_opts){.block_size = 5000};
    assert_int_equal(tm_rec_open(&w, path, &o), -EINVAL);
}

/* ------------------------------------------ hostile files (issue #15) */

/* Reads the crafted resync worst case (tests/helpers/tmr_craft.h) and
 * checks what was read and how much work it took. */
static void check_crafted_far(uint64_t size, uint32_t bs)
{
    long nblocks = craft_far(path, size, bs);
    assert_true(nblocks > 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    readout o = {0};
    drain(r, &o);
    tm_reader_counters c;
    tm_reader_stats(r, &c);
    tm_reader_close(&r);

    /* Everything intact is read: the one valid event of every block. */
    assert_int_equal(o.count, (size_t)nblocks);
    assert_consecutive(&o, 0);
    /* Each block's crafted part is damage (valid data follows it), the
     * last block's is a torn tail; the first at the first crafted header:
     * block 0 at 4096, its header 16, the event 24 + 16 bytes. */
    assert_int_equal(o.ndamage, (size_t)nblocks - 1);
    if (nblocks > 1) {
        assert_int_equal(o.damage[0].offset, 4096u + 16u + 40u);
        assert_string_equal(o.damage[0].what, "bad checksum");
    }
    assert_true(o.torn);
    /* Linear work: CRC over at most a few times the file (the old reader
     * did bs/16 times the file: 4096x for 64 KiB blocks), and at most one
     * candidate per 8 bytes. */
    uint64_t fsize = (uint64_t)st.st_size;
    if (c.crc_bytes > 5 * fsize)
        fail_msg("%" PRIu64 " bytes CRC'd for a file of %" PRIu64, c.crc_bytes, fsize);
    assert_true(c.candidates <= fsize / 8);
    assert_true(c.unchecked > 0); /* the cap did the work */
    assert_int_equal(c.records, (uint64_t)nblocks);
    free_readout(&o);
}

static void test_crafted_resync_file_with_64k_blocks_is_read_in_linear_work(void **state)
{
    (void)state;
    check_crafted_far(4096 + 64 * 65536, 65536);
}

static void test_one_crafted_16_mib_block_is_read_in_linear_work(void **state)
{
    (void)state;
    /* The old reader's worst case: bs^2/16 = 16 TB of CRC for this block. */
    check_crafted_far(4096 + TM_REC_MAX_BLOCK, TM_REC_MAX_BLOCK);
}

static void test_damage_in_many_records_of_a_block_loses_only_those(void **state)
{
    (void)state;
    /* Honest damage (every other record of block 2 scribbled) stays far
     * below the CRC cap: every intact record is found again. */
    readout o = write_n(1000);
    uint64_t lo = 4096 + 2 * 4096, hi = lo + 4096;
    size_t nbad = 0;
    bool bad[1000] = {false};
    for (size_t i = 0; i < o.count; i++) {
        if (o.offsets[i] >= lo && o.offsets[i] < hi && i % 2) {
            flip_bytes(o.offsets[i] + 30, 4);
            bad[i] = true;
            nbad++;
        }
    }
    assert_true(nbad >= 10);
    free_readout(&o);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    o = (readout){0};
    drain(r, &o);
    tm_reader_counters c;
    tm_reader_stats(r, &c);
    tm_reader_close(&r);
    assert_int_equal(o.count, 1000 - nbad);
    size_t k = 0;
    for (long i = 0; i < 1000; i++)
        if (!bad[i])
            assert_int_equal(o.nums[k++], i);
    assert_int_equal(o.ndamage, nbad);
    assert_int_equal(c.unchecked, 0);
    assert_false(o.torn);
    free_readout(&o);
}

static void test_a_fifo_is_refused_at_once_as_not_a_regular_file(void **state)
{
    (void)state;
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(5); /* a reader that blocks on the FIFO is killed, and fails */
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), -EINVAL);
    alarm(0);
    assert_null(r);
    char want[300];
    snprintf(want, sizeof want, "%s: not a regular file (fifo)", path);
    assert_string_equal(tm_last_error(), want);
}

static void test_a_symlink_is_refused_not_followed(void **state)
{
    (void)state;
    readout o = write_n(3);
    free_readout(&o);
    char link[300];
    snprintf(link, sizeof link, "%s/link.tmr", dir);
    assert_int_equal(symlink(path, link), 0);
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, link), -ELOOP);
    char want[400];
    snprintf(want, sizeof want, "%s: not a regular file (symlink, not followed)", link);
    assert_string_equal(tm_last_error(), want);
    assert_int_equal(tm_reader_open(&r, dir), -EISDIR);
    assert_non_null(strstr(tm_last_error(), "not a regular file (directory)"));
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_crc32c_matches_the_castagnoli_check_value),
        T(test_the_headers_rank_is_set_in_place),
        T(test_crc32c_rfc3720_vectors_and_every_length),
        T(test_record_crc_is_seq_header_then_payload),
        T(test_appendv_writes_records_in_order),
        T(test_header_round_trips_role_rank_pid_host_and_sizes),
        T(test_series_sample_event_round_trip_with_exact_values_and_times),
        T(test_series_same_name_and_labels_get_the_same_id),
        T(test_sample_leaves_out_nan_values),
        T(test_many_records_span_many_blocks_in_order),
        T(test_appends_from_several_threads_are_all_kept_whole),
        T(test_record_larger_than_a_block_is_e2big),
        T(test_sigkilled_writer_leaves_every_complete_record_readable),
        T(test_sigkilled_ring_writer_leaves_the_newest_records_readable),
        T(test_torn_tail_by_truncation_is_ignored_and_flagged),
        T(test_torn_tail_by_scribble_is_ignored_and_flagged),
        T(test_corrupted_record_in_block_2_is_reported_and_the_rest_read),
        T(test_corrupted_record_length_is_reported_and_the_rest_read),
        T(test_ring_holds_max_size_and_keeps_the_newest_records),
        T(test_ring_reads_consistently_while_the_writer_is_mid_way),
        T(test_ring_defines_every_series_in_every_block),
        T(test_forked_child_cannot_append_and_the_parent_file_stays_clean),
        T(test_disk_full_fails_appends_with_enospc_and_keeps_what_was_written),
        T(test_a_file_that_is_not_ours_is_einval_not_a_record_file),
        T(test_a_newer_format_version_is_einval_naming_the_version),
        T(test_a_header_checksum_error_is_damage_and_records_still_read),
        T(test_live_reader_picks_up_appends_after_refresh),
        T(test_live_reader_retries_a_record_still_being_written),
        T(test_decoders_reject_payloads_too_short_for_their_lengths),
        T(test_unknown_record_types_read_back_with_their_payload),
        T(test_ring_below_the_minimum_size_is_einval),
        T(test_crafted_resync_file_with_64k_blocks_is_read_in_linear_work),
        T(test_one_crafted_16_mib_block_is_read_in_linear_work),
        T(test_damage_in_many_records_of_a_block_loses_only_those),
        T(test_a_fifo_is_refused_at_once_as_not_a_regular_file),
        T(test_a_symlink_is_refused_not_followed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
