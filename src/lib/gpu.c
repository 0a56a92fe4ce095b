/*
 * gpu.c - NVIDIA GPUs through NVML, loaded at run time.
 *
 * NVML is dlopen()ed, never linked, so that trainmon builds and runs where
 * no GPU stack is installed; the few types needed are declared here from
 * NVML's documented ABI (REFERENCE.md s.5).  Each call is looked up once,
 * newest version first (nvmlDeviceGetMemoryInfo_v2 before the unversioned
 * call), and device handles are kept, so a sample costs only the NVML calls
 * themselves.
 *
 * Failures are kept apart by what they mean (docs/GPU.md):
 *   - NOT_SUPPORTED, FUNCTION_NOT_FOUND, a missing symbol: the field's bit
 *     stays clear and the field is not asked again on that GPU.
 *   - NO_PERMISSION: the same, with one warning.
 *   - GPU_IS_LOST: the GPU fell off the bus; one warning, the GPU is not
 *     asked again, the others are still sampled.
 *   - anything else: the bit is clear for this sample, one warning per
 *     field and GPU, and the field is asked again next time.
 * Warnings go to a small queue that the caller drains, so that a library
 * never prints.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "ptree.h"
#include "sysrec.h"
#include "util.h"

/* ------------------------------------------------------------ NVML's ABI */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
};

struct nv_mem_v1 {
    unsigned long long total, free, used;
};
struct nv_mem_v2 {
    unsigned version;
    unsigned long long total, reserved, free, used;
};
/* The version word NVML checks: the struct size and the version number in
 * the top byte, not a bare 2. */
#define NV_MEM_V2_VERSION ((unsigned)sizeof(struct nv_mem_v2) | 2u << 24)

struct nv_util {
    unsigned gpu, memory;
};
struct nv_putil {
    unsigned pid;
    unsigned long long ts; /* microseconds */
    unsigned sm, mem, enc, dec;
};

typedef nvmlReturn_t (*nv_void_fn)(void);
typedef const char *(*nv_errstr_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nv_count_fn)(unsigned *);
typedef nvmlReturn_t (*nv_handle_fn)(unsigned, nvmlDevice_t *);
typedef nvmlReturn_t (*nv_str_fn)(nvmlDevice_t, char *, unsigned);
typedef nvmlReturn_t (*nv_mem1_fn)(nvmlDevice_t, struct nv_mem_v1 *);
typedef nvmlReturn_t (*nv_mem2_fn)(nvmlDevice_t, struct nv_mem_v2 *);
typedef nvmlReturn_t (*nv_util_fn)(nvmlDevice_t, struct nv_util *);
typedef nvmlReturn_t (*nv_uint_fn)(nvmlDevice_t, unsigned *);
typedef nvmlReturn_t (*nv_int_uint_fn)(nvmlDevice_t, int, unsigned *);
typedef nvmlReturn_t (*nv_ull_fn)(nvmlDevice_t, unsigned long long *);
typedef nvmlReturn_t (*nv_procs_fn)(nvmlDevice_t, unsigned *, void *);
typedef nvmlReturn_t (*nv_putil_fn)(nvmlDevice_t, struct nv_putil *, unsigned *,
                                    unsigned long long);

struct nvml {
    void *dl;
    nv_void_fn init, shutdown;
    nv_errstr_fn error_string;
    nv_count_fn get_count;
    nv_handle_fn get_handle;
    nv_str_fn get_name, get_uuid;
    nv_mem2_fn mem_v2;
    nv_mem1_fn mem_v1;
    nv_util_fn util;
    nv_int_uint_fn temp, pcie, clock;
    nv_uint_fn power;
    nv_ull_fn throttle;
    nv_procs_fn procs;
    int procs_version; /* 3, 2 or 1: the entry layout differs (see gpu_read_procs) */
    nv_putil_fn putil;
};

/* ---------------------------------------------------------- the collector */

enum gpu_field {
    F_MEM,
    F_UTIL,
    F_TEMP,
    F_POWER,
    F_PCIE,
    F_CLOCK,
    F_THROTTLE,
    F_PROCS,
    F_PUTIL,
    F_N
};
static const char *const field_names[F_N] = {
    [F_MEM] = "memory",
    [F_UTIL] = "utilization",
    [F_TEMP] = "temperature",
    [F_POWER] = "power",
    [F_PCIE] = "PCIe throughput",
    [F_CLOCK] = "SM clock",
    [F_THROTTLE] = "throttle reasons",
    [F_PROCS] = "processes",
    [F_PUTIL] = "process utilization",
};

/* Process entries are at most 32 bytes (the 535.43-535.86 layout). */
#define GPU_PROC_ENTRY_MAX 32
#define GPU_PUTIL_MAX 4096
#define GPU_WARN_MAX 16
#define GPU_WARN_LEN 256

