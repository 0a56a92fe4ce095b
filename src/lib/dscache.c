/*
 * dscache.c - the dataset's page-cache residency (dscache.h): a bounded
 * walk of the data paths, a sample of their files, the resident pages of
 * each sampled file, and the estimate for the whole dataset.
 *
 * Why it is shaped this way:
 *   - Nothing is read.  cachestat(2) (Linux >= 6.5) counts a file's pages
 *     in the page cache; before it, mincore(2) over a read-only shared
 *     mapping does (mapping a file reads nothing; mincore faults nothing
 *     in).  A reading changes neither the cache nor the files' atime.
 *   - Both calls refuse or lie for a caller who neither owns the file nor
 *     may write it (a side channel the kernel closes: on 6.18 cachestat
 *     gives EPERM and mincore reports every page resident, checked as the
 *     user nobody).  Such a file is "unknown", never counted as cached:
 *     mincore is only trusted for root (CAP_FOWNER), the owner or a
 *     caller with write access, as mm/mincore.c's can_do_mincore() has it.
 *   - trainmon runs as root beside other users' files: directories below
 *     a data path are opened O_NOFOLLOW|O_DIRECTORY, files through
 *     openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) (O_NOFOLLOW on kernels
 *     without it), always O_NONBLOCK and checked S_ISREG after fstat:
 *     a FIFO or a device planted in a dataset is never waited on.  The
 *     data path itself is followed as given (the user named it).  The walk
 *     stays on the data path's filesystem (`-d /` reads neither /proc nor
 *     /sys, where opening a file can have effects).
 *   - Bounded: entries looked at, time, depth and files measured are the
 *     TM_DSC_* limits of dscache.h; memory is the sample (at most
 *     TM_DSC_SAMPLE paths) and one mincore vector.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "collect_vmstat.h"
#include "dscache.h"
#include "util.h"

/* cachestat(2): the syscall number is 451 on every architecture (the
 * unified table); glibc has no wrapper and older headers no number. */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct dsc_cachestat_range {
    uint64_t off, len; /* len 0: to the end of the file */
};
struct dsc_cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

#define DSC_MAX_TOPS 64
#define DSC_RESERVOIR (TM_DSC_SAMPLE - TM_DSC_LARGEST)
#define DSC_VEC 16384 /* mincore vector: 64 MiB of 4 KiB pages per call */

/* A sampled file: its data path (index into the tops), its path below it
 * ("" for a data path that is itself a file) and its size at the walk. */
struct dsc_item {
    uint64_t size;
    size_t top;
    char *rel;
};

struct dsc_walk {
    struct dsc_item big[TM_DSC_LARGEST]; /* ascending by size */
    size_t nbig;
    struct dsc_item res[DSC_RESERVOIR];
    size_t nres;
    uint64_t rest_seen, rng, entries;
    int64_t deadline;
    tm_dsc_tally t;
    long page;
    unsigned char vec[DSC_VEC];
    char rel[PATH_MAX];
};

/* --- the estimate (pure) */

int tm_dsc_estimate(const tm_dsc_tally *t, double *cached, double *fraction)
{
    if (!t || !cached || !fraction)
        return tm_seterr(-EINVAL, "tm_dsc_estimate: NULL argument");
    *cached = *fraction = NAN;
    if (t->bytes == 0)
        return 0; /* no data (or only empty files): nothing to be cached */
    double ratio = t->rest_bytes  ? (double)t->rest_cached / (double)t->rest_bytes
                   : t->big_bytes ? (double)t->big_cached / (double)t->big_bytes
                                  : NAN;
    bool measured = t->big_bytes || t->rest_bytes || t->rest_files;
    if (!measured)
        return 0;
    if (isnan(ratio))
        ratio = 0; /* only empty files measured: they hold nothing */
    /* The largest files count as measured; every other walked byte at the
     * ratio of the sample. */
    double rest = t->bytes > t->big_walk_bytes ? (double)(t->bytes - t->big_walk_bytes) : 0.0;
    double c = (double)t->big_cached + ratio * rest;
    double f = c / (double)t->bytes;
    *fraction = f < 0 ? 0 : f > 1 ? 1 : f;
    *cached = *fraction * (double)t->bytes;
    return 0;
}

/* --- the walk */

