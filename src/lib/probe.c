/*
 * probe.c - what the storage behind a dataset can deliver (probe.h,
 * trainmon.h "storage ceiling"; docs/DIAGNOSIS.md "The storage ceiling").
 *
 * The probe reads the dataset's own files, as the job does, so that the
 * ceiling is the one the job meets: the filesystem, the device, and any
 * limit above the device (a cgroup's blkio throttle, a cloud volume's
 * provisioned rate) that a read of the raw device would not see.  It reads
 * with O_DIRECT: the page cache is neither used (a cached file would
 * measure memory) nor filled (the job's cached data is not evicted to make
 * room).  A queue depth of N is N threads with one read in flight each,
 * fio's "numjobs" with a synchronous engine: no libaio or io_uring needed,
 * and the same requests a DataLoader's N workers make.
 *
 * Files: the directory is walked (no symlink followed, the walk stays on
 * the filesystem of path, at most TM_PROBE_SCAN_MAX entries and
 * TM_PROBE_MAX_DEPTH levels) and TM_PROBE_MAX_FILES regular files are kept
 * open, a uniform sample (reservoir) of all it found.  Random reads are of
 * the sample's median file size (a dataset of 48 KiB images is read 48 KiB
 * at a time), sequential ones of 1 MiB through the files in inode order.
 *
 * probe.json, written by `trainmon run --probe` into the run directory, is
 * read back by the report; its reader takes crafted input
 * (tests/fuzz/fuzz_probe.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "probe.h"
#include "rec.h"
#include "util.h"

/* ------------------------------------------------------------ arithmetic */

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return v > UINT64_MAX - (a - 1) ? UINT64_MAX / a * a : (v + a - 1) / a * a;
}

uint64_t tm_probe_rand_block(uint64_t median)
{
    uint64_t b = round_up(median, TM_PROBE_ALIGN);
    if (b < TM_PROBE_ALIGN)
        b = TM_PROBE_ALIGN;
    if (b > TM_PROBE_RAND_MAX)
        b = TM_PROBE_RAND_MAX;
    return b;
}

size_t tm_probe_plan(uint64_t rand_block, tm_probe_test *out, size_t cap)
{
    static const struct {
        const char *pattern;
        unsigned qd;
    } plan[] = {{"sequential", 1}, {"sequential", 4}, {"random", 1}, {"random", 4}, {"random", 16}};
    size_t n = 0;
    for (size_t i = 0; i < TM_ARRAY_LEN(plan) && n < cap; i++, n++) {
        memset(&out[n], 0, sizeof out[n]);
        tm_strlcpy(out[n].pattern, plan[i].pattern, sizeof out[n].pattern);
        out[n].queue_depth = plan[i].qd;
        out[n].block_bytes = plan[i].pattern[0] == 's' ? TM_PROBE_SEQ_BLOCK : rand_block;
    }
    return n;
}

/* Buckets 0..15 hold 0..15 ns exactly; from 16 ns on, each power of two
 * [2^e, 2^(e+1)) is cut into 16 equal buckets: bucket (e - 3) * 16 + the
 * 4 bits below the leading one. */
size_t tm_probe_hist_bucket(uint64_t ns)
{
    if (ns < 16)
        return (size_t)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns);
    size_t b = (size_t)(e - 3) * 16 + (size_t)((ns >> (e - 4)) & 15);
    return b < TM_PROBE_HIST_BUCKETS ? b : TM_PROBE_HIST_BUCKETS - 1;
}

void tm_probe_hist_bounds(size_t bucket, uint64_t *lo, uint64_t *width)
{
    if (bucket < 16) {
        *lo = bucket;
        *width = 1;
        return;
    }
    unsigned e = (unsigned)(bucket / 16) + 3;
    *lo = (16 + (uint64_t)(bucket % 16)) << (e - 4);
    *width = (uint64_t)1 << (e - 4);
}

void tm_probe_hist_add(tm_probe_hist *h, uint64_t ns)
{
    h->n++;
    h->sum_ns += ns;
    h->b[tm_probe_hist_bucket(ns)]++;
}

void tm_probe_hist_merge(tm_probe_hist *into, const tm_probe_hist *h)
{
    into->n += h->n;
    into->sum_ns += h->sum_ns;
    for (size_t i = 0; i < TM_PROBE_HIST_BUCKETS; i++)
        into->b[i] += h->b[i];
}

