/*
 * alert.c - threshold alerts evaluated in-process, for nodes without a
 * Prometheus: `--alert 'disk.r_await_ms > 50 for 3m' --on-alert CMD`.
 *
 * Rules follow Prometheus's alerting semantics, so that a rule moved into a
 * Prometheus rule file later behaves the same: per rule and label set, the
 * condition must hold at every evaluation for the whole `for` duration
 * before the alert fires, one evaluation that breaks it sends a pending
 * alert back to inactive, and a firing alert resolves at the first
 * evaluation where the condition no longer holds (a missing value counts as
 * not holding, as a vanished series does).  An evaluation here is a fed
 * value: the front-ends feed each collector sample once per interval.
 *
 * The runner starts --on-alert commands with fork+exec and never waits for
 * them in the sampling loop: a hung notification script must not stop the
 * flight recorder.  It reaps only its own pids, because `trainmon run` has
 * the training job as a child too.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect.h"
#include "util.h"

extern char **environ;

/* ------------------------------------------------------------ metrics */

struct alert_metric {
    const char *name, *help;
};

/* The run.* inputs, fed by `trainmon run` and `serve --runs` from the training processes'
 * records; the system inputs are declared by the collectors that feed them
 * (collect_*.c, .alert_metrics).  Names and units are documented in
 * docs/ALERTS.md; the run.* names are those of trainmon.on_threshold in
 * python/trainmon, with the run. prefix. */
static const struct alert_metric alert_metrics[] = {
    {"run.steps", "complete steps of a training process so far; labels run, rank"},
    {"run.data_wait_fraction",
     "share of step time spent waiting for data, last 100 steps; labels run, rank"},
    {"run.step_time_seconds", "mean duration of a step, last 100 steps, seconds; labels run, rank"},
    {"run.data_wait_seconds",
     "mean time a step waited for data, last 100 steps, seconds; labels run, rank"},
    {"run.gpu_memory_allocated_fraction",
     "allocator bytes allocated / device memory, last capture; labels run, rank"},
    {"run.gpu_memory_reserved_fraction",
     "allocator bytes reserved / device memory, last capture; labels run, rank"},
    {"run.gpu_memory_allocated_bytes", "allocator bytes allocated, last capture; labels run, rank"},
    {"run.gpu_memory_reserved_bytes", "allocator bytes reserved, last capture; labels run, rank"},

};

const char *tm_alert_metric_help(const char *name)
{
    for (size_t i = 0; i < TM_ARRAY_LEN(alert_metrics); i++)
        if (strcmp(alert_metrics[i].name, name) == 0)
            return alert_metrics[i].help;
    const struct tm_coll_metric *m;
    for (size_t i = 0; (m = tm_collectors_alert_metric(i)); i++)
        if (strcmp(m->name, name) == 0)
            return m->help;
    return NULL;
}

const char *tm_alert_metric_name(size_t i)
{
    if (i < TM_ARRAY_LEN(alert_metrics))
        return alert_metrics[i].name;
    const struct tm_coll_metric *m = tm_collectors_alert_metric(i - TM_ARRAY_LEN(alert_metrics));
    return m ? m->name : NULL;
}

/* -------------------------------------------------------------- rules */

static const char *skip_blanks(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.';
}

/* {k=v, k="v"} into "k=v,k=v".  Returns the position after '}' or NULL. */
static const char *parse_matchers(const char *p, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    p++; /* '{' */
    for (;;) {
        p = skip_blanks(p);
        if (*p == '}')
            return len ? p + 1 : NULL;
        const char *k = p;
        while (is_name_char(*p))
            p++;
        size_t klen = (size_t)(p - k);
        p = skip_blanks(p);
        if (!klen || *p != '=')
            return NULL;
        p = skip_blanks(p + 1);
        const char *v;
        size_t vlen;
        if (*p == '"') {
            v = ++p;
            while (*p && *p != '"')
                p++;
            if (*p != '"')
                return NULL;
            vlen = (size_t)(p - v);
            p++;
        } else {
            v = p;
            while (*p && *p != ',' && *p != '}' && *p != ' ')
                p++;
            vlen = (size_t)(p - v);
        }
        if (!vlen || memchr(v, ',', vlen) || len + klen + vlen + 3 > cap)
            return NULL;
        len += (size_t)snprintf(out + len, cap - len, "%s%.*s=%.*s", len ? "," : "", (int)klen, k,
                                (int)vlen, v);
        p = skip_blanks(p);
        if (*p == ',')
            p++;
        else if (*p != '}')
            return NULL;
    }
}

