/*
 * collect_vmstat.c - the page-cache collector: how much of what the job
 * reads is served from memory.  A dataset larger than the page cache shows
 * as major faults and page-ins (data read from the disk into memory) and as
 * refaults (cached pages evicted and then needed again: the cache thrashes,
 * and every epoch reads the disk again); Cached and Dirty say how big the
 * cache is and how much of it waits for writeback (checkpoints).
 *
 * Reads <proc>/vmstat and <proc>/meminfo (TRAINMON_PROC_ROOT), both kept
 * open and re-read with pread.  Recorded as vm.* series, fed as vm.* alert
 * inputs, exported as trainmon_vmstat_* counters and trainmon_memory_*
 * gauges.  Units: pgpgin counts KiB (the kernel divides its sector count
 * by two), meminfo counts kB meaning KiB; both become bytes here.
 *
 * This file, its test and fuzz target, its series in series.h and one line
 * in collectors.c are the whole of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collect.h"
#include "collect_vmstat.h"
#include "prom.h"
#include "series.h"
#include "sysrec.h"
#include "util.h"

/* --- parsing */

/* The value of "<name> <u64>" lines (vmstat) or "<name>: <u64> kB"
 * (meminfo), for the names asked. */
struct vm_field {
    const char *name;
    size_t len;
    unsigned bit;
    size_t off;
};

#define VM_FIELD(n, bit, member)                                                                   \
    {                                                                                              \
        n, sizeof n - 1, bit, offsetof(tm_vmstat, member)                                          \
    }

static void vm_parse(const char *buf, size_t len, tm_vmstat *out, const struct vm_field *f,
                     size_t nf, uint64_t scale)
{
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        for (size_t i = 0; i < nf; i++) {
            if ((size_t)(eol - p) <= f[i].len || memcmp(p, f[i].name, f[i].len) != 0)
                continue;
            const char *q = p + f[i].len;
            if (*q == ':')
                q++;
            if (q == eol || (*q != ' ' && *q != '\t'))
                continue; /* a longer name with this prefix */
            uint64_t v;
            if (tm_parse_u64(&q, eol, &v) < 0)
                break;
            if (v > UINT64_MAX / scale)
                break; /* nonsense: left unavailable */
            v *= scale;
            memcpy((char *)out + f[i].off, &v, sizeof v);
            out->valid |= f[i].bit;
            break;
        }
        p = eol + 1;
    }
}

int tm_vmstat_parse(const char *buf, size_t len, tm_vmstat *out)
{
    if (!buf || !out)
        return tm_seterr(-EINVAL, "tm_vmstat_parse: NULL argument");
    /* Since 5.9 refaults are split into _anon and _file; the page cache's
     * are the _file ones (and the plain name is then absent). */
    static const struct vm_field f[] = {
        VM_FIELD("pgmajfault", TM_VM_HAVE_MAJFAULT, pgmajfault),
        VM_FIELD("pgpgin", TM_VM_HAVE_PGPGIN, pgpgin_kib),
        VM_FIELD("workingset_refault_file", TM_VM_HAVE_REFAULT, refault),
        VM_FIELD("workingset_refault", TM_VM_HAVE_REFAULT, refault),
    };
    vm_parse(buf, len, out, f, TM_ARRAY_LEN(f), 1);
    return 0;
}

int tm_meminfo_parse(const char *buf, size_t len, tm_vmstat *out)
{
    if (!buf || !out)
        return tm_seterr(-EINVAL, "tm_meminfo_parse: NULL argument");
    static const struct vm_field f[] = {
        VM_FIELD("Cached", TM_VM_HAVE_CACHED, cached_bytes),
        VM_FIELD("Dirty", TM_VM_HAVE_DIRTY, dirty_bytes),
        VM_FIELD("MemTotal", TM_VM_HAVE_MEMTOTAL, mem_total_bytes),
    };
    vm_parse(buf, len, out, f, TM_ARRAY_LEN(f), 1024);
    return 0;
}

static double vm_rate(const tm_vmstat *prev, const tm_vmstat *cur, unsigned bit, uint64_t pv,
                      uint64_t cv, double dt)
{
    if (!prev || !(prev->valid & bit) || !(cur->valid & bit) || !(dt > 0))
        return NAN;
    return cv >= pv ? (double)(cv - pv) / dt : 0.0;
}