double tm_probe_hist_quantile(const tm_probe_hist *h, double q)
{
    if (h->n == 0 || !(q > 0) || q > 1)
        return NAN;
    uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;
    if (want < 1)
        want = 1;
    for (size_t i = 0; i < TM_PROBE_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= want) {
            uint64_t lo, w;
            tm_probe_hist_bounds(i, &lo, &w);
            return ((double)lo + (double)w / 2) / 1e9;
        }
    }
    return NAN;
}

void tm_probe_finish(tm_probe_test *t, uint64_t bytes, uint64_t requests, double seconds,
                     const tm_probe_hist *h)
{
    t->bytes = bytes;
    t->requests = requests;
    t->seconds = seconds;
    t->bytes_per_second = seconds > 0 ? (double)bytes / seconds : NAN;
    t->iops = seconds > 0 ? (double)requests / seconds : NAN;
    t->lat_mean_s = h->n ? (double)h->sum_ns / (double)h->n / 1e9 : NAN;
    t->lat_p50_s = tm_probe_hist_quantile(h, 0.50);
    t->lat_p99_s = tm_probe_hist_quantile(h, 0.99);
}

double tm_probe_slope(const uint64_t *bins, size_t n, double bin_s, size_t first)
{
    /* Points (end of bin k, bytes read up to it) for k >= first; the
     * least-squares slope, computed around the means. */
    if (n < first + 2 || !(bin_s > 0))
        return NAN;
    double cum = 0, sx = 0, sy = 0, m = (double)(n - first);
    double *y = malloc(n * sizeof *y);
    if (!y)
        return NAN;
    for (size_t k = 0; k < n; k++) {
        cum += (double)bins[k];
        y[k] = cum;
        if (k >= first) {
            sx += (double)(k + 1) * bin_s;
            sy += cum;
        }
    }
    double mx = sx / m, my = sy / m, sxy = 0, sxx = 0;
    for (size_t k = first; k < n; k++) {
        double dx = (double)(k + 1) * bin_s - mx;
        sxy += dx * (y[k] - my);
        sxx += dx * dx;
    }
    free(y);
    return sxx > 0 ? sxy / sxx : NAN;
}

const tm_probe_test *tm_probe_best(const tm_probe *p, const char *pattern)
{
    const tm_probe_test *best = NULL;
    for (size_t i = 0; i < p->ntests && i < TM_PROBE_MAX_TESTS; i++) {
        const tm_probe_test *t = &p->tests[i];
        if ((pattern && strcmp(t->pattern, pattern) != 0) || !isfinite(t->bytes_per_second))
            continue;
        if (!best || t->bytes_per_second > best->bytes_per_second)
            best = t;
    }
    return best;
}

bool tm_probe_covers(const tm_probe *p, const char *disk)
{
    if (!disk[0])
        return false;
    if (!strcmp(p->device, disk))
        return true;
    for (size_t i = 0; i < p->ndisks && i < TM_PROBE_MAX_DISKS; i++)
        if (!strcmp(p->disks[i], disk))
            return true;
    return false;
}

/* ----------------------------------------------------------- the files */

struct pfile {
    int fd;
    uint64_t size;
    uint64_t ino;
};

struct pset {
    struct pfile f[TM_PROBE_MAX_FILES];
    size_t n;
    uint64_t seen, entries; /* regular files found; entries looked at */
    uint64_t rng;
    dev_t dev;
    int direct_err; /* an open with O_DIRECT failed with this (EINVAL: not supported) */
};

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64*: plenty for picking offsets, no libc state shared with
     * the caller's rand(). */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* A regular file found: kept when the reservoir takes it (each of the seen
 * files is in the sample with the same chance). */
static void pset_offer(struct pset *s, int dirfd, const char *name)
{
    s->seen++;
    size_t slot = s->n;
    if (s->n == TM_PROBE_MAX_FILES) {
        uint64_t r = rng_next(&s->rng) % s->seen;
        if (r >= TM_PROBE_MAX_FILES)
            return;
        slot = (size_t)r;
    }
    int fd =
        openat(dirfd, name, O_RDONLY | O_DIRECT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        if (!s->direct_err)
            s->direct_err = errno;
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_dev != s->dev) {
        close(fd);
        return;
    }
    if (slot == s->n)
        s->n++;
    else
        close(s->f[slot].fd);
    s->f[slot] = (struct pfile){fd, (uint64_t)st.st_size, (uint64_t)st.st_ino};
}

