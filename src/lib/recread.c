/*
 * recread.c - reading record files (docs/FORMAT.md), also while a writer is
 * appending to them, after the writer was killed, or after damage.
 *
 * The reader uses pread and never mmap: the file may be truncated or
 * recreated under it, and a mapping would turn that into SIGBUS.  It holds
 * one block at a time and the range of block sequence numbers found by the
 * last scan, so its memory is bounded by the block size.
 *
 * Order: blocks in increasing seq (an unbounded file keeps block seq at
 * index seq; a ring keeps it at index seq % nblocks), records in file order
 * within a block.  Every record carries a CRC that covers its block's seq,
 * so a stale record left in a recycled ring block never validates.
 *
 * Damage versus a torn tail: when a record fails its check, the reader
 * notes the place as "pending" and resynchronises (the next valid record at
 * an 8-byte step in the block, else the next block).  If a valid record is
 * found later, the pending place becomes a damage entry.  If nothing valid
 * follows, the place is the torn tail a killed writer leaves (or the record
 * a live writer is still writing): not damage, and the point where
 * tm_reader_refresh resumes.
 *
 * Linear time whatever the bytes: a record's CRC costs its length, and a
 * crafted block can hold a plausible header at every 8-byte step, each with
 * a length reaching to the end of the block and a wrong CRC; checking them
 * all costs block_size^2 / 16 bytes of CRC (hours for one 16 MiB block).
 * So a resync candidate must first pass checks on its header alone (type
 * not 0, flags 0, length inside the block), and the CRC work in one block is
 * capped at RD_CRC_BUDGET times its size: a candidate whose check would go
 * beyond is not checked (not taken as a record).  The records of an intact
 * block cost at most one block size of CRC, so the cap only ever bites in a
 * block that is mostly damage.  tm_reader_stats counts the work.
 *
 * Files are opened without blocking and without following a symlink, and
 * anything but a regular file is refused (tm_rec_open_read): a FIFO planted
 * in a run directory must not hang the root agent that reads it.
 *
 * A ring block can be recycled by the writer while it is being read.  The
 * reader re-reads the block header after reading the block (a seqlock): if
 * the header changed, the copy may mix old and new bytes, and the block is
 * skipped as overwritten, which in a ring is data dropped by design.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rec.h"
#include "util.h"

/* A damaged file lists at most this many places (the first ones). */
#define RD_MAX_DAMAGE 1000u

/* CRC work allowed in one loaded block, in block sizes: one for its valid
 * records, the rest for checking candidates that turn out bad. */
#define RD_CRC_BUDGET 4u

struct tm_reader {
    int fd;
    char *path;
    tm_rec_header hdr;
    bool ring;
    uint32_t bs;
    uint64_t nblocks; /* ring: from the header */

    bool have; /* the last scan found blocks: first..last */
    uint64_t first, last;

    uint64_t seq; /* the block being read */
    uint32_t pos; /* the next record's offset in it */
    bool loaded;  /* blk holds block seq */
    bool at_end;  /* next() returned 0; refresh() resumes */
    uint8_t *blk;
    uint64_t budget; /* CRC bytes left for the loaded block */
    bool verified;   /* the record at pos passed its check in rd_resync */

    tm_reader_counters stats;

    /* Where data may still appear: the first end, gap or bad record since
     * the last valid record.  tm_reader_refresh resumes here. */
    struct {
        bool on;
        uint64_t seq;
        uint32_t pos;
    } resume;

    struct {
        bool on, torn;
        uint64_t offset;
        char what[64];
    } pend;

    tm_damage *damage;
    size_t ndamage;
    bool torn;
};

static uint64_t rd_block_off(const tm_reader *r, uint64_t seq)
{
    uint64_t idx = r->ring ? seq % r->nblocks : seq;
    return TM_REC_HEADER_SIZE + idx * (uint64_t)r->bs;
}

static void rd_add_damage(tm_reader *r, uint64_t offset, const char *what)
{
    if (r->ndamage >= RD_MAX_DAMAGE)
        return;
    if (!r->damage) {
        r->damage = calloc(RD_MAX_DAMAGE, sizeof *r->damage);
        if (!r->damage)
            return;
    }
    r->damage[r->ndamage].offset = offset;
    tm_strlcpy(r->damage[r->ndamage].what, what, sizeof r->damage[0].what);
    r->ndamage++;
}

static void rd_mark(tm_reader *r, uint32_t pos)
{
    if (r->resume.on)
        return;
    r->resume.on = true;
    r->resume.seq = r->seq;
    r->resume.pos = pos;
}

