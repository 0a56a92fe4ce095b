/*
 * fuzz_reader - libFuzzer target for the record file reader (recread.c):
 * header checks, block scan, resynchronisation after damage, refresh, the
 * payload decoders and the follower's readings of an event (its rank, what
 * stopped the loop: stops.c).  The input is the whole file, written to one
 * regular file in /dev/shm (tmpfs) that is reused for every input (the
 * reader refuses /proc/self/fd/N of a memfd: a symlink).  Seeds in
 * tests/fuzz/corpus/fuzz_reader are small files written by the writer.
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rec.h"
#include "stops.h"
#include "trainmon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_to_end(tm_reader *r)
{
    tm_record rec;
    /* A 16 MiB block holds at most ~700k records; stop well before. */
    for (int i = 0; i < 200000 && tm_reader_next(r, &rec) == 1; i++) {
        tm_rec_series_def sd;
        tm_rec_event_def ev;
        uint32_t ids[8];
        double values[8];
        volatile uint8_t sink = 0;
        switch (rec.type) {
        case TM_REC_SERIES:
            if (tm_rec_decode_series(&rec, &sd) == 0 && sd.unit_len)
                sink ^= (uint8_t)sd.unit[sd.unit_len - 1];
            break;
        case TM_REC_SAMPLE:
            if (tm_rec_decode_sample(&rec, ids, values, 8) > 0)
                sink ^= (uint8_t)ids[0];
            break;
        case TM_REC_EVENT:
            if (tm_rec_decode_event(&rec, &ev) == 0 && ev.json_len) {
                sink ^= (uint8_t)ev.json[ev.json_len - 1];
                /* the follower's readings of an event: a rank, a stop */
                double d;
                bool within;
                sink ^= (uint8_t)tm_rec_event_rank(&ev);
                sink ^=
                    (uint8_t)tm_stop_of(ev.name, ev.name_len, ev.json, ev.json_len, &d, &within);
            }
            break;
        default:
            if (rec.len)
                sink ^= rec.payload[rec.len - 1];
        }
        (void)sink;
    }
}

static char fpath[64];

static void remove_file(void)
{
    unlink(fpath);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0) {
        snprintf(fpath, sizeof fpath, "/dev/shm/fuzz_reader.XXXXXX");
        fd = mkostemp(fpath, O_CLOEXEC);
        if (fd < 0) {
            snprintf(fpath, sizeof fpath, "/tmp/fuzz_reader.XXXXXX");
            fd = mkostemp(fpath, O_CLOEXEC);
        }
        if (fd < 0)
            return 0;
        atexit(remove_file);
    }
    if (ftruncate(fd, 0) != 0)
        return 0;
    size_t off = 0;
    while (off < size) {
        ssize_t n = pwrite(fd, data + off, size - off, (off_t)off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    const char *path = fpath;
    tm_reader *r = NULL;
    if (tm_reader_open(&r, path) == 0) {
        const tm_rec_header *h = tm_reader_header(r);
        if (h->host[sizeof h->host - 1] || h->role[sizeof h->role - 1])
            __builtin_trap(); /* the strings must be terminated */
        read_to_end(r);
        const tm_damage *d;
        size_t nd = tm_reader_damage(r, &d);
        for (size_t i = 0; i < nd; i++)
            if (!memchr(d[i].what, 0, sizeof d[i].what))
                __builtin_trap();
        (void)tm_reader_torn_tail(r);
        if (tm_reader_refresh(r) == 0)
            read_to_end(r);
        /* Linear work: the reader charges every CRC to the loaded block's
         * budget of 4 block sizes (RD_CRC_BUDGET in recread.c). */
        tm_reader_counters c;
        tm_reader_stats(r, &c);
        if (c.crc_bytes > 4ull * h->block_size * c.blocks)
            __builtin_trap();
        tm_reader_close(&r);
    }
    return 0;
}