void tm_vmstat_rate(const tm_vmstat *prev, const tm_vmstat *cur, double dt, tm_vmrate *out)
{
    out->majfault_s =
        vm_rate(prev, cur, TM_VM_HAVE_MAJFAULT, prev ? prev->pgmajfault : 0, cur->pgmajfault, dt);
    out->pagein_bytes_s =
        vm_rate(prev, cur, TM_VM_HAVE_PGPGIN, prev ? prev->pgpgin_kib : 0, cur->pgpgin_kib, dt) *
        1024.0;
    out->refault_s =
        vm_rate(prev, cur, TM_VM_HAVE_REFAULT, prev ? prev->refault : 0, cur->refault, dt);
    out->cached_bytes = cur->valid & TM_VM_HAVE_CACHED ? (double)cur->cached_bytes : NAN;
    out->dirty_bytes = cur->valid & TM_VM_HAVE_DIRTY ? (double)cur->dirty_bytes : NAN;
}

/* --- the collector */

#define VM_BUF 16384 /* /proc/vmstat is about 4 KB on 6.x kernels */

/* /proc/vmstat is re-read at most this often.  Reading it costs about
 * 30 us of CPU (the kernel sums every per-CPU counter of ~180 lines for
 * each read: 22 us for vmstat, 7 us for meminfo, measured in make bench),
 * which would add a third to a whole 1 s sample of disks, pressure and a
 * 9-process tree; page-cache sizes and fault rates move over seconds, so
 * rates over 5 s lose nothing a diagnosis needs.  Between reads the last
 * values stand (alerts and /metrics see them) and nothing new is recorded. */
#define VM_PERIOD_NS 5000000000LL

struct coll_vmstat {
    int fd_vm, fd_mem; /* fd_mem -1 when meminfo cannot be read */
    tm_vmstat prev, cur;
    int64_t prev_t, cur_t;
    bool have_prev;
    bool fresh; /* the last tick re-read the files: record it */
    tm_vmrate r;
    char buf[VM_BUF];
};

static int vmstat_open(struct tm_coll *c, const tm_sampler_opts *o)
{
    (void)o;
    char path[4096];
    int rc = tm_proc_path(path, sizeof path, "/vmstat");
    if (rc < 0)
        return rc;
    int fd = tm_open(path, O_RDONLY, 0);
    if (fd < 0)
        return tm_seterr(fd, "%s: %s", path, strerror(-fd));
    struct coll_vmstat *d = calloc(1, sizeof *d);
    if (!d) {
        close(fd);
        return tm_seterr(-ENOMEM, "page cache: out of memory");
    }
    d->fd_vm = fd;
    d->fd_mem = -1;
    if (tm_proc_path(path, sizeof path, "/meminfo") == 0) {
        int m = tm_open(path, O_RDONLY, 0);
        d->fd_mem = m >= 0 ? m : -1;
    }
    c->p = d;
    return 0;
}

static int vmstat_sample(struct tm_coll *c, int64_t t_ns)
{
    struct coll_vmstat *d = c->p;
    d->fresh = false;
    if (d->cur.valid && t_ns >= d->cur_t && tm_sat_sub64(t_ns, d->cur_t) < VM_PERIOD_NS)
        return 0; /* the last reading stands (VM_PERIOD_NS) */
    if (d->cur.valid) {
        d->prev = d->cur;
        d->prev_t = d->cur_t;
        d->have_prev = true;
    }
    memset(&d->cur, 0, sizeof d->cur);
    d->cur_t = t_ns;
    ssize_t n = tm_pread_file(d->fd_vm, d->buf, sizeof d->buf);
    if (n < 0)
        return tm_seterr((int)n, "/proc/vmstat: %s", strerror((int)-n));
    tm_vmstat_parse(d->buf, (size_t)n, &d->cur);
    if (d->fd_mem >= 0) {
        n = tm_pread_file(d->fd_mem, d->buf, sizeof d->buf);
        if (n >= 0)
            tm_meminfo_parse(d->buf, (size_t)n, &d->cur);
    }
    if (!d->cur.valid)
        return tm_seterr(-ENODATA, "/proc/vmstat: none of pgmajfault, pgpgin, workingset_refault");
    tm_vmstat_rate(d->have_prev ? &d->prev : NULL, &d->cur, tm_ns_diff_s(d->cur_t, d->prev_t),
                   &d->r);
    d->fresh = true;
    return 0;
}

