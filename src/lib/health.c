/*
 * health.c - the node's verdict for schedulers (GET /health of `trainmon
 * serve`): "ok", or "degraded" with one reason per crossed limit, and the
 * numbers behind it, as one JSON object.
 *
 * Why these rules (docs/METRICS.md "/health"):
 *   - A disk is saturated only when it is busy nearly all the time AND its
 *     requests wait: %util alone is no saturation signal for devices that
 *     serve requests in parallel (NVMe, RAID, loop; sysstat's iostat.c;
 * Documentation/admin-guide/iostats.rst).
 *   - GPU memory above 95% of the device leaves no room for the caching
 *     allocator's next block: the next larger batch or fragmentation OOMs.
 *   - io "full" pressure means every runnable task was stalled on I/O.
 * A lost GPU (fallen off the bus) is always a reason.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "prom.h"
#include "util.h"

void tm_health_limits_default(tm_health_limits *l)
{
    l->disk_util_pct = 90.0;
    l->disk_await_ms = 50.0;
    l->gpu_mem_ratio = 0.95;
    l->io_full_avg10 = 20.0;
    l->mem_full_avg10 = 10.0;
}

/* A JSON number, or null for unavailable (JSON has no NaN). */
static void hl_num(tm_text *t, const char *key, double v, bool comma)
{
    tm_text_printf(t, "%s\"%s\":", comma ? "," : "", key);
    if (isnan(v) || isinf(v))
        tm_text_puts(t, "null");
    else
        tm_text_printf(t, "%.6g", v);
}

static void hl_reason(tm_text *t, bool *first, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void hl_reason(tm_text *t, bool *first, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!*first)
        tm_text_puts(t, ",");
    *first = false;
    tm_text_json_str(t, msg);
}

static bool hl_disk_saturated(const tm_health_limits *l, const tm_diskrate *r)
{
    if (isnan(l->disk_util_pct) || isnan(r->util) || r->util < l->disk_util_pct)
        return false;
    if (isnan(l->disk_await_ms))
        return true;
    return (!isnan(r->r_await) && r->r_await > l->disk_await_ms) ||
           (!isnan(r->w_await) && r->w_await > l->disk_await_ms);
}

static double hl_gpu_ratio(const tm_gpu_stats *g)
{
    if (g->lost || !(g->valid & TM_GPU_HAVE_MEM) || g->mem_total == 0)
        return NAN;
    return (double)g->mem_used / (double)g->mem_total;
}

static bool hl_psi_over(const tm_pressure_stats *ps, unsigned bit, const tm_psi *p, double lim)
{
    return ps && (ps->valid & bit) && p->has_full && !isnan(lim) && p->full_avg10 > lim;
}

