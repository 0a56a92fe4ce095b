/*
 * gpu.h - internal entry points of the GPU collector (gpu.c), exposed for
 * unit tests and fuzzers.  Front-ends use tm_gpu_* from include/trainmon.h.
 */
#ifndef TM_GPU_H
#define TM_GPU_H

#include <stddef.h>
#include <sys/types.h>

#include "trainmon.h"

/* The most compute processes read per GPU and sample.  More than this is
 * reported once as a warning and the GPU's process list is left out. */
#define TM_GPU_MAX_PROCS 4096

/* The "NSpid:" line of a /proc/PID/status text: the process's pid in each
 * pid namespace from the proc mount's down to its own.  Stores up to cap
 * pids and returns how many, -ENOENT without the line (kernels before 4.1),
 * -EINVAL when it is malformed. */
int tm_gpu_parse_nspid(const char *buf, size_t len, pid_t *out, size_t cap);

#endif /* TM_GPU_H */
