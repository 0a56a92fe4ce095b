/*
 * gpu_nvml.c - the NVML backend of the GPU collector: NVIDIA GPUs through
 * libnvidia-ml, loaded at run time (struct tm_gpu_backend, gpu.h).
 *
 * NVML is dlopen()ed, never linked, so that trainmon builds and runs where
 * no GPU stack is installed; the few types needed are declared here from
 * NVML's documented ABI (docs/GPU.md).  Each call is looked up once, newest
 * version first (nvmlDeviceGetMemoryInfo_v2 before the unversioned call),
 * and device handles are kept, so a sample costs only the NVML calls
 * themselves.  TRAINMON_NVML_LIB names another library file (the tests
 * load a fake NVML through it).
 *
 * Failures are kept apart by what they mean (docs/GPU.md):
 *   - NOT_SUPPORTED, FUNCTION_NOT_FOUND, a missing symbol: the field's bit
 *     stays clear and the field is not asked again on that GPU.
 *   - NO_PERMISSION: the same, with one warning.
 *   - GPU_IS_LOST: the GPU fell off the bus; its stats say lost, which
 *     gpu.c warns about once and stops sampling it.
 *   - anything else: the bit is clear for this sample, one warning per
 *     field and GPU, and the field is asked again next time.
 * Everything vendor-neutral (the list of GPUs, the warnings queue,
 * attribution to a process tree, recording) is in gpu.c.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
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

/* nvml.h's clocks-event ("throttle") reason bits, mapped one by one onto
 * trainmon's TM_GPU_THROTTLE_*.  The values agree today, but the public
 * mask is trainmon's: a bit a later NVML adds is left out until it is
 * mapped here, rather than passed on with a meaning no reader knows. */
static const struct {
    unsigned long long nv;
    uint64_t tm;
} nv_throttle_map[] = {
    {0x1ull, TM_GPU_THROTTLE_GPU_IDLE},         {0x2ull, TM_GPU_THROTTLE_APPLICATIONS_CLOCKS},
    {0x4ull, TM_GPU_THROTTLE_SW_POWER_CAP},     {0x8ull, TM_GPU_THROTTLE_HW_SLOWDOWN},
    {0x10ull, TM_GPU_THROTTLE_SYNC_BOOST},      {0x20ull, TM_GPU_THROTTLE_SW_THERMAL},
    {0x40ull, TM_GPU_THROTTLE_HW_THERMAL},      {0x80ull, TM_GPU_THROTTLE_HW_POWER_BRAKE},
    {0x100ull, TM_GPU_THROTTLE_DISPLAY_CLOCKS},
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
    int procs_version; /* 3, 2 or 1: the entry layout differs (see nv_read_procs) */
    nv_putil_fn putil;
};

/* ------------------------------------------------------------ the backend */