/* "30s", "3m", "1h", "500ms", "2d" into nanoseconds. */
static int parse_duration(const char *p, const char **end, int64_t *out)
{
    char *e;
    errno = 0;
    double v = strtod(p, &e);
    if (e == p || errno || !isfinite(v) || v < 0 || *p == '+' || *p == '-')
        return -EINVAL;
    double mul;
    if (strncmp(e, "ms", 2) == 0) {
        mul = 1e6;
        e += 2;
    } else if (*e == 's') {
        mul = 1e9;
        e++;
    } else if (*e == 'm') {
        mul = 60e9;
        e++;
    } else if (*e == 'h') {
        mul = 3600e9;
        e++;
    } else if (*e == 'd') {
        mul = 86400e9;
        e++;
    } else {
        return -EINVAL;
    }
    if (is_name_char(*e) || v * mul > 9e18)
        return -EINVAL;
    *out = (int64_t)llround(v * mul);
    *end = e;
    return 0;
}

int tm_alert_rule_parse(const char *text, tm_alert_rule *out)
{
    if (!text || !out)
        return tm_seterr(-EINVAL, "no rule given");
    memset(out, 0, sizeof *out);
    const char *p = skip_blanks(text);
    size_t tlen = strlen(p);
    while (tlen && (p[tlen - 1] == ' ' || p[tlen - 1] == '\t' || p[tlen - 1] == '\n'))
        tlen--;
    if (tlen == 0)
        return tm_seterr(-EINVAL, "'': empty rule (want METRIC OP VALUE [for DURATION])");
    if (tlen >= sizeof out->text)
        return tm_seterr(-EINVAL, "'%.40s...': rule longer than %d bytes", p,
                         TM_ALERT_RULE_MAX - 1);
    memcpy(out->text, p, tlen);
    out->text[tlen] = '\0';
    const char *t = out->text; /* messages quote the trimmed text */
    p = t;

    const char *m = p;
    while (is_name_char(*p))
        p++;
    size_t mlen = (size_t)(p - m);
    if (mlen == 0)
        return tm_seterr(-EINVAL, "'%s': expected a metric name (see docs/ALERTS.md)", t);
    if (mlen >= sizeof out->metric)
        return tm_seterr(-EINVAL, "'%s': unknown metric '%.*s' (see docs/ALERTS.md)", t, (int)mlen,
                         m);
    memcpy(out->metric, m, mlen);
    out->metric[mlen] = '\0';
    if (!tm_alert_metric_help(out->metric))
        return tm_seterr(-EINVAL, "'%s': unknown metric '%s' (see docs/ALERTS.md)", t, out->metric);
    p = skip_blanks(p);
    if (*p == '{') {
        p = parse_matchers(p, out->match, sizeof out->match);
        if (!p)
            return tm_seterr(-EINVAL, "'%s': bad label selector (want {label=value,...})", t);
        p = skip_blanks(p);
    }

    static const struct {
        const char *s;
        enum tm_alert_op op;
    } ops[] = {{">=", TM_ALERT_GE}, {"<=", TM_ALERT_LE}, {"==", TM_ALERT_EQ},
               {"!=", TM_ALERT_NE}, {">", TM_ALERT_GT},  {"<", TM_ALERT_LT}};
    size_t k;
    for (k = 0; k < TM_ARRAY_LEN(ops); k++)
        if (strncmp(p, ops[k].s, strlen(ops[k].s)) == 0)
            break;
    if (k == TM_ARRAY_LEN(ops))
        return tm_seterr(-EINVAL, "'%s': expected an operator (> >= < <= == !=) after '%s'", t,
                         out->metric);
    out->op = ops[k].op;
    p = skip_blanks(p + strlen(ops[k].s));

    char *e;
    errno = 0;
    double v = strtod(p, &e);
    if (e == p || errno || !isfinite(v))
        return tm_seterr(-EINVAL, "'%s': expected a number after '%s'", t, ops[k].s);
    static const char suffixes[] = "KMGT";
    const char *s = *e ? strchr(suffixes, *e) : NULL;
    if (s) {
        v *= pow(1024.0, (double)(s - suffixes + 1));
        e++;
    }
    if (is_name_char(*e))
        return tm_seterr(-EINVAL, "'%s': expected a number after '%s'", t, ops[k].s);
    out->threshold = v;
    p = skip_blanks(e);

    if (strncmp(p, "for", 3) == 0 && (p[3] == ' ' || p[3] == '\t')) {
        const char *d = skip_blanks(p + 3), *dend;
        if (parse_duration(d, &dend, &out->for_ns) < 0)
            return tm_seterr(-EINVAL, "'%s': bad duration '%s' (want e.g. 30s, 3m, 1h)", t, d);
        p = skip_blanks(dend);
    }
    if (*p)
        return tm_seterr(-EINVAL, "'%s': unexpected '%s' (want METRIC OP VALUE [for DURATION])", t,
                         p);
    return 0;
}

/* ------------------------------------------------------------- engine */

enum { SERIES_INACTIVE, SERIES_PENDING, SERIES_FIRING };

