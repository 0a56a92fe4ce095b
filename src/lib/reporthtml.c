/*
 * reporthtml.c - the report of `trainmon report --html FILE`: one
 * self-contained HTML page (inline CSS, inline SVG drawn here, no script,
 * font or link to fetch) with the run, the summary, the findings with
 * their evidence as tables, and charts on one shared time axis.
 *
 * Charts stay small on long runs: the time axis is cut into HTML_BUCKETS
 * buckets and each line keeps, per bucket, its smallest and its largest
 * value (in time order), so a line has at most 2 * HTML_BUCKETS points
 * whatever the run's length, and spikes survive the downsampling.  A
 * bucket holding only unavailable (NAN) values breaks the line; an empty
 * bucket (sparse samples) does not.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analysis.h"
#include "anatomy.h"
#include "prom.h"
#include "reportfmt.h"
#include "series.h"
#include "units.h"
#include "util.h"

#define HTML_BUCKETS 500
#define HTML_MAX_LINES 32
/* Plot geometry in SVG user units; every chart has the same, so that
 * their time axes line up. */
#define CW 1000.0
#define CH 190.0
#define ML 64.0
#define MR 12.0
#define MT 10.0
#define MB 22.0

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NPALETTE (sizeof palette / sizeof palette[0])

struct line {
    char name[80];
    size_t n;
    const int64_t *t;
    const double *v;
    size_t color;
    bool dashed;
};

struct chart {
    const char *title, *unit;
    double scale; /* value shown = v * scale */
    struct line l[HTML_MAX_LINES];
    size_t nl;
};

/* Arrays built here (steps, captures, workers) live until the page is
 * written; rc is -ENOMEM once an allocation failed. */
struct page {
    tm_text *t;
    int64_t t0, t1;
    void **own;
    size_t nown, capown;
    int rc;
};

static void *page_alloc(struct page *pg, size_t size)
{
    if (pg->nown == pg->capown) {
        size_t cap = pg->capown ? 2 * pg->capown : 64;
        void **p = realloc(pg->own, cap * sizeof *p);
        if (!p) {
            pg->rc = -ENOMEM;
            return NULL;
        }
        pg->own = p;
        pg->capown = cap;
    }
    void *m = malloc(size ? size : 1);
    if (!m) {
        pg->rc = -ENOMEM;
        return NULL;
    }
    pg->own[pg->nown++] = m;
    return m;
}

/* & < > " ' as entities, ill-formed UTF-8 as U+FFFD (tm_escape). */
static void html_esc_n(tm_text *t, const char *s, size_t len)
{
    tm_text_esc(t, TM_ESC_HTML, s, len);
}

static void html_esc(tm_text *t, const char *s)
{
    html_esc_n(t, s, strlen(s));
}

/* <tr><th>k</th><td>v</td></tr>, v escaped. */
static void kv_row(tm_text *t, const char *k, const char *v)
{
    tm_text_puts(t, "<tr><th>");
    html_esc(t, k);
    tm_text_puts(t, "</th><td>");
    html_esc(t, v);
    tm_text_puts(t, "</td></tr>\n");
}

/* --- evidence: a flat JSON object of numbers shown as a table, each
 * number in its key's unit (units.c) with the base-unit value the JSON
 * report has as its tooltip */

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static void evidence_value(tm_text *t, const tm_run *r, const char *key, size_t klen, const char *v,
                           size_t len)
{
    bool num = len && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9'));
    if (num) {
        tm_text_puts(t, "<td title=\"");
        html_esc_n(t, v, len);
        tm_text_puts(t, "\">");
    } else {
        tm_text_puts(t, "<td>");
    }
    tm_unit_json_value(t, TM_ESC_HTML, key, klen, v, len, tm_rpt_pid_name, (void *)r);
    tm_text_puts(t, "</td>");
}

static void evidence_table(tm_text *t, const tm_run *r, const char *json)
{
    const char *p = ws(json);
    size_t nnull = 0;
    if (*p == '{') {
        tm_text_puts(t, "<table class=\"ev\">\n");
        p = ws(p + 1);
        if (*p == '}')
            goto done;
        for (;;) {
            const char *k = p, *ke = *p == '"' ? tm_json_value_end(p) : NULL;
            if (!ke)
                break;
            p = ws(ke);
            if (*p++ != ':')
                break;
            const char *v = ws(p), *ve = tm_json_value_end(v);
            if (!ve)
                break;
            if (ve - v == 4 && memcmp(v, "null", 4) == 0) {
                nnull++; /* listed together below */
                goto next;
            }
            tm_text_puts(t, "<tr><th>");
            html_esc_n(t, k + 1, (size_t)(ke - k - 2));
            tm_text_puts(t, "</th>");
            evidence_value(t, r, k + 1, (size_t)(ke - k - 2), v, (size_t)(ve - v));
            tm_text_puts(t, "</tr>\n");
        next:
            p = ws(ve);
            if (*p == '}')
                goto done;
            if (*p++ != ',')
                break;
            p = ws(p);
        }
        tm_text_puts(t, "</table>\n");
    }
    /* Not the flat object expected: shown as written. */
    tm_text_puts(t, "<pre class=\"ev\">");
    html_esc(t, json);
    tm_text_puts(t, "</pre>\n");
    return;
done:
    if (nnull) {
        /* Unavailable numbers, by name only: a column of "n/a" hides the
         * ones that were measured. */
        tm_text_puts(t, "<tr><th>not measured</th><td class=\"u\">");
        p = ws(ws(json) + 1);
        for (size_t k = 0; *p == '"';) {
            const char *ke = tm_json_value_end(p), *v = ws(ws(ke) + 1), *ve = tm_json_value_end(v);
            if (ve - v == 4 && memcmp(v, "null", 4) == 0) {
                tm_text_puts(t, k++ ? ", " : "");
                html_esc_n(t, p + 1, (size_t)(ke - p - 2));
            }
            p = ws(ve);
            p = ws(*p == ',' ? p + 1 : p);
        }
        tm_text_puts(t, "</td></tr>\n");
    }
    tm_text_puts(t, "</table>\n");
}

