/*
 * rec.c - the record file writer (docs/FORMAT.md).
 *
 * The writer maps only the block it is filling (MAP_SHARED) and builds each
 * record in place: header fields, payload, then the CRC, stored last with
 * release order.  A record is therefore in the page cache, complete and
 * checksummed, the moment tm_rec_append returns, and a writer killed in the
 * middle of a record leaves a record whose CRC does not match (a torn tail,
 * which readers ignore).  The append path makes no system call: the clock is
 * the vDSO and the mutex is uncontended.  What it does pay for is the page
 * fault of the first store into each new page, and every 16 blocks (1 MiB
 * with the default 64 KiB block) a new window: munmap/mmap and, in an
 * unbounded file, an fallocate.  A ring of up to 64 MiB is mapped whole
 * once, so after its first lap an append touches no new page at all.  MAP_POPULATE is not used:
 * on a shared file mapping it only maps pages for reading, and the first
 * store faults anyway.
 *
 * Space is reserved with posix_fallocate before it is mapped: a store into
 * a shared mapping of a file whose blocks cannot be allocated kills the
 * process with SIGBUS, which a recorder inside a training job must never
 * do.  A failed reservation (ENOSPC) marks the writer full instead.
 *
 * A DataLoader worker is a fork of the training process and inherits the
 * writer with its shared mapping.  A pthread_atfork child handler marks
 * every open writer as not owned, so that the child's appends are refused
 * and its close only unmaps; the owner's pid is also checked at close for
 * children made without the atfork handlers (raw clone).
 */
#include "rec.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

/* ------------------------------------------------------------- CRC-32C */

static uint32_t crc_tab[8][256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_tab[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_tab[k][n] = (crc_tab[k - 1][n] >> 8) ^ crc_tab[0][crc_tab[k - 1][n] & 0xff];
#if defined(__x86_64__)
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_run_hw(uint32_t crc, const uint8_t *p,
                                                             size_t len)
{
    uint64_t c = crc;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; len; p++, len--)
        c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32;
}
#endif

/* Slicing by 8: eight table lookups per 8 bytes. */
static uint32_t crc_run_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;
        crc = crc_tab[7][v & 0xff] ^ crc_tab[6][(v >> 8) & 0xff] ^ crc_tab[5][(v >> 16) & 0xff] ^
              crc_tab[4][(v >> 24) & 0xff] ^ crc_tab[3][(v >> 32) & 0xff] ^
              crc_tab[2][(v >> 40) & 0xff] ^ crc_tab[1][(v >> 48) & 0xff] ^ crc_tab[0][v >> 56];
    }
    for (; len; p++, len--)
        crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p) & 0xff];
    return crc;
}

uint32_t tm_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&crc_once, crc_init);
    crc = ~crc;
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_run_hw(crc, buf, len);
#endif
    return ~crc_run_sw(crc, buf, len);
}

uint32_t tm_rec_crc(uint64_t seq, const tm_rec_hdr *h, const void *payload)
{
    uint8_t b[24];
    memcpy(b, &seq, 8);
    memcpy(b + 8, h, 16); /* type, flags, len, t_ns */
    /* tm_crc32c(tm_crc32c(0, b), payload) in one pass: once per record */
    pthread_once(&crc_once, crc_init);
#if defined(__x86_64__)
    if (crc_hw)
        return ~crc_run_hw(crc_run_hw(~0u, b, sizeof b), payload, h->len);
#endif
    return ~crc_run_sw(crc_run_sw(~0u, b, sizeof b), payload, h->len);
}

uint32_t tm_rec_blkcrc(uint64_t seq)
{
    uint8_t b[12];
    uint32_t magic = TM_REC_BLOCK_MAGIC;
    memcpy(b, &magic, 4);
    memcpy(b + 4, &seq, 8);
    return tm_crc32c(0, b, sizeof b);
}

/* -------------------------------------------------------------- writer */

/* How many blocks an unbounded file reserves at a time. */
#define REC_RESERVE_AHEAD 16u
/* Blocks mapped at once (unbounded files, large rings), and the ring size
 * up to which a whole ring is mapped once and never remapped. */
#define REC_WINDOW 16u
#define REC_WINDOW_RING_MAX (64u << 20)
/* More series than this in one file is a caller bug (a label with a
 * timestamp in it), not a workload. */
