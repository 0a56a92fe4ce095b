/*
 * watch.c - `trainmon watch`: a live per-interval view of the disks behind
 * some paths (every physical disk if none), pressure stall information and,
 * with --pid, a process tree.  The iostat/pidstat replacement for when no
 * job is wrapped.  With -o DIR the same numbers are recorded into
 * DIR/system.tmr.
 *
 * The text output is one line per watched device per interval; pressure and
 * process-tree columns are printed on the first device line of an interval.
 * --json prints one object per interval whose "disk" list uses the keys and
 * units of `iostat -x -o JSON`, so scripts written for iostat read it
 * unchanged; everything else is in base units (bytes, seconds).
 *
 * --alert RULE / --on-alert CMD evaluate threshold rules on the sampled
 * values each interval (docs/ALERTS.md) and run the commands on firing and
 * on resolving, without waiting for them.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "trainmon.h"

#define WATCH_MAX_DEVS 256

static volatile sig_atomic_t watch_stop;

static void watch_on_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

static void watch_usage(FILE *f)
{
    fputs("usage: trainmon watch [PATH...] [--pid PID] [-i SEC] [-n COUNT] [--json] [-o DIR]\n"
          "                      [--max-size SIZE] [--gpu LIST]\n"
          "\n"
          "  PATH            watch the block device(s) behind PATH (a dataset directory,\n"
          "                  a file); default: every physical disk\n"
          "  -p, --pid PID   also watch the process tree rooted at PID (CPU, read rate,\n"
          "                  page-cache hit hint, processes in D state)\n"
          "  -i SEC          interval (default 1; accepts 500ms, 2s)\n"
          "  -n COUNT        stop after COUNT intervals (default: until interrupted)\n"
          "  --json          one JSON object per interval (iostat -o JSON keys for disks)\n"
          "  -o DIR          also record into the run directory DIR (DIR/system.tmr)\n"
          "  --max-size SIZE bound the recording (flight-recorder ring, e.g. 64M)\n"
          "  --gpu LIST      GPUs to watch: all (default), none, or indices like 0,2\n"
          "  --alert RULE    e.g. 'disk.r_await_ms > 50 for 3m' (repeatable; rules and\n"
          "                  metric names in docs/ALERTS.md); alerts are said on stderr\n"
          "  --on-alert CMD  run CMD (/bin/sh -c) on each alert firing and resolving,\n"
          "                  with the alert as JSON on stdin and TRAINMON_ALERT_* in\n"
          "                  the environment (repeatable: every command gets every alert)\n",
          f);
}

static void watch_sleep_until(int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000LL),
                          .tv_nsec = (long)(deadline_ns % 1000000000LL)};
    while (!watch_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void watch_fmt(char *buf, size_t cap, double v, int width, int prec)
{
    if (isnan(v))
        snprintf(buf, cap, "%*s", width, "-");
    else
        snprintf(buf, cap, "%*.*f", width, prec, v);
}

/* --- JSON output
 *
 * A line is built in a buffer and written with one fwrite, its numbers
 * through tm_fmt_fixed: with fprintf, stdio's per-call locking and glibc's
 * float formatting cost about as much as the sample the line describes
 * (docs/BENCHMARKS.md, "watch --json").  The buffer is flushed to the
 * stream when nearly full, so any number of disks and GPUs fits. */

struct jout {
    FILE *f;
    size_t len;
    char buf[16384];
};

/* Room for one number, printf's own text included (tm_fmt_fixed falls
 * back to it above 1e15). */
#define JOUT_NUM_ROOM 400

static void jflush(struct jout *j)
{
    if (j->len)
        fwrite(j->buf, 1, j->len, j->f);
    j->len = 0;
}

