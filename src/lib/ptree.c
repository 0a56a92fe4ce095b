/*
 * ptree.c - a process tree: CPU, I/O, memory and states of a root process
 * and its live descendants (proc(5)).
 *
 * Enumeration.  The tree is walked breadth-first from the root through
 * <proc>/PID/task/TID/children, the first-level children of each thread: a
 * child belongs to the thread that forked it, so every thread of a
 * multi-threaded process (a Python trainer) is read.  A process with one
 * thread (field 20 of stat) has its main thread's children file read through
 * a kept descriptor; otherwise the task directory is listed (kept open,
 * rewound) and each thread's children file is opened and read.  The cost
 * grows with the tree, not with /proc.  On kernels built without
 * CONFIG_PROC_CHILDREN the children files do not exist: then each sample
 * scans <proc>/[0-9]*\/stat once for the parent pids (the only path whose
 * cost grows with the whole machine).
 *
 * Descriptors.  stat, io, smaps_rollup and the children file of each
 * process are opened once and re-read with pread() on later samples, which
 * is several times cheaper than open+read+close.  A kept descriptor of a
 * process that has exited reads ESRCH, so a recycled pid is never read
 * through its predecessor's descriptor; the starttime (field 22) is checked
 * on every read as well, and a pid whose starttime changed is a new process.
 * Kept descriptors are budgeted to half of RLIMIT_NOFILE; beyond the budget
 * files are opened, read and closed per sample.  smaps_rollup is the costly
 * one: the kernel walks every mapping under the target's mmap lock on each
 * read (hundreds of microseconds for a large Python process).
 *
 * Rates.  Counters are matched per process by (pid, starttime).  The delta
 * of an interval is the sum, over processes present in both samples, of
 * their deltas clamped at 0, plus the whole counters of processes that
 * started within the interval (starttime after the previous sample).  A
 * process first seen that started before the previous sample (a race with a
 * fork, or one freed from the cap) contributes nothing for that interval.
 *
 * Reap fold.  When a child is reaped, the kernel adds its I/O counters to
 * the reaper's (wait_task_zombie adds them to the parent's signal ioac,
 * which /proc/PID/io includes), so the parent's counters jump by the
 * child's lifetime total.  Of that jump, only the part since the child was
 * last seen is new: for each vanished process the counters it had when last
 * seen are subtracted from the delta of its nearest ancestor still in the
 * tree (clamped at 0); so is the predecessor of a pid found reused.  A
 * process no longer found that still runs (same starttime) has left the
 * tree and is not folded.  A child re-parented out of the tree and reaped
 * elsewhere makes this undercount, never double count.  CPU times
 * fold into cutime/cstime, which are not read, so the CPU a child spent
 * between its last sample and its exit is lost.
 *
 * Bounds.  At most TM_PTREE_MAX_PROCS processes are detailed; more are
 * counted in nproc_untracked (a lower bound: their children are not
 * walked).  Memory grows with the tree up to that cap and no allocation
 * happens per sample in steady state.
 */
#include "ptree.h"
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- parsers */

static const char *pt_skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n'))
        p++;
    return p;
}

static const char *pt_token_end(const char *p, const char *end)
{
    while (p < end && *p != ' ' && *p != '\t' && *p != '\n')
        p++;
    return p;
}

/* A whole token as an unsigned number: "12x" is not a number. */
static int pt_parse_token_u64(const char *p, const char *tend, uint64_t *out)
{
    if (tm_parse_u64(&p, tend, out))
        return -EINVAL;
    return p == tend ? 0 : -EINVAL;
}

/* USER_HZ; sysconf() answers it from the auxiliary vector, no syscall. */
static long pt_clk_tck(void)
{
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? hz : 100;
}

static double pt_ticks_to_s(uint64_t ticks)
{
    return (double)ticks / (double)pt_clk_tck();
}

static uint64_t pt_page_size(void)
{
    static uint64_t page;
    if (!page) {
        long v = sysconf(_SC_PAGESIZE);
        page = v > 0 ? (uint64_t)v : 4096;
    }
    return page;
}