#define REC_MAX_SERIES (1u << 20)

typedef struct rec_series {
    char *str; /* name NUL labels NUL unit NUL, one allocation */
    uint16_t name_len, labels_len, unit_len;
    uint32_t id;
    uint64_t hash;
} rec_series;

struct tm_rec {
    pthread_mutex_t mu; /* guards everything below except the atomics */
    int fd;
    pid_t owner;
    int child; /* atomic: set in a forked child by the atfork handler */
    int full;  /* atomic: a reservation failed with ENOSPC */
    bool ring;
    uint32_t bs;
    uint64_t nblocks;  /* ring: blocks in the ring */
    uint64_t reserved; /* unbounded: blocks covered by fallocate */
    uint64_t seq;      /* the block being filled */
    uint8_t *map;      /* the mapping, NULL after a failed move */
    size_t map_len;
    uint64_t win_idx; /* file block index of the first block mapped */
    uint64_t win_n;   /* blocks mapped from there */
    uint8_t *blk;     /* the block inside the mapping */
    uint32_t pos;     /* next record offset in the block */
    uint64_t bytes;   /* atomic */

    rec_series *series;
    size_t nseries, series_cap;
    uint32_t *slots; /* open addressing: index + 1 into series, 0 empty */
    size_t nslots;
    size_t series_bytes; /* record bytes of all definitions (ring: per block) */

    tm_rec *next; /* the list of open writers, for the atfork handler */
};

static pthread_mutex_t rec_list_mu = PTHREAD_MUTEX_INITIALIZER;
static tm_rec *rec_list;
static pthread_once_t rec_atfork_once = PTHREAD_ONCE_INIT;

static void rec_atfork_prepare(void)
{
    pthread_mutex_lock(&rec_list_mu);
}
static void rec_atfork_parent(void)
{
    pthread_mutex_unlock(&rec_list_mu);
}

static void rec_atfork_child(void)
{
    for (tm_rec *w = rec_list; w; w = w->next)
        __atomic_store_n(&w->child, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rec_list_mu);
}

static void rec_atfork_register(void)
{
    pthread_atfork(rec_atfork_prepare, rec_atfork_parent, rec_atfork_child);
}

static off_t rec_block_off(const tm_rec *w, uint64_t seq)
{
    uint64_t idx = w->ring ? seq % w->nblocks : seq;
    return (off_t)(TM_REC_HEADER_SIZE + idx * (uint64_t)w->bs);
}

/* Makes sure the blocks up to seq are allocated (unbounded files). */
static int rec_reserve(tm_rec *w, uint64_t seq)
{
    if (seq < w->reserved)
        return 0;
    off_t off = rec_block_off(w, w->reserved);
    uint64_t n = seq - w->reserved + REC_RESERVE_AHEAD;
    int e = posix_fallocate(w->fd, off, (off_t)(n * w->bs));
    if (e == ENOSPC || e == EFBIG) {
        /* Not room for the chunk: take what is needed now. */
        n = seq - w->reserved + 1;
        e = posix_fallocate(w->fd, off, (off_t)(n * w->bs));
    }
    if (e)
        return -e;
    w->reserved += n;
    return 0;
}

static void rec_unmap(tm_rec *w)
{
    if (w->map)
        munmap(w->map, w->map_len);
    w->map = NULL;
    w->blk = NULL;
}

/* Points w->blk at block seq.  The mapping is a window of several blocks
 * (a whole ring of up to REC_WINDOW_RING_MAX bytes, else REC_WINDOW blocks),
 * so that moving to the next block is usually a pointer change: on the
 * machines measured, munmap+mmap per 64 KiB block cost more than all the
 * appends that filled it.  A window never reaches past the blocks reserved
 * with fallocate (a store there could SIGBUS). */