/* --- charts */

static double nice_ceil(double v)
{
    if (!(v > 0))
        return 1;
    double e = pow(10, floor(log10(v)));
    static const double steps[] = {1, 2, 2.5, 5, 10};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (v <= steps[i] * e * (1 + 1e-9))
            return steps[i] * e;
    return 10 * e;
}

static void chart_add(struct chart *c, const char *name, size_t n, const int64_t *t,
                      const double *v, size_t color, bool dashed)
{
    if (c->nl >= HTML_MAX_LINES || !n)
        return;
    struct line *l = &c->l[c->nl++];
    snprintf(l->name, sizeof l->name, "%s", name);
    l->n = n;
    l->t = t;
    l->v = v;
    l->color = color;
    l->dashed = dashed;
}

/* One bucket of a line: its extremes and when they occurred. */
struct bucket {
    double lo, hi;
    int64_t tlo, thi;
    size_t finite, nan;
};

static double px_x(const struct page *pg, int64_t t)
{
    return ML +
           (double)tm_sat_sub64(t, pg->t0) / (double)tm_sat_sub64(pg->t1, pg->t0) * (CW - ML - MR);
}

static double px_y(double v, double ymin, double ymax)
{
    return MT + (CH - MT - MB) * (1 - (v - ymin) / (ymax - ymin));
}

static void bucket_flush(struct page *pg, const struct bucket *b, double scale, double ymin,
                         double ymax, bool *pen)
{
    tm_text *t = pg->t;
    if (!b->finite) {
        if (b->nan)
            *pen = false; /* unavailable here: a gap in the line */
        return;
    }
    int64_t ta = b->tlo, tb = b->thi;
    double va = b->lo, vb = b->hi;
    if (ta > tb) {
        ta = b->thi;
        tb = b->tlo;
        va = b->hi;
        vb = b->lo;
    }
    tm_text_printf(t, "%c%.1f %.1f", *pen ? 'L' : 'M', px_x(pg, ta), px_y(va * scale, ymin, ymax));
    if (b->lo != b->hi)
        tm_text_printf(t, "L%.1f %.1f", px_x(pg, tb), px_y(vb * scale, ymin, ymax));
    *pen = true;
}

static void draw_line(struct page *pg, const struct chart *c, const struct line *l, double ymin,
                      double ymax)
{
    tm_text *t = pg->t;
    tm_text_printf(t, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.3\"%s d=\"",
                   palette[l->color % NPALETTE], l->dashed ? " stroke-dasharray=\"5 3\"" : "");
    struct bucket b = {0};
    long cur = -1;
    bool pen = false;
    double span = (double)tm_sat_sub64(pg->t1, pg->t0);
    for (size_t i = 0; i < l->n; i++) {
        if (l->t[i] < pg->t0 || l->t[i] > pg->t1)
            continue;
        long k = (long)((double)tm_sat_sub64(l->t[i], pg->t0) / span * HTML_BUCKETS);
        if (k >= HTML_BUCKETS)
            k = HTML_BUCKETS - 1;
        if (k != cur) {
            if (cur >= 0)
                bucket_flush(pg, &b, c->scale, ymin, ymax, &pen);
            memset(&b, 0, sizeof b);
            cur = k;
        }
        double v = l->v[i];
        if (!isfinite(v)) {
            b.nan++;
            continue;
        }
        if (!b.finite || v < b.lo) {
            b.lo = v;
            b.tlo = l->t[i];
        }
        if (!b.finite || v > b.hi) {
            b.hi = v;
            b.thi = l->t[i];
        }
        b.finite++;
    }
    if (cur >= 0)
        bucket_flush(pg, &b, c->scale, ymin, ymax, &pen);
    tm_text_puts(t, "\"><title>");
    html_esc(t, l->name);
    tm_text_puts(t, "</title></path>\n");
}

static void axis_label(char *buf, size_t cap, double v)
{
    if (v != 0 && fabs(v) < 1e-4)
        snprintf(buf, cap, "%.1e", v);
    else
        snprintf(buf, cap, "%.4g", v);
}

