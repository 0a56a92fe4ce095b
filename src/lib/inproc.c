/*
 * inproc.c - the payloads of the in-process records (python/trainmon):
 * encoders used by the CPython extension, decoders, and the one formatter
 * behind `trainmon dump`, `dump --json` and `export --format jsonl`.
 *
 * Every layout is described once, in inproc_schema.h (fields: key, type,
 * payload offset, unit, struct member; views: how dump and jsonl show
 * them).  The functions here walk those tables and know no offset
 * themselves, so the encoder, the decoder, the JSON/text lines and
 * Python's read_records cannot drift apart.  docs/FORMAT.md ("In-process
 * records") shows the layouts for people.
 *
 * Fields are stored at fixed little-endian offsets through memcpy (the
 * build refuses big-endian hosts in rec.h), so a payload never depends on
 * the compiler's struct padding.  Decoders accept a payload longer than
 * they need, so that a later version may append fields without breaking
 * older readers.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "inproc_schema.h"
#include "rec.h"
#include "util.h"

/* ---------------------------------------------------------------- views */

/* How dump and jsonl show a type: entries in order.  V_VALUE shows field a
 * under its own key (an enum by its value's name; an f64 NAN is left out);
 * V_SECS shows the ns field a as seconds, V_SPAN the ns difference a - b
 * (saturating), V_FLAG a boolean true when bit is set in field a (left out
 * when not).  text is the key in text lines: NULL the same as JSON's, ""
 * positional (the value alone, printed before the keyed ones). */
enum { V_VALUE, V_SECS, V_SPAN, V_FLAG };
enum { OMIT_NEG = 1, OMIT_EMPTY = 2, OMIT_ZERO = 4 };

typedef struct view {
    const char *key; /* NULL: field a's key */
    const char *text;
    uint8_t op, omit;
    uint8_t a, b;
    uint32_t bit;
} view;

#define POS ""

static const view step_view[] = {
    {.text = POS, .a = F_STEP_step},
    {"duration_s", "dur", V_SPAN, 0, F_STEP_end_ns, F_STEP_start_ns, 0},
    {"data_wait_s", "wait", V_SECS, 0, F_STEP_data_wait_ns, 0, 0},
    {.a = F_STEP_start_ns},
    {.a = F_STEP_boundary},
    {.a = F_STEP_phase},
    {.omit = OMIT_NEG, .a = F_STEP_micro_batches},
    {.omit = OMIT_NEG, .a = F_STEP_batches},
    {.omit = OMIT_NEG, .a = F_STEP_prep_ns},
    {.omit = OMIT_NEG, .a = F_STEP_prep_cpu_ns},
    {.omit = OMIT_NEG, .a = F_STEP_backward_ns},
    {.omit = OMIT_NEG, .a = F_STEP_wait_cpu_ns},
    {.omit = OMIT_NEG, .a = F_STEP_collective_ns},
    {.omit = OMIT_NEG, .a = F_STEP_opt_start_ns},
    {.omit = OMIT_NEG, .a = F_STEP_optimizer},
    {.omit = OMIT_NEG, .a = F_STEP_prep_fwd_ns},
    {.omit = OMIT_NEG, .a = F_STEP_prep_opt_ns},
    {.omit = OMIT_NEG, .a = F_STEP_nograd_ns},
    {.omit = OMIT_NEG, .a = F_STEP_nograd_calls},
    {"end_of_epoch", NULL, V_FLAG, 0, F_STEP_flags, 0, TM_STEP_ENDED_BY_STOP},
    {"at_exit", NULL, V_FLAG, 0, F_STEP_flags, 0, TM_STEP_ENDED_AT_EXIT},
    {"fed_by_thread", NULL, V_FLAG, 0, F_STEP_flags, 0, TM_STEP_FED_BY_THREAD},
    {"skipped", NULL, V_FLAG, 0, F_STEP_flags, 0, TM_STEP_SKIPPED},
};

static const view capture_view[] = {
    {.a = F_CAPTURE_source},
    {.text = POS, .a = F_CAPTURE_tag},
    {.a = F_CAPTURE_step},
    {.omit = OMIT_NEG, .a = F_CAPTURE_device},
    {.a = F_CAPTURE_allocated},
    {.a = F_CAPTURE_reserved},
    {.a = F_CAPTURE_peak_allocated},
    {.a = F_CAPTURE_active},
    {.a = F_CAPTURE_inactive_split},
    {.a = F_CAPTURE_requested},
    {.a = F_CAPTURE_free_device},
    {.a = F_CAPTURE_total_device},
    {.a = F_CAPTURE_num_alloc_retries},
    {.a = F_CAPTURE_num_ooms},
    {.a = F_CAPTURE_host_rss},
};

static const view phase_view[] = {
    {.text = POS, .a = F_PHASE_kind},
    {.text = POS, .a = F_PHASE_name},
    {.a = F_PHASE_depth},
    {.a = F_PHASE_step},
};