struct alert_series {
    char labels[TM_ALERT_LABELS_MAX];
    int state;
    int64_t active_since, fired_at, last_seen;
};

struct alert_rule_state {
    tm_alert_rule r;
    struct alert_series *s;
    size_t n;
};

struct alert_trans {
    uint32_t rule;
    enum tm_alert_status status;
    char labels[TM_ALERT_LABELS_MAX];
    double value;
    int64_t start_ns, end_ns; /* monotonic; end 0 while firing */
};

#define ALERT_QUEUE_CAP 1024
#define ALERT_JSON_CAP 8192

struct tm_alert_engine {
    struct alert_rule_state rules[TM_ALERT_MAX_RULES];
    size_t nrules;
    struct alert_trans *q; /* ring of ALERT_QUEUE_CAP, allocated at first use */
    size_t qhead, qlen;
    uint64_t dropped;
    tm_alert_fn fn;
    void *ctx;
    int64_t real_minus_mono;
    char host[256];
    tm_buf json;
    char labels[TM_ALERT_LABELS_MAX]; /* of the transition handed out */
};

int tm_alert_new(tm_alert_engine **out)
{
    tm_alert_engine *e = calloc(1, sizeof *e);
    if (!e)
        return tm_seterr(-ENOMEM, "alerts: out of memory");
    e->real_minus_mono = tm_now_real_ns() - tm_now_mono_ns();
    if (gethostname(e->host, sizeof e->host - 1) != 0)
        e->host[0] = '\0';
    tm_buf_init(&e->json, ALERT_JSON_CAP);
    *out = e;
    return 0;
}

int tm_alert_add_rule(tm_alert_engine *e, const char *text)
{
    if (e->nrules >= TM_ALERT_MAX_RULES)
        return tm_seterr(-E2BIG, "'%s': more than %d rules", text, TM_ALERT_MAX_RULES);
    struct alert_rule_state *rs = &e->rules[e->nrules];
    int rc = tm_alert_rule_parse(text, &rs->r);
    if (rc < 0)
        return rc;
    rs->s = calloc(TM_ALERT_MAX_SERIES, sizeof *rs->s);
    if (!rs->s)
        return tm_seterr(-ENOMEM, "alerts: out of memory");
    rs->n = 0;
    return (int)e->nrules++;
}

size_t tm_alert_nrules(const tm_alert_engine *e)
{
    return e->nrules;
}

void tm_alert_set_callback(tm_alert_engine *e, tm_alert_fn fn, void *ctx)
{
    e->fn = fn;
    e->ctx = ctx;
}

void tm_alert_set_clock(tm_alert_engine *e, int64_t real_minus_mono_ns)
{
    e->real_minus_mono = real_minus_mono_ns;
}

uint64_t tm_alert_dropped(const tm_alert_engine *e)
{
    return e->dropped;
}

void tm_alert_free(tm_alert_engine **e)
{
    if (!*e)
        return;
    for (size_t i = 0; i < (*e)->nrules; i++)
        free((*e)->rules[i].s);
    free((*e)->q);
    tm_buf_free(&(*e)->json);
    free(*e);
    *e = NULL;
}

/* Whether every "k=v" of match is an element of labels. */
static bool labels_match(const char *labels, const char *match)
{
    const char *m = match;
    while (*m) {
        const char *mend = strchr(m, ',');
        size_t mlen = mend ? (size_t)(mend - m) : strlen(m);
        bool found = false;
        for (const char *l = labels; *l && !found;) {
            const char *lend = strchr(l, ',');
            size_t llen = lend ? (size_t)(lend - l) : strlen(l);
            found = llen == mlen && memcmp(l, m, mlen) == 0;
            l = lend ? lend + 1 : l + llen;
        }
        if (!found)
            return false;
        m = mend ? mend + 1 : m + mlen;
    }
    return true;
}

static bool alert_holds(const tm_alert_rule *r, double v)
{
    if (isnan(v))
        return false;
    switch (r->op) {
    case TM_ALERT_GT:
        return v > r->threshold;
    case TM_ALERT_GE:
        return v >= r->threshold;
    case TM_ALERT_LT:
        return v < r->threshold;
    case TM_ALERT_LE:
        return v <= r->threshold;
    case TM_ALERT_EQ:
        return v == r->threshold;
    case TM_ALERT_NE:
        return v != r->threshold;
    }
    return false;
}

static int json_time(tm_buf *b, int64_t real_ns)
{
    time_t secs = (time_t)(real_ns / 1000000000LL);
    struct tm tmv;
    char stamp[40];
    gmtime_r(&secs, &tmv);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tmv);
    return tm_buf_printf(b, "\"%s.%03dZ\"", stamp, (int)((real_ns % 1000000000LL) / 1000000LL));
}

