/*
 * sysrec.c - records collector samples (disk rates, pressure, a process
 * tree) as named series in a record file.  This is the one place that
 * decides the series names and units of system samples; docs/FORMAT.md
 * lists them.  Values are converted to base units here (bytes, seconds,
 * ratios), whatever unit the collector uses for display (iostat's kB, ms,
 * percent).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sysrec.h"
#include "util.h"

int tm_sysrec_put(tm_rec *w, int64_t t_ns, const char *labels, const struct tm_sysrec_val *vals,
                      size_t n)
{
    uint32_t ids[64];
    double values[64];
    size_t k = 0;
    for (size_t i = 0; i < n && k < TM_ARRAY_LEN(ids); i++) {
        if (isnan(vals[i].v))
            continue;
        int id = tm_rec_series(w, vals[i].name, labels, vals[i].unit);
        if (id < 0)
            return id;
        ids[k] = (uint32_t)id;
        values[k] = vals[i].v;
        k++;
    }
    if (k == 0)
        return 0;
    return tm_rec_sample(w, t_ns, ids, values, k);
}

int tm_sysrec_disk(tm_rec *w, int64_t t_ns, const tm_diskrate *rates, size_t n)
{
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    for (size_t i = 0; i < n; i++) {
        const tm_diskrate *r = &rates[i];
        char labels[TM_DISK_NAME_MAX + 16];
        snprintf(labels, sizeof labels, "device=%s", r->name);
        const struct tm_sysrec_val vals[] = {
            {"disk.reads_per_second", "1/s", r->r_s},
            {"disk.writes_per_second", "1/s", r->w_s},
            {"disk.discards_per_second", "1/s", r->d_s},
            {"disk.flushes_per_second", "1/s", r->f_s},
            {"disk.read_bytes_per_second", "B/s", r->rkb_s * 1024.0},
            {"disk.write_bytes_per_second", "B/s", r->wkb_s * 1024.0},
            {"disk.discard_bytes_per_second", "B/s", r->dkb_s * 1024.0},
            {"disk.read_merges_per_second", "1/s", r->rrqm_s},
            {"disk.write_merges_per_second", "1/s", r->wrqm_s},
            {"disk.read_await_seconds", "s", r->r_await / 1000.0},
            {"disk.write_await_seconds", "s", r->w_await / 1000.0},
            {"disk.discard_await_seconds", "s", r->d_await / 1000.0},
            {"disk.flush_await_seconds", "s", r->f_await / 1000.0},
            {"disk.read_request_bytes", "B", r->rareq_sz * 1024.0},
            {"disk.write_request_bytes", "B", r->wareq_sz * 1024.0},
            {"disk.queue_depth", "", r->aqu_sz},
            {"disk.utilization", "ratio", r->util / 100.0},
        };
        int rc = tm_sysrec_put(w, t_ns, labels, vals, TM_ARRAY_LEN(vals));
        if (rc < 0)
            return rc;
    }
    return 0;
}

static size_t sysrec_psi(struct tm_sysrec_val *out, const char *names[6], const tm_psi *p)
{
    size_t k = 0;
    out[k++] = (struct tm_sysrec_val){names[0], "ratio", p->has_some ? p->some_avg10 / 100.0 : NAN};
    out[k++] = (struct tm_sysrec_val){names[1], "ratio", p->has_some ? p->some_avg60 / 100.0 : NAN};
    out[k++] = (struct tm_sysrec_val){names[2], "s", p->has_some ? (double)p->some_total_us / 1e6 : NAN};
    out[k++] = (struct tm_sysrec_val){names[3], "ratio", p->has_full ? p->full_avg10 / 100.0 : NAN};
    out[k++] = (struct tm_sysrec_val){names[4], "ratio", p->has_full ? p->full_avg60 / 100.0 : NAN};
    out[k++] = (struct tm_sysrec_val){names[5], "s", p->has_full ? (double)p->full_total_us / 1e6 : NAN};
    return k;
}

int tm_sysrec_pressure(tm_rec *w, int64_t t_ns, const tm_pressure_stats *ps)
{
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    static const char *io[6] = {"psi.io.some_avg10", "psi.io.some_avg60",
                                "psi.io.some_seconds_total", "psi.io.full_avg10",
                                "psi.io.full_avg60", "psi.io.full_seconds_total"};
    static const char *cpu[6] = {"psi.cpu.some_avg10", "psi.cpu.some_avg60",
                                 "psi.cpu.some_seconds_total", "psi.cpu.full_avg10",
                                 "psi.cpu.full_avg60", "psi.cpu.full_seconds_total"};
    static const char *mem[6] = {"psi.memory.some_avg10", "psi.memory.some_avg60",
                                 "psi.memory.some_seconds_total", "psi.memory.full_avg10",
                                 "psi.memory.full_avg60", "psi.memory.full_seconds_total"};
    static const char *cg[6] = {"cgroup.io.some_avg10", "cgroup.io.some_avg60",
                                "cgroup.io.some_seconds_total", "cgroup.io.full_avg10",
                                "cgroup.io.full_avg60", "cgroup.io.full_seconds_total"};
    struct tm_sysrec_val vals[32];
    size_t k = 0;
    if (ps->valid & TM_PRESSURE_HAVE_IO)
        k += sysrec_psi(vals + k, io, &ps->io);
    if (ps->valid & TM_PRESSURE_HAVE_CPU)
        k += sysrec_psi(vals + k, cpu, &ps->cpu);
    if (ps->valid & TM_PRESSURE_HAVE_MEM)
        k += sysrec_psi(vals + k, mem, &ps->mem);
    int rc = tm_sysrec_put(w, t_ns, "", vals, k);
    if (rc < 0 || !(ps->valid & (TM_PRESSURE_HAVE_CG_IO | TM_PRESSURE_HAVE_CG_IOSTAT)))
        return rc;
    k = 0;
    if (ps->valid & TM_PRESSURE_HAVE_CG_IO)
        k += sysrec_psi(vals + k, cg, &ps->cg_io);
    if (ps->valid & TM_PRESSURE_HAVE_CG_IOSTAT && ps->cg_iostat.valid) {
        vals[k++] = (struct tm_sysrec_val){"cgroup.read_bytes_total", "B", (double)ps->cg_iostat.rbytes};
        vals[k++] = (struct tm_sysrec_val){"cgroup.write_bytes_total", "B", (double)ps->cg_iostat.wbytes};
        vals[k++] = (struct tm_sysrec_val){"cgroup.reads_total", "", (double)ps->cg_iostat.rios};
        vals[k++] = (struct tm_sysrec_val){"cgroup.writes_total", "", (double)ps->cg_iostat.wios};
    }
    char labels[600];
    snprintf(labels, sizeof labels, "cgroup=%s", ps->cgroup);
    return tm_sysrec_put(w, t_ns, labels, vals, k);
}

int tm_sysrec_ptree(tm_rec *w, int64_t t_ns, const tm_ptree_stats *ts)
{
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    char labels[32];
    snprintf(labels, sizeof labels, "root=%d", (int)ts->root);
    const struct tm_sysrec_val vals[] = {
        {"proc.alive", "", ts->root_alive ? 1.0 : 0.0},
        {"proc.processes", "", (double)ts->nproc},
        {"proc.processes_d_state", "", (double)ts->nproc_d},
        {"proc.cpu_utilization", "cores", ts->cpu_pct / 100.0},
        {"proc.cpu_user_seconds_total", "s", ts->cpu_user_s},
        {"proc.cpu_system_seconds_total", "s", ts->cpu_sys_s},
        {"proc.read_bytes_per_second", "B/s", ts->read_bytes_s},
        {"proc.write_bytes_per_second", "B/s", ts->write_bytes_s},
        {"proc.rchar_bytes_per_second", "B/s", ts->rchar_s},
        {"proc.cache_hit_hint", "ratio", ts->cache_hit_hint},
        {"proc.read_bytes_total", "B", ts->read_bytes},
        {"proc.write_bytes_total", "B", ts->write_bytes},
        {"proc.rchar_bytes_total", "B", ts->rchar},
        {"proc.rss_bytes", "B", ts->rss_bytes},
        {"proc.pss_bytes", "B", ts->pss_bytes},
    };
    return tm_sysrec_put(w, t_ns, labels, vals, TM_ARRAY_LEN(vals));
}