static const view oom_view[] = {
    {.a = F_OOM_seq},
    {.a = F_OOM_device},
    {.a = F_OOM_step},
    {.a = F_OOM_phase},
    {.a = F_OOM_requested},
    {.a = F_OOM_free_device},
    {.a = F_OOM_total_device},
    {.a = F_OOM_allocated},
    {.a = F_OOM_reserved},
    {.a = F_OOM_source},
    {.omit = OMIT_EMPTY, .a = F_OOM_snapshot},
};

static const view worker_view[] = {
    {.a = F_WORKER_worker_id},
    {.a = F_WORKER_pid},
    {.a = F_WORKER_batch},
    {"batch_time_s", "time", V_SPAN, 0, F_WORKER_end_ns, F_WORKER_start_ns, 0},
    {.a = F_WORKER_start_ns},
    {.a = F_WORKER_cpu_s},
    {.a = F_WORKER_rss_bytes},
    {.a = F_WORKER_cpu_start_s},
    {.a = F_WORKER_layout},                 /* absent (left out) in a 48-byte record */
    {.omit = OMIT_ZERO, .a = F_WORKER_set}, /* 0 in a 64-byte record: unknown */
};

static const view optstep_view[] = {
    {.a = F_OPTSTEP_optimizer},
    {.a = F_OPTSTEP_step},
    {"duration_s", "dur", V_SPAN, 0, F_OPTSTEP_end_ns, F_OPTSTEP_start_ns, 0},
    {.a = F_OPTSTEP_start_ns},
};

static const view anatomy_view[] = {
    {.a = F_ANATOMY_step},
    {.text = POS, .a = F_ANATOMY_kind},
    {.omit = OMIT_NEG, .a = F_ANATOMY_device},
    {.a = F_ANATOMY_optimizer},
    {.a = F_ANATOMY_reason},
    {.a = F_ANATOMY_params},
    {.a = F_ANATOMY_grads},
    {.a = F_ANATOMY_optim_state},
    {.a = F_ANATOMY_activations},
    {.a = F_ANATOMY_unknown},
    {.a = F_ANATOMY_allocated},
    {.a = F_ANATOMY_reserved},
    {.a = F_ANATOMY_free_device},
    {.a = F_ANATOMY_total_device},
    {.omit = OMIT_NEG, .a = F_ANATOMY_batch_size},
};

static const view oomsum_view[] = {
    {.text = POS, .a = F_OOMSUM_seq},
    {.omit = OMIT_NEG, .a = F_OOMSUM_device},
    {.a = F_OOMSUM_step},
    {.a = F_OOMSUM_status},
    {.omit = OMIT_EMPTY, .a = F_OOMSUM_why},
    {.a = F_OOMSUM_pool},
    {.a = F_OOMSUM_requested},
    {.a = F_OOMSUM_free_device},
    {.a = F_OOMSUM_largest_free},
    {.a = F_OOMSUM_free_cached},
    {.a = F_OOMSUM_fragments},
    {.a = F_OOMSUM_expandable},
    {.a = F_OOMSUM_reserved},
    {.a = F_OOMSUM_live},
    {.a = F_OOMSUM_live_params},
    {.a = F_OOMSUM_live_grads},
    {.a = F_OOMSUM_live_optim_state},
    {.a = F_OOMSUM_live_other},
    {.a = F_OOMSUM_live_unknown},
    {.a = F_OOMSUM_blocks},
    {.omit = OMIT_EMPTY, .a = F_OOMSUM_site1},
    {.a = F_OOMSUM_site1_bytes},
    {.omit = OMIT_EMPTY, .a = F_OOMSUM_site2},
    {.a = F_OOMSUM_site2_bytes},
    {.omit = OMIT_EMPTY, .a = F_OOMSUM_site3},
    {.a = F_OOMSUM_site3_bytes},
    {.omit = OMIT_EMPTY, .a = F_OOMSUM_site4},
    {.a = F_OOMSUM_site4_bytes},
    {.omit = OMIT_EMPTY, .a = F_OOMSUM_site5},
    {.a = F_OOMSUM_site5_bytes},
};

/* --------------------------------------------------------------- tables */

#define ROW_STEP(k, m, t, o, u, n) TM_ROW(tm_inproc_step, k, m, t, o, u, n)
#define ROW_CAPTURE(k, m, t, o, u, n) TM_ROW(tm_inproc_capture, k, m, t, o, u, n)
#define ROW_PHASE(k, m, t, o, u, n) TM_ROW(tm_inproc_phase, k, m, t, o, u, n)
#define ROW_OOM(k, m, t, o, u, n) TM_ROW(tm_inproc_oom, k, m, t, o, u, n)
#define ROW_WORKER(k, m, t, o, u, n) TM_ROW(tm_inproc_worker, k, m, t, o, u, n)
#define ROW_OPTSTEP(k, m, t, o, u, n) TM_ROW(tm_inproc_optstep, k, m, t, o, u, n)
#define ROW_ANATOMY(k, m, t, o, u, n) TM_ROW(tm_inproc_anatomy, k, m, t, o, u, n)
#define ROW_OOMSUM(k, m, t, o, u, n) TM_ROW(tm_inproc_oomsum, k, m, t, o, u, n)

