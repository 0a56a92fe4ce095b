/*
 * disk.c - /proc/diskstats with the semantics of `iostat -x` (sysstat's iostat.c;
 * Documentation/admin-guide/iostats.rst): a parser, the rate arithmetic, the physical-disk test and
 * a collector that keeps the file open so that a sample is one pread().
 *
 * The collector owns every buffer it hands out.  Buffers are sized at open
 * and grown only when the machine grows (more devices, a longer file), so a
 * steady-state sample allocates nothing.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* /proc/diskstats is about 100 bytes a device; 1 MiB is ten thousand
 * devices.  A larger file is reported as an error rather than read. */
#define TM_DISK_BUF_INIT (64u * 1024u)
#define TM_DISK_BUF_CAP (1024u * 1024u)
#define TM_DISK_STATS_INIT 64u

/* Counters after "maj min name": 11 up to 4.18, 15 with discard, 17 with
 * flush.  Later kernels may append more; those are ignored. */
#define TM_DISK_NCOUNTERS 17

static bool tm_disk_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Parses one line [s, e).  Returns true when it is a complete line of at
 * least 14 fields; old 7-field partition lines and anything malformed give
 * false. */
static bool tm_diskstats_line(const char *s, const char *e, tm_diskstat *out)
{
    uint64_t maj, min;
    if (tm_parse_u64(&s, e, &maj) || maj > UINT_MAX || (s < e && !tm_disk_blank(*s)))
        return false;
    if (tm_parse_u64(&s, e, &min) || min > UINT_MAX || (s < e && !tm_disk_blank(*s)))
        return false;

    while (s < e && tm_disk_blank(*s))
        s++;
    const char *name = s;
    while (s < e && !tm_disk_blank(*s)) {
        /* A name is printable: control bytes mean this is not diskstats. */
        if ((unsigned char)*s < 0x21 || *s == 0x7f)
            return false;
        s++;
    }
    size_t name_len = (size_t)(s - name);
    if (name_len == 0 || name_len >= TM_DISK_NAME_MAX)
        return false;

    uint64_t v[TM_DISK_NCOUNTERS] = {0};
    size_t n = 0;
    for (;;) {
        while (s < e && tm_disk_blank(*s))
            s++;
        if (s == e)
            break;
        uint64_t x;
        if (tm_parse_u64(&s, e, &x) || (s < e && !tm_disk_blank(*s)))
            return false;
        if (n < TM_DISK_NCOUNTERS)
            v[n] = x;
        n++;
    }
    if (n < 11)
        return false;

    /* Fields the kernel prints with %u must fit 32 bits; a larger value
     * means the line is not what we think it is. */
    static const unsigned char u32_fields[] = {3, 7, 8, 9, 10, 14, 16};
    for (size_t i = 0; i < TM_ARRAY_LEN(u32_fields); i++)
        if (u32_fields[i] < n && v[u32_fields[i]] > UINT32_MAX)
            return false;

    memset(out, 0, sizeof *out);
    out->major = (unsigned)maj;
    out->minor = (unsigned)min;
    memcpy(out->name, name, name_len);
    out->name[name_len] = '\0';
    out->nfields = n >= 17 ? 20 : n >= 15 ? 18 : 14;
    out->rd_ios = v[0];
    out->rd_merges = v[1];
    out->rd_sec = v[2];
    out->rd_ms = (uint32_t)v[3];
    out->wr_ios = v[4];
    out->wr_merges = v[5];
    out->wr_sec = v[6];
    out->wr_ms = (uint32_t)v[7];
    out->inflight = (uint32_t)v[8];
    out->io_ms = (uint32_t)v[9];
    out->weighted_ms = (uint32_t)v[10];
    if (out->nfields >= 18) {
        out->dc_ios = v[11];
        out->dc_merges = v[12];
        out->dc_sec = v[13];
        out->dc_ms = (uint32_t)v[14];
    }
    if (out->nfields >= 20) {
        out->fl_ios = v[15];
        out->fl_ms = (uint32_t)v[16];
    }
    return true;
}

