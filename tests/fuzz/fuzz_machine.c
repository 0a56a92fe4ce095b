/*
 * fuzz_machine.c - libFuzzer target for the parsers of machine.c: CPU
 * lists (Cpus_allowed_list, cpu/online), cgroup v2 cpu.max, v1 CFS quota
 * and period (the input split at its first newline) and the v1 cpu path
 * of /proc/PID/cgroup; and the worker-count advice on numbers taken from
 * the input (never above what fits).  The input is not NUL-terminated.
 */
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "machine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    int n = tm_machine_parse_cpulist(buf, size);
    if (n == 0 || n > (1 << 20))
        __builtin_trap();
    double c = 0;
    if (tm_machine_parse_cpumax(buf, size, &c) == 0 && !isnan(c) && !(c > 0))
        __builtin_trap();
    const char *nl = memchr(buf, '\n', size);
    size_t q = nl ? (size_t)(nl - buf) : size / 2;
    if (tm_machine_parse_cfs(buf, q, buf + q, size - q, &c) == 0 && !isnan(c) && !(c > 0))
        __builtin_trap();
    char path[16];
    int r = tm_machine_parse_v1_cpu_path(buf, size, path, sizeof path);
    if (r < 0 || strnlen(path, sizeof path) >= sizeof path || (r == 1 && !path[0]))
        __builtin_trap();
    if (size >= 4 * sizeof(double)) {
        double v[4];
        memcpy(v, data, sizeof v);
        char adv[256];
        bool capped;
        size_t ranks = (size_t)(data[0] % 9);
        double got = tm_machine_workers_advice(adv, sizeof adv, v[0], v[1], v[2], ranks,
                                               data[1] & 1, "why", &capped);
        double fit = tm_machine_workers_fit(v[2], ranks, false);
        if (capped && !(got <= fit))
            __builtin_trap();
        if (strnlen(adv, sizeof adv) >= sizeof adv)
            __builtin_trap();
    }
    return 0;
}