/* Fills a with the transition and writes its JSON into e->json. */
static void alert_build(tm_alert_engine *e, const struct alert_trans *tr, tm_alert *a)
{
    const tm_alert_rule *r = &e->rules[tr->rule].r;
    memcpy(e->labels, tr->labels, sizeof e->labels);
    *a = (tm_alert){
        .status = tr->status,
        .rule = r->text,
        .metric = r->metric,
        .labels = e->labels,
        .value = tr->value,
        .threshold = r->threshold,
        .for_s = (double)r->for_ns / 1e9,
        .starts_real_ns = tr->start_ns + e->real_minus_mono,
        .ends_real_ns = tr->end_ns ? tr->end_ns + e->real_minus_mono : 0,
        .host = e->host,
    };
    tm_buf *b = &e->json;
    tm_buf_reset(b);
    int bad = 0;
    bad |= tm_buf_printf(b, "{\"status\":\"%s\",\"rule\":\"",
                         tr->status == TM_ALERT_FIRING ? "firing" : "resolved");
    bad |= tm_buf_json_str(b, r->text, strlen(r->text));
    bad |= tm_buf_add(b, "\",\"metric\":\"", sizeof "\",\"metric\":\"" - 1);
    bad |= tm_buf_json_str(b, r->metric, strlen(r->metric));
    bad |= tm_buf_add(b, "\",\"labels\":{", sizeof "\",\"labels\":{" - 1);
    for (const char *l = e->labels; *l;) {
        const char *end = strchr(l, ',');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        const char *eq = memchr(l, '=', len);
        size_t klen = eq ? (size_t)(eq - l) : len;
        bad |= tm_buf_add(b, &",\""[l == e->labels], l == e->labels ? 1 : 2);
        bad |= tm_buf_json_str(b, l, klen);
        bad |= tm_buf_add(b, "\":\"", sizeof "\":\"" - 1);
        if (eq)
            bad |= tm_buf_json_str(b, eq + 1, len - klen - 1);
        bad |= tm_buf_add(b, "\"", sizeof "\"" - 1);
        l = end ? end + 1 : l + len;
    }
    bad |= tm_buf_add(b, "},\"value\":", sizeof "},\"value\":" - 1);
    if (isnan(tr->value) || !isfinite(tr->value))
        bad |= tm_buf_add(b, "null", sizeof "null" - 1);
    else
        bad |= tm_buf_printf(b, "%.10g", tr->value);
    bad |= tm_buf_printf(
        b, ",\"threshold\":%.10g,\"for_seconds\":%.10g,\"starts_at\":", r->threshold, a->for_s);
    bad |= json_time(b, a->starts_real_ns);
    bad |= tm_buf_add(b, ",\"ends_at\":", sizeof ",\"ends_at\":" - 1);
    if (a->ends_real_ns)
        bad |= json_time(b, a->ends_real_ns);
    else
        bad |= tm_buf_add(b, "null", sizeof "null" - 1);
    bad |= tm_buf_add(b, ",\"host\":\"", sizeof ",\"host\":\"" - 1);
    bad |= tm_buf_json_str(b, e->host, strlen(e->host));
    bad |= tm_buf_add(b, "\"}", sizeof "\"}" - 1);
    /* The cap is far above the longest rule and label set: an error here
     * would be a bug, but a truncated object must not go out as valid. */
    a->json = !bad && b->data ? b->data : "{}";
}

static void alert_emit(tm_alert_engine *e, size_t rule, const struct alert_series *s,
                       enum tm_alert_status st, double value, int64_t t)
{
    struct alert_trans tr = {.rule = (uint32_t)rule,
                             .status = st,
                             .value = value,
                             .start_ns = s->fired_at,
                             .end_ns = st == TM_ALERT_RESOLVED ? t : 0};
    memcpy(tr.labels, s->labels, sizeof tr.labels);
    if (e->fn) {
        tm_alert a;
        alert_build(e, &tr, &a);
        e->fn(&a, e->ctx);
        return;
    }
    if (!e->q && !(e->q = calloc(ALERT_QUEUE_CAP, sizeof *e->q))) {
        e->dropped++;
        return;
    }
    if (e->qlen == ALERT_QUEUE_CAP) {
        e->qhead = (e->qhead + 1) % ALERT_QUEUE_CAP;
        e->qlen--;
        e->dropped++;
    }
    e->q[(e->qhead + e->qlen) % ALERT_QUEUE_CAP] = tr;
    e->qlen++;
}

int tm_alert_next(tm_alert_engine *e, tm_alert *out)
{
    if (!e->qlen)
        return 0;
    struct alert_trans tr = e->q[e->qhead];
    e->qhead = (e->qhead + 1) % ALERT_QUEUE_CAP;
    e->qlen--;
    alert_build(e, &tr, out);
    return 1;
}

