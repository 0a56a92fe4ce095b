/*
 * inproc_schema.h - the in-process record layouts (types 16-23), described
 * once.  Included by inproc.c only: the encoders, the decoders, the
 * formatter behind `trainmon dump` / `dump --json` / `export --format
 * jsonl` and, through tm_inproc_fields() and tm_inproc_get(), Python's
 * read_records and Monitor all walk these tables.  docs/FORMAT.md
 * ("In-process records") shows the same offsets for people; the unit test
 * (tests/unit/test_inproc.c) checks the two agree byte for byte.
 *
 * Each type is two lists:
 *
 *  - its FIELDS, in the X-macro TM_SCHEMA_<TYPE>(X):
 *      X(key, member, ctype, offset, unit, names)
 *    key is the field's one name (read_records, dump --json, jsonl),
 *    member the tm_inproc_* struct member (a string's length is member_len),
 *    offset its place in the payload (a string's: of its u16 length; the
 *    bytes follow the fixed part, strings in field order), names an enum's
 *    value names (or NULL).  Bytes of the fixed part no field covers are
 *    padding, written as 0.
 *
 *  - its VIEW: how dump and jsonl show it, in order.  A stored field is
 *    shown under its own key or hidden (then shown through a derived value:
 *    end_ns - start_ns as duration_s, a flag bit as a boolean).  Derived
 *    keys are named here and nowhere else.
 */
#ifndef TM_INPROC_SCHEMA_H
#define TM_INPROC_SCHEMA_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trainmon.h"

/* Fixed part of each payload (strings follow it). */
#define TM_STEP_LEN 144u
/* A step without a model run under no_grad before its training forward
 * is written without nograd_ns and nograd_calls (128 bytes, the layout
 * before they were appended, or 112 or 96 below): read as absent (-1). */
#define TM_STEP_LEN_V4 128u
/* A step whose preparation after the forward was not measured is written
 * without prep_fwd_ns and prep_opt_ns (112 bytes, the layout before they
 * were appended, or 96 below): a decoder reads them as absent (-1). */
#define TM_STEP_LEN_V3 112u
/* A step that no optimizer step ended is written without opt_start_ns and
 * optimizer (96 bytes, the layout before they were appended): a decoder
 * reads them as absent (-1). */
#define TM_STEP_LEN_V2 96u
/* The step payload before the step model (trainmon <= 0.x wrote 40 bytes):
 * a decoder accepts a payload as short as a type's oldest length, and the
 * fields past it are absent (docs/FORMAT.md: -1, NAN, 0, ""). */
#define TM_STEP_LEN_V1 40u
#define TM_CAPTURE_HDR 108u
#define TM_PHASE_HDR 20u
#define TM_OOM_HDR 68u
#define TM_WORKER_LEN 72u
#define TM_WORKER_LEN_V1 48u
#define TM_OPTSTEP_LEN 32u
#define TM_ANATOMY_HDR 102u
#define TM_OOMSUM_HDR 188u

/* Whether a step record carries the optimizer step that ended it
 * (opt_start_ns > 0 in a payload of 112 bytes or more), without decoding it. */
static inline int tm_inproc_step_has_opt(const tm_record *rec)
{
    int64_t t0;
    if (rec->type != TM_REC_STEP || rec->len < TM_STEP_LEN_V3 || !rec->payload)
        return 0;
    memcpy(&t0, (const char *)rec->payload + TM_STEP_LEN_V2, sizeof t0);
    return t0 > 0;
}

/* Enum value names by value, NULL-terminated; 0 is no valid value. */
static const char *const tm_capture_sources[] = {"unknown", "user", "step", "phase", "oom", NULL};
static const char *const tm_phase_actions[] = {"unknown", "enter", "exit", NULL};
static const char *const tm_oom_sources[] = {"unknown", "observer", "exception", NULL};
static const char *const tm_step_boundaries[] = {"unknown", "loader", "backward", "optimizer",
                                                 NULL};
