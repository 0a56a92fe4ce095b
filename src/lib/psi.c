/*
 * psi.c - pressure stall information and the watched process's cgroup
 * (Documentation/accounting/psi.rst).
 *
 * System-wide pressure comes from <proc>/pressure/{io,cpu,memory}, kept
 * open and re-read with pread().  A kernel without PSI (or booted with
 * psi=0) has no such files: that source's bit stays clear, which is not an
 * error.  /proc/pressure/cpu has no "full" line before Linux 5.13.
 *
 * Per cgroup: the process's cgroup is read once from <proc>/PID/cgroup at
 * open (a process moved later is not followed).  For cgroup v2 ("0::/path")
 * the directory is <sys>/fs/cgroup/<path>; on hybrid machines the v2
 * hierarchy is mounted at <sys>/fs/cgroup/unified instead, which is tried
 * when the first has neither io.pressure nor io.stat.  Byte and op counters
 * come from v2 io.stat when the io controller is on v2, else from v1
 * blkio.throttle.io_service_bytes and io_serviced of the blkio hierarchy.
 * The v1 throttle counters stay 0 on recent kernels until some throttle
 * rule exists in the hierarchy: they are reported as read.
 */
#include "psi.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------------------------------------------------------------- parsers */

static const char *ps_skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static const char *ps_token_end(const char *p, const char *end)
{
    while (p < end && *p != ' ' && *p != '\t')
        p++;
    return p;
}

/* The end of the line at p (the '\n' or end). */
static const char *ps_eol(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl ? nl : end;
}

static bool ps_token_is(const char *p, const char *tend, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(tend - p) == n && memcmp(p, word, n) == 0;
}

static int ps_token_u64(const char *p, const char *tend, uint64_t *out)
{
    if (tm_parse_u64(&p, tend, out))
        return -EINVAL;
    return p == tend ? 0 : -EINVAL;
}

/* "12.34" as the kernel prints averages (LOAD_INT.LOAD_FRAC).  strtod is
 * not used: it needs a NUL and obeys the caller's locale. */
static int ps_token_decimal(const char *p, const char *tend, double *out)
{
    uint64_t ip;
    if (tm_parse_u64(&p, tend, &ip))
        return -EINVAL;
    double v = (double)ip;
    if (p < tend && *p == '.') {
        p++;
        double scale = 0.1;
        if (p == tend)
            return -EINVAL;
        for (; p < tend; p++, scale /= 10) {
            if (*p < '0' || *p > '9')
                return -EINVAL;
            v += (*p - '0') * scale;
        }
    }
    if (p != tend)
        return -EINVAL;
    *out = v;
    return 0;
}

/* One "some|full avg10=.. avg60=.. avg300=.. total=.." line after its
 * first word; 0 when all four values are there. */
static int ps_psi_line(const char *p, const char *eol, double avg[3], uint64_t *total)
{
    unsigned found = 0;
    for (;;) {
        p = ps_skip_blanks(p, eol);
        if (p >= eol)
            break;
        const char *tend = ps_token_end(p, eol);
        const char *eq = memchr(p, '=', (size_t)(tend - p));
        if (!eq)
            return -EINVAL;
        if (ps_token_is(p, eq, "avg10")) {
            if (ps_token_decimal(eq + 1, tend, &avg[0]))
                return -EINVAL;
            found |= 1;
        } else if (ps_token_is(p, eq, "avg60")) {
            if (ps_token_decimal(eq + 1, tend, &avg[1]))
                return -EINVAL;
            found |= 2;
        } else if (ps_token_is(p, eq, "avg300")) {
            if (ps_token_decimal(eq + 1, tend, &avg[2]))
                return -EINVAL;
            found |= 4;
        } else if (ps_token_is(p, eq, "total")) {
            if (ps_token_u64(eq + 1, tend, total))
                return -EINVAL;
            found |= 8;
        }
        p = tend;
    }
    return found == 0xf ? 0 : -EINVAL;
}