int tm_parse_proc_stat(const char *buf, size_t len, tm_procinfo *out, uint64_t *num_threads)
{
    if (!buf || !out)
        return -EINVAL;
    const char *end = buf + len;
    const char *lp = memchr(buf, '(', len);
    const char *rp = memrchr(buf, ')', len);
    if (!lp || !rp || rp < lp)
        return -EINVAL;
    const char *p = buf;
    uint64_t pid;
    if (tm_parse_u64(&p, lp, &pid) || pid == 0 || pid > INT_MAX)
        return -EINVAL;

    tm_procinfo info = *out;
    info.pid = (pid_t)pid;
    size_t clen = (size_t)(rp - lp - 1);
    if (clen >= sizeof info.comm)
        clen = sizeof info.comm - 1;
    memcpy(info.comm, lp + 1, clen);
    info.comm[clen] = '\0';

    /* Field 3 is the state, a single character; fields 4.. are numbers,
     * some of them signed (tpgid is -1 without a terminal), so only the
     * fields needed are parsed. */
    p = pt_skip_blanks(rp + 1, end);
    const char *tend = pt_token_end(p, end);
    if (tend - p != 1)
        return -EINVAL;
    info.state = *p;
    uint64_t ppid = 0, flags = 0, utime = 0, stime = 0, nthreads = 0, start = 0, rss = 0;
    for (int field = 4; field <= 24; field++) {
        p = pt_skip_blanks(tend, end);
        tend = pt_token_end(p, end);
        if (p == tend)
            return -EINVAL;
        uint64_t *dst = field == 4    ? &ppid
                        : field == 9  ? &flags
                        : field == 14 ? &utime
                        : field == 15 ? &stime
                        : field == 20 ? &nthreads
                        : field == 22 ? &start
                        : field == 24 ? &rss
                                      : NULL;
        if (dst && pt_parse_token_u64(p, tend, dst))
            return -EINVAL;
    }
    if (ppid > INT_MAX)
        return -EINVAL;
    info.ppid = (pid_t)ppid;
    info.utime_s = pt_ticks_to_s(utime);
    info.stime_s = pt_ticks_to_s(stime);
    info.starttime = start;
    info.valid |= TM_PROC_HAVE_STAT;
    /* Field 24 is the resident set in pages, the same count as VmRSS in
     * status (get_mm_rss), so status need not be read at all.  Kernel
     * threads (PF_KTHREAD in the flags, field 9) have no memory of their
     * own: RSS unavailable, as status has no VmRSS line for them. */
    if (!(flags & 0x00200000u)) {
        info.rss_bytes = rss * pt_page_size();
        info.valid |= TM_PROC_HAVE_RSS;
    }
    *out = info;
    if (num_threads)
        *num_threads = nthreads;
    return 0;
}

/* Whether the text between line and colon is key. */
static int pt_match_key(const char *line, const char *colon, const char *key)
{
    size_t klen = strlen(key);
    return (size_t)(colon - line) == klen && memcmp(line, key, klen) == 0;
}

int tm_parse_proc_io(const char *buf, size_t len, tm_procinfo *out)
{
    if (!buf || !out)
        return -EINVAL;
    static const char *const keys[4] = {"rchar", "wchar", "read_bytes", "write_bytes"};
    uint64_t vals[4];
    unsigned found = 0;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon) {
            for (unsigned k = 0; k < 4; k++) {
                if (!pt_match_key(p, colon, keys[k]))
                    continue;
                const char *v = colon + 1;
                uint64_t x;
                if (tm_parse_u64(&v, eol, &x))
                    return -EINVAL;
                vals[k] = x;
                found |= 1u << k;
            }
        }
        p = eol + 1;
    }
    if (found != 0xf)
        return -EINVAL;
    out->rchar = vals[0];
    out->wchar = vals[1];
    out->read_bytes = vals[2];
    out->write_bytes = vals[3];
    out->valid |= TM_PROC_HAVE_IO;
    return 0;
}

int tm_parse_kb_field(const char *buf, size_t len, const char *key, uint64_t *bytes)
{
    if (!buf || !key || !bytes)
        return -EINVAL;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *colon = memchr(p, ':', (size_t)(eol - p));
        if (colon && pt_match_key(p, colon, key)) {
            const char *v = colon + 1;
            uint64_t kb;
            if (tm_parse_u64(&v, eol, &kb) || kb > UINT64_MAX / 1024)
                return -EINVAL;
            *bytes = kb * 1024;
            return 0;
        }
        p = eol + 1;
    }
    return -EINVAL;
}

int tm_parse_smaps_pss(const char *buf, size_t len, uint64_t *pss_bytes)
{
    return tm_parse_kb_field(buf, len, "Pss", pss_bytes);
}