static void draw_chart(struct page *pg, const struct chart *c)
{
    tm_text *t = pg->t;
    double lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < c->nl; i++)
        for (size_t j = 0; j < c->l[i].n; j++) {
            const struct line *l = &c->l[i];
            double v = l->v[j] * c->scale;
            if (!isfinite(v) || l->t[j] < pg->t0 || l->t[j] > pg->t1)
                continue;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    if (!isfinite(lo))
        return; /* nothing to draw */
    double ymin = lo < 0 ? -nice_ceil(-lo) : 0, ymax = nice_ceil(hi);
    if (ymax <= ymin)
        ymax = ymin + 1;
    tm_text_puts(t, "<div class=\"chart\"><h3>");
    html_esc(t, c->title);
    tm_text_puts(t, " <span class=\"u\">(");
    html_esc(t, c->unit);
    tm_text_printf(t, ")</span></h3>\n<svg viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", CW, CH);
    /* Grid and labels: 4 value lines, 6 time ticks (UTC). */
    for (int i = 0; i <= 4; i++) {
        double v = ymin + (ymax - ymin) * i / 4, y = px_y(v, ymin, ymax);
        char lab[32];
        axis_label(lab, sizeof lab, v);
        tm_text_printf(t,
                       "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" class=\"g\"/>"
                       "<text x=\"%.0f\" y=\"%.1f\" class=\"yl\">%s</text>\n",
                       ML, y, CW - MR, y, ML - 4, y + 4, lab);
    }
    for (int i = 0; i <= 5; i++) {
        int64_t tt = pg->t0 + (int64_t)((double)tm_sat_sub64(pg->t1, pg->t0) * i / 5);
        double x = px_x(pg, tt);
        time_t s = (time_t)(tt / 1000000000);
        struct tm tm;
        char lab[32] = "";
        if (gmtime_r(&s, &tm))
            strftime(lab, sizeof lab, "%H:%M:%S", &tm);
        /* Ticks less than 10 s apart would repeat a label: tenths too. */
        if (tm_sat_sub64(pg->t1, pg->t0) < 50 * (int64_t)1000000000 && strlen(lab) == 8)
            snprintf(lab + 8, sizeof lab - 8, ".%d", (int)(tt / 100000000 % 10));
        tm_text_printf(t,
                       "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" class=\"g\"/>"
                       "<text x=\"%.1f\" y=\"%.0f\" class=\"xl%s\">%s</text>\n",
                       x, MT, x, CH - MB, x, CH - 6,
                       i == 0   ? " a0"
                       : i == 5 ? " a1"
                                : "",
                       lab);
    }
    for (size_t i = 0; i < c->nl; i++)
        draw_line(pg, c, &c->l[i], ymin, ymax);
    tm_text_puts(t, "</svg>\n<div class=\"keys\">");
    for (size_t i = 0; i < c->nl; i++) {
        tm_text_printf(t, "<span class=\"key\"><i style=\"border-color:%s%s\"></i>",
                       palette[c->l[i].color % NPALETTE],
                       c->l[i].dashed ? ";border-style:dashed" : "");
        html_esc(t, c->l[i].name);
        tm_text_puts(t, "</span> ");
    }
    tm_text_puts(t, "</div></div>\n");
}

/* Per training process: step time and data wait, from the step records. */
static void charts_steps(struct page *pg, const tm_run *r, const tm_analysis *a)
{
    const tm_run_step *st;
    size_t n = tm_run_steps(r, &st);
    struct chart *step = calloc(2, sizeof *step);
    if (!step) {
        pg->rc = -ENOMEM;
        return;
    }
    struct chart *wait = step + 1;
    step->title = "Step time per rank";
    wait->title = "Data wait per step, per rank";
    step->unit = wait->unit = "s";
    step->scale = wait->scale = 1;
    for (size_t k = 0; k < a->nranks; k++) {
        const tm_an_rank *R = &a->ranks[k];
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += st[i].source == R->source && st[i].s.end_ns > st[i].s.start_ns;
        if (!m)
            continue;
        int64_t *tt = page_alloc(pg, m * sizeof *tt);
        double *vs = page_alloc(pg, m * sizeof *vs), *vw = page_alloc(pg, m * sizeof *vw);
        if (!tt || !vs || !vw)
            break;
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            const tm_inproc_step *s = &st[i].s;
            if (st[i].source != R->source || s->end_ns <= s->start_ns)
                continue;
            tt[j] = s->end_ns;
            vs[j] = tm_ns_diff_s(s->end_ns, s->start_ns);
            vw[j] = s->data_wait_ns >= 0 ? (double)s->data_wait_ns / 1e9 : NAN;
            j++;
        }
        char name[80];
        snprintf(name, sizeof name, "rank %s", R->label);
        chart_add(step, name, m, tt, vs, k, false);
        chart_add(wait, name, m, tt, vw, k, false);
    }
    draw_chart(pg, step);
    draw_chart(pg, wait);
    free(step);
}

/* Per training process: allocated (solid) and reserved (dashed). */
static void chart_alloc(struct page *pg, struct chart *c, const tm_run *r, const tm_analysis *a)
{
    const tm_run_capture *cp;
    size_t n = tm_run_captures(r, &cp);
    c->title = "GPU allocator memory per rank: allocated (solid), reserved (dashed)";
    c->unit = "GiB";
    c->scale = 1.0 / (1024.0 * 1024 * 1024);
    for (size_t k = 0; k < a->nranks; k++) {
        const tm_an_rank *R = &a->ranks[k];
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            m += cp[i].source == R->source;
        if (!m)
            continue;
        int64_t *tt = page_alloc(pg, m * sizeof *tt);
        double *va = page_alloc(pg, m * sizeof *va), *vr = page_alloc(pg, m * sizeof *vr);
        if (!tt || !va || !vr)
            return;
        size_t j = 0;
        for (size_t i = 0; i < n; i++) {
            if (cp[i].source != R->source)
                continue;
            tt[j] = cp[i].t_ns;
            va[j] = cp[i].c.allocated;
            vr[j] = cp[i].c.reserved;
            j++;
        }
        char name[80];
        snprintf(name, sizeof name, "rank %s allocated", R->label);
        chart_add(c, name, m, tt, va, k, false);
        snprintf(name, sizeof name, "rank %s reserved", R->label);
        chart_add(c, name, m, tt, vr, k, true);
    }
    draw_chart(pg, c);
}

