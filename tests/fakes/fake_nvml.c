/*
 * fake_nvml.c - a stand-in for libnvidia-ml.so.1 with the same C ABI, so
 * that the tests exercise trainmon's real dlopen/dlsym path and every NVML
 * error code on machines without a GPU.  Values and failures are scripted.
 *
 * The script is read at the first nvmlInit (again after the last
 * nvmlShutdown) from the environment: FAKE_NVML holds it inline, or
 * FAKE_NVML_SCRIPT names a file holding it.  It is a list of key=value
 * items separated by ';' or newlines (values run to the separator, so names
 * may hold blanks):
 *
 *   init_err=9                  nvmlInit* returns this code
 *   devices=2                   number of GPUs (at most 8; default 1)
 *   proc_entry_size=32          _v3 process entries of drivers 535.43-535.86
 *   d0.name=NVIDIA H200         d0.uuid=GPU-...
 *   d0.mem=TOTAL,USED,FREE,RESERVED          bytes
 *   d0.util=GPU,MEM             d0.temp=C    d0.power_mw=MW
 *   d0.util_seq=G1,G2,...       GPU utilization of successive reads, in
 *                               turn (at most 16; a GPU that swings)
 *   d0.pcie_kbps=RX,TX          d0.sm_mhz=MHZ   d0.throttle=0x44
 *   d0.procs=PID:USED,PID:na    compute processes ("na": ULLONG_MAX)
 *   d0.pid_file=PATH            a compute process (1 GiB) whose pid is read
 *                               from PATH at each process query, once the
 *                               file holds one (a job that writes its own
 *                               pid there after it starts)
 *   d0.procs_grow=K             only K, 2K, 3K... processes are visible on
 *                               successive calls (processes starting while
 *                               the caller sizes its buffer)
 *   d0.putil=PID:TS:SM:MEM,...  process utilization samples (TS in us)
 *   d0.putil_fresh=1            every call yields one new sample per process
 *   d0.err.FIELD=CODE           FIELD: name uuid handle mem util temp power
 *                               pcie clock throttle procs putil, and memv2
 *                               (only nvmlDeviceGetMemoryInfo_v2)
 *   d0.lost_after=N             after N memory reads every call on the
 *                               device returns GPU_IS_LOST
 *
 * Variants built from this file lack symbols of newer drivers:
 * FAKE_NVML_LEGACY (only the unversioned calls of old drivers),
 * FAKE_NVML_NO_MEM_V2, FAKE_NVML_NO_PROCS_V3.
 *
 * Test hooks (not NVML): fake_nvml_calls(name) counts calls of an NVML
 * function since the script was loaded, fake_nvml_last_seen(dev) is the
 * lastSeenTimeStamp of the last process-utilization call,
 * fake_nvml_add_putil() adds a utilization sample, fake_nvml_refs() is the
 * init count.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct fake_dev *nvmlDevice_t;

enum {
    NV_SUCCESS = 0,
    NV_INVALID_ARGUMENT = 2,
    NV_NOT_FOUND = 6,
    NV_INSUFFICIENT_SIZE = 7,
    NV_ARGUMENT_VERSION_MISMATCH = 25,
    NV_GPU_IS_LOST = 15,
};

#define MAX_DEV 8
#define MAX_PROCS 256
#define MAX_PUTIL 512

enum {
    E_NAME,
    E_UUID,
    E_HANDLE,
    E_MEM,
    E_MEMV2,
    E_UTIL,
    E_TEMP,
    E_POWER,
    E_PCIE,
    E_CLOCK,
    E_THROTTLE,
    E_PROCS,
    E_PUTIL,
    E_N
};
static const char *const err_names[E_N] = {"name",     "uuid",  "handle", "mem",  "memv2",
                                           "util",     "temp",  "power",  "pcie", "clock",
                                           "throttle", "procs", "putil"};

struct putil {
    unsigned pid;
    unsigned long long ts;
    unsigned sm, mem;
};

struct fake_dev {
    char name[96], uuid[96];
    unsigned long long total, used, free, reserved;
    unsigned util_gpu, util_mem, temp, power_mw, rx_kbps, tx_kbps, sm_mhz;
    unsigned util_seq[16], nseq, iseq;
    unsigned long long throttle;
    unsigned nprocs, procs_grow, visible;
    char pid_file[256];
    unsigned pids[MAX_PROCS];
    unsigned long long proc_used[MAX_PROCS];
    unsigned nputil;
    struct putil putil[MAX_PUTIL];
    int putil_fresh;
    unsigned long long last_seen;
    int err[E_N];
    long lost_after; /* -1: never */
    long mem_reads;
};

