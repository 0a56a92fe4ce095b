/*
 * timeline.c - a run: every record file of one or more run directories,
 * read once and kept in compact arrays on one wall-clock timeline, for the
 * analysis (analysis.c), the report and the exporters.
 *
 * Each file is loaded on its own into a "part" (its series, steps,
 * captures, ... and a string arena), by as many threads as there are CPUs:
 * a 24-hour recording of 8 ranks is a few hundred MB of records, and the
 * CRC checks and decoding are the cost.  The parts are then concatenated in
 * a fixed order (directories as given, files by name), so the result does
 * not depend on the threads.  Series values stay in the arrays their part
 * grew (they are only pointed to); the fixed-size in-process records are
 * copied once into the run's arrays.
 *
 * Times: a record's monotonic time plus its file's start_real_ns -
 * start_mono_ns is wall clock (docs/FORMAT.md); several hosts' directories
 * merge on it.  Every clock comes from a file, which may be crafted or
 * corrupted, so the sums saturate (util.h) rather than overflow: a wrong
 * time is bounded, never undefined behaviour.
 *
 * Files are opened the way record files are (tm_rec_open_read: no blocking,
 * no symlink followed, regular files only): a FIFO named rank0.tmr or
 * meta.json becomes a note and the rest of the run is read.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infer.h"
#include "inproc_schema.h"
#include "rec.h"
#include "util.h"

/* Limits that keep a hostile or broken directory from taking the machine. */
#define RUN_MAX_FILES 4096u
#define RUN_MAX_SERIES_ID (1u << 20) /* ids above are taken as garbage */
#define RUN_META_MAX (1u << 20)
#define RUN_NOTES_PER_FILE 20u /* damage lines per file, then a count */
#define RUN_ARENA_CHUNK (64u * 1024u)
#define RUN_MAX_THREADS 16

/* --- a string arena with interning: tags and series names repeat in every
 * record, so each distinct string is stored once per file. */

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, size;
    char data[];
};

struct arena {
    struct arena_chunk *head;
    const char **slots; /* interned strings, open addressing */
    uint32_t *hashes;
    size_t nslots, nused;
};

