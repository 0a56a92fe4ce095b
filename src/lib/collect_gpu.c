/*
 * collect_gpu.c - the GPU collector behind the sampler, through the public
 * tm_gpu_* calls only (the vendor code lives behind them): recorded as
 * gpu.* series, fed as the gpu.* alert inputs, exported as trainmon_gpu_*
 * gauges.  GPUs are optional hardware: a node without them is not a
 * failing collector.  The driver's own warnings (a GPU fell off the bus)
 * are passed on to the sampler's queue word for word.
 */
#include <errno.h>
#include <stdlib.h>

#include "collect.h"
#include "util.h"

struct coll_gpu {
    tm_gpu *gpu;
    const tm_gpu_stats *g;
    size_t n;
};

static int gpu_open(struct tm_coll *c, const tm_sampler_opts *o)
{
    if (o->gpu_off)
        return TM_COLL_OFF;
    struct coll_gpu *d = calloc(1, sizeof *d);
    if (!d)
        return tm_seterr(-ENOMEM, "GPUs: out of memory");
    int rc = tm_gpu_open(&d->gpu, o->ngpus ? o->gpus : NULL, o->ngpus);
    if (rc < 0) {
        free(d);
        return rc;
    }
    c->p = d;
    return 0;
}

static int gpu_sample(struct tm_coll *c, int64_t t_ns)
{
    (void)t_ns;
    struct coll_gpu *d = c->p;
    int rc = tm_gpu_sample(d->gpu, &d->g, &d->n);
    if (rc < 0) {
        d->g = NULL;
        d->n = 0;
    }
    return rc;
}

static int gpu_record(struct tm_coll *c, tm_rec *w, int64_t t_ns)
{
    const struct coll_gpu *d = c->p;
    return d->n ? tm_sysrec_gpu(w, t_ns, d->g, d->n) : 0;
}

/* The alert inputs fed below (docs/ALERTS.md). */
static const struct tm_coll_metric gpu_alert_metrics[] = {
    {"gpu.util_pct", "share of time a kernel ran, percent; labels gpu, uuid"},
    {"gpu.mem_used_pct", "device memory used, percent of total; labels gpu, uuid"},
    {"gpu.mem_used_bytes", "device memory used, bytes; labels gpu, uuid"},
    {"gpu.temp_c", "temperature, degrees Celsius; labels gpu, uuid"},
    {"gpu.power_w", "power draw, watts; labels gpu, uuid"},
    {NULL, NULL},
};

static void gpu_alert(struct tm_coll *c, tm_alert_engine *e, int64_t t_ns)
{
    const struct coll_gpu *d = c->p;
    tm_alert_feed_gpus(e, d->g, d->n, t_ns);
}

static void gpu_prom(struct tm_coll *c, tm_text *t)
{
    const struct coll_gpu *d = c->p;
    if (c->valid)
        tm_prom_write_gpus(t, d->g, d->n);
}

static const char *gpu_next_warning(struct tm_coll *c)
{
    const struct coll_gpu *d = c->p;
    return tm_gpu_next_warning(d->gpu);
}

static void gpu_close(struct tm_coll *c)
{
    struct coll_gpu *d = c->p;
    tm_gpu_close(&d->gpu);
    free(d);
}

const struct tm_collector_ops tm_coll_gpu = {
    .name = "gpu",
    .alert_metrics = gpu_alert_metrics,
    .optional = true,
    .open = gpu_open,
    .sample = gpu_sample,
    .record = gpu_record,
    .alert = gpu_alert,
    .prom = gpu_prom,
    .next_warning = gpu_next_warning,
    .close = gpu_close,
};

bool tm_sampler_gpus(const tm_sampler *s, const tm_gpu_stats **gpus, size_t *n)
{
    const struct tm_coll *c = tm_sampler_coll(s, &tm_coll_gpu);
    bool ok = c && c->on && c->valid;
    const struct coll_gpu *d = ok ? c->p : NULL;
    if (gpus)
        *gpus = d ? d->g : NULL;
    if (n)
        *n = d ? d->n : 0;
    return ok;
}
