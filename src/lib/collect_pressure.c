/*
 * collect_pressure.c - the pressure collector behind the sampler: pressure
 * stall information system-wide and, when the options name a process, for
 * its cgroup (psi.c); recorded as psi.* and cgroup.* series, fed as the
 * psi.* alert inputs, exported as trainmon_pressure_* counters.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collect.h"
#include "util.h"

struct coll_pressure {
    tm_pressure *p;
    tm_pressure_stats ps;
};

static int pressure_open(struct tm_coll *c, const tm_sampler_opts *o)
{
    struct coll_pressure *d = calloc(1, sizeof *d);
    if (!d)
        return tm_seterr(-ENOMEM, "pressure: out of memory");
    /* A process whose cgroup cannot be read (it exited, or a v1-only
     * host) still leaves the system-wide numbers worth having. */
    int rc = -ENOENT;
    if (o->pressure_pid > 0)
        rc = tm_pressure_open(&d->p, o->pressure_pid);
    if (rc < 0)
        rc = tm_pressure_open(&d->p, 0);
    if (rc < 0) {
        free(d);
        return rc;
    }
    c->p = d;
    return 0;
}

static int pressure_sample(struct tm_coll *c, int64_t t_ns)
{
    (void)t_ns;
    struct coll_pressure *d = c->p;
    memset(&d->ps, 0, sizeof d->ps);
    return tm_pressure_sample(d->p, &d->ps);
}

static int pressure_record(struct tm_coll *c, tm_rec *w, int64_t t_ns)
{
    const struct coll_pressure *d = c->p;
    return tm_sysrec_pressure(w, t_ns, &d->ps);
}

/* The alert inputs fed below (docs/ALERTS.md). */
static const struct tm_coll_metric pressure_alert_metrics[] = {
    {"psi.io_some_pct", "share of time some task stalled on I/O, avg10, percent"},
    {"psi.io_full_pct", "share of time all tasks stalled on I/O, avg10, percent"},
    {"psi.cpu_some_pct", "share of time some task waited for a CPU, avg10, percent"},
    {"psi.mem_some_pct", "share of time some task stalled on memory, avg10, percent"},
    {"psi.mem_full_pct", "share of time all tasks stalled on memory, avg10, percent"},
    {NULL, NULL},
};

static void pressure_alert(struct tm_coll *c, tm_alert_engine *e, int64_t t_ns)
{
    const struct coll_pressure *d = c->p;
    tm_alert_feed_pressure(e, &d->ps, t_ns);
}

static void pressure_prom(struct tm_coll *c, tm_text *t)
{
    const struct coll_pressure *d = c->p;
    if (c->valid)
        tm_prom_write_pressure(t, &d->ps);
}

static void pressure_close(struct tm_coll *c)
{
    struct coll_pressure *d = c->p;
    tm_pressure_close(&d->p);
    free(d);
}

const struct tm_collector_ops tm_coll_pressure = {
    .name = "pressure",
    .alert_metrics = pressure_alert_metrics,
    .uses_root = true,
    .open = pressure_open,
    .sample = pressure_sample,
    .record = pressure_record,
    .alert = pressure_alert,
    .prom = pressure_prom,
    .close = pressure_close,
};

const tm_pressure_stats *tm_sampler_pressure(const tm_sampler *s)
{
    const struct tm_coll *c = tm_sampler_coll(s, &tm_coll_pressure);
    return c && c->on && c->valid ? &((const struct coll_pressure *)c->p)->ps : NULL;
}