static char *arena_alloc(struct arena *a, size_t len)
{
    struct arena_chunk *c = a->head;
    if (!c || c->size - c->used < len) {
        size_t size = len > RUN_ARENA_CHUNK ? len : RUN_ARENA_CHUNK;
        c = malloc(sizeof *c + size);
        if (!c)
            return NULL;
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    char *p = c->data + c->used;
    c->used += len;
    return p;
}

static const char *arena_copy(struct arena *a, const char *s, size_t len)
{
    char *p = arena_alloc(a, len + 1);
    if (!p)
        return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

static uint32_t fnv1a(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The interned copy of s[0..len), or a plain copy once the table is full
 * (a file with a million distinct tags costs memory, not time). */
static const char *arena_intern(struct arena *a, const char *s, size_t len)
{
    if (a->nused * 2 >= a->nslots) {
        size_t n = a->nslots ? a->nslots * 2 : 256;
        if (n > (1u << 17))
            return arena_copy(a, s, len);
        const char **slots = calloc(n, sizeof *slots);
        uint32_t *hashes = calloc(n, sizeof *hashes);
        if (!slots || !hashes) {
            free(slots);
            free(hashes);
            return arena_copy(a, s, len);
        }
        for (size_t i = 0; i < a->nslots; i++) {
            if (!a->slots[i])
                continue;
            size_t j = a->hashes[i] & (n - 1);
            while (slots[j])
                j = (j + 1) & (n - 1);
            slots[j] = a->slots[i];
            hashes[j] = a->hashes[i];
        }
        free(a->slots);
        free(a->hashes);
        a->slots = slots;
        a->hashes = hashes;
        a->nslots = n;
    }
    uint32_t h = fnv1a(s, len);
    size_t j = h & (a->nslots - 1);
    while (a->slots[j]) {
        if (a->hashes[j] == h && strncmp(a->slots[j], s, len) == 0 && a->slots[j][len] == '\0')
            return a->slots[j];
        j = (j + 1) & (a->nslots - 1);
    }
    const char *p = arena_copy(a, s, len);
    if (p) {
        a->slots[j] = p;
        a->hashes[j] = h;
        a->nused++;
    }
    return p;
}

static void arena_free(struct arena *a)
{
    while (a->head) {
        struct arena_chunk *n = a->head->next;
        free(a->head);
        a->head = n;
    }
    free(a->slots);
    free(a->hashes);
    memset(a, 0, sizeof *a);
}

/* Grows *p (of *cap elements of el bytes) to hold need elements. */
static int grow(void *p, size_t *cap, size_t need, size_t el)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc = nc + nc / 2 + 16;
    void *q = realloc(*(void **)p, nc * el);
    if (!q)
        return -ENOMEM;
    *(void **)p = q;
    *cap = nc;
    return 0;
}

/* Arrays are allocated once at their final size (the first pass counts):
 * large ones are their own mappings with their pages faulted in by one
 * call.  On a virtual machine a first touch of a page can cost tens of
 * microseconds, and a day of samples is tens of thousands of pages, so
 * growing arrays by copying (realloc) or page by page was most of the cost
 * of loading a long run. */
#define RUN_BIG_BYTES (64u * 1024u)

struct big {
    void *p;
    size_t bytes;
    bool mapped;
};

/* An array of exactly bytes, its pages faulted in by one call (MAP_POPULATE
 * is several times cheaper per page than a fault per first touch). */
static int big_reserve(struct big *b, size_t bytes)
{
    if (bytes < RUN_BIG_BYTES) {
        if (!(b->p = malloc(bytes ? bytes : 1)))
            return -ENOMEM;
        b->mapped = false;
    } else {
        void *q = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (q == MAP_FAILED)
            return -ENOMEM;
        b->p = q;
        b->mapped = true;
    }
    b->bytes = bytes;
    return 0;
}

static void big_free(struct big *b)
{
    if (b->mapped)
        munmap(b->p, b->bytes);
    else
        free(b->p);
    memset(b, 0, sizeof *b);
}

/* --- one record file while it loads */

struct pseries {
    const char *name, *labels, *unit;
    struct big t, v; /* int64_t and double */
    size_t n, want;  /* points stored, and counted by the first pass */
    /* Series sampled together (one sampler call) have the same times: the
     * first series of their records leads, and the others share its time
     * array (a day of samples of 150 series is 100 MB of times otherwise). */
    size_t lead; /* index + 1 of the series leading every record it is in */
    bool mixed;  /* led by different series: keeps its own times */
    bool shared; /* uses the lead's time array */
};

enum { V_STEP, V_CAPTURE, V_PHASE, V_OOM, V_WORKER, V_OPTSTEP, V_ANATOMY, V_OOMSUM, V_EVENT, V_N };
static const size_t vec_el[V_N] = {
    sizeof(tm_run_step),    sizeof(tm_run_capture), sizeof(tm_run_phase),
    sizeof(tm_run_oom),     sizeof(tm_run_worker),  sizeof(tm_run_optstep),
    sizeof(tm_run_anatomy), sizeof(tm_run_oomsum),  sizeof(tm_run_event)};

struct part {
    char *path;
    const char *dir, *file;
    bool ok; /* a source: the header was usable */
    tm_rec_header hdr;
    int64_t off;
    int64_t first, last;
    uint64_t records;
    size_t ndamage;
    bool torn;
    struct arena arena;
    struct pseries *series;
    size_t nseries, series_cap;
    uint32_t *id2s; /* series id -> index + 1 (0: undefined) */
    size_t id2s_cap;
    uint32_t src;     /* its index among the sources */
    size_t cnt[V_N];  /* records of each kind counted by the first pass, */
    size_t got[V_N];  /* stored by the second, */
    size_t base[V_N]; /* at this index of the run's arrays */
    char *dst[V_N];
    union {
        tm_run_step a;
        tm_run_capture b;
        tm_run_phase c;
        tm_run_oom d;
        tm_run_worker e;
        tm_run_optstep f;
        tm_run_anatomy h;
        tm_run_oomsum k;
        tm_run_event g;
    } spill; /* a record beyond the count (the file grew meanwhile): dropped */
    char **notes;
    size_t nnotes;
    bool nomem;
};

struct tm_run {
    char **dirs;
    char **metas;
    size_t ndirs;
    struct part *parts;
    size_t nparts;
    tm_run_source *sources;
    size_t nsources;
    tm_run_series *series;
    size_t nseries;
    struct big v[V_N];
    size_t nv[V_N];
    char **notes;
    size_t nnotes, notes_cap;
    int64_t start, end;
};

static void part_note(struct part *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void part_note(struct part *p, const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    int rc = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (rc < 0)
        return;
    char **n = realloc(p->notes, (p->nnotes + 1) * sizeof *n);
    if (!n) {
        free(s);
        return;
    }
    p->notes = n;
    p->notes[p->nnotes++] = s;
}

/* Where the second pass stores the next record of kind k. */
static void *part_slot(struct part *p, int k)
{
    if (p->got[k] >= p->cnt[k])
        return &p->spill;
    return p->dst[k] + vec_el[k] * p->got[k]++;
}

static int part_def_series(struct part *p, const tm_record *rec)
{
    tm_rec_series_def d;
    if (tm_rec_decode_series(rec, &d) < 0 || d.id == 0 || d.id >= RUN_MAX_SERIES_ID)
        return 0;
    /* A ring file repeats every definition at the start of each block:
     * most definitions are a repeat of what the id already names. */
    if (d.id < p->id2s_cap && p->id2s[d.id]) {
        const struct pseries *s = &p->series[p->id2s[d.id] - 1];
        if (strlen(s->name) == d.name_len && memcmp(s->name, d.name, d.name_len) == 0 &&
            strlen(s->labels) == d.labels_len && memcmp(s->labels, d.labels, d.labels_len) == 0)
            return 0;
    }
    const char *name = arena_intern(&p->arena, d.name, d.name_len);
    const char *labels = arena_intern(&p->arena, d.labels, d.labels_len);
    const char *unit = arena_intern(&p->arena, d.unit, d.unit_len);
    if (!name || !labels || !unit)
        return -ENOMEM;
    size_t idx = p->nseries;
    for (size_t i = 0; i < p->nseries; i++)
        if (p->series[i].name == name && p->series[i].labels == labels) {
            idx = i;
            break;
        }
    if (idx == p->nseries) {
        if (grow(&p->series, &p->series_cap, p->nseries + 1, sizeof *p->series) < 0)
            return -ENOMEM;
        p->series[idx] = (struct pseries){.name = name, .labels = labels, .unit = unit};
        p->nseries++;
    }
    if (d.id >= p->id2s_cap) {
        size_t old = p->id2s_cap;
        if (grow(&p->id2s, &p->id2s_cap, (size_t)d.id + 1, sizeof *p->id2s) < 0)
            return -ENOMEM;
        memset(p->id2s + old, 0, (p->id2s_cap - old) * sizeof *p->id2s);
    }
    p->id2s[d.id] = (uint32_t)idx + 1;
    return 0;
}

struct scratch {
    uint32_t *ids;
    double *vals;
    size_t cap;
};

static int part_sample(struct part *p, const tm_record *rec, int64_t t, struct scratch *sc)
{
    int n = tm_rec_decode_sample(rec, sc->ids, sc->vals, sc->cap);
    if (n < 0)
        return 0;
    if ((size_t)n > sc->cap) {
        size_t c1 = sc->cap, c2 = sc->cap;
        if (grow(&sc->ids, &c1, (size_t)n, sizeof *sc->ids) < 0 ||
            grow(&sc->vals, &c2, (size_t)n, sizeof *sc->vals) < 0)
            return -ENOMEM;
        sc->cap = c1 < c2 ? c1 : c2;
        n = tm_rec_decode_sample(rec, sc->ids, sc->vals, sc->cap);
        if (n < 0 || (size_t)n > sc->cap)
            return 0;
    }
    for (int i = 0; i < n; i++) {
        uint32_t id = sc->ids[i];
        if (id >= p->id2s_cap || !p->id2s[id])
            continue; /* never defined (its definition was in damage) */
        struct pseries *s = &p->series[p->id2s[id] - 1];
        if (s->n >= s->want)
            continue; /* beyond the count: the file grew after the first pass */
        if (!s->shared)
            ((int64_t *)s->t.p)[s->n] = t;
        ((double *)s->v.p)[s->n] = sc->vals[i];
        s->n++;
    }
    return 0;
}

static const char *part_str(struct part *p, const char *s, size_t len, uint16_t *outlen)
{
    *outlen = (uint16_t)len;
    return arena_intern(&p->arena, s ? s : "", s ? len : 0);
}

/* Decodes one in-process record into the part's arrays.  0, or -ENOMEM. */
static int part_inproc(struct part *p, const tm_record *rec, int64_t t)
{
    int32_t rank = p->hdr.rank;
    int64_t off = p->off;
    switch (rec->type) {
    case TM_REC_STEP: {
        tm_inproc_step s;
        if (tm_inproc_decode_step(rec, &s) < 0)
            return 0;
        tm_run_step *o = part_slot(p, V_STEP);
        s.start_ns = tm_sat_add64(s.start_ns, off);
        s.end_ns = tm_sat_add64(s.end_ns, off);
        if (s.opt_start_ns > 0) {
            /* the optimizer step that ended it, folded in (one record a
             * step): an optimizer step of its own for the readers, numbered
             * as its separate record was (steps begun then) */
            s.opt_start_ns = tm_sat_add64(s.opt_start_ns, off);
            tm_run_optstep *os = part_slot(p, V_OPTSTEP);
            *os =
                (tm_run_optstep){.source = p->src,
                                 .rank = rank,
                                 .o = {.step = s.step + 1,
                                       .start_ns = s.opt_start_ns,
                                       .end_ns = s.end_ns,
                                       .optimizer = (uint32_t)(s.optimizer > 0 ? s.optimizer : 0)}};
        }
        *o = (tm_run_step){.source = p->src, .rank = rank, .s = s};
        return 0;
    }
    case TM_REC_CAPTURE: {
        tm_inproc_capture c;
        if (tm_inproc_decode_capture(rec, &c) < 0)
            return 0;
        if (!(c.tag = part_str(p, c.tag, c.tag_len, &c.tag_len)))
            return -ENOMEM;
        tm_run_capture *o = part_slot(p, V_CAPTURE);
        *o = (tm_run_capture){.source = p->src, .rank = rank, .t_ns = t, .c = c};
        return 0;
    }
    case TM_REC_PHASE: {
        tm_inproc_phase ph;
        if (tm_inproc_decode_phase(rec, &ph) < 0)
            return 0;
        if (!(ph.name = part_str(p, ph.name, ph.name_len, &ph.name_len)))
            return -ENOMEM;
        tm_run_phase *o = part_slot(p, V_PHASE);
        *o = (tm_run_phase){.source = p->src, .rank = rank, .t_ns = t, .p = ph};
        return 0;
    }
    case TM_REC_OOM: {
        tm_inproc_oom m;
        if (tm_inproc_decode_oom(rec, &m) < 0)
            return 0;
        if (!(m.phase = part_str(p, m.phase, m.phase_len, &m.phase_len)) ||
            !(m.snapshot = part_str(p, m.snapshot, m.snapshot_len, &m.snapshot_len)))
            return -ENOMEM;
        tm_run_oom *o = part_slot(p, V_OOM);
        *o = (tm_run_oom){.source = p->src, .rank = rank, .t_ns = t, .o = m};
        return 0;
    }
    case TM_REC_WORKER: {
        tm_inproc_worker w;
        if (tm_inproc_decode_worker(rec, &w) < 0)
            return 0;
        w.start_ns = tm_sat_add64(w.start_ns, off);
        w.end_ns = tm_sat_add64(w.end_ns, off);
        tm_run_worker *o = part_slot(p, V_WORKER);
        *o = (tm_run_worker){.source = p->src, .rank = rank, .w = w};
        return 0;
    }
    case TM_REC_OPTSTEP: {
        tm_inproc_optstep s;
        if (tm_inproc_decode_optstep(rec, &s) < 0)
            return 0;
        s.start_ns = tm_sat_add64(s.start_ns, off);
        s.end_ns = tm_sat_add64(s.end_ns, off);
        tm_run_optstep *o = part_slot(p, V_OPTSTEP);
        *o = (tm_run_optstep){.source = p->src, .rank = rank, .o = s};
        return 0;
    }
    case TM_REC_ANATOMY: {
        tm_inproc_anatomy a;
        if (tm_inproc_decode_anatomy(rec, &a) < 0)
            return 0;
        if (!(a.kind = part_str(p, a.kind, a.kind_len, &a.kind_len)))
            return -ENOMEM;
        tm_run_anatomy *o = part_slot(p, V_ANATOMY);
        *o = (tm_run_anatomy){.source = p->src, .rank = rank, .t_ns = t, .a = a};
        return 0;
    }
    case TM_REC_OOMSUM: {
        tm_inproc_oomsum s;
        if (tm_inproc_decode_oomsum(rec, &s) < 0)
            return 0;
        if (!(s.why = part_str(p, s.why, s.why_len, &s.why_len)) ||
            !(s.site1 = part_str(p, s.site1, s.site1_len, &s.site1_len)) ||
            !(s.site2 = part_str(p, s.site2, s.site2_len, &s.site2_len)) ||
            !(s.site3 = part_str(p, s.site3, s.site3_len, &s.site3_len)) ||
            !(s.site4 = part_str(p, s.site4, s.site4_len, &s.site4_len)) ||
            !(s.site5 = part_str(p, s.site5, s.site5_len, &s.site5_len)))
            return -ENOMEM;
        tm_run_oomsum *o = part_slot(p, V_OOMSUM);
        *o = (tm_run_oomsum){.source = p->src, .rank = rank, .t_ns = t, .o = s};
        return 0;
    }
    default:
        return 0; /* a type this version does not know: skipped by design */
    }
}

static int part_event(struct part *p, const tm_record *rec, int64_t t)
{
    tm_rec_event_def e;
    if (tm_rec_decode_event(rec, &e) < 0)
        return 0;
    const char *name = arena_intern(&p->arena, e.name, e.name_len);
    const char *json = arena_copy(&p->arena, e.json ? e.json : "", e.json ? e.json_len : 0);
    if (!name || !json)
        return -ENOMEM;
    tm_run_event *o = part_slot(p, V_EVENT);
    *o = (tm_run_event){.source = p->src, .t_ns = t, .name = name, .json = json};
    return 0;
}

/* The kind of an in-process or event record, V_N for the others. */
static int rec_kind(uint16_t type)
{
    switch (type) {
    case TM_REC_STEP:
        return V_STEP;
    case TM_REC_CAPTURE:
        return V_CAPTURE;
    case TM_REC_PHASE:
        return V_PHASE;
    case TM_REC_OOM:
        return V_OOM;
    case TM_REC_WORKER:
        return V_WORKER;
    case TM_REC_OPTSTEP:
        return V_OPTSTEP;
    case TM_REC_ANATOMY:
        return V_ANATOMY;
    case TM_REC_OOMSUM:
        return V_OOMSUM;
    case TM_REC_EVENT:
        return V_EVENT;
    default:
        return V_N;
    }
}

/* First pass: counts the records of each kind and the points of each
 * series, so that the second pass writes into arrays of the exact size
 * (and the run's arrays at their final place): on a virtual machine,
 * touching fresh memory costs more than reading the file twice. */
static void part_count(struct part *p)
{
    tm_reader *rd = NULL;
    struct scratch sc = {0};
    if (tm_reader_open(&rd, p->path) < 0) {
        part_note(p, "%s, skipped", tm_last_error());
        return;
    }
    p->ok = true;
    tm_record rec;
    while (tm_reader_next(rd, &rec) == 1) {
        int k = rec_kind(rec.type);
        if (k < V_N) {
            p->cnt[k]++;
            if (k == V_STEP && tm_inproc_step_has_opt(&rec))
                p->cnt[V_OPTSTEP]++;
        } else if (rec.type == TM_REC_SERIES) {
            if (part_def_series(p, &rec) < 0)
                goto nomem;
        } else if (rec.type == TM_REC_SAMPLE) {
            int n = tm_rec_decode_sample(&rec, sc.ids, sc.vals, sc.cap);
            if (n > 0 && (size_t)n > sc.cap) {
                size_t c1 = sc.cap, c2 = sc.cap;
                if (grow(&sc.ids, &c1, (size_t)n, sizeof *sc.ids) < 0 ||
                    grow(&sc.vals, &c2, (size_t)n, sizeof *sc.vals) < 0)
                    goto nomem;
                sc.cap = c1 < c2 ? c1 : c2;
                n = tm_rec_decode_sample(&rec, sc.ids, sc.vals, sc.cap);
            }
            size_t lead = 0;
            for (int i = 0; i < n && (size_t)i < sc.cap; i++) {
                if (sc.ids[i] >= p->id2s_cap || !p->id2s[sc.ids[i]])
                    continue;
                size_t idx = p->id2s[sc.ids[i]];
                struct pseries *ps = &p->series[idx - 1];
                if (!lead)
                    lead = idx;
                if (!ps->lead)
                    ps->lead = lead;
                else if (ps->lead != lead)
                    ps->mixed = true;
                ps->want++;
            }
        }
    }
    for (size_t i = 0; i < p->nseries; i++) {
        struct pseries *s = &p->series[i];
        /* Every record holding s is led by L (which is in each of them once)
         * and both have as many points: they were in the same records. */
        const struct pseries *l = s->lead ? &p->series[s->lead - 1] : NULL;
        s->shared =
            l && l != s && !s->mixed && !l->mixed && l->lead == s->lead && l->want == s->want;
        if ((!s->shared && big_reserve(&s->t, s->want * sizeof(int64_t)) < 0) ||
            big_reserve(&s->v, s->want * sizeof(double)) < 0)
            goto nomem;
    }
    goto out;
nomem:
    p->nomem = true;
out:
    free(sc.ids);
    free(sc.vals);
    tm_reader_close(&rd);
}

/* Every record kind but the event carries its process's rank after its
 * source (part_late_rank sets it in place). */
_Static_assert(offsetof(tm_run_step, rank) == 4 && offsetof(tm_run_capture, rank) == 4 &&
                   offsetof(tm_run_phase, rank) == 4 && offsetof(tm_run_oom, rank) == 4 &&
                   offsetof(tm_run_worker, rank) == 4 && offsetof(tm_run_optstep, rank) == 4 &&
                   offsetof(tm_run_anatomy, rank) == 4 && offsetof(tm_run_oomsum, rank) == 4,
               "run records carry the rank at offset 4");

/* A process whose launcher set no RANK (Lightning's DDP launcher,
 * torch.multiprocessing.spawn) learns its rank from init_process_group,
 * after its file may have been made with none.  The agent then sets the
 * header's rank in place (tm_rec_set_rank) and writes a process.rank
 * event; where the header still has none (the rewrite failed), the first
 * such event (tm_rec_event_rank) becomes the header's rank and its
 * records'.  A header that names a rank keeps it. */
static void part_late_rank(struct part *p)
{
    if (p->hdr.rank >= 0)
        return;
    const tm_run_event *ev = (const tm_run_event *)p->dst[V_EVENT];
    int32_t r32 = -1;
    for (size_t i = 0; i < p->got[V_EVENT] && r32 < 0; i++) {
        if (!ev[i].name || !ev[i].json)
            continue;
        size_t nl = strlen(ev[i].name), jl = strlen(ev[i].json);
        tm_rec_event_def d = {.name = ev[i].name,
                              .json = ev[i].json,
                              .name_len = (uint16_t)(nl < UINT16_MAX ? nl : UINT16_MAX),
                              .json_len = (uint32_t)(jl < UINT32_MAX ? jl : UINT32_MAX)};
        r32 = tm_rec_event_rank(&d);
    }
    if (r32 < 0)
        return;
    p->hdr.rank = r32;
    for (int k = 0; k < V_N; k++)
        for (size_t i = 0; k != V_EVENT && i < p->got[k]; i++)
            memcpy(p->dst[k] + i * vec_el[k] + 4, &r32, sizeof r32);
}

/* Second pass: decodes every record into the arrays sized by the first. */
static void part_load(struct part *p)
{
    tm_reader *rd = NULL;
    struct scratch sc = {0};
    if (!p->ok || p->nomem) {
        if (p->nomem)
            part_note(p, "%s: out of memory, skipped", p->path);
        return;
    }
    int rc = tm_reader_open(&rd, p->path);
    if (rc < 0) {
        part_note(p, "%s, skipped", tm_last_error());
        return;
    }
    p->hdr = *tm_reader_header(rd);
    p->off = tm_sat_sub64(p->hdr.start_real_ns, p->hdr.start_mono_ns);
    tm_record rec;
    while ((rc = tm_reader_next(rd, &rec)) == 1) {
        int64_t t = tm_sat_add64(rec.t_ns, p->off);
        if (!p->records || t < p->first)
            p->first = t;
        if (!p->records || t > p->last)
            p->last = t;
        p->records++;
        int err = 0;
        if (rec.type == TM_REC_SAMPLE)
            err = part_sample(p, &rec, t, &sc);
        else if (rec.type == TM_REC_SERIES)
            err = part_def_series(p, &rec);
        else if (rec.type == TM_REC_EVENT)
            err = part_event(p, &rec, t);
        else if (tm_inproc_is(rec.type))
            err = part_inproc(p, &rec, t);
        if (err < 0) {
            p->nomem = true;
            break;
        }
    }
    if (rc < 0)
        part_note(p, "%s: read error (%s), stopped", p->path, tm_last_error());
    if (p->nomem)
        part_note(p, "%s: out of memory, read in part", p->path);
    const tm_damage *dmg;
    p->ndamage = tm_reader_damage(rd, &dmg);
    for (size_t i = 0; i < p->ndamage && i < RUN_NOTES_PER_FILE; i++) {
        if (dmg[i].offset == 0)
            part_note(p, "%s: damaged header (%s), read on", p->path, dmg[i].what);
        else
            part_note(p, "%s: damaged record at offset %" PRIu64 ", skipped", p->path,
                      dmg[i].offset);
    }
    if (p->ndamage > RUN_NOTES_PER_FILE)
        part_note(p, "%s: %zu more damaged places, skipped", p->path,
                  p->ndamage - RUN_NOTES_PER_FILE);
    p->torn = tm_reader_torn_tail(rd);
    part_late_rank(p);
    if (p->torn)
        part_note(p, "%s: torn last record (the writer stopped in the middle of it), ignored",
                  p->path);
    free(sc.ids);
    free(sc.vals);
    free(p->id2s);
    p->id2s = NULL;
    tm_reader_close(&rd);
}

static void part_free(struct part *p)
{
    free(p->path);
    for (size_t i = 0; i < p->nseries; i++) {
        big_free(&p->series[i].t);
        big_free(&p->series[i].v);
    }
    free(p->series);
    free(p->id2s);
    for (size_t i = 0; i < p->nnotes; i++)
        free(p->notes[i]);
    free(p->notes);
    arena_free(&p->arena);
}

/* --- loading in parallel */

struct loader {
    struct part *parts;
    size_t n;
    void (*fn)(struct part *p);
    atomic_size_t next;
};

static void *loader_main(void *arg)
{
    struct loader *l = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&l->next, 1);
        if (i >= l->n)
            return NULL;
        l->fn(&l->parts[i]);
    }
}

/* Runs fn on every part, on as many threads as there are CPUs. */
static void for_parts(struct part *parts, size_t n, void (*fn)(struct part *p))
{
    struct loader l = {.parts = parts, .n = n, .fn = fn};
    atomic_init(&l.next, 0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = ncpu > 1 ? (size_t)ncpu : 1;
    if (nt > RUN_MAX_THREADS)
        nt = RUN_MAX_THREADS;
    if (nt > n)
        nt = n;
    pthread_t th[RUN_MAX_THREADS];
    size_t started = 0;
    for (size_t i = 1; i < nt; i++)
        if (pthread_create(&th[started], NULL, loader_main, &l) == 0)
            started++;
    loader_main(&l); /* this thread works too; with no thread it does all */
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
}

static int run_note(tm_run *r, char *s)
{
    if (grow(&r->notes, &r->notes_cap, r->nnotes + 1, sizeof *r->notes) < 0) {
        free(s);
        return -ENOMEM;
    }
    r->notes[r->nnotes++] = s;
    return 0;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists DIR's *.tmr files (sorted) as parts.  0 or -errno (with a message). */
static int list_dir(const char *dir, size_t di, struct part **parts, size_t *n, size_t *cap)
{
    DIR *d = opendir(dir);
    if (!d)
        return tm_seterr(-errno, "%s: %s", dir, strerror(errno));
    char **names = NULL;
    size_t nn = 0, nc = 0;
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !has_suffix(de->d_name, ".tmr"))
            continue;
        if (*n + nn >= RUN_MAX_FILES) {
            rc = tm_seterr(-E2BIG, "%s: more than %u record files", dir, RUN_MAX_FILES);
            goto out;
        }
        char *s = strdup(de->d_name);
        if (!s || grow(&names, &nc, nn + 1, sizeof *names) < 0) {
            free(s);
            rc = -ENOMEM;
            goto out;
        }
        names[nn++] = s;
    }
    if (nn)
        qsort(names, nn, sizeof *names, cmp_str);
    for (size_t i = 0; i < nn; i++) {
        if (grow(parts, cap, *n + 1, sizeof **parts) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        struct part *p = &(*parts)[*n];
        memset(p, 0, sizeof *p);
        if (asprintf(&p->path, "%s/%s", dir, names[i]) < 0) {
            p->path = NULL;
            rc = -ENOMEM;
            goto out;
        }
        p->dir = dir;
        p->file = p->path + strlen(dir) + 1;
        (*n)++;
    }
    (void)di;
out:
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    closedir(d);
    return rc;
}

/* Reads a run directory's meta.json into buf (NUL-terminated) as record
 * files are read (tm_rec_open_read).  Its length, or a negative errno with
 * the message set ("DIR/meta.json: not a regular file (fifo)"). */
static ssize_t read_meta(const char *path, char *buf, size_t cap)
{
    int fd = tm_rec_open_read(path);
    if (fd < 0)
        return fd;
    return tm_read_fd_file(fd, path, buf, cap);
}

/* After the first pass: gives each source its index and each part its
 * place in the run's arrays, allocated at their final size. */
static int run_place(tm_run *r)
{
    size_t total[V_N] = {0};
    uint32_t src = 0;
    for (size_t i = 0; i < r->nparts; i++) {
        struct part *p = &r->parts[i];
        if (!p->ok)
            continue;
        p->src = src++;
        for (int k = 0; k < V_N; k++) {
            p->base[k] = total[k];
            total[k] += p->cnt[k];
        }
    }
    for (int k = 0; k < V_N; k++) {
        if (big_reserve(&r->v[k], total[k] * vec_el[k]) < 0)
            return -ENOMEM;
        for (size_t i = 0; i < r->nparts; i++)
            r->parts[i].dst[k] = (char *)r->v[k].p + r->parts[i].base[k] * vec_el[k];
    }
    return 0;
}

/* After the second pass: the sources, the series, and the arrays closed up
 * where a part stored fewer records than it counted (a file that changed
 * between the passes). */
static int run_merge(tm_run *r)
{
    size_t nsrc = 0, nser = 0;
    for (size_t i = 0; i < r->nparts; i++) {
        if (r->parts[i].ok) {
            nsrc++;
            nser += r->parts[i].nseries;
        }
    }
    r->sources = calloc(nsrc ? nsrc : 1, sizeof *r->sources);
    r->series = calloc(nser ? nser : 1, sizeof *r->series);
    if (!r->sources || !r->series)
        return -ENOMEM;
    for (size_t i = 0; i < r->nparts; i++) {
        struct part *p = &r->parts[i];
        for (size_t j = 0; j < p->nnotes; j++) {
            if (run_note(r, p->notes[j]) < 0)
                return -ENOMEM;
            p->notes[j] = NULL;
        }
        p->nnotes = 0;
        if (!p->ok)
            continue;
        r->sources[r->nsources++] = (tm_run_source){.path = p->path,
                                                    .dir = p->dir,
                                                    .file = p->file,
                                                    .header = p->hdr,
                                                    .mono_to_wall_ns = p->off,
                                                    .first_ns = p->first,
                                                    .last_ns = p->last,
                                                    .records = p->records,
                                                    .ndamage = p->ndamage,
                                                    .torn_tail = p->torn};
        if (p->records) {
            if (!r->start || p->first < r->start)
                r->start = p->first;
            if (!r->end || p->last > r->end)
                r->end = p->last;
        }
        for (size_t j = 0; j < p->nseries; j++) {
            const struct pseries *s = &p->series[j];
            r->series[r->nseries++] =
                (tm_run_series){.source = p->src,
                                .name = s->name,
                                .labels = s->labels,
                                .unit = s->unit,
                                .n = s->n,
                                .t_ns = s->shared ? p->series[s->lead - 1].t.p : s->t.p,
                                .v = s->v.p};
        }
        for (int k = 0; k < V_N; k++) {
            char *to = (char *)r->v[k].p + r->nv[k] * vec_el[k];
            if (to != p->dst[k] && p->got[k])
                memmove(to, p->dst[k], p->got[k] * vec_el[k]);
            r->nv[k] += p->got[k];
        }
    }
    return 0;
}

_Static_assert(offsetof(tm_run_step, source) == 0 && offsetof(tm_run_capture, source) == 0 &&
                   offsetof(tm_run_phase, source) == 0 && offsetof(tm_run_oom, source) == 0 &&
                   offsetof(tm_run_worker, source) == 0 && offsetof(tm_run_optstep, source) == 0 &&
                   offsetof(tm_run_anatomy, source) == 0 && offsetof(tm_run_oomsum, source) == 0 &&
                   offsetof(tm_run_event, source) == 0,
               "run records start with their source");

int tm_run_load(tm_run **out, const char *const *dirs, size_t n)
{
    *out = NULL;
    if (!dirs || n == 0)
        return tm_seterr(-EINVAL, "tm_run_load: no run directory");
    tm_run *r = calloc(1, sizeof *r);
    char *meta = NULL;
    size_t parts_cap = 0;
    int rc = 0;
    if (!r || !(r->dirs = calloc(n, sizeof *r->dirs)) || !(r->metas = calloc(n, sizeof *r->metas)))
        goto nomem;
    r->ndirs = n;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(dirs[i], &st) != 0) {
            rc = tm_seterr(-errno, "%s: %s", dirs[i], strerror(errno));
            goto out;
        }
        if (!S_ISDIR(st.st_mode)) {
            rc = tm_seterr(-ENOTDIR, "%s: %s", dirs[i], strerror(ENOTDIR));
            goto out;
        }
        if (!(r->dirs[i] = strdup(dirs[i])))
            goto nomem;
    }
    for (size_t i = 0; i < n; i++) {
        size_t before = r->nparts;
        rc = list_dir(r->dirs[i], i, &r->parts, &r->nparts, &parts_cap);
        if (rc < 0)
            goto out;
        if (r->nparts == before) {
            char *s;
            if (asprintf(&s, "%s: no trainmon record files", r->dirs[i]) < 0 || run_note(r, s) < 0)
                goto nomem;
        }
        char path[4200];
        snprintf(path, sizeof path, "%s/meta.json", r->dirs[i]);
        if (!meta && !(meta = malloc(RUN_META_MAX)))
            goto nomem;
        ssize_t ml = read_meta(path, meta, RUN_META_MAX);
        if (ml >= 0 && !(r->metas[i] = strdup(meta)))
            goto nomem;
        if (ml < 0 && ml != -ENOENT) {
            /* Missing is normal (a directory from an old version); anything
             * else the user should hear about. */
            char *s;
            if (asprintf(&s, "%s, ignored", tm_last_error()) < 0 || run_note(r, s) < 0)
                goto nomem;
        }
    }
    for_parts(r->parts, r->nparts, part_count);
    if (run_place(r) < 0)
        goto nomem;
    for_parts(r->parts, r->nparts, part_load);
    if (run_merge(r) < 0)
        goto nomem;
    tm_infer_run(r->sources, r->nsources, r->v[V_STEP].p, r->nv[V_STEP], r->v[V_EVENT].p,
                 r->nv[V_EVENT]);
    if (r->nsources == 0) {
        /* Name the first directory, and why when its files were refused. */
        const char *why = "no trainmon record files";
        /* The caller gets this one line and not the notes: say why the
         * first file was refused (a FIFO, a symlink, not a record file). */
        const char *first = NULL;
        size_t plen = r->nparts ? strlen(r->parts[0].path) : 0;
        for (size_t i = 0; plen && i < r->nnotes && !first; i++)
            if (strncmp(r->notes[i], r->parts[0].path, plen) == 0 && r->notes[i][plen] == ':')
                first = r->notes[i];
        if (first)
            rc =
                tm_seterr(-ENOENT, "%s: no readable trainmon record files (%s)", r->dirs[0], first);
        else
            rc = tm_seterr(-ENOENT, "%s: %s", r->dirs[0],
                           r->nparts ? "no readable trainmon record files" : why);
        goto out;
    }
    *out = r;
    r = NULL;
    goto out;
nomem:
    rc = tm_seterr(-ENOMEM, "reading the run: out of memory");
out:
    free(meta);
    tm_run_free(&r);
    return rc;
}

