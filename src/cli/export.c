/*
 * export.c - `trainmon export RUN... --format FORMAT [-o OUT]`: a run's
 * records in formats other tools read.  A format is one function in the
 * table below, writing the run (tm_run, all times wall clock) to a stream;
 * docs/DIAGNOSIS.md ("Export") describes each.
 *
 *   csv    long format, one header row: time_s,wall_time,source,rank,series,
 *          labels,value -- one row per series point and per number of an
 *          in-process record (pandas: pd.read_csv, then pivot on series)
 *   jsonl  one JSON object per line: every point, record and event; an
 *          in-process record's fields are those of `dump --json` (one schema)
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "trainmon.h"

struct exp {
    const tm_run *r;
    FILE *f;         /* formats that stream text; NULL for path formats */
    const char *out; /* -o OUT as given (NULL: stdout) */
    int64_t t0;      /* the run's start: time_s = (t - t0) / 1e9 */
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
    fprintf(e->f, "%.6f,%s,", tm_clock_diff_s(t, e->t0), exp_iso(e, t));
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
                tm_clock_diff_s(s->end_ns, s->start_ns));
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
            "memory.allocated_bytes",      "memory.reserved_bytes",
            "memory.peak_allocated_bytes", "memory.active_bytes",
            "memory.inactive_split_bytes", "memory.requested_bytes",
            "memory.device_free_bytes",    "memory.device_total_bytes",
            "memory.alloc_retries",        "memory.ooms",
            "memory.host_rss_bytes"};
        const double v[] = {c->allocated,         c->reserved,  c->peak_allocated, c->active,
                            c->inactive_split,    c->requested, c->free_device,    c->total_device,
                            c->num_alloc_retries, c->num_ooms,  c->host_rss};
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
                tm_clock_diff_s(w->end_ns, w->start_ns));
        csv_row(e, w->end_ns, wk[i].source, "worker.cpu_seconds", lab, w->cpu_s);
        csv_row(e, w->end_ns, wk[i].source, "worker.rss_bytes", lab, w->rss_bytes);
    }
    const tm_run_optstep *os;
    n = tm_run_optsteps(e->r, &os);
    for (size_t i = 0; i < n; i++) {
        snprintf(lab, sizeof lab, "optimizer=%u,step=%" PRIu64, os[i].o.optimizer, os[i].o.step);
        csv_row(e, os[i].o.end_ns, os[i].source, "optimizer.step_seconds", lab,
                tm_clock_diff_s(os[i].o.end_ns, os[i].o.start_ns));
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
    const tm_run_anatomy *an;
    n = tm_run_anatomies(e->r, &an);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &an[i].a;
        static const char *const names[] = {"anatomy.params_bytes", "anatomy.grads_bytes",
                                            "anatomy.optim_state_bytes",
                                            "anatomy.activations_bytes", "anatomy.unknown_bytes"};
        const double v[] = {x->params, x->grads, x->optim_state, x->activations, x->unknown};
        snprintf(lab, sizeof lab, "kind=%s,device=%d,step=%" PRIu64, x->kind, (int)x->device,
                 x->step);
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            csv_row(e, an[i].t_ns, an[i].source, names[k], lab, v[k]);
    }
    const tm_run_oomsum *os2;
    n = tm_run_oomsums(e->r, &os2);
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_oomsum *x = &os2[i].o;
        static const char *const names[] = {"oom.largest_free_bytes", "oom.free_cached_bytes",
                                            "oom.free_pieces",        "oom.expandable_usable_bytes",
                                            "oom.live_bytes",         "oom.live_params_bytes",
                                            "oom.live_grads_bytes",   "oom.live_optim_state_bytes",
                                            "oom.live_other_bytes",   "oom.live_unknown_bytes"};
        const double v[] = {x->largest_free, x->free_cached, x->fragments,  x->expandable,
                            x->live,         x->live_params, x->live_grads, x->live_optim_state,
                            x->live_other,   x->live_unknown};
        snprintf(lab, sizeof lab, "seq=%u,step=%" PRIu64 ",device=%d", x->seq, x->step,
                 (int)x->device);
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            csv_row(e, os2[i].t_ns, os2[i].source, names[k], lab, v[k]);
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

/* The common start of a line, the run-level keys: time, record file
 * ("file": "source" is a field of captures and OOMs), rank, kind. */
