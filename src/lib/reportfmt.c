/*
 * reportfmt.c - the report of `trainmon report`: the run, a summary and
 * the findings, as text for people or as one JSON object
 * (docs/DIAGNOSIS.md, "JSON").  Numbers come from the analysis (the
 * summary of runsum.c, the findings of rules_*.c); this file only lays
 * them out.  Unavailable numbers are null in JSON and "n/a" (or
 * left out) in text, never 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "analysis.h"
#include "anatomy.h"
#include "prom.h"
#include "reportfmt.h"
#include "units.h"
#include "util.h"

bool tm_rpt_first_of_host(const tm_run_source *src, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (strcmp(src[j].header.host, src[i].header.host) == 0)
            return false;
    return true;
}

bool tm_rpt_pid_rank(const tm_run *r, long pid, const char *on_host, char *buf, size_t cap)
{
    const tm_run_source *src;
    size_t ns = tm_run_sources(r, &src);
    const char *host = NULL;
    char name[64] = "";
    for (size_t i = 0; i < ns; i++) {
        const tm_rec_header *h = &src[i].header;
        if (h->pid != pid || h->rank < 0 || !tm_rec_is_training(h) ||
            (on_host && strcmp(on_host, h->host) != 0))
            continue;
        if (host && strcmp(host, h->host) != 0)
            return false;
        if (!host)
            snprintf(name, sizeof name, "rank %d", (int)h->rank);
        host = h->host;
    }
    const tm_run_worker *wk;
    size_t nw = tm_run_workers(r, &wk);
    for (size_t i = 0; i < nw; i++) {
        if (wk[i].w.pid != (uint32_t)pid || wk[i].rank < 0 || wk[i].source >= ns)
            continue;
        const char *h = src[wk[i].source].header.host;
        if (on_host && strcmp(on_host, h) != 0)
            continue;
        if (host && strcmp(host, h) != 0)
            return false;
        if (!host)
            snprintf(name, sizeof name, "rank %d worker %d", (int)wk[i].rank,
                     (int)wk[i].w.worker_id);
        host = h;
    }
    if (!host)
        return false;
    snprintf(buf, cap, "%s", name);
    return true;
}

bool tm_rpt_pid_name(void *run, long pid, char *buf, size_t cap)
{
    return tm_rpt_pid_rank(run, pid, NULL, buf, cap);
}

bool tm_rpt_compile_line(char *buf, size_t cap, const tm_an_summary *S)
{
    if (!(S->compile_n > 0 && S->compile_loop_s > 0))
        return false;
    char x[32], y[32];
    tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->compile_s);
    tm_unit_fmt(y, sizeof y, TM_UNIT_SECONDS, S->compile_late_s);
    snprintf(buf, cap,
             "%zu compilations (%zu recompilations), %s (%.1f%% of the loop), %s after "
             "warm-up",
             S->compile_n, S->compile_recompiles, x,
             100 * fmin(1, S->compile_s / S->compile_loop_s), y);
    return true;
}

const char *tm_rpt_inference_line(const struct tm_an_summary *S)
{
    if (!S->infer_procs)
        return NULL;
    return S->infer_procs >= S->step_procs
               ? "an inference loop: no backward pass, no optimizer; each DataLoader batch is a "
                 "step"
               : "some processes only infer (no backward pass, no optimizer): their DataLoader "
                 "batches are their steps";
}

void tm_rpt_iso_time(char *buf, size_t cap, int64_t ns)
{
    time_t s = (time_t)(ns / 1000000000);
    struct tm tm;
    if (ns <= 0 || !gmtime_r(&s, &tm)) {
        snprintf(buf, cap, "n/a");
        return;
    }
    char d[32];
    strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%03dZ", d, (int)((ns / 1000000) % 1000));
}

/* tm_text_printf takes short formats only: long texts go through this. */
static void tx_line(tm_text *t, const char *prefix, const char *s, size_t len)
{
    tm_text_puts(t, prefix);
    tm_text_add(t, s, len);
    tm_text_puts(t, "\n");
}

static void j_num(tm_text *t, double v)
{
    if (!isfinite(v))
        tm_text_puts(t, "null");
    else if (v == floor(v) && fabs(v) < 9e18)
        tm_text_printf(t, "%.0f", v);
    else
        tm_text_printf(t, "%.6g", v);
}

static void j_kn(tm_text *t, const char *k, double v, bool comma)
{
    tm_text_printf(t, "%s\"%s\":", comma ? "," : "", k);
    j_num(t, v);
}

