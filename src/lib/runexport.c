/*
 * runexport.c - a loaded run (tm_run) as a Chrome/Perfetto trace and as
 * TensorBoard event files, on top of chrome.c and tbevent.c, so that
 * `trainmon export --format chrome|tensorboard` is one call each.
 *
 * Chrome: one process per record file (pid = its index + 1, named "rank R"
 * or after the file), tid 1 = steps (with the data wait and the model run
 * under no_grad before the training forward as child slices),
 * tid 2 = phases (enter/exit pairs; one left open ends at the file's last
 * record), tid 3 = what stopped the training thread inside its steps
 * (stops.c's table: torch.compile's compilations, blocking checkpoint
 * saves, the collector's pauses; nested, as they happen inside one another),
 * allocator bytes as counters, OOMs as instants; the system file's
 * disk rates and GPU utilization and memory as counters.
 *
 * TensorBoard: OUT/rank<R>/ (or OUT/<file>/ for a file without a rank)
 * with step_time_s and data_wait_s per step and gpu_allocated_bytes,
 * gpu_reserved_bytes per capture (at the capture's step); OUT/system/ with
 * every system series as scalars tagged "<series>/<labels>", step = the
 * point's index.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runsum.h"
#include "series.h"
#include "stops.h"
#include "util.h"

/* System series drawn as Chrome counters: name, counter key, scale. */
static const struct {
    const char *series, *key;
    double scale;
} chrome_counters[] = {
    {TM_SER_DISK_READ_BYTES_PER_SECOND, "read_MB_s", 1.0 / 1048576.0},
    {TM_SER_DISK_WRITE_BYTES_PER_SECOND, "write_MB_s", 1.0 / 1048576.0},
    {TM_SER_GPU_UTILIZATION, "utilization", 1.0},
    {TM_SER_GPU_MEMORY_USED_BYTES, "memory_used_bytes", 1.0},
};

/* The value of "key": in js (a string's text or a number's), kept to
 * [A-Za-z0-9_!/.-] and cap - 1 bytes; "" when absent.  The JSON is the
 * writer's and not trusted. */
static void event_word(const char *js, const char *key, char *out, size_t cap)
{
    char pat[40];
    size_t k = 0;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(js, pat);
    if (p) {
        p += strlen(pat);
        if (*p == '"')
            p++;
        for (; *p && *p != '"' && *p != ',' && *p != '}' && k + 1 < cap; p++)
            if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                *p == '_' || *p == '!' || *p == '/' || *p == '.' || *p == '-')
                out[k++] = *p;
    }
    out[k] = '\0';
}

static int chrome_stop_slices(tm_chrome *c, const tm_run *r)
{
    const tm_run_event *ev;
    size_t n = tm_run_events(r, &ev);
    int rc = 0;
    for (size_t i = 0; i < n && rc >= 0; i++) {
        double d;
        int k = ev[i].name && ev[i].json ? tm_stop_of(ev[i].name, strlen(ev[i].name), ev[i].json,
                                                      strlen(ev[i].json), &d, NULL)
                                         : -1;
        if (k < 0)
            continue;
        const tm_stop_def *sd = tm_stop_def_at((size_t)k);
        int64_t dur = (int64_t)llround(d * 1e9);
        char word[32], name[96], args[64];
        event_word(ev[i].json, sd->key, word, sizeof word);
        snprintf(name, sizeof name, "%s%s%s", sd->label, word[0] ? " " : "", word);
        snprintf(args, sizeof args, "{\"dur_s\":%.6f}", d);
        rc = tm_chrome_slice(c, (int)ev[i].source + 1, 3, name, tm_sat_sub64(ev[i].t_ns, dur), dur,
                             args);
    }
    return rc;
}

static void source_label(const tm_run_source *s, char *buf, size_t cap)
{
    if (s->header.rank >= 0)
        snprintf(buf, cap, "rank %d", (int)s->header.rank);
    else
        snprintf(buf, cap, "%s", s->file);
    size_t len = strlen(buf);
    if (len > 4 && strcmp(buf + len - 4, ".tmr") == 0)
        buf[len - 4] = '\0';
    if (s->header.host[0]) {
        len = strlen(buf);
        snprintf(buf + len, cap - len, " (%.*s)", (int)sizeof s->header.host, s->header.host);
    }
}

#define PHASE_DEPTH_MAX 64