/* Whether any value of s is finite and above zero. */
static bool series_active(const tm_run_series *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] > 0)
            return true;
    return false;
}

/* The data disk's (or, without one, each reading disk's) read rate and
 * read await. */
static void charts_disk(struct page *pg, struct chart *c, const tm_run *r, const tm_analysis *a)
{
    const tm_run_series *ser;
    size_t n = tm_run_series_list(r, &ser);
    struct chart *aw = c + 1;
    c->title = a->sum.disk[0] ? "Disk read rate (the disk behind the data)" : "Disk read rate";
    aw->title = "Disk read await (r_await)";
    c->unit = "MB/s";
    aw->unit = "ms";
    c->scale = 1e-6;
    aw->scale = 1e3;
    char dev[40];
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ser[i].name, TM_SER_DISK_READ_BYTES_PER_SECOND) != 0 ||
            !tm_labels_get(ser[i].labels, "device", dev, sizeof dev))
            continue;
        if (a->sum.disk[0] ? strcmp(dev, a->sum.disk) != 0 : !series_active(&ser[i]))
            continue;
        size_t color = c->nl;
        chart_add(c, dev, ser[i].n, ser[i].t_ns, ser[i].v, color, false);
        for (size_t j = 0; j < n; j++) {
            char d2[40];
            if (ser[j].source == ser[i].source &&
                strcmp(ser[j].name, TM_SER_DISK_READ_AWAIT_SECONDS) == 0 &&
                tm_labels_get(ser[j].labels, "device", d2, sizeof d2) && strcmp(d2, dev) == 0) {
                chart_add(aw, dev, ser[j].n, ser[j].t_ns, ser[j].v, color, false);
                break;
            }
        }
        if (c->nl >= 8)
            break;
    }
    draw_chart(pg, c);
    draw_chart(pg, aw);
}

/* Every series called name, labelled by label key, on one chart. */
static void chart_series(struct page *pg, struct chart *c, const tm_run *r, const char *name,
                         const char *key, const char *prefix)
{
    const tm_run_series *ser;
    size_t n = tm_run_series_list(r, &ser);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ser[i].name, name) != 0)
            continue;
        char v[64] = "?", lab[80];
        tm_labels_get(ser[i].labels, key, v, sizeof v);
        snprintf(lab, sizeof lab, "%s%s", prefix, v);
        chart_add(c, lab, ser[i].n, ser[i].t_ns, ser[i].v, c->nl, false);
    }
    draw_chart(pg, c);
}

/* A recorded process's name on a chart: by rank where a record file says
 * which rank the pid is ("rank 1", "rank 1 worker 0"), else "pid comm".
 * Pids are only compared on the host that recorded the series. */
static void process_label(char *buf, size_t cap, const tm_run *r, const tm_run_series *s)
{
    char pid[24] = "?", comm[40] = "";
    tm_labels_get(s->labels, "pid", pid, sizeof pid);
    tm_labels_get(s->labels, "comm", comm, sizeof comm);
    snprintf(buf, cap, "%s %s", pid, comm);
    char *end;
    long p = strtol(pid, &end, 10);
    const tm_run_source *src;
    size_t ns = tm_run_sources(r, &src);
    if (end == pid || *end || p <= 0 || s->source >= ns)
        return;
    char name[64];
    if (tm_rpt_pid_rank(r, p, src[s->source].header.host, name, sizeof name))
        snprintf(buf, cap, "%s", name);
}

/* Process memory: PSS of the recorded processes (RSS without PSS), or,
 * without system samples, the workers' RSS from their batch records. */