static const char *const tm_step_phases[] = {"unknown", "train", "eval", NULL};
static const char *const tm_anatomy_reasons[] = {"unknown", "first", "changed", NULL};
static const char *const tm_oomsum_statuses[] = {"unknown", "ok", "cut", "no_snapshot", NULL};
static const char *const tm_oomsum_pools[] = {"unknown", "small", "large", NULL};

/* clang-format off */
#define TM_SCHEMA_STEP(X)                                          \
    X("step",         step,         U64, 0,  "",   NULL)           \
    X("start_ns",     start_ns,     I64, 8,  "ns", NULL)           \
    X("end_ns",       end_ns,       I64, 16, "ns", NULL)           \
    X("data_wait_ns", data_wait_ns, I64, 24, "ns", NULL)           \
    X("flags",        flags,        U32, 32, "",   NULL)           \
    X("boundary",     boundary,     U32, 40, "",   tm_step_boundaries) \
    X("phase",        phase,        U32, 44, "",   tm_step_phases) \
    X("micro_batches", micro_batches, I32, 48, "count", NULL)      \
    X("batches",      batches,      I32, 52, "count", NULL)        \
    X("prep_ns",      prep_ns,      I64, 56, "ns", NULL)           \
    X("prep_cpu_ns",  prep_cpu_ns,  I64, 64, "ns", NULL)           \
    X("backward_ns",  backward_ns,  I64, 72, "ns", NULL)           \
    X("wait_cpu_ns",  wait_cpu_ns,  I64, 80, "ns", NULL)           \
    X("collective_ns", collective_ns, I64, 88, "ns", NULL)         \
    X("opt_start_ns", opt_start_ns, I64, 96, "ns", NULL)           \
    X("optimizer",    optimizer,    I32, 104, "",  NULL)           \
    X("prep_fwd_ns",  prep_fwd_ns,  I64, 112, "ns", NULL)           \
    X("prep_opt_ns",  prep_opt_ns,  I64, 120, "ns", NULL)           \
    X("nograd_ns",    nograd_ns,    I64, 128, "ns", NULL)           \
    X("nograd_calls", nograd_calls, I32, 136, "count", NULL)

#define TM_SCHEMA_CAPTURE(X)                                                 \
    X("source",            source,            U32, 0,   "",      tm_capture_sources) \
    X("device",            device,            I32, 4,   "",      NULL)       \
    X("step",              step,              U64, 8,   "",      NULL)       \
    X("allocated",         allocated,         F64, 16,  "bytes", NULL)       \
    X("reserved",          reserved,          F64, 24,  "bytes", NULL)       \
    X("peak_allocated",    peak_allocated,    F64, 32,  "bytes", NULL)       \
    X("active",            active,            F64, 40,  "bytes", NULL)       \
    X("inactive_split",    inactive_split,    F64, 48,  "bytes", NULL)       \
    X("requested",         requested,         F64, 56,  "bytes", NULL)       \
    X("free_device",       free_device,       F64, 64,  "bytes", NULL)       \
    X("total_device",      total_device,      F64, 72,  "bytes", NULL)       \
    X("num_alloc_retries", num_alloc_retries, F64, 80,  "count", NULL)       \
    X("num_ooms",          num_ooms,          F64, 88,  "count", NULL)       \
    X("host_rss",          host_rss,          F64, 96,  "bytes", NULL)       \
    X("tag",               tag,               STR, 104, "",      NULL)

#define TM_SCHEMA_PHASE(X)                                         \
    X("action", kind,  U32, 0,  "", tm_phase_actions)              \
    X("depth",  depth, U32, 4,  "", NULL)                          \
    X("step",   step,  U64, 8,  "", NULL)                          \
    X("name",   name,  STR, 16, "", NULL)

