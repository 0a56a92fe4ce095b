/*
 * export.c - `trainmon export RUN... --format FORMAT [-o OUT]`: a run's
 * records in formats other tools read.  A format is one function in the
 * table below, writing the run (tm_run, all times wall clock) to a stream;
 * docs/DIAGNOSIS.md ("Export") describes each.
 *
 *   csv    long format, one header row: time_s,wall_time,source,rank,series,
 *          labels,value -- one row per series point and per number of an
 *          in-process record (pandas: pd.read_csv, then pivot on series)
 *   jsonl  one JSON object per line: every point, record and event
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "trainmon.h"

struct exp {
    const tm_run *r;
    FILE *f;          /* formats that stream text; NULL for path formats */
    const char *out;  /* -o OUT as given (NULL: stdout) */
    int64_t t0; /* the run's start: time_s = (t - t0) / 1e9 */
    const tm_run_source *src;
    size_t nsrc;
    time_t last_sec; /* cache of the last formatted second */
    char last_iso[32];
};

/* ISO 8601 UTC with milliseconds, strftime once per distinct second. */
static const char *exp_iso(struct exp *e, int64_t ns)
{
    static char buf[48];
    time_t s = (time_t)(ns / 1000000000);
    if (s != e->last_sec || !e->last_iso[0]) {
        struct tm tm;
        if (!gmtime_r(&s, &tm))
            return "";
        strftime(e->last_iso, sizeof e->last_iso, "%Y-%m-%dT%H:%M:%S", &tm);
        e->last_sec = s;
    }
    snprintf(buf, sizeof buf, "%s.%03dZ", e->last_iso, (int)((ns / 1000000) % 1000));
    return buf;
}

/* --- CSV (RFC 4180 quoting: a field with a comma, quote or newline is
 * quoted and its quotes doubled) */

static void csv_field(FILE *f, const char *s)
{
    /* Ill-formed UTF-8 becomes U+FFFD (tm_escape): readers decode the file
     * as UTF-8 and would stop at the first bad byte. */
    bool quote = strpbrk(s, ",\"\n\r") != NULL;
    if (quote)
        fputc('"', f);
    cli_fput_esc(f, TM_ESC_CSV, s, strlen(s));
    if (quote)
        fputc('"', f);
}

static void csv_row(struct exp *e, int64_t t, uint32_t source, const char *series,
                    const char *labels, double v)
{
    if (!isfinite(v))
        return; /* unavailable: left out, never written as 0 */
    const tm_run_source *s = &e->src[source];
    fprintf(e->f, "%.6f,%s,", (double)(t - e->t0) / 1e9, exp_iso(e, t));
    csv_field(e->f, s->path);
    if (s->header.rank >= 0)
        fprintf(e->f, ",%d,", (int)s->header.rank);
    else
        fputs(",,", e->f);
    csv_field(e->f, series);
    fputc(',', e->f);
    csv_field(e->f, labels);
    fprintf(e->f, ",%.17g\n", v);
}

