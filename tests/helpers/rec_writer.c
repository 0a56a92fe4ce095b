/*
 * rec_writer - appends numbered events to a record file as fast as it can,
 * for the kill tests (tests/unit/test_rec.c) and end-to-end scripts.
 *
 *   rec_writer PATH [--max-size BYTES] [--block-size BYTES] [--count N]
 *
 * Each event is named "n" with details {"n":<number>}, numbers 0, 1, 2, ...
 * After the first event is in the file it prints "ready" on stdout, so a
 * test knows writing has begun before it sends SIGKILL.  Without --count it
 * runs until killed; with it, it closes the file and prints the count.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainmon.h"

int main(int argc, char **argv)
{
    tm_rec_opts opts = {.role = "rec_writer", .rank = -1};
    unsigned long long count = 0;
    bool bounded = false;
    if (argc < 2) {
        fprintf(stderr, "usage: rec_writer PATH [--max-size B] [--block-size B] [--count N]\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        unsigned long long v = strtoull(argv[i + 1], NULL, 0);
        if (strcmp(argv[i], "--max-size") == 0) {
            opts.max_size = v;
        } else if (strcmp(argv[i], "--block-size") == 0) {
            opts.block_size = (uint32_t)v;
        } else if (strcmp(argv[i], "--count") == 0) {
            count = v;
            bounded = true;
        } else {
            fprintf(stderr, "rec_writer: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    tm_rec *w = NULL;
    if (tm_rec_open(&w, argv[1], &opts) < 0) {
        fprintf(stderr, "rec_writer: %s\n", tm_last_error());
        return 1;
    }
    char json[64];
    unsigned long long n;
    for (n = 0; !bounded || n < count; n++) {
        snprintf(json, sizeof json, "{\"n\":%llu}", n);
        int rc = tm_rec_event(w, 0, "n", json);
        if (rc < 0) {
            fprintf(stderr, "rec_writer: event %llu: %s\n", n, strerror(-rc));
            break;
        }
        if (n == 0) {
            puts("ready");
            fflush(stdout);
        }
    }
    tm_rec_close(&w);
    printf("%llu\n", n);
    return 0;
}