struct gpu_dev {
    unsigned index;
    nvmlDevice_t h;
    bool lost;
    bool mem_v1_only; /* _v2 refused (old driver in a new library): use the plain call */
    unsigned off;     /* fields not asked again: 1u << F_* */
    unsigned warned;  /* fields already warned about */
    unsigned long long putil_seen; /* lastSeenTimeStamp carried between samples */
    unsigned char *pbuf;           /* raw process entries, pcap * GPU_PROC_ENTRY_MAX bytes */
    unsigned pcap;
    tm_gpu_proc *procs;      /* pcap entries */
    unsigned long long *pts; /* pcap entries: time of the utilization sample used */
    struct nv_putil *ubuf;
    unsigned ucap;
};

struct tm_gpu {
    struct nvml nv;
    size_t n;
    struct gpu_dev *devs;
    tm_gpu_stats *stats;
    char warn[GPU_WARN_MAX][GPU_WARN_LEN];
    size_t whead, wcount, wdropped;
    char wcur[GPU_WARN_LEN];
};

static void gpu_warn(tm_gpu *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gpu_warn(tm_gpu *g, const char *fmt, ...)
{
    if (g->wcount == GPU_WARN_MAX) {
        g->wdropped++;
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->warn[(g->whead + g->wcount) % GPU_WARN_MAX], GPU_WARN_LEN, fmt, ap);
    va_end(ap);
    g->wcount++;
}

const char *tm_gpu_next_warning(tm_gpu *g)
{
    if (!g)
        return NULL;
    if (g->wcount > 0) {
        memcpy(g->wcur, g->warn[g->whead], GPU_WARN_LEN);
        g->whead = (g->whead + 1) % GPU_WARN_MAX;
        g->wcount--;
        return g->wcur;
    }
    if (g->wdropped > 0) {
        snprintf(g->wcur, sizeof g->wcur, "%zu more GPU warnings were dropped", g->wdropped);
        g->wdropped = 0;
        return g->wcur;
    }
    return NULL;
}

static const char *gpu_errstr(const tm_gpu *g, nvmlReturn_t rc)
{
    const char *s = g->nv.error_string ? g->nv.error_string(rc) : NULL;
    return s ? s : "unknown NVML error";
}

/* The first of the names that the library exports. */
static void *gpu_sym(void *dl, const char *const *names)
{
    for (; *names; names++) {
        void *p = dlsym(dl, *names);
        if (p)
            return p;
    }
    return NULL;
}

#define GPU_SYM(field, type, ...)                                                                  \
    (nv->field = (type)gpu_sym(nv->dl, (const char *const[]){__VA_ARGS__, NULL}))

static void gpu_resolve(struct nvml *nv)
{
    GPU_SYM(init, nv_void_fn, "nvmlInit_v2", "nvmlInit");
    GPU_SYM(shutdown, nv_void_fn, "nvmlShutdown");
    GPU_SYM(error_string, nv_errstr_fn, "nvmlErrorString");
    GPU_SYM(get_count, nv_count_fn, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    GPU_SYM(get_handle, nv_handle_fn, "nvmlDeviceGetHandleByIndex_v2",
            "nvmlDeviceGetHandleByIndex");
    GPU_SYM(get_name, nv_str_fn, "nvmlDeviceGetName");
    GPU_SYM(get_uuid, nv_str_fn, "nvmlDeviceGetUUID");
    GPU_SYM(mem_v2, nv_mem2_fn, "nvmlDeviceGetMemoryInfo_v2");
    GPU_SYM(mem_v1, nv_mem1_fn, "nvmlDeviceGetMemoryInfo");
    GPU_SYM(util, nv_util_fn, "nvmlDeviceGetUtilizationRates");
    GPU_SYM(temp, nv_int_uint_fn, "nvmlDeviceGetTemperature");
    GPU_SYM(power, nv_uint_fn, "nvmlDeviceGetPowerUsage");
    GPU_SYM(pcie, nv_int_uint_fn, "nvmlDeviceGetPcieThroughput");
    GPU_SYM(clock, nv_int_uint_fn, "nvmlDeviceGetClockInfo");
    /* Renamed in CUDA 12.2's NVML ("clocks event reasons"); same ABI. */
    GPU_SYM(throttle, nv_ull_fn, "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons");
    GPU_SYM(putil, nv_putil_fn, "nvmlDeviceGetProcessUtilization");
    static const char *const procs[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                        "nvmlDeviceGetComputeRunningProcesses_v2",
                                        "nvmlDeviceGetComputeRunningProcesses"};
    for (int i = 0; i < 3 && !nv->procs; i++) {
        nv->procs = (nv_procs_fn)dlsym(nv->dl, procs[i]);
        nv->procs_version = 3 - i;
    }
}

/* Handles a return code of a per-field call; true when the value was read. */
static bool gpu_ok(tm_gpu *g, struct gpu_dev *d, const tm_gpu_stats *s, enum gpu_field f,
                   nvmlReturn_t rc)
{
    unsigned bit = 1u << f;
    switch (rc) {
    case NVML_SUCCESS:
        return true;
    case NVML_ERROR_GPU_IS_LOST:
        d->lost = true;
        gpu_warn(g, "GPU %u (%s) is lost (fallen off the bus): its metrics stop", d->index,
                 s->uuid);
        return false;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        d->off |= bit;
        return false;
    case NVML_ERROR_NO_PERMISSION:
        d->off |= bit;
        gpu_warn(g, "GPU %u (%s): %s: no permission to read it (NVML): left out", d->index, s->uuid,
                 field_names[f]);
        return false;
    default:
        if (!(d->warned & bit)) {
            d->warned |= bit;
            gpu_warn(g, "GPU %u (%s): %s: %s", d->index, s->uuid, field_names[f],
                     gpu_errstr(g, rc));
        }
        return false;
    }
}

/* Whether a field is to be asked: its function exists, the GPU is there
 * and the field has not been turned off. */
static bool gpu_ask(const struct gpu_dev *d, enum gpu_field f, const void *fn)
{
    return fn && !d->lost && !(d->off & (1u << f));
}

static void gpu_read_mem(tm_gpu *g, struct gpu_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &g->nv;
    if (nv->mem_v2 && !d->mem_v1_only) {
        struct nv_mem_v2 m = {.version = NV_MEM_V2_VERSION};
        nvmlReturn_t rc = nv->mem_v2(d->h, &m);
        if (rc == NVML_SUCCESS) {
            s->mem_total = m.total;
            s->mem_used = m.used;
            s->mem_free = m.free;
            s->mem_reserved = m.reserved;
            s->valid |= TM_GPU_HAVE_MEM | TM_GPU_HAVE_MEM_RESERVED;
            return;
        }
        /* A library newer than the driver may export _v2 and refuse it:
         * fall back to the plain call for good. */
        if (!(rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND ||
              rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH) ||
            !nv->mem_v1) {
            gpu_ok(g, d, s, F_MEM, rc);
            return;
        }
        d->mem_v1_only = true;
    }
    if (!nv->mem_v1) {
        d->off |= 1u << F_MEM;
        return;
    }
    struct nv_mem_v1 m;
    if (gpu_ok(g, d, s, F_MEM, nv->mem_v1(d->h, &m))) {
        s->mem_total = m.total;
        s->mem_used = m.used;
        s->mem_free = m.free;
        s->valid |= TM_GPU_HAVE_MEM;
    }
}

static int gpu_grow_procs(struct gpu_dev *d, unsigned need)
{
    if (need > TM_GPU_MAX_PROCS)
        return -E2BIG;
    unsigned cap = need + need / 2 + 4;
    if (cap > TM_GPU_MAX_PROCS)
        cap = TM_GPU_MAX_PROCS;
    unsigned char *pb = realloc(d->pbuf, (size_t)cap * GPU_PROC_ENTRY_MAX);
    if (!pb)
        return -ENOMEM;
    d->pbuf = pb;
    tm_gpu_proc *pr = realloc(d->procs, (size_t)cap * sizeof *pr);
    if (!pr)
        return -ENOMEM;
    d->procs = pr;
    unsigned long long *ts = realloc(d->pts, (size_t)cap * sizeof *ts);
    if (!ts)
        return -ENOMEM;
    d->pts = ts;
    d->pcap = cap;
    return 0;
}

/* The size of the process entries the library wrote.  _v2/_v3 entries are
 * 24 bytes, but the _v3 call of drivers 535.43-535.86 wrote 32 (with
 * usedGpuCcProtectedMemory at the end), so it is measured, not assumed: the
 * buffer is filled with a pattern before the call and holds 32 bytes per
 * entry; with 24-byte entries the bytes [24n, 32n) stay untouched, with
 * 32-byte ones they hold the last entry's final field. */
#define GPU_FILL 0xA5
static size_t gpu_entry_size(const struct gpu_dev *d, int version, unsigned n)
{
    if (version == 1)
        return 16; /* nvmlProcessInfo_v1_t: pid, usedGpuMemory */
    if (n == 0)
        return 24;
    for (size_t i = (size_t)24 * n; i < (size_t)32 * n; i++)
        if (d->pbuf[i] != GPU_FILL)
            return 32;
    return 24;
}

static void gpu_read_procs(tm_gpu *g, struct gpu_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &g->nv;
    /* The buffer of the previous sample is offered first; a count of 0 and
     * no buffer asks for the size.  Processes may start between the calls,
     * so INSUFFICIENT_SIZE grows the buffer and retries, a bounded number of
     * times. */
    for (int attempt = 0; attempt < 5; attempt++) {
        unsigned n = d->pcap;
        if (d->pbuf)
            memset(d->pbuf, GPU_FILL, (size_t)d->pcap * GPU_PROC_ENTRY_MAX);
        nvmlReturn_t rc = nv->procs(d->h, &n, d->pcap ? d->pbuf : NULL);
        if (rc == NVML_ERROR_INSUFFICIENT_SIZE || (rc == NVML_SUCCESS && d->pcap == 0 && n > 0)) {
            int err = gpu_grow_procs(d, n > d->pcap ? n : d->pcap + 1);
            if (err < 0) {
                if (!(d->warned & (1u << F_PROCS))) {
                    d->warned |= 1u << F_PROCS;
                    gpu_warn(g, "GPU %u (%s): processes: %s", d->index, s->uuid,
                             err == -E2BIG ? "more than the collector's cap" : strerror(-err));
                }
                return;
            }
            continue;
        }
        if (!gpu_ok(g, d, s, F_PROCS, rc))
            return;
        if (n > d->pcap) /* a library that says SUCCESS with more than it could write */
            n = d->pcap;
        size_t esz = gpu_entry_size(d, nv->procs_version, n);
        for (unsigned i = 0; i < n; i++) {
            const unsigned char *e = d->pbuf + (size_t)i * esz;
            unsigned pid;
            unsigned long long used;
            memcpy(&pid, e, sizeof pid);
            memcpy(&used, e + 8, sizeof used);
            tm_gpu_proc *p = &d->procs[i];
            p->pid = (pid_t)pid;
            /* ULLONG_MAX: NVML_VALUE_NOT_AVAILABLE (e.g. under WDDM, some vGPUs). */
            p->mem_valid = used != ULLONG_MAX;
            p->used_bytes = p->mem_valid ? (uint64_t)used : 0;
            p->sm_util = NAN;
            p->mem_util = NAN;
        }
        s->nprocs = n;
        s->procs = d->procs;
        s->valid |= TM_GPU_HAVE_PROCS;
        return;
    }
    if (!(d->warned & (1u << F_PROCS))) {
        d->warned |= 1u << F_PROCS;
        gpu_warn(g, "GPU %u (%s): processes: the list kept growing while it was read", d->index,
                 s->uuid);
    }
}

/* Per-process utilization: the driver keeps a history of samples and
 * returns those newer than lastSeenTimeStamp, which is carried between
 * samples so that each is seen once; the newest sample of a pid wins. */
static void gpu_read_putil(tm_gpu *g, struct gpu_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &g->nv;
    for (int attempt = 0; attempt < 5; attempt++) {
        unsigned n = d->ucap;
        nvmlReturn_t rc = nv->putil(d->h, d->ucap ? d->ubuf : NULL, &n, d->putil_seen);
        if (rc == NVML_ERROR_NOT_FOUND) { /* no sample since the last one */
            s->valid |= TM_GPU_HAVE_PROC_UTIL;
            return;
        }
        if (rc == NVML_ERROR_INSUFFICIENT_SIZE || (rc == NVML_SUCCESS && d->ucap == 0)) {
            if (n == 0) {
                s->valid |= TM_GPU_HAVE_PROC_UTIL;
                return;
            }
            unsigned cap = n <= d->ucap ? d->ucap + 16 : n + n / 2 + 4;
            if (cap > GPU_PUTIL_MAX)
                cap = GPU_PUTIL_MAX;
            if (cap <= d->ucap)
                return;
            struct nv_putil *b = realloc(d->ubuf, (size_t)cap * sizeof *b);
            if (!b)
                return;
            d->ubuf = b;
            d->ucap = cap;
            continue;
        }
        if (!gpu_ok(g, d, s, F_PUTIL, rc))
            return;
        if (n > d->ucap)
            n = d->ucap;
        unsigned long long seen = d->putil_seen;
        for (size_t k = 0; k < s->nprocs; k++)
            d->pts[k] = 0;
        for (unsigned i = 0; i < n; i++) {
            const struct nv_putil *u = &d->ubuf[i];
            if (u->ts > seen)
                seen = u->ts;
            if (u->sm > 100 || u->mem > 100) /* garbage seen on some drivers */
                continue;
            for (size_t k = 0; k < s->nprocs; k++) {
                tm_gpu_proc *p = &d->procs[k];
                if ((unsigned)p->pid != u->pid || u->ts < d->pts[k])
                    continue;
                d->pts[k] = u->ts;
                p->sm_util = u->sm;
                p->mem_util = u->mem;
            }
        }
        d->putil_seen = seen;
        s->valid |= TM_GPU_HAVE_PROC_UTIL;
        return;
    }
}

static void gpu_sample_dev(tm_gpu *g, struct gpu_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &g->nv;
    s->valid = 0;
    s->mem_total = s->mem_used = s->mem_free = s->mem_reserved = 0;
    s->util_gpu = s->util_mem = s->temp_c = s->power_w = NAN;
    s->pcie_rx_bytes_s = s->pcie_tx_bytes_s = s->sm_clock_mhz = NAN;
    s->throttle_reasons = 0;
    s->nprocs = 0;
    s->procs = NULL;

    if (gpu_ask(d, F_MEM, nv->mem_v2 ? (const void *)nv->mem_v2 : (const void *)nv->mem_v1))
        gpu_read_mem(g, d, s);
    if (gpu_ask(d, F_UTIL, (const void *)nv->util)) {
        struct nv_util u;
        if (gpu_ok(g, d, s, F_UTIL, nv->util(d->h, &u))) {
            s->util_gpu = u.gpu;
            s->util_mem = u.memory;
            s->valid |= TM_GPU_HAVE_UTIL;
        }
    }
    unsigned v, v2;
    if (gpu_ask(d, F_TEMP, (const void *)nv->temp) &&
        gpu_ok(g, d, s, F_TEMP, nv->temp(d->h, 0 /* NVML_TEMPERATURE_GPU */, &v))) {
        s->temp_c = v;
        s->valid |= TM_GPU_HAVE_TEMP;
    }
    if (gpu_ask(d, F_POWER, (const void *)nv->power) &&
        gpu_ok(g, d, s, F_POWER, nv->power(d->h, &v))) {
        s->power_w = v / 1000.0; /* milliwatts */
        s->valid |= TM_GPU_HAVE_POWER;
    }
    /* Counters 0 = TX, 1 = RX, in KB/s (1024 bytes). */
    if (gpu_ask(d, F_PCIE, (const void *)nv->pcie) &&
        gpu_ok(g, d, s, F_PCIE, nv->pcie(d->h, 0, &v)) &&
        gpu_ok(g, d, s, F_PCIE, nv->pcie(d->h, 1, &v2))) {
        s->pcie_tx_bytes_s = v * 1024.0;
        s->pcie_rx_bytes_s = v2 * 1024.0;
        s->valid |= TM_GPU_HAVE_PCIE;
    }
    if (gpu_ask(d, F_CLOCK, (const void *)nv->clock) &&
        gpu_ok(g, d, s, F_CLOCK, nv->clock(d->h, 1 /* NVML_CLOCK_SM */, &v))) {
        s->sm_clock_mhz = v;
        s->valid |= TM_GPU_HAVE_CLOCK;
    }
    unsigned long long mask;
    if (gpu_ask(d, F_THROTTLE, (const void *)nv->throttle) &&
        gpu_ok(g, d, s, F_THROTTLE, nv->throttle(d->h, &mask))) {
        s->throttle_reasons = mask;
        s->valid |= TM_GPU_HAVE_THROTTLE;
    }
    if (gpu_ask(d, F_PROCS, (const void *)nv->procs))
        gpu_read_procs(g, d, s);
    if (s->nprocs > 0 && gpu_ask(d, F_PUTIL, (const void *)nv->putil))
        gpu_read_putil(g, d, s);

    if (d->lost) {
        s->lost = true;
        s->valid = 0;
        s->nprocs = 0;
        s->procs = NULL;
    }
}

int tm_gpu_sample(tm_gpu *g, const tm_gpu_stats **gpus, size_t *n)
{
    if (!g || !gpus || !n)
        return tm_seterr(-EINVAL, "tm_gpu_sample: NULL argument");
    for (size_t i = 0; i < g->n; i++) {
        struct gpu_dev *d = &g->devs[i];
        tm_gpu_stats *s = &g->stats[i];
        if (d->lost) {
            s->lost = true;
            s->valid = 0;
            s->nprocs = 0;
            s->procs = NULL;
            continue;
        }
        gpu_sample_dev(g, d, s);
    }
    *gpus = g->stats;
    *n = g->n;
    return 0;
}

/* ------------------------------------------------------------ open/close */

static void gpu_free(tm_gpu *g)
{
    if (!g)
        return;
    for (size_t i = 0; g->devs && i < g->n; i++) {
        free(g->devs[i].pbuf);
        free(g->devs[i].procs);
        free(g->devs[i].pts);
        free(g->devs[i].ubuf);
    }
    free(g->devs);
    free(g->stats);
    free(g);
}

static int gpu_add_dev(tm_gpu *g, unsigned idx, bool all)
{
    const struct nvml *nv = &g->nv;
    struct gpu_dev *d = &g->devs[g->n];
    tm_gpu_stats *s = &g->stats[g->n];
    memset(d, 0, sizeof *d);
    memset(s, 0, sizeof *s);
    d->index = s->index = idx;
    snprintf(s->name, sizeof s->name, "GPU %u", idx);
    nvmlReturn_t rc = nv->get_handle(idx, &d->h);
    if (rc == NVML_ERROR_GPU_IS_LOST) {
        d->lost = s->lost = true;
        gpu_warn(g, "GPU %u is lost (fallen off the bus): its metrics stop", idx);
        g->n++;
        return 0;
    }
    if (rc != NVML_SUCCESS) {
        if (!all)
            return tm_seterr(rc == NVML_ERROR_NO_PERMISSION ? -EACCES : -EIO, "GPU %u: %s", idx,
                             gpu_errstr(g, rc));
        /* Enumerating: a GPU this process may not use (a container's
         * device cgroup) is skipped, the others are kept. */
        gpu_warn(g, "GPU %u: %s: left out", idx, gpu_errstr(g, rc));
        return 0;
    }
    /* NVML's buffers for these are 96 bytes (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
     * NVML_DEVICE_UUID_V2_BUFFER_SIZE). */
    if (nv->get_name) {
        char buf[96];
        if (nv->get_name(d->h, buf, sizeof buf) == NVML_SUCCESS)
            tm_strlcpy(s->name, buf, sizeof s->name);
    }
    if (nv->get_uuid) {
        char buf[96];
        if (nv->get_uuid(d->h, buf, sizeof buf) == NVML_SUCCESS)
            tm_strlcpy(s->uuid, buf, sizeof s->uuid);
    }
    g->n++;
    return 0;
}

int tm_gpu_open(tm_gpu **out, const unsigned *indices, size_t n)
{
    if (!out)
        return tm_seterr(-EINVAL, "tm_gpu_open: NULL argument");
    *out = NULL;
    tm_gpu *g = calloc(1, sizeof *g);
    if (!g)
        return tm_seterr(-ENOMEM, "GPU collector: %s", strerror(ENOMEM));
    int rc = 0;
    bool inited = false;
    const char *lib = getenv("TRAINMON_NVML_LIB");
    if (!lib || !*lib)
        lib = "libnvidia-ml.so.1";
    g->nv.dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!g->nv.dl) {
        rc = tm_seterr(-ENOENT, "no NVIDIA driver found: GPU metrics off");
        goto out;
    }
    gpu_resolve(&g->nv);
    if (!g->nv.init || !g->nv.get_count || !g->nv.get_handle) {
        rc = tm_seterr(-ENOSYS,
                       "%s: not a usable NVML library (nvmlInit, nvmlDeviceGetCount "
                       "or nvmlDeviceGetHandleByIndex missing): GPU metrics off",
                       lib);
        goto out;
    }
    nvmlReturn_t nrc = g->nv.init();
    if (nrc != NVML_SUCCESS) {
        if (nrc == NVML_ERROR_DRIVER_NOT_LOADED || nrc == NVML_ERROR_LIBRARY_NOT_FOUND)
            rc = tm_seterr(-ENOENT, "no NVIDIA driver found: GPU metrics off");
        else
            rc = tm_seterr(nrc == NVML_ERROR_NO_PERMISSION ? -EACCES : -EIO,
                           "NVML: %s: GPU metrics off", gpu_errstr(g, nrc));
        goto out;
    }
    inited = true;
    unsigned count = 0;
    nrc = g->nv.get_count(&count);
    if (nrc != NVML_SUCCESS) {
        rc = tm_seterr(-EIO, "NVML: %s: GPU metrics off", gpu_errstr(g, nrc));
        goto out;
    }
    if (count == 0) {
        rc = tm_seterr(-ENODEV, "no NVIDIA GPU found: GPU metrics off");
        goto out;
    }
    bool all = indices == NULL || n == 0;
    size_t want = all ? count : n;
    g->devs = calloc(want, sizeof *g->devs);
    g->stats = calloc(want, sizeof *g->stats);
    if (!g->devs || !g->stats) {
        rc = tm_seterr(-ENOMEM, "GPU collector: %s", strerror(ENOMEM));
        goto out;
    }
    for (size_t i = 0; i < want; i++) {
        unsigned idx = all ? (unsigned)i : indices[i];
        if (idx >= count) {
            rc = tm_seterr(-ENODEV, "GPU %u: no such GPU (%u found)", idx, count);
            goto out;
        }
        rc = gpu_add_dev(g, idx, all);
        if (rc < 0)
            goto out;
    }
    if (g->n == 0) {
        rc = tm_seterr(-ENODEV, "no usable NVIDIA GPU: GPU metrics off");
        goto out;
    }
    *out = g;
    return 0;
out:
    if (inited && g->nv.shutdown)
        g->nv.shutdown();
    if (g->nv.dl)
        dlclose(g->nv.dl);
    gpu_free(g);
    return rc;
}

void tm_gpu_close(tm_gpu **gp)
{
    if (!gp || !*gp)
        return;
    tm_gpu *g = *gp;
    if (g->nv.shutdown)
        g->nv.shutdown();
    dlclose(g->nv.dl);
    gpu_free(g);
    *gp = NULL;
}

/* ------------------------------------------------------------------ names */

size_t tm_gpu_throttle_names(uint64_t reasons, const char **names, size_t cap)
{
    static const char *const bits[] = {"gpu_idle",
                                       "applications_clocks_setting",
                                       "sw_power_cap",
                                       "hw_slowdown",
                                       "sync_boost",
                                       "sw_thermal_slowdown",
                                       "hw_thermal_slowdown",
                                       "hw_power_brake",
                                       "display_clocks_setting"};
    size_t k = 0;
    for (size_t i = 0; i < TM_ARRAY_LEN(bits); i++) {
        if (!(reasons & (1ull << i)))
            continue;
        if (names && k < cap)
            names[k] = bits[i];
        k++;
    }
    return k;
}

/* ------------------------------------------------------------ attribution */

int tm_gpu_parse_nspid(const char *buf, size_t len, pid_t *out, size_t cap)
{
    if (!buf || !out)
        return -EINVAL;
    const char *end = buf + len;
    const char *p = buf;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > 6 && memcmp(p, "NSpid:", 6) == 0) {
            const char *q = p + 6;
            size_t k = 0;
            uint64_t v;
            while (k < cap && tm_parse_u64(&q, le, &v) == 0) {
                if (v == 0 || v > INT_MAX)
                    return -EINVAL;
                out[k++] = (pid_t)v;
            }
            return k > 0 ? (int)k : -EINVAL;
        }
        p = le + 1;
    }
    return -ENOENT;
}

