/*
 * gpu.c - the vendor-neutral part of the GPU collector: the list of GPUs
 * over the backends, lost GPUs, the warnings queue, throttle-reason names,
 * attribution of GPU processes to a process tree, and recording.
 *
 * Each vendor's library is read by a backend (struct tm_gpu_backend,
 * gpu.h) in a file of its own: gpu_nvml.c for NVIDIA.  tm_gpu_open opens
 * every backend of the table below; the GPUs are numbered over them in
 * table order, so with NVML alone trainmon's index is NVML's (as
 * nvidia-smi's).  A backend that finds no library or no GPU is left out;
 * only when none opens does tm_gpu_open fail, with the message of the
 * first that found something (else the first's: "no NVIDIA driver
 * found").  Warnings go to a small queue that the caller drains, so that
 * a library never prints.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "ptree.h"
#include "series.h"
#include "sysrec.h"
#include "util.h"

/* The backends tm_gpu_open tries, in this order.  A new vendor is one line
 * here and its file (docs/GPU.md, "Backends"). */
static const struct tm_gpu_backend *const backends[] = {
    &tm_gpu_nvml,
};

#define GPU_WARN_MAX 16
#define GPU_WARN_LEN 256

struct gpu_backend_open {
    const struct tm_gpu_backend *b;
    void *ctx;      /* NULL: not open (failed, or closed for want of GPUs) */
    unsigned first; /* trainmon's index of the backend's GPU 0 */
    unsigned count;
    size_t ndev; /* GPUs added */
};

struct gpu_dev {
    struct gpu_backend_open *be;
    int slot;
    bool lost;
};

struct tm_gpu {
    struct gpu_backend_open *be;
    size_t nbe;
    size_t n;
    struct gpu_dev *devs;
    tm_gpu_stats *stats;
    char warn[GPU_WARN_MAX][GPU_WARN_LEN];
    size_t whead, wcount, wdropped;
    char wcur[GPU_WARN_LEN];
};

/* ---------------------------------------------------------------- warnings */

void tm_gpu_warn(tm_gpu *g, const char *fmt, ...)
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

/* ---------------------------------------------------------------- sampling */

static void gpu_set_lost(tm_gpu_stats *s)
{
    s->lost = true;
    s->valid = 0;
    s->nprocs = 0;
    s->procs = NULL;
}

/* Everything unavailable until the backend says otherwise. */
static void gpu_reset(tm_gpu_stats *s)
{
    s->valid = 0;
    s->mem_total = s->mem_used = s->mem_free = s->mem_reserved = 0;
    s->util_gpu = s->util_mem = s->temp_c = s->power_w = NAN;
    s->pcie_rx_bytes_s = s->pcie_tx_bytes_s = s->sm_clock_mhz = NAN;
    s->throttle_reasons = 0;
    s->nprocs = 0;
    s->procs = NULL;
}

int tm_gpu_sample(tm_gpu *g, const tm_gpu_stats **gpus, size_t *n)
{
    if (!g || !gpus || !n)
        return tm_seterr(-EINVAL, "tm_gpu_sample: NULL argument");
    for (size_t i = 0; i < g->n; i++) {
        struct gpu_dev *d = &g->devs[i];
        tm_gpu_stats *s = &g->stats[i];
        if (d->lost) {
            gpu_set_lost(s);
            continue;
        }
        gpu_reset(s);
        d->be->b->sample(d->be->ctx, d->slot, s);
        if (s->lost) {
            d->lost = true;
            gpu_set_lost(s);
            tm_gpu_warn(g, "GPU %u (%s) is lost (fallen off the bus): its metrics stop", s->index,
                        s->uuid);
        }
    }
    *gpus = g->stats;
    *n = g->n;
    return 0;
}

/* ------------------------------------------------------------ open/close */

static void gpu_free(tm_gpu *g)
{
    for (size_t i = 0; i < g->nbe; i++)
        if (g->be[i].ctx)
            g->be[i].b->close(g->be[i].ctx);
    free(g->be);
    free(g->devs);
    free(g->stats);
    free(g);
}