static struct fake_dev devs[MAX_DEV];
static unsigned ndev;
static int init_err;
static unsigned proc_entry_size = 24;
static int refs;

#define MAX_COUNTERS 64
static struct {
    const char *name;
    unsigned n;
} counters[MAX_COUNTERS];

static void count_call(const char *name)
{
    for (int i = 0; i < MAX_COUNTERS; i++) {
        if (!counters[i].name)
            counters[i].name = name;
        if (counters[i].name == name || strcmp(counters[i].name, name) == 0) {
            counters[i].n++;
            return;
        }
    }
}

unsigned fake_nvml_calls(const char *name);
unsigned fake_nvml_calls(const char *name)
{
    for (int i = 0; i < MAX_COUNTERS && counters[i].name; i++)
        if (strcmp(counters[i].name, name) == 0)
            return counters[i].n;
    return 0;
}

unsigned long long fake_nvml_last_seen(unsigned dev);
unsigned long long fake_nvml_last_seen(unsigned dev)
{
    return dev < MAX_DEV ? devs[dev].last_seen : 0;
}

int fake_nvml_refs(void);
int fake_nvml_refs(void)
{
    return refs;
}

void fake_nvml_add_putil(unsigned dev, unsigned pid, unsigned long long ts, unsigned sm,
                         unsigned mem);
void fake_nvml_add_putil(unsigned dev, unsigned pid, unsigned long long ts, unsigned sm,
                         unsigned mem)
{
    if (dev >= MAX_DEV || devs[dev].nputil >= MAX_PUTIL)
        return;
    devs[dev].putil[devs[dev].nputil++] = (struct putil){pid, ts, sm, mem};
}

/* ------------------------------------------------------------ the script */

static unsigned long long num(const char *s, char **end)
{
    if (strncmp(s, "na", 2) == 0) {
        *end = (char *)s + 2;
        return ULLONG_MAX;
    }
    return strtoull(s, end, 0);
}

static void set_item(const char *key, const char *val)
{
    char *e;
    if (strcmp(key, "init_err") == 0) {
        init_err = (int)strtol(val, NULL, 0);
        return;
    }
    if (strcmp(key, "devices") == 0) {
        ndev = (unsigned)strtoul(val, NULL, 0);
        if (ndev > MAX_DEV)
            ndev = MAX_DEV;
        return;
    }
    if (strcmp(key, "proc_entry_size") == 0) {
        proc_entry_size = (unsigned)strtoul(val, NULL, 0);
        return;
    }
    if (key[0] != 'd' || key[1] < '0' || key[1] > '7' || key[2] != '.')
        return;
    struct fake_dev *d = &devs[key[1] - '0'];
    key += 3;
    if (strcmp(key, "name") == 0) {
        snprintf(d->name, sizeof d->name, "%s", val);
    } else if (strcmp(key, "uuid") == 0) {
        snprintf(d->uuid, sizeof d->uuid, "%s", val);
    } else if (strcmp(key, "mem") == 0) {
        d->total = num(val, &e);
        d->used = num(e + (*e == ','), &e);
        d->free = num(e + (*e == ','), &e);
        d->reserved = num(e + (*e == ','), &e);
    } else if (strcmp(key, "util") == 0) {
        d->util_gpu = (unsigned)strtoul(val, &e, 0);
        d->util_mem = (unsigned)strtoul(e + (*e == ','), NULL, 0);
    } else if (strcmp(key, "util_seq") == 0) {
        d->nseq = d->iseq = 0;
        for (const char *p = val; *p && d->nseq < 16; p = e + (*e == ',')) {
            d->util_seq[d->nseq++] = (unsigned)strtoul(p, &e, 0);
            if (e == p)
                break;
        }
    } else if (strcmp(key, "temp") == 0) {
        d->temp = (unsigned)strtoul(val, NULL, 0);
    } else if (strcmp(key, "power_mw") == 0) {
        d->power_mw = (unsigned)strtoul(val, NULL, 0);
    } else if (strcmp(key, "pcie_kbps") == 0) {
        d->rx_kbps = (unsigned)strtoul(val, &e, 0);
        d->tx_kbps = (unsigned)strtoul(e + (*e == ','), NULL, 0);
    } else if (strcmp(key, "sm_mhz") == 0) {
        d->sm_mhz = (unsigned)strtoul(val, NULL, 0);
    } else if (strcmp(key, "throttle") == 0) {
        d->throttle = strtoull(val, NULL, 0);
    } else if (strcmp(key, "procs") == 0) {
        d->nprocs = 0;
        const char *p = val;
        while (*p && d->nprocs < MAX_PROCS) {
            d->pids[d->nprocs] = (unsigned)strtoul(p, &e, 0);
            if (*e != ':')
                break;
            d->proc_used[d->nprocs++] = num(e + 1, &e);
            p = e + (*e == ',');
            if (p == e)
                break;
        }
    } else if (strcmp(key, "pid_file") == 0) {
        snprintf(d->pid_file, sizeof d->pid_file, "%s", val);
    } else if (strcmp(key, "procs_grow") == 0) {
        d->procs_grow = (unsigned)strtoul(val, NULL, 0);
    } else if (strcmp(key, "putil") == 0) {
        const char *p = val;
        while (*p && d->nputil < MAX_PUTIL) {
            struct putil u;
            u.pid = (unsigned)strtoul(p, &e, 0);
            u.ts = strtoull(e + 1, &e, 0);
            u.sm = (unsigned)strtoul(e + 1, &e, 0);
            u.mem = (unsigned)strtoul(e + 1, &e, 0);
            d->putil[d->nputil++] = u;
            if (*e != ',')
                break;
            p = e + 1;
        }
    } else if (strcmp(key, "putil_fresh") == 0) {
        d->putil_fresh = atoi(val);
    } else if (strcmp(key, "lost_after") == 0) {
        d->lost_after = strtol(val, NULL, 0);
    } else if (strncmp(key, "err.", 4) == 0) {
        for (int i = 0; i < E_N; i++)
            if (strcmp(key + 4, err_names[i]) == 0)
                d->err[i] = (int)strtol(val, NULL, 0);
    }
}