static int rec_map(tm_rec *w, uint64_t seq)
{
    uint64_t idx = w->ring ? seq % w->nblocks : seq;
    if (w->map && idx >= w->win_idx && idx < w->win_idx + w->win_n) {
        size_t delta = w->map_len - (size_t)(w->win_n * w->bs);
        w->blk = w->map + delta + (idx - w->win_idx) * w->bs;
        return 0;
    }
    rec_unmap(w);
    uint64_t n, left = w->ring ? w->nblocks - idx : (w->reserved > idx ? w->reserved - idx : 1);
    if (w->ring && (uint64_t)w->bs * w->nblocks <= REC_WINDOW_RING_MAX)
        n = left; /* from idx 0 (the start of every lap): the whole ring */
    else
        n = left < REC_WINDOW ? left : REC_WINDOW;
    /* Block offsets are multiples of 4096; a larger page size needs the
     * mapping to start at the page below. */
    long pg = sysconf(_SC_PAGESIZE);
    off_t off = rec_block_off(w, seq);
    off_t aoff = pg > 0 ? off - off % pg : off;
    size_t delta = (size_t)(off - aoff);
    size_t len = delta + (size_t)(n * w->bs);
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, aoff);
    if (m == MAP_FAILED)
        return -errno;
    w->map = m;
    w->map_len = len;
    w->win_idx = idx;
    w->win_n = n;
    w->blk = w->map + delta;
    return 0;
}

static void rec_put_series(tm_rec *w, const rec_series *s, int64_t t_ns);

/* Enters block seq: reserve, map, clear (a recycled ring block), write the
 * block header, and in a ring re-emit the series definitions. */
