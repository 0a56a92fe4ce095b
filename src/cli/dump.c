/*
 * dump.c - `trainmon dump FILE [--json]`: every record of a record file, one
 * line each, for people (text) or for jq (JSON lines).  Shapes are in
 * docs/FORMAT.md ("trainmon dump").
 *
 * Series definitions are printed once: a ring file repeats every definition
 * at the start of each block, and those repeats say nothing new.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "trainmon.h"

/* Series ids above this are taken as garbage and shown by number. */
#define DUMP_MAX_SERIES (1u << 20)

typedef struct dump_series {
    char *name, *labels, *unit; /* NULL: not defined (yet) */
} dump_series;

typedef struct dump {
    const char *path;
    bool json;
    int64_t start_mono_ns;
    dump_series *series;
    size_t nseries; /* allocated entries, indexed by id */
    uint32_t *ids;
    double *values;
    size_t cap; /* of ids and values */
} dump;

static void dump_usage(FILE *f)
{
    fputs("usage: trainmon dump FILE [--json]\n"
          "  print every record of a trainmon record file (.tmr), one per line;\n"
          "  --json prints one JSON object per line (docs/FORMAT.md)\n",
          f);
}

/* Text output keeps one line per record: control bytes become '?', and
 * ill-formed UTF-8 U+FFFD (tm_escape). */
static void put_text(const char *s, size_t n)
{
    cli_fput_esc(stdout, TM_ESC_TEXT, s, n);
}

static void put_json_str(const char *s, size_t n)
{
    putchar('"');
    cli_fput_esc(stdout, TM_ESC_JSON, s, n);
    putchar('"');
}

static void put_json_cstr(const char *s)
{
    put_json_str(s, strlen(s));
}

/* "name{labels}" of a series, or "#id" when it was never defined. */
static void put_series_key(const dump *d, uint32_t id, bool json)
{
    const dump_series *s = id < d->nseries ? &d->series[id] : NULL;
    char buf[64];
    if (!s || !s->name) {
        snprintf(buf, sizeof buf, "#%" PRIu32, id);
        if (json)
            put_json_cstr(buf);
        else
            fputs(buf, stdout);
        return;
    }
    size_t nl = strlen(s->name), ll = strlen(s->labels);
    size_t n = nl + ll + 3;
    char *key = malloc(n);
    if (!key)
        return;
    if (ll)
        snprintf(key, n, "%s{%s}", s->name, s->labels);
    else
        snprintf(key, n, "%s", s->name);
    if (json)
        put_json_cstr(key);
    else
        put_text(key, strlen(key));
    free(key);
}

static void put_time(const dump *d, const tm_record *rec)
{
    double t = tm_clock_diff_s(rec->t_ns, d->start_mono_ns); /* saturating: t_ns may be crafted */
    if (d->json)
        printf("{\"t\":%.9f,\"t_ns\":%" PRId64 ",", t, rec->t_ns);
    else
        printf("%.6f  ", t);
}

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static bool same_n(const char *a, const char *b, size_t n)
{
    return a && strlen(a) == n && memcmp(a, b, n) == 0;
}

/* Remembers a definition; false if it repeats the one known already. */
static bool dump_define(dump *d, const tm_rec_series_def *def)
{
    if (def->id >= DUMP_MAX_SERIES)
        return true;
    if (def->id >= d->nseries) {
        size_t n = d->nseries ? d->nseries : 64;
        while (n <= def->id)
            n *= 2;
        dump_series *ns = realloc(d->series, n * sizeof *ns);
        if (!ns)
            return true;
        memset(ns + d->nseries, 0, (n - d->nseries) * sizeof *ns);
        d->series = ns;
        d->nseries = n;
    }
    dump_series *s = &d->series[def->id];
    if (same_n(s->name, def->name, def->name_len) &&
        same_n(s->labels, def->labels, def->labels_len) &&
        same_n(s->unit, def->unit, def->unit_len))
        return false;
    free(s->name);
    free(s->labels);
    free(s->unit);
    s->name = dup_n(def->name, def->name_len);
    s->labels = dup_n(def->labels, def->labels_len);
    s->unit = dup_n(def->unit, def->unit_len);
    if (!s->name || !s->labels || !s->unit) {
        free(s->name);
        free(s->labels);
        free(s->unit);
        s->name = s->labels = s->unit = NULL;
    }
    return true;
}

