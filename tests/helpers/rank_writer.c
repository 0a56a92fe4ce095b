/*
 * rank_writer - writes a training rank's record file the way the CPython
 * extension does (in-process records), for the exporter's end-to-end test.
 *
 *   rank_writer PATH RANK STEPS [OOMS] [LIVE_STEPS]
 *
 * Writes STEPS steps (0.1 s each, of which 0.01 s waiting for data), one
 * allocator capture (1 GiB allocated, 2 GiB reserved, 1.5 GiB peak) and
 * OOMS out-of-memory events, prints "ready", then appends LIVE_STEPS more
 * steps, one every 50 ms, so that a reader can follow a growing file, and
 * prints "done".
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainmon.h"

static int put_step(tm_rec *w, uint64_t n)
{
    uint8_t buf[256];
    int64_t now = tm_now_mono_ns();
    tm_inproc_step s = {.step = n,
                        .start_ns = now - 100000000,
                        .end_ns = now,
                        .data_wait_ns = 10000000,
                        .flags = 0};
    int len = tm_inproc_encode_step(&s, buf, sizeof buf);
    return len < 0 ? len : tm_rec_append(w, TM_REC_STEP, now, buf, (uint32_t)len);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: rank_writer PATH RANK STEPS [OOMS] [LIVE_STEPS]\n");
        return 2;
    }
    int rank = atoi(argv[2]);
    uint64_t steps = strtoull(argv[3], NULL, 10);
    unsigned ooms = argc > 4 ? (unsigned)atoi(argv[4]) : 0;
    uint64_t live = argc > 5 ? strtoull(argv[5], NULL, 10) : 0;
    char role[32];
    snprintf(role, sizeof role, "rank%d", rank);
    tm_rec_opts o = {.role = role, .rank = rank};
    tm_rec *w = NULL;
    if (tm_rec_open(&w, argv[1], &o) < 0) {
        fprintf(stderr, "rank_writer: %s\n", tm_last_error());
        return 1;
    }
    int rc = 0;
    for (uint64_t i = 0; i < steps && rc == 0; i++)
        rc = put_step(w, i);
    uint8_t buf[4096];
    tm_inproc_capture c = {.source = TM_CAPTURE_STEP,
                           .device = 0,
                           .step = steps,
                           .allocated = 1073741824.0,
                           .reserved = 2147483648.0,
                           .peak_allocated = 1610612736.0,
                           .active = NAN,
                           .inactive_split = NAN,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = NAN,
                           .num_alloc_retries = 0,
                           .num_ooms = ooms,
                           .host_rss = NAN,
                           .tag = "step",
                           .tag_len = 4};
    int len = tm_inproc_encode_capture(&c, buf, sizeof buf);
    if (rc == 0)
        rc = len < 0 ? len : tm_rec_append(w, TM_REC_CAPTURE, 0, buf, (uint32_t)len);
    for (unsigned i = 0; i < ooms && rc == 0; i++) {
        tm_inproc_oom e = {.device = 0,
                           .seq = i + 1,
                           .step = steps,
                           .source = TM_OOM_OBSERVER,
                           .requested = 1e9,
                           .free_device = 1e8,
                           .total_device = 8e9,
                           .allocated = 7e9,
                           .reserved = 7.5e9,
                           .phase = "",
                           .phase_len = 0,
                           .snapshot = "",
                           .snapshot_len = 0};
        len = tm_inproc_encode_oom(&e, buf, sizeof buf);
        rc = len < 0 ? len : tm_rec_append(w, TM_REC_OOM, 0, buf, (uint32_t)len);
    }
    printf("ready\n");
    fflush(stdout);
    for (uint64_t i = 0; i < live && rc == 0; i++) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        rc = put_step(w, steps + i);
    }
    tm_rec_close(&w);
    if (rc < 0) {
        fprintf(stderr, "rank_writer: append: %d\n", rc);
        return 1;
    }
    printf("done\n");
    return 0;
}