int tm_psi_parse(const char *buf, size_t len, tm_psi *out)
{
    if (!buf || !out)
        return -EINVAL;
    tm_psi r;
    memset(&r, 0, sizeof r);
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = ps_eol(p, end);
        const char *q = ps_skip_blanks(p, eol);
        const char *tend = ps_token_end(q, eol);
        double avg[3];
        uint64_t total;
        if (ps_token_is(q, tend, "some") && ps_psi_line(tend, eol, avg, &total) == 0) {
            r.has_some = true;
            r.some_avg10 = avg[0];
            r.some_avg60 = avg[1];
            r.some_avg300 = avg[2];
            r.some_total_us = total;
        } else if (ps_token_is(q, tend, "full") && ps_psi_line(tend, eol, avg, &total) == 0) {
            r.has_full = true;
            r.full_avg10 = avg[0];
            r.full_avg60 = avg[1];
            r.full_avg300 = avg[2];
            r.full_total_us = total;
        }
        p = eol + 1;
    }
    if (!r.has_some)
        return -EINVAL;
    *out = r;
    return 0;
}

/* "MAJ:MIN" */
static bool ps_is_devno(const char *p, const char *tend)
{
    uint64_t v;
    const char *colon = memchr(p, ':', (size_t)(tend - p));
    return colon && ps_token_u64(p, colon, &v) == 0 && ps_token_u64(colon + 1, tend, &v) == 0;
}

static uint64_t ps_add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int tm_cg_parse_iostat(const char *buf, size_t len, tm_cgio *out)
{
    if (!buf || !out)
        return -EINVAL;
    tm_cgio r = {.valid = true};
    int ndev = 0;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = ps_eol(p, end);
        const char *q = ps_skip_blanks(p, eol);
        const char *tend = ps_token_end(q, eol);
        p = eol + 1;
        if (!ps_is_devno(q, tend))
            continue;
        ndev++;
        for (q = tend;; q = tend) {
            q = ps_skip_blanks(q, eol);
            if (q >= eol)
                break;
            tend = ps_token_end(q, eol);
            const char *eq = memchr(q, '=', (size_t)(tend - q));
            uint64_t v;
            if (!eq || ps_token_u64(eq + 1, tend, &v))
                continue; /* unknown or malformed: ignored */
            if (ps_token_is(q, eq, "rbytes"))
                r.rbytes = ps_add_sat(r.rbytes, v);
            else if (ps_token_is(q, eq, "wbytes"))
                r.wbytes = ps_add_sat(r.wbytes, v);
            else if (ps_token_is(q, eq, "rios"))
                r.rios = ps_add_sat(r.rios, v);
            else if (ps_token_is(q, eq, "wios"))
                r.wios = ps_add_sat(r.wios, v);
        }
    }
    *out = r;
    return ndev;
}

int tm_cg_parse_blkio(const char *buf, size_t len, uint64_t *read, uint64_t *write)
{
    if (!buf || !read || !write)
        return -EINVAL;
    uint64_t rd = 0, wr = 0;
    int nlines = 0;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = ps_eol(p, end);
        const char *q = ps_skip_blanks(p, eol);
        const char *tend = ps_token_end(q, eol);
        p = eol + 1;
        if (!ps_is_devno(q, tend))
            continue; /* "Total N" and anything else */
        const char *op = ps_skip_blanks(tend, eol);
        const char *opend = ps_token_end(op, eol);
        const char *num = ps_skip_blanks(opend, eol);
        uint64_t v;
        if (ps_token_u64(num, ps_token_end(num, eol), &v))
            continue;
        if (ps_token_is(op, opend, "Read"))
            rd = ps_add_sat(rd, v);
        else if (ps_token_is(op, opend, "Write"))
            wr = ps_add_sat(wr, v);
        else
            continue;
        nlines++;
    }
    *read = rd;
    *write = wr;
    return nlines;
}

/* Copies [p, e) into dst when it fits and holds no NUL. */
static bool ps_copy(char *dst, size_t cap, const char *p, const char *e)
{
    size_t n = (size_t)(e - p);
    if (n == 0 || n >= cap || memchr(p, '\0', n))
        return false;
    memcpy(dst, p, n);
    dst[n] = '\0';
    return true;
}

static bool ps_list_has(const char *p, const char *e, const char *word)
{
    while (p < e) {
        const char *comma = memchr(p, ',', (size_t)(e - p));
        const char *tend = comma ? comma : e;
        if (ps_token_is(p, tend, word))
            return true;
        p = tend + 1;
    }
    return false;
}