static const tm_procinfo *gpu_tree_find(const tm_ptree_stats *tree, pid_t pid)
{
    for (size_t i = 0; i < tree->nproc; i++)
        if (tree->procs[i].pid == pid)
            return &tree->procs[i];
    return NULL;
}

/* Where a GPU pid stands against a tree. */
enum gpu_membership { GPU_IN_TREE, GPU_NOT_IN_TREE, GPU_PID_INVISIBLE };

static enum gpu_membership gpu_membership(pid_t gpu_pid, const tm_ptree_stats *tree)
{
    if (gpu_tree_find(tree, gpu_pid))
        return GPU_IN_TREE;
    /* NVML reports pids of the host's namespace.  When the tree is known by
     * the pids of an inner (container) namespace, the GPU process's NSpid
     * line (its pid in each namespace from the proc root's down) maps it.
     * An inner pid can equal an unrelated pid of another namespace, so the
     * start time must agree too when the tree knows it. */
    char path[256], buf[16384]; /* status grows with Groups and CPU lists */
    if (tm_proc_path(path, sizeof path, "/%d/status", (int)gpu_pid) < 0)
        return GPU_NOT_IN_TREE;
    ssize_t len = tm_read_file(path, buf, sizeof buf);
    if (len == -ENOENT || len == -ESRCH)
        return GPU_PID_INVISIBLE;
    if (len < 0)
        return GPU_NOT_IN_TREE;
    pid_t ns[16];
    int k = tm_gpu_parse_nspid(buf, (size_t)len, ns, TM_ARRAY_LEN(ns));
    for (int i = 1; i < k; i++) {
        const tm_procinfo *p = gpu_tree_find(tree, ns[i]);
        if (!p)
            continue;
        if (!(p->valid & TM_PROC_HAVE_STAT) || p->starttime == 0)
            return GPU_IN_TREE;
        if (tm_proc_path(path, sizeof path, "/%d/stat", (int)gpu_pid) < 0)
            break;
        len = tm_read_file(path, buf, sizeof buf);
        tm_procinfo info = {0};
        if (len >= 0 && tm_parse_proc_stat(buf, (size_t)len, &info, NULL) == 0 &&
            info.starttime == p->starttime)
            return GPU_IN_TREE;
    }
    return GPU_NOT_IN_TREE;
}