size_t tm_parse_pid_list(const char *buf, size_t len, bool complete, pid_t *out, size_t cap)
{
    size_t n = 0;
    const char *p = buf, *end = buf + len;
    for (;;) {
        p = pt_skip_blanks(p, end);
        if (p >= end)
            break;
        const char *tend = pt_token_end(p, end);
        if (tend == end && !complete)
            break;
        uint64_t v;
        if (pt_parse_token_u64(p, tend, &v) == 0 && v > 0 && v <= INT_MAX) {
            if (n < cap)
                out[n] = (pid_t)v;
            n++;
        }
        p = tend;
    }
    return n;
}

/* ------------------------------------------------------------- collector */

enum { PT_STAT, PT_IO, PT_SMAPS, PT_CHILDREN, PT_TASK, PT_NFD };

#define PT_BUF_CAP (64 * 1024)
#define PT_DENTS_CAP (16 * 1024)
#define PT_HASH_CAP (2 * TM_PTREE_MAX_PROCS) /* power of two, load <= 1/2 */
#define PT_SCAN_MAX (1u << 20)

struct pt_ent {
    tm_procinfo info; /* this sample */
    tm_procinfo prev; /* the previous sample, when had_prev */
    int fd[PT_NFD];
    uint64_t nthreads;
    bool seen;      /* found in this sample */
    bool had_prev;  /* seen in the previous sample as the same process */
    bool reused;    /* its pid now belongs to another process: prev is the old one */
    bool io_denied; /* /proc/PID/io refused: remembered for this process */
    /* Counters of vanished descendants (as last seen) that the kernel
     * folded into this process when it reaped them. */
    uint64_t fold_rchar, fold_wchar, fold_read, fold_write;
    /* PSS as last read from smaps_rollup, and when (0: never). */
    uint64_t pss_bytes;
    int64_t pss_at_ns;
};

/* smaps_rollup makes the kernel walk every mapping of the process under its
 * mmap lock: about half the cost of a whole sample for small processes and
 * far more for a large Python process.  PSS moves slowly (it is read for
 * the growth of DataLoader workers over an epoch), so it is re-read at most
 * this often per process; RSS (from stat) is read every sample. */
#define PT_PSS_PERIOD_NS (5LL * 1000000000LL)

struct pt_scan {
    pid_t pid, ppid;
};

struct tm_ptree {
    pid_t root;
    uint64_t root_start;
    bool root_dead;
    bool scan_mode; /* no children files: scan <proc> for parent pids */

    struct pt_ent *ents;
    size_t nents, ents_alloc;
    int32_t hash[PT_HASH_CAP]; /* pid -> index in ents, -1 empty */
    pid_t queue[TM_PTREE_MAX_PROCS];
    size_t order[TM_PTREE_MAX_PROCS]; /* ents indices in walk order */
    size_t norder;
    tm_procinfo *out;

    struct pt_scan *scan;
    size_t nscan, scan_alloc;
    int fd_proc; /* <proc>, for the scan */

    size_t nfds, fd_budget;
    bool have_prev;
    int64_t prev_t_ns;
    uint64_t prev_boot_ticks;
    char *buf;
    char *dents;
};

static size_t pt_hash_slot(pid_t pid)
{
    return ((uint32_t)pid * 2654435761u) & (PT_HASH_CAP - 1);
}

static int pt_lookup(const tm_ptree *t, pid_t pid)
{
    for (size_t s = pt_hash_slot(pid);; s = (s + 1) & (PT_HASH_CAP - 1)) {
        int32_t i = t->hash[s];
        if (i < 0)
            return -1;
        if (t->ents[i].info.pid == pid)
            return i;
    }
}

static void pt_hash_insert(tm_ptree *t, size_t idx)
{
    size_t s = pt_hash_slot(t->ents[idx].info.pid);
    while (t->hash[s] >= 0)
        s = (s + 1) & (PT_HASH_CAP - 1);
    t->hash[s] = (int32_t)idx;
}

static void pt_hash_rebuild(tm_ptree *t)
{
    for (size_t s = 0; s < PT_HASH_CAP; s++)
        t->hash[s] = -1;
    for (size_t i = 0; i < t->nents; i++)
        pt_hash_insert(t, i);
}

static void pt_close_fd(tm_ptree *t, struct pt_ent *e, int which)
{
    if (e->fd[which] >= 0) {
        close(e->fd[which]);
        e->fd[which] = -1;
        t->nfds--;
    }
}

static void pt_close_all(tm_ptree *t, struct pt_ent *e)
{
    for (int k = 0; k < PT_NFD; k++)
        pt_close_fd(t, e, k);
}

