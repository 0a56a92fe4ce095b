/*
 * rec.h - the on-disk layout of record files (docs/FORMAT.md), shared by
 * the writer (rec.c) and the reader (recread.c), and CRC-32C.  Internal:
 * front-ends use include/trainmon.h.
 *
 * Everything on disk is little-endian.  The structs below are the exact
 * byte layout (checked by static asserts); the writer stores them in place
 * through its mapping, which is correct on little-endian hosts only, and
 * the build refuses a big-endian target rather than write wrong files.
 */
#ifndef TM_REC_H
#define TM_REC_H

#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "trainmon record files are little-endian; a big-endian port needs byte swaps here"
#endif

#define TM_REC_MAGIC "TRAINMON" /* 8 bytes, no NUL on disk */
#define TM_REC_VERSION 1u
#define TM_REC_HEADER_SIZE 4096u
#define TM_REC_FLAG_RING 1u

#define TM_REC_BLOCK_MAGIC 0x4b424d54u /* "TMBK" read as a little-endian u32 */
#define TM_REC_DEFAULT_BLOCK (64u * 1024u)
#define TM_REC_MIN_BLOCK 4096u
#define TM_REC_MAX_BLOCK (16u * 1024u * 1024u)
/* Beyond this many blocks a ring's header is taken as damaged (2^32 blocks
 * of 4 KiB is 16 TiB). */
#define TM_REC_MAX_NBLOCKS (1ull << 32)

/* The file header: the first TM_REC_HEADER_SIZE bytes, zero after crc. */
typedef struct tm_rec_filehdr {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint32_t block_size;
    uint32_t flags; /* TM_REC_FLAG_RING */
    uint64_t max_size;
    uint64_t nblocks; /* ring only; 0 when unbounded */
    int64_t start_real_ns;
    int64_t start_mono_ns;
    int32_t pid;
    int32_t rank;
    char host[64]; /* NUL-padded */
    char role[32]; /* NUL-padded */
    uint32_t crc;  /* CRC-32C of the 160 bytes before it */
} tm_rec_filehdr;

/* The start of every block. */
typedef struct tm_rec_blkhdr {
    uint32_t magic; /* TM_REC_BLOCK_MAGIC */
    uint32_t crc;   /* CRC-32C of magic and seq (the 4 + 8 bytes) */
    uint64_t seq;   /* 0, 1, 2, ...; the block sits at index seq % nblocks in a ring */
} tm_rec_blkhdr;

/* The start of every record; the payload follows, then zeros up to the
 * next multiple of 8. */
typedef struct tm_rec_hdr {
    uint16_t type;
    uint16_t flags; /* 0 */
    uint32_t len;   /* payload bytes */
    int64_t t_ns;   /* CLOCK_MONOTONIC */
    uint32_t crc;   /* CRC-32C of block seq, type, flags, len, t_ns, payload */
    uint32_t pad;   /* 0 */
} tm_rec_hdr;

_Static_assert(offsetof(tm_rec_filehdr, crc) == 160, "file header layout");
_Static_assert(sizeof(tm_rec_blkhdr) == 16, "block header layout");
_Static_assert(sizeof(tm_rec_hdr) == 24, "record header layout");
_Static_assert(offsetof(tm_rec_hdr, crc) == 16, "record header layout");

#define TM_REC_ALIGN8(n) (((n) + 7u) & ~(size_t)7u)

/* CRC-32C (Castagnoli, reflected 0x82F63B78), continuing from crc: start
 * with 0; crc32c("123456789") == 0xE3069283.  Uses the SSE4.2 instruction
 * when the CPU has it. */
uint32_t tm_crc32c(uint32_t crc, const void *buf, size_t len);

/* The CRC stored in a record header: over the seq of the block it lives in,
 * the header fields before crc, and the payload. */
uint32_t tm_rec_crc(uint64_t seq, const tm_rec_hdr *h, const void *payload);

/* The CRC stored in a block header. */
uint32_t tm_rec_blkcrc(uint64_t seq);

/* Opens path to read, the way every reader of a run directory must
 * (O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC, then fstat): a FIFO, device,
 * socket or directory is refused with "PATH: not a regular file (fifo)",
 * a symlink with "PATH: not a regular file (symlink, not followed)", so
 * that nothing planted there blocks the reader or redirects it.  The fd,
 * or a negative errno with the message set. */
int tm_rec_open_read(const char *path);

/* The work a reader did, for tests and diagnostics: reading stays linear
 * in the file size however the file is damaged (recread.c). */
typedef struct tm_reader_counters {
    uint64_t blocks;     /* blocks loaded */
    uint64_t records;    /* valid records returned */
    uint64_t crc_bytes;  /* bytes of records CRC-checked, valid or not */
    uint64_t candidates; /* plausible headers CRC-checked while resynchronising */
    uint64_t unchecked;  /* records not checked: the block's CRC budget was spent */
} tm_reader_counters;
void tm_reader_stats(const tm_reader *r, tm_reader_counters *out);

#endif /* TM_REC_H */