static inline void jput(struct jout *j, const char *s, size_t n)
{
    if (n > sizeof j->buf - j->len) {
        jflush(j);
        if (n > sizeof j->buf) {
            fwrite(s, 1, n, j->f);
            return;
        }
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
}

#define JLIT(j, lit) jput((j), (lit), sizeof(lit) - 1)

static void jputs(struct jout *j, const char *s)
{
    jput(j, s, strlen(s));
}

static inline void jfixed(struct jout *j, double v, int prec)
{
    if (sizeof j->buf - j->len < JOUT_NUM_ROOM)
        jflush(j);
    j->len += tm_fmt_fixed(j->buf + j->len, JOUT_NUM_ROOM, v, prec);
}

static int jesc_put(void *ctx, const char *p, size_t n)
{
    jput(ctx, p, n);
    return 0;
}

/* s as a JSON string (quotes included), as cli_json_str writes it. */
static void jstr(struct jout *j, const char *s)
{
    JLIT(j, "\"");
    tm_escape(TM_ESC_JSON, s, strlen(s), jesc_put, j);
    JLIT(j, "\"");
}

/* , "key": value with prec decimals, left out when unavailable (NaN).
 * key is a string literal: the separator, quotes and colon are pasted to
 * it at compile time and go out in one copy. */
#define JNUM(j, first, key, v, prec)                                                               \
    do {                                                                                           \
        double v_ = (v);                                                                           \
        if (isnan(v_))                                                                             \
            break;                                                                                 \
        if (*(first))                                                                              \
            JLIT((j), "\"" key "\": ");                                                            \
        else                                                                                       \
            JLIT((j), ", \"" key "\": ");                                                          \
        *(first) = false;                                                                          \
        jfixed((j), v_, (prec));                                                                   \
    } while (0)
#define json_num(j, first, key, v) JNUM(j, first, key, v, 2)
#define json_num_prec(j, first, key, v, prec) JNUM(j, first, key, v, prec)

static void json_psi(struct jout *f, bool *first, const char *key, const tm_psi *p)
{
    if (!*first)
        JLIT(f, ", ");
    *first = false;
    JLIT(f, "\"");
    jputs(f, key);
    JLIT(f, "\": {");
    bool f2 = true;
    if (p->has_some) {
        json_num(f, &f2, "some_avg10", p->some_avg10);
        json_num(f, &f2, "some_avg60", p->some_avg60);
        json_num(f, &f2, "some_avg300", p->some_avg300);
        json_num_prec(f, &f2, "some_total_seconds", (double)p->some_total_us / 1e6, 6);
    }
    if (p->has_full) {
        json_num(f, &f2, "full_avg10", p->full_avg10);
        json_num(f, &f2, "full_avg60", p->full_avg60);
        json_num(f, &f2, "full_avg300", p->full_avg300);
        json_num_prec(f, &f2, "full_total_seconds", (double)p->full_total_us / 1e6, 6);
    }
    JLIT(f, "}");
}

static void json_gpu(struct jout *f, const tm_gpu_stats *g, size_t n)
{
    JLIT(f, ", \"gpu\": [");
    for (size_t i = 0; i < n; i++) {
        const tm_gpu_stats *s = &g[i];
        if (i)
            JLIT(f, ", ");
        JLIT(f, "{\"index\": ");
        jfixed(f, (double)s->index, 0);
        JLIT(f, ", \"name\": ");
        jstr(f, s->name);
        JLIT(f, ", \"uuid\": ");
        jstr(f, s->uuid);
        jputs(f, s->lost ? ", \"lost\": true" : ", \"lost\": false");
        bool first = false;
        if (s->valid & TM_GPU_HAVE_MEM) {
            json_num_prec(f, &first, "memory_total_bytes", (double)s->mem_total, 0);
            json_num_prec(f, &first, "memory_used_bytes", (double)s->mem_used, 0);
            json_num_prec(f, &first, "memory_free_bytes", (double)s->mem_free, 0);
        }
        if (s->valid & TM_GPU_HAVE_MEM_RESERVED)
            json_num_prec(f, &first, "memory_reserved_bytes", (double)s->mem_reserved, 0);
        if (s->valid & TM_GPU_HAVE_UTIL) {
            json_num(f, &first, "utilization_gpu_percent", s->util_gpu);
            json_num(f, &first, "utilization_memory_percent", s->util_mem);
        }
        if (s->valid & TM_GPU_HAVE_TEMP)
            json_num(f, &first, "temperature_celsius", s->temp_c);
        if (s->valid & TM_GPU_HAVE_POWER)
            json_num(f, &first, "power_watts", s->power_w);
        if (s->valid & TM_GPU_HAVE_PCIE) {
            json_num_prec(f, &first, "pcie_rx_bytes_per_second", s->pcie_rx_bytes_s, 0);
            json_num_prec(f, &first, "pcie_tx_bytes_per_second", s->pcie_tx_bytes_s, 0);
        }
        if (s->valid & TM_GPU_HAVE_CLOCK)
            json_num_prec(f, &first, "sm_clock_mhz", s->sm_clock_mhz, 0);
        if (s->valid & TM_GPU_HAVE_THROTTLE) {
            const char *names[16];
            size_t k = tm_gpu_throttle_names(s->throttle_reasons, names, 16);
            JLIT(f, ", \"throttle_reasons\": [");
            for (size_t j = 0; j < k; j++) {
                if (j)
                    JLIT(f, ", ");
                jstr(f, names[j]);
            }
            JLIT(f, "]");
        }
        if (s->valid & TM_GPU_HAVE_PROCS) {
            JLIT(f, ", \"processes\": [");
            for (size_t j = 0; j < s->nprocs; j++) {
                const tm_gpu_proc *p = &s->procs[j];
                if (j)
                    JLIT(f, ", ");
                JLIT(f, "{\"pid\": ");
                jfixed(f, (double)p->pid, 0);
                bool pf = false;
                if (p->mem_valid)
                    json_num_prec(f, &pf, "used_memory_bytes", (double)p->used_bytes, 0);
                json_num(f, &pf, "sm_util_percent", p->sm_util);
                json_num(f, &pf, "mem_util_percent", p->mem_util);
                JLIT(f, "}");
            }
            JLIT(f, "]");
        }
        JLIT(f, "}");
    }
    JLIT(f, "]");
}

/* One line; a function of its own (never inlined) so that `make bench`
 * can count its instructions under callgrind beside the sample's
 * (bench/watch_json.py). */
__attribute__((noinline)) static void
watch_print_json(FILE *out, double interval_s, const tm_diskrate *rates, size_t nrates,
                 const tm_pressure_stats *ps, bool have_ps, const tm_ptree_stats *ts,
                 bool have_tree, pid_t pid, const tm_gpu_stats *gpus, size_t ngpus, bool gpu_on)
{
    static struct jout jo; /* 16 KiB: not on the stack; one watch loop */
    struct jout *f = &jo;
    f->f = out;
    f->len = 0;
    int64_t now = tm_now_real_ns();
    time_t secs = (time_t)(now / 1000000000LL);
    struct tm tmv;
    gmtime_r(&secs, &tmv);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    JLIT(f, "{\"timestamp\": \"");
    jputs(f, stamp);
    JLIT(f, "\", \"time\": ");
    jfixed(f, (double)now / 1e9, 3);
    JLIT(f, ", \"interval_seconds\": ");
    jfixed(f, interval_s, 3);
    JLIT(f, ", \"disk\": [");
    for (size_t i = 0; i < nrates; i++) {
        const tm_diskrate *r = &rates[i];
        if (i)
            JLIT(f, ", ");
        JLIT(f, "{\"disk_device\": ");
        jstr(f, r->name);
        bool first = false;
        json_num(f, &first, "r/s", r->r_s);
        json_num(f, &first, "w/s", r->w_s);
        json_num(f, &first, "d/s", r->d_s);
        json_num(f, &first, "f/s", r->f_s);
        json_num(f, &first, "rkB/s", r->rkb_s);
        json_num(f, &first, "wkB/s", r->wkb_s);
        json_num(f, &first, "dkB/s", r->dkb_s);
        json_num(f, &first, "rrqm/s", r->rrqm_s);
        json_num(f, &first, "wrqm/s", r->wrqm_s);
        json_num(f, &first, "drqm/s", r->drqm_s);
        json_num(f, &first, "rrqm", r->rrqm_pct);
        json_num(f, &first, "wrqm", r->wrqm_pct);
        json_num(f, &first, "drqm", r->drqm_pct);
        json_num(f, &first, "r_await", r->r_await);
        json_num(f, &first, "w_await", r->w_await);
        json_num(f, &first, "d_await", r->d_await);
        json_num(f, &first, "f_await", r->f_await);
        json_num(f, &first, "rareq-sz", r->rareq_sz);
        json_num(f, &first, "wareq-sz", r->wareq_sz);
        json_num(f, &first, "dareq-sz", r->dareq_sz);
        json_num(f, &first, "aqu-sz", r->aqu_sz);
        json_num(f, &first, "util", r->util);
        JLIT(f, "}");
    }
    JLIT(f, "]");
    if (gpu_on)
        json_gpu(f, gpus, ngpus);
    if (have_ps) {
        JLIT(f, ", \"pressure\": {");
        bool first = true;
        if (ps->valid & TM_PRESSURE_HAVE_IO)
            json_psi(f, &first, "io", &ps->io);
        if (ps->valid & TM_PRESSURE_HAVE_CPU)
            json_psi(f, &first, "cpu", &ps->cpu);
        if (ps->valid & TM_PRESSURE_HAVE_MEM)
            json_psi(f, &first, "memory", &ps->mem);
        JLIT(f, "}");
        if (ps->valid & (TM_PRESSURE_HAVE_CG_IO | TM_PRESSURE_HAVE_CG_IOSTAT)) {
            JLIT(f, ", \"cgroup\": {\"path\": ");
            jstr(f, ps->cgroup);
            first = false;
            if (ps->valid & TM_PRESSURE_HAVE_CG_IO)
                json_psi(f, &first, "io_pressure", &ps->cg_io);
            if (ps->valid & TM_PRESSURE_HAVE_CG_IOSTAT) {
                json_num_prec(f, &first, "read_bytes_total", (double)ps->cg_iostat.rbytes, 0);
                json_num_prec(f, &first, "write_bytes_total", (double)ps->cg_iostat.wbytes, 0);
                json_num_prec(f, &first, "reads_total", (double)ps->cg_iostat.rios, 0);
                json_num_prec(f, &first, "writes_total", (double)ps->cg_iostat.wios, 0);
            }
            JLIT(f, "}");
        }
    }
    if (have_tree) {
        JLIT(f, ", \"process_tree\": {\"root_pid\": ");
        jfixed(f, (double)pid, 0);
        jputs(f, ts->root_alive ? ", \"alive\": true" : ", \"alive\": false");
        bool first = false;
        json_num_prec(f, &first, "processes", (double)ts->nproc, 0);
        json_num_prec(f, &first, "processes_d_state", (double)ts->nproc_d, 0);
        json_num_prec(f, &first, "processes_io_unreadable", (double)ts->nproc_io_unreadable, 0);
        json_num(f, &first, "cpu_percent", ts->cpu_pct);
        json_num_prec(f, &first, "cpu_user_seconds", ts->cpu_user_s, 3);
        json_num_prec(f, &first, "cpu_system_seconds", ts->cpu_sys_s, 3);
        json_num_prec(f, &first, "read_bytes_per_second", ts->read_bytes_s, 0);
        json_num_prec(f, &first, "write_bytes_per_second", ts->write_bytes_s, 0);
        json_num_prec(f, &first, "rchar_bytes_per_second", ts->rchar_s, 0);
        json_num_prec(f, &first, "cache_hit_hint", ts->cache_hit_hint, 3);
        json_num_prec(f, &first, "read_bytes_total", ts->read_bytes, 0);
        json_num_prec(f, &first, "write_bytes_total", ts->write_bytes, 0);
        json_num_prec(f, &first, "rchar_bytes_total", ts->rchar, 0);
        json_num_prec(f, &first, "rss_bytes", ts->rss_bytes, 0);
        json_num_prec(f, &first, "pss_bytes", ts->pss_bytes, 0);
        if (gpu_on)
            json_num_prec(f, &first, "gpu_memory_bytes", tm_gpu_tree_memory(gpus, ngpus, ts), 0);
        JLIT(f, "}");
    }
    JLIT(f, "}\n");
    jflush(f);
    fflush(out);
}

/* --- text output */

static void watch_print_header(FILE *f, bool have_tree, bool gpu_on)
{
    fprintf(f, "%-8s %-10s %8s %8s %8s %8s %8s %8s %7s %6s %7s %7s", "time", "device", "r/s",
            "rMB/s", "r_await", "w/s", "wMB/s", "w_await", "aqu-sz", "%util", "io-some", "io-full");
    if (have_tree)
        fprintf(f, " %6s %8s %5s %7s %4s", "procs", "tr_rMB/s", "hit", "cpu%", "D");
    if (gpu_on)
        fprintf(f, " %5s %8s %7s %6s%s", "gpu%", "gmem", "gtotal", "gpuW",
                have_tree ? "  tr_gmem" : "");
    fputc('\n', f);
    fprintf(f, "%-8s %-10s %8s %8s %8s %8s %8s %8s %7s %6s %7s %7s", "", "", "", "", "ms", "", "",
            "ms", "", "", "%", "%");
    if (have_tree)
        fprintf(f, " %6s %8s %5s %7s %4s", "", "", "", "", "");
    if (gpu_on)
        fprintf(f, " %5s %8s %7s %6s%s", "%", "GiB", "GiB", "W", have_tree ? "      GiB" : "");
    fputc('\n', f);
}

static void watch_print_text(FILE *f, const tm_diskrate *rates, size_t nrates,
                             const tm_pressure_stats *ps, bool have_ps, const tm_ptree_stats *ts,
                             bool have_tree, bool tree_on, const tm_gpu_stats *gpus, size_t ngpus,
                             bool gpu_on)
{
    /* GPUs are summed into one set of columns: the mean utilization, the
     * memory and power of all watched GPUs.  --json has each GPU. */
    double gutil = 0, gused = 0, gtotal = 0, gpow = 0;
    size_t nutil = 0, nmem = 0, npow = 0;
    for (size_t i = 0; i < ngpus; i++) {
        if (gpus[i].valid & TM_GPU_HAVE_UTIL) {
            gutil += gpus[i].util_gpu;
            nutil++;
        }
        if (gpus[i].valid & TM_GPU_HAVE_MEM) {
            gused += (double)gpus[i].mem_used;
            gtotal += (double)gpus[i].mem_total;
            nmem++;
        }
        if (gpus[i].valid & TM_GPU_HAVE_POWER) {
            gpow += gpus[i].power_w;
            npow++;
        }
    }
    double tree_gmem = gpu_on && have_tree ? tm_gpu_tree_memory(gpus, ngpus, ts) : NAN;
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    char stamp[16];
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tmv);
    size_t lines = nrates ? nrates : 1;
    for (size_t i = 0; i < lines; i++) {
        char c[12][24];
        const tm_diskrate *r = i < nrates ? &rates[i] : NULL;
        watch_fmt(c[0], 24, r ? r->r_s : NAN, 8, 1);
        watch_fmt(c[1], 24, r ? r->rkb_s / 1024.0 : NAN, 8, 2);
        watch_fmt(c[2], 24, r ? r->r_await : NAN, 8, 2);
        watch_fmt(c[3], 24, r ? r->w_s : NAN, 8, 1);
        watch_fmt(c[4], 24, r ? r->wkb_s / 1024.0 : NAN, 8, 2);
        watch_fmt(c[5], 24, r ? r->w_await : NAN, 8, 2);
        watch_fmt(c[6], 24, r ? r->aqu_sz : NAN, 7, 2);
        watch_fmt(c[7], 24, r ? r->util : NAN, 6, 1);
        bool extra = i == 0;
        watch_fmt(c[8], 24,
                  extra && have_ps && (ps->valid & TM_PRESSURE_HAVE_IO) && ps->io.has_some
                      ? ps->io.some_avg10
                      : NAN,
                  7, 2);
        watch_fmt(c[9], 24,
                  extra && have_ps && (ps->valid & TM_PRESSURE_HAVE_IO) && ps->io.has_full
                      ? ps->io.full_avg10
                      : NAN,
                  7, 2);
        fprintf(f, "%-8s %-10s %s %s %s %s %s %s %s %s %s %s", i == 0 ? stamp : "",
                r ? r->name : "-", c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]);
        if (tree_on) {
            char t[5][24];
            bool show = extra && have_tree;
            snprintf(t[0], 24, "%6s", "-");
            if (show)
                snprintf(t[0], 24, "%6zu", ts->nproc);
            watch_fmt(t[1], 24, show ? ts->read_bytes_s / 1e6 : NAN, 8, 2);
            watch_fmt(t[2], 24, show ? ts->cache_hit_hint : NAN, 5, 2);
            watch_fmt(t[3], 24, show ? ts->cpu_pct : NAN, 7, 1);
            snprintf(t[4], 24, "%4s", "-");
            if (show)
                snprintf(t[4], 24, "%4zu", ts->nproc_d);
            fprintf(f, " %s %s %s %s %s", t[0], t[1], t[2], t[3], t[4]);
        }
        if (gpu_on) {
            char g[5][24];
            watch_fmt(g[0], 24, extra && nutil ? gutil / (double)nutil : NAN, 5, 1);
            watch_fmt(g[1], 24, extra && nmem ? gused / 1073741824.0 : NAN, 8, 2);
            watch_fmt(g[2], 24, extra && nmem ? gtotal / 1073741824.0 : NAN, 7, 1);
            watch_fmt(g[3], 24, extra && npow ? gpow : NAN, 6, 0);
            fprintf(f, " %s %s %s %s", g[0], g[1], g[2], g[3]);
            if (tree_on) {
                watch_fmt(g[4], 24, extra ? tree_gmem / 1073741824.0 : NAN, 9, 2);
                fprintf(f, "%s", g[4]);
            }
        }
        fputc('\n', f);
    }
    fflush(f);
}