/* Keeps fd in e->fd[which] while the budget allows, else closes it. */
static void pt_keep_fd(tm_ptree *t, struct pt_ent *e, int which, int fd)
{
    if (t->nfds < t->fd_budget) {
        e->fd[which] = fd;
        t->nfds++;
    } else {
        close(fd);
    }
}

static int pt_open_rel(pid_t pid, const char *name, int flags)
{
    char path[PATH_MAX];
    int rc = name[0] == '\0'
                 ? tm_proc_path(path, sizeof path, "%d/task/%d/children", (int)pid, (int)pid)
                 : tm_proc_path(path, sizeof path, "%d/%s", (int)pid, name);
    if (rc)
        return rc;
    return tm_open(path, O_RDONLY | flags, 0);
}

/* Reads <proc>/PID/<name> into t->buf through the kept descriptor (opening
 * it first when there is none).  Returns the length or a negative errno. */
static ssize_t pt_read(tm_ptree *t, struct pt_ent *e, int which, const char *name)
{
    int fd = e->fd[which];
    bool kept = fd >= 0;
    if (!kept) {
        fd = pt_open_rel(e->info.pid, name, 0);
        if (fd < 0)
            return fd;
    }
    ssize_t n = tm_pread_file(fd, t->buf, PT_BUF_CAP);
    if (!kept) {
        if (n >= 0)
            pt_keep_fd(t, e, which, fd);
        else
            close(fd);
    }
    return n;
}

static struct pt_ent *pt_new_ent(tm_ptree *t, pid_t pid)
{
    if (t->nents == t->ents_alloc) {
        size_t n = t->ents_alloc ? t->ents_alloc * 2 : 64;
        if (n > TM_PTREE_MAX_PROCS)
            n = TM_PTREE_MAX_PROCS;
        struct pt_ent *e = realloc(t->ents, n * sizeof *e);
        if (!e)
            return NULL;
        t->ents = e;
        tm_procinfo *o = realloc(t->out, n * sizeof *o);
        if (!o)
            return NULL;
        t->out = o;
        t->ents_alloc = n;
    }
    struct pt_ent *e = &t->ents[t->nents];
    memset(e, 0, sizeof *e);
    e->info.pid = pid;
    for (int k = 0; k < PT_NFD; k++)
        e->fd[k] = -1;
    pt_hash_insert(t, t->nents);
    t->nents++;
    return e;
}

/* Reads stat into e->info.  A kept descriptor of an exited process reads
 * ESRCH: then the path is tried once more, which finds a successor with the
 * same pid if there is one (told apart by its starttime by the caller). */
static int pt_read_stat(tm_ptree *t, struct pt_ent *e)
{
    ssize_t n = pt_read(t, e, PT_STAT, "stat");
    if (n < 0 && e->fd[PT_STAT] >= 0) {
        pt_close_fd(t, e, PT_STAT);
        n = pt_read(t, e, PT_STAT, "stat");
    }
    if (n < 0)
        return (int)n;
    tm_procinfo info;
    memset(&info, 0, sizeof info);
    if (tm_parse_proc_stat(t->buf, (size_t)n, &info, &e->nthreads))
        return -EINVAL;
    e->info = info;
    return 0;
}

/* Forgets what was known of the process that had this pid before. */
static void pt_reset_ent(tm_ptree *t, struct pt_ent *e)
{
    for (int k = 0; k < PT_NFD; k++)
        if (k != PT_STAT)
            pt_close_fd(t, e, k);
    e->reused = e->had_prev;
    e->had_prev = false;
    e->io_denied = false;
    e->fold_rchar = e->fold_wchar = e->fold_read = e->fold_write = 0;
    e->pss_at_ns = 0;
}

static void pt_read_details(tm_ptree *t, struct pt_ent *e, int64_t now, size_t *io_unreadable)
{
    ssize_t n;
    if (e->io_denied) {
        (*io_unreadable)++;
    } else {
        n = pt_read(t, e, PT_IO, "io");
        if (n == -EACCES || n == -EPERM) {
            /* Same uid or CAP_SYS_PTRACE is needed; a refusal is remembered
             * for the life of this process rather than retried. */
            e->io_denied = true;
            pt_close_fd(t, e, PT_IO);
            (*io_unreadable)++;
        } else if (n >= 0) {
            tm_parse_proc_io(t->buf, (size_t)n, &e->info);
        }
    }
    if (e->pss_at_ns == 0 || now - e->pss_at_ns >= PT_PSS_PERIOD_NS) {
        n = pt_read(t, e, PT_SMAPS, "smaps_rollup");
        e->pss_at_ns = now;
        if (n < 0 || tm_parse_smaps_pss(t->buf, (size_t)n, &e->pss_bytes) != 0)
            e->pss_at_ns = -1; /* unreadable: PSS stays unavailable */
    }
    if (e->pss_at_ns > 0) {
        e->info.pss_bytes = e->pss_bytes;
        e->info.valid |= TM_PROC_HAVE_PSS;
    }
}