static void j_ks(tm_text *t, const char *k, const char *s, bool comma)
{
    tm_text_printf(t, "%s\"%s\":", comma ? "," : "", k);
    tm_text_json_str(t, s);
}

/* The raw text of a JSON array of strings under top-level key "key" in
 * meta.json, checked to be exactly that (so that it can be copied into
 * the report), or NULL with *len 0. */
const char *tm_rpt_meta_str_array(const char *meta, const char *key, size_t *len)
{
    *len = 0;
    if (!meta)
        return NULL;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(meta, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p++ != ':')
        return NULL;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    const char *start = p;
    if (*p++ != '[')
        return NULL;
    bool want_value = true, any = false;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (*p == ']' && (!any || !want_value)) {
            *len = (size_t)(p + 1 - start);
            return start;
        }
        if (want_value) {
            if (*p++ != '"')
                return NULL;
            while (*p != '"') {
                unsigned char c = (unsigned char)*p;
                if (c < 0x20)
                    return NULL;
                if (c == '\\') {
                    p++;
                    if (*p == 'u') {
                        for (int i = 1; i <= 4; i++)
                            if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                                return NULL;
                        p += 4;
                    } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                        return NULL;
                    }
                }
                p++;
            }
            p++;
            any = true;
            want_value = false;
        } else {
            if (*p++ != ',')
                return NULL;
            want_value = true;
        }
    }
}

static void write_run_json(tm_text *t, const tm_run *r)
{
    const char *const *dirs;
    size_t nd = tm_run_dirs(r, &dirs);
    const tm_run_source *src;
    size_t ns = tm_run_sources(r, &src);
    int64_t s0, s1;
    tm_run_span(r, &s0, &s1);
    char a[48], b[48];
    tm_rpt_iso_time(a, sizeof a, s0);
    tm_rpt_iso_time(b, sizeof b, s1);
    tm_text_puts(t, "\"run\":{\"dirs\":[");
    for (size_t i = 0; i < nd; i++) {
        if (i)
            tm_text_puts(t, ",");
        tm_text_json_str(t, dirs[i]);
    }
    tm_text_puts(t, "],\"hosts\":[");
    for (size_t i = 0, k = 0; i < ns; i++) {
        if (!tm_rpt_first_of_host(src, i))
            continue;
        if (k++)
            tm_text_puts(t, ",");
        tm_text_json_str(t, src[i].header.host);
    }
    tm_text_puts(t, "],\"command\":");
    size_t len = 0;
    const char *cmd = NULL;
    for (size_t i = 0; i < nd && !cmd; i++)
        cmd = tm_rpt_meta_str_array(tm_run_meta(r, i), "command", &len);
    if (cmd) /* checked JSON; its strings may still hold ill-formed UTF-8 */
        tm_text_esc(t, TM_ESC_UTF8, cmd, len);
    else
        tm_text_puts(t, "null");
    j_ks(t, "start", a, true);
    j_ks(t, "end", b, true);
    tm_text_printf(t, ",\"start_ns\":%" PRId64, s0);
    j_kn(t, "duration_s", tm_ns_diff_s(s1, s0), true);
    tm_text_puts(t, ",\"files\":[");
    for (size_t i = 0; i < ns; i++) {
        tm_text_puts(t, i ? ",{" : "{");
        j_ks(t, "file", src[i].path, false);
        j_ks(t, "role", src[i].header.role, true);
        j_kn(t, "rank", src[i].header.rank >= 0 ? (double)src[i].header.rank : NAN, true);
        j_ks(t, "host", src[i].header.host, true);
        j_kn(t, "records", (double)src[i].records, true);
        j_kn(t, "damaged_places", (double)src[i].ndamage, true);
        tm_text_printf(t, ",\"torn_tail\":%s}", src[i].torn_tail ? "true" : "false");
    }
    tm_text_puts(t, "]}");
}

/* "ring": what flight-recorder rings dropped (tm_run_ring_summary), null
 * when no training file is a ring. */
static void write_ring_json(tm_text *t, const tm_run *r)
{
    tm_ringinfo ri;
    tm_text_puts(t, ",\"ring\":");
    if (!tm_run_ring_summary(r, &ri)) {
        tm_text_puts(t, "null");
        return;
    }
    char when[48];
    tm_rpt_iso_time(when, sizeof when, ri.kept_from_ns);
    tm_text_printf(t,
                   "{\"files\":%" PRIu32 ",\"steps_total\":%" PRIu64 ",\"steps_dropped\":%" PRIu64,
                   ri.source, ri.steps_total, ri.steps_dropped);
    if (ri.steps_dropped)
        tm_text_printf(t, ",\"kept_from\":\"%s\",\"kept_from_ns\":%" PRId64 "}", when,
                       ri.kept_from_ns);
    else
        tm_text_puts(t, ",\"kept_from\":null,\"kept_from_ns\":null}");
}

