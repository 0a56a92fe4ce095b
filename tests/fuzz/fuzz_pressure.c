/*
 * fuzz_pressure.c - libFuzzer target for the pressure and cgroup parsers:
 * pressure files, v2 io.stat, v1 blkio throttle files and /proc/PID/cgroup.
 * Every parser sees every input; the input is not NUL-terminated.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "psi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    tm_psi psi;
    if (tm_psi_parse(buf, size, &psi) == 0 && !psi.has_some)
        __builtin_trap();
    tm_cgio io;
    if (tm_cg_parse_iostat(buf, size, &io) < 0 || !io.valid)
        __builtin_trap();
    uint64_t rd, wr;
    if (tm_cg_parse_blkio(buf, size, &rd, &wr) < 0)
        __builtin_trap();
    /* Small buffers exercise the too-long-path branch. */
    char v2[16], blkio[16];
    int r = tm_cg_parse_proc_cgroup(buf, size, v2, sizeof v2, blkio, sizeof blkio);
    if (r < 0 || strnlen(v2, sizeof v2) >= sizeof v2 ||
        strnlen(blkio, sizeof blkio) >= sizeof blkio)
        __builtin_trap();
    if ((r & TM_CG_HAVE_V2) && v2[0] == '\0')
        __builtin_trap();
    return 0;
}