static void chart_procmem(struct page *pg, struct chart *c, const tm_run *r)
{
    const tm_run_series *ser;
    size_t n = tm_run_series_list(r, &ser);
    c->unit = "MiB";
    c->scale = 1.0 / (1024.0 * 1024);
    static const char *const names[] = {TM_SER_PROC_PROCESS_PSS_BYTES,
                                        TM_SER_PROC_PROCESS_RSS_BYTES};
    for (size_t w = 0; w < 2 && !c->nl; w++) {
        c->title = w ? "Process memory (RSS)" : "Process memory (PSS)";
        for (size_t i = 0; i < n; i++) {
            if (strcmp(ser[i].name, names[w]) != 0 || !series_active(&ser[i]))
                continue;
            char lab[80];
            process_label(lab, sizeof lab, r, &ser[i]);
            chart_add(c, lab, ser[i].n, ser[i].t_ns, ser[i].v, c->nl, false);
        }
    }
    if (!c->nl) {
        const tm_run_worker *wk;
        size_t nw = tm_run_workers(r, &wk);
        c->title = "DataLoader worker memory (RSS)";
        /* One line per (source, worker id); records are grouped by source. */
        for (size_t i = 0; i < nw && c->nl < HTML_MAX_LINES; i++) {
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++)
                seen = wk[j].source == wk[i].source && wk[j].w.worker_id == wk[i].w.worker_id;
            if (seen)
                continue;
            size_t m = 0;
            for (size_t j = i; j < nw; j++)
                m += wk[j].source == wk[i].source && wk[j].w.worker_id == wk[i].w.worker_id;
            int64_t *tt = page_alloc(pg, m * sizeof *tt);
            double *vv = page_alloc(pg, m * sizeof *vv);
            if (!tt || !vv)
                return;
            size_t k = 0;
            for (size_t j = i; j < nw; j++)
                if (wk[j].source == wk[i].source && wk[j].w.worker_id == wk[i].w.worker_id) {
                    tt[k] = wk[j].w.end_ns;
                    vv[k++] = wk[j].w.rss_bytes;
                }
            char lab[80];
            if (wk[i].rank >= 0)
                snprintf(lab, sizeof lab, "rank %d worker %d", (int)wk[i].rank,
                         (int)wk[i].w.worker_id);
            else
                snprintf(lab, sizeof lab, "worker %d", (int)wk[i].w.worker_id);
            chart_add(c, lab, m, tt, vv, c->nl, false);
        }
    }
    draw_chart(pg, c);
}

static void write_charts(struct page *pg, const tm_run *r, const tm_analysis *a)
{
    if (pg->t1 <= pg->t0)
        return;
    struct chart *c = calloc(2, sizeof *c);
    if (!c) {
        pg->rc = -ENOMEM;
        return;
    }
    tm_text_puts(pg->t, "<h2>Timeline</h2>\n<p class=\"u\">Time in UTC; each line keeps the "
                        "smallest and largest value of every 1/500 of the run.</p>\n");
    charts_steps(pg, r, a);
    chart_alloc(pg, c, r, a);
    memset(c, 0, 2 * sizeof *c);
    charts_disk(pg, c, r, a);
    memset(c, 0, 2 * sizeof *c);
    c->title = "GPU utilization";
    c->unit = "%";
    c->scale = 100;
    chart_series(pg, c, r, TM_SER_GPU_UTILIZATION, "gpu", "gpu ");
    memset(c, 0, sizeof *c);
    c->title = "GPU memory used";
    c->unit = "GiB";
    c->scale = 1.0 / (1024.0 * 1024 * 1024);
    chart_series(pg, c, r, TM_SER_GPU_MEMORY_USED_BYTES, "gpu", "gpu ");
    memset(c, 0, sizeof *c);
    chart_procmem(pg, c, r);
    free(c);
}

/* --- the page */

static const char css[] =
    "body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;"
    "max-width:1040px;padding:0 16px;color:#222;background:#fff}\n"
    "h1{font-size:22px;margin:0 0 8px}h2{font-size:18px;margin:24px 0 8px;"
    "border-bottom:1px solid #ddd}h3{font-size:15px;margin:12px 0 4px}\n"
    "table{border-collapse:collapse;margin:4px 0}th,td{padding:2px 10px 2px 0;"
    "text-align:left;vertical-align:top}th{font-weight:600;color:#444}\n"
    "table.ranks td,table.ranks th{text-align:right;padding:2px 8px;border-bottom:1px solid #eee}\n"
    "table.ev{font-size:13px;margin-left:8px}table.ev th{font-weight:normal;"
    "font-family:monospace;color:#555}\n"
    /* before the .sev-* colours, which its border takes */
    ".verdict{border-left:6px solid #999;padding:6px 14px;margin:8px 0 16px;"
    "background:#f4f4f4}.verdict p{margin:3px 0}.verdict .vt{font-size:17px;font-weight:600}\n"
    ".finding{border-left:4px solid #999;padding:4px 12px;margin:10px 0;background:#fafafa}\n"
    ".sev-high{border-color:#d62728}.sev-medium{border-color:#ff7f0e}"
    ".sev-low{border-color:#1f77b4}.sev-info{border-color:#7f7f7f}\n"
    ".sev{display:inline-block;font-size:12px;padding:0 6px;border-radius:3px;"
    "color:#fff;background:#7f7f7f}.sev-high .sev{background:#d62728}"
    ".sev-medium .sev{background:#ff7f0e}.sev-low .sev{background:#1f77b4}\n"
    ".advice{margin:4px 0}.u{color:#777;font-weight:normal;font-size:12px}\n"
    "code,pre{font-family:ui-monospace,monospace;font-size:13px}"
    "pre{white-space:pre-wrap;word-break:break-all}\n"
    ".chart svg{width:100%;height:auto;display:block}.g{stroke:#e4e4e4;stroke-width:1}\n"
    ".yl{font-size:11px;text-anchor:end;fill:#555}.xl{font-size:11px;text-anchor:middle;"
    "fill:#555}.a0{text-anchor:start}.a1{text-anchor:end}\n"
    ".keys{font-size:12px;margin:2px 0 8px 64px}.key{margin-right:12px;white-space:nowrap}\n"
    ".key i{display:inline-block;width:18px;height:0;border-top:2px solid;"
    "vertical-align:middle;margin-right:4px}\n";

