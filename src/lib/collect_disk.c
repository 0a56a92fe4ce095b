/*
 * collect_disk.c - the disk collector behind the sampler: /proc/diskstats
 * rates (disk.c), recorded as disk.* series (sysrec.c), fed as the disk.*
 * alert inputs, and exported as node_exporter-style counters through an
 * accumulator that keeps the kernel's 32-bit millisecond fields monotonic
 * (prom.c).  The accumulator is kept only when the sampler's options ask
 * for Prometheus lines: `watch` and `run` have no use for it.
 */
#include <errno.h>
#include <stdlib.h>

#include "collect.h"
#include "util.h"

struct coll_disk {
    tm_disk *disk;
    tm_prom_disks *acc; /* NULL unless opts.prom */
    const tm_diskrate *rates;
    size_t nrates;
    const tm_diskstat *raw;
    size_t nraw;
};

static int disk_open(struct tm_coll *c, const tm_sampler_opts *o)
{
    if (o->disks_off)
        return TM_COLL_OFF;
    struct coll_disk *d = calloc(1, sizeof *d);
    if (!d)
        return tm_seterr(-ENOMEM, "disks: out of memory");
    int rc = tm_disk_open(&d->disk, o->ndisks ? o->disks : NULL, o->ndisks);
    if (rc == 0 && o->prom)
        rc = tm_prom_disks_new(&d->acc);
    if (rc < 0) {
        tm_disk_close(&d->disk);
        free(d);
        return rc;
    }
    c->p = d;
    return 0;
}

static int disk_sample(struct tm_coll *c, int64_t t_ns)
{
    (void)t_ns;
    struct coll_disk *d = c->p;
    d->nrates = d->nraw = 0;
    int rc = tm_disk_sample(d->disk, &d->rates, &d->nrates);
    if (rc < 0) {
        d->nrates = 0;
        return rc;
    }
    rc = tm_disk_last_raw(d->disk, &d->raw, &d->nraw);
    if (rc == 0 && d->acc)
        rc = tm_prom_disks_update(d->acc, d->raw, d->nraw);
    return rc;
}

static int disk_record(struct tm_coll *c, tm_rec *w, int64_t t_ns)
{
    const struct coll_disk *d = c->p;
    return d->nrates ? tm_sysrec_disk(w, t_ns, d->rates, d->nrates) : 0;
}

/* The alert inputs fed below (docs/ALERTS.md). */
static const struct tm_coll_metric disk_alert_metrics[] = {
    {"disk.r_await_ms", "average read latency, ms (iostat r_await); labels device"},
    {"disk.w_await_ms", "average write latency, ms (iostat w_await); labels device"},
    {"disk.util_pct", "share of time the device was busy, percent (iostat %util); labels device"},
    {"disk.r_mb_s", "read throughput, MiB/s (iostat rMB/s); labels device"},
    {"disk.w_mb_s", "write throughput, MiB/s (iostat wMB/s); labels device"},
    {"disk.aqu_sz", "average queue size (iostat aqu-sz); labels device"},
    {NULL, NULL},
};

static void disk_alert(struct tm_coll *c, tm_alert_engine *e, int64_t t_ns)
{
    const struct coll_disk *d = c->p;
    tm_alert_feed_disks(e, d->rates, d->nrates, t_ns);
}

/* Written whether or not the last sample worked: the counters are those of
 * the last good one, as a counter must never vanish for one scrape. */
static void disk_prom(struct tm_coll *c, tm_text *t)
{
    const struct coll_disk *d = c->p;
    if (d->acc)
        tm_prom_write_disks(t, d->acc);
}

static void disk_close(struct tm_coll *c)
{
    struct coll_disk *d = c->p;
    tm_disk_close(&d->disk);
    tm_prom_disks_free(&d->acc);
    free(d);
}

const struct tm_collector_ops tm_coll_disk = {
    .name = "disk",
    .alert_metrics = disk_alert_metrics,
    .open = disk_open,
    .sample = disk_sample,
    .record = disk_record,
    .alert = disk_alert,
    .prom = disk_prom,
    .close = disk_close,
};

bool tm_sampler_disks(const tm_sampler *s, const tm_diskrate **rates, size_t *n)
{
    const struct tm_coll *c = tm_sampler_coll(s, &tm_coll_disk);
    bool ok = c && c->on && c->valid;
    const struct coll_disk *d = ok ? c->p : NULL;
    if (rates)
        *rates = d ? d->rates : NULL;
    if (n)
        *n = d ? d->nrates : 0;
    return ok;
}

bool tm_sampler_disk_raw(const tm_sampler *s, const tm_diskstat **raw, size_t *n)
{
    const struct tm_coll *c = tm_sampler_coll(s, &tm_coll_disk);
    bool ok = c && c->on && c->valid;
    const struct coll_disk *d = ok ? c->p : NULL;
    if (raw)
        *raw = d ? d->raw : NULL;
    if (n)
        *n = d ? d->nraw : 0;
    return ok;
}