/* Appends pids from a children file to the walk queue; those beyond the
 * cap are only counted. */
static void pt_push_list(tm_ptree *t, size_t *qlen, size_t *untracked, size_t len, bool complete)
{
    size_t room = TM_PTREE_MAX_PROCS - *qlen;
    size_t n = tm_parse_pid_list(t->buf, len, complete, t->queue + *qlen, room);
    if (n > room) {
        *untracked += n - room;
        n = room;
    }
    *qlen += n;
}

static void pt_push(tm_ptree *t, size_t *qlen, size_t *untracked, pid_t pid)
{
    if (*qlen < TM_PTREE_MAX_PROCS)
        t->queue[(*qlen)++] = pid;
    else
        (*untracked)++;
}

static void pt_read_children_fd(tm_ptree *t, int fd, size_t *qlen, size_t *untracked)
{
    ssize_t n = tm_pread_full(fd, t->buf, PT_BUF_CAP, 0);
    if (n > 0)
        pt_push_list(t, qlen, untracked, (size_t)n, (size_t)n < PT_BUF_CAP);
}

static bool pt_is_number(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

/* Children of every thread of e: one kept file for a single-threaded
 * process, else a listing of the kept task directory. */
static void pt_children(tm_ptree *t, struct pt_ent *e, size_t *qlen, size_t *untracked)
{
    if (e->nthreads <= 1) {
        if (e->fd[PT_CHILDREN] < 0) {
            int fd = pt_open_rel(e->info.pid, "", 0);
            if (fd < 0)
                return;
            pt_read_children_fd(t, fd, qlen, untracked);
            pt_keep_fd(t, e, PT_CHILDREN, fd);
            return;
        }
        pt_read_children_fd(t, e->fd[PT_CHILDREN], qlen, untracked);
        return;
    }
    int dfd = e->fd[PT_TASK];
    if (dfd < 0) {
        dfd = pt_open_rel(e->info.pid, "task", O_DIRECTORY);
        if (dfd < 0)
            return;
    } else if (lseek(dfd, 0, SEEK_SET) < 0) {
        return;
    }
    for (;;) {
        ssize_t n = getdents64(dfd, t->dents, PT_DENTS_CAP);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(void *)(t->dents + off);
            off += d->d_reclen;
            if (!pt_is_number(d->d_name))
                continue;
            char rel[sizeof d->d_name + 16];
            snprintf(rel, sizeof rel, "%s/children", d->d_name);
            int fd = openat(dfd, rel, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            pt_read_children_fd(t, fd, qlen, untracked);
            close(fd);
        }
    }
    if (e->fd[PT_TASK] < 0)
        pt_keep_fd(t, e, PT_TASK, dfd);
}

static int pt_scan_cmp(const void *a, const void *b)
{
    const struct pt_scan *x = a, *y = b;
    return x->ppid < y->ppid ? -1 : x->ppid > y->ppid;
}

/* Fallback without children files: (pid, ppid) of every process, sorted by
 * ppid. */
static void pt_scan_all(tm_ptree *t)
{
    t->nscan = 0;
    if (t->fd_proc < 0) {
        t->fd_proc = tm_open(tm_proc_root(), O_RDONLY | O_DIRECTORY, 0);
        if (t->fd_proc < 0)
            return;
    } else if (lseek(t->fd_proc, 0, SEEK_SET) < 0) {
        return;
    }
    for (;;) {
        ssize_t n = getdents64(t->fd_proc, t->dents, PT_DENTS_CAP);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            struct dirent64 *d = (struct dirent64 *)(void *)(t->dents + off);
            off += d->d_reclen;
            if (!pt_is_number(d->d_name))
                continue;
            char rel[sizeof d->d_name + 16];
            snprintf(rel, sizeof rel, "%s/stat", d->d_name);
            int fd = openat(t->fd_proc, rel, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                continue;
            ssize_t len = tm_pread_file(fd, t->buf, PT_BUF_CAP);
            close(fd);
            tm_procinfo info;
            memset(&info, 0, sizeof info);
            if (len < 0 || tm_parse_proc_stat(t->buf, (size_t)len, &info, NULL))
                continue;
            if (t->nscan == t->scan_alloc) {
                if (t->scan_alloc >= PT_SCAN_MAX)
                    goto out;
                size_t a = t->scan_alloc ? t->scan_alloc * 2 : 1024;
                struct pt_scan *s = realloc(t->scan, a * sizeof *s);
                if (!s)
                    goto out;
                t->scan = s;
                t->scan_alloc = a;
            }
            t->scan[t->nscan++] = (struct pt_scan){info.pid, info.ppid};
        }
    }
out:
    qsort(t->scan, t->nscan, sizeof *t->scan, pt_scan_cmp);
}

static void pt_scan_children(tm_ptree *t, pid_t pid, size_t *qlen, size_t *untracked)
{
    size_t lo = 0, hi = t->nscan;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->scan[mid].ppid < pid)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (; lo < t->nscan && t->scan[lo].ppid == pid; lo++)
        pt_push(t, qlen, untracked, t->scan[lo].pid);
}