static void series_remove(struct alert_rule_state *rs, size_t i)
{
    rs->s[i] = rs->s[--rs->n];
}

void tm_alert_feed(tm_alert_engine *e, const char *metric, const char *labels, double value,
                   int64_t t_ns)
{
    if (!e || !metric)
        return;
    if (!labels)
        labels = "";
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    int64_t stale_ns = (int64_t)(TM_ALERT_STALE_S * 1e9);
    for (size_t ri = 0; ri < e->nrules; ri++) {
        struct alert_rule_state *rs = &e->rules[ri];
        if (strcmp(rs->r.metric, metric) != 0)
            continue;
        /* Label sets of this metric that stopped being fed (a device that
         * went away) end like a vanished series. */
        for (size_t i = 0; i < rs->n;) {
            struct alert_series *s = &rs->s[i];
            if (t_ns - s->last_seen > stale_ns && strcmp(s->labels, labels) != 0) {
                if (s->state == SERIES_FIRING)
                    alert_emit(e, ri, s, TM_ALERT_RESOLVED, NAN, t_ns);
                series_remove(rs, i);
                continue;
            }
            i++;
        }
        if (!labels_match(labels, rs->r.match))
            continue;
        struct alert_series *s = NULL;
        size_t si = 0;
        for (; si < rs->n; si++)
            if (strcmp(rs->s[si].labels, labels) == 0) {
                s = &rs->s[si];
                break;
            }
        bool holds = alert_holds(&rs->r, value);
        if (!s) {
            /* Only label sets whose condition holds are tracked. */
            if (!holds || rs->n >= TM_ALERT_MAX_SERIES)
                continue;
            s = &rs->s[rs->n];
            si = rs->n++;
            memset(s, 0, sizeof *s);
            tm_strlcpy(s->labels, labels, sizeof s->labels);
        }
        s->last_seen = t_ns;
        if (!holds) {
            if (s->state == SERIES_FIRING)
                alert_emit(e, ri, s, TM_ALERT_RESOLVED, value, t_ns);
            series_remove(rs, si);
            continue;
        }
        if (s->state == SERIES_INACTIVE) {
            s->state = SERIES_PENDING;
            s->active_since = t_ns;
        }
        if (s->state == SERIES_PENDING && t_ns - s->active_since >= rs->r.for_ns) {
            s->state = SERIES_FIRING;
            s->fired_at = t_ns;
            alert_emit(e, ri, s, TM_ALERT_FIRING, value, t_ns);
        }
    }
}

/* Whether any rule uses the metric: the feeds skip formatting labels for
 * samples no rule looks at. */
static bool alert_wants(const tm_alert_engine *e, const char *prefix)
{
    size_t len = strlen(prefix);
    for (size_t i = 0; i < e->nrules; i++)
        if (strncmp(e->rules[i].r.metric, prefix, len) == 0)
            return true;
    return false;
}

void tm_alert_feed_disks(tm_alert_engine *e, const tm_diskrate *rates, size_t n, int64_t t_ns)
{
    if (!e || !alert_wants(e, "disk."))
        return;
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    char labels[64];
    for (size_t i = 0; i < n; i++) {
        const tm_diskrate *r = &rates[i];
        snprintf(labels, sizeof labels, "device=%s", r->name);
        tm_alert_feed(e, "disk.r_await_ms", labels, r->r_await, t_ns);
        tm_alert_feed(e, "disk.w_await_ms", labels, r->w_await, t_ns);
        tm_alert_feed(e, "disk.util_pct", labels, r->util, t_ns);
        tm_alert_feed(e, "disk.r_mb_s", labels, r->rkb_s / 1024.0, t_ns);
        tm_alert_feed(e, "disk.w_mb_s", labels, r->wkb_s / 1024.0, t_ns);
        tm_alert_feed(e, "disk.aqu_sz", labels, r->aqu_sz, t_ns);
    }
}

static void feed_psi(tm_alert_engine *e, const char *some, const char *full, const tm_psi *p,
                     bool valid, int64_t t)
{
    if (some)
        tm_alert_feed(e, some, "", valid && p->has_some ? p->some_avg10 : NAN, t);
    if (full)
        tm_alert_feed(e, full, "", valid && p->has_full ? p->full_avg10 : NAN, t);
}

void tm_alert_feed_pressure(tm_alert_engine *e, const tm_pressure_stats *ps, int64_t t_ns)
{
    if (!e || !ps || !alert_wants(e, "psi."))
        return;
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    feed_psi(e, "psi.io_some_pct", "psi.io_full_pct", &ps->io, ps->valid & TM_PRESSURE_HAVE_IO,
             t_ns);
    feed_psi(e, "psi.cpu_some_pct", NULL, &ps->cpu, ps->valid & TM_PRESSURE_HAVE_CPU, t_ns);
    feed_psi(e, "psi.mem_some_pct", "psi.mem_full_pct", &ps->mem, ps->valid & TM_PRESSURE_HAVE_MEM,
             t_ns);
}