/* --- recording (-o DIR) */

struct watch_target {
    const char *path;
    tm_blkdev bd;
};

struct watch_rec {
    tm_rec *w;
    char path[PATH_MAX];
    bool full_said;
};

/* Reports a failed append once (a full disk), then stays quiet: watch keeps
 * printing whatever happens to the recording. */
static void watch_rec_check(struct watch_rec *wr, int rc)
{
    if (rc >= 0 || wr->full_said)
        return;
    cli_warn("%s: %s: recording stopped, still printing", wr->path, strerror(-rc));
    wr->full_said = true;
}

static int watch_rec_open(struct watch_rec **out, const char *dir, unsigned long long max_size,
                          int argc, char **argv, const struct watch_target *targets, size_t n)
{
    /* The directory: made 0700 when missing (with its parents), else it
     * must be the caller's and closed to others; a planted entry inside
     * can then only be the caller's own (docs/SECURITY.md). */
    int dfd = tm_dir_make_private(dir, 0700, TM_SAFE_PARENTS, NULL);
    if (dfd < 0)
        return dfd;
    struct watch_rec *wr = calloc(1, sizeof *wr);
    if (!wr) {
        close(dfd);
        return -ENOMEM;
    }
    snprintf(wr->path, sizeof wr->path, "%s/system.tmr", dir);
    tm_rec_opts o = {.role = "system", .rank = -1, .max_size = max_size};
    int rc = tm_rec_open(&wr->w, wr->path, &o);
    if (rc < 0) {
        close(dfd);
        free(wr);
        return rc;
    }
    /* meta.json says what ran; replaced atomically (a new temporary name,
     * then renameat) so that a reader never sees half of it and a symlink
     * planted at either name is never written through. */
    char *mbuf = NULL;
    size_t mlen = 0;
    FILE *f = open_memstream(&mbuf, &mlen);
    if (f) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        fputs("{\"trainmon_version\": \"" TM_VERSION "\", \"command\": [\"trainmon\"", f);
        for (int i = 0; i < argc; i++) {
            fputs(", ", f);
            cli_json_str(f, argv[i]);
        }
        fputs("], ", f);
        fputs("\"host\": ", f);
        cli_json_str(f, host);
        fprintf(f, ", \"start_time\": %.6f, \"targets\": [", (double)tm_now_real_ns() / 1e9);
        for (size_t i = 0; i < n; i++) {
            if (i)
                fputs(", ", f);
            cli_target_json(f, targets[i].path, &targets[i].bd);
        }
        fputs("]}\n", f);
        /* Readable by whoever may read the directory, as system.tmr is. */
        struct stat st;
        mode_t mode = 0600;
        if (fstat(dfd, &st) == 0)
            mode |= st.st_mode & (S_IRGRP | S_IROTH);
        if (fclose(f) == 0 && tm_file_replace_at(dfd, "meta.json", mbuf, mlen, mode) < 0)
            cli_warn("%s", tm_last_error());
        free(mbuf);
    }
    close(dfd);
    for (size_t i = 0; i < n; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (!m)
            continue;
        cli_target_json(m, targets[i].path, &targets[i].bd);
        fclose(m);
        watch_rec_check(wr, tm_rec_event(wr->w, 0, "watch_target", buf));
        free(buf);
    }
    *out = wr;
    return 0;
}