static void load_script(void)
{
    memset(devs, 0, sizeof devs);
    memset(counters, 0, sizeof counters);
    ndev = 1;
    init_err = 0;
    proc_entry_size = 24;
    for (unsigned i = 0; i < MAX_DEV; i++) {
        struct fake_dev *d = &devs[i];
        snprintf(d->name, sizeof d->name, "Fake GPU %u", i);
        snprintf(d->uuid, sizeof d->uuid, "GPU-fake-%u", i);
        d->total = 80ull << 30;
        d->used = 1ull << 30;
        d->free = d->total - d->used;
        d->reserved = 512ull << 20;
        d->util_gpu = 50;
        d->util_mem = 20;
        d->temp = 40;
        d->power_mw = 100000;
        d->sm_mhz = 1500;
        d->lost_after = -1;
    }
    static char text[65536];
    const char *s = getenv("FAKE_NVML");
    const char *file = getenv("FAKE_NVML_SCRIPT");
    if (file && *file) {
        FILE *f = fopen(file, "r");
        if (!f)
            return;
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        s = text;
    } else if (s) {
        snprintf(text, sizeof text, "%s", s);
        s = text;
    }
    if (!s)
        return;
    char *p = text;
    while (*p) {
        char *end = p + strcspn(p, ";\n");
        char sep = *end;
        *end = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        char *eq = strchr(p, '=');
        if (eq) {
            *eq = '\0';
            set_item(p, eq + 1);
        }
        if (!sep)
            break;
        p = end + 1;
    }
}

/* ------------------------------------------------------------------ NVML */

static nvmlReturn_t do_init(const char *fn)
{
    if (refs == 0)
        load_script();
    count_call(fn);
    if (init_err)
        return init_err;
    refs++;
    return NV_SUCCESS;
}

nvmlReturn_t nvmlInit(void)
{
    return do_init("nvmlInit");
}
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlInit_v2(void)
{
    return do_init("nvmlInit_v2");
}
#endif

nvmlReturn_t nvmlShutdown(void)
{
    count_call("nvmlShutdown");
    if (refs == 0)
        return 1; /* UNINITIALIZED */
    refs--;
    return NV_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t rc)
{
    switch (rc) {
    case 0:
        return "Success";
    case 3:
        return "Not Supported";
    case 4:
        return "Insufficient Permissions";
    case 9:
        return "Driver Not Loaded";
    case 15:
        return "GPU is lost";
    case 999:
        return "Unknown Error";
    default:
        return "Fake Error";
    }
}

