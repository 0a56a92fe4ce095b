/*
 * prom.c - the Prometheus text exposition of `trainmon serve`.
 *
 * Everything the exporter says is written here, so that the front-end only
 * collects and serves.  The format is the text format 0.0.4: for each
 * family one "# HELP" and one "# TYPE" line, then all its samples together
 * (the format requires a family's samples to be contiguous, so writers loop
 * over families outside and devices inside).  Values are in base units;
 * counters end in _total.  docs/METRICS.md is the reference for every
 * family and its node_exporter equivalent.
 *
 * Numbers: 64-bit counters are printed as integers so that they survive
 * exactly; millisecond counters become seconds with three decimals printed
 * from the integer (no binary rounding); other values use %.15g.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"
#include "stops.h"
#include "util.h"

struct tm_text {
    tm_buf b;
    int rc; /* sticky: the first failed append since the last reset */
};

tm_text *tm_text_new(size_t cap)
{
    tm_text *t = calloc(1, sizeof *t);
    if (t)
        tm_buf_init(&t->b, cap);
    return t;
}

const char *tm_text_data(const tm_text *t, size_t *len)
{
    if (len)
        *len = t->b.len;
    return t->b.data ? t->b.data : "";
}

int tm_text_error(const tm_text *t)
{
    return t->rc;
}

void tm_text_truncate(tm_text *t, size_t len)
{
    if (len < t->b.len) {
        t->b.len = len;
        t->b.data[len] = '\0';
    }
}

void tm_text_reset(tm_text *t)
{
    tm_buf_reset(&t->b);
    t->rc = 0;
}

void tm_text_free(tm_text **t)
{
    if (!t || !*t)
        return;
    tm_buf_free(&(*t)->b);
    free(*t);
    *t = NULL;
}

void tm_text_add(tm_text *t, const char *s, size_t len)
{
    if (t->rc)
        return;
    t->rc = tm_buf_add(&t->b, s, len);
}

void tm_text_puts(tm_text *t, const char *s)
{
    tm_text_add(t, s, strlen(s));
}

void tm_text_printf(tm_text *t, const char *fmt, ...)
{
    if (t->rc)
        return;
    va_list ap;
    va_start(ap, fmt);
    t->rc = tm_buf_vprintf(&t->b, fmt, ap);
    va_end(ap);
}

void tm_text_json_str(tm_text *t, const char *s)
{
    tm_text_add(t, "\"", 1);
    if (!t->rc)
        t->rc = tm_buf_json_str(&t->b, s, strlen(s));
    tm_text_add(t, "\"", 1);
}

static int text_put(void *ctx, const char *p, size_t n)
{
    tm_text_add(ctx, p, n);
    return 0; /* the error is sticky in the text */
}

void tm_text_esc(tm_text *t, tm_esc how, const char *s, size_t len)
{
    tm_escape(how, s, len, text_put, t);
}

int tm_prom_escape(tm_text *t, const char *s)
{
    /* Label values are UTF-8 in the exposition format; a comm name or a
     * run directory's name may not be. */
    tm_text_esc(t, TM_ESC_PROM, s, strlen(s));
    return t->rc;
}