static void watch_rec_event(struct watch_rec *wr, const char *name, pid_t pid)
{
    char json[64];
    snprintf(json, sizeof json, "{\"pid\": %d}", (int)pid);
    watch_rec_check(wr, tm_rec_event(wr->w, 0, name, json));
}

static void watch_rec_close(struct watch_rec **wr)
{
    if (!*wr)
        return;
    tm_rec_close(&(*wr)->w);
    free(*wr);
    *wr = NULL;
}

/* --- the steps of cmd_watch: parse options, open, loop, print, close */

struct watch {
    /* options */
    double interval;
    long count;
    pid_t pid;
    bool json;
    const char *outdir;
    unsigned long long max_size;
    bool gpu_wanted;
    unsigned gpu_idx[64];
    size_t ngpu_idx;
    struct cli_alerts al;
    /* what the paths resolved to */
    char devs[WATCH_MAX_DEVS][TM_DISK_NAME_MAX];
    size_t ndevs;
    int npaths;
    struct watch_target targets[64];
    size_t ntargets;
    /* open */
    tm_sampler *sampler;
    struct watch_rec *wr;
    bool gpu_on, tree_on, tree_gone_said;
};

/* Options into w.  -1: go on; else the exit code (said). */
static int watch_parse(struct watch *w, int argc, char **argv)
{
    enum { OPT_JSON = 1000, OPT_MAXSIZE, OPT_GPU, OPT_ALERT, OPT_ON_ALERT };
    static const struct option opts[] = {
        {"pid", required_argument, NULL, 'p'},
        {"interval", required_argument, NULL, 'i'},
        {"count", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, OPT_JSON},
        {"output", required_argument, NULL, 'o'},
        {"max-size", required_argument, NULL, OPT_MAXSIZE},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"help", no_argument, NULL, 'h'},
        {"alert", required_argument, NULL, OPT_ALERT},
        {"on-alert", required_argument, NULL, OPT_ON_ALERT},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:i:n:o:h", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'p': {
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > INT_MAX) {
                cli_err("--pid %s: not a process id", optarg);
                return 2;
            }
            w->pid = (pid_t)v;
            break;
        }
        case 'i':
            if (!cli_parse_seconds(optarg, &w->interval)) {
                cli_err("-i %s: not an interval in seconds", optarg);
                return 2;
            }
            break;
        case 'n':
            w->count = strtol(optarg, &end, 10);
            if (*end || w->count <= 0) {
                cli_err("-n %s: not a positive count", optarg);
                return 2;
            }
            break;
        case OPT_JSON:
            w->json = true;
            break;
        case 'o':
            w->outdir = optarg;
            break;
        case OPT_MAXSIZE:
            if (!cli_parse_size(optarg, &w->max_size)) {
                cli_err("--max-size %s: not a size (e.g. 64M)", optarg);
                return 2;
            }
            break;
        case OPT_GPU:
            if (!cli_parse_gpus(optarg, &w->gpu_wanted, w->gpu_idx, &w->ngpu_idx)) {
                cli_err("--gpu %s: want all, none, or indices like 0,2", optarg);
                return 2;
            }
            break;
        case OPT_ALERT:
            if (cli_alerts_add_rule(&w->al, optarg))
                return 2;
            break;
        case OPT_ON_ALERT:
            if (cli_alerts_add_cmd(&w->al, optarg))
                return 2;
            break;
        case 'h':
            watch_usage(stdout);
            return 0;
        default:
            watch_usage(stderr);
            return 2;
        }
    }
    /* Rules are checked before anything is opened: a typo fails at once. */
    int arc = cli_alerts_check(&w->al);
    if (!arc)
        arc = cli_alerts_open(&w->al);
    return arc ? arc : -1;
}