static nvmlReturn_t get_count(const char *fn, unsigned *count)
{
    count_call(fn);
    if (!count)
        return NV_INVALID_ARGUMENT;
    *count = ndev;
    return NV_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned *count)
{
    return get_count("nvmlDeviceGetCount", count);
}
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count)
{
    return get_count("nvmlDeviceGetCount_v2", count);
}
#endif

static nvmlReturn_t get_handle(const char *fn, unsigned idx, nvmlDevice_t *dev)
{
    count_call(fn);
    if (idx >= ndev || !dev)
        return NV_INVALID_ARGUMENT;
    if (devs[idx].err[E_HANDLE])
        return devs[idx].err[E_HANDLE];
    *dev = &devs[idx];
    return NV_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned idx, nvmlDevice_t *dev)
{
    return get_handle("nvmlDeviceGetHandleByIndex", idx, dev);
}
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned idx, nvmlDevice_t *dev)
{
    return get_handle("nvmlDeviceGetHandleByIndex_v2", idx, dev);
}
#endif

static int is_lost(const struct fake_dev *d)
{
    return d->lost_after >= 0 && d->mem_reads > d->lost_after;
}

/* The common prologue: count the call, then a lost device or a scripted
 * error wins. */
#define FAKE_ENTER(fn, d, e)                                                                       \
    do {                                                                                           \
        count_call(fn);                                                                            \
        if (!(d))                                                                                  \
            return NV_INVALID_ARGUMENT;                                                            \
        if (is_lost(d))                                                                            \
            return NV_GPU_IS_LOST;                                                                 \
        if ((d)->err[e])                                                                           \
            return (d)->err[e];                                                                    \
    } while (0)

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned len)
{
    FAKE_ENTER("nvmlDeviceGetName", d, E_NAME);
    snprintf(buf, len, "%s", d->name);
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned len)
{
    FAKE_ENTER("nvmlDeviceGetUUID", d, E_UUID);
    snprintf(buf, len, "%s", d->uuid);
    return NV_SUCCESS;
}

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
    unsigned version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    if (d)
        d->mem_reads++;
    FAKE_ENTER("nvmlDeviceGetMemoryInfo", d, E_MEM);
    m->total = d->total;
    m->free = d->free;
    m->used = d->used;
    return NV_SUCCESS;
}

#if !defined(FAKE_NVML_LEGACY) && !defined(FAKE_NVML_NO_MEM_V2)
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
    if (d)
        d->mem_reads++;
    FAKE_ENTER("nvmlDeviceGetMemoryInfo_v2", d, E_MEM);
    if (d->err[E_MEMV2])
        return d->err[E_MEMV2];
    /* The real library checks the version word: sizeof | 2 << 24. */
    if (m->version != ((unsigned)sizeof(nvmlMemory_v2_t) | 2u << 24))
        return NV_ARGUMENT_VERSION_MISMATCH;
    m->total = d->total;
    m->reserved = d->reserved;
    m->free = d->free;
    m->used = d->used;
    return NV_SUCCESS;
}
#endif

typedef struct {
    unsigned gpu, memory;
} nvmlUtilization_t;

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    FAKE_ENTER("nvmlDeviceGetUtilizationRates", d, E_UTIL);
    u->gpu = d->nseq ? d->util_seq[d->iseq++ % d->nseq] : d->util_gpu;
    u->memory = d->util_mem;
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t)
{
    FAKE_ENTER("nvmlDeviceGetTemperature", d, E_TEMP);
    if (sensor != 0)
        return NV_INVALID_ARGUMENT;
    *t = d->temp;
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw)
{
    FAKE_ENTER("nvmlDeviceGetPowerUsage", d, E_POWER);
    *mw = d->power_mw;
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *kbps)
{
    FAKE_ENTER("nvmlDeviceGetPcieThroughput", d, E_PCIE);
    if (counter == 0)
        *kbps = d->tx_kbps;
    else if (counter == 1)
        *kbps = d->rx_kbps;
    else
        return NV_INVALID_ARGUMENT;
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz)
{
    FAKE_ENTER("nvmlDeviceGetClockInfo", d, E_CLOCK);
    if (type != 1) /* NVML_CLOCK_SM */
        return NV_INVALID_ARGUMENT;
    *mhz = d->sm_mhz;
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *mask)
{
    FAKE_ENTER("nvmlDeviceGetCurrentClocksThrottleReasons", d, E_THROTTLE);
    *mask = d->throttle;
    return NV_SUCCESS;
}
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *mask)
{
    FAKE_ENTER("nvmlDeviceGetCurrentClocksEventReasons", d, E_THROTTLE);
    *mask = d->throttle;
    return NV_SUCCESS;
}
#endif