/* The rank label of source src ("0", "pid42"), or "?". */
static const char *src_label(const tm_analysis *a, uint32_t src)
{
    for (size_t i = 0; i < a->nranks; i++)
        if (a->ranks[i].source == src)
            return a->ranks[i].label;
    return "?";
}

/* The memory anatomy (anatomy.h): the latest record of each device of each
 * process, bytes as recorded (null: unknown). */
static void write_anatomy_json(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = tm_anat_latest(r, UINT32_MAX, rows, TM_ANAT_MAX);
    tm_text_puts(t, ",\"anatomy\":[");
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &rows[i]->a;
        char dev[64];
        tm_anat_device(dev, sizeof dev, x);
        tm_text_puts(t, i ? ",{" : "{");
        j_ks(t, "rank", src_label(a, rows[i]->source), false);
        j_ks(t, "device", dev, true);
        j_kn(t, "step", (double)x->step, true);
        j_kn(t, "params_bytes", x->params, true);
        j_kn(t, "grads_bytes", x->grads, true);
        j_kn(t, "optim_state_bytes", x->optim_state, true);
        j_kn(t, "activations_bytes", x->activations, true);
        j_kn(t, "unknown_bytes", x->unknown, true);
        j_kn(t, "allocated_bytes", x->allocated, true);
        j_kn(t, "device_free_bytes", x->free_device, true);
        j_kn(t, "device_total_bytes", x->total_device, true);
        j_kn(t, "batch_size", x->batch_size >= 0 ? (double)x->batch_size : NAN, true);
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "]");
}

static void write_anatomy_text(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    const tm_run_anatomy *rows[TM_ANAT_MAX];
    size_t n = tm_anat_latest(r, UINT32_MAX, rows, TM_ANAT_MAX);
    if (!n)
        return;
    tm_text_puts(t, "  memory anatomy (at the lead optimizer's step; activations: allocated at "
                    "the next backward's start beyond the rest)\n");
    tm_text_printf(t, "  %-8s %-8s %10s %10s %10s %11s %10s %6s\n", "rank", "device", "params",
                   "grads", "opt_state", "activations", "unknown", "step");
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_anatomy *x = &rows[i]->a;
        char dev[64], c[5][24];
        tm_anat_device(dev, sizeof dev, x);
        tm_anat_bytes(c[0], sizeof c[0], x->params);
        tm_anat_bytes(c[1], sizeof c[1], x->grads);
        tm_anat_bytes(c[2], sizeof c[2], x->optim_state);
        tm_anat_bytes(c[3], sizeof c[3], x->activations);
        tm_anat_bytes(c[4], sizeof c[4], x->unknown);
        tm_text_printf(t, "  %-8s %-8s %10s %10s %10s %11s %10s %6" PRIu64 "\n",
                       src_label(a, rows[i]->source), dev, c[0], c[1], c[2], c[3], c[4], x->step);
    }
}

