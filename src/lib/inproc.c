/*
 * inproc.c - the payloads of the in-process records (python/trainmon):
 * encoders used by the CPython extension, decoders and the `trainmon dump`
 * formatter.  The byte layouts are in docs/FORMAT.md ("In-process
 * records"); this file is the only place that knows the offsets.
 *
 * Fields are stored at fixed little-endian offsets through memcpy (the
 * build refuses big-endian hosts in rec.h), so a payload never depends on
 * the compiler's struct padding.  Decoders accept a payload longer than
 * they need for the fixed-size types, so that a later version may append
 * fields without breaking older readers.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rec.h"
#include "util.h"

#define STEP_LEN 40u
#define CAPTURE_HDR 108u
#define CAPTURE_NF 11
#define PHASE_HDR 20u
#define OOM_HDR 68u
#define WORKER_LEN 48u
#define OPTSTEP_LEN 32u

static void put_u16(uint8_t *p, size_t off, uint16_t v) { memcpy(p + off, &v, 2); }
static void put_u32(uint8_t *p, size_t off, uint32_t v) { memcpy(p + off, &v, 4); }
static void put_u64(uint8_t *p, size_t off, uint64_t v) { memcpy(p + off, &v, 8); }
static void put_i64(uint8_t *p, size_t off, int64_t v) { memcpy(p + off, &v, 8); }
static void put_f64(uint8_t *p, size_t off, double v) { memcpy(p + off, &v, 8); }

static uint16_t get_u16(const uint8_t *p, size_t off)
{
    uint16_t v;
    memcpy(&v, p + off, 2);
    return v;
}
static uint32_t get_u32(const uint8_t *p, size_t off)
{
    uint32_t v;
    memcpy(&v, p + off, 4);
    return v;
}
static uint64_t get_u64(const uint8_t *p, size_t off)
{
    uint64_t v;
    memcpy(&v, p + off, 8);
    return v;
}
static int64_t get_i64(const uint8_t *p, size_t off)
{
    int64_t v;
    memcpy(&v, p + off, 8);
    return v;
}
static double get_f64(const uint8_t *p, size_t off)
{
    double v;
    memcpy(&v, p + off, 8);
    return v;
}

static uint16_t name_len(const char *s, uint16_t n)
{
    if (!s)
        return 0;
    return n > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : n;
}

bool tm_inproc_is(uint16_t type) { return type >= TM_REC_STEP && type <= TM_REC_OPTSTEP; }

/* ------------------------------------------------------------- encoders */

int tm_inproc_encode_step(const tm_inproc_step *s, void *buf, size_t cap)
{
    if (cap < STEP_LEN)
        return -ENOSPC;
    uint8_t *p = buf;
    put_u64(p, 0, s->step);
    put_i64(p, 8, s->start_ns);
    put_i64(p, 16, s->end_ns);
    put_i64(p, 24, s->data_wait_ns);
    put_u32(p, 32, s->flags);
    put_u32(p, 36, 0);
    return (int)STEP_LEN;
}

int tm_inproc_encode_capture(const tm_inproc_capture *c, void *buf, size_t cap)
{
    uint16_t tl = name_len(c->tag, c->tag_len);
    if (cap < CAPTURE_HDR + tl)
        return -ENOSPC;
    uint8_t *p = buf;
    const double f[CAPTURE_NF] = {c->allocated,   c->reserved,          c->peak_allocated,
                                  c->active,      c->inactive_split,    c->requested,
                                  c->free_device, c->total_device,      c->num_alloc_retries,
                                  c->num_ooms,    c->host_rss};
    put_u32(p, 0, c->source);
    put_u32(p, 4, (uint32_t)c->device);
    put_u64(p, 8, c->step);
    for (size_t i = 0; i < CAPTURE_NF; i++)
        put_f64(p, 16 + 8 * i, f[i]);
    put_u16(p, 104, tl);
    put_u16(p, 106, 0);
    if (tl)
        memcpy(p + CAPTURE_HDR, c->tag, tl);
    return (int)(CAPTURE_HDR + tl);
}