#define TM_SCHEMA_OOM(X)                                           \
    X("device",       device,       I32, 0,  "",      NULL)        \
    X("seq",          seq,          U32, 4,  "",      NULL)        \
    X("step",         step,         U64, 8,  "",      NULL)        \
    X("source",       source,       U32, 16, "",      tm_oom_sources) \
    X("requested",    requested,    F64, 24, "bytes", NULL)        \
    X("free_device",  free_device,  F64, 32, "bytes", NULL)        \
    X("total_device", total_device, F64, 40, "bytes", NULL)        \
    X("allocated",    allocated,    F64, 48, "bytes", NULL)        \
    X("reserved",     reserved,     F64, 56, "bytes", NULL)        \
    X("phase",        phase,        STR, 64, "",      NULL)        \
    X("snapshot",     snapshot,     STR, 66, "",      NULL)

#define TM_SCHEMA_WORKER(X)                                        \
    X("worker",    worker_id, I32, 0,  "",      NULL)              \
    X("pid",       pid,       U32, 4,  "",      NULL)              \
    X("batch",     batch,     U64, 8,  "",      NULL)              \
    X("start_ns",  start_ns,  I64, 16, "ns",    NULL)              \
    X("end_ns",    end_ns,    I64, 24, "ns",    NULL)              \
    X("cpu_s",     cpu_s,     F64, 32, "s",     NULL)              \
    X("rss_bytes", rss_bytes, F64, 40, "bytes", NULL)              \
    X("layout",    layout,    U32, 48, "",      NULL)              \
    X("cpu_start_s", cpu_start_s, F64, 56, "s", NULL)              \
    X("set",       set,       U64, 64, "",      NULL)

#define TM_SCHEMA_OPTSTEP(X)                                       \
    X("step",      step,      U64, 0,  "",   NULL)                 \
    X("start_ns",  start_ns,  I64, 8,  "ns", NULL)                 \
    X("end_ns",    end_ns,    I64, 16, "ns", NULL)                 \
    X("optimizer", optimizer, U32, 24, "",   NULL)

#define TM_SCHEMA_ANATOMY(X)                                       \
    X("step",         step,         U64, 0,   "",      NULL)       \
    X("device",       device,       I32, 8,   "",      NULL)       \
    X("optimizer",    optimizer,    U32, 12,  "",      NULL)       \
    X("params",       params,       F64, 16,  "bytes", NULL)       \
    X("grads",        grads,        F64, 24,  "bytes", NULL)       \
    X("optim_state",  optim_state,  F64, 32,  "bytes", NULL)       \
    X("activations",  activations,  F64, 40,  "bytes", NULL)       \
    X("unknown",      unknown,      F64, 48,  "bytes", NULL)       \
    X("allocated",    allocated,    F64, 56,  "bytes", NULL)       \
    X("reserved",     reserved,     F64, 64,  "bytes", NULL)       \
    X("free_device",  free_device,  F64, 72,  "bytes", NULL)       \
    X("total_device", total_device, F64, 80,  "bytes", NULL)       \
    X("batch_size",   batch_size,   I64, 88,  "count", NULL)       \
    X("reason",       reason,       U32, 96,  "",      tm_anatomy_reasons) \
    X("device_type",  kind,         STR, 100, "",      NULL)

