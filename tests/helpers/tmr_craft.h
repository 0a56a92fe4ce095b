/*
 * tmr_craft.h - crafted record files for the hardening tests: the worst
 * case of the reader's resynchronisation, and run directories whose clocks
 * sit at the ends of int64.  Header-only so that the unit test
 * (tests/unit/test_rec.c) and the command-line helper (tmr_craft.c, for the
 * end-to-end scripts and the fuzz seeds) write the same bytes.
 *
 * Files are built byte by byte with the layout of src/lib/rec.h and valid
 * file and block header CRCs, so that the reader gets past the headers and
 * spends its time where an attacker wants it to.
 */
#ifndef TMR_CRAFT_H
#define TMR_CRAFT_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rec.h"
#include "trainmon.h"

/* Fills a valid file header (unbounded, block size bs). */
static inline void craft_filehdr(uint8_t *buf, uint32_t bs, int64_t start_real_ns,
                                 int64_t start_mono_ns, int32_t rank, const char *role)
{
    tm_rec_filehdr fh;
    memset(buf, 0, TM_REC_HEADER_SIZE);
    memset(&fh, 0, sizeof fh);
    memcpy(fh.magic, TM_REC_MAGIC, 8);
    fh.version = TM_REC_VERSION;
    fh.header_size = TM_REC_HEADER_SIZE;
    fh.block_size = bs;
    fh.start_real_ns = start_real_ns;
    fh.start_mono_ns = start_mono_ns;
    fh.pid = 4242;
    fh.rank = rank;
    strncpy(fh.host, "crafted", sizeof fh.host - 1);
    strncpy(fh.role, role, sizeof fh.role - 1);
    memcpy(buf, &fh, sizeof fh);
    uint32_t crc = tm_crc32c(0, buf, offsetof(tm_rec_filehdr, crc));
    memcpy(buf + offsetof(tm_rec_filehdr, crc), &crc, 4);
}

/* Puts a valid record at blk + pos (block seq); returns the next position. */
static inline uint32_t craft_record(uint8_t *blk, uint32_t pos, uint64_t seq, uint16_t type,
                                    int64_t t_ns, const void *payload, uint32_t len)
{
    tm_rec_hdr h = {.type = type, .len = len, .t_ns = t_ns};
    memcpy(blk + pos + sizeof h, payload, len);
    h.crc = tm_rec_crc(seq, &h, blk + pos + sizeof h);
    memcpy(blk + pos, &h, sizeof h);
    return pos + (uint32_t)TM_REC_ALIGN8(sizeof h + len);
}

/*
 * The resynchronisation worst case, `size` bytes (rounded down to whole
 * blocks of bs).  Each block holds one valid event "n" {"n":<block index>}
 * at its start; after it, every 8-byte step is a plausible record header
 * (type 2, flags 0) whose length reaches exactly to the end of the block,
 * with a checksum that does not match.  A reader that CRC-checks every
 * candidate does bs^2/16 bytes of CRC per block: 64 KiB blocks make a 16 MiB
 * file cost about 70 GB of CRC, one 16 MiB block about 16 TB.
 *
 * Each 8-byte word w at offset p is `2 | (bs - p - 24) << 32`, so read as
 * a header at p it is type 2, flags 0, len bs - p - 24; the header's crc
 * field is the low half of the word two further on (2), which the CRC of
 * such a record is not (checked: the reader's counters show no record).
 * Returns the number of blocks (= valid events), or -errno.
 */
static inline long craft_far(const char *path, uint64_t size, uint32_t bs)
{
    if (bs < TM_REC_MIN_BLOCK || bs > TM_REC_MAX_BLOCK || size < TM_REC_HEADER_SIZE + bs)
        return -EINVAL;
    uint64_t nblocks = (size - TM_REC_HEADER_SIZE) / bs;
    uint8_t *buf = malloc(bs > TM_REC_HEADER_SIZE ? bs : TM_REC_HEADER_SIZE);
    if (!buf)
        return -ENOMEM;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        free(buf);
        return -errno;
    }
    long rc = (long)nblocks;
    craft_filehdr(buf, bs, 1700000000000000000LL, 1000000000LL, 0, "rank0");
    if (write(fd, buf, TM_REC_HEADER_SIZE) != (ssize_t)TM_REC_HEADER_SIZE)
        rc = -EIO;
    for (uint64_t b = 0; b < nblocks && rc >= 0; b++) {
        memset(buf, 0, bs);
        tm_rec_blkhdr bh = {.magic = TM_REC_BLOCK_MAGIC, .crc = tm_rec_blkcrc(b), .seq = b};
        memcpy(buf, &bh, sizeof bh);
        char json[64];
        int jl = snprintf(json, sizeof json, "{\"n\":%llu}", (unsigned long long)b);
        uint8_t ev[80] = {1, 0, 0, 0};
        memcpy(ev + 4, &jl, 4);
        ev[8] = 'n';
        memcpy(ev + 9, json, (size_t)jl);
        uint32_t pos = craft_record(buf, sizeof bh, b, TM_REC_EVENT,
                                    1000000000LL + (int64_t)b * 1000, ev, 9u + (uint32_t)jl);
        for (uint32_t p = pos; p + 8 <= bs; p += 8) {
            uint64_t len = p + sizeof(tm_rec_hdr) <= bs ? bs - p - sizeof(tm_rec_hdr) : 0;
            uint64_t w = 2u | len << 32;
            memcpy(buf + p, &w, 8);
        }
        if (write(fd, buf, bs) != (ssize_t)bs)
            rc = -EIO;
    }
    if (close(fd) != 0 && rc >= 0)
        rc = -errno;
    free(buf);
    return rc;
}

