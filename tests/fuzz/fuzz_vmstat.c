/*
 * fuzz_vmstat.c - libFuzzer target for the page-cache collector's parsers
 * (collect_vmstat.c): the same bytes as /proc/vmstat and as /proc/meminfo
 * (not NUL-terminated, in an exact-size copy so that a read past the end
 * hits the redzone), then the rates between that sample and an empty one
 * in both orders.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collect_vmstat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    tm_vmstat a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    if (tm_vmstat_parse(buf, size, &a) != 0 || tm_meminfo_parse(buf, size, &a) != 0)
        abort();
    if (a.valid & ~0x3fu)
        abort();
    /* A scaled meminfo value never wraps: at most 2^64-1 bytes. */
    if ((a.valid & TM_VM_HAVE_CACHED) && a.cached_bytes % 1024 != 0)
        abort();
    if ((a.valid & TM_VM_HAVE_MEMTOTAL) && a.mem_total_bytes % 1024 != 0)
        abort();
    double dt = size ? (double)(data[0] % 4) * 0.5 : 1.0; /* 0 s included */
    tm_vmrate r;
    tm_vmstat_rate(&b, &a, dt, &r);
    tm_vmstat_rate(&a, &b, dt, &r);
    if (!isnan(r.majfault_s) && r.majfault_s < 0)
        abort();
    tm_vmstat_rate(NULL, &a, dt, &r);
    free(buf);
    return 0;
}