static uint64_t dsc_rand(struct dsc_walk *w)
{
    /* xorshift64*: a fixed seed, so that the same tree gives the same
     * sample at the start and at the end of a run. */
    uint64_t x = w->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Takes x (its rel is the walk's, freed here if x is not kept) into the
 * largest files or the reservoir of the others. */
static void dsc_offer(struct dsc_walk *w, struct dsc_item x)
{
    if (w->nbig == TM_DSC_LARGEST && x.size > w->big[0].size) {
        struct dsc_item y = w->big[0];
        memmove(&w->big[0], &w->big[1], (w->nbig - 1) * sizeof w->big[0]);
        w->nbig--;
        struct dsc_item tmp = x;
        x = y;
        y = tmp;
        size_t i = w->nbig;
        while (i > 0 && w->big[i - 1].size > y.size) {
            w->big[i] = w->big[i - 1];
            i--;
        }
        w->big[i] = y;
        w->nbig++;
    } else if (w->nbig < TM_DSC_LARGEST) {
        size_t i = w->nbig;
        while (i > 0 && w->big[i - 1].size > x.size) {
            w->big[i] = w->big[i - 1];
            i--;
        }
        w->big[i] = x;
        w->nbig++;
        return;
    }
    /* Reservoir sampling (Vitter's algorithm R) over the files that are
     * not among the largest. */
    w->rest_seen++;
    if (w->nres < DSC_RESERVOIR) {
        w->res[w->nres++] = x;
        return;
    }
    uint64_t j = dsc_rand(w) % w->rest_seen;
    if (j < DSC_RESERVOIR) {
        free(w->res[j].rel);
        w->res[j] = x;
    } else {
        free(x.rel);
    }
}

static void dsc_file(struct dsc_walk *w, size_t top, const char *rel, uint64_t size)
{
    w->t.files++;
    w->t.bytes += size;
    char *copy = strdup(rel);
    if (!copy)
        return; /* counted, not sampled */
    dsc_offer(w, (struct dsc_item){.size = size, .top = top, .rel = copy});
}

static bool dsc_over(struct dsc_walk *w)
{
    if (w->entries >= TM_DSC_WALK_MAX ||
        ((w->entries & 255) == 0 && tm_now_mono_ns() > w->deadline)) {
        w->t.complete = false;
        return true;
    }
    return false;
}

/* Walks the directory open as topfd, depth first, one DIR per level,
 * without leaving its filesystem (dev): as `find -xdev`, so that `-d /`
 * stays out of /proc, /sys and other mounts. */
static void dsc_walk_dir(struct dsc_walk *w, size_t top, int topfd, dev_t dev)
{
    struct {
        DIR *d;
        size_t len; /* of w->rel for this directory */
    } st[TM_DSC_DEPTH + 1];
    int sp = 0;
    int fd = openat(topfd, ".", O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || !(st[0].d = fdopendir(fd))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    st[0].len = 0;
    while (sp >= 0) {
        if (dsc_over(w))
            break;
        errno = 0;
        struct dirent *e = readdir(st[sp].d);
        if (!e) {
            closedir(st[sp].d);
            sp--;
            continue;
        }
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        w->entries++;
        int dfd = dirfd(st[sp].d);
        unsigned char type = e->d_type;
        struct stat sb;
        bool have_stat = false;
        if (type == DT_UNKNOWN || type == DT_REG) {
            if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
                continue;
            have_stat = true;
            type = S_ISREG(sb.st_mode) ? DT_REG : S_ISDIR(sb.st_mode) ? DT_DIR : DT_LNK;
        }
        size_t len = st[sp].len, nl = strlen(e->d_name);
        if (len + 1 + nl + 1 > sizeof w->rel)
            continue; /* deeper than PATH_MAX: not openable below the top anyway */
        char *p = w->rel + len;
        if (len)
            *p++ = '/';
        memcpy(p, e->d_name, nl + 1);
        if (type == DT_REG && have_stat) {
            dsc_file(w, top, w->rel, (uint64_t)sb.st_size);
        } else if (type == DT_DIR) {
            if (sp + 1 > TM_DSC_DEPTH) {
                w->t.complete = false;
                continue;
            }
            int cfd = openat(dfd, e->d_name,
                             O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
            struct stat ds;
            DIR *cd = cfd >= 0 && fstat(cfd, &ds) == 0 && ds.st_dev == dev ? fdopendir(cfd) : NULL;
            if (!cd) {
                if (cfd >= 0)
                    close(cfd); /* unreadable, or another filesystem mounted here */
                continue;
            }
            sp++;
            st[sp].d = cd;
            st[sp].len = (size_t)(p - w->rel) + nl;
        }
        /* symlinks, FIFOs, sockets and devices: skipped */
    }
    for (; sp >= 0; sp--)
        closedir(st[sp].d);
}

/* --- measuring one file */

static bool dsc_cachestat_missing; /* ENOSYS once: the kernel will not grow it */
static bool dsc_mincore_forced;    /* tm_dsc_force_mincore */

void tm_dsc_force_mincore(bool on)
{
    dsc_mincore_forced = on;
}

static int dsc_open_below(int topfd, const char *rel)
{
    static bool no_openat2;
    int flags = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY;
    if (!no_openat2) {
        struct open_how how = {.flags = (uint64_t)flags,
                               .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV};
        long fd;
        do
            fd = syscall(SYS_openat2, topfd, rel, &how, sizeof how);
        while (fd < 0 && errno == EINTR);
        if (fd >= 0 || errno != ENOSYS)
            return fd >= 0 ? (int)fd : -errno;
        no_openat2 = true;
    }
    int fd;
    do
        fd = openat(topfd, rel, flags);
    while (fd < 0 && errno == EINTR);
    return fd >= 0 ? fd : -errno;
}

/* mincore reports every page resident for a file the caller may neither
 * write nor owns (can_do_mincore); root passes through CAP_FOWNER. */
static bool dsc_mincore_trusted(int topfd, const char *rel, const struct stat *sb)
{
    uid_t me = geteuid();
    if (me == 0 || sb->st_uid == me)
        return true;
    return faccessat(topfd, *rel ? rel : ".", W_OK, AT_EACCESS | AT_SYMLINK_NOFOLLOW) == 0;
}

static int dsc_mincore(struct dsc_walk *w, int fd, uint64_t size, uint64_t *cached)
{
    size_t pg = (size_t)w->page;
    uint64_t win = (uint64_t)DSC_VEC * pg, n = 0;
    for (uint64_t off = 0; off < size; off += win) {
        size_t len = (size_t)(size - off < win ? size - off : win);
        void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)off);
        if (p == MAP_FAILED)
            return -errno;
        int rc = mincore(p, len, w->vec);
        int e = errno;
        munmap(p, len);
        if (rc != 0)
            return -e;
        for (size_t i = 0, np = (len + pg - 1) / pg; i < np; i++)
            n += w->vec[i] & 1;
    }
    *cached = n * pg;
    return 0;
}

/* The resident bytes of one sampled file and its size now; a negative
 * errno when unknown. */
static int dsc_measure_one(struct dsc_walk *w, int topfd, const char *rel, uint64_t *size,
                           uint64_t *cached, enum tm_dsc_method *m)
{
    int fd = *rel ? dsc_open_below(topfd, rel) : fcntl(topfd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
        return *rel ? fd : -errno;
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) {
        rc = -errno;
        goto out;
    }
    if (!S_ISREG(sb.st_mode)) {
        rc = -EINVAL; /* replaced since the walk */
        goto out;
    }
    *size = (uint64_t)sb.st_size;
    if (!dsc_cachestat_missing && !dsc_mincore_forced) {
        struct dsc_cachestat_range r = {0, 0};
        struct dsc_cachestat cs = {0};
        if (syscall(__NR_cachestat, fd, &r, &cs, 0) == 0) {
            uint64_t b = cs.nr_cache * (uint64_t)w->page;
            *cached = b < *size ? b : *size;
            *m = TM_DSC_CACHESTAT;
            goto out;
        }
        if (errno != ENOSYS) {
            rc = -errno; /* EPERM: not the caller's to know */
            goto out;
        }
        dsc_cachestat_missing = true;
    }
    if (!dsc_mincore_trusted(topfd, rel, &sb)) {
        rc = -EPERM;
        goto out;
    }
    rc = dsc_mincore(w, fd, *size, cached);
    if (rc == 0) {
        uint64_t b = *cached;
        *cached = b < *size ? b : *size;
        *m = TM_DSC_MINCORE;
    }
out:
    close(fd);
    return rc;
}

static void dsc_measure_item(struct dsc_walk *w, const int *tops, const struct dsc_item *it,
                             bool big, enum tm_dsc_method *m)
{
    uint64_t size = 0, cached = 0;
    if (dsc_measure_one(w, tops[it->top], it->rel, &size, &cached, m) < 0) {
        w->t.unknown++;
        return;
    }
    if (big) {
        w->t.big_walk_bytes += it->size;
        w->t.big_bytes += size;
        w->t.big_cached += cached;
    } else {
        w->t.rest_files++;
        w->t.rest_bytes += size;
        w->t.rest_cached += cached;
    }
}

static double dsc_memtotal(void)
{
    char path[4096], buf[8192];
    if (tm_proc_path(path, sizeof path, "/meminfo") < 0)
        return NAN;
    ssize_t n = tm_read_file(path, buf, sizeof buf);
    if (n < 0)
        return NAN;
    tm_vmstat v = {0};
    tm_meminfo_parse(buf, (size_t)n, &v);
    return v.valid & TM_VM_HAVE_MEMTOTAL ? (double)v.mem_total_bytes : NAN;
}

int tm_dsc_measure(const char *const *paths, size_t n, tm_dsc_reading *out)
{
    if (!paths || !out)
        return tm_seterr(-EINVAL, "tm_dsc_measure: NULL argument");
    *out = (tm_dsc_reading){.files = NAN,
                            .bytes = NAN,
                            .cached_bytes = NAN,
                            .cached_fraction = NAN,
                            .files_measured = NAN,
                            .memory_bytes = dsc_memtotal()};
    if (n > DSC_MAX_TOPS)
        n = DSC_MAX_TOPS;
    struct dsc_walk *w = calloc(1, sizeof *w);
    if (!w)
        return tm_seterr(-ENOMEM, "dataset cache: out of memory");
    w->rng = 0x9E3779B97F4A7C15ULL;
    w->page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    w->deadline = tm_now_mono_ns() + TM_DSC_WALK_NS;
    w->t.complete = true;
    int tops[DSC_MAX_TOPS];
    dev_t top_dev[DSC_MAX_TOPS];
    ino_t top_ino[DSC_MAX_TOPS];
    size_t opened = 0;
    int err = 0;
    for (size_t i = 0; i < n; i++) {
        tops[i] = -1;
        if (!paths[i])
            continue;
        int fd;
        do
            fd = open(paths[i], O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        while (fd < 0 && errno == EINTR);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) != 0) {
            err = err ? err : -errno;
            if (fd >= 0)
                close(fd);
            tm_seterr(err, "%s: %s", paths[i], strerror(-err));
            continue;
        }
        bool again = false; /* the same path given twice (-d /data -d /data/) */
        for (size_t k = 0; k < i; k++)
            again |= tops[k] >= 0 && top_dev[k] == sb.st_dev && top_ino[k] == sb.st_ino;
        if (again || (!S_ISDIR(sb.st_mode) && !S_ISREG(sb.st_mode))) {
            close(fd); /* a device or a FIFO named as data is not a dataset */
            continue;
        }
        top_dev[i] = sb.st_dev;
        top_ino[i] = sb.st_ino;
        tops[i] = fd;
        opened++;
        if (S_ISREG(sb.st_mode))
            dsc_file(w, i, "", (uint64_t)sb.st_size);
        else
            dsc_walk_dir(w, i, fd, sb.st_dev);
    }
    int rc = 0;
    if (!opened) {
        rc = err ? err : tm_seterr(-ENOENT, "dataset cache: no data path to measure");
        goto out;
    }
    enum tm_dsc_method m = TM_DSC_NONE;
    for (size_t i = 0; i < w->nbig; i++)
        dsc_measure_item(w, tops, &w->big[i], true, &m);
    for (size_t i = 0; i < w->nres; i++)
        dsc_measure_item(w, tops, &w->res[i], false, &m);
    out->files = (double)w->t.files;
    out->bytes = (double)w->t.bytes;
    out->complete = w->t.complete;
    out->method = m;
    out->files_measured = (double)(w->nbig + w->nres - w->t.unknown);
    tm_dsc_estimate(&w->t, &out->cached_bytes, &out->cached_fraction);
out:
    for (size_t i = 0; i < n; i++)
        if (tops[i] >= 0)
            close(tops[i]);
    for (size_t i = 0; i < w->nbig; i++)
        free(w->big[i].rel);
    for (size_t i = 0; i < w->nres; i++)
        free(w->res[i].rel);
    free(w);
    return rc;
}
