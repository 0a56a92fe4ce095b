/*
 * psi.h - internal entry points of the pressure/cgroup collector: parsers
 * of cgroup files, exposed for unit tests and fuzzers.  Front-ends use
 * tm_psi_* and tm_pressure_* from include/trainmon.h.
 *
 * Every parser takes a buffer and its length; the buffer need not be
 * NUL-terminated and may hold any bytes.
 */
#ifndef TM_PSI_H
#define TM_PSI_H

#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

/* cgroup v2 io.stat ("8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0"
 * per device): sums rbytes, wbytes, rios, wios over the devices into out
 * and sets out->valid.  Unknown keys are ignored; an empty file (no I/O in
 * the cgroup yet) is valid and all zero.  Returns the number of device
 * lines taken, or -EINVAL for a NULL argument. */
int tm_cg_parse_iostat(const char *buf, size_t len, tm_cgio *out);

/* cgroup v1 blkio.throttle.io_service_bytes or .io_serviced ("8:0 Read N",
 * "8:0 Write N", ... "Total N"): sums the Read and Write lines over the
 * devices.  Returns the number of device lines taken (0 for a file that has
 * only "Total 0"), or -EINVAL for a NULL argument. */
int tm_cg_parse_blkio(const char *buf, size_t len, uint64_t *read, uint64_t *write);

enum {
    TM_CG_HAVE_V2 = 1 << 0,    /* a "0::/path" line */
    TM_CG_HAVE_BLKIO = 1 << 1, /* a v1 line whose controllers include blkio */
};

/* /proc/PID/cgroup ("hierarchy-id:controllers:path" lines): copies the v2
 * path and the v1 blkio path (each "" when absent) and returns the
 * TM_CG_HAVE_* bits found, or -EINVAL for a NULL argument.  A path too long
 * for its buffer is left out. */
int tm_cg_parse_proc_cgroup(const char *buf, size_t len, char *v2, size_t v2_cap, char *blkio,
                            size_t blkio_cap);

#endif /* TM_PSI_H */
