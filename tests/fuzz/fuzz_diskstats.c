/*
 * fuzz_diskstats.c - libFuzzer target: tm_diskstats_parse on arbitrary
 * bytes (not NUL-terminated), then tm_disk_rate on every neighbouring pair
 * of parsed lines, in both orders so that counters run backwards too.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "trainmon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tm_diskstat st[64];
    /* An exact-size copy, so that any read past size hits the redzone. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    for (size_t i = 0; i < size; i++)
        buf[i] = (char)data[i];
    int n = tm_diskstats_parse(buf, size, st, 64);
    if (n < 0 || n > 64)
        abort();
    double interval = size ? (double)(data[0] % 5) * 0.5 : 1.0; /* 0 s included */
    for (int i = 0; i < n; i++) {
        if (st[i].nfields != 14 && st[i].nfields != 18 && st[i].nfields != 20)
            abort();
        tm_diskrate r;
        const tm_diskstat *a = &st[i], *b = &st[(i + 1) % n];
        tm_disk_rate(a, b, interval, &r);
        if (r.util > 100.0 || r.r_s < 0 || r.w_s < 0 || r.r_await < 0 || r.aqu_sz < 0)
            abort();
        tm_disk_rate(b, a, interval, &r);
        if (r.util > 100.0 || r.rkb_s < 0 || r.wkb_s < 0 || r.rrqm_pct < 0 || r.rrqm_pct > 100)
            abort();
    }
    free(buf);
    return 0;
}