static void write_summary_json(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    const tm_an_summary *S = &a->sum;
    tm_text_puts(t, "\"summary\":{");
    j_kn(t, "steps", (double)S->steps, false);
    j_kn(t, "steps_total", (double)S->steps_total, true);
    write_ring_json(t, r);
    j_kn(t, "step_time_median_s", S->step_median_s, true);
    j_kn(t, "compute_time_median_s", S->compute_median_s, true);
    j_kn(t, "data_wait_fraction", S->data_wait_fraction, true);
    j_kn(t, "eval_steps", (double)S->eval_steps, true);
    j_kn(t, "inference_processes", (double)S->infer_procs, true);
    j_kn(t, "checkpoints", (double)S->ckpt_saves, true);
    j_kn(t, "checkpoint_time_s", S->ckpt_saves ? S->ckpt_s : NAN, true);
    j_kn(t, "checkpoint_share",
         S->ckpt_saves && S->ckpt_loop_s > 0 ? S->ckpt_s / S->ckpt_loop_s : NAN, true);
    j_kn(t, "checkpoints_outside_loop", (double)S->ckpt_outside, true);
    j_kn(t, "checkpoints_background", (double)S->ckpt_bg_saves, true);
    j_kn(t, "compilations", (double)S->compile_n, true);
    j_kn(t, "compile_time_s", S->compile_n ? S->compile_s : NAN, true);
    j_kn(t, "compile_share", S->compile_n ? S->compile_s / S->compile_loop_s : NAN, true);
    j_kn(t, "recompilations", (double)S->compile_recompiles, true);
    j_kn(t, "compile_time_after_warmup_s", S->compile_n ? S->compile_late_s : NAN, true);
    j_kn(t, "gc_pauses", (double)S->gc_pauses, true);
    j_kn(t, "gc_pause_time_s", S->gc_pauses ? S->gc_s : NAN, true);
    j_kn(t, "gc_pause_share", S->gc_pauses ? S->gc_share : NAN, true);
    j_kn(t, "gc_full_collections", (double)S->gc_full, true);
    j_kn(t, "gc_wait_fraction", S->gc_wait_fraction, true);
    j_kn(t, "stalls", (double)S->stall_n, true);
    j_kn(t, "stall_every_steps", tm_an_stalls_claimed(S) ? S->stall_every : NAN, true);
    j_kn(t, "stall_excess_share", S->stall_n ? S->stall_share : NAN, true);
    j_kn(t, "stall_wait_fraction", S->stall_wait_fraction, true);
    j_kn(t, "no_grad_share", S->nograd_share, true);
    j_kn(t, "no_grad_steps", (double)S->nograd_steps, true);
    j_kn(t, "no_grad_time_s", S->nograd_s, true);
    j_kn(t, "no_grad_calls", S->nograd_calls, true);
    j_kn(t, "eval_time_s", S->nograd_eval_s, true);
    j_kn(t, "gpu_utilization_mean", S->gpu_util_mean, true);
    j_kn(t, "gpus", (double)S->ngpus, true);
    j_kn(t, "gpus_recorded", (double)S->ngpus_recorded, true);
    tm_text_puts(t, ",\"disk\":");
    if (S->disk[0]) {
        tm_text_puts(t, "{");
        j_ks(t, "device", S->disk, false);
        j_kn(t, "read_bytes_per_second", S->disk_read_bps, true);
        j_kn(t, "read_bytes_per_second_max", S->disk_read_bps_max, true);
        j_kn(t, "read_await_s", S->disk_await_s, true);
        j_kn(t, "utilization", S->disk_util, true);
        j_kn(t, "queue_depth", S->disk_queue, true);
        j_kn(t, "reads_per_second", S->disk_reads_s, true);
        j_kn(t, "read_request_bytes", S->disk_req_bytes, true);
        tm_text_puts(t, "}");
    } else {
        tm_text_puts(t, "null");
    }
    /* the dataset behind -d and its page-cache share (collect_dscache.c) */
    tm_text_puts(t, ",\"dataset\":");
    if (S->ds_bytes >= 0) {
        tm_text_puts(t, "{");
        j_kn(t, "files", S->ds_files, false);
        tm_text_printf(t, ",\"walk_complete\":%s", S->ds_complete ? "true" : "false");
        j_kn(t, "bytes", S->ds_bytes, true);
        j_kn(t, "cached_fraction_start", S->ds_cached_start, true);
        j_kn(t, "cached_fraction_end", S->ds_cached_end, true);
        j_kn(t, "memory_total_bytes", S->ds_memory, true);
        tm_text_puts(t, "}");
    } else {
        tm_text_puts(t, "null");
    }
    j_kn(t, "io_pressure_some", S->psi_io_some, true);
    j_kn(t, "usable_cpus", S->usable_cpus, true);
    j_kn(t, "online_cpus", S->online_cpus, true);
    j_kn(t, "torch_threads", S->torch_threads, true);
    j_kn(t, "runnable_threads", S->runnable_threads, true);
    j_kn(t, "workers", (double)S->workers, true);
    j_kn(t, "worker_batch_time_median_s", S->worker_batch_median_s, true);
    j_kn(t, "worker_cpu_per_fetch_second", S->worker_busy, true);
    j_kn(t, "worker_d_state_share", S->worker_d_share, true);
    j_kn(t, "worker_fetch_share", S->worker_util, true);
    j_kn(t, "worker_cpu_per_batch_s", S->worker_cpu_per_batch_s, true);
    j_kn(t, "worker_restarts", (double)S->worker_restarts, true);
    j_kn(t, "wait_per_batch_median_s", S->wait_per_batch_s, true);
    j_kn(t, "receive_cpu_share", S->recv_cpu_share, true);
    tm_text_puts(t, ",\"ranks\":[");
    for (size_t i = 0; i < a->nranks; i++) {
        const tm_an_rank *R = &a->ranks[i];
        tm_text_puts(t, i ? ",{" : "{");
        j_ks(t, "rank", R->label, false);
        j_ks(t, "host", R->host, true);
        j_kn(t, "steps", (double)R->steps, true);
        j_kn(t, "step_time_median_s", R->step_median_s, true);
        j_kn(t, "compute_time_median_s", R->compute_median_s, true);
        j_kn(t, "data_wait_fraction", R->data_wait_fraction, true);
        j_kn(t, "peak_allocated_bytes", R->peak_allocated, true);
        j_kn(t, "peak_reserved_bytes", R->peak_reserved, true);
        j_kn(t, "device_total_bytes", R->total_device, true);
        j_kn(t, "host_rss_peak_bytes", R->host_rss_peak, true);
        j_kn(t, "alloc_retries", R->alloc_retries, true);
        j_kn(t, "ooms", (double)R->ooms, true);
        j_kn(t, "workers", (double)R->workers, true);
        j_kn(t, "worker_batch_time_median_s", R->worker_batch_median_s, true);
        j_kn(t, "backward_time_median_s", R->backward_median_s, true);
        j_kn(t, "collective_time_median_s", R->collective_median_s, true);
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "]");
    write_anatomy_json(t, r, a);
    tm_text_puts(t, "}");
}