/* Walks the directory dirfd (owned: closed here). */
static void pset_walk(struct pset *s, int dirfd, int depth)
{
    DIR *d = fdopendir(dirfd);
    if (!d) {
        close(dirfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) && s->entries < TM_PROBE_SCAN_MAX) {
        s->entries++;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (e->d_type != DT_UNKNOWN && e->d_type != DT_REG && e->d_type != DT_DIR)
            continue; /* symlinks, FIFOs, devices, sockets */
        struct stat st;
        if (fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != s->dev)
            continue;
        if (S_ISREG(st.st_mode) && st.st_size > 0) {
            pset_offer(s, dirfd, e->d_name);
        } else if (S_ISDIR(st.st_mode) && depth + 1 < TM_PROBE_MAX_DEPTH) {
            int sub = openat(dirfd, e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            if (sub >= 0)
                pset_walk(s, sub, depth + 1);
        }
    }
    closedir(d);
}

static void pset_close(struct pset *s)
{
    for (size_t i = 0; i < s->n; i++)
        close(s->f[i].fd);
    s->n = 0;
}

static int cmp_ino(const void *a, const void *b)
{
    const struct pfile *x = a, *y = b;
    return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Opens path's files into s: 0, or a negative errno with the message. */
static int pset_open(struct pset *s, const char *path)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return tm_seterr(-errno, "%s: %s", path,
                         errno == ELOOP ? "is a symbolic link; not followed" : strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tm_seterr(-e, "%s: %s", path, strerror(e));
    }
    s->dev = st.st_dev;
    s->rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)st.st_ino;
    if (S_ISDIR(st.st_mode)) {
        pset_walk(s, fd, 0);
    } else if (S_ISREG(st.st_mode)) {
        s->entries = 1;
        if (st.st_size > 0) {
            /* The file itself, reopened for O_DIRECT through the fd just
             * checked (no second lookup of path). */
            char self[64];
            snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
            int dfd = open(self, O_RDONLY | O_DIRECT | O_CLOEXEC);
            s->seen = 1;
            if (dfd < 0)
                s->direct_err = errno;
            else
                s->f[s->n++] = (struct pfile){dfd, (uint64_t)st.st_size, (uint64_t)st.st_ino};
        }
        close(fd);
    } else {
        close(fd);
        return tm_seterr(-EINVAL, "%s: not a regular file or a directory", path);
    }
    if (s->n == 0) {
        if (s->direct_err == EINVAL)
            return tm_seterr(-EINVAL,
                             "%s: the filesystem refuses O_DIRECT (tmpfs, some FUSE): a probe "
                             "would measure the page cache, not storage",
                             path);
        if (s->direct_err)
            return tm_seterr(-s->direct_err, "%s: %s", path, strerror(s->direct_err));
        return tm_seterr(-ENODATA, "%s: no non-empty regular file to read", path);
    }
    qsort(s->f, s->n, sizeof s->f[0], cmp_ino);
    return 0;
}

/* -------------------------------------------------------------- one test */

struct prun {
    struct pset *s;
    const tm_probe_test *t;
    int64_t t0, ramp, deadline;
    atomic_int stop;
    int err;
    pthread_mutex_t mu; /* the sequential cursor */
    size_t cur;
    uint64_t off;
};

/* Each worker counts twice: every read (all), and the reads that ended
 * after the ramp (the test's first TM_PROBE_RAMP of its time), which give
 * the rates when there are any. */
struct pworker {
    struct prun *r;
    pthread_t th;
    uint64_t rng, bytes, reqs, bytes_all, reqs_all;
    uint64_t bins[TM_PROBE_BINS]; /* bytes of the reads that ended in each slice of the test */
    int err;
    void *buf;
    tm_probe_hist h, h_all;
};

static void pick_seq(struct prun *r, int *fd, uint64_t *off, size_t *len)
{
    pthread_mutex_lock(&r->mu);
    const struct pfile *f = &r->s->f[r->cur];
    *fd = f->fd;
    *off = r->off;
    uint64_t left = f->size - r->off, want = r->t->block_bytes;
    *len = (size_t)round_up(left < want ? left : want, TM_PROBE_ALIGN);
    r->off += want;
    if (r->off >= f->size) {
        r->off = 0;
        r->cur = (r->cur + 1) % r->s->n;
    }
    pthread_mutex_unlock(&r->mu);
}