/* Notes the first anomaly since the last valid record. */
static void rd_pend(tm_reader *r, bool torn, uint32_t pos, const char *what)
{
    if (r->pend.on)
        return;
    r->pend.on = true;
    r->pend.torn = torn;
    r->pend.offset = rd_block_off(r, r->seq) + pos;
    tm_strlcpy(r->pend.what, what, sizeof r->pend.what);
}

static bool rd_blkhdr_ok(const tm_rec_blkhdr *bh)
{
    return bh->magic == TM_REC_BLOCK_MAGIC && bh->crc == tm_rec_blkcrc(bh->seq);
}

static int rd_io_err(tm_reader *r, ssize_t rc)
{
    return tm_seterr((int)rc, "%s: %s", r->path, strerror((int)-rc));
}

/* Finds the range of blocks in the file.  An unbounded file has blocks
 * 0..n-1 (the unused ones reserved at its end stop the reading); a ring has
 * the nblocks seqs ending at the newest valid block header. */
static int rd_scan(tm_reader *r)
{
    struct stat st;
    if (fstat(r->fd, &st) != 0)
        return rd_io_err(r, -errno);
    uint64_t size = (uint64_t)st.st_size;
    uint64_t nfile =
        size > TM_REC_HEADER_SIZE ? (size - TM_REC_HEADER_SIZE + r->bs - 1) / r->bs : 0;
    r->have = false;
    if (!r->ring) {
        r->have = nfile > 0;
        r->first = 0;
        r->last = nfile ? nfile - 1 : 0;
        return 0;
    }
    uint64_t n = nfile < r->nblocks ? nfile : r->nblocks;
    uint64_t newest = 0;
    for (uint64_t i = 0; i < n; i++) {
        tm_rec_blkhdr bh;
        ssize_t got = tm_pread_full(r->fd, &bh, sizeof bh, (off_t)(TM_REC_HEADER_SIZE + i * r->bs));
        if (got < 0)
            return rd_io_err(r, got);
        if ((size_t)got < sizeof bh || !rd_blkhdr_ok(&bh) || bh.seq % r->nblocks != i)
            continue;
        if (!r->have || bh.seq > newest)
            newest = bh.seq;
        r->have = true;
    }
    r->last = newest;
    r->first = newest >= r->nblocks - 1 ? newest - (r->nblocks - 1) : 0;
    return 0;
}

/* Reads block r->seq into r->blk.  1: loaded; 0: not there (skip it). */
static int rd_load(tm_reader *r)
{
    uint64_t off = rd_block_off(r, r->seq);
    ssize_t got = tm_pread_full(r->fd, r->blk, r->bs, (off_t)off);
    if (got < 0)
        return rd_io_err(r, got);
    /* A block cut short by truncation reads as zeros: an end, or a record
     * whose check fails. */
    memset(r->blk + got, 0, r->bs - (size_t)got);
    tm_rec_blkhdr bh;
    memcpy(&bh, r->blk, sizeof bh);
    if (bh.magic == 0) {
        /* Never written: reserved space at the end of an unbounded file,
         * or a ring block not reached yet or being recycled (the writer
         * clears magic first). */
        if (!r->ring)
            rd_pend(r, false, 0, "missing block");
        return 0;
    }
    if (!rd_blkhdr_ok(&bh)) {
        rd_pend(r, true, 0, "bad block header");
        return 0;
    }
    if (bh.seq != r->seq) {
        /* In a ring: overwritten since the scan (or not yet reached). */
        if (!r->ring)
            rd_pend(r, true, 0, "bad block header");
        return 0;
    }
    if (r->ring) {
        tm_rec_blkhdr again;
        got = tm_pread_full(r->fd, &again, sizeof again, (off_t)off);
        if (got < 0)
            return rd_io_err(r, got);
        if ((size_t)got < sizeof again || memcmp(&again, &bh, sizeof bh) != 0)
            return 0;
    }
    r->loaded = true;
    r->budget = (uint64_t)RD_CRC_BUDGET * r->bs;
    r->verified = false;
    r->stats.blocks++;
    return 1;
}

/* NULL if the record at pos is valid, else why not.  The CRC is charged to
 * the block's budget; a record the budget cannot pay for is not checked. */