static void write_findings_json(tm_text *t, const tm_analysis *a)
{
    tm_text_puts(t, "\"findings\":[");
    for (size_t i = 0; i < a->nf; i++) {
        const tm_finding *f = &a->f[i];
        tm_text_puts(t, i ? ",{" : "{");
        j_ks(t, "id", f->id, false);
        j_ks(t, "severity", tm_severity_name(f->severity), true);
        j_ks(t, "confidence", tm_confidence_name(f->confidence), true);
        j_kn(t, "rank", f->rank >= 0 ? (double)f->rank : NAN, true);
        j_ks(t, "title", f->title, true);
        tm_text_puts(t, ",\"evidence\":");
        tm_text_puts(t, f->evidence);
        j_ks(t, "advice", f->advice, true);
        tm_text_puts(t, "}");
    }
    tm_text_puts(t, "]");
}

/* v with prec decimals and a suffix, or "n/a". */
void tm_rpt_fmt_num(char *buf, size_t cap, double v, int prec, const char *suffix)
{
    if (isfinite(v))
        snprintf(buf, cap, "%.*f%s", prec, v, suffix);
    else
        snprintf(buf, cap, "n/a");
}

/* The first sentence of s (up to a '.', '!' or '?' that ends s or is
 * followed by a space: "1.5 GiB" and "torch.compile" go on), at most cap
 * - 1 bytes of it, cut at a character boundary. */
static void first_sentence(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    while (s[n]) {
        if (strchr(".!?", s[n]) && (!s[n + 1] || s[n + 1] == ' ')) {
            n++;
            break;
        }
        n++;
    }
    if (n >= cap)
        n = tm_utf8_valid_prefix(s, cap - 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
}

void tm_rpt_headline(const tm_analysis *a, tm_rpt_head *h)
{
    memset(h, 0, sizeof *h);
    if (!a->nf)
        return;
    const tm_finding *f = h->f = &a->f[0];
    snprintf(h->verdict, sizeof h->verdict, "%s", f->title);
    if (h->verdict[0] >= 'a' && h->verdict[0] <= 'z')
        h->verdict[0] = (char)(h->verdict[0] - 'a' + 'A');
    first_sentence(h->remedy, sizeof h->remedy, f->advice);
    /* The cost, where the rule measured it (the input rules do) and its
     * title does not say it already (the input rules' titles end with
     * "..., about 1.7x faster if the input kept up", tm_an_input_cost). */
    if (strstr(f->title, " faster if "))
        return;
    bool input = strncmp(f->id, "input.", 6) == 0;
    double frac = tm_unit_evidence_num(f->evidence, "time_lost_fraction");
    double lost = tm_unit_evidence_num(f->evidence, "time_lost_s");
    double speedup = tm_unit_evidence_num(f->evidence, "speedup");
    char x[48], y[64], z[48];
    size_t n = 0;
    if (isfinite(frac) && frac > 0) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_FRACTION, frac);
        if (isfinite(lost))
            snprintf(y, sizeof y, " (%s)", tm_unit_fmt(z, sizeof z, TM_UNIT_SECONDS, lost));
        else
            y[0] = '\0';
        n = (size_t)snprintf(h->cost, sizeof h->cost, "%s of the run%s %s", x, y,
                             input ? "waiting for data" : "lost to it");
    } else if (isfinite(lost) && lost > 0) {
        n = (size_t)snprintf(h->cost, sizeof h->cost, "%s of the run %s",
                             tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, lost),
                             input ? "waiting for data" : "lost to it");
    }
    if (n >= sizeof h->cost)
        n = sizeof h->cost - 1;
    if (isfinite(speedup) && speedup > 1)
        snprintf(h->cost + n, sizeof h->cost - n, "%sabout %s faster if %s", n ? "; " : "",
                 tm_unit_fmt(x, sizeof x, TM_UNIT_FACTOR, speedup),
                 input ? "the input kept up" : "this were fixed");
}