int tm_cg_parse_proc_cgroup(const char *buf, size_t len, char *v2, size_t v2_cap, char *blkio,
                            size_t blkio_cap)
{
    if (!buf || !v2 || !blkio || v2_cap == 0 || blkio_cap == 0)
        return -EINVAL;
    v2[0] = blkio[0] = '\0';
    int found = 0;
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = ps_eol(p, end);
        const char *line = p;
        p = eol + 1;
        /* The path is everything after the second colon: it may hold
         * colons itself. */
        const char *c1 = memchr(line, ':', (size_t)(eol - line));
        if (!c1)
            continue;
        const char *c2 = memchr(c1 + 1, ':', (size_t)(eol - c1 - 1));
        if (!c2)
            continue;
        uint64_t id;
        if (ps_token_u64(line, c1, &id))
            continue;
        if (id == 0 && c2 == c1 + 1) {
            if (!(found & TM_CG_HAVE_V2) && ps_copy(v2, v2_cap, c2 + 1, eol))
                found |= TM_CG_HAVE_V2;
        } else if (ps_list_has(c1 + 1, c2, "blkio")) {
            if (!(found & TM_CG_HAVE_BLKIO) && ps_copy(blkio, blkio_cap, c2 + 1, eol))
                found |= TM_CG_HAVE_BLKIO;
        }
    }
    return found;
}

/* ------------------------------------------------------------- collector */

#define PS_BUF_CAP (64 * 1024)

enum { PS_IO, PS_CPU, PS_MEM, PS_CG_IO, PS_CG_IOSTAT, PS_BLKIO_BYTES, PS_BLKIO_IOS, PS_NFD };

struct tm_pressure {
    int fd[PS_NFD]; /* -1: that source is not available */
    char cgroup[512];
    char buf[PS_BUF_CAP];
};

/* A cgroup path usable under a mount point: absolute, without ".."
 * components (a process outside our cgroup namespace shows "/../.."). */
static bool ps_path_ok(const char *path)
{
    if (path[0] != '/')
        return false;
    for (const char *s = path; (s = strstr(s, "/..")) != NULL; s += 3)
        if (s[3] == '/' || s[3] == '\0')
            return false;
    return true;
}

static int ps_open_sys(const char *dir, const char *path, const char *file)
{
    char full[PATH_MAX];
    /* The root cgroup "/" is the mount point itself. */
    if (strcmp(path, "/") == 0)
        path = "";
    if (tm_sys_path(full, sizeof full, "%s%s/%s", dir, path, file))
        return -ENAMETOOLONG;
    return tm_open(full, O_RDONLY, 0);
}

static void ps_open_cgroup(tm_pressure *p, const char *v2, const char *blkio)
{
    if (v2[0] && ps_path_ok(v2)) {
        static const char *const mounts[] = {"fs/cgroup", "fs/cgroup/unified"};
        for (size_t i = 0; i < TM_ARRAY_LEN(mounts); i++) {
            int a = ps_open_sys(mounts[i], v2, "io.pressure");
            int b = ps_open_sys(mounts[i], v2, "io.stat");
            p->fd[PS_CG_IO] = a >= 0 ? a : -1;
            p->fd[PS_CG_IOSTAT] = b >= 0 ? b : -1;
            if (a >= 0 || b >= 0)
                break;
        }
    }
    if (p->fd[PS_CG_IOSTAT] < 0 && blkio[0] && ps_path_ok(blkio)) {
        int a = ps_open_sys("fs/cgroup/blkio", blkio, "blkio.throttle.io_service_bytes");
        int b = ps_open_sys("fs/cgroup/blkio", blkio, "blkio.throttle.io_serviced");
        if (a >= 0 && b >= 0) {
            p->fd[PS_BLKIO_BYTES] = a;
            p->fd[PS_BLKIO_IOS] = b;
        } else {
            if (a >= 0)
                close(a);
            if (b >= 0)
                close(b);
        }
    }
    tm_strlcpy(p->cgroup, v2[0] ? v2 : blkio, sizeof p->cgroup);
}