/* Opens every backend; fails when none opens. */
static int gpu_open_backends(tm_gpu *g, const struct tm_gpu_backend *const *list, size_t nlist,
                             unsigned *total)
{
    /* The error to give when no backend opens: the first that is more than
     * "no library here" (a driver that fails says more than an absent
     * vendor), else the first.  Its message is kept over later calls. */
    int err = 0;
    char msg[512] = "no GPU backend: GPU metrics off";
    *total = 0;
    for (size_t i = 0; i < nlist; i++) {
        void *ctx = NULL;
        int rc = list[i]->open(g, &ctx);
        if (rc < 0) {
            if (err == 0 || (err == -ENOENT && rc != -ENOENT)) {
                err = rc;
                tm_strlcpy(msg, tm_last_error(), sizeof msg);
            }
            continue;
        }
        unsigned count = list[i]->count(ctx);
        if (count > UINT_MAX - *total) { /* cannot happen with real hardware */
            list[i]->close(ctx);
            continue;
        }
        g->be[g->nbe++] =
            (struct gpu_backend_open){.b = list[i], .ctx = ctx, .first = *total, .count = count};
        *total += count;
    }
    if (g->nbe == 0)
        return tm_seterr(err ? err : -ENODEV, "%s", msg);
    return 0;
}

static struct gpu_backend_open *gpu_backend_of(tm_gpu *g, unsigned idx)
{
    for (size_t i = 0; i < g->nbe; i++)
        if (idx >= g->be[i].first && idx - g->be[i].first < g->be[i].count)
            return &g->be[i];
    return NULL;
}

/* Adds trainmon's GPU idx.  Enumerating (all), a GPU this process may not
 * use (a container's device cgroup) is left out with a warning and the
 * others are kept; asked for by index, it fails the open. */
static int gpu_add(tm_gpu *g, unsigned idx, bool all)
{
    struct gpu_backend_open *be = gpu_backend_of(g, idx);
    tm_gpu_stats *s = &g->stats[g->n];
    memset(s, 0, sizeof *s);
    s->index = idx;
    snprintf(s->name, sizeof s->name, "GPU %u", idx);
    int slot = be->b->add(be->ctx, idx - be->first, s);
    if (slot < 0) {
        if (!all)
            return slot;
        tm_gpu_warn(g, "%s: left out", tm_last_error());
        return 0;
    }
    g->devs[g->n] = (struct gpu_dev){.be = be, .slot = slot, .lost = s->lost};
    if (s->lost) {
        gpu_set_lost(s);
        tm_gpu_warn(g, "GPU %u is lost (fallen off the bus): its metrics stop", idx);
    }
    be->ndev++;
    g->n++;
    return 0;
}

int tm_gpu_open_with(tm_gpu **out, const struct tm_gpu_backend *const *list, size_t nlist,
                     const unsigned *indices, size_t n)
{
    if (!out || (!list && nlist))
        return tm_seterr(-EINVAL, "tm_gpu_open: NULL argument");
    *out = NULL;
    tm_gpu *g = calloc(1, sizeof *g);
    if (g && nlist)
        g->be = calloc(nlist, sizeof *g->be);
    if (!g || (nlist && !g->be)) {
        free(g);
        return tm_seterr(-ENOMEM, "GPU collector: %s", strerror(ENOMEM));
    }
    unsigned total;
    int rc = gpu_open_backends(g, list, nlist, &total);
    if (rc < 0)
        goto out;
    bool all = indices == NULL || n == 0;
    size_t want = all ? total : n;
    if (want == 0) { /* backends that opened with no GPU */
        rc = tm_seterr(-ENODEV, "no GPU found: GPU metrics off");
        goto out;
    }
    g->devs = calloc(want, sizeof *g->devs);
    g->stats = calloc(want, sizeof *g->stats);
    if (!g->devs || !g->stats) {
        rc = tm_seterr(-ENOMEM, "GPU collector: %s", strerror(ENOMEM));
        goto out;
    }
    for (size_t i = 0; i < want; i++) {
        unsigned idx = all ? (unsigned)i : indices[i];
        if (idx >= total) {
            rc = tm_seterr(-ENODEV, "GPU %u: no such GPU (%u found)", idx, total);
            goto out;
        }
        rc = gpu_add(g, idx, all);
        if (rc < 0)
            goto out;
    }
    if (g->n == 0) {
        rc = tm_seterr(-ENODEV, "no usable %s%sGPU: GPU metrics off",
                       g->nbe == 1 ? g->be[0].b->vendor : "", g->nbe == 1 ? " " : "");
        goto out;
    }
    /* A backend none of whose GPUs is watched keeps nothing loaded. */
    for (size_t i = 0; i < g->nbe; i++) {
        if (g->be[i].ndev == 0) {
            g->be[i].b->close(g->be[i].ctx);
            g->be[i].ctx = NULL;
        }
    }
    *out = g;
    return 0;
out:
    gpu_free(g);
    return rc;
}