static void jhead(struct exp *e, int64_t t, uint32_t source, const char *kind)
{
    const tm_run_source *s = &e->src[source];
    fprintf(e->f, "{\"t\":%.6f,\"wall_ns\":%" PRId64 ",\"file\":", tm_clock_diff_s(t, e->t0), t);
    jstr(e->f, s->path);
    if (s->header.rank >= 0)
        fprintf(e->f, ",\"rank\":%d", (int)s->header.rank);
    else
        fputs(",\"rank\":null", e->f);
    fprintf(e->f, ",\"kind\":\"%s\"", kind);
}

/* An in-process record: the run-level keys, then the record's own fields
 * as the library's schema names them (the members `dump --json` prints). */
static size_t jrec(struct exp *e, int64_t t, uint32_t source, uint16_t type, const tm_inproc_any *a,
                   char *buf)
{
    /* Only a crafted record fails: strings far longer than trainmon writes. */
    if (tm_inproc_json(type, a, buf, TM_INPROC_FORMAT_MAX) < 0)
        return 1;
    jhead(e, t, source, tm_inproc_type_name(type));
    fputs(buf, e->f);
    fputs("}\n", e->f);
    return 0;
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
    size_t skipped = 0;
    char *buf = malloc(TM_INPROC_FORMAT_MAX);
    if (!buf) {
        cli_err("export: out of memory");
        return -ENOMEM;
    }
    const tm_run_step *st;
    n = tm_run_steps(e->r, &st);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.step = st[i].s};
        skipped += jrec(e, st[i].s.end_ns, st[i].source, TM_REC_STEP, &a, buf);
    }
    const tm_run_capture *cp;
    n = tm_run_captures(e->r, &cp);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.capture = cp[i].c};
        skipped += jrec(e, cp[i].t_ns, cp[i].source, TM_REC_CAPTURE, &a, buf);
    }
    const tm_run_phase *ph;
    n = tm_run_phases(e->r, &ph);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.phase = ph[i].p};
        skipped += jrec(e, ph[i].t_ns, ph[i].source, TM_REC_PHASE, &a, buf);
    }
    const tm_run_oom *om;
    n = tm_run_ooms(e->r, &om);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.oom = om[i].o};
        skipped += jrec(e, om[i].t_ns, om[i].source, TM_REC_OOM, &a, buf);
    }
    const tm_run_worker *wk;
    n = tm_run_workers(e->r, &wk);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.worker = wk[i].w};
        skipped += jrec(e, wk[i].w.end_ns, wk[i].source, TM_REC_WORKER, &a, buf);
    }
    const tm_run_optstep *os;
    n = tm_run_optsteps(e->r, &os);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.optstep = os[i].o};
        skipped += jrec(e, os[i].o.end_ns, os[i].source, TM_REC_OPTSTEP, &a, buf);
    }
    const tm_run_anatomy *an;
    n = tm_run_anatomies(e->r, &an);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.anatomy = an[i].a};
        skipped += jrec(e, an[i].t_ns, an[i].source, TM_REC_ANATOMY, &a, buf);
    }
    const tm_run_oomsum *sm;
    n = tm_run_oomsums(e->r, &sm);
    for (size_t i = 0; i < n; i++) {
        tm_inproc_any a = {.oomsum = sm[i].o};
        skipped += jrec(e, sm[i].t_ns, sm[i].source, TM_REC_OOMSUM, &a, buf);
    }
    free(buf);
    if (skipped)
        cli_warn("%zu in-process records too long to write were left out", skipped);
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
        case 'f':
            fmt = optarg;
            break;
        case 'o':
            out = optarg;
            break;
        case 'h':
            export_usage(stdout);
            return 0;
        default:
            export_usage(stderr);
            return 2;
        }
    }
    const struct export_format *ef = NULL;
    for (size_t i = 0; fmt && i < sizeof export_formats / sizeof export_formats[0]; i++)
        if (strcmp(fmt, export_formats[i].name) == 0)
            ef = &export_formats[i];
    if (!fmt || !ef) {
        cli_err("export: %s%s (try 'trainmon export --help')",
                fmt ? "unknown format " : "--format is required", fmt ? fmt : "");
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
    /* -o FILE: no symlink followed, no FIFO, no other user's file. */
    int ofd = !ef->to_path && out ? tm_file_open_output(out, 0666) : -1;
    FILE *f = ef->to_path ? NULL : out ? (ofd >= 0 ? fdopen(ofd, "w") : NULL) : stdout;
    if (!ef->to_path && !f) {
        if (ofd >= 0) {
            cli_err("%s: %s", out, strerror(errno));
            close(ofd);
        } else {
            cli_err("%s", tm_last_error());
        }
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