/* The headline: verdict, cost, top remedy (tm_rpt_headline). */
static void write_headline_text(tm_text *t, const tm_analysis *a)
{
    tm_rpt_head h;
    tm_rpt_headline(a, &h);
    if (!h.f)
        return;
    tm_text_puts(t, "\nVerdict: ");
    tm_text_esc(t, TM_ESC_TEXT, h.verdict, strlen(h.verdict));
    if (h.f->rank >= 0)
        tm_text_printf(t, " (rank %d)", (int)h.f->rank);
    tm_text_puts(t, "\n");
    if (h.cost[0]) {
        tm_text_puts(t, "  ");
        tm_text_esc(t, TM_ESC_TEXT, h.cost, strlen(h.cost));
        tm_text_puts(t, ".\n");
    }
    if (h.remedy[0] && h.f->severity > TM_SEV_INFO) {
        tm_text_puts(t, "  Top remedy: ");
        tm_text_esc(t, TM_ESC_TEXT, h.remedy, strlen(h.remedy));
        tm_text_puts(t, "\n");
    }
}

/* The allocation sites of an OOM finding (gpu_mem.oom's site<k> and
 * site<k>_bytes evidence), one line each under it. */
static void write_sites_text(tm_text *t, const tm_finding *f)
{
    for (int k = 1; k <= TM_OOMSUM_SITES; k++) {
        char key[24];
        const char *v, *b;
        size_t vl, bl;
        snprintf(key, sizeof key, "site%d", k);
        if (!tm_unit_evidence_member(f->evidence, key, &v, &vl))
            break;
        tm_text_puts(t, "      site: ");
        tm_unit_json_value(t, TM_ESC_TEXT, key, strlen(key), v, vl, NULL, NULL);
        snprintf(key, sizeof key, "site%d_bytes", k);
        if (tm_unit_evidence_member(f->evidence, key, &b, &bl)) {
            tm_text_puts(t, " holds ");
            tm_unit_json_value(t, TM_ESC_TEXT, key, strlen(key), b, bl, NULL, NULL);
        }
        tm_text_puts(t, "\n");
    }
}