void tm_alert_feed_gpus(tm_alert_engine *e, const tm_gpu_stats *g, size_t n, int64_t t_ns)
{
    if (!e || !alert_wants(e, "gpu."))
        return;
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    char labels[160];
    for (size_t i = 0; i < n; i++) {
        const tm_gpu_stats *s = &g[i];
        snprintf(labels, sizeof labels, "gpu=%u,uuid=%s", s->index, s->uuid);
        bool mem = (s->valid & TM_GPU_HAVE_MEM) && s->mem_total > 0;
        tm_alert_feed(e, "gpu.util_pct", labels, s->valid & TM_GPU_HAVE_UTIL ? s->util_gpu : NAN,
                      t_ns);
        tm_alert_feed(e, "gpu.mem_used_pct", labels,
                      mem ? 100.0 * (double)s->mem_used / (double)s->mem_total : NAN, t_ns);
        tm_alert_feed(e, "gpu.mem_used_bytes", labels, mem ? (double)s->mem_used : NAN, t_ns);
        tm_alert_feed(e, "gpu.temp_c", labels, s->valid & TM_GPU_HAVE_TEMP ? s->temp_c : NAN, t_ns);
        tm_alert_feed(e, "gpu.power_w", labels, s->valid & TM_GPU_HAVE_POWER ? s->power_w : NAN,
                      t_ns);
    }
}

void tm_alert_feed_ptree(tm_alert_engine *e, const tm_ptree_stats *ts, int64_t t_ns)
{
    if (!e || !ts || !alert_wants(e, "proc."))
        return;
    if (t_ns == 0)
        t_ns = ts->t_ns ? ts->t_ns : tm_now_mono_ns();
    char labels[32];
    snprintf(labels, sizeof labels, "pid=%d", (int)ts->root);
    bool any = ts->nproc > 0;
    tm_alert_feed(e, "proc.cpu_pct", labels, ts->cpu_pct, t_ns);
    tm_alert_feed(e, "proc.d_state", labels, any ? (double)ts->nproc_d : NAN, t_ns);
    tm_alert_feed(e, "proc.read_mb_s", labels, ts->read_bytes_s / 1048576.0, t_ns);
    tm_alert_feed(e, "proc.rss_bytes", labels, ts->rss_bytes, t_ns);
}

/* "k=v,k=v" cannot carry ',' or '=' inside a value (a run's name). */
static void feed_label_value(char *dst, size_t cap, const char *src)
{
    tm_strlcpy(dst, src, cap);
    for (char *p = dst; *p; p++)
        if (*p == ',' || *p == '=')
            *p = '_';
}

void tm_alert_feed_runs(tm_alert_engine *e, const tm_follow *f, int64_t t_ns)
{
    if (!e || !f || !alert_wants(e, "run."))
        return;
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    /* 200 + 32 + "run=,rank=" fit in TM_ALERT_LABELS_MAX: a longer run name is cut. */
    char run[200], rank[32], labels[TM_ALERT_LABELS_MAX];
    const tm_follow_run *R;
    for (size_t i = 0; (R = tm_follow_run_at(f, i)); i++) {
        feed_label_value(run, sizeof run, R->name);
        const tm_follow_rank *k;
        for (size_t j = 0; (k = tm_follow_rank_at(f, i, j)); j++) {
            feed_label_value(rank, sizeof rank, k->label);
            snprintf(labels, sizeof labels, "run=%s,rank=%s", run, rank);
            /* A process that wrote no step record yet has no count, not 0. */
            double steps = k->step_records ? (double)tm_steptally_total(&k->tally, k->ring) : NAN;
            double d, q;
            size_t n = tm_stepwin_sum(&k->win, TM_FOLLOW_WINDOW, &d, &q);
            tm_alert_feed(e, "run.steps", labels, steps, t_ns);
            tm_alert_feed(e, "run.data_wait_fraction", labels, n && d > 0 ? q / d : NAN, t_ns);
            tm_alert_feed(e, "run.step_time_seconds", labels, n ? d / (double)n : NAN, t_ns);
            tm_alert_feed(e, "run.data_wait_seconds", labels, n ? q / (double)n : NAN, t_ns);
            /* No capture, or no device size known: NAN, left unavailable. */
            tm_alert_feed(e, "run.gpu_memory_allocated_fraction", labels,
                          k->allocated / k->total_device, t_ns);
            tm_alert_feed(e, "run.gpu_memory_reserved_fraction", labels,
                          k->reserved / k->total_device, t_ns);
            tm_alert_feed(e, "run.gpu_memory_allocated_bytes", labels, k->allocated, t_ns);
            tm_alert_feed(e, "run.gpu_memory_reserved_bytes", labels, k->reserved, t_ns);
        }
    }
}