int tm_inproc_encode_phase(const tm_inproc_phase *ph, void *buf, size_t cap)
{
    uint16_t nl = name_len(ph->name, ph->name_len);
    if (cap < PHASE_HDR + nl)
        return -ENOSPC;
    uint8_t *p = buf;
    put_u32(p, 0, ph->kind);
    put_u32(p, 4, ph->depth);
    put_u64(p, 8, ph->step);
    put_u16(p, 16, nl);
    put_u16(p, 18, 0);
    if (nl)
        memcpy(p + PHASE_HDR, ph->name, nl);
    return (int)(PHASE_HDR + nl);
}

int tm_inproc_encode_oom(const tm_inproc_oom *o, void *buf, size_t cap)
{
    uint16_t pl = name_len(o->phase, o->phase_len);
    uint16_t sl = name_len(o->snapshot, o->snapshot_len);
    if (cap < OOM_HDR + (size_t)pl + sl)
        return -ENOSPC;
    uint8_t *p = buf;
    put_u32(p, 0, (uint32_t)o->device);
    put_u32(p, 4, o->seq);
    put_u64(p, 8, o->step);
    put_u32(p, 16, o->source);
    put_u32(p, 20, 0);
    put_f64(p, 24, o->requested);
    put_f64(p, 32, o->free_device);
    put_f64(p, 40, o->total_device);
    put_f64(p, 48, o->allocated);
    put_f64(p, 56, o->reserved);
    put_u16(p, 64, pl);
    put_u16(p, 66, sl);
    if (pl)
        memcpy(p + OOM_HDR, o->phase, pl);
    if (sl)
        memcpy(p + OOM_HDR + pl, o->snapshot, sl);
    return (int)(OOM_HDR + pl + sl);
}

int tm_inproc_encode_worker(const tm_inproc_worker *w, void *buf, size_t cap)
{
    if (cap < WORKER_LEN)
        return -ENOSPC;
    uint8_t *p = buf;
    put_u32(p, 0, (uint32_t)w->worker_id);
    put_u32(p, 4, w->pid);
    put_u64(p, 8, w->batch);
    put_i64(p, 16, w->start_ns);
    put_i64(p, 24, w->end_ns);
    put_f64(p, 32, w->cpu_s);
    put_f64(p, 40, w->rss_bytes);
    return (int)WORKER_LEN;
}

int tm_inproc_encode_optstep(const tm_inproc_optstep *o, void *buf, size_t cap)
{
    if (cap < OPTSTEP_LEN)
        return -ENOSPC;
    uint8_t *p = buf;
    put_u64(p, 0, o->step);
    put_i64(p, 8, o->start_ns);
    put_i64(p, 16, o->end_ns);
    put_u32(p, 24, o->optimizer);
    put_u32(p, 28, 0);
    return (int)OPTSTEP_LEN;
}

/* ------------------------------------------------------------- decoders */

static int check(const tm_record *rec, uint16_t type, size_t need)
{
    if (!rec || rec->type != type || rec->len < need || (need && !rec->payload))
        return tm_seterr(-EINVAL, "record type %u: payload of %" PRIu32 " bytes is not a valid %u",
                         rec ? rec->type : 0, rec ? rec->len : 0, type);
    return 0;
}

int tm_inproc_decode_step(const tm_record *rec, tm_inproc_step *out)
{
    int rc = check(rec, TM_REC_STEP, STEP_LEN);
    if (rc)
        return rc;
    const uint8_t *p = rec->payload;
    out->step = get_u64(p, 0);
    out->start_ns = get_i64(p, 8);
    out->end_ns = get_i64(p, 16);
    out->data_wait_ns = get_i64(p, 24);
    out->flags = get_u32(p, 32);
    return 0;
}

int tm_inproc_decode_capture(const tm_record *rec, tm_inproc_capture *out)
{
    int rc = check(rec, TM_REC_CAPTURE, CAPTURE_HDR);
    if (rc)
        return rc;
    const uint8_t *p = rec->payload;
    uint16_t tl = get_u16(p, 104);
    if (rec->len < CAPTURE_HDR + (size_t)tl)
        return check(rec, TM_REC_CAPTURE, CAPTURE_HDR + (size_t)tl);
    double f[CAPTURE_NF];
    for (size_t i = 0; i < CAPTURE_NF; i++)
        f[i] = get_f64(p, 16 + 8 * i);
    out->source = get_u32(p, 0);
    out->device = (int32_t)get_u32(p, 4);
    out->step = get_u64(p, 8);
    out->allocated = f[0];
    out->reserved = f[1];
    out->peak_allocated = f[2];
    out->active = f[3];
    out->inactive_split = f[4];
    out->requested = f[5];
    out->free_device = f[6];
    out->total_device = f[7];
    out->num_alloc_retries = f[8];
    out->num_ooms = f[9];
    out->host_rss = f[10];
    out->tag = (const char *)p + CAPTURE_HDR;
    out->tag_len = tl;
    return 0;
}