bool tm_gpu_pid_in_tree(pid_t gpu_pid, const tm_ptree_stats *tree)
{
    if (!tree || !tree->procs || gpu_pid <= 0)
        return false;
    return gpu_membership(gpu_pid, tree) == GPU_IN_TREE;
}

double tm_gpu_tree_memory(const tm_gpu_stats *gpus, size_t n, const tm_ptree_stats *tree)
{
    if (!gpus || !tree || !tree->procs)
        return NAN;
    bool have_procs = false, matched = false, invisible = false;
    double sum = 0;
    size_t nvalid = 0;
    for (size_t i = 0; i < n; i++) {
        const tm_gpu_stats *s = &gpus[i];
        if (!(s->valid & TM_GPU_HAVE_PROCS))
            continue;
        have_procs = true;
        for (size_t j = 0; j < s->nprocs; j++) {
            const tm_gpu_proc *p = &s->procs[j];
            enum gpu_membership m = gpu_membership(p->pid, tree);
            if (m == GPU_PID_INVISIBLE)
                invisible = true;
            if (m != GPU_IN_TREE)
                continue;
            matched = true;
            if (p->mem_valid) {
                sum += (double)p->used_bytes;
                nvalid++;
            }
        }
    }
    if (!have_procs)
        return NAN;
    if (matched)
        return nvalid > 0 ? sum : NAN;
    /* Nothing matched: 0 only if every GPU process could be looked at. */
    return invisible ? NAN : 0.0;
}

