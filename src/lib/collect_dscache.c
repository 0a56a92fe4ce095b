/*
 * collect_dscache.c - the dataset's page-cache residency (dscache.c) as a
 * collector: one reading when the sampler opens it (before `run` starts
 * the job: what the page cache already holds of its data) and one at the
 * sample after
 * tm_sampler_finish (the job has ended: what the run left cached).  Each
 * is recorded once, as the dataset.* series labelled at=start or at=end
 * (series.h, docs/FORMAT.md).
 *
 * Not every tick: a reading walks the data paths and measures up to
 * TM_DSC_SAMPLE files, 5.5 ms of CPU for 1000 files, 63 ms for 20000
 * (make bench, docs/BENCHMARKS.md): 55 times a whole sample of disks,
 * pressure and a process tree (about 100 us).  The two readings are taken
 * before the job starts and after it ended, so they cost the job and its
 * samples nothing; what happens in between is the disk's and the page-in
 * series' to tell.
 *
 * Off (TM_COLL_OFF) without data paths.  No alert input, no /metrics line.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collect.h"
#include "dscache.h"
#include "series.h"
#include "sysrec.h"
#include "util.h"

struct coll_dscache {
    const char *const *paths; /* the sampler's copy */
    size_t npaths;
    bool finishing; /* tm_sampler_finish: take the end reading */
    bool ended;     /* the end reading was taken */
    /* the readings, each recorded once by the tick after it was taken */
    tm_dsc_reading start, end;
    bool pend_start, pend_end;
};

/* A reading is a walk of the job's data: on a hung mount its stat() and
 * open() block in the kernel, so it is taken in a child process with a
 * deadline (deadline.c), the walk's own limit (TM_DSC_WALK_NS) and then
 * some; a reading that does not come is left out, and trainmon goes on. */
#define DSC_WAIT_S 10.0

static int dscache_in_child(void *ctx, void *out)
{
    const struct coll_dscache *d = ctx;
    return tm_dsc_measure(d->paths, d->npaths, out);
}

static int dscache_measure(struct coll_dscache *d, tm_dsc_reading *out)
{
    int rc = tm_call_within(DSC_WAIT_S, dscache_in_child, d, out, sizeof *out);
    if (rc == -ETIMEDOUT)
        return tm_seterr(rc,
                         "dataset cache: no answer from the data's filesystem within %.0f s (a "
                         "hung mount?): the reading is left out",
                         DSC_WAIT_S);
    return rc;
}

static int dscache_open(struct tm_coll *c, const tm_sampler_opts *o)
{
    if (!o->data_paths || !o->ndata_paths)
        return TM_COLL_OFF;
    struct coll_dscache *d = calloc(1, sizeof *d);
    if (!d)
        return tm_seterr(-ENOMEM, "dataset cache: out of memory");
    d->paths = o->data_paths;
    d->npaths = o->ndata_paths;
    c->p = d;
    /* The start reading is taken here, before `run` forks the job: a job
     * that reads at once must not be counted as having found its data
     * cached.  Recorded by the first tick. */
    d->pend_start = dscache_measure(d, &d->start) == 0;
    return 0;
}

static int dscache_sample(struct tm_coll *c, int64_t t_ns)
{
    (void)t_ns;
    struct coll_dscache *d = c->p;
    if (!d->finishing || d->ended)
        return 0; /* the last reading stands; nothing new to record */
    d->ended = true;
    int rc = dscache_measure(d, &d->end);
    if (rc < 0)
        return rc;
    d->pend_end = true;
    return 0;
}

static int dscache_put(tm_rec *w, int64_t t_ns, const char *at, const tm_dsc_reading *r)
{
    const struct tm_sysrec_val vals[] = {
        {TM_SER_DATASET_BYTES, "B", r->bytes},
        {TM_SER_DATASET_FILES, "", r->files},
        {TM_SER_DATASET_CACHED_BYTES, "B", r->cached_bytes},
        {TM_SER_DATASET_CACHED_FRACTION, "ratio", r->cached_fraction},
        {TM_SER_DATASET_FILES_MEASURED, "", r->files_measured},
        {TM_SER_DATASET_WALK_COMPLETE, "",
         isnan(r->bytes) ? NAN
         : r->complete   ? 1.0
                         : 0.0},
        {TM_SER_DATASET_MEMORY_BYTES, "B", r->memory_bytes},
    };
    return tm_sysrec_put(w, t_ns, at, vals, TM_ARRAY_LEN(vals));
}

static int dscache_record(struct tm_coll *c, tm_rec *w, int64_t t_ns)
{
    struct coll_dscache *d = c->p;
    int rc = 0;
    if (d->pend_start) {
        d->pend_start = false;
        rc = dscache_put(w, t_ns, "at=start", &d->start);
    }
    if (d->pend_end && rc == 0) {
        d->pend_end = false;
        rc = dscache_put(w, t_ns, "at=end", &d->end);
    }
    return rc;
}

static void dscache_finish(struct tm_coll *c)
{
    struct coll_dscache *d = c->p;
    d->finishing = true;
}

static void dscache_close(struct tm_coll *c)
{
    free(c->p);
}

const struct tm_collector_ops tm_coll_dscache = {
    .name = "dscache",
    .open = dscache_open,
    .sample = dscache_sample,
    .record = dscache_record,
    .finish = dscache_finish,
    .close = dscache_close,
};