/* The headline (tm_rpt_headline): verdict, cost and top remedy, first on
 * the page. */
static void write_headline(tm_text *t, const tm_analysis *a)
{
    tm_rpt_head h;
    tm_rpt_headline(a, &h);
    if (!h.f)
        return;
    tm_text_puts(t, "<div class=\"verdict sev-");
    html_esc(t, tm_severity_name(h.f->severity));
    tm_text_puts(t, "\"><p class=\"vt\">");
    html_esc(t, h.verdict);
    if (h.f->rank >= 0)
        tm_text_printf(t, " <span class=\"u\">(rank %d)</span>", (int)h.f->rank);
    tm_text_puts(t, "</p>\n");
    if (h.cost[0]) {
        tm_text_puts(t, "<p class=\"vc\">");
        html_esc(t, h.cost);
        tm_text_puts(t, ".</p>\n");
    }
    if (h.remedy[0] && h.f->severity > TM_SEV_INFO) {
        tm_text_puts(t, "<p class=\"vr\"><b>Top remedy:</b> ");
        html_esc(t, h.remedy);
        tm_text_puts(t, "</p>\n");
    }
    tm_text_puts(t, "</div>\n");
}

static void write_header(tm_text *t, const tm_run *r)
{
    const char *const *dirs;
    size_t nd = tm_run_dirs(r, &dirs);
    const tm_run_source *src;
    size_t ns = tm_run_sources(r, &src);
    int64_t s0, s1;
    tm_run_span(r, &s0, &s1);
    tm_text_puts(t, "<h2>Run</h2>\n<table class=\"run\">\n<tr><th>run</th><td>");
    for (size_t i = 0; i < nd; i++) {
        tm_text_puts(t, i ? ", <code>" : "<code>");
        html_esc(t, dirs[i]);
        tm_text_puts(t, "</code>");
    }
    tm_text_puts(t, "</td></tr>\n");
    size_t len = 0;
    const char *cmd = NULL;
    for (size_t i = 0; i < nd && !cmd; i++)
        cmd = tm_rpt_meta_str_array(tm_run_meta(r, i), "command", &len);
    if (cmd) {
        tm_text_puts(t, "<tr><th>command</th><td><code>");
        html_esc_n(t, cmd, len);
        tm_text_puts(t, "</code></td></tr>\n");
    }
    tm_text_puts(t, "<tr><th>host</th><td>");
    for (size_t i = 0, k = 0; i < ns; i++) {
        if (!tm_rpt_first_of_host(src, i))
            continue;
        if (k++)
            tm_text_puts(t, ", ");
        html_esc(t, src[i].header.host);
    }
    char a[48], b[48];
    tm_rpt_iso_time(a, sizeof a, s0);
    tm_rpt_iso_time(b, sizeof b, s1);
    tm_text_printf(t, "</td></tr>\n<tr><th>span</th><td>%s .. %s (%.0f s)</td></tr>\n", a, b,
                   tm_ns_diff_s(s1, s0));
    tm_text_printf(t, "<tr><th>record files</th><td>%zu:", ns);
    for (size_t i = 0; i < ns; i++) {
        tm_text_puts(t, " <code>");
        html_esc(t, src[i].file);
        tm_text_puts(t, "</code>");
    }
    tm_text_puts(t, "</td></tr>\n</table>\n");
}