static const tm_inproc_field step_fields[] = {TM_SCHEMA_STEP(ROW_STEP)};
static const tm_inproc_field capture_fields[] = {TM_SCHEMA_CAPTURE(ROW_CAPTURE)};
static const tm_inproc_field phase_fields[] = {TM_SCHEMA_PHASE(ROW_PHASE)};
static const tm_inproc_field oom_fields[] = {TM_SCHEMA_OOM(ROW_OOM)};
static const tm_inproc_field worker_fields[] = {TM_SCHEMA_WORKER(ROW_WORKER)};
static const tm_inproc_field optstep_fields[] = {TM_SCHEMA_OPTSTEP(ROW_OPTSTEP)};
static const tm_inproc_field anatomy_fields[] = {TM_SCHEMA_ANATOMY(ROW_ANATOMY)};
static const tm_inproc_field oomsum_fields[] = {TM_SCHEMA_OOMSUM(ROW_OOMSUM)};

typedef struct schema {
    const char *name;
    size_t hdr; /* the fixed part; strings follow */
    size_t min; /* the oldest fixed part a reader accepts (types without strings) */
    const tm_inproc_field *fields;
    size_t nfields;
    const view *views;
    size_t nviews;
} schema;

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define SCHEMA(nm, hdr, f, v)                                                                      \
    {                                                                                              \
        nm, hdr, hdr, f, N(f), v, N(v)                                                             \
    }
#define SCHEMA_GREW(nm, hdr, min, f, v)                                                            \
    {                                                                                              \
        nm, hdr, min, f, N(f), v, N(v)                                                             \
    }

/* Indexed by type - TM_REC_STEP. */
static const schema schemas[] = {
    SCHEMA_GREW("step", TM_STEP_LEN, TM_STEP_LEN_V1, step_fields, step_view),
    SCHEMA("capture", TM_CAPTURE_HDR, capture_fields, capture_view),
    SCHEMA("phase", TM_PHASE_HDR, phase_fields, phase_view),
    SCHEMA("oom", TM_OOM_HDR, oom_fields, oom_view),
    SCHEMA_GREW("worker", TM_WORKER_LEN, TM_WORKER_LEN_V1, worker_fields, worker_view),
    SCHEMA("optimizer_step", TM_OPTSTEP_LEN, optstep_fields, optstep_view),
    SCHEMA("anatomy", TM_ANATOMY_HDR, anatomy_fields, anatomy_view),
    SCHEMA("oom_summary", TM_OOMSUM_HDR, oomsum_fields, oomsum_view),
};

_Static_assert(N(schemas) == TM_REC_OOMSUM - TM_REC_STEP + 1, "one schema per in-process type");
#define FITS(f) _Static_assert(N(f) <= TM_INPROC_FIELDS_MAX, "TM_INPROC_FIELDS_MAX: " #f)
FITS(step_fields);
FITS(capture_fields);
FITS(phase_fields);
FITS(oom_fields);
FITS(worker_fields);
FITS(optstep_fields);
FITS(anatomy_fields);
FITS(oomsum_fields);

bool tm_inproc_is(uint16_t type)
{
    return type >= TM_REC_STEP && type <= TM_REC_OOMSUM;
}

static const schema *schema_of(uint16_t type)
{
    return tm_inproc_is(type) ? &schemas[type - TM_REC_STEP] : NULL;
}

size_t tm_inproc_fields(uint16_t type, const tm_inproc_field **out)
{
    const schema *sc = schema_of(type);
    if (out)
        *out = sc ? sc->fields : NULL;
    return sc ? sc->nfields : 0;
}

const char *tm_inproc_type_name(uint16_t type)
{
    const schema *sc = schema_of(type);
    return sc ? sc->name : NULL;
}

double tm_clock_diff_s(int64_t a_ns, int64_t b_ns)
{
    return tm_ns_diff_s(a_ns, b_ns);
}

/* ----------------------------------------------------- values in structs */

static size_t ctype_size(tm_inproc_ctype t)
{
    switch (t) {
    case TM_INPROC_U32:
    case TM_INPROC_I32:
        return 4;
    case TM_INPROC_U64:
    case TM_INPROC_I64:
    case TM_INPROC_F64:
        return 8;
    case TM_INPROC_STR:
        return 2; /* its length */
    }
    return 0;
}

/* Whether field f of rec lies past the old layout of a type that grew, in
 * a record of that old layout: the first newer field (the step's boundary)
 * is 0 there, as the encoder writes the old layout then and older writers
 * knew no other. */
