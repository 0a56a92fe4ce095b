/*
 * collect_ptree.c - the process-tree collector behind the sampler: the
 * watched job and its descendants (ptree.c), recorded as proc.* series and,
 * when the options ask, as per-process proc.process_* series
 * (sysrec_procs.c), fed as the proc.* alert inputs.  It exports nothing to
 * Prometheus: `serve` watches a node, not a job.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collect.h"
#include "util.h"

struct coll_ptree {
    tm_ptree *tree;
    tm_procrec *procrec; /* NULL unless opts.per_process */
    tm_ptree_stats ts;
};

static int ptree_open(struct tm_coll *c, const tm_sampler_opts *o)
{
    if (o->root_pid <= 0)
        return TM_COLL_OFF;
    struct coll_ptree *d = calloc(1, sizeof *d);
    if (!d)
        return tm_seterr(-ENOMEM, "process tree: out of memory");
    int rc = tm_ptree_open(&d->tree, o->root_pid);
    /* Without the per-process series the tree's own are still recorded. */
    if (rc == 0 && o->per_process && tm_procrec_new(&d->procrec) < 0)
        d->procrec = NULL;
    if (rc < 0) {
        free(d);
        return rc;
    }
    c->p = d;
    return 0;
}

static int ptree_sample(struct tm_coll *c, int64_t t_ns)
{
    (void)t_ns;
    struct coll_ptree *d = c->p;
    memset(&d->ts, 0, sizeof d->ts);
    return tm_ptree_sample(d->tree, &d->ts);
}

static int ptree_record(struct tm_coll *c, tm_rec *w, int64_t t_ns)
{
    struct coll_ptree *d = c->p;
    int rc = tm_sysrec_ptree(w, t_ns, &d->ts);
    if (d->procrec) {
        /* -E2BIG (a ring's series definitions full) loses some processes'
         * series, not the recording: only a full disk is said. */
        int prc = tm_procrec_write(d->procrec, w, t_ns, &d->ts);
        if (rc == 0 && prc == -ENOSPC)
            rc = prc;
    }
    return rc;
}

/* The alert inputs fed below (docs/ALERTS.md). */
static const struct tm_coll_metric ptree_alert_metrics[] = {
    {"proc.cpu_pct", "CPU of the watched process tree, percent of one core; labels pid"},
    {"proc.d_state", "processes of the tree in D state (uninterruptible); labels pid"},
    {"proc.read_mb_s", "block-layer read rate of the tree, MiB/s; labels pid"},
    {"proc.rss_bytes", "resident memory of the tree, bytes; labels pid"},
    {NULL, NULL},
};

static void ptree_alert(struct tm_coll *c, tm_alert_engine *e, int64_t t_ns)
{
    const struct coll_ptree *d = c->p;
    tm_alert_feed_ptree(e, &d->ts, t_ns);
}

static void ptree_close(struct tm_coll *c)
{
    struct coll_ptree *d = c->p;
    tm_ptree_close(&d->tree);
    tm_procrec_free(&d->procrec);
    free(d);
}

const struct tm_collector_ops tm_coll_ptree = {
    .name = "ptree",
    .alert_metrics = ptree_alert_metrics,
    .uses_root = true,
    .open = ptree_open,
    .sample = ptree_sample,
    .record = ptree_record,
    .alert = ptree_alert,
    .close = ptree_close,
};

const tm_ptree_stats *tm_sampler_ptree(const tm_sampler *s)
{
    const struct tm_coll *c = tm_sampler_coll(s, &tm_coll_ptree);
    return c && c->on && c->valid ? &((const struct coll_ptree *)c->p)->ts : NULL;
}
