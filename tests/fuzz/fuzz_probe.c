/*
 * fuzz_probe.c - libFuzzer target for the reader of DIR/probe.json
 * (probe.c), a file in a run directory that anyone with the directory may
 * have crafted.  The input is not NUL-terminated.  Every string comes back
 * NUL-terminated inside its array with no control character, the counts
 * stay within their arrays, rates are NAN or not negative, and what the
 * report derives from a probe (tm_probe_best, tm_probe_covers) runs on it.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "probe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    if (n >= cap)
        __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            __builtin_trap();
}

static void check_rate(double v)
{
    if (!isnan(v) && !(v >= 0 && isfinite(v)))
        __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tm_probe p[3];
    int n = tm_probe_parse((const char *)data, size, p, 3);
    if (n != -22 && (n < 0 || n > 3))
        __builtin_trap();
    for (int i = 0; i < n; i++) {
        check(p[i].path, sizeof p[i].path);
        check(p[i].device, sizeof p[i].device);
        if (p[i].ndisks > TM_PROBE_MAX_DISKS || p[i].ntests > TM_PROBE_MAX_TESTS)
            __builtin_trap();
        for (size_t k = 0; k < p[i].ndisks; k++)
            check(p[i].disks[k], sizeof p[i].disks[k]);
        for (size_t k = 0; k < p[i].ntests; k++) {
            const tm_probe_test *t = &p[i].tests[k];
            check(t->pattern, sizeof t->pattern);
            check_rate(t->bytes_per_second);
            check_rate(t->lat_p99_s);
        }
        const tm_probe_test *b = tm_probe_best(&p[i], "random");
        if (b && !(b->bytes_per_second >= 0))
            __builtin_trap();
        (void)tm_probe_covers(&p[i], "sda");
    }
    return 0;
}