int tm_gpu_open(tm_gpu **out, const unsigned *indices, size_t n)
{
    return tm_gpu_open_with(out, backends, TM_ARRAY_LEN(backends), indices, n);
}

void tm_gpu_close(tm_gpu **gp)
{
    if (!gp || !*gp)
        return;
    gpu_free(*gp);
    *gp = NULL;
}

/* ------------------------------------------------------------------ names */

size_t tm_gpu_throttle_names(uint64_t reasons, const char **names, size_t cap)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } bits[] = {
        {TM_GPU_THROTTLE_GPU_IDLE, "gpu_idle"},
        {TM_GPU_THROTTLE_APPLICATIONS_CLOCKS, "applications_clocks_setting"},
        {TM_GPU_THROTTLE_SW_POWER_CAP, "sw_power_cap"},
        {TM_GPU_THROTTLE_HW_SLOWDOWN, "hw_slowdown"},
        {TM_GPU_THROTTLE_SYNC_BOOST, "sync_boost"},
        {TM_GPU_THROTTLE_SW_THERMAL, "sw_thermal_slowdown"},
        {TM_GPU_THROTTLE_HW_THERMAL, "hw_thermal_slowdown"},
        {TM_GPU_THROTTLE_HW_POWER_BRAKE, "hw_power_brake"},
        {TM_GPU_THROTTLE_DISPLAY_CLOCKS, "display_clocks_setting"},
    };
    size_t k = 0;
    for (size_t i = 0; i < TM_ARRAY_LEN(bits); i++) {
        if (!(reasons & bits[i].bit))
            continue;
        if (names && k < cap)
            names[k] = bits[i].name;
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
            {TM_SER_GPU_MEMORY_USED_BYTES, "B", mem ? (double)s->mem_used : NAN},
            {TM_SER_GPU_MEMORY_TOTAL_BYTES, "B", mem ? (double)s->mem_total : NAN},
            {TM_SER_GPU_MEMORY_FREE_BYTES, "B", mem ? (double)s->mem_free : NAN},
            {TM_SER_GPU_MEMORY_RESERVED_BYTES, "B",
             s->valid & TM_GPU_HAVE_MEM_RESERVED ? (double)s->mem_reserved : NAN},
            {TM_SER_GPU_UTILIZATION, "ratio",
             s->valid & TM_GPU_HAVE_UTIL ? s->util_gpu / 100.0 : NAN},
            {TM_SER_GPU_MEMORY_UTILIZATION, "ratio",
             s->valid & TM_GPU_HAVE_UTIL ? s->util_mem / 100.0 : NAN},
            {TM_SER_GPU_TEMPERATURE_CELSIUS, "C", s->valid & TM_GPU_HAVE_TEMP ? s->temp_c : NAN},
            {TM_SER_GPU_POWER_WATTS, "W", s->valid & TM_GPU_HAVE_POWER ? s->power_w : NAN},
            {TM_SER_GPU_PCIE_RX_BYTES_PER_SECOND, "B/s",
             s->valid & TM_GPU_HAVE_PCIE ? s->pcie_rx_bytes_s : NAN},
            {TM_SER_GPU_PCIE_TX_BYTES_PER_SECOND, "B/s",
             s->valid & TM_GPU_HAVE_PCIE ? s->pcie_tx_bytes_s : NAN},
            {TM_SER_GPU_SM_CLOCK_HERTZ, "Hz",
             s->valid & TM_GPU_HAVE_CLOCK ? s->sm_clock_mhz * 1e6 : NAN},
            {TM_SER_GPU_THROTTLE_REASONS, "",
             s->valid & TM_GPU_HAVE_THROTTLE ? (double)s->throttle_reasons : NAN},
        };
        int rc = tm_sysrec_put(w, t_ns, labels, vals, TM_ARRAY_LEN(vals));
        if (rc < 0)
            return rc;
        for (size_t j = 0; (s->valid & TM_GPU_HAVE_PROCS) && j < s->nprocs; j++) {
            const tm_gpu_proc *p = &s->procs[j];
            snprintf(labels, sizeof labels, "gpu=%u,pid=%d", s->index, (int)p->pid);
            const struct tm_sysrec_val pv[] = {
                {TM_SER_GPU_PROCESS_MEMORY_BYTES, "B", p->mem_valid ? (double)p->used_bytes : NAN},
                {TM_SER_GPU_PROCESS_SM_UTILIZATION, "ratio", p->sm_util / 100.0},
            };
            rc = tm_sysrec_put(w, t_ns, labels, pv, TM_ARRAY_LEN(pv));
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}