static void tx_family(tm_text *t, const char *name, const char *type, const char *help)
{
    tm_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Prints a value the way the format reads it: integers exactly, NaN and
 * infinities by their names (callers leave NaN out before this). */
static void tx_value(tm_text *t, double v)
{
    if (isnan(v))
        tm_text_puts(t, "NaN");
    else if (isinf(v))
        tm_text_puts(t, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        tm_text_printf(t, "%.0f", v);
    else
        tm_text_printf(t, "%.15g", v);
}

/* --- disks */

/* Per device: the last raw line and the 64-bit sums of the 32-bit ms
 * fields, in the order of tm_prom_disk_ms. */
enum { MS_RD, MS_WR, MS_IO, MS_WEIGHTED, MS_DC, MS_FL, MS_N };

struct tm_prom_disk {
    tm_diskstat last;
    uint64_t ms[MS_N];
};

struct tm_prom_disks {
    struct tm_prom_disk *dev, *next;
    size_t n, alloc;
};

#define PROM_MAX_DISKS 4096

int tm_prom_disks_new(tm_prom_disks **out)
{
    if (!out)
        return tm_seterr(-EINVAL, "tm_prom_disks_new: NULL argument");
    *out = calloc(1, sizeof **out);
    if (!*out)
        return tm_seterr(-ENOMEM, "prom: out of memory");
    return 0;
}

void tm_prom_disks_free(tm_prom_disks **d)
{
    if (!d || !*d)
        return;
    free((*d)->dev);
    free((*d)->next);
    free(*d);
    *d = NULL;
}

static void prom_ms_of(const tm_diskstat *s, uint32_t ms[MS_N])
{
    ms[MS_RD] = s->rd_ms;
    ms[MS_WR] = s->wr_ms;
    ms[MS_IO] = s->io_ms;
    ms[MS_WEIGHTED] = s->weighted_ms;
    ms[MS_DC] = s->dc_ms;
    ms[MS_FL] = s->fl_ms;
}

/* A device is the same one when its name and numbers agree and none of its
 * 64-bit counters went down; otherwise it was replaced and starts over. */
static bool prom_same_device(const tm_diskstat *a, const tm_diskstat *b)
{
    return a->major == b->major && a->minor == b->minor && strcmp(a->name, b->name) == 0 &&
           b->rd_ios >= a->rd_ios && b->wr_ios >= a->wr_ios && b->rd_sec >= a->rd_sec &&
           b->wr_sec >= a->wr_sec && b->rd_merges >= a->rd_merges && b->wr_merges >= a->wr_merges &&
           b->dc_ios >= a->dc_ios && b->fl_ios >= a->fl_ios && b->nfields == a->nfields;
}

int tm_prom_disks_update(tm_prom_disks *d, const tm_diskstat *raw, size_t n)
{
    if (!d || (!raw && n))
        return tm_seterr(-EINVAL, "tm_prom_disks_update: NULL argument");
    if (n > PROM_MAX_DISKS)
        n = PROM_MAX_DISKS;
    if (n > d->alloc) {
        struct tm_prom_disk *a = realloc(d->dev, n * sizeof *a);
        if (!a)
            return tm_seterr(-ENOMEM, "prom: out of memory");
        d->dev = a;
        struct tm_prom_disk *b = realloc(d->next, n * sizeof *b);
        if (!b)
            return tm_seterr(-ENOMEM, "prom: out of memory");
        d->next = b;
        d->alloc = n;
    }
    for (size_t i = 0; i < n; i++) {
        struct tm_prom_disk *nd = &d->next[i];
        uint32_t cur[MS_N];
        prom_ms_of(&raw[i], cur);
        const struct tm_prom_disk *old = NULL;
        /* Devices keep their order in /proc/diskstats: try the same slot
         * first, then search. */
        if (i < d->n && strcmp(d->dev[i].last.name, raw[i].name) == 0)
            old = &d->dev[i];
        for (size_t j = 0; !old && j < d->n; j++)
            if (strcmp(d->dev[j].last.name, raw[i].name) == 0)
                old = &d->dev[j];
        if (old && prom_same_device(&old->last, &raw[i])) {
            uint32_t prev[MS_N];
            prom_ms_of(&old->last, prev);
            for (int k = 0; k < MS_N; k++)
                nd->ms[k] = old->ms[k] + (uint32_t)(cur[k] - prev[k]);
        } else {
            for (int k = 0; k < MS_N; k++)
                nd->ms[k] = cur[k];
        }
        nd->last = raw[i];
    }
    struct tm_prom_disk *tmp = d->dev;
    d->dev = d->next;
    d->next = tmp;
    d->n = n;
    return 0;
}

/* One family over all devices: a u64 counter picked by offset, or a
 * millisecond sum printed as seconds. */
enum prom_disk_kind { DK_U64, DK_SECTORS, DK_MS, DK_INFLIGHT };

struct prom_disk_family {
    const char *name, *type, *help;
    enum prom_disk_kind kind;
    size_t off; /* of a uint64_t in tm_diskstat, or the MS_ index */
    int min_fields;
};

#define DS_OFF(f) offsetof(tm_diskstat, f)

static const struct prom_disk_family prom_disk_families[] = {
    {"trainmon_disk_reads_completed_total", "counter",
     "The total number of reads completed successfully.", DK_U64, DS_OFF(rd_ios), 14},
    {"trainmon_disk_reads_merged_total", "counter", "The total number of reads merged.", DK_U64,
     DS_OFF(rd_merges), 14},
    {"trainmon_disk_read_bytes_total", "counter", "The total number of bytes read successfully.",
     DK_SECTORS, DS_OFF(rd_sec), 14},
    {"trainmon_disk_read_time_seconds_total", "counter",
     "The total number of seconds spent by all reads.", DK_MS, MS_RD, 14},
    {"trainmon_disk_writes_completed_total", "counter",
     "The total number of writes completed successfully.", DK_U64, DS_OFF(wr_ios), 14},
    {"trainmon_disk_writes_merged_total", "counter", "The number of writes merged.", DK_U64,
     DS_OFF(wr_merges), 14},
    {"trainmon_disk_written_bytes_total", "counter",
     "The total number of bytes written successfully.", DK_SECTORS, DS_OFF(wr_sec), 14},
    {"trainmon_disk_write_time_seconds_total", "counter",
     "This is the total number of seconds spent by all writes.", DK_MS, MS_WR, 14},
    {"trainmon_disk_io_now", "gauge", "The number of I/Os currently in progress.", DK_INFLIGHT, 0,
     14},
    {"trainmon_disk_io_time_seconds_total", "counter", "Total seconds spent doing I/Os.", DK_MS,
     MS_IO, 14},
    {"trainmon_disk_io_time_weighted_seconds_total", "counter",
     "The weighted number of seconds spent doing I/Os.", DK_MS, MS_WEIGHTED, 14},
    {"trainmon_disk_discards_completed_total", "counter",
     "The total number of discards completed successfully.", DK_U64, DS_OFF(dc_ios), 18},
    {"trainmon_disk_discards_merged_total", "counter", "The total number of discards merged.",
     DK_U64, DS_OFF(dc_merges), 18},
    {"trainmon_disk_discarded_sectors_total", "counter",
     "The total number of sectors discarded successfully.", DK_U64, DS_OFF(dc_sec), 18},
    {"trainmon_disk_discard_time_seconds_total", "counter",
     "This is the total number of seconds spent by all discards.", DK_MS, MS_DC, 18},
    {"trainmon_disk_flush_requests_total", "counter",
     "The total number of flush requests completed successfully.", DK_U64, DS_OFF(fl_ios), 20},
    {"trainmon_disk_flush_requests_time_seconds_total", "counter",
     "This is the total number of seconds spent by all flush requests.", DK_MS, MS_FL, 20},
};

static void tx_disk_labels(tm_text *t, const char *name)
{
    tm_text_puts(t, "{device=\"");
    tm_prom_escape(t, name);
    tm_text_puts(t, "\"} ");
}

int tm_prom_write_disks(tm_text *t, const tm_prom_disks *d)
{
    if (!t || !d)
        return tm_seterr(-EINVAL, "tm_prom_write_disks: NULL argument");
    for (size_t f = 0; f < TM_ARRAY_LEN(prom_disk_families); f++) {
        const struct prom_disk_family *fam = &prom_disk_families[f];
        bool any = false;
        for (size_t i = 0; i < d->n; i++)
            any |= d->dev[i].last.nfields >= fam->min_fields;
        if (!any)
            continue; /* an older kernel without discard/flush fields */
        tx_family(t, fam->name, fam->type, fam->help);
        for (size_t i = 0; i < d->n; i++) {
            const struct tm_prom_disk *dev = &d->dev[i];
            if (dev->last.nfields < fam->min_fields)
                continue;
            tm_text_puts(t, fam->name);
            tx_disk_labels(t, dev->last.name);
            uint64_t v;
            switch (fam->kind) {
            case DK_U64:
                memcpy(&v, (const char *)&dev->last + fam->off, sizeof v);
                tm_text_printf(t, "%" PRIu64 "\n", v);
                break;
            case DK_SECTORS:
                /* A sector here is always 512 bytes (sysstat's iostat.c;
                 * Documentation/admin-guide/iostats.rst). */
                memcpy(&v, (const char *)&dev->last + fam->off, sizeof v);
                tm_text_printf(t, "%" PRIu64 "\n", v * 512u);
                break;
            case DK_MS:
                v = dev->ms[fam->off];
                tm_text_printf(t, "%" PRIu64 ".%03u\n", v / 1000u, (unsigned)(v % 1000u));
                break;
            case DK_INFLIGHT:
                tm_text_printf(t, "%u\n", dev->last.inflight);
                break;
            }
        }
    }
    return t->rc;
}

/* --- pressure */

int tm_prom_write_pressure(tm_text *t, const tm_pressure_stats *ps)
{
    if (!t || !ps)
        return tm_seterr(-EINVAL, "tm_prom_write_pressure: NULL argument");
    static const struct {
        unsigned bit;
        const char *res;
        size_t off;
    } res[] = {
        {TM_PRESSURE_HAVE_CPU, "cpu", offsetof(tm_pressure_stats, cpu)},
        {TM_PRESSURE_HAVE_IO, "io", offsetof(tm_pressure_stats, io)},
        {TM_PRESSURE_HAVE_MEM, "memory", offsetof(tm_pressure_stats, mem)},
    };
    for (size_t i = 0; i < TM_ARRAY_LEN(res); i++) {
        if (!(ps->valid & res[i].bit))
            continue;
        const tm_psi *p = (const tm_psi *)(const void *)((const char *)ps + res[i].off);
        char name[96], help[160];
        uint64_t us;
        if (p->has_some) {
            snprintf(name, sizeof name, "trainmon_pressure_%s_waiting_seconds_total", res[i].res);
            snprintf(help, sizeof help,
                     "Total time in seconds that some tasks were stalled waiting for %s.",
                     res[i].res);
            tx_family(t, name, "counter", help);
            us = p->some_total_us;
            tm_text_printf(t, "%s %" PRIu64 ".%06u\n", name, us / 1000000u,
                           (unsigned)(us % 1000000u));
        }
        if (p->has_full) {
            snprintf(name, sizeof name, "trainmon_pressure_%s_stalled_seconds_total", res[i].res);
            snprintf(help, sizeof help,
                     "Total time in seconds that all non-idle tasks were stalled on %s.",
                     res[i].res);
            tx_family(t, name, "counter", help);
            us = p->full_total_us;
            tm_text_printf(t, "%s %" PRIu64 ".%06u\n", name, us / 1000000u,
                           (unsigned)(us % 1000000u));
        }
    }
    return t->rc;
}

/* --- GPUs */

static void tx_gpu_labels(tm_text *t, const tm_gpu_stats *g)
{
    tm_text_printf(t, "{gpu=\"%u\",uuid=\"", g->index);
    tm_prom_escape(t, g->uuid);
    tm_text_puts(t, "\"");
}

enum gpu_val {
    GV_MEM_USED,
    GV_MEM_TOTAL,
    GV_MEM_FREE,
    GV_MEM_RESERVED,
    GV_UTIL,
    GV_UTIL_MEM,
    GV_TEMP,
    GV_POWER,
    GV_PCIE_RX,
    GV_PCIE_TX,
    GV_CLOCK,
    GV_THROTTLE,
};

static const struct {
    const char *name, *help;
    unsigned need;
    enum gpu_val v;
} prom_gpu_families[] = {
    {"trainmon_gpu_memory_used_bytes", "GPU memory in use, in bytes (NVML).", TM_GPU_HAVE_MEM,
     GV_MEM_USED},
    {"trainmon_gpu_memory_total_bytes", "GPU memory installed, in bytes.", TM_GPU_HAVE_MEM,
     GV_MEM_TOTAL},
    {"trainmon_gpu_memory_free_bytes", "GPU memory free, in bytes.", TM_GPU_HAVE_MEM, GV_MEM_FREE},
    {"trainmon_gpu_memory_reserved_bytes", "GPU memory reserved by the driver, in bytes.",
     TM_GPU_HAVE_MEM_RESERVED, GV_MEM_RESERVED},
    {"trainmon_gpu_utilization_ratio",
     "Share of the last sample period in which a kernel ran on the GPU (0..1).", TM_GPU_HAVE_UTIL,
     GV_UTIL},
    {"trainmon_gpu_memory_utilization_ratio",
     "Share of the last sample period in which device memory was read or written (0..1).",
     TM_GPU_HAVE_UTIL, GV_UTIL_MEM},
    {"trainmon_gpu_temperature_celsius", "GPU core temperature in degrees Celsius.",
     TM_GPU_HAVE_TEMP, GV_TEMP},
    {"trainmon_gpu_power_watts", "GPU power draw in watts.", TM_GPU_HAVE_POWER, GV_POWER},
    {"trainmon_gpu_pcie_rx_bytes_per_second", "PCIe receive throughput in bytes per second.",
     TM_GPU_HAVE_PCIE, GV_PCIE_RX},
    {"trainmon_gpu_pcie_tx_bytes_per_second", "PCIe transmit throughput in bytes per second.",
     TM_GPU_HAVE_PCIE, GV_PCIE_TX},
    {"trainmon_gpu_sm_clock_hertz", "SM clock in hertz.", TM_GPU_HAVE_CLOCK, GV_CLOCK},
    {"trainmon_gpu_throttle_reasons",
     "GPU clock throttle reasons as a bit mask: 1 idle, 2 application clocks, 4 software power "
     "cap, 8 hardware slowdown, 16 sync boost, 32 software thermal, 64 hardware thermal, 128 power "
     "brake, 256 display clocks.",
     TM_GPU_HAVE_THROTTLE, GV_THROTTLE},
};

static double prom_gpu_value(const tm_gpu_stats *g, enum gpu_val v)
{
    switch (v) {
    case GV_MEM_USED:
        return (double)g->mem_used;
    case GV_MEM_TOTAL:
        return (double)g->mem_total;
    case GV_MEM_FREE:
        return (double)g->mem_free;
    case GV_MEM_RESERVED:
        return (double)g->mem_reserved;
    case GV_UTIL:
        return g->util_gpu / 100.0;
    case GV_UTIL_MEM:
        return g->util_mem / 100.0;
    case GV_TEMP:
        return g->temp_c;
    case GV_POWER:
        return g->power_w;
    case GV_PCIE_RX:
        return g->pcie_rx_bytes_s;
    case GV_PCIE_TX:
        return g->pcie_tx_bytes_s;
    case GV_CLOCK:
        return g->sm_clock_mhz * 1e6;
    case GV_THROTTLE:
        return (double)g->throttle_reasons;
    }
    return NAN;
}

/* The bits tm_gpu_throttle_names knows, in bit order. */
static const uint64_t prom_throttle_bits[] = {
    TM_GPU_THROTTLE_GPU_IDLE,       TM_GPU_THROTTLE_APPLICATIONS_CLOCKS,
    TM_GPU_THROTTLE_SW_POWER_CAP,   TM_GPU_THROTTLE_HW_SLOWDOWN,
    TM_GPU_THROTTLE_SYNC_BOOST,     TM_GPU_THROTTLE_SW_THERMAL,
    TM_GPU_THROTTLE_HW_THERMAL,     TM_GPU_THROTTLE_HW_POWER_BRAKE,
    TM_GPU_THROTTLE_DISPLAY_CLOCKS,
};

int tm_prom_write_gpus(tm_text *t, const tm_gpu_stats *g, size_t n)
{
    if (!t || (!g && n))
        return tm_seterr(-EINVAL, "tm_prom_write_gpus: NULL argument");
    if (n == 0)
        return t->rc;
    tx_family(t, "trainmon_gpu_info", "gauge", "A GPU seen through NVML, with its name; always 1.");
    for (size_t i = 0; i < n; i++) {
        tm_text_puts(t, "trainmon_gpu_info");
        tx_gpu_labels(t, &g[i]);
        tm_text_puts(t, ",name=\"");
        tm_prom_escape(t, g[i].name);
        tm_text_puts(t, "\"} 1\n");
    }
    tx_family(t, "trainmon_gpu_lost", "gauge",
              "1 when the GPU fell off the bus (NVML GPU_IS_LOST); its other series stop.");
    for (size_t i = 0; i < n; i++) {
        tm_text_puts(t, "trainmon_gpu_lost");
        tx_gpu_labels(t, &g[i]);
        tm_text_printf(t, "} %d\n", g[i].lost ? 1 : 0);
    }
    for (size_t f = 0; f < TM_ARRAY_LEN(prom_gpu_families); f++) {
        bool header = false;
        for (size_t i = 0; i < n; i++) {
            if (g[i].lost || !(g[i].valid & prom_gpu_families[f].need))
                continue;
            double v = prom_gpu_value(&g[i], prom_gpu_families[f].v);
            if (isnan(v))
                continue;
            if (!header)
                tx_family(t, prom_gpu_families[f].name, "gauge", prom_gpu_families[f].help);
            header = true;
            tm_text_puts(t, prom_gpu_families[f].name);
            tx_gpu_labels(t, &g[i]);
            tm_text_puts(t, "} ");
            tx_value(t, v);
            tm_text_puts(t, "\n");
        }
    }
    /* Each known reason as its own 0/1 series, so that a query can say
     * `trainmon_gpu_throttle_active{reason="hw_thermal_slowdown"} == 1`
     * without bit arithmetic (PromQL has none). */
    bool header = false;
    for (size_t i = 0; i < n; i++) {
        if (g[i].lost || !(g[i].valid & TM_GPU_HAVE_THROTTLE))
            continue;
        if (!header)
            tx_family(t, "trainmon_gpu_throttle_active", "gauge",
                      "1 while NVML reports this clock throttle reason.");
        header = true;
        for (size_t b = 0; b < TM_ARRAY_LEN(prom_throttle_bits); b++) {
            const char *name[1];
            if (tm_gpu_throttle_names(prom_throttle_bits[b], name, 1) != 1)
                continue;
            tm_text_puts(t, "trainmon_gpu_throttle_active");
            tx_gpu_labels(t, &g[i]);
            tm_text_printf(t, ",reason=\"%s\"} %d\n", name[0],
                           (g[i].throttle_reasons & prom_throttle_bits[b]) ? 1 : 0);
        }
    }
    header = false;
    for (size_t i = 0; i < n; i++) {
        if (g[i].lost || !(g[i].valid & TM_GPU_HAVE_PROCS))
            continue;
        for (size_t j = 0; j < g[i].nprocs; j++) {
            if (!g[i].procs[j].mem_valid)
                continue;
            if (!header)
                tx_family(t, "trainmon_gpu_process_memory_used_bytes", "gauge",
                          "GPU memory used by a process with a compute context, in bytes "
                          "(host pid).");
            header = true;
            tm_text_puts(t, "trainmon_gpu_process_memory_used_bytes");
            tx_gpu_labels(t, &g[i]);
            tm_text_printf(t, ",pid=\"%d\"} %" PRIu64 "\n", (int)g[i].procs[j].pid,
                           g[i].procs[j].used_bytes);
        }
    }
    return t->rc;
}

/* --- live runs */

static void tx_run_labels(tm_text *t, const tm_prom_run *r, const tm_prom_rank *k)
{
    tm_text_puts(t, "{run=\"");
    tm_prom_escape(t, r->name);
    if (k) {
        tm_text_puts(t, "\",rank=\"");
        tm_prom_escape(t, k->rank);
    }
    tm_text_puts(t, "\"} ");
}

enum run_val {
    RV_STEPS,
    RV_STEP_S,
    RV_WAIT_S,
    RV_WAIT_FRAC,
    RV_ALLOC,
    RV_RESERVED,
    RV_PEAK,
    RV_OOMS,
    RV_RING_DROPPED,
    RV_RING_FROM
};

static const struct {
    const char *name, *type, *help;
    enum run_val v;
} prom_rank_families[] = {
    {"trainmon_run_steps_total", "counter", "Complete training steps of this rank.", RV_STEPS},
    {"trainmon_run_step_seconds_total", "counter", "Sum of the durations of complete steps.",
     RV_STEP_S},
    {"trainmon_run_data_wait_seconds_total", "counter",
     "Time the training loop spent waiting for the next batch (capped at each step).", RV_WAIT_S},
    {"trainmon_run_data_wait_fraction", "gauge",
     "Share of step time spent waiting for data over the whole run, warm-up left out.",
     RV_WAIT_FRAC},
    {"trainmon_run_gpu_allocated_bytes", "gauge",
     "CUDA caching allocator: bytes allocated to tensors (latest capture).", RV_ALLOC},
    {"trainmon_run_gpu_reserved_bytes", "gauge",
     "CUDA caching allocator: bytes reserved from the device (latest capture).", RV_RESERVED},
    {"trainmon_run_gpu_peak_allocated_bytes", "gauge",
     "CUDA caching allocator: peak bytes allocated (latest capture).", RV_PEAK},
    {"trainmon_run_ooms_total", "counter", "CUDA out-of-memory events recorded by this rank.",
     RV_OOMS},
    {"trainmon_run_ring_steps_dropped", "gauge",
     "Flight-recorder ring (--max-size): steps the ring dropped before they were read.",
     RV_RING_DROPPED},
    {"trainmon_run_ring_kept_from_timestamp_seconds", "gauge",
     "Flight-recorder ring (--max-size): when the oldest step still read began, seconds since "
     "the epoch.",
     RV_RING_FROM},
};

static double prom_rank_value(const tm_prom_rank *k, enum run_val v)
{
    switch (v) {
    case RV_STEPS:
        return k->steps_valid ? (double)k->steps : NAN;
    case RV_STEP_S:
        return k->steps_valid ? k->step_seconds : NAN;
    case RV_WAIT_S:
        return k->steps_valid ? k->data_wait_seconds : NAN;
    case RV_WAIT_FRAC:
        return k->steps_valid ? k->data_wait_fraction : NAN;
    case RV_ALLOC:
        return k->memory_valid ? k->allocated_bytes : NAN;
    case RV_RESERVED:
        return k->memory_valid ? k->reserved_bytes : NAN;
    case RV_PEAK:
        return k->memory_valid ? k->peak_allocated_bytes : NAN;
    case RV_OOMS:
        return (double)k->ooms;
    case RV_RING_DROPPED:
        return k->steps_valid ? k->ring_steps_dropped : NAN;
    case RV_RING_FROM:
        return k->steps_valid ? k->ring_kept_from_s : NAN;
    }
    return NAN;
}

void tm_prom_rank_set(tm_prom_rank *out, const tm_follow_rank *k)
{
    memset(out, 0, sizeof *out);
    tm_strlcpy(out->rank, k->label, sizeof out->rank);
    /* Ring files count from the highest step number: the steps the ring
     * dropped before the exporter saw them still count. */
    out->steps = tm_steptally_total(&k->tally, k->ring);
    out->step_seconds = k->tally.step_s + k->tally.warm_step_s;
    out->data_wait_seconds = k->tally.wait_s + k->tally.warm_wait_s;
    out->data_wait_fraction = tm_steptally_wait_fraction(&k->tally);
    out->steps_valid = k->step_records > 0;
    out->allocated_bytes = k->allocated;
    out->reserved_bytes = k->reserved;
    out->peak_allocated_bytes = k->peak_allocated;
    out->memory_valid = !isnan(k->allocated);
    out->ooms = k->ooms;
    out->nanat = k->nanat;
    memcpy(out->anat, k->anat, sizeof out->anat);
    memcpy(out->stops, k->stops, sizeof out->stops);
    memcpy(out->stop_s, k->stop_s, sizeof out->stop_s);
    out->ring_steps_dropped = out->ring_kept_from_s = NAN;
    if (k->ring) {
        out->ring_steps_dropped = (double)(out->steps - k->tally.steps);
        if (k->first_step_real_ns)
            out->ring_kept_from_s = (double)k->first_step_real_ns / 1e9;
    }
}

int tm_prom_write_runs(tm_text *t, const tm_prom_run *runs, size_t n)
{
    if (!t || (!runs && n))
        return tm_seterr(-EINVAL, "tm_prom_write_runs: NULL argument");
    if (n == 0)
        return t->rc;
    tx_family(t, "trainmon_run_info", "gauge",
              "A live run directory under --runs, with the host that writes it; always 1.");
    for (size_t i = 0; i < n; i++) {
        tm_text_puts(t, "trainmon_run_info{run=\"");
        tm_prom_escape(t, runs[i].name);
        tm_text_puts(t, "\",host=\"");
        tm_prom_escape(t, runs[i].host ? runs[i].host : "");
        tm_text_puts(t, "\"} 1\n");
    }
    bool header = false;
    for (size_t i = 0; i < n; i++) {
        if (isnan(runs[i].last_record_age_s))
            continue;
        if (!header)
            tx_family(t, "trainmon_run_last_record_age_seconds", "gauge",
                      "Seconds since a record file of the run last changed.");
        header = true;
        tm_text_puts(t, "trainmon_run_last_record_age_seconds");
        tx_run_labels(t, &runs[i], NULL);
        tm_text_printf(t, "%.3f\n", runs[i].last_record_age_s);
    }
    for (size_t f = 0; f < TM_ARRAY_LEN(prom_rank_families); f++) {
        header = false;
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < runs[i].nranks; j++) {
                double v = prom_rank_value(&runs[i].ranks[j], prom_rank_families[f].v);
                if (isnan(v))
                    continue;
                if (!header)
                    tx_family(t, prom_rank_families[f].name, prom_rank_families[f].type,
                              prom_rank_families[f].help);
                header = true;
                tm_text_puts(t, prom_rank_families[f].name);
                tx_run_labels(t, &runs[i], &runs[i].ranks[j]);
                tx_value(t, v);
                tm_text_puts(t, "\n");
            }
        }
    }
    /* What stopped the training thread (stops.c): two counters per kind,
     * from a rank's first step on (zero until the first stop: a counter
     * that appears late loses its first increase to rate()). */
    static const struct {
        const char *name, *help;
        bool seconds;
    } stop_families[] = {
        {"trainmon_run_stop_seconds_total",
         "Seconds the training thread was stopped by stop: compile (torch.compile compiling), "
         "checkpoint (a save the loop waited for), gc (a garbage-collector pause outside "
         "those).",
         true},
        {"trainmon_run_stops_total", "Times the training thread was stopped by stop (as above).",
         false},
    };
    for (size_t f = 0; f < TM_ARRAY_LEN(stop_families); f++) {
        header = false;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < runs[i].nranks; j++) {
                const tm_prom_rank *k = &runs[i].ranks[j];
                if (!k->steps_valid)
                    continue;
                if (!header)
                    tx_family(t, stop_families[f].name, "counter", stop_families[f].help);
                header = true;
                for (size_t p = 0; p < TM_STOP_KINDS; p++) {
                    tm_text_puts(t, stop_families[f].name);
                    tm_text_puts(t, "{run=\"");
                    tm_prom_escape(t, runs[i].name);
                    tm_text_puts(t, "\",rank=\"");
                    tm_prom_escape(t, k->rank);
                    tm_text_printf(t, "\",stop=\"%s\"} ", tm_stop_def_at(p)->name);
                    if (stop_families[f].seconds)
                        tx_value(t, k->stop_s[p]);
                    else
                        tm_text_printf(t, "%" PRIu64, k->stops[p]);
                    tm_text_puts(t, "\n");
                }
            }
    }
    /* The memory anatomy: one gauge per device and part. */
    static const char *const parts[TM_ANAT_N] = {"params", "grads", "optim_state", "activations",
                                                 "unknown"};
    header = false;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < runs[i].nranks; j++) {
            const tm_prom_rank *k = &runs[i].ranks[j];
            for (size_t d = 0; d < k->nanat && d < TM_FOLLOW_ANAT_MAX; d++)
                for (size_t p = 0; p < TM_ANAT_N; p++) {
                    if (isnan(k->anat[d].bytes[p]))
                        continue;
                    if (!header)
                        tx_family(t, "trainmon_run_memory_anatomy_bytes", "gauge",
                                  "What a device's memory held at the lead optimizer's step "
                                  "(latest memory anatomy): part is params, grads, optim_state, "
                                  "activations (CUDA) or unknown.");
                    header = true;
                    tm_text_puts(t, "trainmon_run_memory_anatomy_bytes{run=\"");
                    tm_prom_escape(t, runs[i].name);
                    tm_text_puts(t, "\",rank=\"");
                    tm_prom_escape(t, k->rank);
                    tm_text_puts(t, "\",device=\"");
                    tm_prom_escape(t, k->anat[d].device);
                    tm_text_printf(t, "\",part=\"%s\"} ", parts[p]);
                    tx_value(t, k->anat[d].bytes[p]);
                    tm_text_puts(t, "\n");
                }
        }
    return t->rc;
}

