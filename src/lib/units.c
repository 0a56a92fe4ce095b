/*
 * units.c - numbers for people (units.h).  An evidence number's key says
 * its unit ("_s" seconds, "_bytes" bytes, "_fraction" a share of 1, ...):
 * the rules name every key in base units (docs/DIAGNOSIS.md, "JSON"), so
 * one table of key suffixes formats all of them, and a new key in base
 * units reads well without an edit here.  The text and HTML reports print
 * through this file; JSON keeps the base units.
 *
 * Precision: a scaled number under 1 gets two decimals, under 100 one,
 * above none ("0.42%", "35.7 ms", "123 s"): about three significant
 * digits, which is what a measured wait or rate is worth.
 *
 * tm_fmt_fixed is printf's "%.*f" without printf: `watch --json` prints
 * some sixty numbers a line, and glibc's __printf_fp cost more than the
 * sample they describe (docs/BENCHMARKS.md, "watch --json").
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"
#include "units.h"

/* The first entry whose name is the key or a "_"-separated suffix of it
 * wins: longer suffixes come before the shorter ones they end with. */
static const struct {
    const char *suffix;
    tm_unit unit;
} unit_table[] = {
    {"bytes_per_second", TM_UNIT_BYTES_RATE},
    {"bytes_per_hour", TM_UNIT_BYTES_HOUR},
    {"bytes_per_step", TM_UNIT_BYTES_STEP},
    {"bytes", TM_UNIT_BYTES},
    {"s", TM_UNIT_SECONDS},
    {"fraction", TM_UNIT_FRACTION},
    {"share", TM_UNIT_FRACTION},
    {"share_threshold", TM_UNIT_FRACTION},
    {"busy_threshold", TM_UNIT_FRACTION},   /* gpu.util_swing */
    {"idle_threshold", TM_UNIT_FRACTION},   /* gpu.util_swing */
    {"cached_threshold", TM_UNIT_FRACTION}, /* data.page_cache */
    {"utilization", TM_UNIT_FRACTION},
    {"psi_threshold", TM_UNIT_FRACTION}, /* PSI "some" avg10 as a ratio */
    {"some", TM_UNIT_FRACTION},          /* psi_io_some, psi_cpu_some */
    {"peak_ratio", TM_UNIT_FRACTION},    /* peak over device memory */
    {"percent", TM_UNIT_PERCENT},
    {"speedup", TM_UNIT_FACTOR},
    {"slowdown", TM_UNIT_FACTOR},
    {"slowdown_vs_early", TM_UNIT_FACTOR},
    {"slowdown_threshold", TM_UNIT_FACTOR},
    {"per_compute", TM_UNIT_FACTOR}, /* input.handoff's worker_fetch_per_compute */
    {"steps", TM_UNIT_COUNT},
    {"batches", TM_UNIT_COUNT},
    {"workers", TM_UNIT_COUNT},
    {"processes", TM_UNIT_COUNT},
    {"restarts", TM_UNIT_COUNT},
    {"ooms", TM_UNIT_COUNT},
    {"gpus", TM_UNIT_COUNT},
    {"pid", TM_UNIT_COUNT},
    {"rank", TM_UNIT_COUNT},
};

/* A statistic (or the reading: _start, _end) after the unit keeps it:
 * disk_read_bytes_per_second_max is in bytes per second,
 * dataset_cached_fraction_end a fraction. */
static const char *const statistics[] = {"_max", "_min", "_mean", "_median", "_start", "_end"};

tm_unit tm_unit_of_key(const char *key, size_t len)
{
    for (size_t i = 0; i < sizeof unit_table / sizeof unit_table[0]; i++) {
        size_t n = strlen(unit_table[i].suffix);
        if (n > len || memcmp(key + len - n, unit_table[i].suffix, n) != 0)
            continue;
        if (n == len || key[len - n - 1] == '_')
            return unit_table[i].unit;
    }
    for (size_t i = 0; i < sizeof statistics / sizeof statistics[0]; i++) {
        size_t n = strlen(statistics[i]);
        if (len > n && memcmp(key + len - n, statistics[i], n) == 0)
            return tm_unit_of_key(key, len - n);
    }
    return TM_UNIT_PLAIN;
}

/* x with the precision rule of the top comment and a unit after it. */
static void scaled(char *buf, size_t cap, double x, const char *unit)
{
    double a = fabs(x);
    int prec = a == 0 ? 0 : a < 0.995 ? 2 : a < 99.95 ? 1 : 0; /* "0%", not "0.00%" */
    snprintf(buf, cap, "%.*f%s", prec, x, unit);
}