/* Paths -> devices.  Each path says what is behind it on stderr.  -1: go
 * on; 1: nothing asked for can be measured (said). */
static int watch_resolve(struct watch *w, int argc, char **argv)
{
    static tm_blkdev bd;
    int nresolved = 0, nhung = 0;
    w->npaths = argc - optind;
    for (int i = optind; i < argc; i++) {
        /* after a hung mount, 2 s for each other path (as run does) */
        int rc = tm_blkdev_resolve_within(argv[i], 0, &bd, nhung ? 2.0 : TM_BLKDEV_RESOLVE_WAIT_S);
        if (rc < 0) {
            nhung += rc == -ETIMEDOUT;
            cli_err("%s", tm_last_error());
            continue;
        }
        nresolved++;
        if (bd.kind == TM_FS_BLOCK && bd.top[0]) {
            fprintf(stderr, "trainmon: watching %s: %s\n", argv[i], bd.why);
            cli_add_dev(w->devs, &w->ndevs, WATCH_MAX_DEVS, bd.top);
            for (size_t k = 0; k < bd.nleaves; k++)
                cli_add_dev(w->devs, &w->ndevs, WATCH_MAX_DEVS, bd.leaves[k]);
        } else {
            cli_warn("%s", bd.why);
        }
        if (w->ntargets < sizeof w->targets / sizeof w->targets[0]) {
            w->targets[w->ntargets].path = argv[i];
            w->targets[w->ntargets].bd = bd;
            w->ntargets++;
        }
    }
    if (w->npaths > 0 && nresolved == 0 && w->pid == 0)
        return 1; /* each path has said why; nothing asked for can be measured */
    if (w->npaths > 0 && w->ndevs == 0 && nresolved > 0)
        cli_warn("no block device behind the given paths: showing pressure%s only",
                 w->pid ? " and the process tree" : "");
    return -1;
}