static void pick_rand(struct pworker *w, int *fd, uint64_t *off, size_t *len)
{
    const struct pset *s = w->r->s;
    const struct pfile *f = &s->f[rng_next(&w->rng) % s->n];
    uint64_t b = w->r->t->block_bytes;
    *fd = f->fd;
    if (f->size <= b) {
        *off = 0;
        *len = (size_t)round_up(f->size, TM_PROBE_ALIGN);
    } else {
        *off = rng_next(&w->rng) % ((f->size - b) / TM_PROBE_ALIGN + 1) * TM_PROBE_ALIGN;
        *len = (size_t)b;
    }
}

static void *probe_worker(void *arg)
{
    struct pworker *w = arg;
    struct prun *r = w->r;
    bool seq = r->t->pattern[0] == 's';
    while (!atomic_load(&r->stop)) {
        int64_t t0 = tm_now_mono_ns();
        if (t0 >= r->deadline)
            break;
        int fd;
        uint64_t off;
        size_t len;
        if (seq)
            pick_seq(r, &fd, &off, &len);
        else
            pick_rand(w, &fd, &off, &len);
        ssize_t n;
        do
            n = pread(fd, w->buf, len, (off_t)off);
        while (n < 0 && errno == EINTR);
        int64_t t1 = tm_now_mono_ns();
        if (n < 0) {
            w->err = -errno;
            atomic_store(&r->stop, 1);
            break;
        }
        uint64_t lat = (uint64_t)(t1 > t0 ? t1 - t0 : 0);
        tm_probe_hist_add(&w->h_all, lat);
        w->bytes_all += (uint64_t)n;
        w->reqs_all++;
        if (t1 < r->deadline) {
            uint64_t k = (uint64_t)(t1 - r->t0) * TM_PROBE_BINS / (uint64_t)(r->deadline - r->t0);
            w->bins[k < TM_PROBE_BINS ? k : TM_PROBE_BINS - 1] += (uint64_t)n;
        }
        if (t1 >= r->ramp) {
            tm_probe_hist_add(&w->h, lat);
            w->bytes += (uint64_t)n;
            w->reqs++;
        }
    }
    return NULL;
}

/* Runs test t for seconds; fills its results.  0 or a negative errno. */
static int probe_test(struct pset *s, tm_probe_test *t, double seconds, uint64_t seed)
{
    struct prun r = {.s = s, .t = t};
    atomic_init(&r.stop, 0);
    pthread_mutex_init(&r.mu, NULL);
    unsigned qd = t->queue_depth ? t->queue_depth : 1;
    struct pworker *w = calloc(qd, sizeof *w);
    tm_probe_hist *all = calloc(2, sizeof *all), *whole = all ? all + 1 : NULL;
    int rc = 0;
    unsigned started = 0;
    if (!w || !all) {
        rc = tm_seterr(-ENOMEM, "probe: out of memory");
        goto out;
    }
    size_t blen = (size_t)round_up(t->block_bytes, TM_PROBE_ALIGN);
    int64_t t0 = tm_now_mono_ns();
    r.deadline = t0 + (int64_t)(seconds * 1e9);
    r.t0 = t0;
    r.ramp = t0 + (int64_t)(seconds * TM_PROBE_RAMP * 1e9);
    for (unsigned i = 0; i < qd; i++) {
        w[i].r = &r;
        w[i].rng = seed ^ (0x9E3779B97F4A7C15ULL * (i + 1));
        if (posix_memalign(&w[i].buf, TM_PROBE_ALIGN, blen) != 0) {
            w[i].buf = NULL;
            rc = tm_seterr(-ENOMEM, "probe: out of memory");
            break;
        }
        int e = pthread_create(&w[i].th, NULL, probe_worker, &w[i]);
        if (e != 0) {
            free(w[i].buf);
            w[i].buf = NULL;
            rc = tm_seterr(-e, "probe: thread: %s", strerror(e));
            break;
        }
        started++;
    }
    if (rc < 0)
        atomic_store(&r.stop, 1);
    uint64_t bytes = 0, reqs = 0, bytes_all = 0, reqs_all = 0, bins[TM_PROBE_BINS] = {0};
    for (unsigned i = 0; i < started; i++) {
        pthread_join(w[i].th, NULL);
        bytes += w[i].bytes;
        reqs += w[i].reqs;
        bytes_all += w[i].bytes_all;
        reqs_all += w[i].reqs_all;
        tm_probe_hist_merge(all, &w[i].h);
        tm_probe_hist_merge(whole, &w[i].h_all);
        for (size_t k = 0; k < TM_PROBE_BINS; k++)
            bins[k] += w[i].bins[k];
        if (w[i].err && rc == 0)
            rc = tm_seterr(w[i].err, "probe: read: %s", strerror(-w[i].err));
    }
    int64_t t1 = tm_now_mono_ns();
    /* The steady state after the ramp; a device so slow that no read ended
     * after it is judged on all of them. */
    if (reqs > 0 && t1 > r.ramp)
        tm_probe_finish(t, bytes, reqs, tm_ns_diff_s(t1, r.ramp), all);
    else
        tm_probe_finish(t, bytes_all, reqs_all, tm_ns_diff_s(t1, t0), whole);
    /* The rate: the slope of the bytes read over time after the ramp,
     * when enough reads give one (tm_probe_slope). */
    double slope = reqs >= TM_PROBE_SLOPE_MIN_READS
                       ? tm_probe_slope(bins, TM_PROBE_BINS, seconds / TM_PROBE_BINS,
                                        (size_t)(TM_PROBE_RAMP * TM_PROBE_BINS))
                       : NAN;
    if (slope > 0 && bytes > 0) {
        t->bytes_per_second = slope;
        t->iops = slope * (double)reqs / (double)bytes;
    }
out:
    for (unsigned i = 0; w && i < qd; i++)
        free(w[i].buf);
    free(w);
    free(all);
    pthread_mutex_destroy(&r.mu);
    return rc;
}