#define TM_SCHEMA_OOMSUM(X) \
    X("seq",              seq,              U32, 0,   "",      NULL) \
    X("device",           device,           I32, 4,   "",      NULL) \
    X("step",             step,             U64, 8,   "",      NULL) \
    X("status",           status,           U32, 16,  "",      tm_oomsum_statuses) \
    X("pool",             pool,             U32, 20,  "",      tm_oomsum_pools) \
    X("requested",        requested,        F64, 24,  "bytes", NULL) \
    X("free_device",      free_device,      F64, 32,  "bytes", NULL) \
    X("largest_free",     largest_free,     F64, 40,  "bytes", NULL) \
    X("free_cached",      free_cached,      F64, 48,  "bytes", NULL) \
    X("fragments",        fragments,        F64, 56,  "count", NULL) \
    X("expandable",       expandable,       F64, 64,  "bytes", NULL) \
    X("reserved",         reserved,         F64, 72,  "bytes", NULL) \
    X("live",             live,             F64, 80,  "bytes", NULL) \
    X("live_params",      live_params,      F64, 88,  "bytes", NULL) \
    X("live_grads",       live_grads,       F64, 96,  "bytes", NULL) \
    X("live_optim_state", live_optim_state, F64, 104, "bytes", NULL) \
    X("live_other",       live_other,       F64, 112, "bytes", NULL) \
    X("live_unknown",     live_unknown,     F64, 120, "bytes", NULL) \
    X("blocks",           blocks,           F64, 128, "count", NULL) \
    X("site1_bytes",      site1_bytes,      F64, 136, "bytes", NULL) \
    X("site2_bytes",      site2_bytes,      F64, 144, "bytes", NULL) \
    X("site3_bytes",      site3_bytes,      F64, 152, "bytes", NULL) \
    X("site4_bytes",      site4_bytes,      F64, 160, "bytes", NULL) \
    X("site5_bytes",      site5_bytes,      F64, 168, "bytes", NULL) \
    X("why",              why,              STR, 176, "",      NULL) \
    X("site1",            site1,            STR, 178, "",      NULL) \
    X("site2",            site2,            STR, 180, "",      NULL) \
    X("site3",            site3,            STR, 182, "",      NULL) \
    X("site4",            site4,            STR, 184, "",      NULL) \
    X("site5",            site5,            STR, 186, "",      NULL)
/* clang-format on */

/* Field indices, for the views: F_<TYPE>_<member>. */
#define TM_SCHEMA_IDX(P, member) F_##P##_##member,
#define TM_IDX_STEP(k, m, t, o, u, n) TM_SCHEMA_IDX(STEP, m)
#define TM_IDX_CAPTURE(k, m, t, o, u, n) TM_SCHEMA_IDX(CAPTURE, m)
#define TM_IDX_PHASE(k, m, t, o, u, n) TM_SCHEMA_IDX(PHASE, m)
#define TM_IDX_OOM(k, m, t, o, u, n) TM_SCHEMA_IDX(OOM, m)
#define TM_IDX_WORKER(k, m, t, o, u, n) TM_SCHEMA_IDX(WORKER, m)
#define TM_IDX_OPTSTEP(k, m, t, o, u, n) TM_SCHEMA_IDX(OPTSTEP, m)
#define TM_IDX_ANATOMY(k, m, t, o, u, n) TM_SCHEMA_IDX(ANATOMY, m)
#define TM_IDX_OOMSUM(k, m, t, o, u, n) TM_SCHEMA_IDX(OOMSUM, m)
enum { TM_SCHEMA_STEP(TM_IDX_STEP) F_STEP_N };
enum { TM_SCHEMA_CAPTURE(TM_IDX_CAPTURE) F_CAPTURE_N };
enum { TM_SCHEMA_PHASE(TM_IDX_PHASE) F_PHASE_N };
enum { TM_SCHEMA_OOM(TM_IDX_OOM) F_OOM_N };
enum { TM_SCHEMA_WORKER(TM_IDX_WORKER) F_WORKER_N };
enum { TM_SCHEMA_OPTSTEP(TM_IDX_OPTSTEP) F_OPTSTEP_N };
enum { TM_SCHEMA_ANATOMY(TM_IDX_ANATOMY) F_ANATOMY_N };
enum { TM_SCHEMA_OOMSUM(TM_IDX_OOMSUM) F_OOMSUM_N };

/* The table rows.  A string's length member is found by name (member_len);
 * other types have none. */
#define TM_LEN_U32(S, m) 0
#define TM_LEN_I32(S, m) 0
#define TM_LEN_U64(S, m) 0
#define TM_LEN_I64(S, m) 0
#define TM_LEN_F64(S, m) 0
#define TM_LEN_STR(S, m) offsetof(S, m##_len)
#define TM_ROW(S, k, m, t, o, u, n)                                                                \
    {.key = k,                                                                                     \
     .type = TM_INPROC_##t,                                                                        \
     .offset = o,                                                                                  \
     .unit = u,                                                                                    \
     .names = n,                                                                                   \
     .member = offsetof(S, m),                                                                     \
     .len_member = TM_LEN_##t(S, m)},

#endif /* TM_INPROC_SCHEMA_H */