static bool absent_in(const tm_inproc_field *f, const tm_inproc_any *rec)
{
    for (size_t t = 0; t < N(schemas); t++) {
        const schema *sc = &schemas[t];
        if (f < sc->fields || f >= sc->fields + sc->nfields)
            continue;
        if (sc->min >= sc->hdr || f->offset < sc->min)
            return false;
        for (size_t i = 0; i < sc->nfields; i++)
            if (sc->fields[i].offset == sc->min) {
                uint32_t m;
                memcpy(&m, (const char *)rec + sc->fields[i].member, 4);
                return m == 0;
            }
        return false;
    }
    return false;
}

tm_inproc_value tm_inproc_get(const tm_inproc_field *f, const tm_inproc_any *rec)
{
    const char *base = (const char *)rec;
    tm_inproc_value v = {.type = f->type, .f = NAN, .absent = absent_in(f, rec)};
    switch (f->type) {
    case TM_INPROC_U32: {
        uint32_t x;
        memcpy(&x, base + f->member, 4);
        v.u = x;
        break;
    }
    case TM_INPROC_I32: {
        int32_t x;
        memcpy(&x, base + f->member, 4);
        v.i = x;
        break;
    }
    case TM_INPROC_U64:
        memcpy(&v.u, base + f->member, 8);
        break;
    case TM_INPROC_I64:
        memcpy(&v.i, base + f->member, 8);
        break;
    case TM_INPROC_F64:
        memcpy(&v.f, base + f->member, 8);
        break;
    case TM_INPROC_STR: {
        uint16_t n;
        memcpy(&v.s, base + f->member, sizeof v.s);
        memcpy(&n, base + f->len_member, 2);
        v.len = v.s ? n : 0;
        if (!v.s)
            v.s = "";
        break;
    }
    }
    return v;
}

static void put_member(const tm_inproc_field *f, tm_inproc_any *rec, const void *src)
{
    memcpy((char *)rec + f->member, src,
           f->type == TM_INPROC_STR ? sizeof(char *) : ctype_size(f->type));
}

/* A string's stored length: cut at TM_INPROC_NAME_MAX, 0 for NULL. */
static uint16_t name_len(const char *s, size_t n)
{
    if (!s)
        return 0;
    return (uint16_t)(n > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : n);
}

/* ------------------------------------------------------------- encoders */

/* The width on disk of a numeric field: the struct member has the same
 * width and representation (little-endian hosts only, as the format). */
static size_t ctype_width(tm_inproc_ctype t)
{
    return t == TM_INPROC_U32 || t == TM_INPROC_I32 ? 4 : 8;
}

/* A type without strings is encoded by its copy plan: its fields merged
 * into runs that are contiguous both in the struct and in the payload, in
 * payload order (the step: 3 runs for 14 fields).  The step and optimizer
 * records are written at every training step, and the agent's budget there
 * is 1 us in all (bench/agent_cost.py): a walk of the table per record cost
 * ~500 instructions, the plan ~100.  Built once, from the same table. */
#define PLAN_RUNS 16
typedef struct plan_run {
    uint32_t dst, src, len; /* payload offset, struct member offset, bytes */
} plan_run;
typedef struct plan {
    int ok; /* a type without strings whose plan fits */
    size_t nrun;
    plan_run run[PLAN_RUNS];
    size_t grow_member; /* the first newer field's member (sc->min < sc->hdr) */
} plan;

static plan plans[N(schemas)];
static pthread_once_t plans_once = PTHREAD_ONCE_INIT;

static void plans_build(void)
{
    for (size_t t = 0; t < N(schemas); t++) {
        const schema *sc = &schemas[t];
        plan *pl = &plans[t];
        pl->ok = 1;
        for (size_t i = 0; i < sc->nfields && pl->ok; i++) {
            const tm_inproc_field *f = &sc->fields[i];
            if (f->type == TM_INPROC_STR || (i && f->offset < sc->fields[i - 1].offset)) {
                pl->ok = 0; /* strings, or a table out of payload order */
                break;
            }
            if (f->offset == sc->min && sc->min < sc->hdr)
                pl->grow_member = f->member;
            uint32_t w = (uint32_t)ctype_width(f->type);
            if (pl->nrun) {
                plan_run *r = &pl->run[pl->nrun - 1];
                if (r->dst + r->len == f->offset && r->src + r->len == f->member) {
                    r->len += w;
                    continue;
                }
            }
            if (pl->nrun == PLAN_RUNS)
                pl->ok = 0;
            else
                pl->run[pl->nrun++] =
                    (plan_run){.dst = (uint32_t)f->offset, .src = (uint32_t)f->member, .len = w};
        }
    }
}

/* Encodes by the plan: the header zeroed (padding is 0), the runs copied,
 * those past the old layout of a grown type left out as encode_base does. */