enum nv_field {
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
#define NV_PROC_ENTRY_MAX 32
#define NV_PUTIL_MAX 4096

struct nv_dev {
    unsigned index; /* trainmon's index of the GPU, which warnings name */
    nvmlDevice_t h;
    bool lost;
    bool mem_v1_only; /* _v2 refused (old driver in a new library): use the plain call */
    unsigned off;     /* fields not asked again: 1u << F_* */
    unsigned warned;  /* fields already warned about */
    unsigned long long putil_seen; /* lastSeenTimeStamp carried between samples */
    unsigned char *pbuf;           /* raw process entries, pcap * NV_PROC_ENTRY_MAX bytes */
    unsigned pcap;
    tm_gpu_proc *procs;      /* pcap entries */
    unsigned long long *pts; /* pcap entries: time of the utilization sample used */
    struct nv_putil *ubuf;
    unsigned ucap;
};

struct nv_ctx {
    struct nvml nv;
    tm_gpu *g; /* for tm_gpu_warn */
    unsigned count;
    struct nv_dev *devs; /* slots handed out by nv_add, ndev of cap */
    size_t ndev, cap;
};

static const char *nv_errstr(const struct nv_ctx *c, nvmlReturn_t rc)
{
    const char *s = c->nv.error_string ? c->nv.error_string(rc) : NULL;
    return s ? s : "unknown NVML error";
}

/* The first of the names that the library exports. */
static void *nv_sym(void *dl, const char *const *names)
{
    for (; *names; names++) {
        void *p = dlsym(dl, *names);
        if (p)
            return p;
    }
    return NULL;
}

#define NV_SYM(field, type, ...)                                                                   \
    (nv->field = (type)nv_sym(nv->dl, (const char *const[]){__VA_ARGS__, NULL}))

static void nv_resolve(struct nvml *nv)
{
    NV_SYM(init, nv_void_fn, "nvmlInit_v2", "nvmlInit");
    NV_SYM(shutdown, nv_void_fn, "nvmlShutdown");
    NV_SYM(error_string, nv_errstr_fn, "nvmlErrorString");
    NV_SYM(get_count, nv_count_fn, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    NV_SYM(get_handle, nv_handle_fn, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    NV_SYM(get_name, nv_str_fn, "nvmlDeviceGetName");
    NV_SYM(get_uuid, nv_str_fn, "nvmlDeviceGetUUID");
    NV_SYM(mem_v2, nv_mem2_fn, "nvmlDeviceGetMemoryInfo_v2");
    NV_SYM(mem_v1, nv_mem1_fn, "nvmlDeviceGetMemoryInfo");
    NV_SYM(util, nv_util_fn, "nvmlDeviceGetUtilizationRates");
    NV_SYM(temp, nv_int_uint_fn, "nvmlDeviceGetTemperature");
    NV_SYM(power, nv_uint_fn, "nvmlDeviceGetPowerUsage");
    NV_SYM(pcie, nv_int_uint_fn, "nvmlDeviceGetPcieThroughput");
    NV_SYM(clock, nv_int_uint_fn, "nvmlDeviceGetClockInfo");
    /* Renamed in CUDA 12.2's NVML ("clocks event reasons"); same ABI. */
    NV_SYM(throttle, nv_ull_fn, "nvmlDeviceGetCurrentClocksEventReasons",
           "nvmlDeviceGetCurrentClocksThrottleReasons");
    NV_SYM(putil, nv_putil_fn, "nvmlDeviceGetProcessUtilization");
    static const char *const procs[] = {"nvmlDeviceGetComputeRunningProcesses_v3",
                                        "nvmlDeviceGetComputeRunningProcesses_v2",
                                        "nvmlDeviceGetComputeRunningProcesses"};
    for (int i = 0; i < 3 && !nv->procs; i++) {
        nv->procs = (nv_procs_fn)dlsym(nv->dl, procs[i]);
        nv->procs_version = 3 - i;
    }
}

/* Handles a return code of a per-field call; true when the value was read.
 * GPU_IS_LOST only marks the GPU: gpu.c says it once for every backend. */
static bool nv_ok(struct nv_ctx *c, struct nv_dev *d, const tm_gpu_stats *s, enum nv_field f,
                  nvmlReturn_t rc)
{
    unsigned bit = 1u << f;
    switch (rc) {
    case NVML_SUCCESS:
        return true;
    case NVML_ERROR_GPU_IS_LOST:
        d->lost = true;
        return false;
    case NVML_ERROR_NOT_SUPPORTED:
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        d->off |= bit;
        return false;
    case NVML_ERROR_NO_PERMISSION:
        d->off |= bit;
        tm_gpu_warn(c->g, "GPU %u (%s): %s: no permission to read it (NVML): left out", d->index,
                    s->uuid, field_names[f]);
        return false;
    default:
        if (!(d->warned & bit)) {
            d->warned |= bit;
            tm_gpu_warn(c->g, "GPU %u (%s): %s: %s", d->index, s->uuid, field_names[f],
                        nv_errstr(c, rc));
        }
        return false;
    }
}

/* Whether a field is to be asked: its function exists, the GPU is there
 * and the field has not been turned off. */
static bool nv_ask(const struct nv_dev *d, enum nv_field f, const void *fn)
{
    return fn && !d->lost && !(d->off & (1u << f));
}

static void nv_read_mem(struct nv_ctx *c, struct nv_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &c->nv;
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
            nv_ok(c, d, s, F_MEM, rc);
            return;
        }
        d->mem_v1_only = true;
    }
    if (!nv->mem_v1) {
        d->off |= 1u << F_MEM;
        return;
    }
    struct nv_mem_v1 m;
    if (nv_ok(c, d, s, F_MEM, nv->mem_v1(d->h, &m))) {
        s->mem_total = m.total;
        s->mem_used = m.used;
        s->mem_free = m.free;
        s->valid |= TM_GPU_HAVE_MEM;
    }
}

static int nv_grow_procs(struct nv_dev *d, unsigned need)
{
    if (need > TM_GPU_MAX_PROCS)
        return -E2BIG;
    unsigned cap = need + need / 2 + 4;
    if (cap > TM_GPU_MAX_PROCS)
        cap = TM_GPU_MAX_PROCS;
    unsigned char *pb = realloc(d->pbuf, (size_t)cap * NV_PROC_ENTRY_MAX);
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
#define NV_FILL 0xA5
static size_t nv_entry_size(const struct nv_dev *d, int version, unsigned n)
{
    if (version == 1)
        return 16; /* nvmlProcessInfo_v1_t: pid, usedGpuMemory */
    if (n == 0)
        return 24;
    for (size_t i = (size_t)24 * n; i < (size_t)32 * n; i++)
        if (d->pbuf[i] != NV_FILL)
            return 32;
    return 24;
}

static void nv_read_procs(struct nv_ctx *c, struct nv_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &c->nv;
    /* The buffer of the previous sample is offered first; a count of 0 and
     * no buffer asks for the size.  Processes may start between the calls,
     * so INSUFFICIENT_SIZE grows the buffer and retries, a bounded number of
     * times. */
    for (int attempt = 0; attempt < 5; attempt++) {
        unsigned n = d->pcap;
        if (d->pbuf)
            memset(d->pbuf, NV_FILL, (size_t)d->pcap * NV_PROC_ENTRY_MAX);
        nvmlReturn_t rc = nv->procs(d->h, &n, d->pcap ? d->pbuf : NULL);
        if (rc == NVML_ERROR_INSUFFICIENT_SIZE || (rc == NVML_SUCCESS && d->pcap == 0 && n > 0)) {
            int err = nv_grow_procs(d, n > d->pcap ? n : d->pcap + 1);
            if (err < 0) {
                if (!(d->warned & (1u << F_PROCS))) {
                    d->warned |= 1u << F_PROCS;
                    tm_gpu_warn(c->g, "GPU %u (%s): processes: %s", d->index, s->uuid,
                                err == -E2BIG ? "more than the collector's cap" : strerror(-err));
                }
                return;
            }
            continue;
        }
        if (!nv_ok(c, d, s, F_PROCS, rc))
            return;
        if (n > d->pcap) /* a library that says SUCCESS with more than it could write */
            n = d->pcap;
        size_t esz = nv_entry_size(d, nv->procs_version, n);
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
        tm_gpu_warn(c->g, "GPU %u (%s): processes: the list kept growing while it was read",
                    d->index, s->uuid);
    }
}

/* Per-process utilization: the driver keeps a history of samples and
 * returns those newer than lastSeenTimeStamp, which is carried between
 * samples so that each is seen once; the newest sample of a pid wins. */
static void nv_read_putil(struct nv_ctx *c, struct nv_dev *d, tm_gpu_stats *s)
{
    const struct nvml *nv = &c->nv;
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
            if (cap > NV_PUTIL_MAX)
                cap = NV_PUTIL_MAX;
            if (cap <= d->ucap)
                return;
            struct nv_putil *b = realloc(d->ubuf, (size_t)cap * sizeof *b);
            if (!b)
                return;
            d->ubuf = b;
            d->ucap = cap;
            continue;
        }
        if (!nv_ok(c, d, s, F_PUTIL, rc))
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

static uint64_t nv_throttle_to_tm(unsigned long long mask)
{
    uint64_t out = 0;
    for (size_t i = 0; i < TM_ARRAY_LEN(nv_throttle_map); i++)
        if (mask & nv_throttle_map[i].nv)
            out |= nv_throttle_map[i].tm;
    return out;
}

/* s comes reset by gpu.c: every value unavailable, valid == 0. */
static void nv_sample(void *ctx, int slot, tm_gpu_stats *s)
{
    struct nv_ctx *c = ctx;
    struct nv_dev *d = &c->devs[slot];
    const struct nvml *nv = &c->nv;

    if (nv_ask(d, F_MEM, nv->mem_v2 ? (const void *)nv->mem_v2 : (const void *)nv->mem_v1))
        nv_read_mem(c, d, s);
    if (nv_ask(d, F_UTIL, (const void *)nv->util)) {
        struct nv_util u;
        if (nv_ok(c, d, s, F_UTIL, nv->util(d->h, &u))) {
            s->util_gpu = u.gpu;
            s->util_mem = u.memory;
            s->valid |= TM_GPU_HAVE_UTIL;
        }
    }
    unsigned v, v2;
    if (nv_ask(d, F_TEMP, (const void *)nv->temp) &&
        nv_ok(c, d, s, F_TEMP, nv->temp(d->h, 0 /* NVML_TEMPERATURE_GPU */, &v))) {
        s->temp_c = v;
        s->valid |= TM_GPU_HAVE_TEMP;
    }
    if (nv_ask(d, F_POWER, (const void *)nv->power) &&
        nv_ok(c, d, s, F_POWER, nv->power(d->h, &v))) {
        s->power_w = v / 1000.0; /* milliwatts */
        s->valid |= TM_GPU_HAVE_POWER;
    }
    /* Counters 0 = TX, 1 = RX, in KB/s (1024 bytes). */
    if (nv_ask(d, F_PCIE, (const void *)nv->pcie) &&
        nv_ok(c, d, s, F_PCIE, nv->pcie(d->h, 0, &v)) &&
        nv_ok(c, d, s, F_PCIE, nv->pcie(d->h, 1, &v2))) {
        s->pcie_tx_bytes_s = v * 1024.0;
        s->pcie_rx_bytes_s = v2 * 1024.0;
        s->valid |= TM_GPU_HAVE_PCIE;
    }
    if (nv_ask(d, F_CLOCK, (const void *)nv->clock) &&
        nv_ok(c, d, s, F_CLOCK, nv->clock(d->h, 1 /* NVML_CLOCK_SM */, &v))) {
        s->sm_clock_mhz = v;
        s->valid |= TM_GPU_HAVE_CLOCK;
    }
    unsigned long long mask;
    if (nv_ask(d, F_THROTTLE, (const void *)nv->throttle) &&
        nv_ok(c, d, s, F_THROTTLE, nv->throttle(d->h, &mask))) {
        s->throttle_reasons = nv_throttle_to_tm(mask);
        s->valid |= TM_GPU_HAVE_THROTTLE;
    }
    if (nv_ask(d, F_PROCS, (const void *)nv->procs))
        nv_read_procs(c, d, s);
    if (s->nprocs > 0 && nv_ask(d, F_PUTIL, (const void *)nv->putil))
        nv_read_putil(c, d, s);

    if (d->lost)
        s->lost = true;
}

/* ------------------------------------------------------------ open/close */

static void nv_free(struct nv_ctx *c)
{
    for (size_t i = 0; i < c->ndev; i++) {
        free(c->devs[i].pbuf);
        free(c->devs[i].procs);
        free(c->devs[i].pts);
        free(c->devs[i].ubuf);
    }
    free(c->devs);
    free(c);
}

static int nv_open(tm_gpu *g, void **ctx)
{
    *ctx = NULL;
    struct nv_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return tm_seterr(-ENOMEM, "GPU collector: %s", strerror(ENOMEM));
    c->g = g;
    int rc = 0;
    bool inited = false;
    const char *lib = getenv("TRAINMON_NVML_LIB");
    if (!lib || !*lib)
        lib = "libnvidia-ml.so.1";
    c->nv.dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!c->nv.dl) {
        rc = tm_seterr(-ENOENT, "no NVIDIA driver found: GPU metrics off");
        goto out;
    }
    nv_resolve(&c->nv);
    if (!c->nv.init || !c->nv.get_count || !c->nv.get_handle) {
        rc = tm_seterr(-ENOSYS,
                       "%s: not a usable NVML library (nvmlInit, nvmlDeviceGetCount "
                       "or nvmlDeviceGetHandleByIndex missing): GPU metrics off",
                       lib);
        goto out;
    }
    nvmlReturn_t nrc = c->nv.init();
    if (nrc != NVML_SUCCESS) {
        if (nrc == NVML_ERROR_DRIVER_NOT_LOADED || nrc == NVML_ERROR_LIBRARY_NOT_FOUND)
            rc = tm_seterr(-ENOENT, "no NVIDIA driver found: GPU metrics off");
        else
            rc = tm_seterr(nrc == NVML_ERROR_NO_PERMISSION ? -EACCES : -EIO,
                           "NVML: %s: GPU metrics off", nv_errstr(c, nrc));
        goto out;
    }
    inited = true;
    nrc = c->nv.get_count(&c->count);
    if (nrc != NVML_SUCCESS) {
        rc = tm_seterr(-EIO, "NVML: %s: GPU metrics off", nv_errstr(c, nrc));
        goto out;
    }
    if (c->count == 0) {
        rc = tm_seterr(-ENODEV, "no NVIDIA GPU found: GPU metrics off");
        goto out;
    }
    *ctx = c;
    return 0;
out:
    if (inited && c->nv.shutdown)
        c->nv.shutdown();
    if (c->nv.dl)
        dlclose(c->nv.dl);
    nv_free(c);
    return rc;
}

static unsigned nv_count(void *ctx)
{
    return ((const struct nv_ctx *)ctx)->count;
}

static int nv_add(void *ctx, unsigned idx, tm_gpu_stats *s)
{
    struct nv_ctx *c = ctx;
    if (c->ndev == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : c->count;
        struct nv_dev *nd = realloc(c->devs, cap * sizeof *nd);
        if (!nd)
            return tm_seterr(-ENOMEM, "GPU collector: %s", strerror(ENOMEM));
        c->devs = nd;
        c->cap = cap;
    }
    struct nv_dev *d = &c->devs[c->ndev];
    memset(d, 0, sizeof *d);
    d->index = s->index;
    nvmlReturn_t rc = c->nv.get_handle(idx, &d->h);
    if (rc == NVML_ERROR_GPU_IS_LOST) {
        d->lost = s->lost = true;
        return (int)c->ndev++;
    }
    if (rc != NVML_SUCCESS)
        return tm_seterr(rc == NVML_ERROR_NO_PERMISSION ? -EACCES : -EIO, "GPU %u: %s", s->index,
                         nv_errstr(c, rc));
    /* NVML's buffers for these are 96 bytes (NVML_DEVICE_NAME_V2_BUFFER_SIZE,
     * NVML_DEVICE_UUID_V2_BUFFER_SIZE). */
    if (c->nv.get_name) {
        char buf[96];
        if (c->nv.get_name(d->h, buf, sizeof buf) == NVML_SUCCESS)
            tm_strlcpy(s->name, buf, sizeof s->name);
    }
    if (c->nv.get_uuid) {
        char buf[96];
        if (c->nv.get_uuid(d->h, buf, sizeof buf) == NVML_SUCCESS)
            tm_strlcpy(s->uuid, buf, sizeof s->uuid);
    }
    return (int)c->ndev++;
}

/* Shuts NVML down (it is reference-counted) and unloads it. */
static void nv_close(void *ctx)
{
    struct nv_ctx *c = ctx;
    if (c->nv.shutdown)
        c->nv.shutdown();
    dlclose(c->nv.dl);
    nv_free(c);
}

const struct tm_gpu_backend tm_gpu_nvml = {
    .name = "nvml",
    .vendor = "NVIDIA",
    .open = nv_open,
    .count = nv_count,
    .add = nv_add,
    .sample = nv_sample,
    .close = nv_close,
};