static void watch_close(struct watch *w)
{
    /* Alerts still firing are not resolved at exit (the condition did not
     * end), and running commands are left to finish on their own. */
    cli_alerts_close(&w->al);
    tm_sampler_free(&w->sampler);
    watch_rec_close(&w->wr);
}

/* The collectors, then the recording.  -1: go on; else the exit code
 * (said). */
static int watch_open(struct watch *w, int argc, char **argv)
{
    const char *names[WATCH_MAX_DEVS];
    for (size_t i = 0; i < w->ndevs; i++)
        names[i] = w->devs[i];
    tm_sampler_opts o = {
        .disks_off = !(w->npaths == 0 || w->ndevs > 0),
        .disks = names,
        .ndisks = w->ndevs,
        .root_pid = w->pid,
        .pressure_pid = w->pid,
        .gpu_off = !w->gpu_wanted,
        .gpus = w->gpu_idx,
        .ngpus = w->ngpu_idx,
        .alerts = w->al.e,
    };
    if (tm_sampler_new(&w->sampler, &o) < 0) {
        cli_err("%s", tm_last_error());
        return 1;
    }
    const char *e;
    if ((e = tm_sampler_open_error(w->sampler, "disk")))
        cli_err("%s", e);
    if ((e = tm_sampler_open_error(w->sampler, "ptree")))
        cli_err("%s", e);
    if ((e = tm_sampler_open_error(w->sampler, "pressure")))
        cli_warn("pressure: %s", e);
    if ((e = tm_sampler_open_error(w->sampler, "gpu")))
        fprintf(stderr, "trainmon: %s\n", e); /* said once; everything else keeps working */
    w->gpu_on = tm_sampler_on(w->sampler, "gpu");
    w->tree_on = tm_sampler_on(w->sampler, "ptree");
    if (!tm_sampler_on(w->sampler, "disk") && !w->tree_on &&
        !tm_sampler_on(w->sampler, "pressure") && !w->gpu_on) {
        cli_err("nothing can be measured");
        return 1;
    }
    if (w->outdir) {
        /* watch_rec_open makes the directory itself (0700, parents
         * included) and refuses one that is not safely ours. */
        if (watch_rec_open(&w->wr, w->outdir, w->max_size, argc, argv, w->targets, w->ntargets) <
            0) {
            cli_err("%s", tm_last_error());
            return 1;
        }
        tm_sampler_set_rec(w->sampler, w->wr->w);
    }
    return -1;
}