/* -------------------------------------------------------------- recording */

int tm_sysrec_gpu(tm_rec *w, int64_t t_ns, const tm_gpu_stats *g, size_t n)
{
    if (!w || (!g && n))
        return tm_seterr(-EINVAL, "tm_sysrec_gpu: NULL argument");
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    for (size_t i = 0; i < n; i++) {
        const tm_gpu_stats *s = &g[i];
        if (s->lost)
            continue;
        char labels[160];
        snprintf(labels, sizeof labels, "gpu=%u,uuid=%s", s->index, s->uuid);
        bool mem = s->valid & TM_GPU_HAVE_MEM;
        const struct tm_sysrec_val vals[] = {
            {"gpu.memory_used_bytes", "B", mem ? (double)s->mem_used : NAN},
            {"gpu.memory_total_bytes", "B", mem ? (double)s->mem_total : NAN},
            {"gpu.memory_free_bytes", "B", mem ? (double)s->mem_free : NAN},
            {"gpu.memory_reserved_bytes", "B",
             s->valid & TM_GPU_HAVE_MEM_RESERVED ? (double)s->mem_reserved : NAN},
            {"gpu.utilization", "ratio", s->valid & TM_GPU_HAVE_UTIL ? s->util_gpu / 100.0 : NAN},
            {"gpu.memory_utilization", "ratio",
             s->valid & TM_GPU_HAVE_UTIL ? s->util_mem / 100.0 : NAN},
            {"gpu.temperature_celsius", "C", s->valid & TM_GPU_HAVE_TEMP ? s->temp_c : NAN},
            {"gpu.power_watts", "W", s->valid & TM_GPU_HAVE_POWER ? s->power_w : NAN},
            {"gpu.pcie_rx_bytes_per_second", "B/s",
             s->valid & TM_GPU_HAVE_PCIE ? s->pcie_rx_bytes_s : NAN},
            {"gpu.pcie_tx_bytes_per_second", "B/s",
             s->valid & TM_GPU_HAVE_PCIE ? s->pcie_tx_bytes_s : NAN},
            {"gpu.sm_clock_hertz", "Hz",
             s->valid & TM_GPU_HAVE_CLOCK ? s->sm_clock_mhz * 1e6 : NAN},
            {"gpu.throttle_reasons", "",
             s->valid & TM_GPU_HAVE_THROTTLE ? (double)s->throttle_reasons : NAN},
        };
        int rc = tm_sysrec_put(w, t_ns, labels, vals, TM_ARRAY_LEN(vals));
        if (rc < 0)
            return rc;
        for (size_t j = 0; (s->valid & TM_GPU_HAVE_PROCS) && j < s->nprocs; j++) {
            const tm_gpu_proc *p = &s->procs[j];
            snprintf(labels, sizeof labels, "gpu=%u,pid=%d", s->index, (int)p->pid);
            const struct tm_sysrec_val pv[] = {
                {"gpu.process_memory_bytes", "B", p->mem_valid ? (double)p->used_bytes : NAN},
                {"gpu.process_sm_utilization", "ratio", p->sm_util / 100.0},
            };
            rc = tm_sysrec_put(w, t_ns, labels, pv, TM_ARRAY_LEN(pv));
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}