static const char *rd_check(tm_reader *r, uint32_t pos, const tm_rec_hdr *h)
{
    if (h->len > r->bs - pos - sizeof *h)
        return "bad length";
    uint64_t cost = sizeof *h + (uint64_t)h->len;
    if (cost > r->budget) {
        r->stats.unchecked++;
        return "not checked (too much damage in the block)";
    }
    r->budget -= cost;
    r->stats.crc_bytes += cost;
    if (tm_rec_crc(r->seq, h, r->blk + pos + sizeof *h) != h->crc)
        return "bad checksum";
    return NULL;
}

static bool rd_is_end(const tm_rec_hdr *h)
{
    return h->type == 0 && h->len == 0 && h->crc == 0;
}

/* Whether a record could start at pos, from its header alone (no CRC):
 * type 0 never names a record, a version 1 writer stores flags 0, and a
 * record never crosses the end of its block. */
static bool rd_plausible(const tm_reader *r, uint32_t pos, const tm_rec_hdr *h)
{
    return h->type != 0 && h->flags == 0 && h->len <= r->bs - pos - sizeof *h;
}

/* The next valid record at an 8-byte step from pos, or 0.  Only plausible
 * headers are CRC-checked, within the block's budget (see the top). */
static uint32_t rd_resync(tm_reader *r, uint32_t pos)
{
    for (; pos + sizeof(tm_rec_hdr) <= r->bs; pos += 8) {
        tm_rec_hdr h;
        memcpy(&h, r->blk + pos, sizeof h);
        if (!rd_plausible(r, pos, &h))
            continue;
        r->stats.candidates++;
        if (!rd_check(r, pos, &h))
            return pos;
    }
    return 0;
}

static void rd_end(tm_reader *r)
{
    r->at_end = true;
    r->torn = r->pend.on && r->pend.torn;
}

int tm_reader_next(tm_reader *r, tm_record *rec)
{
    if (!r || !rec)
        return tm_seterr(-EINVAL, "record reader: NULL argument");
    for (;;) {
        if (r->at_end)
            return 0;
        if (!r->loaded) {
            if (!r->have || r->seq > r->last) {
                rd_end(r);
                return 0;
            }
            int rc = rd_load(r);
            if (rc < 0)
                return rc;
            if (rc == 0) {
                rd_mark(r, sizeof(tm_rec_blkhdr));
                if (r->seq >= r->last) {
                    rd_end(r);
                    return 0;
                }
                r->seq++;
                r->pos = sizeof(tm_rec_blkhdr);
                continue;
            }
        }
        uint32_t pos = r->pos;
        tm_rec_hdr h;
        if (pos + sizeof h <= r->bs) {
            memcpy(&h, r->blk + pos, sizeof h);
            if (!rd_is_end(&h)) {
                /* A record rd_resync found is not checked (nor paid for)
                 * twice. */
                const char *what = r->verified ? NULL : rd_check(r, pos, &h);
                r->verified = false;
                if (!what) {
                    if (r->pend.on) {
                        rd_add_damage(r, r->pend.offset, r->pend.what);
                        r->pend.on = false;
                    }
                    r->resume.on = false;
                    rec->type = h.type;
                    rec->t_ns = h.t_ns;
                    rec->len = h.len;
                    rec->payload = r->blk + pos + sizeof h;
                    rec->offset = rd_block_off(r, r->seq) + pos;
                    r->pos = pos + (uint32_t)TM_REC_ALIGN8(sizeof h + (size_t)h.len);
                    r->stats.records++;
                    return 1;
                }
                rd_pend(r, true, pos, what);
                rd_mark(r, pos);
                uint32_t q = rd_resync(r, pos + 8);
                if (q) {
                    r->pos = q;
                    r->verified = true;
                    continue;
                }
            }
        }
        /* This block is done; a live writer may still add to it. */
        rd_mark(r, pos);
        r->loaded = false;
        if (r->seq >= r->last) {
            rd_end(r);
            return 0;
        }
        r->seq++;
        r->pos = sizeof(tm_rec_blkhdr);
    }
}

int tm_reader_refresh(tm_reader *r)
{
    if (!r)
        return tm_seterr(-EINVAL, "record reader: NULL argument");
    bool had = r->have;
    if (r->resume.on) {
        /* Retry from the first place after the last valid record: the end
         * of the block being filled, the record a live writer was in the
         * middle of, an unused block.  What was pending there is seen
         * again. */
        r->seq = r->resume.seq;
        r->pos = r->resume.pos;
        r->resume.on = false;
        r->pend.on = false;
    }
    r->torn = false;
    r->at_end = false;
    r->loaded = false;
    int rc = rd_scan(r);
    if (rc)
        return rc;
    if (r->have && (!had || r->seq < r->first)) {
        /* New, or the ring went past us: start at its oldest block. */
        r->seq = r->first;
        r->pos = sizeof(tm_rec_blkhdr);
    }
    return 0;
}