int tm_diskstats_parse(const char *buf, size_t len, tm_diskstat *out, size_t cap)
{
    if (!buf || (!out && cap > 0))
        return tm_seterr(-EINVAL, "tm_diskstats_parse: NULL argument");
    const char *p = buf, *end = buf + len;
    size_t n = 0;
    while (p < end && n < cap && n < INT_MAX) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        if (tm_diskstats_line(p, eol, &out[n]))
            n++;
        p = eol < end ? eol + 1 : end;
    }
    return (int)n;
}

/* ------------------------------------------------------------------ rates */

/* A 64-bit counter that went down means the device was removed and added
 * again: iostat clamps the rate to 0 rather than print a negative one. */
static double tm_disk_d64(uint64_t prev, uint64_t cur, bool *reset)
{
    if (cur < prev) {
        *reset = true;
        return 0.0;
    }
    return (double)(cur - prev);
}

/* Milliseconds are 32-bit in the kernel and wrap after 49.7 days; modular
 * subtraction gives the right delta across one wrap. */
static double tm_disk_d32(uint32_t prev, uint32_t cur)
{
    return (double)(uint32_t)(cur - prev);
}

static double tm_disk_div0(double num, double den)
{
    return den > 0.0 ? num / den : 0.0;
}

/* 100 * part / (part + rest), dividing first: part <= part + rest holds in
 * floating point too, so rounding can never push the result past 100. */
static double tm_disk_pct(double part, double rest)
{
    return 100.0 * tm_disk_div0(part, part + rest);
}

void tm_disk_rate(const tm_diskstat *prev, const tm_diskstat *cur, double interval_s,
                  tm_diskrate *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!prev || !cur) {
        double *all[] = {&out->r_s,      &out->w_s,      &out->d_s,      &out->f_s,
                         &out->rkb_s,    &out->wkb_s,    &out->dkb_s,    &out->rrqm_s,
                         &out->wrqm_s,   &out->drqm_s,   &out->rrqm_pct, &out->wrqm_pct,
                         &out->drqm_pct, &out->r_await,  &out->w_await,  &out->d_await,
                         &out->f_await,  &out->rareq_sz, &out->wareq_sz, &out->dareq_sz,
                         &out->aqu_sz,   &out->util};
        for (size_t i = 0; i < TM_ARRAY_LEN(all); i++)
            *all[i] = NAN;
        return;
    }
    out->major = cur->major;
    out->minor = cur->minor;
    memcpy(out->name, cur->name, sizeof out->name);
    out->name[sizeof out->name - 1] = '\0';

    bool reset = false;
    double rd = tm_disk_d64(prev->rd_ios, cur->rd_ios, &reset);
    double rm = tm_disk_d64(prev->rd_merges, cur->rd_merges, &reset);
    double rs = tm_disk_d64(prev->rd_sec, cur->rd_sec, &reset);
    double wr = tm_disk_d64(prev->wr_ios, cur->wr_ios, &reset);
    double wm = tm_disk_d64(prev->wr_merges, cur->wr_merges, &reset);
    double ws = tm_disk_d64(prev->wr_sec, cur->wr_sec, &reset);
    bool have_dc = prev->nfields >= 18 && cur->nfields >= 18;
    bool have_fl = prev->nfields >= 20 && cur->nfields >= 20;
    double dc = 0, dm = 0, ds = 0, fl = 0;
    if (have_dc) {
        dc = tm_disk_d64(prev->dc_ios, cur->dc_ios, &reset);
        dm = tm_disk_d64(prev->dc_merges, cur->dc_merges, &reset);
        ds = tm_disk_d64(prev->dc_sec, cur->dc_sec, &reset);
    }
    if (have_fl)
        fl = tm_disk_d64(prev->fl_ios, cur->fl_ios, &reset);

    /* After a reset the 32-bit times restarted too, and a modular delta
     * would read as a wrap (util 100%, seconds of await): take them as 0,
     * like the clamped counters. */
    double rms = 0, wms = 0, dms = 0, fms = 0, io_ms = 0, wt_ms = 0;
    if (!reset) {
        rms = tm_disk_d32(prev->rd_ms, cur->rd_ms);
        wms = tm_disk_d32(prev->wr_ms, cur->wr_ms);
        dms = tm_disk_d32(prev->dc_ms, cur->dc_ms);
        fms = tm_disk_d32(prev->fl_ms, cur->fl_ms);
        io_ms = tm_disk_d32(prev->io_ms, cur->io_ms);
        wt_ms = tm_disk_d32(prev->weighted_ms, cur->weighted_ms);
    }

    /* Per-request values do not depend on the interval. */
    out->rrqm_pct = tm_disk_pct(rm, rd);
    out->wrqm_pct = tm_disk_pct(wm, wr);
    out->r_await = tm_disk_div0(rms, rd);
    out->w_await = tm_disk_div0(wms, wr);
    /* A sector is always 512 bytes in diskstats: kB = sectors / 2. */
    out->rareq_sz = tm_disk_div0(rs / 2.0, rd);
    out->wareq_sz = tm_disk_div0(ws / 2.0, wr);

    if (interval_s > 0.0 && isfinite(interval_s)) {
        double t = interval_s;
        out->r_s = rd / t;
        out->w_s = wr / t;
        out->rkb_s = rs / 2.0 / t;
        out->wkb_s = ws / 2.0 / t;
        out->rrqm_s = rm / t;
        out->wrqm_s = wm / t;
        out->aqu_sz = wt_ms / 1000.0 / t;
        /* io_ms can run ahead of wall time by a tick at the edges of the
         * interval; iostat caps it the same way. */
        out->util = 100.0 * io_ms / 1000.0 / t;
        if (out->util > 100.0)
            out->util = 100.0;
        out->d_s = dc / t;
        out->dkb_s = ds / 2.0 / t;
        out->drqm_s = dm / t;
        out->f_s = fl / t;
    } else {
        out->r_s = out->w_s = out->rkb_s = out->wkb_s = out->rrqm_s = out->wrqm_s = NAN;
        out->aqu_sz = out->util = NAN;
        out->d_s = out->dkb_s = out->drqm_s = out->f_s = NAN;
    }

    if (have_dc) {
        out->drqm_pct = tm_disk_pct(dm, dc);
        out->d_await = tm_disk_div0(dms, dc);
        out->dareq_sz = tm_disk_div0(ds / 2.0, dc);
    } else {
        out->d_s = out->dkb_s = out->drqm_s = out->drqm_pct = NAN;
        out->d_await = out->dareq_sz = NAN;
    }
    if (have_fl)
        out->f_await = tm_disk_div0(fms, fl);
    else
        out->f_s = out->f_await = NAN;
}