static void dump_series_rec(dump *d, const tm_record *rec, const tm_rec_series_def *def)
{
    if (!dump_define(d, def))
        return;
    put_time(d, rec);
    if (d->json) {
        printf("\"type\":\"series\",\"id\":%" PRIu32 ",\"name\":", def->id);
        put_json_str(def->name, def->name_len);
        fputs(",\"labels\":", stdout);
        put_json_str(def->labels, def->labels_len);
        fputs(",\"unit\":", stdout);
        put_json_str(def->unit, def->unit_len);
        puts("}");
        return;
    }
    printf("series %" PRIu32 " ", def->id);
    put_text(def->name, def->name_len);
    if (def->labels_len) {
        putchar('{');
        put_text(def->labels, def->labels_len);
        putchar('}');
    }
    if (def->unit_len) {
        fputs(" [", stdout);
        put_text(def->unit, def->unit_len);
        putchar(']');
    }
    putchar('\n');
}

static int dump_sample_rec(dump *d, const tm_record *rec)
{
    int n = tm_rec_decode_sample(rec, NULL, NULL, 0);
    if (n < 0)
        return n;
    if ((size_t)n > d->cap) {
        uint32_t *ids = realloc(d->ids, (size_t)n * sizeof *ids);
        if (ids)
            d->ids = ids;
        double *values = realloc(d->values, (size_t)n * sizeof *values);
        if (values)
            d->values = values;
        if (!ids || !values)
            return -ENOMEM;
        d->cap = (size_t)n;
    }
    tm_rec_decode_sample(rec, d->ids, d->values, d->cap);
    put_time(d, rec);
    fputs(d->json ? "\"type\":\"sample\",\"values\":{" : "sample", stdout);
    for (int i = 0; i < n; i++) {
        if (d->json) {
            if (i)
                putchar(',');
            put_series_key(d, d->ids[i], true);
            if (isfinite(d->values[i]))
                printf(":%.17g", d->values[i]);
            else
                fputs(":null", stdout);
        } else {
            putchar(' ');
            put_series_key(d, d->ids[i], false);
            printf("=%.10g", d->values[i]);
        }
    }
    puts(d->json ? "}}" : "");
    return 0;
}

static void dump_event_rec(dump *d, const tm_record *rec, const tm_rec_event_def *ev)
{
    put_time(d, rec);
    if (d->json) {
        fputs("\"type\":\"event\",\"name\":", stdout);
        put_json_str(ev->name, ev->name_len);
        fputs(",\"json\":", stdout);
        put_json_str(ev->json, ev->json_len);
        puts("}");
        return;
    }
    fputs("event ", stdout);
    put_text(ev->name, ev->name_len);
    if (ev->json_len) {
        putchar(' ');
        put_text(ev->json, ev->json_len);
    }
    putchar('\n');
}

/* Records of unknown types, and known ones whose payload does not decode. */
static void dump_other_rec(dump *d, const tm_record *rec, bool undecodable)
{
    put_time(d, rec);
    if (d->json)
        printf("\"type\":\"unknown\",\"type_id\":%u,\"len\":%" PRIu32 "%s}\n", rec->type, rec->len,
               undecodable ? ",\"undecodable\":true" : "");
    else
        printf("type %u, %" PRIu32 " bytes%s\n", rec->type, rec->len,
               undecodable ? " (undecodable)" : "");
}

/* The in-process records (steps, captures, OOM, ...) format themselves:
 * their keys come from the library's one schema, the same that export
 * jsonl and Python's read_records use. */
static void dump_inproc_rec(dump *d, const tm_record *rec, char *fmt)
{
    if (tm_inproc_format(rec, d->json, fmt, TM_INPROC_FORMAT_MAX) < 0) {
        dump_other_rec(d, rec, true);
        return;
    }
    put_time(d, rec);
    puts(fmt);
}