static void write_summary(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    const tm_an_summary *S = &a->sum;
    char x[64], y[64], z[64], line[512];
    tm_text_puts(t, "<h2>Summary</h2>\n<table class=\"sum\">\n");
    if (a->nranks <= 1)
        snprintf(line, sizeof line, "%zu", S->steps_total);
    else
        snprintf(line, sizeof line, "%zu per process (the most), %zu over %zu processes", S->steps,
                 S->steps_total, a->nranks);
    kv_row(t, "steps", line);
    if (tm_rpt_inference_line(S))
        kv_row(t, "inference", tm_rpt_inference_line(S));
    /* A ring's kept steps are not the run's: say what it dropped, as the
     * text and JSON reports do. */
    tm_ringinfo ri;
    if (tm_run_ring_summary(r, &ri) && ri.steps_dropped) {
        tm_rpt_iso_time(z, sizeof z, ri.kept_from_ns);
        snprintf(line, sizeof line,
                 "%" PRIu64 " steps in all, the oldest %" PRIu64 " dropped; data kept from %s",
                 ri.steps_total, ri.steps_dropped, z);
        kv_row(t, "ring", line);
    }
    tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->step_median_s);
    tm_unit_fmt(y, sizeof y, TM_UNIT_SECONDS, S->compute_median_s);
    snprintf(line, sizeof line, "median %s (compute %s)", x, y);
    kv_row(t, "step time", line);
    tm_rpt_fmt_num(x, sizeof x, 100 * S->data_wait_fraction, 1, "%");
    snprintf(line, sizeof line, "%s of step time", x);
    kv_row(t, "waiting for data", line);
    if (S->ckpt_saves > 0 && S->ckpt_loop_s > 0 && isfinite(S->ckpt_loop_s)) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->ckpt_s);
        snprintf(line, sizeof line, "%zu on the training thread, %s (%.1f%% of the loop)",
                 S->ckpt_saves, x, 100 * S->ckpt_s / S->ckpt_loop_s);
        kv_row(t, "checkpoints", line);
    }
    if (tm_an_stalls_claimed(S)) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->stall_median_s);
        snprintf(line, sizeof line, "%zu steps of %s, every %.0f steps (%.1f%% of the loop)",
                 S->stall_n, x, S->stall_every, 100 * S->stall_share);
        kv_row(t, "stalls", line);
    }
    if (tm_rpt_compile_line(line, sizeof line, S))
        kv_row(t, "torch.compile", line);
    if (S->gc_pauses > 0 && isfinite(S->gc_share)) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->gc_s);
        tm_unit_fmt(y, sizeof y, TM_UNIT_SECONDS, S->gc_max_s);
        snprintf(line, sizeof line, "%zu pauses (%zu full), %s (%.1f%% of the loop), longest %s",
                 S->gc_pauses, S->gc_full, x, 100 * S->gc_share, y);
        kv_row(t, "Python GC", line);
    }
    if (!isnan(S->gpu_util_mean)) {
        char of[96];
        tm_an_gpus_of(of, sizeof of, S);
        snprintf(line, sizeof line, "%.0f%% (%s)", 100 * S->gpu_util_mean, of);
        kv_row(t, "GPU utilization", line);
    }
    if (S->disk[0]) {
        char w[64];
        tm_unit_fmt(w, sizeof w, TM_UNIT_BYTES_RATE, S->disk_read_bps);
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->disk_await_s);
        tm_unit_fmt(y, sizeof y, TM_UNIT_FRACTION, S->disk_util);
        tm_unit_fmt(z, sizeof z, TM_UNIT_BYTES_RATE, S->disk_read_bps_max);
        snprintf(line, sizeof line, "/dev/%s: read %s mean (max %s), await %s, util %s", S->disk, w,
                 z, x, y);
        kv_row(t, "disk", line);
    }
    if (!isnan(S->psi_io_some)) {
        snprintf(line, sizeof line, "some %.0f%%", 100 * S->psi_io_some);
        kv_row(t, "I/O pressure", line);
    }
    if (S->workers) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->worker_batch_median_s);
        tm_rpt_fmt_num(y, sizeof y, S->worker_busy, 2, "");
        snprintf(line, sizeof line, "%zu, %s per batch, %s CPU s per s of fetching", S->workers, x,
                 y);
        kv_row(t, "workers", line);
    }
    tm_text_puts(t, "</table>\n");
    if (!a->nranks)
        return;
    tm_text_puts(t, "<table class=\"ranks\">\n<tr><th>rank</th><th>host</th><th>steps</th>"
                    "<th>step median</th><th>data wait</th><th>peak allocated</th>"
                    "<th>peak reserved</th><th>device</th><th>OOMs</th></tr>\n");
    for (size_t i = 0; i < a->nranks; i++) {
        const tm_an_rank *R = &a->ranks[i];
        char c1[32], c2[32], c3[32], c4[32], c5[32];
        tm_unit_fmt(c1, sizeof c1, TM_UNIT_SECONDS, R->step_median_s);
        tm_rpt_fmt_num(c2, sizeof c2, 100 * R->data_wait_fraction, 1, "%");
        tm_rpt_fmt_num(c3, sizeof c3, R->peak_allocated / (1 << 30), 2, " GiB");
        tm_rpt_fmt_num(c4, sizeof c4, R->peak_reserved / (1 << 30), 2, " GiB");
        tm_rpt_fmt_num(c5, sizeof c5, R->total_device / (1 << 30), 2, " GiB");
        tm_text_puts(t, "<tr><td>");
        html_esc(t, R->label); /* the rank ("0"), else the process's role ("pid42") */
        tm_text_puts(t, "</td><td>");
        html_esc(t, R->host ? R->host : "");
        tm_text_printf(t,
                       "</td><td>%zu</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td>"
                       "<td>%s</td><td>%zu</td></tr>\n",
                       R->steps, c1, c2, c3, c4, c5, R->ooms);
    }
    tm_text_puts(t, "</table>\n");
}

/* The memory anatomy (anatomy.h): one stacked bar per device of each
 * process, parameters, gradients, optimizer state, unknown and
 * activations, on one scale (the largest device total, else the largest
 * bar) so that the bars compare; a row of numbers under each. */