int tm_health_write_json(tm_text *t, const tm_health_limits *lim, const tm_diskrate *rates,
                         size_t nrates, const tm_pressure_stats *ps, const tm_gpu_stats *gpus,
                         size_t ngpus, bool *degraded)
{
    if (!t || !lim || (!rates && nrates) || (!gpus && ngpus))
        return tm_seterr(-EINVAL, "tm_health_write_json: NULL argument");
    bool bad = false;
    for (size_t i = 0; i < nrates; i++)
        bad |= hl_disk_saturated(lim, &rates[i]);
    for (size_t i = 0; i < ngpus; i++)
        bad |= gpus[i].lost || hl_gpu_ratio(&gpus[i]) > lim->gpu_mem_ratio;
    bool io_bad = ps && hl_psi_over(ps, TM_PRESSURE_HAVE_IO, &ps->io, lim->io_full_avg10);
    bool mem_bad = ps && hl_psi_over(ps, TM_PRESSURE_HAVE_MEM, &ps->mem, lim->mem_full_avg10);
    bad |= io_bad || mem_bad;

    tm_text_printf(t, "{\"status\":\"%s\",\"reasons\":[", bad ? "degraded" : "ok");
    bool first = true;
    for (size_t i = 0; i < nrates; i++)
        if (hl_disk_saturated(lim, &rates[i]))
            hl_reason(t, &first, "disk %s saturated: %.0f%% util, r_await %.1f ms, w_await %.1f ms",
                      rates[i].name, rates[i].util, rates[i].r_await, rates[i].w_await);
    for (size_t i = 0; i < ngpus; i++) {
        double r = hl_gpu_ratio(&gpus[i]);
        if (gpus[i].lost)
            hl_reason(t, &first, "GPU %u (%s) is lost (fallen off the bus)", gpus[i].index,
                      gpus[i].uuid);
        else if (r > lim->gpu_mem_ratio)
            hl_reason(t, &first, "GPU %u memory nearly full: %.1f%% used", gpus[i].index,
                      100.0 * r);
    }
    if (io_bad)
        hl_reason(t, &first, "I/O pressure: all tasks stalled on I/O %.1f%% of the last 10 s",
                  ps->io.full_avg10);
    if (mem_bad)
        hl_reason(t, &first, "memory pressure: all tasks stalled on memory %.1f%% of the last 10 s",
                  ps->mem.full_avg10);
    tm_text_puts(t, "],\"limits\":{");
    hl_num(t, "disk_util_percent", lim->disk_util_pct, false);
    hl_num(t, "disk_await_ms", lim->disk_await_ms, true);
    hl_num(t, "gpu_memory_used_ratio", lim->gpu_mem_ratio, true);
    hl_num(t, "io_full_avg10_percent", lim->io_full_avg10, true);
    hl_num(t, "memory_full_avg10_percent", lim->mem_full_avg10, true);
    tm_text_puts(t, "},\"disks\":[");
    for (size_t i = 0; i < nrates; i++) {
        const tm_diskrate *r = &rates[i];
        tm_text_puts(t, i ? ",{\"device\":" : "{\"device\":");
        tm_text_json_str(t, r->name);
        tm_text_printf(t, ",\"saturated\":%s", hl_disk_saturated(lim, r) ? "true" : "false");
        hl_num(t, "util_percent", r->util, true);
        hl_num(t, "r_await_ms", r->r_await, true);
        hl_num(t, "w_await_ms", r->w_await, true);
        hl_num(t, "aqu_sz", r->aqu_sz, true);
        hl_num(t, "read_bytes_per_second", r->rkb_s * 1024.0, true);
        hl_num(t, "write_bytes_per_second", r->wkb_s * 1024.0, true);
        hl_num(t, "reads_per_second", r->r_s, true);
        hl_num(t, "writes_per_second", r->w_s, true);
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "],\"gpus\":[");
    for (size_t i = 0; i < ngpus; i++) {
        const tm_gpu_stats *g = &gpus[i];
        tm_text_printf(t, "%s{\"index\":%u,\"uuid\":", i ? "," : "", g->index);
        tm_text_json_str(t, g->uuid);
        tm_text_printf(t, ",\"lost\":%s", g->lost ? "true" : "false");
        hl_num(t, "memory_used_ratio", hl_gpu_ratio(g), true);
        bool mem = !g->lost && (g->valid & TM_GPU_HAVE_MEM);
        hl_num(t, "memory_used_bytes", mem ? (double)g->mem_used : NAN, true);
        hl_num(t, "memory_total_bytes", mem ? (double)g->mem_total : NAN, true);
        bool util = !g->lost && (g->valid & TM_GPU_HAVE_UTIL);
        hl_num(t, "utilization_ratio", util ? g->util_gpu / 100.0 : NAN, true);
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "],\"pressure\":{");
    static const struct {
        unsigned bit;
        const char *name;
        size_t off;
    } res[] = {
        {TM_PRESSURE_HAVE_CPU, "cpu", offsetof(tm_pressure_stats, cpu)},
        {TM_PRESSURE_HAVE_IO, "io", offsetof(tm_pressure_stats, io)},
        {TM_PRESSURE_HAVE_MEM, "memory", offsetof(tm_pressure_stats, mem)},
    };
    bool pfirst = true;
    for (size_t i = 0; ps && i < TM_ARRAY_LEN(res); i++) {
        if (!(ps->valid & res[i].bit))
            continue;
        const tm_psi *p = (const tm_psi *)(const void *)((const char *)ps + res[i].off);
        tm_text_printf(t, "%s\"%s\":{", pfirst ? "" : ",", res[i].name);
        pfirst = false;
        hl_num(t, "some_avg10", p->has_some ? p->some_avg10 : NAN, false);
        hl_num(t, "full_avg10", p->has_full ? p->full_avg10 : NAN, true);
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "}}\n");
    if (degraded)
        *degraded = bad;
    return tm_text_error(t);
}

int tm_health_write_files(tm_text *t, const tm_health_file *files, size_t n)
{
    if (!t || (!files && n))
        return tm_seterr(-EINVAL, "tm_health_write_files: NULL argument");
    size_t len;
    const char *d = tm_text_data(t, &len);
    if (d && len && d[len - 1] == '\n')
        len--;
    if (!d || len == 0 || d[len - 1] != '}')
        return tm_seterr(-EINVAL, "tm_health_write_files: not after tm_health_write_json");
    tm_text_truncate(t, len - 1);
    tm_text_puts(t, ",\"damaged_files\":[");
    for (size_t i = 0; i < n; i++) {
        tm_text_puts(t, i ? ",{\"run\":" : "{\"run\":");
        tm_text_json_str(t, files[i].run ? files[i].run : "");
        tm_text_puts(t, ",\"file\":");
        tm_text_json_str(t, files[i].file ? files[i].file : "");
        tm_text_printf(t, ",\"places\":%zu,\"offset\":%" PRIu64 ",\"what\":", files[i].places,
                       files[i].offset);
        tm_text_json_str(t, files[i].what ? files[i].what : "");
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "]}\n");
    return tm_text_error(t);
}