int tm_pressure_open(tm_pressure **out, pid_t pid)
{
    if (!out || pid < 0)
        return tm_seterr(-EINVAL, "pressure: invalid arguments");
    *out = NULL;
    int rc = 0;
    tm_pressure *p = calloc(1, sizeof *p);
    if (!p)
        return tm_seterr(-ENOMEM, "pressure: %s", strerror(ENOMEM));
    for (int k = 0; k < PS_NFD; k++)
        p->fd[k] = -1;

    static const char *const names[3] = {"pressure/io", "pressure/cpu", "pressure/memory"};
    for (int k = 0; k < 3; k++) {
        char path[PATH_MAX];
        if (tm_proc_path(path, sizeof path, "%s", names[k]) == 0) {
            int fd = tm_open(path, O_RDONLY, 0);
            p->fd[k] = fd >= 0 ? fd : -1;
        }
    }

    if (pid > 0) {
        char path[PATH_MAX];
        rc = tm_proc_path(path, sizeof path, "%d/cgroup", (int)pid);
        if (rc) {
            rc = tm_seterr(rc, "pid %d: cgroup path too long", (int)pid);
            goto out;
        }
        ssize_t n = tm_read_file(path, p->buf, sizeof p->buf);
        if (n == -ENOENT || n == -ESRCH) {
            rc = tm_seterr(-ESRCH, "pid %d: %s", (int)pid, strerror(ESRCH));
            goto out;
        }
        if (n < 0) {
            rc = (int)n; /* message set by tm_read_file */
            goto out;
        }
        char v2[sizeof p->cgroup], blkio[sizeof p->cgroup];
        tm_cg_parse_proc_cgroup(p->buf, (size_t)n, v2, sizeof v2, blkio, sizeof blkio);
        ps_open_cgroup(p, v2, blkio);
    }
out:
    if (rc) {
        tm_pressure_close(&p);
        return rc;
    }
    *out = p;
    return 0;
}

/* Re-reads a kept file into p->buf; the length or a negative errno. */
static ssize_t ps_reread(tm_pressure *p, int k)
{
    if (p->fd[k] < 0)
        return -ENOENT;
    return tm_pread_file(p->fd[k], p->buf, sizeof p->buf);
}

int tm_pressure_sample(tm_pressure *p, tm_pressure_stats *out)
{
    if (!p || !out)
        return tm_seterr(-EINVAL, "pressure: no collector");
    memset(out, 0, sizeof *out);
    /* A read can fail at any time (cgroup removed, PSI switched off for a
     * cgroup): the source is then unavailable for this sample. */
    static const unsigned bits[4] = {TM_PRESSURE_HAVE_IO, TM_PRESSURE_HAVE_CPU,
                                     TM_PRESSURE_HAVE_MEM, TM_PRESSURE_HAVE_CG_IO};
    tm_psi *dst[4] = {&out->io, &out->cpu, &out->mem, &out->cg_io};
    for (int k = 0; k < 4; k++) {
        ssize_t n = ps_reread(p, k);
        if (n >= 0 && tm_psi_parse(p->buf, (size_t)n, dst[k]) == 0)
            out->valid |= bits[k];
    }
    if (p->fd[PS_CG_IOSTAT] >= 0) {
        ssize_t n = ps_reread(p, PS_CG_IOSTAT);
        if (n >= 0 && tm_cg_parse_iostat(p->buf, (size_t)n, &out->cg_iostat) >= 0)
            out->valid |= TM_PRESSURE_HAVE_CG_IOSTAT;
    } else if (p->fd[PS_BLKIO_BYTES] >= 0) {
        uint64_t rb, wb, ri, wi;
        ssize_t n = ps_reread(p, PS_BLKIO_BYTES);
        if (n >= 0 && tm_cg_parse_blkio(p->buf, (size_t)n, &rb, &wb) >= 0) {
            n = ps_reread(p, PS_BLKIO_IOS);
            if (n >= 0 && tm_cg_parse_blkio(p->buf, (size_t)n, &ri, &wi) >= 0) {
                out->cg_iostat =
                    (tm_cgio){.valid = true, .rbytes = rb, .wbytes = wb, .rios = ri, .wios = wi};
                out->valid |= TM_PRESSURE_HAVE_CG_IOSTAT;
            }
        }
    }
    tm_strlcpy(out->cgroup, p->cgroup, sizeof out->cgroup);
    return 0;
}

void tm_pressure_close(tm_pressure **pp)
{
    if (!pp || !*pp)
        return;
    tm_pressure *p = *pp;
    for (int k = 0; k < PS_NFD; k++)
        if (p->fd[k] >= 0)
            close(p->fd[k]);
    free(p);
    *pp = NULL;
}