static int rec_enter(tm_rec *w, uint64_t seq, int64_t t_ns)
{
    int rc = 0;
    if (!w->ring) {
        rc = rec_reserve(w, seq);
        if (rc == -ENOSPC || rc == -EFBIG) {
            __atomic_store_n(&w->full, 1, __ATOMIC_RELAXED);
            return -ENOSPC;
        }
        if (rc)
            return rc;
    }
    rc = rec_map(w, seq);
    if (rc)
        return rc;
    tm_rec_blkhdr *bh = (tm_rec_blkhdr *)w->blk;
    if (w->ring && seq >= w->nblocks) {
        /* Invalidate the header before clearing, so that a reader never
         * takes a half-cleared block for the old one (memset's store order
         * is unspecified). */
        __atomic_store_n(&bh->magic, 0u, __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        memset(w->blk + sizeof *bh, 0, w->bs - sizeof *bh);
    }
    bh->crc = tm_rec_blkcrc(seq);
    bh->seq = seq;
    __atomic_store_n(&bh->magic, TM_REC_BLOCK_MAGIC, __ATOMIC_RELEASE);
    w->seq = seq;
    w->pos = sizeof *bh;
    if (w->ring)
        for (size_t i = 0; i < w->nseries; i++)
            rec_put_series(w, &w->series[i], t_ns);
    return 0;
}

/* Starts a record of len payload bytes at the current position, moving to
 * the next block if it does not fit.  Lock held.  The payload area is zero
 * (fresh or cleared block).  *hdr is the record header in the mapping. */
static int rec_begin(tm_rec *w, uint16_t type, int64_t t_ns, uint32_t len, tm_rec_hdr **hdr)
{
    size_t need = TM_REC_ALIGN8(sizeof(tm_rec_hdr) + (size_t)len);
    size_t room = w->bs - sizeof(tm_rec_blkhdr) - (w->ring ? w->series_bytes : 0);
    if (need > room)
        return tm_seterr(-E2BIG, "record of %u bytes does not fit in a %u-byte block", len, w->bs);
    if (__atomic_load_n(&w->full, __ATOMIC_RELAXED))
        return -ENOSPC;
    if (!w->map || w->pos + need > w->bs) {
        int rc = rec_enter(w, w->seq + 1, t_ns);
        if (rc)
            return rc;
    }
    tm_rec_hdr *h = (tm_rec_hdr *)(w->blk + w->pos);
    h->type = type;
    h->flags = 0;
    h->len = len;
    h->t_ns = t_ns;
    *hdr = h;
    return 0;
}

/* Seals the record begun at the current position: the CRC is stored last,
 * with release order, so a reader that sees it sees the whole record. */
static void rec_commit(tm_rec *w, tm_rec_hdr *h)
{
    uint32_t crc = tm_rec_crc(w->seq, h, h + 1);
    __atomic_store_n(&h->crc, crc, __ATOMIC_RELEASE);
    size_t need = TM_REC_ALIGN8(sizeof *h + (size_t)h->len);
    w->pos += (uint32_t)need;
    __atomic_store_n(&w->bytes, w->bytes + need, __ATOMIC_RELAXED);
}

static uint32_t rec_series_len(const rec_series *s)
{
    return 12u + s->name_len + s->labels_len + s->unit_len;
}

/* Writes a series definition at the current position; the caller made
 * sure it fits. */
static void rec_put_series(tm_rec *w, const rec_series *s, int64_t t_ns)
{
    tm_rec_hdr *h = (tm_rec_hdr *)(w->blk + w->pos);
    h->type = TM_REC_SERIES;
    h->flags = 0;
    h->len = rec_series_len(s);
    h->t_ns = t_ns;
    uint8_t *p = (uint8_t *)(h + 1);
    uint16_t pad = 0;
    memcpy(p, &s->id, 4);
    memcpy(p + 4, &s->name_len, 2);
    memcpy(p + 6, &s->labels_len, 2);
    memcpy(p + 8, &s->unit_len, 2);
    memcpy(p + 10, &pad, 2);
    p += 12;
    memcpy(p, s->str, s->name_len);
    p += s->name_len;
    memcpy(p, s->str + s->name_len + 1, s->labels_len);
    p += s->labels_len;
    memcpy(p, s->str + s->name_len + 1 + s->labels_len + 1, s->unit_len);
    rec_commit(w, h);
}

/* Common entry checks; returns with the lock held on success. */
static int rec_lock(tm_rec *w)
{
    if (!w)
        return tm_seterr(-EINVAL, "record file: no writer");
    if (__atomic_load_n(&w->child, __ATOMIC_RELAXED))
        return tm_seterr(-ECHILD, "record file: appends from a forked child are refused");
    pthread_mutex_lock(&w->mu);
    return 0;
}

int tm_rec_append(tm_rec *w, uint16_t type, int64_t t_ns, const void *payload, uint32_t len)
{
    if (len && !payload)
        return tm_seterr(-EINVAL, "record file: NULL payload");
    int rc = rec_lock(w);
    if (rc)
        return rc;
    tm_rec_hdr *h;
    rc = rec_begin(w, type, t_ns ? t_ns : tm_now_mono_ns(), len, &h);
    if (rc == 0) {
        if (len)
            memcpy(h + 1, payload, len);
        rec_commit(w, h);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int tm_rec_appendv(tm_rec *w, const tm_rec_item *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (items[i].len && !items[i].payload)
            return tm_seterr(-EINVAL, "record file: NULL payload");
    int rc = rec_lock(w);
    if (rc)
        return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        tm_rec_hdr *h;
        const tm_rec_item *it = &items[i];
        rc = rec_begin(w, it->type, it->t_ns ? it->t_ns : tm_now_mono_ns(), it->len, &h);
        if (rc == 0) {
            if (it->len)
                memcpy(h + 1, it->payload, it->len);
            rec_commit(w, h);
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

static uint64_t rec_hash(const char *name, const char *labels)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = name; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull; /* a separator no string byte equals */
    for (const char *p = labels; *p; p++)
        h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

static int rec_slots_grow(tm_rec *w)
{
    size_t n = w->nslots ? w->nslots * 2 : 64;
    uint32_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return -ENOMEM;
    for (size_t i = 0; i < w->nseries; i++) {
        size_t j = w->series[i].hash & (n - 1);
        while (slots[j])
            j = (j + 1) & (n - 1);
        slots[j] = (uint32_t)(i + 1);
    }
    free(w->slots);
    w->slots = slots;
    w->nslots = n;
    return 0;
}

int tm_rec_series(tm_rec *w, const char *name, const char *labels, const char *unit)
{
    if (!name || !*name)
        return tm_seterr(-EINVAL, "record file: a series needs a name");
    labels = labels ? labels : "";
    unit = unit ? unit : "";
    size_t nl = strlen(name), ll = strlen(labels), ul = strlen(unit);
    if (nl > UINT16_MAX || ll > UINT16_MAX || ul > UINT16_MAX)
        return tm_seterr(-E2BIG, "series %.40s: name, labels or unit longer than 65535 bytes",
                         name);
    int rc = rec_lock(w);
    if (rc)
        return rc;
    uint64_t hash = rec_hash(name, labels);
    size_t j = 0;
    if (w->nslots) {
        for (j = hash & (w->nslots - 1); w->slots[j]; j = (j + 1) & (w->nslots - 1)) {
            const rec_series *s = &w->series[w->slots[j] - 1];
            if (s->hash == hash && s->name_len == nl && s->labels_len == ll &&
                memcmp(s->str, name, nl) == 0 && memcmp(s->str + nl + 1, labels, ll) == 0) {
                rc = (int)s->id;
                goto out;
            }
        }
    }
    if (w->nseries >= REC_MAX_SERIES) {
        rc = tm_seterr(-E2BIG, "record file: more than %u series", REC_MAX_SERIES);
        goto out;
    }
    rec_series s = {.name_len = (uint16_t)nl,
                    .labels_len = (uint16_t)ll,
                    .unit_len = (uint16_t)ul,
                    .id = (uint32_t)w->nseries + 1,
                    .hash = hash};
    size_t need = TM_REC_ALIGN8(sizeof(tm_rec_hdr) + rec_series_len(&s));
    /* A ring block starts with every definition; keep them to half a block
     * so that records still fit after them. */
    if (w->ring && w->series_bytes + need > (w->bs - sizeof(tm_rec_blkhdr)) / 2) {
        rc = tm_seterr(-E2BIG,
                       "series %s{%s}: the series definitions would fill half a %u-byte "
                       "ring block",
                       name, labels, w->bs);
        goto out;
    }
    if (w->nseries == w->series_cap) {
        size_t cap = w->series_cap ? w->series_cap * 2 : 32;
        rec_series *ns = realloc(w->series, cap * sizeof *ns);
        if (!ns) {
            rc = tm_seterr(-ENOMEM, "record file: out of memory");
            goto out;
        }
        w->series = ns;
        w->series_cap = cap;
    }
    if ((w->nseries + 1) * 2 > w->nslots && rec_slots_grow(w)) {
        rc = tm_seterr(-ENOMEM, "record file: out of memory");
        goto out;
    }
    s.str = malloc(nl + ll + ul + 3);
    if (!s.str) {
        rc = tm_seterr(-ENOMEM, "record file: out of memory");
        goto out;
    }
    memcpy(s.str, name, nl + 1);
    memcpy(s.str + nl + 1, labels, ll + 1);
    memcpy(s.str + nl + 1 + ll + 1, unit, ul + 1);

    /* Append the definition first: a series that could not be defined in
     * the file (disk full) must not be handed out. */
    tm_rec_hdr *h;
    rc = rec_begin(w, TM_REC_SERIES, tm_now_mono_ns(), rec_series_len(&s), &h);
    if (rc) {
        free(s.str);
        goto out;
    }
    rec_put_series(w, &s, h->t_ns); /* at h: rec_begin does not move pos */
    w->series[w->nseries++] = s;
    w->series_bytes += need;
    for (j = hash & (w->nslots - 1); w->slots[j]; j = (j + 1) & (w->nslots - 1))
        ;
    w->slots[j] = (uint32_t)w->nseries;
    rc = (int)s.id;
out:
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int tm_rec_sample(tm_rec *w, int64_t t_ns, const uint32_t *ids, const double *values, size_t n)
{
    if (n && (!ids || !values))
        return tm_seterr(-EINVAL, "record file: NULL sample arrays");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !isnan(values[i]);
    if (k == 0)
        return 0; /* nothing measured: nothing to record */
    if (k > (UINT32_MAX - 8u) / 16u)
        return tm_seterr(-E2BIG, "record file: sample of %zu values", k);
    int rc = rec_lock(w);
    if (rc)
        return rc;
    tm_rec_hdr *h;
    rc = rec_begin(w, TM_REC_SAMPLE, t_ns ? t_ns : tm_now_mono_ns(), (uint32_t)(8u + 16u * k), &h);
    if (rc == 0) {
        uint8_t *p = (uint8_t *)(h + 1);
        uint32_t k32 = (uint32_t)k;
        memcpy(p, &k32, 4); /* the pad after it is already zero */
        p += 8;
        for (size_t i = 0; i < n; i++) {
            if (isnan(values[i]))
                continue;
            memcpy(p, &ids[i], 4);
            memcpy(p + 8, &values[i], 8);
            p += 16;
        }
        rec_commit(w, h);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int tm_rec_event(tm_rec *w, int64_t t_ns, const char *name, const char *json)
{
    if (!name)
        return tm_seterr(-EINVAL, "record file: an event needs a name");
    size_t nl = strlen(name), jl = json ? strlen(json) : 0;
    if (nl > UINT16_MAX || jl > UINT32_MAX - 8u - nl)
        return tm_seterr(-E2BIG, "event %.40s: name or details too long", name);
    int rc = rec_lock(w);
    if (rc)
        return rc;
    tm_rec_hdr *h;
    rc = rec_begin(w, TM_REC_EVENT, t_ns ? t_ns : tm_now_mono_ns(), (uint32_t)(8u + nl + jl), &h);
    if (rc == 0) {
        uint8_t *p = (uint8_t *)(h + 1);
        uint16_t nl16 = (uint16_t)nl;
        uint32_t jl32 = (uint32_t)jl;
        memcpy(p, &nl16, 2);
        memcpy(p + 4, &jl32, 4);
        memcpy(p + 8, name, nl);
        if (jl)
            memcpy(p + 8 + nl, json, jl);
        rec_commit(w, h);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int tm_rec_set_rank(tm_rec *w, int32_t rank)
{
    if (!w)
        return -EINVAL;
    int rc = rec_lock(w);
    if (rc)
        return rc;
    tm_rec_filehdr fh;
    ssize_t n = pread(w->fd, &fh, sizeof fh, 0);
    if (n != (ssize_t)sizeof fh) {
        rc = n < 0 ? -errno : -EIO;
    } else {
        fh.rank = rank;
        fh.crc = tm_crc32c(0, &fh, offsetof(tm_rec_filehdr, crc));
        /* one write of the 164 bytes, inside the first page */
        n = pwrite(w->fd, &fh, offsetof(tm_rec_filehdr, crc) + sizeof fh.crc, 0);
        rc = n == (ssize_t)(offsetof(tm_rec_filehdr, crc) + sizeof fh.crc) ? 0
             : n < 0                                                       ? -errno
                                                                           : -EIO;
    }
    pthread_mutex_unlock(&w->mu);
    return rc ? tm_seterr(rc, "record file header: %s", strerror(-rc)) : 0;
}

uint64_t tm_rec_bytes(const tm_rec *w)
{
    return w ? __atomic_load_n(&w->bytes, __ATOMIC_RELAXED) : 0;
}

bool tm_rec_full(const tm_rec *w)
{
    return w && __atomic_load_n(&w->full, __ATOMIC_RELAXED);
}

static void rec_free(tm_rec *w)
{
    for (size_t i = 0; i < w->nseries; i++)
        free(w->series[i].str);
    free(w->series);
    free(w->slots);
    free(w);
}

int tm_rec_open(tm_rec **out, const char *path, const tm_rec_opts *opts)
{
    static const tm_rec_opts defaults = {.rank = -1};
    if (!out || !path)
        return tm_seterr(-EINVAL, "record file: no path");
    *out = NULL;
    if (!opts)
        opts = &defaults;
    uint32_t bs = opts->block_size ? opts->block_size : TM_REC_DEFAULT_BLOCK;
    if (bs % TM_REC_MIN_BLOCK || bs > TM_REC_MAX_BLOCK)
        return tm_seterr(-EINVAL, "%s: block size %u is not a multiple of 4096 up to 16 MiB", path,
                         bs);
    uint64_t nblocks = 0;
    if (opts->max_size) {
        if (opts->max_size < TM_REC_HEADER_SIZE + 2ull * TM_REC_MIN_BLOCK)
            return tm_seterr(-EINVAL, "%s: max size %llu is below the minimum of 12 KiB", path,
                             (unsigned long long)opts->max_size);
        /* Smaller blocks for a small ring: dropping the oldest block should
         * drop a small part of the data (a quarter at most by default). */
        uint64_t want = opts->block_size ? 2 : 4;
        while ((nblocks = (opts->max_size - TM_REC_HEADER_SIZE) / bs) < want &&
               bs > TM_REC_MIN_BLOCK)
            bs = bs / 2 / TM_REC_MIN_BLOCK * TM_REC_MIN_BLOCK;
        nblocks = (opts->max_size - TM_REC_HEADER_SIZE) / bs;
        if (nblocks >= TM_REC_MAX_NBLOCKS)
            nblocks = TM_REC_MAX_NBLOCKS - 1;
    }

    int rc = 0;
    tm_rec *w = calloc(1, sizeof *w);
    if (!w)
        return tm_seterr(-ENOMEM, "%s: out of memory", path);
    pthread_mutex_init(&w->mu, NULL);
    w->owner = getpid();
    w->ring = nblocks > 0;
    w->nblocks = nblocks;
    w->bs = bs;
    /* Never O_TRUNC through whatever is at path: a new file is O_EXCL and
     * O_NOFOLLOW, an existing one is reused only when it is a regular file
     * of ours with one link (safefile.c); a symlink planted there made root
     * overwrite its target, and a symlink to a small file SIGBUSed the
     * mapping.  The mode follows the directory's read bits. */
    w->fd = tm_file_create(path, 0, TM_SAFE_REUSE);
    if (w->fd < 0) {
        rc = w->fd; /* the message is set */
        w->fd = -1;
        goto out;
    }

    uint8_t *hbuf = calloc(1, TM_REC_HEADER_SIZE);
    if (!hbuf) {
        rc = tm_seterr(-ENOMEM, "%s: out of memory", path);
        goto out;
    }
    tm_rec_filehdr fh;
    memset(&fh, 0, sizeof fh);
    memcpy(fh.magic, TM_REC_MAGIC, 8);
    fh.version = TM_REC_VERSION;
    fh.header_size = TM_REC_HEADER_SIZE;
    fh.block_size = bs;
    fh.flags = w->ring ? TM_REC_FLAG_RING : 0;
    fh.max_size = opts->max_size;
    fh.nblocks = nblocks;
    fh.start_real_ns = tm_now_real_ns();
    fh.start_mono_ns = tm_now_mono_ns();
    fh.pid = (int32_t)w->owner;
    fh.rank = opts->rank;
    if (gethostname(fh.host, sizeof fh.host - 1) != 0)
        fh.host[0] = '\0';
    fh.host[sizeof fh.host - 1] = '\0';
    tm_strlcpy(fh.role, opts->role ? opts->role : "", sizeof fh.role);
    memcpy(hbuf, &fh, offsetof(tm_rec_filehdr, crc));
    fh.crc = tm_crc32c(0, hbuf, offsetof(tm_rec_filehdr, crc));
    memcpy(hbuf + offsetof(tm_rec_filehdr, crc), &fh.crc, 4);
    rc = tm_write_full(w->fd, hbuf, TM_REC_HEADER_SIZE);
    free(hbuf);
    if (rc) {
        rc = tm_seterr(rc, "%s: %s", path, strerror(-rc));
        goto out;
    }

    if (w->ring) {
        int e = posix_fallocate(w->fd, 0, (off_t)(TM_REC_HEADER_SIZE + nblocks * bs));
        if (e) {
            rc = tm_seterr(-e, "%s: reserving %llu bytes: %s", path,
                           (unsigned long long)(TM_REC_HEADER_SIZE + nblocks * bs), strerror(e));
            goto out;
        }
    }
    rc = rec_enter(w, 0, fh.start_mono_ns);
    if (rc) {
        rc = tm_seterr(rc, "%s: %s", path, strerror(-rc));
        goto out;
    }

    pthread_once(&rec_atfork_once, rec_atfork_register);
    pthread_mutex_lock(&rec_list_mu);
    w->next = rec_list;
    rec_list = w;
    pthread_mutex_unlock(&rec_list_mu);
    *out = w;
out:
    if (rc) {
        rec_unmap(w);
        if (w->fd >= 0) {
            /* Nothing half-made is left looking like a record file. */
            unlink(path);
            close(w->fd);
        }
        pthread_mutex_destroy(&w->mu);
        rec_free(w);
    }
    return rc;
}

void tm_rec_close(tm_rec **pw)
{
    tm_rec *w = pw ? *pw : NULL;
    if (!w)
        return;
    *pw = NULL;
    pthread_mutex_lock(&rec_list_mu);
    for (tm_rec **pp = &rec_list; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&rec_list_mu);
    /* In a forked child the file belongs to the parent: unmap, never write
     * (and never touch the mutex, which a parent thread may have held at
     * the fork). */
    bool child = __atomic_load_n(&w->child, __ATOMIC_RELAXED) || getpid() != w->owner;
    if (!child) {
        pthread_mutex_lock(&w->mu);
        /* Give back the space reserved ahead; the last block stays whole. */
        if (!w->ring && ftruncate(w->fd, rec_block_off(w, w->seq) + (off_t)w->bs) != 0) {
            /* Harmless: the reader stops at the first unused block. */
        }
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_destroy(&w->mu);
    }
    rec_unmap(w);
    close(w->fd);
    rec_free(w);
}
