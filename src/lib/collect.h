/*
 * collect.h - the collector interface behind the sampler (sampler.c).
 *
 * A collector is a table of functions with designated initializers, as
 * htop's meters and nvtop's GPU vendors are: the sampler opens every
 * collector of the table in collectors.c with the caller's options, and on
 * each tick calls, in table order, sample, then record (series into the
 * record file), alert (the alert engine's inputs); tm_sampler_prom calls
 * prom.  A collector only sees its own state and the options; what the
 * front-ends print comes out through the accessors of include/trainmon.h,
 * which each adapter file defines for its own collector.
 *
 * Adding a collector is one file (collect_<name>.c with its ops table) and
 * one line in collectors.c.  Internal.
 */
#ifndef TM_COLLECT_H
#define TM_COLLECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

/* open returns this when the options do not ask for the collector (no
 * process-tree root, --gpu none): not an error, nothing is said. */
#define TM_COLL_OFF 1

/* An alert input a collector feeds: the metric's name and its one-line
 * description for `--alert` validation and docs/ALERTS.md. */
struct tm_coll_metric {
    const char *name, *help;
};

struct tm_coll;

struct tm_collector_ops {
    const char *name; /* "disk": warnings, the /metrics collector label, tm_sampler_on */
    /* Absent hardware is normal (a node without GPUs): a failed open is not
     * exported as a failing collector. */
    bool optional;
    /* Re-opened by tm_sampler_set_root: its open reads the root pid. */
    bool uses_root;
    const struct tm_coll_metric *alert_metrics; /* ends with {NULL, NULL}; NULL: none */

    /* 0, TM_COLL_OFF, or a negative errno with tm_last_error() set.  c->p
     * holds the collector's state from here to close. */
    int (*open)(struct tm_coll *c, const tm_sampler_opts *o);
    /* 0 when the sample is valid, else a negative errno (tm_last_error set). */
    int (*sample)(struct tm_coll *c, int64_t t_ns);
    /* Only after a valid sample.  0 or the writer's negative errno that
     * the user must hear about (a full disk). */
    int (*record)(struct tm_coll *c, tm_rec *w, int64_t t_ns);
    /* Only after a valid sample. */
    void (*alert)(struct tm_coll *c, tm_alert_engine *e, int64_t t_ns);
    /* Whatever the last sample gave (NULL: the collector exports nothing). */
    void (*prom)(struct tm_coll *c, tm_text *t);
    /* The collector's own next queued warning, NULL when none (optional). */
    const char *(*next_warning)(struct tm_coll *c);
    void (*close)(struct tm_coll *c);
    /* tm_sampler_finish: the run ends; the next sample is the last
     * (optional: a collector with an end-of-run reading). */
    void (*finish)(struct tm_coll *c);
};

/* One collector in a sampler. */
struct tm_coll {
    const struct tm_collector_ops *ops;
    void *p;     /* the collector's state, owned by its open/close */
    bool wanted; /* the options asked for it (open did not say TM_COLL_OFF) */
    bool on;     /* opened */
    bool valid;  /* the last sample worked */
    int err;     /* open's or the last sample's negative errno, 0 if none */
    char errmsg[256];
};

/* The table (collectors.c), in sampling, recording and /metrics order. */
extern const struct tm_collector_ops *const tm_collectors[];
extern const size_t tm_ncollectors;

/* The sampler's slot of a collector, for the accessors in the adapter
 * files; NULL when the sampler is NULL. */
const struct tm_coll *tm_sampler_coll(const tm_sampler *s, const struct tm_collector_ops *ops);

/* The i-th alert input declared by the collectors' tables (alert.c lists
 * them after its own), NULL past the end. */
const struct tm_coll_metric *tm_collectors_alert_metric(size_t i);

#endif