static void write_anatomy(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = tm_anat_latest(r, UINT32_MAX, rows, TM_ANAT_MAX);
    if (!n)
        return;
    static const char *const names[] = {"parameters", "gradients", "optimizer state", "unknown",
                                        "activations"};
    static const char *const colors[] = {"#4c78a8", "#f58518", "#54a24b", "#bab0ac", "#e45756"};
    double scale = 0;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, tm_anat_accounted(&rows[i]->a));
        if (isfinite(rows[i]->a.total_device))
            scale = fmax(scale, rows[i]->a.total_device);
    }
    if (scale <= 0)
        scale = 1;
    const double W = 600;
    tm_text_puts(t, "<h2>Memory anatomy</h2>\n<p class=\"u\">At the lead optimizer's step; "
                    "activations: allocated at the next backward pass's start beyond the rest "
                    "(CUDA only).  Bars on one scale: ");
    char h[32];
    tm_anat_bytes(h, sizeof h, scale);
    html_esc(t, h);
    tm_text_puts(t, ".  ");
    for (size_t k = 0; k < 5; k++)
        tm_text_printf(t, "<span style=\"color:%s\">&#9632;</span> %s ", colors[k], names[k]);
    tm_text_puts(t, "</p>\n<table class=\"ranks\">\n<tr><th>rank</th><th>device</th><th></th>"
                    "<th>params</th><th>grads</th><th>state</th><th>activations</th>"
                    "<th>unknown</th></tr>\n");
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &rows[i]->a;
        const double part[] = {x->params, x->grads, x->optim_state, x->unknown, x->activations};
        const char *label = "?";
        for (size_t j = 0; j < a->nranks; j++)
            if (a->ranks[j].source == rows[i]->source)
                label = a->ranks[j].label;
        char dev[64];
        tm_anat_device(dev, sizeof dev, x);
        tm_text_puts(t, "<tr><td>");
        html_esc(t, label);
        tm_text_puts(t, "</td><td>");
        html_esc(t, dev);
        tm_text_printf(t, "</td><td><svg width=\"%.0f\" height=\"14\">", W);
        double at = 0;
        for (size_t k = 0; k < 5; k++) {
            if (!isfinite(part[k]) || part[k] <= 0)
                continue;
            double w = W * part[k] / scale;
            tm_anat_bytes(h, sizeof h, part[k]);
            tm_text_printf(t,
                           "<rect x=\"%.1f\" y=\"0\" width=\"%.1f\" height=\"14\" "
                           "fill=\"%s\"><title>%s %s</title></rect>",
                           at, w, colors[k], names[k], h);
            at += w;
        }
        tm_text_puts(t, "</svg></td>");
        for (size_t k = 0; k < 5; k++) {
            /* the columns in the header's order: params, grads, state, activations, unknown */
            static const size_t col[] = {0, 1, 2, 4, 3};
            tm_anat_bytes(h, sizeof h, part[col[k]]);
            tm_text_printf(t, "<td>%s</td>", h);
        }
        tm_text_puts(t, "</tr>\n");
    }
    tm_text_puts(t, "</table>\n");
}

static void write_findings(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    tm_text_puts(t, "<h2>Findings</h2>\n");
    if (!a->nf)
        tm_text_puts(t, "<p>none: no steps or memory samples to judge</p>\n");
    for (size_t i = 0; i < a->nf; i++) {
        const tm_finding *f = &a->f[i];
        tm_text_puts(t, "<div class=\"finding sev-");
        html_esc(t, tm_severity_name(f->severity));
        tm_text_puts(t, "\"><h3><span class=\"sev\">");
        html_esc(t, tm_severity_name(f->severity));
        tm_text_puts(t, "</span> <code>");
        html_esc(t, f->id);
        tm_text_puts(t, "</code> ");
        html_esc(t, f->title);
        tm_text_puts(t, "</h3>\n<div class=\"u\">confidence ");
        html_esc(t, tm_confidence_name(f->confidence));
        if (f->rank >= 0)
            tm_text_printf(t, ", rank %d", (int)f->rank);
        tm_text_puts(t, "</div>\n");
        evidence_table(t, r, f->evidence);
        tm_text_puts(t, "<p class=\"advice\"><b>Advice:</b> ");
        html_esc(t, f->advice);
        tm_text_puts(t, "</p></div>\n");
    }
}

int tm_report_html(const tm_run *r, const tm_analysis *a, tm_text *out)
{
    tm_analysis *own = NULL;
    if (!a) {
        int rc = tm_analyze(r, &own);
        if (rc < 0)
            return rc;
        a = own;
    }
    struct page pg = {.t = out};
    tm_run_span(r, &pg.t0, &pg.t1);
    tm_text_puts(
        out, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
             "<meta name=\"viewport\" content=\"width=device-width\">\n<title>trainmon report: ");
    const char *const *dirs;
    size_t nd = tm_run_dirs(r, &dirs);
    for (size_t i = 0; i < nd; i++) {
        if (i)
            tm_text_puts(out, ", ");
        html_esc(out, dirs[i]);
    }
    tm_text_puts(out, "</title>\n<style>\n");
    tm_text_puts(out, css);
    tm_text_puts(out, "</style></head><body>\n");
    /* The verdict, what it costs and the top remedy first, then the charts
     * that show it; the run, the summary and every finding after them. */
    tm_text_puts(out, "<h1>trainmon report</h1>\n");
    write_headline(out, a);
    write_charts(&pg, r, a);
    write_header(out, r);
    write_summary(out, r, a);
    write_anatomy(out, r, a);
    write_findings(out, r, a);
    const char *const *notes;
    size_t nn = tm_run_notes(r, &notes);
    if (nn) {
        tm_text_puts(out, "<h2>Damage (reported from what is intact)</h2>\n<ul>\n");
        for (size_t i = 0; i < nn; i++) {
            tm_text_puts(out, "<li>");
            html_esc(out, notes[i]);
            tm_text_puts(out, "</li>\n");
        }
        tm_text_puts(out, "</ul>\n");
    }
    tm_text_puts(out, "</body></html>\n");
    for (size_t i = 0; i < pg.nown; i++)
        free(pg.own[i]);
    free(pg.own);
    tm_analysis_free(&own);
    return pg.rc ? pg.rc : tm_text_error(out);
}