static int encode_plan(const schema *sc, const plan *pl, const char *base, void *buf, size_t cap)
{
    size_t hdr = sc->hdr;
    if (sc->min < sc->hdr) {
        uint32_t m;
        memcpy(&m, base + pl->grow_member, 4);
        if (m == 0)
            hdr = sc->min;
    }
    if (cap < hdr)
        return -ENOSPC;
    uint8_t *p = buf;
    memset(p, 0, hdr);
    for (size_t i = 0; i < pl->nrun && pl->run[i].dst < hdr; i++) {
        size_t len = pl->run[i].len;
        if (pl->run[i].dst + len > hdr)
            len = hdr - pl->run[i].dst;
        memcpy(p + pl->run[i].dst, base + pl->run[i].src, len);
    }
    return (int)hdr;
}

/* The encoder walks the table but copies each member straight into its
 * place: it is the hot path of every in-process record (Monitor.capture's
 * target is 1 us in all), so no tm_inproc_value is built per field.  base
 * is the tm_inproc_* struct of sc's type. */
static int encode_base(const schema *sc, const char *base, void *buf, size_t cap)
{
    pthread_once(&plans_once, plans_build);
    const plan *pl = &plans[sc - schemas];
    if (pl->ok)
        return encode_plan(sc, pl, base, buf, cap);
    size_t hdr = sc->hdr;
    if (sc->min < sc->hdr) {
        /* A type that grew: a record whose first newer field (the step's
         * boundary, a u32) is 0 carries nothing of the newer layout and is
         * written in the old one, as an older writer wrote it. */
        for (size_t i = 0; i < sc->nfields; i++)
            if (sc->fields[i].offset == sc->min) {
                uint32_t m;
                memcpy(&m, base + sc->fields[i].member, 4);
                if (m == 0)
                    hdr = sc->min;
            }
    }
    size_t need = hdr;
    for (size_t i = 0; i < sc->nfields; i++)
        if (sc->fields[i].type == TM_INPROC_STR) {
            const char *str;
            uint16_t n;
            memcpy(&str, base + sc->fields[i].member, sizeof str);
            memcpy(&n, base + sc->fields[i].len_member, 2);
            need += name_len(str, n);
        }
    if (cap < need)
        return -ENOSPC;
    uint8_t *p = buf;
    memset(p, 0, hdr); /* padding is 0 */
    size_t at = hdr;
    for (size_t i = 0; i < sc->nfields; i++) {
        const tm_inproc_field *f = &sc->fields[i];
        if (f->offset >= hdr)
            break; /* the old layout ends here (a grown type has no strings) */
        if (f->type != TM_INPROC_STR) {
            /* fixed-size copies, which the compiler inlines */
            if (ctype_width(f->type) == 4)
                memcpy(p + f->offset, base + f->member, 4);
            else
                memcpy(p + f->offset, base + f->member, 8);
            continue;
        }
        const char *str;
        uint16_t n;
        memcpy(&str, base + f->member, sizeof str);
        memcpy(&n, base + f->len_member, 2);
        n = name_len(str, n);
        memcpy(p + f->offset, &n, 2);
        if (n)
            memcpy(p + at, str, n);
        at += n;
    }
    return (int)need;
}