static void dump_header(const dump *d, const tm_rec_header *h)
{
    char when[64] = "?";
    time_t secs = (time_t)(h->start_real_ns / 1000000000);
    struct tm tmv;
    if (gmtime_r(&secs, &tmv)) {
        char base[48];
        strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tmv);
        snprintf(when, sizeof when, "%s.%03dZ", base,
                 (int)((h->start_real_ns % 1000000000 + 1000000000) % 1000000000 / 1000000));
    }
    if (d->json) {
        printf("{\"type\":\"header\",\"file\":");
        put_json_cstr(d->path);
        printf(",\"version\":%" PRIu32 ",\"host\":", h->version);
        put_json_cstr(h->host);
        printf(",\"pid\":%" PRId32 ",\"rank\":%" PRId32 ",\"role\":", h->pid, h->rank);
        put_json_cstr(h->role);
        printf(",\"start\":\"%s\",\"start_real_ns\":%" PRId64 ",\"start_mono_ns\":%" PRId64
               ",\"block_size\":%" PRIu32 ",\"max_size\":%" PRIu64 "}\n",
               when, h->start_real_ns, h->start_mono_ns, h->block_size, h->max_size);
        return;
    }
    printf("trainmon record file v%" PRIu32 "  host=", h->version);
    put_text(h->host, strlen(h->host));
    printf(" pid=%" PRId32 " rank=%" PRId32 " role=", h->pid, h->rank);
    put_text(h->role, strlen(h->role));
    printf(" start=%s block_size=%" PRIu32, when, h->block_size);
    if (h->max_size)
        printf(" max_size=%" PRIu64 "\n", h->max_size);
    else
        printf(" max_size=unbounded\n");
}

int cmd_dump(int argc, char **argv)
{
    dump d = {.json = false};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            d.json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            dump_usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_err("dump: unknown option %s", argv[i]);
            dump_usage(stderr);
            return 2;
        } else if (d.path) {
            cli_err("dump: one FILE only");
            return 2;
        } else {
            d.path = argv[i];
        }
    }
    if (!d.path) {
        dump_usage(stderr);
        return 2;
    }

    tm_reader *r = NULL;
    if (tm_reader_open(&r, d.path) < 0) {
        cli_err("%s", tm_last_error());
        return 1;
    }
    int ret = 0;
    const tm_rec_header *h = tm_reader_header(r);
    d.start_mono_ns = h->start_mono_ns;
    dump_header(&d, h);

    char *fmt = malloc(TM_INPROC_FORMAT_MAX);
    if (!fmt) {
        cli_err("%s: out of memory", d.path);
        tm_reader_close(&r);
        return 1;
    }
    tm_record rec;
    int rc;
    while ((rc = tm_reader_next(r, &rec)) > 0) {
        tm_rec_series_def sd;
        tm_rec_event_def ev;
        switch (rec.type) {
        case TM_REC_SERIES:
            if (tm_rec_decode_series(&rec, &sd) == 0)
                dump_series_rec(&d, &rec, &sd);
            else
                dump_other_rec(&d, &rec, true);
            break;
        case TM_REC_SAMPLE:
            if (dump_sample_rec(&d, &rec) < 0)
                dump_other_rec(&d, &rec, true);
            break;
        case TM_REC_EVENT:
            if (tm_rec_decode_event(&rec, &ev) == 0)
                dump_event_rec(&d, &rec, &ev);
            else
                dump_other_rec(&d, &rec, true);
            break;
        default:
            if (tm_inproc_is(rec.type))
                dump_inproc_rec(&d, &rec, fmt);
            else
                dump_other_rec(&d, &rec, false);
        }
    }
    fflush(stdout);
    if (rc < 0) {
        cli_err("%s", tm_last_error());
        ret = 1;
    }
    const tm_damage *dmg;
    size_t nd = tm_reader_damage(r, &dmg);
    for (size_t i = 0; i < nd; i++) {
        if (dmg[i].offset == 0)
            cli_err("%s: damaged header (%s), read on", d.path, dmg[i].what);
        else
            cli_err("%s: damaged record at offset %" PRIu64 " (%s), skipped", d.path, dmg[i].offset,
                    dmg[i].what);
    }
    if (tm_reader_torn_tail(r))
        cli_err("%s: torn last record (the writer stopped in the middle of it), ignored", d.path);

    tm_reader_close(&r);
    free(fmt);
    for (size_t i = 0; i < d.nseries; i++) {
        free(d.series[i].name);
        free(d.series[i].labels);
        free(d.series[i].unit);
    }
    free(d.series);
    free(d.ids);
    free(d.values);
    return ret;
}