int tm_inproc_decode_phase(const tm_record *rec, tm_inproc_phase *out)
{
    int rc = check(rec, TM_REC_PHASE, PHASE_HDR);
    if (rc)
        return rc;
    const uint8_t *p = rec->payload;
    uint16_t nl = get_u16(p, 16);
    if (rec->len < PHASE_HDR + (size_t)nl)
        return check(rec, TM_REC_PHASE, PHASE_HDR + (size_t)nl);
    out->kind = get_u32(p, 0);
    out->depth = get_u32(p, 4);
    out->step = get_u64(p, 8);
    out->name = (const char *)p + PHASE_HDR;
    out->name_len = nl;
    return 0;
}

int tm_inproc_decode_oom(const tm_record *rec, tm_inproc_oom *out)
{
    int rc = check(rec, TM_REC_OOM, OOM_HDR);
    if (rc)
        return rc;
    const uint8_t *p = rec->payload;
    uint16_t pl = get_u16(p, 64), sl = get_u16(p, 66);
    if (rec->len < OOM_HDR + (size_t)pl + sl)
        return check(rec, TM_REC_OOM, OOM_HDR + (size_t)pl + sl);
    out->device = (int32_t)get_u32(p, 0);
    out->seq = get_u32(p, 4);
    out->step = get_u64(p, 8);
    out->source = get_u32(p, 16);
    out->requested = get_f64(p, 24);
    out->free_device = get_f64(p, 32);
    out->total_device = get_f64(p, 40);
    out->allocated = get_f64(p, 48);
    out->reserved = get_f64(p, 56);
    out->phase = (const char *)p + OOM_HDR;
    out->phase_len = pl;
    out->snapshot = (const char *)p + OOM_HDR + pl;
    out->snapshot_len = sl;
    return 0;
}

int tm_inproc_decode_worker(const tm_record *rec, tm_inproc_worker *out)
{
    int rc = check(rec, TM_REC_WORKER, WORKER_LEN);
    if (rc)
        return rc;
    const uint8_t *p = rec->payload;
    out->worker_id = (int32_t)get_u32(p, 0);
    out->pid = get_u32(p, 4);
    out->batch = get_u64(p, 8);
    out->start_ns = get_i64(p, 16);
    out->end_ns = get_i64(p, 24);
    out->cpu_s = get_f64(p, 32);
    out->rss_bytes = get_f64(p, 40);
    return 0;
}

int tm_inproc_decode_optstep(const tm_record *rec, tm_inproc_optstep *out)
{
    int rc = check(rec, TM_REC_OPTSTEP, OPTSTEP_LEN);
    if (rc)
        return rc;
    const uint8_t *p = rec->payload;
    out->step = get_u64(p, 0);
    out->start_ns = get_i64(p, 8);
    out->end_ns = get_i64(p, 16);
    out->optimizer = get_u32(p, 24);
    return 0;
}

/* ------------------------------------------------------------ formatter */

/* A line under construction: fields are "name=value" in text and
 * "\"name\":value" in JSON; unavailable (NAN) numbers are left out. */
typedef struct fmt {
    tm_buf b;
    bool json;
    int rc;
} fmt;

static void f_raw(fmt *f, const char *s)
{
    if (!f->rc)
        f->rc = tm_buf_add(&f->b, s, strlen(s));
}

static void f_key(fmt *f, const char *k)
{
    if (f->rc)
        return;
    f->rc = f->json ? tm_buf_printf(&f->b, ",\"%s\":", k) : tm_buf_printf(&f->b, " %s=", k);
}

static void f_num(fmt *f, const char *k, double v)
{
    if (isnan(v))
        return;
    f_key(f, k);
    if (!f->rc)
        f->rc = tm_buf_printf(&f->b, "%.17g", v);
}