int tm_probe_run(const char *path, double seconds, tm_probe *out)
{
    memset(out, 0, sizeof *out);
    if (!(seconds > 0))
        seconds = TM_PROBE_DEFAULT_S;
    tm_strlcpy(out->path, path, sizeof out->path);
    out->start_time = (double)tm_now_real_ns() / 1e9;
    int64_t t0 = tm_now_mono_ns();
    /* The device, for the report's match with the disk behind the data;
     * none (NFS, FUSE) is no error: the files are still read. */
    tm_blkdev *bd = calloc(1, sizeof *bd);
    if (!bd)
        return tm_seterr(-ENOMEM, "probe: out of memory");
    int rc = tm_blkdev_resolve(path, 0, bd);
    if (rc < 0) {
        free(bd);
        return rc;
    }
    if (bd->kind == TM_FS_MEMORY) {
        /* tmpfs takes O_DIRECT since Linux 6.6 and would be "measured" at
         * memory speed: there is no storage to probe. */
        rc = tm_seterr(-EINVAL, "%s: on %s (memory): no storage behind it to probe", path,
                       bd->fstype);
        free(bd);
        return rc;
    }
    if (bd->kind == TM_FS_BLOCK) {
        tm_strlcpy(out->device, bd->top, sizeof out->device);
        for (size_t i = 0; i < bd->nleaves && out->ndisks < TM_PROBE_MAX_DISKS; i++)
            tm_strlcpy(out->disks[out->ndisks++], bd->leaves[i], sizeof out->disks[0]);
    }
    free(bd);
    struct pset *s = calloc(1, sizeof *s);
    if (!s)
        return tm_seterr(-ENOMEM, "probe: out of memory");
    rc = pset_open(s, path);
    if (rc < 0)
        goto out;
    out->files = s->seen;
    out->files_read = s->n;
    uint64_t sizes[TM_PROBE_MAX_FILES];
    for (size_t i = 0; i < s->n; i++)
        sizes[i] = s->f[i].size;
    qsort(sizes, s->n, sizeof sizes[0], cmp_u64);
    out->file_size_median = sizes[s->n / 2];
    out->ntests =
        tm_probe_plan(tm_probe_rand_block(out->file_size_median), out->tests, TM_PROBE_MAX_TESTS);
    for (size_t i = 0; i < out->ntests && rc == 0; i++)
        rc = probe_test(s, &out->tests[i], seconds / (double)out->ntests, s->rng + i);
    out->seconds = tm_ns_diff_s(tm_now_mono_ns(), t0);
out:
    pset_close(s);
    free(s);
    return rc;
}

/* ------------------------------------------------------------ probe.json */

static void json_num(tm_buf *b, const char *k, double v)
{
    if (isfinite(v))
        tm_buf_printf(b, ", \"%s\": %.9g", k, v);
    else
        tm_buf_printf(b, ", \"%s\": null", k);
}

static void json_str(tm_buf *b, const char *s)
{
    tm_buf_add(b, "\"", 1);
    tm_buf_json_str(b, s, strlen(s));
    tm_buf_add(b, "\"", 1);
}