/* Binary (1024) or decimal (1000) prefixes over base, then suffix. */
static void bytes(char *buf, size_t cap, double v, bool binary, const char *suffix)
{
    static const char *const bin[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    static const char *const dec[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    double step = binary ? 1024.0 : 1000.0, x = v;
    size_t k = 0;
    /* 999.97 MB would print as "1000 MB": move up before rounding does. */
    while (fabs(x) >= step * 0.9995 && k < 5) {
        x /= step;
        k++;
    }
    char unit[24];
    snprintf(unit, sizeof unit, " %s%s", binary ? bin[k] : dec[k], suffix);
    if (k == 0)
        snprintf(buf, cap, "%.0f%s", x, unit); /* whole bytes */
    else
        scaled(buf, cap, x, unit);
}

static void seconds(char *buf, size_t cap, double v)
{
    double a = fabs(v);
    if (a == 0)
        snprintf(buf, cap, "0 s");
    else if (a < 0.9995e-3)
        scaled(buf, cap, v * 1e6, " us");
    else if (a < 0.9995)
        scaled(buf, cap, v * 1e3, " ms");
    else
        scaled(buf, cap, v, " s");
}

/* "1.7x", "1.04x", "12x": two decimals at most, trailing zeros dropped. */
static void factor(char *buf, size_t cap, double v)
{
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.*f", fabs(v) < 99.5 ? 2 : 0, v);
    char *dot = strchr(tmp, '.');
    if (dot) {
        char *e = tmp + strlen(tmp);
        while (e > dot && (e[-1] == '0' || e[-1] == '.'))
            *--e = '\0';
    }
    snprintf(buf, cap, "%sx", tmp);
}

const char *tm_unit_fmt(char *buf, size_t cap, tm_unit u, double v)
{
    if (!cap)
        return buf;
    if (!isfinite(v)) {
        snprintf(buf, cap, "n/a");
        return buf;
    }
    switch (u) {
    case TM_UNIT_COUNT:
        snprintf(buf, cap, "%.0f", v);
        break;
    case TM_UNIT_SECONDS:
        seconds(buf, cap, v);
        break;
    case TM_UNIT_BYTES:
        bytes(buf, cap, v, true, "");
        break;
    case TM_UNIT_BYTES_RATE:
        bytes(buf, cap, v, false, "/s");
        break;
    case TM_UNIT_BYTES_HOUR:
        bytes(buf, cap, v, true, "/h");
        break;
    case TM_UNIT_BYTES_STEP:
        bytes(buf, cap, v, true, "/step");
        break;
    case TM_UNIT_FRACTION:
        scaled(buf, cap, 100 * v, "%");
        break;
    case TM_UNIT_PERCENT:
        scaled(buf, cap, v, "%");
        break;
    case TM_UNIT_FACTOR:
        factor(buf, cap, v);
        break;
    case TM_UNIT_PLAIN:
    default:
        if (v == floor(v) && fabs(v) < 1e15)
            snprintf(buf, cap, "%.0f", v);
        else if (fabs(v) >= 999.5)
            snprintf(buf, cap, "%.0f", v);
        else
            snprintf(buf, cap, "%.3g", v);
        break;
    }
    return buf;
}

/* --- evidence: the JSON objects of the rules (rules.h, struct ev) */

static const char *ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

const char *tm_json_value_end(const char *p)
{
    int depth = 0;
    do {
        if (*p == '"') {
            for (p++; *p != '"'; p++) {
                if (!*p)
                    return NULL;
                if (*p == '\\' && !*++p)
                    return NULL;
            }
            p++;
        } else if (*p == '[' || *p == '{') {
            depth++;
            p++;
        } else if (*p == ']' || *p == '}') {
            if (--depth < 0)
                return NULL;
            p++;
        } else if (!*p) {
            return NULL;
        } else if (depth == 0) {
            const char *s = p;
            while (*p && !strchr(",]} \t\r\n", *p))
                p++;
            if (p == s)
                return NULL; /* a stray ',' where a value should be */
        } else {
            p++;
        }
    } while (depth > 0);
    return p;
}

/* One member of an object at p ("key": value): its key (without quotes)
 * and value.  Returns the position after it (past a ',', or at the '}'
 * that ends the object), or NULL: at the object's end (m untouched) or,
 * with *bad set, when it is not well formed. */
struct member {
    const char *k, *v;
    size_t klen, vlen;
};

static const char *next_member(const char *p, struct member *m, bool *bad)
{
    p = ws(p);
    *bad = false;
    if (*p == '}')
        return NULL;
    const char *ke = *p == '"' ? tm_json_value_end(p) : NULL;
    if (!ke || ws(ke)[0] != ':') {
        *bad = true;
        return NULL;
    }
    const char *v = ws(ws(ke) + 1), *ve = tm_json_value_end(v);
    if (!ve) {
        *bad = true;
        return NULL;
    }
    m->k = p + 1;
    m->klen = (size_t)(ke - p - 2);
    m->v = v;
    m->vlen = (size_t)(ve - v);
    p = ws(ve);
    if (*p == ',')
        return p + 1;
    if (*p != '}')
        *bad = true;
    return *p == '}' ? p : NULL;
}

static bool is_null(const char *v, size_t len)
{
    return len == 4 && memcmp(v, "null", 4) == 0;
}

static bool all_digits(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return len > 0;
}

/* Whether key names a pid: "pid" or "..._pid". */
static bool is_pid_key(const char *key, size_t klen)
{
    return (klen == 3 || (klen > 3 && key[klen - 4] == '_')) && klen >= 3 &&
           memcmp(key + klen - 3, "pid", 3) == 0;
}

void tm_unit_json_value(tm_text *t, tm_esc esc, const char *key, size_t klen, const char *v,
                        size_t len, tm_unit_pid_namer namer, void *ctx)
{
    if (len >= 2 && v[0] == '"') {
        tm_text_esc(t, esc, v + 1, len - 2);
        return;
    }
    if (len >= 2 && v[0] == '{') {
        /* A map of one measure, per rank or per disk: the members are in
         * the parent's unit, and a per_rank map's digit keys are ranks. */
        bool ranks = klen >= 8 && memcmp(key, "per_rank", 8) == 0;
        /* per_rank_sync_wait_s holds sync_wait_s; per_rank, unnamed ones */
        const char *mk = ranks ? key + (klen > 8 ? 9 : 8) : key;
        size_t mklen = ranks ? klen - (size_t)(mk - key) : klen;
        struct member m;
        bool bad = false;
        size_t n = 0;
        tm_text_puts(t, "{");
        for (const char *q = v + 1; q && *q != '}';) {
            m.k = NULL;
            q = next_member(q, &m, &bad);
            if (bad || !m.k)
                break;
            tm_text_puts(t, n++ ? ", " : "");
            if (ranks && all_digits(m.k, m.klen))
                tm_text_puts(t, "rank ");
            tm_text_esc(t, esc, m.k, m.klen);
            tm_text_puts(t, ": ");
            tm_unit_json_value(t, esc, mk, mklen, m.v, m.vlen, namer, ctx);
        }
        tm_text_puts(t, "}");
        return;
    }
    char num[64], *end;
    if (len && len < sizeof num && !is_null(v, len)) {
        memcpy(num, v, len);
        num[len] = '\0';
        double d = strtod(num, &end);
        if (end != num && !*end) {
            char out[64], name[96];
            tm_text_puts(t, tm_unit_fmt(out, sizeof out, tm_unit_of_key(key, klen), d));
            /* by rank, not pid, where the run knows the rank */
            if (namer && is_pid_key(key, klen) && d > 0 && d < 4294967296.0 && d == floor(d) &&
                namer(ctx, (long)d, name, sizeof name)) {
                tm_text_puts(t, " (");
                tm_text_esc(t, esc, name, strnlen(name, sizeof name));
                tm_text_puts(t, ")");
            }
            return;
        }
    }
    if (is_null(v, len)) {
        tm_text_puts(t, "n/a");
        return;
    }
    tm_text_esc(t, esc, v, len); /* true, false, an array: as written */
}

void tm_unit_evidence_line(tm_text *t, tm_esc esc, const char *json, tm_unit_pid_namer namer,
                           void *ctx)
{
    const char *p = ws(json);
    struct member m;
    bool bad = false;
    if (*p != '{')
        goto raw;
    /* Checked whole first: a line half written and then raw would say
     * some numbers twice. */
    for (const char *q = p + 1; q && *q != '}';) {
        m.k = NULL;
        q = next_member(q, &m, &bad);
        if (bad)
            goto raw;
    }
    size_t n = 0, nulls = 0;
    for (const char *q = p + 1; q && *q != '}';) {
        m.k = NULL; /* next_member leaves m alone at the object's end */
        q = next_member(q, &m, &bad);
        if (!m.k || bad)
            break;
        if (is_null(m.v, m.vlen)) {
            nulls++;
        } else {
            tm_text_puts(t, n++ ? ", " : "");
            tm_text_esc(t, esc, m.k, m.klen);
            tm_text_puts(t, " ");
            tm_unit_json_value(t, esc, m.k, m.klen, m.v, m.vlen, namer, ctx);
        }
    }
    if (!nulls)
        return;
    /* Unavailable numbers by name only: a row of "n/a" hides the ones
     * that were measured. */
    tm_text_puts(t, n ? "; not measured: " : "not measured: ");
    n = 0;
    for (const char *q = p + 1; q && *q != '}';) {
        m.k = NULL; /* next_member leaves m alone at the object's end */
        q = next_member(q, &m, &bad);
        if (!m.k || bad)
            break;
        if (is_null(m.v, m.vlen)) {
            tm_text_puts(t, n++ ? ", " : "");
            tm_text_esc(t, esc, m.k, m.klen);
        }
    }
    return;
raw:
    tm_text_esc(t, esc, json, strlen(json));
}

double tm_unit_evidence_num(const char *json, const char *key)
{
    const char *p = ws(json);
    struct member m = {0};
    bool bad = false;
    if (*p != '{')
        return NAN;
    size_t kl = strlen(key);
    for (const char *q = p + 1; q && *q != '}';) {
        m.k = NULL;
        q = next_member(q, &m, &bad);
        if (!m.k || bad)
            return NAN;
        if (m.klen == kl && memcmp(m.k, key, kl) == 0) {
            char num[64], *end;
            if (m.vlen >= sizeof num || is_null(m.v, m.vlen))
                return NAN;
            memcpy(num, m.v, m.vlen);
            num[m.vlen] = '\0';
            double d = strtod(num, &end);
            return end != num && !*end ? d : NAN;
        }
    }
    return NAN;
}

bool tm_unit_evidence_member(const char *json, const char *key, const char **v, size_t *len)
{
    const char *p = ws(json);
    struct member m = {0};
    bool bad = false;
    if (*p != '{')
        return false;
    size_t kl = strlen(key);
    for (const char *q = p + 1; q && *q != '}';) {
        m.k = NULL;
        q = next_member(q, &m, &bad);
        if (!m.k || bad)
            return false;
        if (m.klen == kl && memcmp(m.k, key, kl) == 0) {
            *v = m.v;
            *len = m.vlen;
            return true;
        }
    }
    return false;
}

/* --- printf's "%.*f", fast (trainmon.h) */

size_t tm_fmt_fixed(char *buf, size_t cap, double v, int prec)
{
    static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    if (prec < 0)
        prec = 0;
    if (prec > 9)
        prec = 9;
    double a = fabs(v) * p10[prec];
    /* Beyond 1e15 the scaled value is no longer an exact integer's
     * neighbourhood (doubles hold integers exactly to 2^53): printf's. */
    if (!(a < 1e15) || cap < 32) {
        int n = cap ? snprintf(buf, cap, "%.*f", prec, v) : 0;
        return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    }
    /* Two digits per division, from a table: half the divisions. */
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930"
                                "31323334353637383940414243444546474849505152535455565758596061"
                                "62636465666768697071727374757677787980818283848586878889909192"
                                "93949596979899";
    uint64_t u = (uint64_t)(a + 0.5);
    char rev[24];
    int n = 0;
    while (u >= 100) {
        unsigned d = (unsigned)(u % 100);
        u /= 100;
        rev[n++] = pairs[2 * d + 1];
        rev[n++] = pairs[2 * d];
    }
    if (u >= 10) {
        rev[n++] = pairs[2 * u + 1];
        rev[n++] = pairs[2 * u];
    } else {
        rev[n++] = (char)('0' + u);
    }
    while (n <= prec)
        rev[n++] = '0';
    size_t k = 0;
    if (signbit(v))
        buf[k++] = '-'; /* as printf: "-0.00" for -0.001 */
    while (n > prec)
        buf[k++] = rev[--n];
    if (prec) {
        buf[k++] = '.';
        while (n)
            buf[k++] = rev[--n];
    }
    buf[k] = '\0';
    return k;
}