static void f_int(fmt *f, const char *k, int64_t v)
{
    f_key(f, k);
    if (!f->rc)
        f->rc = tm_buf_printf(&f->b, "%" PRId64, v);
}

static void f_secs(fmt *f, const char *k, int64_t ns)
{
    f_key(f, k);
    if (!f->rc)
        f->rc = tm_buf_printf(&f->b, f->json ? "%.9f" : "%.6fs", (double)ns / 1e9);
}

/* A string value: quoted and escaped in JSON, quoted with control bytes as
 * '?' in text (one line per record); ill-formed UTF-8 as U+FFFD in both. */
static void f_str(fmt *f, const char *k, const char *s, size_t n)
{
    if (k)
        f_key(f, k);
    if (f->rc)
        return;
    f->rc = tm_buf_add(&f->b, "\"", 1);
    if (f->json) {
        if (!f->rc)
            f->rc = tm_buf_json_str(&f->b, s, n);
    } else if (!f->rc) {
        f->rc = tm_buf_esc(&f->b, TM_ESC_TEXT, s, n);
    }
    if (!f->rc)
        f->rc = tm_buf_add(&f->b, "\"", 1);
}

/* Starts the line with the record's kind: "step" / "\"type\":\"step\"". */
static void f_begin(fmt *f, const char *type)
{
    if (f->json)
        f->rc = tm_buf_printf(&f->b, "\"type\":\"%s\"", type);
    else
        f->rc = tm_buf_printf(&f->b, "%s", type);
}

static const char *capture_source(uint32_t s)
{
    switch (s) {
    case TM_CAPTURE_USER: return "user";
    case TM_CAPTURE_STEP: return "step";
    case TM_CAPTURE_PHASE: return "phase";
    case TM_CAPTURE_OOM: return "oom";
    default: return "unknown";
    }
}

static void fmt_step(fmt *f, const tm_inproc_step *s)
{
    f_begin(f, "step");
    if (!f->json && !f->rc)
        f->rc = tm_buf_printf(&f->b, " %" PRIu64, s->step);
    else
        f_int(f, "step", (int64_t)s->step);
    f_secs(f, f->json ? "duration_s" : "dur", s->end_ns - s->start_ns);
    f_secs(f, f->json ? "data_wait_s" : "wait", s->data_wait_ns);
    f_int(f, "start_ns", s->start_ns);
    if (s->flags & TM_STEP_ENDED_BY_STOP)
        f_raw(f, f->json ? ",\"end_of_epoch\":true" : " end_of_epoch");
    if (s->flags & TM_STEP_ENDED_AT_EXIT)
        f_raw(f, f->json ? ",\"at_exit\":true" : " at_exit");
}

static void fmt_capture(fmt *f, const tm_inproc_capture *c)
{
    f_begin(f, "capture");
    if (f->json) {
        f_key(f, "source");
        f_str(f, NULL, capture_source(c->source), strlen(capture_source(c->source)));
        f_str(f, "tag", c->tag, c->tag_len);
    } else {
        f_raw(f, " ");
        f_str(f, NULL, c->tag, c->tag_len);
        f_raw(f, " source=");
        f_raw(f, capture_source(c->source));
    }
    f_int(f, "step", (int64_t)c->step);
    if (c->device >= 0)
        f_int(f, "device", c->device);
    f_num(f, "allocated", c->allocated);
    f_num(f, "reserved", c->reserved);
    f_num(f, "peak_allocated", c->peak_allocated);
    f_num(f, "active", c->active);
    f_num(f, "inactive_split", c->inactive_split);
    f_num(f, "requested", c->requested);
    f_num(f, "free_device", c->free_device);
    f_num(f, "total_device", c->total_device);
    f_num(f, "num_alloc_retries", c->num_alloc_retries);
    f_num(f, "num_ooms", c->num_ooms);
    f_num(f, "host_rss", c->host_rss);
}

static void fmt_phase(fmt *f, const tm_inproc_phase *p)
{
    const char *kind = p->kind == TM_PHASE_ENTER ? "enter" : p->kind == TM_PHASE_EXIT ? "exit"
                                                                                       : "unknown";
    f_begin(f, "phase");
    if (f->json) {
        f_key(f, "kind");
        f_str(f, NULL, kind, strlen(kind));
        f_str(f, "name", p->name, p->name_len);
    } else {
        f_raw(f, " ");
        f_raw(f, kind);
        f_raw(f, " ");
        f_str(f, NULL, p->name, p->name_len);
    }
    f_int(f, "depth", p->depth);
    f_int(f, "step", (int64_t)p->step);
}