void tm_run_free(tm_run **pr)
{
    tm_run *r = pr ? *pr : NULL;
    if (!r)
        return;
    for (size_t i = 0; i < r->nparts; i++)
        part_free(&r->parts[i]);
    free(r->parts);
    for (size_t i = 0; i < r->ndirs; i++) {
        if (r->dirs)
            free(r->dirs[i]);
        if (r->metas)
            free(r->metas[i]);
    }
    free(r->dirs);
    free(r->metas);
    free(r->sources);
    free(r->series);
    for (int k = 0; k < V_N; k++)
        big_free(&r->v[k]);
    for (size_t i = 0; i < r->nnotes; i++)
        free(r->notes[i]);
    free(r->notes);
    free(r);
    *pr = NULL;
}

size_t tm_run_notes(const tm_run *r, const char *const **lines)
{
    *lines = (const char *const *)r->notes;
    return r->nnotes;
}

size_t tm_run_dirs(const tm_run *r, const char *const **dirs)
{
    *dirs = (const char *const *)r->dirs;
    return r->ndirs;
}

const char *tm_run_meta(const tm_run *r, size_t dir)
{
    return dir < r->ndirs ? r->metas[dir] : NULL;
}

void tm_run_span(const tm_run *r, int64_t *start_ns, int64_t *end_ns)
{
    *start_ns = r->start;
    *end_ns = r->end;
}