/* Clock values at the edges, for headers and records. */
static const int64_t craft_clock_edges[] = {
    INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 0,
    -1,        1,         INT64_MAX / 2, INT64_MIN / 2, 1700000000000000000LL,
};
#define CRAFT_NCLOCKS (sizeof craft_clock_edges / sizeof craft_clock_edges[0])

/*
 * A record file of one training rank whose clocks are edges: the header's
 * start_real_ns/start_mono_ns are (real, mono), and it holds a series with
 * samples, events, steps, workers, optimizer steps, phases and a capture at
 * times taken from craft_clock_edges (record t_ns never 0, which means
 * "now" to the writer).  Written with the real writer, then the header
 * clocks are patched and its CRC made valid again.  0 or -errno.
 */
static inline int craft_clocks_file(const char *path, int32_t rank, int64_t real, int64_t mono)
{
    char role[16];
    snprintf(role, sizeof role, "rank%d", rank);
    tm_rec_opts o = {.role = role, .rank = rank, .block_size = 4096};
    tm_rec *w = NULL;
    int rc = tm_rec_open(&w, path, &o);
    if (rc)
        return rc;
    int id = tm_rec_series(w, "gpu.util", "gpu=0", "%");
    uint8_t buf[512];
    for (size_t i = 0; i < CRAFT_NCLOCKS && id > 0; i++) {
        int64_t a = craft_clock_edges[i] ? craft_clock_edges[i] : 3;
        int64_t b = craft_clock_edges[(i + 3) % CRAFT_NCLOCKS];
        uint32_t uid = (uint32_t)id;
        double v = (double)i;
        tm_rec_sample(w, a, &uid, &v, 1);
        tm_rec_event(w, a, "edge", "{\"i\":1}");
        tm_inproc_step s = {.step = i, .start_ns = a, .end_ns = b, .data_wait_ns = b, .flags = 0};
        int n = tm_inproc_encode_step(&s, buf, sizeof buf);
        if (n > 0)
            tm_rec_append(w, TM_REC_STEP, a, buf, (uint32_t)n);
        tm_inproc_worker wk = {.worker_id = (int32_t)i,
                               .pid = 7,
                               .batch = i,
                               .start_ns = b,
                               .end_ns = a,
                               .cpu_s = 1e300,
                               .rss_bytes = -1};
        n = tm_inproc_encode_worker(&wk, buf, sizeof buf);
        if (n > 0)
            tm_rec_append(w, TM_REC_WORKER, a, buf, (uint32_t)n);
        tm_inproc_optstep os = {.step = UINT64_MAX - i, .start_ns = a, .end_ns = b};
        n = tm_inproc_encode_optstep(&os, buf, sizeof buf);
        if (n > 0)
            tm_rec_append(w, TM_REC_OPTSTEP, a, buf, (uint32_t)n);
        tm_inproc_phase ph = {.kind = i % 2 ? TM_PHASE_EXIT : TM_PHASE_ENTER,
                              .depth = (uint32_t)i,
                              .step = i,
                              .name = "fwd",
                              .name_len = 3};
        n = tm_inproc_encode_phase(&ph, buf, sizeof buf);
        if (n > 0)
            tm_rec_append(w, TM_REC_PHASE, a, buf, (uint32_t)n);
        tm_inproc_capture c = {.source = TM_CAPTURE_STEP,
                               .device = 0,
                               .step = i,
                               .allocated = 1e18,
                               .reserved = -1,
                               .peak_allocated = 1e308,
                               .tag = "step",
                               .tag_len = 4};
        n = tm_inproc_encode_capture(&c, buf, sizeof buf);
        if (n > 0)
            tm_rec_append(w, TM_REC_CAPTURE, a, buf, (uint32_t)n);
    }
    tm_rec_close(&w);
    if (id < 0)
        return id;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint8_t hb[TM_REC_HEADER_SIZE];
    rc = 0;
    if (pread(fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb) {
        rc = -EIO;
    } else {
        memcpy(hb + offsetof(tm_rec_filehdr, start_real_ns), &real, 8);
        memcpy(hb + offsetof(tm_rec_filehdr, start_mono_ns), &mono, 8);
        uint32_t crc = tm_crc32c(0, hb, offsetof(tm_rec_filehdr, crc));
        memcpy(hb + offsetof(tm_rec_filehdr, crc), &crc, 4);
        if (pwrite(fd, hb, sizeof hb, 0) != (ssize_t)sizeof hb)
            rc = -EIO;
    }
    close(fd);
    return rc;
}

#endif /* TMR_CRAFT_H */