/* --- the exporter itself */

int tm_prom_write_exporter(tm_text *t, const tm_prom_self *self)
{
    if (!t || !self || ((!self->names || !self->success) && self->n))
        return tm_seterr(-EINVAL, "tm_prom_write_exporter: NULL argument");
    tx_family(t, "trainmon_exporter_build_info", "gauge",
              "The version of trainmon serving these metrics; always 1.");
    tm_text_puts(t, "trainmon_exporter_build_info{version=\"" TM_VERSION "\"} 1\n");
    if (!isnan(self->collect_s)) {
        tx_family(t, "trainmon_scrape_duration_seconds", "gauge",
                  "Seconds the last collection took; scrapes are served from it.");
        tm_text_printf(t, "trainmon_scrape_duration_seconds %.6f\n", self->collect_s);
    }
    tx_family(t, "trainmon_exporter_collections_total", "counter",
              "Collections of these metrics since the exporter started.");
    tm_text_printf(t, "trainmon_exporter_collections_total %" PRIu64 "\n", self->collects);
    if (!isnan(self->collect_cpu_s)) {
        tx_family(t, "trainmon_exporter_collect_cpu_seconds_total", "counter",
                  "CPU seconds the exporter spent collecting (not serving) since it started.");
        tm_text_printf(t, "trainmon_exporter_collect_cpu_seconds_total %.6f\n",
                       self->collect_cpu_s);
    }
    if (self->n) {
        tx_family(t, "trainmon_scrape_collector_success", "gauge",
                  "1 when the collector's last sample succeeded.");
        for (size_t i = 0; i < self->n; i++) {
            tm_text_puts(t, "trainmon_scrape_collector_success{collector=\"");
            tm_prom_escape(t, self->names[i]);
            tm_text_printf(t, "\"} %d\n", self->success[i] ? 1 : 0);
        }
    }
    return t->rc;
}