size_t tm_run_sources(const tm_run *r, const tm_run_source **list)
{
    *list = r->sources;
    return r->nsources;
}

size_t tm_run_series_list(const tm_run *r, const tm_run_series **list)
{
    *list = r->series;
    return r->nseries;
}

#define RUN_LIST(fn, type, k)                                                                      \
    size_t fn(const tm_run *r, const type **list)                                                  \
    {                                                                                              \
        *list = r->v[k].p;                                                                         \
        return r->nv[k];                                                                           \
    }
RUN_LIST(tm_run_events, tm_run_event, V_EVENT)
RUN_LIST(tm_run_steps, tm_run_step, V_STEP)
RUN_LIST(tm_run_captures, tm_run_capture, V_CAPTURE)
RUN_LIST(tm_run_phases, tm_run_phase, V_PHASE)
RUN_LIST(tm_run_ooms, tm_run_oom, V_OOM)
RUN_LIST(tm_run_workers, tm_run_worker, V_WORKER)
RUN_LIST(tm_run_optsteps, tm_run_optstep, V_OPTSTEP)
RUN_LIST(tm_run_anatomies, tm_run_anatomy, V_ANATOMY)
RUN_LIST(tm_run_oomsums, tm_run_oomsum, V_OOMSUM)

const tm_inproc_oomsum *tm_run_oomsum_of(const tm_run *r, uint32_t source, uint32_t seq)
{
    const tm_run_oomsum *l;
    size_t n = tm_run_oomsums(r, &l);
    for (size_t i = 0; i < n; i++)
        if (l[i].source == source && l[i].o.seq == seq)
            return &l[i].o;
    return NULL;
}

bool tm_labels_get(const char *labels, const char *key, char *buf, size_t cap)
{
    size_t kl = strlen(key);
    const char *p = labels;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > kl && p[kl] == '=' && strncmp(p, key, kl) == 0) {
            size_t vl = len - kl - 1;
            if (cap) {
                if (vl >= cap)
                    vl = cap - 1;
                memcpy(buf, p + kl + 1, vl);
                buf[vl] = '\0';
            }
            return true;
        }
        p = end ? end + 1 : NULL;
    }
    return false;
}