int tm_export_chrome(const tm_run *r, const char *path, size_t *clipped)
{
    tm_chrome *c = NULL;
    int rc = tm_chrome_open(&c, path);
    if (rc < 0)
        return rc;
    const tm_run_source *src;
    size_t nsrc = tm_run_sources(r, &src);
    char name[256], args[256];
    for (size_t i = 0; i < nsrc && rc >= 0; i++) {
        source_label(&src[i], name, sizeof name);
        rc = tm_chrome_process_name(c, (int)i + 1, name);
        if (rc >= 0)
            rc = tm_chrome_thread_name(c, (int)i + 1, 1, "steps");
        if (rc >= 0)
            rc = tm_chrome_thread_name(c, (int)i + 1, 2, "phases");
        if (rc >= 0)
            rc = tm_chrome_thread_name(c, (int)i + 1, 3, "stops");
    }

    const tm_run_step *st;
    size_t n = tm_run_steps(r, &st);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        const tm_inproc_step *s = &st[i].s;
        if (s->end_ns < s->start_ns)
            continue;
        int pid = (int)st[i].source + 1;
        snprintf(name, sizeof name, "step %llu", (unsigned long long)s->step);
        snprintf(args, sizeof args, "{\"step\":%llu,\"data_wait_s\":%.9g}",
                 (unsigned long long)s->step, (double)s->data_wait_ns / 1e9);
        rc = tm_chrome_slice(c, pid, 1, name, s->start_ns, tm_sat_sub64(s->end_ns, s->start_ns),
                             args);
        if (rc >= 0 && s->data_wait_ns > 0)
            rc = tm_chrome_slice(c, pid, 1, "data wait", s->start_ns, s->data_wait_ns, NULL);
        /* the model run without gradients (steps.no_grad): from the
         * preparation's end, the step's first module call */
        if (rc >= 0 && s->nograd_calls > 0 && s->nograd_ns > 0 && s->prep_ns >= 0) {
            snprintf(name, sizeof name, "no_grad (%d call%s)", (int)s->nograd_calls,
                     s->nograd_calls == 1 ? "" : "s");
            rc = tm_chrome_slice(c, pid, 1, name, tm_sat_add64(s->start_ns, s->prep_ns),
                                 s->nograd_ns, NULL);
        }
    }

    if (rc >= 0)
        rc = chrome_stop_slices(c, r);

    /* Phases: enter/exit pairs per source, matched by a stack. */
    const tm_run_phase *ph;
    n = tm_run_phases(r, &ph);
    struct open_phase {
        int64_t t;
        const char *name;
    } stack[PHASE_DEPTH_MAX];
    size_t depth = 0;
    for (size_t i = 0; i <= n && rc >= 0; i++) {
        bool new_source = i == n || (i > 0 && ph[i].source != ph[i - 1].source);
        if (new_source && i > 0) { /* close what the previous source left open */
            uint32_t s = ph[i - 1].source;
            int64_t end = src[s].last_ns;
            while (depth && rc >= 0) {
                depth--;
                if (end >= stack[depth].t)
                    rc = tm_chrome_slice(c, (int)s + 1, 2, stack[depth].name, stack[depth].t,
                                         tm_sat_sub64(end, stack[depth].t), NULL);
            }
        }
        if (i == n)
            break;
        const tm_run_phase *p = &ph[i];
        if (p->p.kind == TM_PHASE_ENTER) {
            if (depth < PHASE_DEPTH_MAX)
                stack[depth++] = (struct open_phase){.t = p->t_ns, .name = p->p.name};
            continue;
        }
        /* An exit closes the innermost phase of its name (and any opened
         * inside it whose exit was lost). */
        size_t k = depth;
        while (k && strcmp(stack[k - 1].name, p->p.name) != 0)
            k--;
        if (!k)
            continue;
        while (depth >= k && rc >= 0) {
            depth--;
            if (p->t_ns >= stack[depth].t)
                rc = tm_chrome_slice(c, (int)p->source + 1, 2, stack[depth].name, stack[depth].t,
                                     tm_sat_sub64(p->t_ns, stack[depth].t), NULL);
            if (depth == k - 1)
                break;
        }
    }

    const tm_run_capture *cap;
    n = tm_run_captures(r, &cap);
    static const char *const mem_keys[] = {"allocated", "reserved", "peak_allocated"};
    for (size_t i = 0; i < n && rc >= 0; i++) {
        double v[] = {cap[i].c.allocated, cap[i].c.reserved, cap[i].c.peak_allocated};
        rc = tm_chrome_counter(c, (int)cap[i].source + 1, "gpu_mem bytes", cap[i].t_ns, mem_keys, v,
                               3);
    }

    const tm_run_oom *oom;
    n = tm_run_ooms(r, &oom);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        const tm_inproc_oom *o = &oom[i].o;
        snprintf(args, sizeof args,
                 "{\"device\":%d,\"step\":%llu,\"requested\":%.15g,\"free\":%.15g}", (int)o->device,
                 (unsigned long long)o->step, isfinite(o->requested) ? o->requested : -1,
                 isfinite(o->free_device) ? o->free_device : -1);
        rc = tm_chrome_instant(c, (int)oom[i].source + 1, 1, "out of memory", oom[i].t_ns, 'p',
                               args);
    }

    const tm_run_series *se;
    n = tm_run_series_list(r, &se);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        size_t k;
        for (k = 0; k < TM_ARRAY_LEN(chrome_counters); k++)
            if (strcmp(se[i].name, chrome_counters[k].series) == 0)
                break;
        if (k == TM_ARRAY_LEN(chrome_counters))
            continue;
        char dev[64] = "";
        if (!tm_labels_get(se[i].labels, "device", dev, sizeof dev))
            tm_labels_get(se[i].labels, "gpu", dev, sizeof dev);
        snprintf(name, sizeof name, "%s %s",
                 strncmp(se[i].name, TM_SER_GPU_PREFIX, strlen(TM_SER_GPU_PREFIX)) ? "disk" : "gpu",
                 dev);
        const char *key = chrome_counters[k].key;
        for (size_t j = 0; j < se[i].n && rc >= 0; j++) {
            double v = se[i].v[j] * chrome_counters[k].scale;
            rc = tm_chrome_counter(c, (int)se[i].source + 1, name, se[i].t_ns[j], &key, &v, 1);
        }
    }
    int crc = tm_chrome_close(&c, clipped);
    return rc < 0 ? rc : crc;
}

