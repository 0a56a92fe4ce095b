/*
 * fuzz_timeline - libFuzzer target for the run loader (timeline.c) and what
 * reads a loaded run: tm_analyze and both report writers.  Two run
 * directories stand for two hosts whose clocks disagree, the case where the
 * loader's wall-clock arithmetic meets values from files.
 *
 * Input: one control byte, then up to five files separated by "\xffTMSPLIT"
 * (tests/helpers/tmr_craft.c `pack` writes seeds in this form):
 *
 *   a/meta.json  a/rank0.tmr  b/rank1.tmr  b/system.tmr  b/meta.json
 *
 * Control byte: bit 0 makes every CRC valid again after the mutation (file
 * header, block headers, records), so that mutated clocks and payloads get
 * past the checksums into the decoders and the arithmetic; without it the
 * damage paths are fuzzed.  Bits 1-3 and 4-6 replace the start clocks of
 * a/rank0.tmr and b/rank1.tmr by int64 edges (0: keep).
 *
 * The directories live under /dev/shm (tmpfs; keeps an input under a
 * millisecond) and are emptied after each input.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../helpers/tmr_craft.h"
#include "rec.h"
#include "trainmon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP "\xffTMSPLIT"
#define NFILES 5

static const char *const names[NFILES] = {"a/meta.json", "a/rank0.tmr", "b/rank1.tmr",
                                          "b/system.tmr", "b/meta.json"};
static char root[64];

static void remove_root(void)
{
    char p[128];
    for (int i = 0; i < NFILES; i++) {
        snprintf(p, sizeof p, "%s/%s", root, names[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/a", root);
    rmdir(p);
    snprintf(p, sizeof p, "%s/b", root);
    rmdir(p);
    rmdir(root);
}

static int make_root(void)
{
    if (root[0])
        return 0;
    snprintf(root, sizeof root, "/dev/shm/fuzz_timeline.XXXXXX");
    if (!mkdtemp(root)) {
        snprintf(root, sizeof root, "/tmp/fuzz_timeline.XXXXXX");
        if (!mkdtemp(root)) {
            root[0] = '\0';
            return -1;
        }
    }
    char p[128];
    snprintf(p, sizeof p, "%s/a", root);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/b", root);
    mkdir(p, 0700);
    atexit(remove_root);
    return 0;
}

/* Makes the CRCs of a record file valid again, walking its blocks and
 * records as a reader does (linear: each record once). */
static void fix_crcs(uint8_t *f, size_t n)
{
    if (n < TM_REC_HEADER_SIZE)
        return;
    tm_rec_filehdr fh;
    memcpy(&fh, f, sizeof fh);
    uint32_t crc = tm_crc32c(0, f, offsetof(tm_rec_filehdr, crc));
    memcpy(f + offsetof(tm_rec_filehdr, crc), &crc, 4);
    uint32_t bs = fh.block_size;
    if (bs < TM_REC_MIN_BLOCK || bs > TM_REC_MAX_BLOCK || bs % TM_REC_MIN_BLOCK)
        return;
    for (size_t off = TM_REC_HEADER_SIZE; off + sizeof(tm_rec_blkhdr) <= n; off += bs) {
        tm_rec_blkhdr bh;
        memcpy(&bh, f + off, sizeof bh);
        if (bh.magic != TM_REC_BLOCK_MAGIC)
            continue;
        bh.crc = tm_rec_blkcrc(bh.seq);
        memcpy(f + off, &bh, sizeof bh);
        size_t end = off + bs < n ? off + bs : n;
        for (size_t pos = off + sizeof bh; pos + sizeof(tm_rec_hdr) <= end;) {
            tm_rec_hdr h;
            memcpy(&h, f + pos, sizeof h);
            if ((h.type == 0 && h.len == 0) || h.len > end - pos - sizeof h)
                break;
            h.crc = tm_rec_crc(bh.seq, &h, f + pos + sizeof h);
            memcpy(f + pos, &h, sizeof h);
            pos += TM_REC_ALIGN8(sizeof h + (size_t)h.len);
        }
    }
}

static void set_clocks(uint8_t *f, size_t n, unsigned sel)
{
    if (!sel || n < sizeof(tm_rec_filehdr))
        return;
    int64_t real = craft_clock_edges[(sel - 1) % CRAFT_NCLOCKS];
    int64_t mono = craft_clock_edges[(sel * 3) % CRAFT_NCLOCKS];
    memcpy(f + offsetof(tm_rec_filehdr, start_real_ns), &real, 8);
    memcpy(f + offsetof(tm_rec_filehdr, start_mono_ns), &mono, 8);
}

static void put_file(int i, const uint8_t *p, size_t n, uint8_t ctl)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", root, names[i]);
    uint8_t *f = malloc(n ? n : 1);
    if (!f)
        return;
    memcpy(f, p, n);
    if (i == 1)
        set_clocks(f, n, (ctl >> 1) & 7u);
    else if (i == 2)
        set_clocks(f, n, (ctl >> 4) & 7u);
    if ((ctl & 1u) && strstr(names[i], ".tmr"))
        fix_crcs(f, n);
    FILE *o = fopen(path, "wb");
    if (o) {
        fwrite(f, 1, n, o);
        fclose(o);
    }
    free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || make_root() < 0)
        return 0;
    uint8_t ctl = data[0];
    const uint8_t *p = data + 1, *end = data + size;
    int nf = 0;
    while (nf < NFILES) {
        const uint8_t *s = memmem(p, (size_t)(end - p), SEP, sizeof SEP - 1);
        const uint8_t *stop = s ? s : end;
        put_file(nf++, p, (size_t)(stop - p), ctl);
        if (!s)
            break;
        p = s + sizeof SEP - 1;
    }

    char a[96], b[96];
    snprintf(a, sizeof a, "%s/a", root);
    snprintf(b, sizeof b, "%s/b", root);
    const char *dirs[2] = {a, b};
    tm_run *run = NULL;
    if (tm_run_load(&run, dirs, 2) == 0) {
        const char *const *notes;
        size_t nn = tm_run_notes(run, &notes);
        for (size_t i = 0; i < nn; i++)
            if (!notes[i])
                __builtin_trap();
        tm_analysis *an = NULL;
        if (tm_analyze(run, &an) == 0) {
            tm_text *t = tm_text_new(16u << 20);
            if (t) {
                tm_report_write(run, an, t, false);
                tm_text_reset(t);
                tm_report_write(run, an, t, true);
                tm_text_free(&t);
            }
            tm_analysis_free(&an);
        }
        tm_run_free(&run);
    }

    for (int i = 0; i < NFILES; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        unlink(path);
    }
    return 0;
}