static int export_csv(struct exp *e)
{
    FILE *f = e->f;
    fputs("time_s,wall_time,source,rank,series,labels,value\n", f);
    const tm_run_series *ser;
    size_t ns = tm_run_series_list(e->r, &ser);
    for (size_t i = 0; i < ns; i++)
        for (size_t k = 0; k < ser[i].n; k++)
            csv_row(e, ser[i].t_ns[k], ser[i].source, ser[i].name, ser[i].labels, ser[i].v[k]);
    char lab[1200];
    const tm_run_step *st;
    size_t n = tm_run_steps(e->r, &st);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_step *s = &st[i].s;
        snprintf(lab, sizeof lab, "step=%" PRIu64, s->step);
        csv_row(e, s->end_ns, st[i].source, "step.duration_seconds", lab,
                (double)(s->end_ns - s->start_ns) / 1e9);
        csv_row(e, s->end_ns, st[i].source, "step.data_wait_seconds", lab,
                (double)s->data_wait_ns / 1e9);
    }
    const tm_run_capture *cp;
    n = tm_run_captures(e->r, &cp);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_capture *c = &cp[i].c;
        snprintf(lab, sizeof lab, "tag=%s,step=%" PRIu64 ",device=%d", c->tag, c->step,
                 (int)c->device);
        static const char *const names[] = {
            "memory.allocated_bytes",   "memory.reserved_bytes",   "memory.peak_allocated_bytes",
            "memory.active_bytes",      "memory.inactive_split_bytes",
            "memory.requested_bytes",   "memory.device_free_bytes", "memory.device_total_bytes",
            "memory.alloc_retries",     "memory.ooms",             "memory.host_rss_bytes"};
        const double v[] = {c->allocated,   c->reserved,       c->peak_allocated, c->active,
                            c->inactive_split, c->requested,   c->free_device,    c->total_device,
                            c->num_alloc_retries, c->num_ooms, c->host_rss};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            csv_row(e, cp[i].t_ns, cp[i].source, names[k], lab, v[k]);
    }
    const tm_run_worker *wk;
    n = tm_run_workers(e->r, &wk);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_worker *w = &wk[i].w;
        snprintf(lab, sizeof lab, "worker=%d,pid=%u,batch=%" PRIu64, (int)w->worker_id, w->pid,
                 w->batch);
        csv_row(e, w->end_ns, wk[i].source, "worker.batch_seconds", lab,
                (double)(w->end_ns - w->start_ns) / 1e9);
        csv_row(e, w->end_ns, wk[i].source, "worker.cpu_seconds", lab, w->cpu_s);
        csv_row(e, w->end_ns, wk[i].source, "worker.rss_bytes", lab, w->rss_bytes);
    }
    const tm_run_optstep *os;
    n = tm_run_optsteps(e->r, &os);
    for (size_t i = 0; i < n; i++) {
        snprintf(lab, sizeof lab, "optimizer=%u,step=%" PRIu64, os[i].o.optimizer, os[i].o.step);
        csv_row(e, os[i].o.end_ns, os[i].source, "optimizer.step_seconds", lab,
                (double)(os[i].o.end_ns - os[i].o.start_ns) / 1e9);
    }
    const tm_run_oom *om;
    n = tm_run_ooms(e->r, &om);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_oom *o = &om[i].o;
        snprintf(lab, sizeof lab, "seq=%u,step=%" PRIu64 ",device=%d,phase=%s", o->seq, o->step,
                 (int)o->device, o->phase);
        csv_row(e, om[i].t_ns, om[i].source, "oom.requested_bytes", lab, o->requested);
        csv_row(e, om[i].t_ns, om[i].source, "oom.device_free_bytes", lab, o->free_device);
    }
    return 0;
}

/* --- JSON lines */

static void jstr(FILE *f, const char *s)
{
    cli_json_str(f, s);
}

static void jnum(FILE *f, const char *key, double v)
{
    fprintf(f, ",\"%s\":", key);
    if (isfinite(v))
        fprintf(f, "%.17g", v);
    else
        fputs("null", f);
}

/* The common start of a line: time, source, rank, kind. */
static void jhead(struct exp *e, int64_t t, uint32_t source, const char *kind)
{
    const tm_run_source *s = &e->src[source];
    fprintf(e->f, "{\"t\":%.6f,\"wall_ns\":%" PRId64 ",\"source\":", (double)(t - e->t0) / 1e9, t);
    jstr(e->f, s->path);
    if (s->header.rank >= 0)
        fprintf(e->f, ",\"rank\":%d", (int)s->header.rank);
    else
        fputs(",\"rank\":null", e->f);
    fprintf(e->f, ",\"kind\":\"%s\"", kind);
}

