/*
 * sampler.c - the one sampling loop of `watch`, `run` and `serve`: opens
 * the collectors of collectors.c with the caller's options and, once per
 * tick, samples each, records the valid samples and feeds the alert
 * engine.  The front-ends keep only option parsing, printing and their own
 * extras, so a number is sampled, recorded and alerted on the same way
 * whichever command is running.
 *
 * Errors never stop a tick: a collector that fails to open is off (its
 * message kept for the front-end to say in its own words), a failed sample
 * leaves that collector's sample invalid for this tick, and failures are
 * queued as warnings.  A failed append to the record file is queued once
 * per sampler (a full disk fails every append after it); recording goes on
 * being attempted, as a flight-recorder ring may make room again.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collect.h"
#include "util.h"

#define SAMPLER_WARN_CAP 32
#define SAMPLER_WARN_LEN 512

struct sampler_warn {
    enum tm_sampler_warn_kind kind;
    const char *collector;
    int err;
    char msg[SAMPLER_WARN_LEN];
};

struct tm_sampler {
    tm_sampler_opts o;
    /* Copies of the options' arrays (the caller's may be on its stack). */
    char (*disk_names)[TM_DISK_NAME_MAX];
    const char **disk_ptrs;
    unsigned *gpu_idx;
    char **data_paths; /* ndata_paths strdup'ed paths */

    struct tm_coll *c; /* tm_ncollectors */
    bool rec_said;

    struct sampler_warn warn[SAMPLER_WARN_CAP];
    size_t warn_head, warn_n;
    struct sampler_warn out; /* the one handed out last */
};

static void sampler_warn(tm_sampler *s, enum tm_sampler_warn_kind kind, const char *collector,
                         int err, const char *msg)
{
    if (s->warn_n == SAMPLER_WARN_CAP)
        return; /* the oldest are what the user needs to see first */
    struct sampler_warn *w = &s->warn[(s->warn_head + s->warn_n++) % SAMPLER_WARN_CAP];
    w->kind = kind;
    w->collector = collector;
    w->err = err;
    tm_strlcpy(w->msg, msg ? msg : "", sizeof w->msg);
}

int tm_sampler_next_warning(tm_sampler *s, tm_sampler_warning *out)
{
    if (!s || !out || s->warn_n == 0)
        return 0;
    s->out = s->warn[s->warn_head];
    s->warn_head = (s->warn_head + 1) % SAMPLER_WARN_CAP;
    s->warn_n--;
    *out = (tm_sampler_warning){
        .kind = s->out.kind, .collector = s->out.collector, .err = s->out.err, .msg = s->out.msg};
    return 1;
}

static void sampler_open_one(tm_sampler *s, struct tm_coll *c)
{
    c->p = NULL;
    c->on = c->valid = false;
    c->err = 0;
    c->errmsg[0] = '\0';
    int rc = c->ops->open(c, &s->o);
    c->wanted = rc != TM_COLL_OFF;
    if (rc == 0) {
        c->on = true;
    } else if (rc < 0) {
        c->err = rc;
        tm_strlcpy(c->errmsg, tm_last_error(), sizeof c->errmsg);
    }
}

static void sampler_close_one(struct tm_coll *c)
{
    if (c->on)
        c->ops->close(c);
    c->p = NULL;
    c->on = c->valid = false;
}

int tm_sampler_new(tm_sampler **out, const tm_sampler_opts *opts)
{
    if (!out || !opts)
        return tm_seterr(-EINVAL, "tm_sampler_new: NULL argument");
    *out = NULL;
    tm_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return tm_seterr(-ENOMEM, "sampler: out of memory");
    s->o = *opts;
    s->c = calloc(tm_ncollectors, sizeof *s->c);
    if (!s->c)
        goto nomem;
    if (opts->ndisks && opts->disks) {
        s->disk_names = calloc(opts->ndisks, sizeof *s->disk_names);
        s->disk_ptrs = calloc(opts->ndisks, sizeof *s->disk_ptrs);
        if (!s->disk_names || !s->disk_ptrs)
            goto nomem;
        for (size_t i = 0; i < opts->ndisks; i++) {
            tm_strlcpy(s->disk_names[i], opts->disks[i], sizeof s->disk_names[i]);
            s->disk_ptrs[i] = s->disk_names[i];
        }
        s->o.disks = s->disk_ptrs;
    } else {
        s->o.disks = NULL;
        s->o.ndisks = 0;
    }
    if (opts->ngpus && opts->gpus) {
        s->gpu_idx = calloc(opts->ngpus, sizeof *s->gpu_idx);
        if (!s->gpu_idx)
            goto nomem;
        memcpy(s->gpu_idx, opts->gpus, opts->ngpus * sizeof *s->gpu_idx);
        s->o.gpus = s->gpu_idx;
    } else {
        s->o.gpus = NULL;
        s->o.ngpus = 0;
    }
    s->o.data_paths = NULL;
    s->o.ndata_paths = 0;
    if (opts->ndata_paths && opts->data_paths) {
        s->data_paths = calloc(opts->ndata_paths, sizeof *s->data_paths);
        if (!s->data_paths)
            goto nomem;
        s->o.ndata_paths = opts->ndata_paths; /* tm_sampler_free frees what was copied */
        for (size_t i = 0; i < opts->ndata_paths; i++)
            if (opts->data_paths[i] && !(s->data_paths[i] = strdup(opts->data_paths[i])))
                goto nomem;
        s->o.data_paths = (const char *const *)s->data_paths;
    }
    for (size_t i = 0; i < tm_ncollectors; i++) {
        s->c[i].ops = tm_collectors[i];
        sampler_open_one(s, &s->c[i]);
    }
    *out = s;
    return 0;
nomem:
    tm_sampler_free(&s);
    return tm_seterr(-ENOMEM, "sampler: out of memory");
}