static uint64_t pt_boot_ticks(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_BOOTTIME, &ts))
        return 0;
    /* In the unit of starttime, truncated as the kernel's nsec_to_clock_t()
     * does; starttime is taken from the same boot-time clock at fork. */
    uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return ns / (1000000000u / (uint64_t)pt_clk_tck());
}

/* Whether pid is still the process that started at start. */
static bool pt_still_alive(tm_ptree *t, pid_t pid, uint64_t start)
{
    int fd = pt_open_rel(pid, "stat", 0);
    if (fd < 0)
        return false;
    ssize_t n = tm_pread_file(fd, t->buf, PT_BUF_CAP);
    close(fd);
    tm_procinfo info;
    memset(&info, 0, sizeof info);
    return n >= 0 && tm_parse_proc_stat(t->buf, (size_t)n, &info, NULL) == 0 &&
           info.starttime == start;
}

/* Adds the last counters of a vanished process to its nearest ancestor
 * still in the tree (see the top of the file). */
static void pt_fold(tm_ptree *t, const struct pt_ent *gone)
{
    if (!(gone->prev.valid & TM_PROC_HAVE_IO))
        return;
    pid_t p = gone->prev.ppid;
    for (size_t hops = 0; hops < t->nents; hops++) {
        int i = pt_lookup(t, p);
        if (i < 0)
            return;
        struct pt_ent *a = &t->ents[i];
        if (a->seen) {
            a->fold_rchar += gone->prev.rchar;
            a->fold_wchar += gone->prev.wchar;
            a->fold_read += gone->prev.read_bytes;
            a->fold_write += gone->prev.write_bytes;
            return;
        }
        p = a->prev.ppid;
    }
}

/* cur - prev - fold, clamped at 0. */
static uint64_t pt_delta(uint64_t cur, uint64_t prev, uint64_t fold)
{
    if (cur < prev)
        return 0;
    uint64_t d = cur - prev;
    return d > fold ? d - fold : 0;
}

int tm_ptree_open(tm_ptree **out, pid_t root)
{
    if (!out || root <= 0)
        return tm_seterr(-EINVAL, "pid %d: not a valid process id", (int)root);
    *out = NULL;
    int rc = 0;
    tm_ptree *t = calloc(1, sizeof *t);
    if (!t)
        return tm_seterr(-ENOMEM, "process tree: %s", strerror(ENOMEM));
    t->root = root;
    t->fd_proc = -1;
    for (size_t s = 0; s < PT_HASH_CAP; s++)
        t->hash[s] = -1;
    t->buf = malloc(PT_BUF_CAP);
    t->dents = malloc(PT_DENTS_CAP);
    if (!t->buf || !t->dents) {
        rc = tm_seterr(-ENOMEM, "process tree: %s", strerror(ENOMEM));
        goto out;
    }
    struct rlimit rl;
    t->fd_budget = 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        t->fd_budget =
            rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 ? 32768 : rl.rlim_cur / 2;

    char path[PATH_MAX];
    rc = tm_proc_path(path, sizeof path, "%d/stat", (int)root);
    if (rc)
        goto out;
    ssize_t n = tm_read_file(path, t->buf, PT_BUF_CAP);
    tm_procinfo info;
    memset(&info, 0, sizeof info);
    if (n == -ENOENT || n == -ESRCH) {
        rc = tm_seterr(-ESRCH, "pid %d: %s", (int)root, strerror(ESRCH));
        goto out;
    }
    if (n < 0) {
        rc = (int)n; /* message set by tm_read_file */
        goto out;
    }
    if (tm_parse_proc_stat(t->buf, (size_t)n, &info, NULL)) {
        rc = tm_seterr(-EINVAL, "%s: unexpected format", path);
        goto out;
    }
    t->root_start = info.starttime;

    int fd = pt_open_rel(root, "", 0);
    if (fd >= 0)
        close(fd);
    t->scan_mode = fd == -ENOENT;
out:
    if (rc) {
        tm_ptree_close(&t);
        return rc;
    }
    *out = t;
    return 0;
}