/* Says the sampler's warnings: a failed sample as "<collector>: why", a
 * collector's own warning as it is, a failed recording once. */
static void watch_warnings(struct watch *w)
{
    tm_sampler_warning wn;
    while (tm_sampler_next_warning(w->sampler, &wn) == 1) {
        if (wn.kind == TM_SAMPLER_WARN_RECORD)
            watch_rec_check(w->wr, wn.err);
        else if (wn.kind == TM_SAMPLER_WARN_SAMPLE)
            cli_warn("%s: %s", wn.collector, wn.msg);
        else
            cli_warn("%s", wn.msg);
    }
}

/* Said once when the watched process exits; watch goes on. */
static void watch_tree_check(struct watch *w)
{
    const tm_ptree_stats *ts = tm_sampler_ptree(w->sampler);
    if (!ts || ts->root_alive || w->tree_gone_said)
        return;
    fprintf(stderr, "trainmon: pid %d exited; still watching%s\n", (int)w->pid,
            tm_sampler_on(w->sampler, "disk") ? " the disks" : " pressure");
    w->tree_gone_said = true;
    if (w->wr)
        watch_rec_event(w->wr, "process_exit", w->pid);
}

/* One interval's output from the sampler's last tick. */
static void watch_print(struct watch *w, double dt, long *lines, long printed, bool tty)
{
    const tm_diskrate *rates = NULL;
    size_t nrates = 0;
    tm_sampler_disks(w->sampler, &rates, &nrates);
    const tm_pressure_stats *psp = tm_sampler_pressure(w->sampler);
    const tm_ptree_stats *tsp = tm_sampler_ptree(w->sampler);
    const tm_gpu_stats *gpus = NULL;
    size_t ngpus = 0;
    tm_sampler_gpus(w->sampler, &gpus, &ngpus);
    /* The printers read the structs even where unavailable (guarded by
     * the have_ flags): zeroed stand-ins. */
    static const tm_pressure_stats no_ps;
    static const tm_ptree_stats no_ts;
    const tm_pressure_stats *ps = psp ? psp : &no_ps;
    const tm_ptree_stats *ts = tsp ? tsp : &no_ts;
    if (w->json) {
        watch_print_json(stdout, dt, rates, nrates, ps, psp != NULL, ts, tsp != NULL, w->pid, gpus,
                         ngpus, w->gpu_on);
        return;
    }
    if (*lines == 0 || (tty && *lines >= 20)) {
        if (printed)
            fputc('\n', stdout);
        watch_print_header(stdout, w->tree_on, w->gpu_on);
        *lines = 0;
    }
    watch_print_text(stdout, rates, nrates, ps, psp != NULL, ts, tsp && ts->root_alive, w->tree_on,
                     gpus, ngpus, w->gpu_on);
    (*lines)++;
}