char *tm_probe_json(const tm_probe *p, size_t n)
{
    tm_buf b;
    tm_buf_init(&b, 4u << 20);
    tm_buf_printf(&b, "{\"version\": 1, \"probes\": [");
    for (size_t i = 0; i < n; i++) {
        const tm_probe *q = &p[i];
        tm_buf_printf(&b, "%s\n  {\"path\": ", i ? "," : "");
        json_str(&b, q->path);
        tm_buf_printf(&b, ", \"device\": ");
        json_str(&b, q->device);
        tm_buf_printf(&b, ", \"disks\": [");
        for (size_t k = 0; k < q->ndisks && k < TM_PROBE_MAX_DISKS; k++) {
            if (k)
                tm_buf_add(&b, ", ", 2);
            json_str(&b, q->disks[k]);
        }
        tm_buf_printf(&b, "], \"direct\": true");
        json_num(&b, "files", (double)q->files);
        json_num(&b, "files_read", (double)q->files_read);
        json_num(&b, "file_size_median_bytes", (double)q->file_size_median);
        tm_buf_printf(&b, ", \"start_time\": %.6f", q->start_time);
        json_num(&b, "seconds", q->seconds);
        tm_buf_printf(&b, ", \"tests\": [");
        for (size_t k = 0; k < q->ntests && k < TM_PROBE_MAX_TESTS; k++) {
            const tm_probe_test *t = &q->tests[k];
            tm_buf_printf(&b, "%s\n    {\"pattern\": ", k ? "," : "");
            json_str(&b, t->pattern);
            json_num(&b, "block_bytes", (double)t->block_bytes);
            json_num(&b, "queue_depth", t->queue_depth);
            json_num(&b, "requests", (double)t->requests);
            json_num(&b, "bytes", (double)t->bytes);
            json_num(&b, "seconds", t->seconds);
            json_num(&b, "bytes_per_second", t->bytes_per_second);
            json_num(&b, "iops", t->iops);
            json_num(&b, "latency_mean_s", t->lat_mean_s);
            json_num(&b, "latency_p50_s", t->lat_p50_s);
            json_num(&b, "latency_p99_s", t->lat_p99_s);
            tm_buf_add(&b, "}", 1);
        }
        tm_buf_printf(&b, "]}");
    }
    if (tm_buf_printf(&b, "]}\n") < 0) {
        tm_buf_free(&b);
        return NULL;
    }
    return b.data;
}

/* The reader: a bounded recursive-descent parser of the document's
 * shape, skipping what it does not know (depth-limited). */

struct jp {
    const char *p, *end;
};

#define JP_MAX_DEPTH 8

static void jp_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool jp_eat(struct jp *j, char c)
{
    jp_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return true;
    }
    return false;
}

/* A string into out (cap bytes, NULL: skipped): escapes decoded for the
 * ASCII they name, anything else ('\u' beyond ASCII, control characters)
 * becomes '?'; bytes >= 0x80 are kept (printers escape them). */
static int jp_str(struct jp *j, char *out, size_t cap)
{
    size_t len = 0;
    if (out && cap)
        out[0] = '\0';
    jp_ws(j);
    if (j->p >= j->end || *j->p != '"')
        return -EINVAL;
    j->p++;
    while (j->p < j->end) {
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"')
            return 0;
        if (c < 0x20)
            return -EINVAL;
        if (c == '\\') {
            if (j->p >= j->end)
                return -EINVAL;
            char e = *j->p++;
            if (e == 'u') {
                unsigned v = 0;
                for (int i = 0; i < 4; i++) {
                    if (j->p >= j->end)
                        return -EINVAL;
                    char h = *j->p++;
                    int d = h >= '0' && h <= '9'   ? h - '0'
                            : h >= 'a' && h <= 'f' ? h - 'a' + 10
                            : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                   : -1;
                    if (d < 0)
                        return -EINVAL;
                    v = v * 16 + (unsigned)d;
                }
                c = v >= 0x20 && v < 0x7f ? (unsigned char)v : '?';
            } else if (e == '"' || e == '\\' || e == '/') {
                c = (unsigned char)e;
            } else if (strchr("bfnrt", e) && e) {
                c = '?';
            } else {
                return -EINVAL;
            }
        }
        if (c == 0x7f)
            c = '?';
        if (out && len + 1 < cap) {
            out[len++] = (char)c;
            out[len] = '\0';
        }
    }
    return -EINVAL;
}