static void fmt_oom(fmt *f, const tm_inproc_oom *o)
{
    const char *src = o->source == TM_OOM_OBSERVER    ? "observer"
                      : o->source == TM_OOM_EXCEPTION ? "exception"
                                                      : "unknown";
    f_begin(f, "oom");
    f_int(f, "seq", o->seq);
    f_int(f, "device", o->device);
    f_int(f, "step", (int64_t)o->step);
    f_str(f, "phase", o->phase, o->phase_len);
    f_num(f, "requested", o->requested);
    f_num(f, "free_device", o->free_device);
    f_num(f, "total_device", o->total_device);
    f_num(f, "allocated", o->allocated);
    f_num(f, "reserved", o->reserved);
    f_key(f, "source");
    f_str(f, NULL, src, strlen(src));
    if (o->snapshot_len)
        f_str(f, "snapshot", o->snapshot, o->snapshot_len);
}

static void fmt_worker(fmt *f, const tm_inproc_worker *w)
{
    f_begin(f, "worker");
    f_int(f, "worker", w->worker_id);
    f_int(f, "pid", w->pid);
    f_int(f, "batch", (int64_t)w->batch);
    f_secs(f, f->json ? "batch_time_s" : "time", w->end_ns - w->start_ns);
    f_int(f, "start_ns", w->start_ns);
    f_num(f, "cpu_s", w->cpu_s);
    f_num(f, "rss_bytes", w->rss_bytes);
}

static void fmt_optstep(fmt *f, const tm_inproc_optstep *o)
{
    f_begin(f, "optimizer_step");
    f_int(f, "optimizer", o->optimizer);
    f_int(f, "step", (int64_t)o->step);
    f_secs(f, f->json ? "duration_s" : "dur", o->end_ns - o->start_ns);
    f_int(f, "start_ns", o->start_ns);
}

int tm_inproc_format(const tm_record *rec, bool json, char *buf, size_t cap)
{
    if (!rec || !buf || cap == 0)
        return tm_seterr(-EINVAL, "tm_inproc_format: NULL argument");
    if (!tm_inproc_is(rec->type))
        return -ENOENT;
    fmt f = {.json = json};
    tm_buf_init(&f.b, TM_INPROC_FORMAT_MAX);
    int rc = -EINVAL;
    switch (rec->type) {
    case TM_REC_STEP: {
        tm_inproc_step s;
        if ((rc = tm_inproc_decode_step(rec, &s)) == 0)
            fmt_step(&f, &s);
        break;
    }
    case TM_REC_CAPTURE: {
        tm_inproc_capture c;
        if ((rc = tm_inproc_decode_capture(rec, &c)) == 0)
            fmt_capture(&f, &c);
        break;
    }
    case TM_REC_PHASE: {
        tm_inproc_phase p;
        if ((rc = tm_inproc_decode_phase(rec, &p)) == 0)
            fmt_phase(&f, &p);
        break;
    }
    case TM_REC_OOM: {
        tm_inproc_oom o;
        if ((rc = tm_inproc_decode_oom(rec, &o)) == 0)
            fmt_oom(&f, &o);
        break;
    }
    case TM_REC_WORKER: {
        tm_inproc_worker w;
        if ((rc = tm_inproc_decode_worker(rec, &w)) == 0)
            fmt_worker(&f, &w);
        break;
    }
    case TM_REC_OPTSTEP: {
        tm_inproc_optstep o;
        if ((rc = tm_inproc_decode_optstep(rec, &o)) == 0)
            fmt_optstep(&f, &o);
        break;
    }
    }
    if (rc)
        goto out;
    if (json)
        f_raw(&f, "}");
    if (f.rc) {
        rc = f.rc == -E2BIG ? -ENOSPC : f.rc;
        goto out;
    }
    if (f.b.len + 1 > cap) {
        rc = -ENOSPC;
        goto out;
    }
    memcpy(buf, f.b.data, f.b.len + 1);
    rc = (int)f.b.len;
out:
    tm_buf_free(&f.b);
    return rc;
}
