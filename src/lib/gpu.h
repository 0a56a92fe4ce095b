/*
 * gpu.h - internal entry points of the GPU collector: the backend table
 * that vendor files (gpu_nvml.c) implement for gpu.c, and functions
 * exposed for unit tests and fuzzers.  Front-ends use tm_gpu_* from
 * include/trainmon.h.
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

/* ---------------------------------------------------------------- backends */

/*
 * A backend reads one vendor's GPUs through that vendor's library and
 * fills vendor-neutral tm_gpu_stats.  gpu.c owns the rest: the list of
 * GPUs and their indices (the backends' GPUs in table order, each
 * backend's in its own order), the warnings queue, lost GPUs (said once,
 * never sampled again), attribution to a process tree and recording.  A
 * new vendor is a new gpu_<vendor>.c defining one of these plus one line
 * in the table of gpu.c (docs/GPU.md, "Backends").
 *
 * The calls run on the sampling thread, one at a time; none may print
 * (problems go to tm_gpu_warn) or block for long.
 */
struct tm_gpu_backend {
    const char *name;   /* "nvml": the backend */
    const char *vendor; /* "NVIDIA": in "no usable NVIDIA GPU" */
    /* Loads the vendor's library and finds its GPUs.  Returns 0 with the
     * backend's context in *ctx, or a negative errno with one message for
     * the user (tm_seterr) and nothing left loaded: -ENOENT no library or
     * driver, -ENODEV no GPU, others as tm_gpu_open says.  g is for
     * tm_gpu_warn only; the context may keep it until close. */
    int (*open)(tm_gpu *g, void **ctx);
    /* How many GPUs open found (at least 1); the backend's own indices are
     * 0 .. count-1. */
    unsigned (*count)(void *ctx);
    /* Starts watching the backend's GPU idx (< count; the same one may be
     * asked twice).  s arrives zeroed but for s->index (trainmon's index,
     * which warnings name) and s->name ("GPU <index>"); the backend fills
     * name and uuid where it can, or sets s->lost for a GPU that is already
     * gone.  Returns a slot >= 0 for sample, or a negative errno with
     * tm_seterr("GPU <index>: why") when this GPU cannot be used. */
    int (*add)(void *ctx, unsigned idx, tm_gpu_stats *s);
    /* Samples the GPU of a slot into s, which gpu.c has reset (numbers NAN
     * or 0, valid == 0, no processes): sets each field it read and its
     * TM_GPU_HAVE_* bit.  s->procs may point to memory of the backend,
     * valid until the slot's next sample or close.  Sets s->lost when the
     * GPU fell off the bus; the slot is not sampled again.  Each new
     * problem is warned once (tm_gpu_warn), not printed. */
    void (*sample)(void *ctx, int slot, tm_gpu_stats *s);
    /* Unloads the library and frees the context. */
    void (*close)(void *ctx);
};

/* The backends that gpu.c's table lists. */
extern const struct tm_gpu_backend tm_gpu_nvml;

/* Queues a warning for tm_gpu_next_warning (at most 16, then a count of
 * the dropped ones).  For backends. */
void tm_gpu_warn(tm_gpu *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* tm_gpu_open with the given backends instead of gpu.c's table (which is
 * what tm_gpu_open passes): unit tests drive the vendor-neutral code with a
 * backend of their own through it.  backends[0 .. nbackends-1] must stay
 * valid until tm_gpu_close. */
int tm_gpu_open_with(tm_gpu **out, const struct tm_gpu_backend *const *backends, size_t nbackends,
                     const unsigned *indices, size_t n);

#endif /* TM_GPU_H */