/* Writes the visible processes as entries of `size` bytes: pid at 0,
 * usedGpuMemory at 8, then gpuInstanceId, computeInstanceId (0xFFFFFFFF
 * without MIG) and, in 32-byte entries, usedGpuCcProtectedMemory. */
static nvmlReturn_t get_procs(const char *fn, struct fake_dev *d, unsigned *count, void *buf,
                              unsigned size)
{
    FAKE_ENTER(fn, d, E_PROCS);
    if (!count)
        return NV_INVALID_ARGUMENT;
    if (d->pid_file[0] && d->nprocs == 0) {
        FILE *f = fopen(d->pid_file, "r");
        unsigned pid = 0;
        if (f) {
            if (fscanf(f, "%u", &pid) != 1)
                pid = 0;
            fclose(f);
        }
        if (pid) {
            d->pids[0] = pid;
            d->proc_used[0] = 1ULL << 30;
            d->nprocs = 1;
        }
    }
    unsigned n = d->nprocs;
    if (d->procs_grow) {
        d->visible += d->procs_grow;
        if (d->visible < n)
            n = d->visible;
    }
    if (*count < n || (!buf && n > 0)) {
        *count = n;
        return NV_INSUFFICIENT_SIZE;
    }
    *count = n;
    unsigned char *p = buf;
    for (unsigned i = 0; i < n; i++, p += size) {
        unsigned none = 0xFFFFFFFFu;
        unsigned long long cc = 0;
        memset(p, 0, size);
        memcpy(p, &d->pids[i], 4);
        memcpy(p + 8, &d->proc_used[i], 8);
        if (size >= 24) {
            memcpy(p + 16, &none, 4);
            memcpy(p + 20, &none, 4);
        }
        if (size >= 32)
            memcpy(p + 24, &cc, 8);
    }
    return NV_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d, unsigned *count, void *buf)
{
    return get_procs("nvmlDeviceGetComputeRunningProcesses", d, count, buf, 16);
}
#ifndef FAKE_NVML_LEGACY
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d, unsigned *count, void *buf)
{
    return get_procs("nvmlDeviceGetComputeRunningProcesses_v2", d, count, buf, 24);
}
#ifndef FAKE_NVML_NO_PROCS_V3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned *count, void *buf)
{
    return get_procs("nvmlDeviceGetComputeRunningProcesses_v3", d, count, buf, proc_entry_size);
}
#endif
#endif

typedef struct {
    unsigned pid;
    unsigned long long timeStamp;
    unsigned smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/* Samples newer than lastSeen only, as the driver does; NOT_FOUND when
 * there are none. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d, nvmlProcessUtilizationSample_t *buf,
                                             unsigned *count, unsigned long long last_seen)
{
    FAKE_ENTER("nvmlDeviceGetProcessUtilization", d, E_PUTIL);
    if (!count)
        return NV_INVALID_ARGUMENT;
    d->last_seen = last_seen;
    if (d->putil_fresh) {
        /* Forget what the caller has seen; when nothing is left, one new
         * sample per process after it (a busy GPU, for the benchmark). */
        unsigned k = 0;
        for (unsigned i = 0; i < d->nputil; i++)
            if (d->putil[i].ts > last_seen)
                d->putil[k++] = d->putil[i];
        d->nputil = k;
        for (unsigned i = 0; k == 0 && i < d->nprocs && d->nputil < MAX_PUTIL; i++)
            d->putil[d->nputil++] = (struct putil){d->pids[i], last_seen + 1 + i, 30 + i, 10};
    }
    unsigned n = 0;
    for (unsigned i = 0; i < d->nputil; i++)
        n += d->putil[i].ts > last_seen;
    if (n == 0) {
        *count = 0;
        return NV_NOT_FOUND;
    }
    if (!buf || *count < n) {
        *count = n;
        return NV_INSUFFICIENT_SIZE;
    }
    unsigned k = 0;
    for (unsigned i = 0; i < d->nputil; i++) {
        if (d->putil[i].ts <= last_seen)
            continue;
        buf[k++] = (nvmlProcessUtilizationSample_t){
            d->putil[i].pid, d->putil[i].ts, d->putil[i].sm, d->putil[i].mem, 0, 0};
    }
    *count = k;
    return NV_SUCCESS;
}