static int vmstat_record(struct tm_coll *c, tm_rec *w, int64_t t_ns)
{
    const struct coll_vmstat *d = c->p;
    if (!d->fresh)
        return 0; /* recorded when it was read */
    const struct tm_sysrec_val vals[] = {
        {TM_SER_VM_MAJOR_FAULTS_PER_SECOND, "1/s", d->r.majfault_s},
        {TM_SER_VM_PAGEIN_BYTES_PER_SECOND, "B/s", d->r.pagein_bytes_s},
        {TM_SER_VM_PAGE_CACHE_REFAULTS_PER_SECOND, "1/s", d->r.refault_s},
        {TM_SER_VM_PAGE_CACHE_BYTES, "B", d->r.cached_bytes},
        {TM_SER_VM_DIRTY_BYTES, "B", d->r.dirty_bytes},
    };
    return tm_sysrec_put(w, t_ns, "", vals, TM_ARRAY_LEN(vals));
}

static const struct tm_coll_metric vmstat_alert_metrics[] = {
    {"vm.major_faults_s",
     "major page faults per second, system-wide (reads that waited for a disk)"},
    {"vm.pagein_mb_s", "data paged in from block devices, MiB/s, system-wide"},
    {"vm.refaults_s", "page-cache refaults per second: cached data evicted and read again "
                      "(the dataset does not fit in the cache)"},
    {"vm.dirty_bytes", "page cache waiting to be written back, bytes"},
    {NULL, NULL},
};

static void vmstat_alert(struct tm_coll *c, tm_alert_engine *e, int64_t t_ns)
{
    const struct coll_vmstat *d = c->p;
    tm_alert_feed(e, "vm.major_faults_s", "", d->r.majfault_s, t_ns);
    tm_alert_feed(e, "vm.pagein_mb_s", "", d->r.pagein_bytes_s / 1048576.0, t_ns);
    tm_alert_feed(e, "vm.refaults_s", "", d->r.refault_s, t_ns);
    tm_alert_feed(e, "vm.dirty_bytes", "", d->r.dirty_bytes, t_ns);
}

static void vmstat_prom_one(tm_text *t, const char *name, const char *type, const char *help,
                            uint64_t v)
{
    tm_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n%s %" PRIu64 "\n", name, help, name, type, name,
                   v);
}

/* The counters themselves, not rates: Prometheus takes rate() itself. */
static void vmstat_prom(struct tm_coll *c, tm_text *t)
{
    const struct coll_vmstat *d = c->p;
    const tm_vmstat *v = &d->cur;
    if (!c->valid)
        return;
    if (v->valid & TM_VM_HAVE_MAJFAULT)
        vmstat_prom_one(t, "trainmon_vmstat_major_faults_total", "counter",
                        "Major page faults since boot (/proc/vmstat pgmajfault).", v->pgmajfault);
    if (v->valid & TM_VM_HAVE_PGPGIN)
        vmstat_prom_one(t, "trainmon_vmstat_pagein_bytes_total", "counter",
                        "Bytes paged in from block devices since boot (/proc/vmstat pgpgin).",
                        v->pgpgin_kib * 1024u);
    if (v->valid & TM_VM_HAVE_REFAULT)
        vmstat_prom_one(t, "trainmon_vmstat_page_cache_refaults_total", "counter",
                        "Page-cache pages evicted and read again since boot "
                        "(/proc/vmstat workingset_refault_file).",
                        v->refault);
    if (v->valid & TM_VM_HAVE_CACHED)
        vmstat_prom_one(t, "trainmon_memory_page_cache_bytes", "gauge",
                        "Page cache size in bytes (/proc/meminfo Cached).", v->cached_bytes);
    if (v->valid & TM_VM_HAVE_DIRTY)
        vmstat_prom_one(t, "trainmon_memory_dirty_bytes", "gauge",
                        "Page cache waiting for writeback in bytes (/proc/meminfo Dirty).",
                        v->dirty_bytes);
}

static void vmstat_close(struct tm_coll *c)
{
    struct coll_vmstat *d = c->p;
    close(d->fd_vm);
    if (d->fd_mem >= 0)
        close(d->fd_mem);
    free(d);
}

const struct tm_collector_ops tm_coll_vmstat = {
    .name = "vmstat",
    .alert_metrics = vmstat_alert_metrics,
    .open = vmstat_open,
    .sample = vmstat_sample,
    .record = vmstat_record,
    .alert = vmstat_alert,
    .prom = vmstat_prom,
    .close = vmstat_close,
};