/* A tick every interval on absolute deadlines; the first only primes the
 * rates, so the first line printed is over one interval. */
static void watch_loop(struct watch *w)
{
    struct sigaction sa = {.sa_handler = watch_on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    bool tty = isatty(STDOUT_FILENO);
    long printed = 0, lines = 0;
    int64_t step = (int64_t)(w->interval * 1e9);
    int64_t next = tm_now_mono_ns(), prev_t = next;
    bool first = true;
    while (!watch_stop) {
        if (first)
            tm_sampler_prime(w->sampler);
        else
            tm_sampler_tick(w->sampler, 0);
        watch_warnings(w);
        watch_tree_check(w);
        int64_t now = tm_now_mono_ns();
        double dt = (double)(now - prev_t) / 1e9;
        prev_t = now;
        if (!first) {
            if (w->al.e)
                cli_alerts_drain(w->al.e, w->al.r);
            watch_print(w, dt, &lines, printed, tty);
            printed++;
            if (w->count > 0 && printed >= w->count)
                break;
        }
        first = false;
        next += step;
        watch_sleep_until(next);
    }
}

int cmd_watch(int argc, char **argv)
{
    /* Large (device names, targets): not on the stack.  Zero as a static
     * and not memset: a command runs once per process, and clearing 700 KB
     * would make every page of it resident (RSS target: 4 MB). */
    static struct watch w;
    w.interval = 1.0;
    w.count = -1;
    w.gpu_wanted = true;
    int rc = watch_parse(&w, argc, argv);
    if (rc >= 0)
        return rc;
    rc = watch_resolve(&w, argc, argv);
    if (rc < 0)
        rc = watch_open(&w, argc, argv);
    if (rc < 0) {
        watch_loop(&w);
        rc = 0;
    }
    watch_close(&w);
    return rc;
}