/* ------------------------------------------------------------- runner */

#define RUNNER_QUEUE_CAP 256
#define RUNNER_WARN_CAP 16
#define RUNNER_WARN_LEN 512

/* An alert command waiting for a slot: its command index, and what it gets
 * on stdin and in its environment. */
struct alert_job {
    size_t cmd;
    char *json;
    char *env[6];
};

struct alert_child {
    pid_t pid;
    size_t cmd;
    int64_t started_ns;
    bool killed;
};

struct tm_alert_runner {
    char **cmds;
    size_t ncmds;
    unsigned max_running;
    int64_t timeout_ns;
    struct alert_child *run;
    size_t nrun;
    struct alert_job *q;
    size_t qhead, qlen;
    char warn[RUNNER_WARN_CAP][RUNNER_WARN_LEN];
    size_t whead, wlen;
    char cur_warn[RUNNER_WARN_LEN];
};

static void runner_warn(tm_alert_runner *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void runner_warn(tm_alert_runner *r, const char *fmt, ...)
{
    if (r->wlen == RUNNER_WARN_CAP) { /* keep the newest */
        r->whead = (r->whead + 1) % RUNNER_WARN_CAP;
        r->wlen--;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->warn[(r->whead + r->wlen) % RUNNER_WARN_CAP], RUNNER_WARN_LEN, fmt, ap);
    va_end(ap);
    r->wlen++;
}

const char *tm_alert_runner_next_warning(tm_alert_runner *r)
{
    if (!r || !r->wlen)
        return NULL;
    memcpy(r->cur_warn, r->warn[r->whead], RUNNER_WARN_LEN);
    r->whead = (r->whead + 1) % RUNNER_WARN_CAP;
    r->wlen--;
    return r->cur_warn;
}

static void job_free(struct alert_job *j)
{
    free(j->json);
    for (size_t i = 0; i < TM_ARRAY_LEN(j->env); i++)
        free(j->env[i]);
    memset(j, 0, sizeof *j);
}

int tm_alert_runner_new(tm_alert_runner **out, const char *const *cmds, size_t n,
                        unsigned max_running, double timeout_s)
{
    tm_alert_runner *r = calloc(1, sizeof *r);
    if (!r)
        return tm_seterr(-ENOMEM, "alerts: out of memory");
    r->max_running = max_running ? max_running : 4;
    r->timeout_ns = (int64_t)((timeout_s > 0 ? timeout_s : 60.0) * 1e9);
    r->cmds = calloc(n ? n : 1, sizeof *r->cmds);
    r->run = calloc(r->max_running, sizeof *r->run);
    r->q = calloc(RUNNER_QUEUE_CAP, sizeof *r->q);
    if (!r->cmds || !r->run || !r->q)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        if (!(r->cmds[i] = strdup(cmds[i])))
            goto oom;
        r->ncmds++;
    }
    *out = r;
    return 0;
oom:
    tm_alert_runner_free(&r);
    return tm_seterr(-ENOMEM, "alerts: out of memory");
}

void tm_alert_runner_free(tm_alert_runner **r)
{
    if (!*r)
        return;
    for (size_t i = 0; i < (*r)->ncmds; i++)
        free((*r)->cmds[i]);
    free((*r)->cmds);
    if ((*r)->q)
        for (size_t i = 0; i < (*r)->qlen; i++)
            job_free(&(*r)->q[((*r)->qhead + i) % RUNNER_QUEUE_CAP]);
    free((*r)->q);
    free((*r)->run);
    free(*r);
    *r = NULL;
}

/* Forks and execs one job.  Everything the child needs (argv, envp, the
 * stdin pipe already filled) is prepared before fork, so the child only
 * makes async-signal-safe calls: `trainmon serve` forks with its HTTP
 * thread running. */
static int runner_start(tm_alert_runner *r, struct alert_job *j)
{
    const char *cmd = r->cmds[j->cmd];
    size_t nenv = 0;
    for (char **ep = environ; ep && *ep; ep++)
        nenv++;
    char **envp = calloc(nenv + TM_ARRAY_LEN(j->env) + 1, sizeof *envp);
    if (!envp)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < nenv; i++)
        if (strncmp(environ[i], "TRAINMON_ALERT_", 15) != 0)
            envp[k++] = environ[i];
    for (size_t i = 0; i < TM_ARRAY_LEN(j->env); i++)
        envp[k++] = j->env[i];
    envp[k] = NULL;

    int fds[2] = {-1, -1}, rc = 0;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        rc = -errno;
        goto out;
    }
    /* The JSON (at most a few kB) fits in the pipe's buffer (64 kB), so it
     * is written whole now; O_NONBLOCK makes sure a surprise cannot block. */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    size_t jlen = strlen(j->json);
    if (write(fds[1], j->json, jlen) != (ssize_t)jlen || write(fds[1], "\n", 1) != 1) {
        rc = -EPIPE;
        goto out;
    }
    close(fds[1]);
    fds[1] = -1;
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    pid_t pid = fork();
    if (pid < 0) {
        rc = -errno;
        goto out;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fds[0], 0);
        dup2(2, 1); /* keep the caller's stdout (watch --json) clean */
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGPIPE, &dfl, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execve("/bin/sh", argv, envp);
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no race with the kill of an overdue one */
    r->run[r->nrun++] =
        (struct alert_child){.pid = pid, .cmd = j->cmd, .started_ns = tm_now_mono_ns()};
