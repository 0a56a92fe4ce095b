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

#include "series.h"
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
            {TM_SER_DISK_READS_PER_SECOND, "1/s", r->r_s},
            {TM_SER_DISK_WRITES_PER_SECOND, "1/s", r->w_s},
            {TM_SER_DISK_DISCARDS_PER_SECOND, "1/s", r->d_s},
            {TM_SER_DISK_FLUSHES_PER_SECOND, "1/s", r->f_s},
            {TM_SER_DISK_READ_BYTES_PER_SECOND, "B/s", r->rkb_s * 1024.0},
            {TM_SER_DISK_WRITE_BYTES_PER_SECOND, "B/s", r->wkb_s * 1024.0},
            {TM_SER_DISK_DISCARD_BYTES_PER_SECOND, "B/s", r->dkb_s * 1024.0},
            {TM_SER_DISK_READ_MERGES_PER_SECOND, "1/s", r->rrqm_s},
            {TM_SER_DISK_WRITE_MERGES_PER_SECOND, "1/s", r->wrqm_s},
            {TM_SER_DISK_READ_AWAIT_SECONDS, "s", r->r_await / 1000.0},
            {TM_SER_DISK_WRITE_AWAIT_SECONDS, "s", r->w_await / 1000.0},
            {TM_SER_DISK_DISCARD_AWAIT_SECONDS, "s", r->d_await / 1000.0},
            {TM_SER_DISK_FLUSH_AWAIT_SECONDS, "s", r->f_await / 1000.0},
            {TM_SER_DISK_READ_REQUEST_BYTES, "B", r->rareq_sz * 1024.0},
            {TM_SER_DISK_WRITE_REQUEST_BYTES, "B", r->wareq_sz * 1024.0},
            {TM_SER_DISK_QUEUE_DEPTH, "", r->aqu_sz},
            {TM_SER_DISK_UTILIZATION, "ratio", r->util / 100.0},
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
    out[k++] =
        (struct tm_sysrec_val){names[2], "s", p->has_some ? (double)p->some_total_us / 1e6 : NAN};
    out[k++] = (struct tm_sysrec_val){names[3], "ratio", p->has_full ? p->full_avg10 / 100.0 : NAN};
    out[k++] = (struct tm_sysrec_val){names[4], "ratio", p->has_full ? p->full_avg60 / 100.0 : NAN};
    out[k++] =
        (struct tm_sysrec_val){names[5], "s", p->has_full ? (double)p->full_total_us / 1e6 : NAN};
    return k;
}

int tm_sysrec_pressure(tm_rec *w, int64_t t_ns, const tm_pressure_stats *ps)
{
    if (t_ns == 0)
        t_ns = tm_now_mono_ns();
    static const char *io[6] = {TM_SER_PSI_IO_SOME_AVG10,         TM_SER_PSI_IO_SOME_AVG60,
                                TM_SER_PSI_IO_SOME_SECONDS_TOTAL, TM_SER_PSI_IO_FULL_AVG10,
                                TM_SER_PSI_IO_FULL_AVG60,         TM_SER_PSI_IO_FULL_SECONDS_TOTAL};
    static const char *cpu[6] = {
        TM_SER_PSI_CPU_SOME_AVG10, TM_SER_PSI_CPU_SOME_AVG60, TM_SER_PSI_CPU_SOME_SECONDS_TOTAL,
        TM_SER_PSI_CPU_FULL_AVG10, TM_SER_PSI_CPU_FULL_AVG60, TM_SER_PSI_CPU_FULL_SECONDS_TOTAL};
    static const char *mem[6] = {
        TM_SER_PSI_MEMORY_SOME_AVG10,         TM_SER_PSI_MEMORY_SOME_AVG60,
        TM_SER_PSI_MEMORY_SOME_SECONDS_TOTAL, TM_SER_PSI_MEMORY_FULL_AVG10,
        TM_SER_PSI_MEMORY_FULL_AVG60,         TM_SER_PSI_MEMORY_FULL_SECONDS_TOTAL};
    static const char *cg[6] = {
        TM_SER_CGROUP_IO_SOME_AVG10,         TM_SER_CGROUP_IO_SOME_AVG60,
        TM_SER_CGROUP_IO_SOME_SECONDS_TOTAL, TM_SER_CGROUP_IO_FULL_AVG10,
        TM_SER_CGROUP_IO_FULL_AVG60,         TM_SER_CGROUP_IO_FULL_SECONDS_TOTAL};
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
        vals[k++] = (struct tm_sysrec_val){TM_SER_CGROUP_READ_BYTES_TOTAL, "B",
                                           (double)ps->cg_iostat.rbytes};
        vals[k++] = (struct tm_sysrec_val){TM_SER_CGROUP_WRITE_BYTES_TOTAL, "B",
                                           (double)ps->cg_iostat.wbytes};
        vals[k++] =
            (struct tm_sysrec_val){TM_SER_CGROUP_READS_TOTAL, "", (double)ps->cg_iostat.rios};
        vals[k++] =
            (struct tm_sysrec_val){TM_SER_CGROUP_WRITES_TOTAL, "", (double)ps->cg_iostat.wios};
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
        {TM_SER_PROC_ALIVE, "", ts->root_alive ? 1.0 : 0.0},
        {TM_SER_PROC_PROCESSES, "", (double)ts->nproc},
        {TM_SER_PROC_PROCESSES_D_STATE, "", (double)ts->nproc_d},
        {TM_SER_PROC_CPU_UTILIZATION, "cores", ts->cpu_pct / 100.0},
        {TM_SER_PROC_CPU_USER_SECONDS_TOTAL, "s", ts->cpu_user_s},
        {TM_SER_PROC_CPU_SYSTEM_SECONDS_TOTAL, "s", ts->cpu_sys_s},
        {TM_SER_PROC_READ_BYTES_PER_SECOND, "B/s", ts->read_bytes_s},
        {TM_SER_PROC_WRITE_BYTES_PER_SECOND, "B/s", ts->write_bytes_s},
        {TM_SER_PROC_RCHAR_BYTES_PER_SECOND, "B/s", ts->rchar_s},
        {TM_SER_PROC_CACHE_HIT_HINT, "ratio", ts->cache_hit_hint},
        {TM_SER_PROC_READ_BYTES_TOTAL, "B", ts->read_bytes},
        {TM_SER_PROC_WRITE_BYTES_TOTAL, "B", ts->write_bytes},
        {TM_SER_PROC_RCHAR_BYTES_TOTAL, "B", ts->rchar},
        {TM_SER_PROC_RSS_BYTES, "B", ts->rss_bytes},
        {TM_SER_PROC_PSS_BYTES, "B", ts->pss_bytes},
    };
    return tm_sysrec_put(w, t_ns, labels, vals, TM_ARRAY_LEN(vals));
}