int tm_inproc_encode(uint16_t type, const tm_inproc_any *rec, void *buf, size_t cap)
{
    const schema *sc = schema_of(type);
    if (!sc || !rec || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode: type %u is not in-process", type);
    if (type == TM_REC_STEP)
        return tm_inproc_encode_step(&rec->step, buf, cap);
    return encode_base(sc, (const char *)rec, buf, cap);
}

/* The step record is the agent's one record a step (bench/agent_cost.py):
 * three fixed-size copies, which the compiler inlines, instead of the table
 * walk.  The struct and the payload differ only in where the 4 bytes of
 * padding fall (after flags in the payload, after batches in the struct):
 * the runs are pinned below field by field.  Three layouts, the shortest
 * that holds it: 40 bytes without the step model (boundary 0, as trainmon
 * <= 0.x wrote), 96 without an optimizer step folded in (opt_start_ns <=
 * 0), 112 with one, 128 with the preparation after the forward measured
 * (prep_fwd_ns or prep_opt_ns >= 0; an absent optimizer step is -1 there),
 * 144 with a model run under no_grad before the training forward
 * (nograd_calls > 0 and nograd_ns >= 0; the 4 bytes after nograd_calls are
 * zero). */
#define STEP_RUN1 offsetof(tm_inproc_step, boundary) /* step .. flags */
#define STEP_RUN2 offsetof(tm_inproc_step, prep_ns)  /* prep_ns .. */
#define STEP_AT(k, m, t, o, u, n)                                                                  \
    _Static_assert(offsetof(tm_inproc_step, m) == ((o) < TM_STEP_LEN_V1 ? (o)                      \
                                                   : (o) < STEP_RUN2    ? (o)-4                    \
                                                                        : (o)),                       \
                   "tm_inproc_step and its payload: " k);
TM_SCHEMA_STEP(STEP_AT)
_Static_assert(STEP_RUN1 == TM_STEP_LEN_V1 - 4 && STEP_RUN2 == 56, "the step's copy runs");
_Static_assert(offsetof(tm_inproc_step, opt_start_ns) == TM_STEP_LEN_V2, "the 96-byte layout");
_Static_assert(offsetof(tm_inproc_step, prep_fwd_ns) == TM_STEP_LEN_V3, "the 112-byte layout");
_Static_assert(offsetof(tm_inproc_step, nograd_ns) == TM_STEP_LEN_V4, "the 128-byte layout");
_Static_assert(offsetof(tm_inproc_step, nograd_calls) + 8 == TM_STEP_LEN &&
                   sizeof(tm_inproc_step) == TM_STEP_LEN,
               "the 144-byte layout");

int tm_inproc_encode_step(const tm_inproc_step *s, void *buf, size_t cap)
{
    if (!s || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_step: NULL argument");
    uint8_t *p = buf;
    if (!s->boundary) {
        if (cap < TM_STEP_LEN_V1)
            return -ENOSPC;
        memcpy(p, s, STEP_RUN1);
        memset(p + STEP_RUN1, 0, 4);
        return TM_STEP_LEN_V1;
    }
    size_t len = s->nograd_calls > 0 && s->nograd_ns >= 0     ? TM_STEP_LEN
                 : s->prep_fwd_ns >= 0 || s->prep_opt_ns >= 0 ? TM_STEP_LEN_V4
                 : s->opt_start_ns > 0                        ? TM_STEP_LEN_V3
                                                              : TM_STEP_LEN_V2;
    if (cap < len)
        return -ENOSPC;
    memcpy(p, s, STEP_RUN1);
    memset(p + STEP_RUN1, 0, 4);
    memcpy(p + TM_STEP_LEN_V1, &s->boundary, STEP_RUN2 - STEP_RUN1 - 4);
    memcpy(p + STEP_RUN2, &s->prep_ns, len - STEP_RUN2);
    if (len > TM_STEP_LEN_V2)
        memset(p + TM_STEP_LEN_V3 - 4, 0, 4); /* the struct's padding after optimizer */
    if (len == TM_STEP_LEN)
        memset(p + TM_STEP_LEN - 4, 0, 4); /* the struct's padding at its end */
    return (int)len;
}

int tm_inproc_encode_capture(const tm_inproc_capture *c, void *buf, size_t cap)
{
    if (!c || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_capture: NULL argument");
    return encode_base(schema_of(TM_REC_CAPTURE), (const char *)c, buf, cap);
}

int tm_inproc_encode_phase(const tm_inproc_phase *ph, void *buf, size_t cap)
{
    if (!ph || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_phase: NULL argument");
    return encode_base(schema_of(TM_REC_PHASE), (const char *)ph, buf, cap);
}

int tm_inproc_encode_oom(const tm_inproc_oom *o, void *buf, size_t cap)
{
    if (!o || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_oom: NULL argument");
    return encode_base(schema_of(TM_REC_OOM), (const char *)o, buf, cap);
}

int tm_inproc_encode_worker(const tm_inproc_worker *w, void *buf, size_t cap)
{
    if (!w || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_worker: NULL argument");
    return encode_base(schema_of(TM_REC_WORKER), (const char *)w, buf, cap);
}

int tm_inproc_encode_optstep(const tm_inproc_optstep *o, void *buf, size_t cap)
{
    if (!o || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_optstep: NULL argument");
    return encode_base(schema_of(TM_REC_OPTSTEP), (const char *)o, buf, cap);
}

int tm_inproc_encode_anatomy(const tm_inproc_anatomy *a, void *buf, size_t cap)
{
    if (!a || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_anatomy: NULL argument");
    return encode_base(schema_of(TM_REC_ANATOMY), (const char *)a, buf, cap);
}

int tm_inproc_encode_oomsum(const tm_inproc_oomsum *o, void *buf, size_t cap)
{
    if (!o || (!buf && cap))
        return tm_seterr(-EINVAL, "tm_inproc_encode_oomsum: NULL argument");
    return encode_base(schema_of(TM_REC_OOMSUM), (const char *)o, buf, cap);
}

/* ------------------------------------------------------------- decoders */

static int bad(const tm_record *rec, uint16_t type)
{
    return tm_seterr(-EINVAL, "record type %u: payload of %" PRIu32 " bytes is not a valid %u",
                     rec ? rec->type : 0, rec ? rec->len : 0, type);
}

static int decode_as(const tm_record *rec, uint16_t type, tm_inproc_any *out)
{
    const schema *sc = schema_of(type);
    if (!sc || !rec || rec->type != type || rec->len < sc->min || !rec->payload || !out)
        return bad(rec, type);
    const uint8_t *p = rec->payload;
    if (rec->len < sc->hdr) {
        /* An older, shorter layout of a type that grew (no strings: they
         * would follow the old fixed part): the fields it lacks are absent,
         * -1 for signed counts and clocks, NAN, 0 for enums and flags. */
        memset(out, 0, sizeof *out);
        for (size_t i = 0; i < sc->nfields; i++) {
            const tm_inproc_field *f = &sc->fields[i];
            size_t sz = ctype_size(f->type);
            if (f->offset + sz <= rec->len) {
                put_member(f, out, p + f->offset);
                continue;
            }
            int64_t m1 = -1;
            int32_t m1s = -1;
            double nan = NAN;
            if (f->type == TM_INPROC_I64)
                put_member(f, out, &m1);
            else if (f->type == TM_INPROC_I32)
                put_member(f, out, &m1s);
            else if (f->type == TM_INPROC_F64)
                put_member(f, out, &nan);
        }
        return 0;
    }
    /* The strings must lie inside the payload before anything is kept. */
    size_t need = sc->hdr;
    for (size_t i = 0; i < sc->nfields; i++)
        if (sc->fields[i].type == TM_INPROC_STR) {
            uint16_t n;
            memcpy(&n, p + sc->fields[i].offset, 2);
            need += n;
        }
    if (rec->len < need)
        return bad(rec, type);
    memset(out, 0, sizeof *out);
    size_t at = sc->hdr;
    for (size_t i = 0; i < sc->nfields; i++) {
        const tm_inproc_field *f = &sc->fields[i];
        if (f->type == TM_INPROC_STR) {
            uint16_t n;
            memcpy(&n, p + f->offset, 2);
            const char *s = (const char *)p + at;
            put_member(f, out, &s);
            memcpy((char *)out + f->len_member, &n, 2);
            at += n;
        } else {
            put_member(f, out, p + f->offset);
        }
    }
    return 0;
}

int tm_inproc_decode(const tm_record *rec, tm_inproc_any *out)
{
    return decode_as(rec, rec ? rec->type : 0, out);
}

/* The typed decoders write only their own struct, never a whole union. */
#define DECODE_AS(type, member)                                                                    \
    do {                                                                                           \
        tm_inproc_any a;                                                                           \
        int rc = decode_as(rec, type, &a);                                                         \
        if (rc == 0)                                                                               \
            *out = a.member;                                                                       \
        return rc;                                                                                 \
    } while (0)

int tm_inproc_decode_step(const tm_record *rec, tm_inproc_step *out)
{
    DECODE_AS(TM_REC_STEP, step);
}

int tm_inproc_decode_capture(const tm_record *rec, tm_inproc_capture *out)
{
    DECODE_AS(TM_REC_CAPTURE, capture);
}

int tm_inproc_decode_phase(const tm_record *rec, tm_inproc_phase *out)
{
    DECODE_AS(TM_REC_PHASE, phase);
}

int tm_inproc_decode_oom(const tm_record *rec, tm_inproc_oom *out)
{
    DECODE_AS(TM_REC_OOM, oom);
}

int tm_inproc_decode_worker(const tm_record *rec, tm_inproc_worker *out)
{
    DECODE_AS(TM_REC_WORKER, worker);
}

int tm_inproc_decode_optstep(const tm_record *rec, tm_inproc_optstep *out)
{
    DECODE_AS(TM_REC_OPTSTEP, optstep);
}

int tm_inproc_decode_anatomy(const tm_record *rec, tm_inproc_anatomy *out)
{
    DECODE_AS(TM_REC_ANATOMY, anatomy);
}

int tm_inproc_decode_oomsum(const tm_record *rec, tm_inproc_oomsum *out)
{
    DECODE_AS(TM_REC_OOMSUM, oomsum);
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

/* The key: ",\"k\":" in JSON, " k=" in text, " " for a positional value. */
static void f_key(fmt *f, const char *k)
{
    if (f->rc)
        return;
    if (f->json)
        f->rc = tm_buf_printf(&f->b, ",\"%s\":", k);
    else
        f->rc = *k ? tm_buf_printf(&f->b, " %s=", k) : tm_buf_add(&f->b, " ", 1);
}

/* A string value: quoted and escaped in JSON, quoted with control bytes as
 * '?' in text (one line per record); ill-formed UTF-8 as U+FFFD in both. */
static void f_str(fmt *f, const char *s, size_t n)
{
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

static void f_secs(fmt *f, double s)
{
    if (!f->rc)
        f->rc = tm_buf_printf(&f->b, f->json ? "%.9f" : "%.6fs", s);
}

static const char *enum_name(const tm_inproc_field *fd, uint64_t v)
{
    for (uint64_t i = 0; fd->names[i]; i++)
        if (i == v)
            return fd->names[i];
    return "unknown";
}

/* One view entry of rec: its key and value, or nothing when left out. */
static void f_view(fmt *f, const schema *sc, const view *vw, const tm_inproc_any *rec)
{
    const tm_inproc_field *fa = &sc->fields[vw->a];
    tm_inproc_value a = tm_inproc_get(fa, rec);
    const char *key = vw->key ? vw->key : fa->key;
    const char *text = vw->text ? vw->text : key;
    const char *k = f->json ? key : text;
    if (a.absent)
        return; /* a field of a newer layout, in a record of the older one */
    switch (vw->op) {
    case V_SECS:
        f_key(f, k);
        f_secs(f, (double)a.i / 1e9);
        return;
    case V_SPAN:
        f_key(f, k);
        f_secs(f, tm_ns_diff_s(a.i, tm_inproc_get(&sc->fields[vw->b], rec).i));
        return;
    case V_FLAG:
        if (a.u & vw->bit) {
            f_raw(f, f->json ? ",\"" : " ");
            f_raw(f, key);
            f_raw(f, f->json ? "\":true" : "");
        }
        return;
    }
    switch (a.type) {
    case TM_INPROC_U32:
    case TM_INPROC_U64:
        if (fa->names) {
            const char *nm = enum_name(fa, a.u);
            f_key(f, k);
            if (f->json)
                f_str(f, nm, strlen(nm));
            else
                f_raw(f, nm);
            return;
        }
        if ((vw->omit & OMIT_ZERO) && a.u == 0)
            return;
        f_key(f, k);
        if (!f->rc)
            f->rc = tm_buf_printf(&f->b, "%" PRIu64, a.u);
        return;
    case TM_INPROC_I32:
    case TM_INPROC_I64:
        if ((vw->omit & OMIT_NEG) && a.i < 0)
            return;
        f_key(f, k);
        if (!f->rc)
            f->rc = tm_buf_printf(&f->b, "%" PRId64, a.i);
        return;
    case TM_INPROC_F64:
        if (isnan(a.f))
            return;
        f_key(f, k);
        if (!f->rc)
            f->rc = tm_buf_printf(&f->b, "%.17g", a.f);
        return;
    case TM_INPROC_STR:
        if ((vw->omit & OMIT_EMPTY) && a.len == 0)
            return;
        f_key(f, k);
        f_str(f, a.s, a.len);
        return;
    }
}

/* The fields of rec, after whatever the caller wrote.  JSON: every entry in
 * view order; text: positional values first, then "key=value" ones. */
static void f_fields(fmt *f, const schema *sc, const tm_inproc_any *rec)
{
    if (f->json) {
        for (size_t i = 0; i < sc->nviews; i++)
            f_view(f, sc, &sc->views[i], rec);
        return;
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < sc->nviews; i++) {
            const view *vw = &sc->views[i];
            bool pos = vw->text && !*vw->text;
            if (pos == (pass == 0))
                f_view(f, sc, vw, rec);
        }
}

/* Copies the finished line into buf; the length, or a negative errno. */
static int f_finish(fmt *f, char *buf, size_t cap)
{
    int rc;
    if (f->rc)
        rc = f->rc == -E2BIG ? -ENOSPC : f->rc;
    else if (f->b.len + 1 > cap)
        rc = -ENOSPC;
    else {
        memcpy(buf, f->b.len ? f->b.data : "", f->b.len);
        buf[f->b.len] = '\0';
        rc = (int)f->b.len;
    }
    tm_buf_free(&f->b);
    return rc;
}

int tm_inproc_json(uint16_t type, const tm_inproc_any *rec, char *buf, size_t cap)
{
    if (!rec || !buf || cap == 0)
        return tm_seterr(-EINVAL, "tm_inproc_json: NULL argument");
    const schema *sc = schema_of(type);
    if (!sc)
        return -ENOENT;
    fmt f = {.json = true};
    tm_buf_init(&f.b, TM_INPROC_FORMAT_MAX);
    f_fields(&f, sc, rec);
    return f_finish(&f, buf, cap);
}

int tm_inproc_format(const tm_record *rec, bool json, char *buf, size_t cap)
{
    if (!rec || !buf || cap == 0)
        return tm_seterr(-EINVAL, "tm_inproc_format: NULL argument");
    const schema *sc = schema_of(rec->type);
    if (!sc)
        return -ENOENT;
    tm_inproc_any a;
    int rc = tm_inproc_decode(rec, &a);
    if (rc)
        return rc;
    fmt f = {.json = json};
    tm_buf_init(&f.b, TM_INPROC_FORMAT_MAX);
    /* The record's kind: "step" / "\"type\":\"step\"". */
    f.rc = json ? tm_buf_printf(&f.b, "\"type\":\"%s\"", sc->name)
                : tm_buf_printf(&f.b, "%s", sc->name);
    f_fields(&f, sc, &a);
    if (json)
        f_raw(&f, "}");
    return f_finish(&f, buf, cap);
}