out:
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    free(envp);
    return rc;
}

static char *env_str(const char *name, const char *value)
{
    char *s = NULL;
    if (asprintf(&s, "%s=%s", name, value) < 0)
        return NULL;
    return s;
}

int tm_alert_exec(tm_alert_runner *r, const tm_alert *a)
{
    int first_rc = 0;
    char value[64] = "";
    if (!isnan(a->value))
        snprintf(value, sizeof value, "%.10g", a->value);
    tm_alert_reap(r); /* frees slots that ended since the last interval */
    for (size_t i = 0; i < r->ncmds; i++) {
        struct alert_job j = {.cmd = i};
        j.json = strdup(a->json);
        j.env[0] =
            env_str("TRAINMON_ALERT_STATUS", a->status == TM_ALERT_FIRING ? "firing" : "resolved");
        j.env[1] = env_str("TRAINMON_ALERT_RULE", a->rule);
        j.env[2] = env_str("TRAINMON_ALERT_METRIC", a->metric);
        j.env[3] = env_str("TRAINMON_ALERT_VALUE", value);
        j.env[4] = env_str("TRAINMON_ALERT_LABELS", a->labels);
        j.env[5] = env_str("TRAINMON_ALERT_JSON", a->json);
        bool ok = j.json != NULL;
        for (size_t k = 0; k < TM_ARRAY_LEN(j.env); k++)
            ok = ok && j.env[k];
        int rc = 0;
        if (!ok) {
            rc = -ENOMEM;
        } else if (r->nrun < r->max_running && r->qlen == 0) {
            rc = runner_start(r, &j);
        } else if (r->qlen < RUNNER_QUEUE_CAP) {
            r->q[(r->qhead + r->qlen++) % RUNNER_QUEUE_CAP] = j;
            continue; /* the queue owns it now */
        } else {
            rc = -EBUSY;
        }
        if (rc < 0) {
            runner_warn(r, "--on-alert '%s': %s alert for %s not sent: %s", r->cmds[i],
                        a->status == TM_ALERT_FIRING ? "firing" : "resolved", a->rule,
                        rc == -EBUSY ? "too many commands running or waiting" : strerror(-rc));
            if (!first_rc)
                first_rc = rc;
        }
        job_free(&j);
    }
    return first_rc;
}

size_t tm_alert_reap(tm_alert_runner *r)
{
    if (!r)
        return 0;
    int64_t now = tm_now_mono_ns();
    for (size_t i = 0; i < r->nrun;) {
        struct alert_child *c = &r->run[i];
        int st;
        pid_t p = waitpid(c->pid, &st, WNOHANG);
        if (p == c->pid || (p < 0 && errno == ECHILD)) {
            if (p == c->pid && c->killed)
                runner_warn(r, "--on-alert '%s': killed after %.0f s", r->cmds[c->cmd],
                            (double)r->timeout_ns / 1e9);
            else if (p == c->pid && WIFEXITED(st) && WEXITSTATUS(st) != 0)
                runner_warn(r, "--on-alert '%s': exited with status %d", r->cmds[c->cmd],
                            WEXITSTATUS(st));
            else if (p == c->pid && WIFSIGNALED(st))
                runner_warn(r, "--on-alert '%s': killed by signal %d", r->cmds[c->cmd],
                            WTERMSIG(st));
            r->run[i] = r->run[--r->nrun];
            continue;
        }
        if (!c->killed && now - c->started_ns > r->timeout_ns) {
            kill(-c->pid, SIGKILL); /* its whole process group: sh and what it started */
            kill(c->pid, SIGKILL);
            c->killed = true;
        }
        i++;
    }
    while (r->qlen && r->nrun < r->max_running) {
        struct alert_job *j = &r->q[r->qhead];
        r->qhead = (r->qhead + 1) % RUNNER_QUEUE_CAP;
        r->qlen--;
        int rc = runner_start(r, j);
        if (rc < 0)
            runner_warn(r, "--on-alert '%s': not started: %s", r->cmds[j->cmd], strerror(-rc));
        job_free(j);
    }
    return r->nrun + r->qlen;
}