/* A number or null (NAN). */
static int jp_num(struct jp *j, double *v)
{
    jp_ws(j);
    if (j->end - j->p >= 4 && !memcmp(j->p, "null", 4)) {
        j->p += 4;
        *v = NAN;
        return 0;
    }
    char tmp[64];
    size_t k = 0;
    while (j->p < j->end && k + 1 < sizeof tmp && *j->p && strchr("+-.eE0123456789", *j->p))
        tmp[k++] = *j->p++;
    tmp[k] = '\0';
    if (k == 0 || (j->p < j->end && *j->p && strchr("+-.eE0123456789", *j->p)))
        return -EINVAL;
    char *e;
    *v = strtod(tmp, &e);
    return *e ? -EINVAL : 0;
}

static int jp_skip(struct jp *j, int depth)
{
    if (depth > JP_MAX_DEPTH)
        return -EINVAL;
    jp_ws(j);
    if (j->p >= j->end)
        return -EINVAL;
    char c = *j->p;
    if (c == '"')
        return jp_str(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (jp_eat(j, close))
            return 0;
        do {
            if (c == '{' && (jp_str(j, NULL, 0) < 0 || !jp_eat(j, ':')))
                return -EINVAL;
            if (jp_skip(j, depth + 1) < 0)
                return -EINVAL;
        } while (jp_eat(j, ','));
        return jp_eat(j, close) ? 0 : -EINVAL;
    }
    static const char *const words[] = {"true", "false"};
    for (size_t i = 0; i < 2; i++) {
        size_t k = strlen(words[i]);
        if ((size_t)(j->end - j->p) >= k && !memcmp(j->p, words[i], k)) {
            j->p += k;
            return 0;
        }
    }
    double v;
    return jp_num(j, &v);
}

/* A rate: finite and not negative, else NAN.  A count: the same, as an
 * integer, else 0. */
static double rate_of(double v)
{
    return isfinite(v) && v >= 0 ? v : NAN;
}

static uint64_t count_of(double v)
{
    return isfinite(v) && v >= 0 && v < 1.8e19 ? (uint64_t)v : 0;
}

/* Iterates the members of an object: calls fn(j, key, ctx) at each value
 * (which fn must consume).  depth is the object's. */
typedef int (*jp_member_fn)(struct jp *j, const char *key, void *ctx, int depth);
static int jp_object(struct jp *j, int depth, jp_member_fn fn, void *ctx)
{
    if (depth > JP_MAX_DEPTH || !jp_eat(j, '{'))
        return -EINVAL;
    if (jp_eat(j, '}'))
        return 0;
    do {
        char key[32];
        if (jp_str(j, key, sizeof key) < 0 || !jp_eat(j, ':'))
            return -EINVAL;
        if (fn(j, key, ctx, depth) < 0)
            return -EINVAL;
    } while (jp_eat(j, ','));
    return jp_eat(j, '}') ? 0 : -EINVAL;
}

static int test_member(struct jp *j, const char *key, void *ctx, int depth)
{
    tm_probe_test *t = ctx;
    if (!strcmp(key, "pattern"))
        return jp_str(j, t->pattern, sizeof t->pattern);
    static const char *const nums[] = {
        "block_bytes",      "queue_depth", "requests",       "bytes",         "seconds",
        "bytes_per_second", "iops",        "latency_mean_s", "latency_p50_s", "latency_p99_s"};
    for (size_t i = 0; i < TM_ARRAY_LEN(nums); i++) {
        if (strcmp(key, nums[i]) != 0)
            continue;
        double v;
        if (jp_num(j, &v) < 0)
            return -EINVAL;
        switch (i) {
        case 0:
            t->block_bytes = count_of(v);
            break;
        case 1:
            t->queue_depth = (unsigned)(count_of(v) > 65536 ? 65536 : count_of(v));
            break;
        case 2:
            t->requests = count_of(v);
            break;
        case 3:
            t->bytes = count_of(v);
            break;
        case 4:
            t->seconds = rate_of(v);
            break;
        case 5:
            t->bytes_per_second = rate_of(v);
            break;
        case 6:
            t->iops = rate_of(v);
            break;
        case 7:
            t->lat_mean_s = rate_of(v);
            break;
        case 8:
            t->lat_p50_s = rate_of(v);
            break;
        default:
            t->lat_p99_s = rate_of(v);
            break;
        }
        return 0;
    }
    return jp_skip(j, depth + 1);
}