/* ------------------------------------------------------- physical disks */

bool tm_disk_is_physical(const char *name)
{
    if (!name || !*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return false;
    /* sysfs spells a '/' in a device name (cciss/c0d0) as '!'. */
    char sysname[TM_DISK_NAME_MAX];
    size_t len = strnlen(name, sizeof sysname);
    if (len >= sizeof sysname)
        return false;
    for (size_t i = 0; i <= len; i++)
        sysname[i] = name[i] == '/' ? '!' : name[i];

    char path[PATH_MAX], part[PATH_MAX];
    struct stat st;
    if (tm_sys_path(path, sizeof path, "block/%s", sysname) || stat(path, &st) ||
        !S_ISDIR(st.st_mode))
        return false;
    if (tm_sys_path(part, sizeof part, "block/%s/partition", sysname) || access(part, F_OK) == 0)
        return false;
    /* loop, ram, zram, dm-N and mdN hang under /sys/devices/virtual.  Very
     * old sysfs has real directories in /sys/block: nothing to tell then. */
    char target[PATH_MAX];
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n >= 0) {
        target[n] = '\0';
        if (strstr(target, "/virtual/"))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------ collector */

enum { TM_DISK_UNKNOWN = 0, TM_DISK_PHYS, TM_DISK_NOT_PHYS };

struct tm_disk {
    int fd;
    char path[PATH_MAX];
    char *buf; /* the file's text; grown up to TM_DISK_BUF_CAP */
    size_t bufcap;

    /* Every line of the last two reads, with the physical verdict of each
     * (index cur = this sample).  Lines keep their order between reads, so
     * the verdict is found at the same index almost always. */
    size_t cap; /* entries in each array below */
    tm_diskstat *all[2];
    unsigned char *verdict[2];
    size_t nall[2];
    int cur;

    /* The selected devices of the last two samples, and the rates. */
    tm_diskstat *sel[2];
    size_t nsel[2];
    tm_diskrate *rates;
    size_t nrates;

    int64_t prev_ns;
    bool have_prev;

    char (*names)[TM_DISK_NAME_MAX]; /* NULL: physical disks */
    size_t nnames;
};

static int tm_disk_grow(tm_disk *d, size_t cap)
{
    for (int i = 0; i < 2; i++) {
        tm_diskstat *a = realloc(d->all[i], cap * sizeof *a);
        if (!a)
            return -ENOMEM;
        d->all[i] = a;
        unsigned char *v = realloc(d->verdict[i], cap);
        if (!v)
            return -ENOMEM;
        d->verdict[i] = v;
        tm_diskstat *s = realloc(d->sel[i], cap * sizeof *s);
        if (!s)
            return -ENOMEM;
        d->sel[i] = s;
    }
    tm_diskrate *r = realloc(d->rates, cap * sizeof *r);
    if (!r)
        return -ENOMEM;
    d->rates = r;
    d->cap = cap;
    return 0;
}

int tm_disk_open(tm_disk **out, const char *const *names, size_t n)
{
    if (!out || (!names && n > 0))
        return tm_seterr(-EINVAL, "tm_disk_open: NULL argument");
    *out = NULL;
    int rc = 0;
    tm_disk *d = calloc(1, sizeof *d);
    if (!d)
        return tm_seterr(-ENOMEM, "disk: out of memory");
    d->fd = -1;

    if (names && n > 0) {
        d->names = calloc(n, sizeof *d->names);
        if (!d->names) {
            rc = tm_seterr(-ENOMEM, "disk: out of memory");
            goto out;
        }
        for (size_t i = 0; i < n; i++) {
            const char *s = names[i];
            if (!s || !*s) {
                rc = tm_seterr(-EINVAL, "disk: empty device name");
                goto out;
            }
            /* Accept "/dev/sda" for "sda": diskstats names are relative to /dev. */
            if (strncmp(s, "/dev/", 5) == 0)
                s += 5;
            if (strlen(s) >= TM_DISK_NAME_MAX) {
                rc = tm_seterr(-ENAMETOOLONG, "disk: %s: device name too long", names[i]);
                goto out;
            }
            tm_strlcpy(d->names[i], s, TM_DISK_NAME_MAX);
        }
        d->nnames = n;
    }

    rc = tm_proc_path(d->path, sizeof d->path, "diskstats");
    if (rc) {
        rc = tm_seterr(rc, "disk: %s/diskstats: path too long", tm_proc_root());
        goto out;
    }
    d->fd = tm_open(d->path, O_RDONLY, 0);
    if (d->fd < 0) {
        rc = tm_seterr(d->fd, "%s: %s", d->path, strerror(-d->fd));
        goto out;
    }
    d->bufcap = TM_DISK_BUF_INIT;
    d->buf = malloc(d->bufcap);
    if (!d->buf || tm_disk_grow(d, TM_DISK_STATS_INIT)) {
        rc = tm_seterr(-ENOMEM, "disk: out of memory");
        goto out;
    }
out:
    if (rc)
        tm_disk_close(&d);
    *out = d;
    return rc;
}

/* Reads the whole file into d->buf, growing it (up to the cap) when the
 * file has outgrown it.  Returns the length or a negative errno. */
static ssize_t tm_disk_read(tm_disk *d)
{
    for (;;) {
        ssize_t len = tm_pread_file(d->fd, d->buf, d->bufcap);
        if (len != -EFBIG)
            return len < 0 ? tm_seterr((int)len, "%s: %s", d->path, strerror((int)-len)) : len;
        if (d->bufcap >= TM_DISK_BUF_CAP)
            return tm_seterr(-EFBIG, "%s: larger than %u bytes", d->path, TM_DISK_BUF_CAP - 1);
        size_t cap = d->bufcap * 2 > TM_DISK_BUF_CAP ? TM_DISK_BUF_CAP : d->bufcap * 2;
        char *b = realloc(d->buf, cap);
        if (!b)
            return tm_seterr(-ENOMEM, "disk: out of memory");
        d->buf = b;
        d->bufcap = cap;
    }
}

/* Index of name in list (of n), trying `hint` first: devices keep their
 * order in diskstats, so the hint nearly always hits. */
static size_t tm_disk_find(const tm_diskstat *list, size_t n, size_t hint, const tm_diskstat *s)
{
    if (hint < n && list[hint].major == s->major && list[hint].minor == s->minor &&
        strcmp(list[hint].name, s->name) == 0)
        return hint;
    for (size_t i = 0; i < n; i++)
        if (list[i].major == s->major && list[i].minor == s->minor &&
            strcmp(list[i].name, s->name) == 0)
            return i;
    return SIZE_MAX;
}

static bool tm_disk_selected(tm_disk *d, size_t i)
{
    const tm_diskstat *s = &d->all[d->cur][i];
    if (d->names) {
        for (size_t k = 0; k < d->nnames; k++)
            if (strcmp(d->names[k], s->name) == 0)
                return true;
        return false;
    }
    /* Whether a device is physical does not change while it exists (same
     * name and number), so sysfs is asked once per device, not per sample. */
    int prev = !d->cur;
    unsigned char v = TM_DISK_UNKNOWN;
    size_t j = tm_disk_find(d->all[prev], d->nall[prev], i, s);
    if (j != SIZE_MAX)
        v = d->verdict[prev][j];
    if (v == TM_DISK_UNKNOWN)
        v = tm_disk_is_physical(s->name) ? TM_DISK_PHYS : TM_DISK_NOT_PHYS;
    d->verdict[d->cur][i] = v;
    return v == TM_DISK_PHYS;
}

int tm_disk_sample(tm_disk *d, const tm_diskrate **rates, size_t *n)
{
    if (!d || !rates || !n)
        return tm_seterr(-EINVAL, "tm_disk_sample: NULL argument");
    *rates = NULL;
    *n = 0;
    ssize_t len = tm_disk_read(d);
    if (len < 0)
        return (int)len;
    int64_t now = tm_now_mono_ns();

    int cur = !d->cur;
    int parsed;
    for (;;) {
        parsed = tm_diskstats_parse(d->buf, (size_t)len, d->all[cur], d->cap);
        if (parsed < 0)
            return parsed;
        /* A full array may have cut the file short: grow and parse again.
         * A valid line takes at least 27 bytes, which bounds the growth. */
        if ((size_t)parsed < d->cap || d->cap > (size_t)len / 27)
            break;
        int rc = tm_disk_grow(d, d->cap * 2);
        if (rc)
            return tm_seterr(rc, "disk: out of memory");
    }
    /* The state of the previous sample is untouched until here, so a
     * failed read leaves the collector as it was. */
    d->cur = cur;
    d->nall[cur] = (size_t)parsed;

    tm_diskstat *sel = d->sel[cur];
    const tm_diskstat *psel = d->sel[!cur];
    size_t npsel = d->nsel[!cur], nsel = 0, nr = 0;
    double dt = (double)(now - d->prev_ns) / 1e9;
    for (size_t i = 0; i < (size_t)parsed; i++) {
        if (!tm_disk_selected(d, i))
            continue;
        sel[nsel] = d->all[cur][i];
        if (d->have_prev) {
            size_t j = tm_disk_find(psel, npsel, nsel, &sel[nsel]);
            if (j != SIZE_MAX)
                tm_disk_rate(&psel[j], &sel[nsel], dt, &d->rates[nr++]);
        }
        nsel++;
    }
    d->nsel[cur] = nsel;
    d->nrates = nr;
    d->prev_ns = now;
    d->have_prev = true;
    *rates = d->rates;
    *n = nr;
    return 0;
}

int tm_disk_last_raw(tm_disk *d, const tm_diskstat **stats, size_t *n)
{
    if (!d || !stats || !n)
        return tm_seterr(-EINVAL, "tm_disk_last_raw: NULL argument");
    *stats = d->sel[d->cur];
    *n = d->have_prev ? d->nsel[d->cur] : 0;
    return 0;
}

void tm_disk_close(tm_disk **pd)
{
    if (!pd || !*pd)
        return;
    tm_disk *d = *pd;
    if (d->fd >= 0)
        close(d->fd);
    free(d->buf);
    for (int i = 0; i < 2; i++) {
        free(d->all[i]);
        free(d->verdict[i]);
        free(d->sel[i]);
    }
    free(d->rates);
    free(d->names);
    free(d);
    *pd = NULL;
}