/* The word for a file type in "not a regular file (fifo)". */
static const char *rd_type_name(mode_t m)
{
    if (S_ISFIFO(m))
        return "fifo";
    if (S_ISDIR(m))
        return "directory";
    if (S_ISCHR(m))
        return "character device";
    if (S_ISBLK(m))
        return "block device";
    if (S_ISSOCK(m))
        return "socket";
    if (S_ISLNK(m))
        return "symlink";
    return "unknown type";
}

int tm_rec_open_read(const char *path)
{
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
     * writer, forever.  It changes nothing for a regular file. */
    int fd = tm_open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW, 0);
    if (fd == -ELOOP) {
        /* O_NOFOLLOW's answer for a symlink as the last component; a loop
         * further up the path is said as such. */
        struct stat lst;
        if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
            return tm_seterr(-ELOOP, "%s: not a regular file (symlink, not followed)", path);
    }
    if (fd < 0)
        return tm_seterr(fd, "%s: %s", path, strerror(-fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return tm_seterr(-e, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return tm_seterr(S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL, "%s: not a regular file (%s)",
                         path, rd_type_name(st.st_mode));
    }
    return fd;
}

void tm_reader_stats(const tm_reader *r, tm_reader_counters *out)
{
    if (!out)
        return;
    if (r)
        *out = r->stats;
    else
        memset(out, 0, sizeof *out);
}

int tm_reader_open(tm_reader **out, const char *path)
{
    if (!out || !path)
        return tm_seterr(-EINVAL, "record reader: NULL argument");
    *out = NULL;
    int rc = 0;
    uint8_t *hbuf = NULL;
    tm_reader *r = calloc(1, sizeof *r);
    if (r)
        r->fd = -1;
    if (!r || !(r->path = strdup(path)) || !(hbuf = malloc(TM_REC_HEADER_SIZE))) {
        rc = tm_seterr(-ENOMEM, "%s: out of memory", path);
        goto out;
    }
    r->fd = tm_rec_open_read(path);
    if (r->fd < 0) {
        rc = r->fd; /* with its message */
        goto out;
    }
    ssize_t got = tm_pread_full(r->fd, hbuf, TM_REC_HEADER_SIZE, 0);
    if (got < 0) {
        rc = rd_io_err(r, got);
        goto out;
    }
    tm_rec_filehdr fh;
    if ((size_t)got < sizeof fh) {
        rc = tm_seterr(-EINVAL, "%s: not a trainmon record file (%zd bytes, shorter than a header)",
                       path, got);
        goto out;
    }
    if (memcmp(hbuf, TM_REC_MAGIC, 8) != 0) {
        rc = tm_seterr(-EINVAL, "%s: not a trainmon record file", path);
        goto out;
    }
    memcpy(&fh, hbuf, sizeof fh);
    if (fh.version != TM_REC_VERSION) {
        rc =
            tm_seterr(-EINVAL, "%s: record file version %u is not supported (this reader knows %u)",
                      path, fh.version, TM_REC_VERSION);
        goto out;
    }
    bool ring = fh.flags & TM_REC_FLAG_RING;
    if (fh.header_size != TM_REC_HEADER_SIZE || fh.block_size < TM_REC_MIN_BLOCK ||
        fh.block_size > TM_REC_MAX_BLOCK || fh.block_size % TM_REC_MIN_BLOCK ||
        (ring && (fh.nblocks == 0 || fh.nblocks >= TM_REC_MAX_NBLOCKS))) {
        rc = tm_seterr(-EINVAL, "%s: not a trainmon record file (bad header fields)", path);
        goto out;
    }
    /* A bad header CRC with sane fields: read on, and say so. */
    if (tm_crc32c(0, hbuf, offsetof(tm_rec_filehdr, crc)) != fh.crc)
        rd_add_damage(r, 0, "bad header checksum");

    r->ring = ring;
    r->bs = fh.block_size;
    r->nblocks = ring ? fh.nblocks : 0;
    r->hdr.version = fh.version;
    r->hdr.block_size = fh.block_size;
    r->hdr.max_size = fh.max_size;
    r->hdr.start_real_ns = fh.start_real_ns;
    r->hdr.start_mono_ns = fh.start_mono_ns;
    r->hdr.pid = fh.pid;
    r->hdr.rank = fh.rank;
    memcpy(r->hdr.host, fh.host, sizeof r->hdr.host);
    r->hdr.host[sizeof r->hdr.host - 1] = '\0';
    memcpy(r->hdr.role, fh.role, sizeof r->hdr.role);
    r->hdr.role[sizeof r->hdr.role - 1] = '\0';

    r->blk = malloc(r->bs);
    if (!r->blk) {
        rc = tm_seterr(-ENOMEM, "%s: out of memory", path);
        goto out;
    }
    rc = rd_scan(r);
    if (rc)
        goto out;
    r->seq = r->first;
    r->pos = sizeof(tm_rec_blkhdr);
    *out = r;
out:
    free(hbuf);
    if (rc)
        tm_reader_close(&r);
    return rc;
}

const tm_rec_header *tm_reader_header(const tm_reader *r)
{
    return r ? &r->hdr : NULL;
}

size_t tm_reader_damage(const tm_reader *r, const tm_damage **list)
{
    if (list)
        *list = r ? r->damage : NULL;
    return r ? r->ndamage : 0;
}

bool tm_reader_torn_tail(const tm_reader *r)
{
    return r && r->torn;
}

void tm_reader_close(tm_reader **pr)
{
    tm_reader *r = pr ? *pr : NULL;
    if (!r)
        return;
    *pr = NULL;
    if (r->fd >= 0)
        close(r->fd);
    free(r->blk);
    free(r->damage);
    free(r->path);
    free(r);
}

/* -------------------------------------------------------------- decoders */

int tm_rec_decode_series(const tm_record *rec, tm_rec_series_def *out)
{
    if (!rec || !out || rec->type != TM_REC_SERIES || rec->len < 12 || !rec->payload)
        return tm_seterr(-EINVAL, "series record: too short");
    const uint8_t *p = rec->payload;
    memcpy(&out->id, p, 4);
    memcpy(&out->name_len, p + 4, 2);
    memcpy(&out->labels_len, p + 6, 2);
    memcpy(&out->unit_len, p + 8, 2);
    if (12u + out->name_len + out->labels_len + out->unit_len > rec->len)
        return tm_seterr(-EINVAL, "series record: lengths exceed the payload");
    out->name = (const char *)p + 12;
    out->labels = out->name + out->name_len;
    out->unit = out->labels + out->labels_len;
    return 0;
}

int tm_rec_decode_sample(const tm_record *rec, uint32_t *ids, double *values, size_t cap)
{
    if (!rec || rec->type != TM_REC_SAMPLE || rec->len < 8 || !rec->payload)
        return tm_seterr(-EINVAL, "sample record: too short");
    uint32_t n;
    memcpy(&n, rec->payload, 4);
    if (8u + 16ull * n > rec->len)
        return tm_seterr(-EINVAL, "sample record: %u values exceed the payload", n);
    if (cap && (!ids || !values))
        return tm_seterr(-EINVAL, "sample record: NULL arrays");
    const uint8_t *p = rec->payload + 8;
    for (size_t i = 0; i < n && i < cap; i++, p += 16) {
        memcpy(&ids[i], p, 4);
        memcpy(&values[i], p + 8, 8);
    }
    return (int)n;
}

int32_t tm_rec_event_rank(const tm_rec_event_def *e)
{
    static const char name[] = "process.rank", key[] = "\"rank\":";
    if (!e || !e->name || !e->json || e->name_len != sizeof name - 1 ||
        memcmp(e->name, name, sizeof name - 1) != 0)
        return -1;
    char buf[64]; /* the text is the writer's: bounded, NUL-terminated here */
    size_t n = e->json_len < sizeof buf - 1 ? e->json_len : sizeof buf - 1;
    memcpy(buf, e->json, n);
    buf[n] = '\0';
    const char *k = strstr(buf, key);
    if (!k)
        return -1;
    char *end;
    long r = strtol(k + sizeof key - 1, &end, 10);
    return end != k + sizeof key - 1 && r >= 0 && r < (1L << 24) ? (int32_t)r : -1;
}

int tm_rec_decode_event(const tm_record *rec, tm_rec_event_def *out)
{
    if (!rec || !out || rec->type != TM_REC_EVENT || rec->len < 8 || !rec->payload)
        return tm_seterr(-EINVAL, "event record: too short");
    const uint8_t *p = rec->payload;
    memcpy(&out->name_len, p, 2);
    memcpy(&out->json_len, p + 4, 4);
    if (8ull + out->name_len + out->json_len > rec->len)
        return tm_seterr(-EINVAL, "event record: lengths exceed the payload");
    out->name = (const char *)p + 8;
    out->json = out->name + out->name_len;
    return 0;
}