static void write_text(tm_text *t, const tm_run *r, const tm_analysis *a)
{
    const char *const *dirs;
    size_t nd = tm_run_dirs(r, &dirs);
    const tm_run_source *src;
    size_t ns = tm_run_sources(r, &src);
    int64_t s0, s1;
    tm_run_span(r, &s0, &s1);
    char x[48], y[48], z[48];
    tm_rpt_iso_time(x, sizeof x, s0);
    tm_rpt_iso_time(y, sizeof y, s1);
    tm_text_puts(t, "trainmon report:");
    for (size_t i = 0; i < nd; i++) {
        tm_text_puts(t, " ");
        tm_text_puts(t, dirs[i]);
    }
    tm_text_printf(t, "\n  %s .. %s (%.0f s), %zu record files, host ", x, y, tm_ns_diff_s(s1, s0),
                   ns);
    tx_line(t, "", ns ? src[0].header.host : "?", ns ? strlen(src[0].header.host) : 1);
    size_t len = 0;
    const char *cmd = NULL;
    for (size_t i = 0; i < nd && !cmd; i++)
        cmd = tm_rpt_meta_str_array(tm_run_meta(r, i), "command", &len);
    if (cmd)
        tx_line(t, "  command: ", cmd, len);
    write_headline_text(t, a);

    const tm_an_summary *S = &a->sum;
    tm_text_puts(t, "\nSummary\n");
    /* A ring's kept steps are not the run's: say what it dropped. */
    tm_ringinfo ri;
    bool dropped = tm_run_ring_summary(r, &ri) && ri.steps_dropped;
    if (dropped)
        tm_rpt_iso_time(z, sizeof z, ri.kept_from_ns);
    if (a->nranks <= 1 && dropped)
        tm_text_printf(t,
                       "  steps              %" PRIu64 " (ring: the oldest %" PRIu64
                       " dropped; data kept from %s)\n",
                       ri.steps_total, ri.steps_dropped, z);
    else if (a->nranks <= 1)
        tm_text_printf(t, "  steps              %zu\n", S->steps_total);
    else
        tm_text_printf(t,
                       "  steps              %zu per process (the most), %zu over %zu processes\n",
                       S->steps, S->steps_total, a->nranks);
    if (tm_rpt_inference_line(S))
        tm_text_printf(t, "  inference          %s\n", tm_rpt_inference_line(S));
    if (a->nranks > 1 && dropped)
        tm_text_printf(t,
                       "  ring               %" PRIu64 " steps in all, the oldest %" PRIu64
                       " dropped; data kept from %s\n",
                       ri.steps_total, ri.steps_dropped, z);
    tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->step_median_s);
    tm_unit_fmt(y, sizeof y, TM_UNIT_SECONDS, S->compute_median_s);
    tm_text_printf(t, "  step time          median %s (compute %s)\n", x, y);
    tm_rpt_fmt_num(x, sizeof x, 100 * S->data_wait_fraction, 1, "%");
    tm_text_printf(t, "  waiting for data   %s of step time\n", x);
    if (S->ckpt_saves > 0 && S->ckpt_loop_s > 0 && isfinite(S->ckpt_loop_s)) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->ckpt_s);
        tm_text_printf(t,
                       "  checkpoints        %zu on the training thread, %s (%.1f%% of the loop)\n",
                       S->ckpt_saves, x, 100 * S->ckpt_s / S->ckpt_loop_s);
    }
    if (S->ckpt_bg_saves > 0)
        tm_text_printf(t, "  background saves   %zu torch.save call(s) beside the loop\n",
                       S->ckpt_bg_saves);
    if (tm_an_stalls_claimed(S)) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->stall_median_s);
        tm_text_printf(
            t, "  stalls             %zu steps of %s, every %.0f steps (%.1f%% of the loop)\n",
            S->stall_n, x, S->stall_every, 100 * S->stall_share);
    }
    if (S->nograd_share >= TM_AN_NOGRAD_SHARE && !S->infer_procs) {
        /* the model run without gradients (steps.no_grad) */
        if (S->nograd_steps > 0) {
            tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->nograd_s / (double)S->nograd_steps);
            tm_unit_fmt(y, sizeof y, TM_UNIT_SECONDS, S->nograd_eval_s);
            tm_text_printf(t,
                           "  no_grad runs       %zu of %zu steps, %.0f calls in %s each (%.1f%% "
                           "of the loop%s%s)\n",
                           S->nograd_steps, S->nograd_judged,
                           S->nograd_calls / (double)S->nograd_steps, x, 100 * S->nograd_share,
                           S->nograd_eval_s > 0 ? " with eval runs of " : "",
                           S->nograd_eval_s > 0 ? y : "");
        } else {
            tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->nograd_eval_s);
            tm_text_printf(t, "  eval runs          %s (%.1f%% of the loop)\n", x,
                           100 * S->nograd_share);
        }
    }
    char cl[192];
    if (tm_rpt_compile_line(cl, sizeof cl, S))
        tm_text_printf(t, "  torch.compile      %s\n", cl);
    if (S->gc_pauses > 0 && isfinite(S->gc_share)) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->gc_s);
        tm_unit_fmt(y, sizeof y, TM_UNIT_SECONDS, S->gc_max_s);
        tm_text_printf(
            t, "  Python GC          %zu pauses (%zu full), %s (%.1f%% of the loop), longest %s\n",
            S->gc_pauses, S->gc_full, x, 100 * S->gc_share, y);
    }
    if (!isnan(S->gpu_util_mean)) {
        char of[96];
        tm_an_gpus_of(of, sizeof of, S);
        tm_text_printf(t, "  GPU utilization    %.0f%% (%s)\n", 100 * S->gpu_util_mean, of);
    }
    if (S->disk[0]) {
        char w[48];
        tm_unit_fmt(w, sizeof w, TM_UNIT_BYTES_RATE, S->disk_read_bps);
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->disk_await_s);
        tm_unit_fmt(y, sizeof y, TM_UNIT_FRACTION, S->disk_util);
        tm_unit_fmt(z, sizeof z, TM_UNIT_BYTES_RATE, S->disk_read_bps_max);
        tm_text_printf(t, "  disk /dev/%-8s read %s mean (max %s), await %s, util %s\n", S->disk, w,
                       z, x, y);
    }
    if (!isnan(S->psi_io_some))
        tm_text_printf(t, "  I/O pressure       some %.0f%%\n", 100 * S->psi_io_some);
    /* The machine the job ran on (meta.json), not the one reading this. */
    if (!isnan(S->usable_cpus)) {
        tm_rpt_fmt_num(x, sizeof x, S->online_cpus, 0, " online");
        tm_text_printf(t, "  CPUs               %.3g usable (%s)", S->usable_cpus, x);
        if (!isnan(S->runnable_threads))
            tm_text_printf(t,
                           "; %.0f torch thread(s) x %zu rank(s) + %zu worker(s) = %.0f "
                           "runnable",
                           S->torch_threads, S->host_ranks, S->host_workers, S->runnable_threads);
        tm_text_puts(t, "\n");
    }
    if (S->workers) {
        tm_unit_fmt(x, sizeof x, TM_UNIT_SECONDS, S->worker_batch_median_s);
        tm_rpt_fmt_num(y, sizeof y, S->worker_busy, 2, "");
        tm_text_printf(t, "  workers            %zu, %s per batch, %s CPU s per s of fetching\n",
                       S->workers, x, y);
    }
    if (a->nranks) {
        tm_text_printf(t, "  %-8s %8s %10s %6s %11s %11s %11s %5s\n", "rank", "steps", "step_med",
                       "wait%", "peak_alloc", "peak_resv", "device", "ooms");
        for (size_t i = 0; i < a->nranks; i++) {
            const tm_an_rank *R = &a->ranks[i];
            char c1[24], c2[24], c3[24], c4[24], c5[24];
            tm_unit_fmt(c1, sizeof c1, TM_UNIT_SECONDS, R->step_median_s);
            tm_rpt_fmt_num(c2, sizeof c2, 100 * R->data_wait_fraction, 1, "");
            tm_rpt_fmt_num(c3, sizeof c3, R->peak_allocated / (1 << 30), 2, "G");
            tm_rpt_fmt_num(c4, sizeof c4, R->peak_reserved / (1 << 30), 2, "G");
            tm_rpt_fmt_num(c5, sizeof c5, R->total_device / (1 << 30), 2, "G");
            tm_text_printf(t, "  %-8s %8zu %10s %6s %11s %11s %11s %5zu\n", R->label, R->steps, c1,
                           c2, c3, c4, c5, R->ooms);
        }
    }
    write_anatomy_text(t, r, a);
    tm_text_puts(t, "\nFindings\n");
    if (!a->nf)
        tm_text_puts(t, "  none: no steps or memory samples to judge\n");
    for (size_t i = 0; i < a->nf; i++) {
        const tm_finding *f = &a->f[i];
        tm_text_printf(t, "  [%s] %s", tm_severity_name(f->severity), f->id);
        if (f->rank >= 0) /* by rank, as the ranks know themselves, not by pid */
            tm_text_printf(t, " (rank %d)", (int)f->rank);
        tx_line(t, ": ", f->title, strlen(f->title));
        /* Units for people (units.c); the JSON report keeps base units. */
        tm_text_puts(t, "      evidence: ");
        tm_unit_evidence_line(t, TM_ESC_TEXT, f->evidence, tm_rpt_pid_name, (void *)r);
        tm_text_puts(t, "\n");
        tx_line(t, "      advice: ", f->advice, strlen(f->advice));
        write_sites_text(t, f);
    }
    const char *const *notes;
    size_t nn = tm_run_notes(r, &notes);
    if (nn) {
        tm_text_puts(t, "\nDamage (reported from what is intact)\n");
        for (size_t i = 0; i < nn; i++)
            tx_line(t, "  ", notes[i], strlen(notes[i]));
    }
}

int tm_report_write(const tm_run *r, const tm_analysis *a, tm_text *out, bool json)
{
    tm_analysis *own = NULL;
    if (!a) {
        int rc = tm_analyze(r, &own);
        if (rc < 0)
            return rc;
        a = own;
    }
    if (json) {
        tm_text_puts(out, "{");
        write_run_json(out, r);
        tm_text_puts(out, ",");
        write_summary_json(out, r, a);
        tm_text_puts(out, ",");
        write_findings_json(out, a);
        tm_text_puts(out, ",\"damage\":[");
        const char *const *notes;
        size_t nn = tm_run_notes(r, &notes);
        for (size_t i = 0; i < nn; i++) {
            tm_text_puts(out, i ? ",{\"note\":" : "{\"note\":");
            tm_text_json_str(out, notes[i]);
            tm_text_puts(out, "}");
        }
        tm_text_puts(out, "]}\n");
    } else {
        write_text(out, r, a);
    }
    tm_analysis_free(&own);
    return tm_text_error(out);
}