int tm_ptree_sample(tm_ptree *t, tm_ptree_stats *out)
{
    if (!t || !out)
        return tm_seterr(-EINVAL, "process tree: no tree");
    int64_t now = tm_now_mono_ns();
    uint64_t boot_ticks = pt_boot_ticks();
    memset(out, 0, sizeof *out);
    out->t_ns = now;
    out->root = t->root;

    /* Every entry was seen in the previous sample (the others were dropped
     * at its end): its counters become the previous ones. */
    for (size_t i = 0; i < t->nents; i++) {
        struct pt_ent *e = &t->ents[i];
        e->prev = e->info;
        e->had_prev = true;
        e->seen = false;
        e->reused = false;
        e->fold_rchar = e->fold_wchar = e->fold_read = e->fold_write = 0;
    }
    if (t->scan_mode)
        pt_scan_all(t);

    /* The walk.  Once the root is gone, what is left of the tree are the
     * processes known from the previous sample and their descendants. */
    size_t qlen = 0, head = 0, untracked = 0, io_unreadable = 0;
    t->norder = 0;
    if (!t->root_dead)
        t->queue[qlen++] = t->root;
    else
        for (size_t i = 0; i < t->nents && qlen < TM_PTREE_MAX_PROCS; i++)
            t->queue[qlen++] = t->ents[i].info.pid;
    while (head < qlen) {
        pid_t pid = t->queue[head++];
        int idx = pt_lookup(t, pid);
        if (idx >= 0 && t->ents[idx].seen)
            continue; /* listed twice: a thread exited mid-walk */
        if (idx < 0) {
            if (t->nents >= TM_PTREE_MAX_PROCS) {
                untracked++;
                continue;
            }
            if (!pt_new_ent(t, pid))
                return tm_seterr(-ENOMEM, "process tree: %s", strerror(ENOMEM));
            idx = (int)(t->nents - 1);
            t->ents[idx].had_prev = false;
        }
        struct pt_ent *e = &t->ents[idx];
        int src = pt_read_stat(t, e);
        if (pid == t->root && !t->root_dead && (src < 0 || e->info.starttime != t->root_start)) {
            /* The root exited (its pid may be reused already): walk on
             * from the processes known from the previous sample. */
            t->root_dead = true;
            for (size_t i = 0; i < t->nents; i++)
                if (t->ents[i].had_prev && t->ents[i].prev.pid != t->root)
                    pt_push(t, &qlen, &untracked, t->ents[i].prev.pid);
            continue;
        }
        if (src < 0)
            continue; /* gone */
        if (e->had_prev && e->info.starttime != e->prev.starttime)
            pt_reset_ent(t, e);
        e->seen = true;
        pt_read_details(t, e, now, &io_unreadable);
        t->order[t->norder++] = (size_t)idx;
        if (t->scan_mode)
            pt_scan_children(t, pid, &qlen, &untracked);
        else
            pt_children(t, e, &qlen, &untracked);
    }
    if (!t->root_dead) {
        int r = pt_lookup(t, t->root);
        if (r < 0 || !t->ents[r].seen)
            t->root_dead = true;
    }
    out->root_alive = !t->root_dead;

    /* Vanished processes: fold those really gone into their reaper (a
     * process not found that still runs has only left the tree), and the
     * predecessors of reused pids. */
    for (size_t i = 0; i < t->nents; i++) {
        struct pt_ent *e = &t->ents[i];
        if (e->reused ||
            (!e->seen && e->had_prev && !pt_still_alive(t, e->prev.pid, e->prev.starttime)))
            pt_fold(t, e);
    }

    double cpu_d = 0, rb_d = 0, wb_d = 0, rc_d = 0;
    size_t n_cpu = 0, n_io = 0, n_stat = 0, n_iosum = 0, n_rss = 0, n_pss = 0;
    double user = 0, sys = 0, rb = 0, wb = 0, rch = 0, wch = 0, rss = 0, pss = 0;
    for (size_t k = 0; k < t->norder; k++) {
        struct pt_ent *e = &t->ents[t->order[k]];
        const tm_procinfo *c = &e->info;
        t->out[k] = *c;
        n_stat++;
        user += c->utime_s;
        sys += c->stime_s;
        if (c->state == 'D')
            out->nproc_d++;
        if (c->valid & TM_PROC_HAVE_IO) {
            n_iosum++;
            rb += (double)c->read_bytes;
            wb += (double)c->write_bytes;
            rch += (double)c->rchar;
            wch += (double)c->wchar;
        }
        if (c->valid & TM_PROC_HAVE_RSS) {
            n_rss++;
            rss += (double)c->rss_bytes;
        }
        if (c->valid & TM_PROC_HAVE_PSS) {
            n_pss++;
            pss += (double)c->pss_bytes;
        }
        if (!t->have_prev)
            continue;
        if (e->had_prev) {
            const tm_procinfo *p = &e->prev;
            double d = (c->utime_s + c->stime_s) - (p->utime_s + p->stime_s);
            cpu_d += d > 0 ? d : 0;
            n_cpu++;
            if ((c->valid & p->valid & TM_PROC_HAVE_IO) != 0) {
                rb_d += (double)pt_delta(c->read_bytes, p->read_bytes, e->fold_read);
                wb_d += (double)pt_delta(c->write_bytes, p->write_bytes, e->fold_write);
                rc_d += (double)pt_delta(c->rchar, p->rchar, e->fold_rchar);
                n_io++;
            }
        } else if (c->starttime >= t->prev_boot_ticks) {
            /* Started within the interval: all of its counters are new. */
            cpu_d += c->utime_s + c->stime_s;
            n_cpu++;
            if (c->valid & TM_PROC_HAVE_IO) {
                rb_d += (double)c->read_bytes;
                wb_d += (double)c->write_bytes;
                rc_d += (double)c->rchar;
                n_io++;
            }
        }
    }
    out->nproc = t->norder;
    out->nproc_io_unreadable = io_unreadable;
    out->nproc_untracked = untracked;
    out->procs = t->out;
    out->cpu_user_s = n_stat ? user : NAN;
    out->cpu_sys_s = n_stat ? sys : NAN;
    out->read_bytes = n_iosum ? rb : NAN;
    out->write_bytes = n_iosum ? wb : NAN;
    out->rchar = n_iosum ? rch : NAN;
    out->wchar = n_iosum ? wch : NAN;
    out->rss_bytes = n_rss ? rss : NAN;
    out->pss_bytes = n_pss ? pss : NAN;
    out->cpu_pct = out->read_bytes_s = out->write_bytes_s = out->rchar_s = NAN;
    out->cache_hit_hint = NAN;
    double dt = t->have_prev ? (double)(now - t->prev_t_ns) / 1e9 : 0;
    if (dt > 0) {
        if (n_cpu)
            out->cpu_pct = 100.0 * cpu_d / dt;
        if (n_io) {
            out->read_bytes_s = rb_d / dt;
            out->write_bytes_s = wb_d / dt;
            out->rchar_s = rc_d / dt;
            if (rc_d > 0) {
                double h = 1.0 - rb_d / rc_d;
                out->cache_hit_hint = h < 0 ? 0 : h > 1 ? 1 : h;
            }
        }
    }

    /* Drop the vanished, keep the rest for the next sample. */
    size_t w = 0;
    for (size_t i = 0; i < t->nents; i++) {
        if (!t->ents[i].seen) {
            pt_close_all(t, &t->ents[i]);
            continue;
        }
        if (w != i)
            t->ents[w] = t->ents[i];
        w++;
    }
    t->nents = w;
    pt_hash_rebuild(t);
    t->have_prev = true;
    t->prev_t_ns = now;
    t->prev_boot_ticks = boot_ticks;
    return 0;
}

void tm_ptree_close(tm_ptree **tp)
{
    if (!tp || !*tp)
        return;
    tm_ptree *t = *tp;
    for (size_t i = 0; i < t->nents; i++)
        pt_close_all(t, &t->ents[i]);
    if (t->fd_proc >= 0)
        close(t->fd_proc);
    free(t->ents);
    free(t->out);
    free(t->scan);
    free(t->buf);
    free(t->dents);
    free(t);
    *tp = NULL;
}
