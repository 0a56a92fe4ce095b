/*
 * chrome_write.c - writes a Chrome trace for tests/e2e/chrome_trace.sh:
 * two ranks (pid 1 and 2) with steps on tid 1 and phases on tid 2 (given
 * out of order, some overrunning their step), memory counters, an OOM
 * instant and names that need escaping.  `chrome_write FILE` prints the
 * number of clipped slices.
 */
#include <math.h>
#include <stdio.h>

#include "trainmon.h"

#define MS 1000000LL

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: chrome_write FILE\n");
        return 2;
    }
    tm_chrome *c = NULL;
    if (tm_chrome_open(&c, argv[1]) < 0) {
        fprintf(stderr, "chrome_write: %s\n", tm_last_error());
        return 1;
    }
    int rc = 0;
    for (int pid = 1; pid <= 2; pid++) {
        char name[32];
        snprintf(name, sizeof name, "rank %d", pid - 1);
        rc |= tm_chrome_process_name(c, pid, name);
        rc |= tm_chrome_thread_name(c, pid, 1, "steps");
        rc |= tm_chrome_thread_name(c, pid, 2, "phases \"train\"\\eval");
        for (int s = 19; s >= 0; s--) { /* backwards: the writer sorts */
            int64_t t0 = (int64_t)s * 100 * MS + pid * MS;
            char args[64];
            snprintf(args, sizeof args, "{\"step\":%d,\"data_wait_s\":0.01}", s);
            snprintf(name, sizeof name, "step %d", s);
            rc |= tm_chrome_slice(c, pid, 1, name, t0, 100 * MS, args);
            rc |= tm_chrome_slice(c, pid, 2, "backward", t0 + 40 * MS, 50 * MS, NULL);
            rc |= tm_chrome_slice(c, pid, 2, "forward", t0 + 10 * MS, 30 * MS, NULL);
            rc |= tm_chrome_slice(c, pid, 2, "train", t0, 100 * MS, NULL);
            /* the optimizer phase overruns its train phase: it is cut */
            rc |= tm_chrome_slice(c, pid, 2, "optimizer \xce\xb1", t0 + 90 * MS, 15 * MS, NULL);
            const char *keys[] = {"allocated", "reserved"};
            double v[] = {(double)s * 1048576.0, s == 3 ? NAN : (double)(s + 1) * 2097152.0};
            rc |= tm_chrome_counter(c, pid, "gpu_mem", t0, keys, v, 2);
        }
        rc |= tm_chrome_instant(c, pid, 1, "oom", 1500 * MS, 'p', "{\"requested\":1024}");
    }
    const char *dk[] = {"read_mb_s"};
    double dv[] = {12.5};
    rc |= tm_chrome_process_name(c, 100, "system");
    rc |= tm_chrome_counter(c, 100, "disk loop0", 10 * MS, dk, dv, 1);
    size_t clipped = 0;
    if (rc || tm_chrome_close(&c, &clipped) < 0) {
        fprintf(stderr, "chrome_write: %s\n", tm_last_error());
        return 1;
    }
    printf("%zu\n", clipped);
    return 0;
}