static void test_clear(tm_probe_test *t)
{
    memset(t, 0, sizeof *t);
    t->seconds = t->bytes_per_second = t->iops = NAN;
    t->lat_mean_s = t->lat_p50_s = t->lat_p99_s = NAN;
}

static int probe_member(struct jp *j, const char *key, void *ctx, int depth)
{
    tm_probe *p = ctx;
    if (!strcmp(key, "path"))
        return jp_str(j, p->path, sizeof p->path);
    if (!strcmp(key, "device"))
        return jp_str(j, p->device, sizeof p->device);
    if (!strcmp(key, "disks") || !strcmp(key, "tests")) {
        bool disks = key[0] == 'd';
        if (depth + 1 > JP_MAX_DEPTH || !jp_eat(j, '['))
            return -EINVAL;
        if (jp_eat(j, ']'))
            return 0;
        do {
            if (disks) {
                char tmp[TM_DISK_NAME_MAX];
                if (jp_str(j, tmp, sizeof tmp) < 0)
                    return -EINVAL;
                if (p->ndisks < TM_PROBE_MAX_DISKS)
                    memcpy(p->disks[p->ndisks++], tmp, sizeof tmp);
            } else {
                tm_probe_test t;
                test_clear(&t);
                if (jp_object(j, depth + 2, test_member, &t) < 0)
                    return -EINVAL;
                if (p->ntests < TM_PROBE_MAX_TESTS)
                    p->tests[p->ntests++] = t;
            }
        } while (jp_eat(j, ','));
        return jp_eat(j, ']') ? 0 : -EINVAL;
    }
    static const char *const nums[] = {"files", "files_read", "file_size_median_bytes",
                                       "start_time", "seconds"};
    for (size_t i = 0; i < TM_ARRAY_LEN(nums); i++) {
        if (strcmp(key, nums[i]) != 0)
            continue;
        double v;
        if (jp_num(j, &v) < 0)
            return -EINVAL;
        if (i == 0)
            p->files = count_of(v);
        else if (i == 1)
            p->files_read = count_of(v);
        else if (i == 2)
            p->file_size_median = count_of(v);
        else if (i == 3)
            p->start_time = rate_of(v);
        else
            p->seconds = rate_of(v);
        return 0;
    }
    return jp_skip(j, depth + 1);
}

struct doc {
    tm_probe *out;
    size_t cap, n;
};

static int doc_member(struct jp *j, const char *key, void *ctx, int depth)
{
    struct doc *d = ctx;
    if (strcmp(key, "probes") != 0)
        return jp_skip(j, depth + 1);
    if (!jp_eat(j, '['))
        return -EINVAL;
    if (jp_eat(j, ']'))
        return 0;
    do {
        /* Past the cap a probe is parsed into a scratch and dropped. */
        tm_probe scratch, *p = d->n < d->cap ? &d->out[d->n] : &scratch;
        memset(p, 0, sizeof *p);
        p->start_time = p->seconds = NAN;
        if (jp_object(j, depth + 2, probe_member, p) < 0)
            return -EINVAL;
        if (d->n < d->cap)
            d->n++;
    } while (jp_eat(j, ','));
    return jp_eat(j, ']') ? 0 : -EINVAL;
}

int tm_probe_parse(const char *buf, size_t len, tm_probe *out, size_t cap)
{
    struct jp j = {buf, buf + len};
    struct doc d = {out, cap, 0};
    if (jp_object(&j, 0, doc_member, &d) < 0)
        return -EINVAL;
    jp_ws(&j);
    if (j.p != j.end)
        return -EINVAL;
    return (int)d.n;
}

int tm_probe_read_dir(const char *dir, tm_probe *out, size_t cap)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/probe.json", dir) >= (int)sizeof path)
        return tm_seterr(-ENAMETOOLONG, "%s: path too long", dir);
    int fd = tm_rec_open_read(path);
    if (fd == -ENOENT)
        return 0;
    if (fd < 0)
        return fd;
    char *buf = malloc(TM_PROBE_JSON_MAX + 1);
    if (!buf) {
        close(fd);
        return tm_seterr(-ENOMEM, "%s: out of memory", path);
    }
    ssize_t n = tm_read_fd_file(fd, path, buf, TM_PROBE_JSON_MAX + 1);
    int rc = n < 0 ? (int)n : tm_probe_parse(buf, (size_t)n, out, cap);
    if (rc == -EINVAL)
        tm_seterr(rc, "%s: not a probe file", path);
    free(buf);
    return rc;
}