static int export_jsonl(struct exp *e)
{
    FILE *f = e->f;
    const tm_run_series *ser;
    size_t ns = tm_run_series_list(e->r, &ser);
    for (size_t i = 0; i < ns; i++)
        for (size_t k = 0; k < ser[i].n; k++) {
            if (!isfinite(ser[i].v[k]))
                continue;
            jhead(e, ser[i].t_ns[k], ser[i].source, "sample");
            fputs(",\"series\":", f);
            jstr(f, ser[i].name);
            fputs(",\"labels\":", f);
            jstr(f, ser[i].labels);
            fputs(",\"unit\":", f);
            jstr(f, ser[i].unit);
            jnum(f, "value", ser[i].v[k]);
            fputs("}\n", f);
        }
    const tm_run_event *ev;
    size_t n = tm_run_events(e->r, &ev);
    for (size_t i = 0; i < n; i++) {
        jhead(e, ev[i].t_ns, ev[i].source, "event");
        fputs(",\"name\":", f);
        jstr(f, ev[i].name);
        /* As a string: a malformed detail text can never break the line. */
        fputs(",\"json\":", f);
        jstr(f, ev[i].json);
        fputs("}\n", f);
    }
    const tm_run_step *st;
    n = tm_run_steps(e->r, &st);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_step *s = &st[i].s;
        jhead(e, s->end_ns, st[i].source, "step");
        fprintf(f, ",\"step\":%" PRIu64 ",\"start_ns\":%" PRId64, s->step, s->start_ns);
        jnum(f, "duration_s", (double)(s->end_ns - s->start_ns) / 1e9);
        jnum(f, "data_wait_s", (double)s->data_wait_ns / 1e9);
        fprintf(f, ",\"flags\":%u}\n", s->flags);
    }
    const tm_run_capture *cp;
    n = tm_run_captures(e->r, &cp);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_capture *c = &cp[i].c;
        jhead(e, cp[i].t_ns, cp[i].source, "capture");
        fputs(",\"tag\":", f);
        jstr(f, c->tag);
        fprintf(f, ",\"source_kind\":%u,\"device\":%d,\"step\":%" PRIu64, c->source, (int)c->device,
                c->step);
        jnum(f, "allocated", c->allocated);
        jnum(f, "reserved", c->reserved);
        jnum(f, "peak_allocated", c->peak_allocated);
        jnum(f, "active", c->active);
        jnum(f, "inactive_split", c->inactive_split);
        jnum(f, "requested", c->requested);
        jnum(f, "free_device", c->free_device);
        jnum(f, "total_device", c->total_device);
        jnum(f, "num_alloc_retries", c->num_alloc_retries);
        jnum(f, "num_ooms", c->num_ooms);
        jnum(f, "host_rss", c->host_rss);
        fputs("}\n", f);
    }
    const tm_run_phase *ph;
    n = tm_run_phases(e->r, &ph);
    for (size_t i = 0; i < n; i++) {
        jhead(e, ph[i].t_ns, ph[i].source, "phase");
        fputs(",\"name\":", f);
        jstr(f, ph[i].p.name);
        fprintf(f, ",\"enter\":%s,\"depth\":%u,\"step\":%" PRIu64 "}\n",
                ph[i].p.kind == TM_PHASE_ENTER ? "true" : "false", ph[i].p.depth, ph[i].p.step);
    }
    const tm_run_oom *om;
    n = tm_run_ooms(e->r, &om);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_oom *o = &om[i].o;
        jhead(e, om[i].t_ns, om[i].source, "oom");
        fprintf(f, ",\"seq\":%u,\"device\":%d,\"step\":%" PRIu64 ",\"phase\":", o->seq,
                (int)o->device, o->step);
        jstr(f, o->phase);
        fputs(",\"snapshot\":", f);
        jstr(f, o->snapshot);
        jnum(f, "requested", o->requested);
        jnum(f, "free_device", o->free_device);
        jnum(f, "total_device", o->total_device);
        jnum(f, "allocated", o->allocated);
        jnum(f, "reserved", o->reserved);
        fputs("}\n", f);
    }
    const tm_run_worker *wk;
    n = tm_run_workers(e->r, &wk);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_worker *w = &wk[i].w;
        jhead(e, w->end_ns, wk[i].source, "worker");
        fprintf(f, ",\"worker\":%d,\"pid\":%u,\"batch\":%" PRIu64, (int)w->worker_id, w->pid,
                w->batch);
        jnum(f, "batch_time_s", (double)(w->end_ns - w->start_ns) / 1e9);
        jnum(f, "cpu_s", w->cpu_s);
        jnum(f, "rss_bytes", w->rss_bytes);
        fputs("}\n", f);
    }
    const tm_run_optstep *os;
    n = tm_run_optsteps(e->r, &os);
    for (size_t i = 0; i < n; i++) {
        jhead(e, os[i].o.end_ns, os[i].source, "optimizer_step");
        fprintf(f, ",\"optimizer\":%u,\"step\":%" PRIu64, os[i].o.optimizer, os[i].o.step);
        jnum(f, "duration_s", (double)(os[i].o.end_ns - os[i].o.start_ns) / 1e9);
        fputs("}\n", f);
    }
    return 0;
}

