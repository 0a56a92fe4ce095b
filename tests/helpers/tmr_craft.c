/*
 * tmr_craft - writes crafted record files for the hardening tests
 * (tests/e2e/crafted_input.sh, tests/e2e/fifo_in_run_dir.sh, the fuzz
 * seeds).  The bytes come from tmr_craft.h, shared with the unit test.
 *
 *   tmr_craft far OUT SIZE BLOCK    resync worst case: SIZE bytes of blocks
 *                                   of BLOCK bytes, one valid event each,
 *                                   then a plausible bad header every 8 bytes
 *   tmr_craft clocks OUT RANK REAL MONO
 *                                   a rank file with clocks at int64's edges
 *                                   (REAL/MONO: the header's start_real_ns and
 *                                   start_mono_ns, decimal, may be negative)
 *   tmr_craft pack OUT CONTROL FILE...
 *                                   a fuzz_timeline input: the CONTROL byte,
 *                                   then the files joined by its separator
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tmr_craft.h"

/* tests/fuzz/fuzz_timeline.c splits its input at this marker. */
#define PACK_SEP "\xffTMSPLIT"

static int usage(void)
{
    fprintf(stderr, "usage: tmr_craft far OUT SIZE BLOCK | clocks OUT RANK REAL MONO | "
                    "pack OUT CONTROL FILE...\n");
    return 2;
}

static int pack(int argc, char **argv)
{
    FILE *out = fopen(argv[2], "wb");
    if (!out) {
        perror(argv[2]);
        return 1;
    }
    fputc((int)strtol(argv[3], NULL, 0), out);
    for (int i = 4; i < argc; i++) {
        if (i > 4)
            fwrite(PACK_SEP, 1, sizeof PACK_SEP - 1, out);
        FILE *in = fopen(argv[i], "rb");
        if (!in) {
            perror(argv[i]);
            fclose(out);
            return 1;
        }
        char buf[65536];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, in)) > 0)
            fwrite(buf, 1, n, out);
        fclose(in);
    }
    return fclose(out) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "far") == 0) {
        long n =
            craft_far(argv[2], strtoull(argv[3], NULL, 0), (uint32_t)strtoul(argv[4], NULL, 0));
        if (n < 0) {
            fprintf(stderr, "tmr_craft: %s: %s\n", argv[2], strerror((int)-n));
            return 1;
        }
        printf("%ld\n", n); /* blocks, each with one valid event */
        return 0;
    }
    if (argc == 6 && strcmp(argv[1], "clocks") == 0) {
        int rc = craft_clocks_file(argv[2], (int32_t)atoi(argv[3]), strtoll(argv[4], NULL, 10),
                                   strtoll(argv[5], NULL, 10));
        if (rc < 0) {
            fprintf(stderr, "tmr_craft: %s: %s\n", argv[2], tm_last_error());
            return 1;
        }
        return 0;
    }
    if (argc >= 5 && strcmp(argv[1], "pack") == 0)
        return pack(argc, argv);
    return usage();
}