int tm_sampler_set_root(tm_sampler *s, pid_t pid)
{
    if (!s || pid < 0)
        return tm_seterr(-EINVAL, "tm_sampler_set_root: bad argument");
    s->o.root_pid = pid;
    s->o.pressure_pid = pid;
    for (size_t i = 0; i < tm_ncollectors; i++)
        if (s->c[i].ops->uses_root) {
            sampler_close_one(&s->c[i]);
            sampler_open_one(s, &s->c[i]);
        }
    return 0;
}

void tm_sampler_set_rec(tm_sampler *s, tm_rec *w)
{
    if (s)
        s->o.rec = w;
}

void tm_sampler_free(tm_sampler **sp)
{
    if (!sp || !*sp)
        return;
    tm_sampler *s = *sp;
    if (s->c)
        for (size_t i = 0; i < tm_ncollectors; i++)
            sampler_close_one(&s->c[i]);
    free(s->c);
    free(s->disk_names);
    free(s->disk_ptrs);
    free(s->gpu_idx);
    if (s->data_paths)
        for (size_t i = 0; i < s->o.ndata_paths; i++)
            free(s->data_paths[i]);
    free(s->data_paths);
    free(s);
    *sp = NULL;
}

/* Samples every open collector and queues what went wrong. */
static void sampler_sample(tm_sampler *s, int64_t t_ns)
{
    for (size_t i = 0; i < tm_ncollectors; i++) {
        struct tm_coll *c = &s->c[i];
        if (!c->on)
            continue;
        int rc = c->ops->sample(c, t_ns);
        c->valid = rc == 0;
        c->err = rc < 0 ? rc : 0;
        if (rc < 0) {
            tm_strlcpy(c->errmsg, tm_last_error(), sizeof c->errmsg);
            sampler_warn(s, TM_SAMPLER_WARN_SAMPLE, c->ops->name, rc, c->errmsg);
        }
        if (c->ops->next_warning)
            for (const char *m; (m = c->ops->next_warning(c));)
                sampler_warn(s, TM_SAMPLER_WARN_NOTE, c->ops->name, 0, m);
    }
}

void tm_sampler_finish(tm_sampler *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < tm_ncollectors; i++)
        if (s->c[i].on && s->c[i].ops->finish)
            s->c[i].ops->finish(&s->c[i]);
}

int tm_sampler_prime(tm_sampler *s)
{
    if (!s)
        return tm_seterr(-EINVAL, "tm_sampler_prime: NULL sampler");
    sampler_sample(s, tm_now_mono_ns());
    return 0;
}

int tm_sampler_tick(tm_sampler *s, int64_t t_ns)
{
    if (!s)
        return tm_seterr(-EINVAL, "tm_sampler_tick: NULL sampler");
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    sampler_sample(s, t_ns);
    for (size_t i = 0; i < tm_ncollectors; i++) {
        struct tm_coll *c = &s->c[i];
        if (!c->valid)
            continue;
        if (s->o.rec && c->ops->record) {
            int rc = c->ops->record(c, s->o.rec, t_ns);
            if (rc < 0 && !s->rec_said) {
                s->rec_said = true;
                sampler_warn(s, TM_SAMPLER_WARN_RECORD, c->ops->name, rc, "");
            }
        }
        if (s->o.alerts && c->ops->alert)
            c->ops->alert(c, s->o.alerts, t_ns);
    }
    return 0;
}

int tm_sampler_prom(tm_sampler *s, tm_text *t)
{
    if (!s || !t)
        return tm_seterr(-EINVAL, "tm_sampler_prom: NULL argument");
    for (size_t i = 0; i < tm_ncollectors; i++)
        if (s->c[i].on && s->c[i].ops->prom)
            s->c[i].ops->prom(&s->c[i], t);
    return tm_text_error(t);
}

const struct tm_coll *tm_sampler_coll(const tm_sampler *s, const struct tm_collector_ops *ops)
{
    if (!s)
        return NULL;
    for (size_t i = 0; i < tm_ncollectors; i++)
        if (s->c[i].ops == ops)
            return &s->c[i];
    return NULL;
}

static const struct tm_coll *sampler_named(const tm_sampler *s, const char *name)
{
    if (!s || !name)
        return NULL;
    for (size_t i = 0; i < tm_ncollectors; i++)
        if (strcmp(s->c[i].ops->name, name) == 0)
            return &s->c[i];
    return NULL;
}

bool tm_sampler_on(const tm_sampler *s, const char *name)
{
    const struct tm_coll *c = sampler_named(s, name);
    return c && c->on;
}

const char *tm_sampler_open_error(const tm_sampler *s, const char *name)
{
    const struct tm_coll *c = sampler_named(s, name);
    return c && c->wanted && !c->on ? c->errmsg : NULL;
}

size_t tm_sampler_collectors(const tm_sampler *s, const char **names, bool *ok, size_t cap)
{
    size_t n = 0;
    if (!s)
        return 0;
    for (size_t i = 0; i < tm_ncollectors && n < cap; i++) {
        const struct tm_coll *c = &s->c[i];
        if (!c->on && !(c->wanted && !c->ops->optional))
            continue;
        if (!c->ops->prom)
            continue; /* exports nothing: not a /metrics collector */
        names[n] = c->ops->name;
        ok[n++] = c->on && c->valid;
    }
    return n;
}

const struct tm_coll_metric *tm_collectors_alert_metric(size_t i)
{
    for (size_t k = 0; k < tm_ncollectors; k++) {
        const struct tm_coll_metric *m = tm_collectors[k]->alert_metrics;
        for (; m && m->name; m++)
            if (i-- == 0)
                return m;
    }
    return NULL;
}