/* The output directory and its per-source directories: made 0755 (event
 * files are meant to be read by TensorBoard, often another user), never
 * through a symlink, and an existing one must be the caller's and not
 * writable by others (a root export must not write into a directory
 * someone else controls). */
static int tb_mkdir(const char *path)
{
    bool created;
    int fd = tm_dir_make_private(path, 0755, TM_SAFE_PARENTS, &created);
    if (fd < 0)
        return fd;
    close(fd);
    return 0;
}

/* The writer of source s, opened on first use in OUT/<rankR|file>/. */
static int tb_writer_for(tm_tb_writer **w, const char *out, const tm_run_source *s, int64_t wall_ns)
{
    if (*w)
        return 0;
    char dir[4096], base[128];
    if (s->header.rank >= 0)
        snprintf(base, sizeof base, "rank%d", (int)s->header.rank);
    else
        snprintf(base, sizeof base, "%s", s->file);
    size_t len = strlen(base);
    if (len > 4 && strcmp(base + len - 4, ".tmr") == 0)
        base[len - 4] = '\0';
    if (snprintf(dir, sizeof dir, "%s/%s", out, base) >= (int)sizeof dir)
        return tm_seterr(-ENAMETOOLONG, "%s: path too long", out);
    int rc = tb_mkdir(dir);
    if (rc < 0)
        return rc;
    return tm_tb_open(w, dir, (double)wall_ns / 1e9);
}

int tm_export_tensorboard(const tm_run *r, const char *out)
{
    int rc = tb_mkdir(out);
    if (rc < 0)
        return rc;
    const tm_run_source *src;
    size_t nsrc = tm_run_sources(r, &src);
    tm_tb_writer **w = calloc(nsrc ? nsrc : 1, sizeof *w);
    if (!w)
        return tm_seterr(-ENOMEM, "tensorboard: out of memory");

    const tm_run_step *st;
    size_t n = tm_run_steps(r, &st);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        const tm_inproc_step *s = &st[i].s;
        uint32_t k = st[i].source;
        rc = tb_writer_for(&w[k], out, &src[k], src[k].first_ns);
        double wall = (double)s->end_ns / 1e9;
        int64_t step = (int64_t)s->step;
        if (rc >= 0 && s->end_ns >= s->start_ns)
            rc = tm_tb_scalar(w[k], "step_time_s", step, wall,
                              (float)(tm_ns_diff_s(s->end_ns, s->start_ns)));
        if (rc >= 0 && s->data_wait_ns >= 0)
            rc = tm_tb_scalar(w[k], "data_wait_s", step, wall,
                              (float)((double)s->data_wait_ns / 1e9));
    }
    const tm_run_capture *cap;
    n = tm_run_captures(r, &cap);
    for (size_t i = 0; i < n && rc >= 0; i++) {
        uint32_t k = cap[i].source;
        rc = tb_writer_for(&w[k], out, &src[k], src[k].first_ns);
        double wall = (double)cap[i].t_ns / 1e9;
        int64_t step = (int64_t)cap[i].c.step;
        if (rc >= 0 && isfinite(cap[i].c.allocated))
            rc = tm_tb_scalar(w[k], "gpu_allocated_bytes", step, wall, (float)cap[i].c.allocated);
        if (rc >= 0 && isfinite(cap[i].c.reserved))
            rc = tm_tb_scalar(w[k], "gpu_reserved_bytes", step, wall, (float)cap[i].c.reserved);
    }
    /* System series: every series of files without a rank. */
    const tm_run_series *se;
    n = tm_run_series_list(r, &se);
    char tag[512];
    for (size_t i = 0; i < n && rc >= 0; i++) {
        uint32_t k = se[i].source;
        if (src[k].header.rank >= 0)
            continue;
        rc = tb_writer_for(&w[k], out, &src[k], src[k].first_ns);
        if (se[i].labels[0])
            snprintf(tag, sizeof tag, "%s/%s", se[i].name, se[i].labels);
        else
            snprintf(tag, sizeof tag, "%s", se[i].name);
        for (size_t j = 0; j < se[i].n && rc >= 0; j++)
            if (isfinite(se[i].v[j]))
                rc = tm_tb_scalar(w[k], tag, (int64_t)j, (double)se[i].t_ns[j] / 1e9,
                                  (float)se[i].v[j]);
    }
    for (size_t k = 0; k < nsrc; k++) {
        int crc = tm_tb_close(&w[k]);
        if (rc >= 0 && crc < 0)
            rc = crc;
    }
    free(w);
    return rc < 0 ? rc : 0;
}