/* Chrome/Perfetto trace: one process per record file; tid 1 steps (the
 * data wait a child slice), tid 2 phases; allocator bytes, disk MB/s and
 * GPU utilization and memory as counters; OOMs as instants. */
static int export_chrome(struct exp *e)
{
    size_t clipped = 0;
    int rc = tm_export_chrome(e->r, e->out ? e->out : "/dev/stdout", &clipped);
    if (rc < 0)
        cli_err("%s", tm_last_error());
    else if (clipped)
        cli_warn("%zu slices overran their parent and were cut to nest", clipped);
    return rc;
}

/* TensorBoard event files: OUT/rank<R>/ scalars per step, OUT/system/. */
static int export_tensorboard(struct exp *e)
{
    if (!e->out) {
        cli_err("export: --format tensorboard needs -o DIR");
        return -EINVAL;
    }
    int rc = tm_export_tensorboard(e->r, e->out);
    if (rc < 0)
        cli_err("%s", tm_last_error());
    return rc;
}

/* The formats: adding one is adding a function and a line here.  A path
 * format writes its own file(s) at -o OUT. */
static const struct export_format {
    const char *name;
    int (*write)(struct exp *e);
    bool to_path;
} export_formats[] = {
    {"csv", export_csv, false},
    {"jsonl", export_jsonl, false},
    {"chrome", export_chrome, true},
    {"tensorboard", export_tensorboard, true},
};

static void export_usage(FILE *f)
{
    fputs("usage: trainmon export RUN... --format FORMAT [-o OUT]\n"
          "  write a run's records in another format (docs/DIAGNOSIS.md, \"Export\"):\n",
          f);
    for (size_t i = 0; i < sizeof export_formats / sizeof export_formats[0]; i++)
        fprintf(f, "    %s\n", export_formats[i].name);
    fputs("  -o OUT   write to OUT instead of stdout\n", f);
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *fmt = NULL, *out = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f': fmt = optarg; break;
        case 'o': out = optarg; break;
        case 'h': export_usage(stdout); return 0;
        default: export_usage(stderr); return 2;
        }
    }
    const struct export_format *ef = NULL;
    for (size_t i = 0; fmt && i < sizeof export_formats / sizeof export_formats[0]; i++)
        if (strcmp(fmt, export_formats[i].name) == 0)
            ef = &export_formats[i];
    if (!fmt || !ef) {
        cli_err("export: %s%s (try 'trainmon export --help')", fmt ? "unknown format " : "--format is required", fmt ? fmt : "");
        return 2;
    }
    if (optind >= argc) {
        cli_err("export: no run directory given");
        return 2;
    }
    tm_run *run = NULL;
    if (tm_run_load(&run, (const char *const *)argv + optind, (size_t)(argc - optind)) < 0) {
        cli_err("%s", tm_last_error());
        return 1;
    }
    const char *const *notes;
    size_t nn = tm_run_notes(run, &notes);
    for (size_t i = 0; i < nn; i++)
        cli_err("%s", notes[i]);
    FILE *f = ef->to_path ? NULL : out ? fopen(out, "w") : stdout;
    if (!ef->to_path && !f) {
        cli_err("%s: %s", out, strerror(errno));
        tm_run_free(&run);
        return 1;
    }
    struct exp e = {.r = run, .f = f, .out = out};
    int64_t t1;
    tm_run_span(run, &e.t0, &t1);
    e.nsrc = tm_run_sources(run, &e.src);
    int ret = ef->write(&e) < 0 ? 1 : 0;
    if (f && (fflush(f) != 0 || ferror(f))) {
        cli_err("%s: %s", out ? out : "stdout", strerror(errno));
        ret = 1;
    }
    if (f && out && fclose(f) != 0 && !ret) {
        cli_err("%s: %s", out, strerror(errno));
        ret = 1;
    }
    tm_run_free(&run);
    return ret;
}
