/*
 * serve.c - `trainmon serve`: a Prometheus exporter for a node, on
 * libmicrohttpd.  GET /metrics (text format 0.0.4), GET /health (JSON
 * verdict for schedulers), GET / (an index).  docs/METRICS.md lists every
 * series; the text itself is written by the library (tm_prom_*, tm_health_*).
 *
 * Sampling model: the main thread is a sampler that collects every interval
 * (-i, default 1 s) and publishes the finished /metrics and /health bodies
 * as two libmicrohttpd response objects; the HTTP thread only queues the
 * current objects (reference-counted by libmicrohttpd), so a scrape costs
 * no /proc read, no formatting and no copy, and 2,000 scrapes/s cost the
 * same collection work as one.  A scrape sees data at most one interval
 * old, which is finer than any sane scrape interval (15 s is usual).  The
 * collection's own cost is exported (trainmon_exporter_collect_cpu_seconds_total)
 * so that it can be compared with an exporter that collects on each scrape.
 *
 * Robustness: one epoll thread, a connection cap, a per-connection memory
 * cap (an oversized request gets 431/413 and is dropped) and an idle
 * timeout (slow clients are cut); only GET and HEAD are served.
 *
 * --alert RULE / --on-alert CMD: the same threshold alerts as `trainmon
 * watch` (docs/ALERTS.md), evaluated on each collection, for nodes that
 * have no Prometheus and Alertmanager.
 */
#ifndef TM_NO_HTTP
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <dlfcn.h>
#include <microhttpd.h>

/* libmicrohttpd is loaded when `serve` starts, not linked: it pulls in
 * GnuTLS and p11-kit, about 4 MB of resident mappings that `watch` and
 * `run` (the same binary, with an RSS target of 4 MB) have no use for.
 * The calls below go through these pointers; their types come from the
 * header, so a prototype can never drift from the library's. */
static struct {
    __typeof__(MHD_start_daemon) *start_daemon;
    __typeof__(MHD_stop_daemon) *stop_daemon;
    __typeof__(MHD_get_daemon_info) *get_daemon_info;
    __typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
    __typeof__(MHD_add_response_header) *add_response_header;
    __typeof__(MHD_queue_response) *queue_response;
    __typeof__(MHD_destroy_response) *destroy_response;
} mhd;
#define MHD_start_daemon (*mhd.start_daemon)
#define MHD_stop_daemon (*mhd.stop_daemon)
#define MHD_get_daemon_info (*mhd.get_daemon_info)
#define MHD_create_response_from_buffer (*mhd.create_response_from_buffer)
#define MHD_add_response_header (*mhd.add_response_header)
#define MHD_queue_response (*mhd.queue_response)
#define MHD_destroy_response (*mhd.destroy_response)

/* 0, or -1 with the reason in *why. */
static int serve_load_mhd(const char **why)
{
    static const char *const names[] = {"libmicrohttpd.so.12", "libmicrohttpd.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        *why = dlerror();
        return -1;
    }
    /* POSIX allows the object-to-function pointer conversion dlsym needs. */
#define SERVE_SYM(field, name)                                                                     \
    do {                                                                                           \
        void *p_ = dlsym(h, name);                                                                 \
        if (!p_) {                                                                                 \
            *why = "libmicrohttpd lacks " name;                                                    \
            return -1;                                                                             \
        }                                                                                          \
        memcpy(&mhd.field, &p_, sizeof p_);                                                        \
    } while (0)
    SERVE_SYM(start_daemon, "MHD_start_daemon");
    SERVE_SYM(stop_daemon, "MHD_stop_daemon");
    SERVE_SYM(get_daemon_info, "MHD_get_daemon_info");
    SERVE_SYM(create_response_from_buffer, "MHD_create_response_from_buffer");
    SERVE_SYM(add_response_header, "MHD_add_response_header");
    SERVE_SYM(queue_response, "MHD_queue_response");
    SERVE_SYM(destroy_response, "MHD_destroy_response");
#undef SERVE_SYM
    return 0; /* the library stays loaded until the process ends */
}

#include "cli.h"
#include "trainmon.h"

/* Outside the 9100-9999 range the Prometheus wiki allocates to exporters
 * (full since 2023) and clear of the ports common neighbours take: 9090
 * Prometheus, 9093 Alertmanager, 9100 node_exporter, 9400 dcgm-exporter,
 * 9835 nvidia_gpu_exporter, 9464 OpenTelemetry; below the ephemeral range. */
#define SERVE_DEFAULT_LISTEN "127.0.0.1:10436"

#define SERVE_MAX_DEVS 256
#define SERVE_MAX_CONNS 2048        /* more than a scrape fleet ever opens */
#define SERVE_CONN_TIMEOUT_S 10     /* idle (slow) clients are cut after this */
#define SERVE_CONN_MEMORY (16 * 1024) /* per connection: request line + headers */
#define SERVE_TEXT_CAP (8u << 20)   /* /metrics larger than this is an error */
#define SERVE_HEALTH_WINDOW_S 10.0  /* /health judges disks over this window */
#define SERVE_HEALTH_SLOTS 64

#define SERVE_MAX_RUNS TM_FOLLOW_MAX_RUNS
#define SERVE_RECORDS_PER_PASS 200000 /* per file per interval: bounds a catch-up */

static volatile sig_atomic_t serve_stop;

static void serve_on_signal(int sig)
{
    (void)sig;
    serve_stop = 1;
}

static void serve_usage(FILE *f)
{
    fputs("usage: trainmon serve [--listen ADDR] [--runs DIR] [-d PATH]... [-i SEC] [--gpu LIST]\n"
          "\n"
          "  --listen ADDR  HOST:PORT to listen on (default " SERVE_DEFAULT_LISTEN ");\n"
          "                 \":PORT\" listens on every interface: an explicit choice, as\n"
          "                 the metrics name devices, runs and hosts\n"
          "  --runs DIR     export the live runs under DIR (run directories with *.tmr)\n"
          "  -d PATH        export the disks behind PATH (repeatable); default: every\n"
          "                 physical disk\n"
          "  -i SEC         collection interval (default 1); scrapes are served from the\n"
          "                 last collection\n"
          "  --gpu LIST     all (default), none, or NVML indices like 0,2\n"
          "  --alert RULE   e.g. 'disk.r_await_ms > 50 for 3m' (repeatable; rules and\n"
          "                 metric names in docs/ALERTS.md); alerts are said on stderr\n"
          "  --on-alert CMD run CMD (/bin/sh -c) on each alert firing and resolving,\n"
          "                 the alert as JSON on stdin and TRAINMON_ALERT_* in the\n"
          "                 environment (repeatable: every command gets every alert)\n"
          "\n"
          "GET /metrics (Prometheus text format), GET /health (JSON), GET / (index).\n"
          "Series are listed in docs/METRICS.md.\n",
          f);
}

/* --- live runs under --runs: the library's follower (tm_follow) reads what
 * each training process appended since the last collection */

/* Fills runs_out (SERVE_MAX_RUNS long) and ranks_out (grown to fit) for
 * tm_prom_write_runs from the follower's last poll; the number of runs. */
static size_t serve_runs_export(tm_follow *f, tm_prom_run **runs_out, tm_prom_rank **ranks_out,
                                size_t *ranks_cap)
{
    size_t nranks = 0;
    const tm_follow_run *R;
    for (size_t i = 0; (R = tm_follow_run_at(f, i)); i++)
        nranks += R->nranks;
    if (nranks > *ranks_cap) {
        tm_prom_rank *p = realloc(*ranks_out, nranks * sizeof *p);
        if (!p)
            return 0;
        *ranks_out = p;
        *ranks_cap = nranks;
    }
    double now = (double)tm_now_real_ns() / 1e9;
    size_t k = 0, n = 0;
    for (size_t i = 0; (R = tm_follow_run_at(f, i)) && i < SERVE_MAX_RUNS; i++, n++) {
        size_t first = k;
        const tm_follow_rank *fr;
        for (size_t j = 0; (fr = tm_follow_rank_at(f, i, j)); j++)
            tm_prom_rank_set(&(*ranks_out)[k++], fr);
        double age = now - R->newest_mtime_s;
        (*runs_out)[i] = (tm_prom_run){.name = R->name,
                                       .host = R->host,
                                       .last_record_age_s = age < 0 ? 0 : age,
                                       .nranks = k - first,
                                       .ranks = k > first ? *ranks_out + first : NULL};
    }
    return n;
}

/* --- the collectors and the published bodies */

/* The sampler's collectors report on themselves; the runs are serve's own. */
#define SERVE_MAX_COLLECTORS 16

/* /health rates over a window: raw disk samples in a ring. */
struct serve_hslot {
    int64_t t_ns;
    size_t n;
    tm_diskstat *raw;
};

struct serve {
    tm_sampler *sampler; /* disks, pressure, GPUs, ... and their /metrics lines */
    tm_follow *runs;     /* --runs DIR */
    bool warned_many;
    tm_prom_run *runs_out;
    tm_prom_rank *ranks_out;
    size_t ranks_cap;

    bool runs_ok;
    uint64_t collects;
    double collect_cpu_s;

    struct serve_hslot hring[SERVE_HEALTH_SLOTS];
    size_t hslots, hnext, hcount;
    tm_diskrate *hrates;
    size_t hrates_cap;
    tm_health_limits limits;

    tm_text *metrics, *health;
    struct cli_alerts alerts; /* engine NULL without --alert */

    pthread_mutex_t lock; /* guards the two published responses */
    struct MHD_Response *r_metrics, *r_health;
    struct MHD_Response *r_index, *r_404, *r_405;
};

static double serve_thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return NAN;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Keeps this sample's raw counters and computes rates against the oldest
 * one still in the window. */
static size_t serve_health_rates(struct serve *s, const tm_diskstat *raw, size_t n)
{
    int64_t now = tm_now_mono_ns();
    struct serve_hslot *slot = &s->hring[s->hnext];
    tm_diskstat *p = realloc(slot->raw, (n ? n : 1) * sizeof *p);
    if (!p)
        return 0;
    slot->raw = p;
    memcpy(slot->raw, raw, n * sizeof *raw);
    slot->n = n;
    slot->t_ns = now;
    s->hnext = (s->hnext + 1) % s->hslots;
    if (s->hcount < s->hslots)
        s->hcount++;
    if (s->hcount < 2)
        return 0;
    /* The oldest slot: hnext when the ring is full, else slot 0. */
    const struct serve_hslot *old = &s->hring[s->hcount == s->hslots ? s->hnext : 0];
    double dt = (double)(now - old->t_ns) / 1e9;
    if (dt <= 0)
        return 0;
    if (n > s->hrates_cap) {
        tm_diskrate *r = realloc(s->hrates, n * sizeof *r);
        if (!r)
            return 0;
        s->hrates = r;
        s->hrates_cap = n;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < old->n; j++)
            if (strcmp(old->raw[j].name, raw[i].name) == 0) {
                tm_disk_rate(&old->raw[j], &raw[i], dt, &s->hrates[k++]);
                break;
            }
    return k;
}

static struct MHD_Response *serve_response(const tm_text *t, const char *type)
{
    size_t len;
    const char *data = tm_text_data(t, &len);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)(uintptr_t)data, MHD_RESPMEM_MUST_COPY);
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return r;
}

/* One collection: samples every collector, writes both bodies and
 * publishes them. */
static void serve_collect(struct serve *s)
{
    int64_t t0 = tm_now_mono_ns();
    double c0 = serve_thread_cpu();
    tm_text_reset(s->metrics);
    tm_text_reset(s->health);

    /* One tick samples every collector and feeds the alert inputs; the
     * sampler writes their lines, serve adds the runs and its own. */
    tm_sampler_tick(s->sampler, t0);
    tm_sampler_warning wn;
    while (tm_sampler_next_warning(s->sampler, &wn) == 1)
        if (wn.kind == TM_SAMPLER_WARN_NOTE)
            cli_warn("%s", wn.msg);
    const tm_diskstat *raw = NULL;
    size_t nraw = 0, nh = 0;
    if (tm_sampler_disk_raw(s->sampler, &raw, &nraw))
        nh = serve_health_rates(s, raw, nraw);
    tm_sampler_prom(s->sampler, s->metrics);

    if (s->runs) {
        s->runs_ok = tm_follow_poll(s->runs, SERVE_RECORDS_PER_PASS) == 0;
        if (tm_follow_truncated(s->runs) && !s->warned_many) {
            cli_warn("--runs: more than %d live runs or %d record files in a run: following "
                     "the first ones", TM_FOLLOW_MAX_RUNS, TM_FOLLOW_MAX_FILES);
            s->warned_many = true;
        }
        tm_prom_write_runs(s->metrics, s->runs_out,
                           serve_runs_export(s->runs, &s->runs_out, &s->ranks_out, &s->ranks_cap));
    }

    if (s->alerts.e) {
        /* The sampler's tick fed the system inputs; the runs' are fed here. */
        tm_alert_feed_runs(s->alerts.e, s->runs, tm_now_mono_ns());
        cli_alerts_drain(s->alerts.e, s->alerts.r);
    }

    const tm_gpu_stats *gpus = NULL;
    size_t ngpus = 0;
    tm_sampler_gpus(s->sampler, &gpus, &ngpus);
    tm_health_write_json(s->health, &s->limits, s->hrates, nh, tm_sampler_pressure(s->sampler),
                         gpus, ngpus, NULL);

    s->collects++;
    double c1 = serve_thread_cpu();
    if (!isnan(c0) && !isnan(c1))
        s->collect_cpu_s += c1 - c0;
    const char *names[SERVE_MAX_COLLECTORS + 1];
    bool ok[SERVE_MAX_COLLECTORS + 1];
    size_t n = tm_sampler_collectors(s->sampler, names, ok, SERVE_MAX_COLLECTORS);
    if (s->runs) {
        names[n] = "runs";
        ok[n++] = s->runs_ok;
    }
    tm_prom_self self = {.collect_s = (double)(tm_now_mono_ns() - t0) / 1e9,
                         .collects = s->collects,
                         .collect_cpu_s = s->collect_cpu_s,
                         .names = names,
                         .success = ok,
                         .n = n};
    tm_prom_write_exporter(s->metrics, &self);

    if (tm_text_error(s->metrics) || tm_text_error(s->health)) {
        cli_warn("metrics text over %u bytes or out of memory: keeping the previous one",
                 SERVE_TEXT_CAP);
        return;
    }
    struct MHD_Response *m = serve_response(s->metrics, "text/plain; version=0.0.4; charset=utf-8");
    struct MHD_Response *h = serve_response(s->health, "application/json");
    if (!m || !h) {
        if (m)
            MHD_destroy_response(m);
        if (h)
            MHD_destroy_response(h);
        return;
    }
    pthread_mutex_lock(&s->lock);
    struct MHD_Response *om = s->r_metrics, *oh = s->r_health;
    s->r_metrics = m;
    s->r_health = h;
    pthread_mutex_unlock(&s->lock);
    /* Scrapes in flight hold their own references. */
    if (om)
        MHD_destroy_response(om);
    if (oh)
        MHD_destroy_response(oh);
}

/* --- HTTP */

static enum MHD_Result serve_queue_shared(struct serve *s, struct MHD_Connection *c,
                                          struct MHD_Response **which)
{
    pthread_mutex_lock(&s->lock);
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, *which);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static enum MHD_Result serve_handle(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    struct serve *s = cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, s->r_405);
    if (strcmp(url, "/metrics") == 0)
        return serve_queue_shared(s, c, &s->r_metrics);
    if (strcmp(url, "/health") == 0)
        return serve_queue_shared(s, c, &s->r_health);
    if (strcmp(url, "/") == 0)
        return MHD_queue_response(c, MHD_HTTP_OK, s->r_index);
    return MHD_queue_response(c, MHD_HTTP_NOT_FOUND, s->r_404);
}

static struct MHD_Response *serve_static(const char *body, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)(uintptr_t)body, MHD_RESPMEM_PERSISTENT);
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    return r;
}

/* HOST:PORT, [V6]:PORT or :PORT into a socket address. */
static int serve_parse_listen(const char *arg, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *colon = strrchr(arg, ':');
    if (!colon || !colon[1])
        return -EINVAL;
    size_t hl = (size_t)(colon - arg);
    if (hl >= sizeof host)
        return -EINVAL;
    memcpy(host, arg, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || port < 0 || port > 65535)
        return -EINVAL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
    if (rc != 0 || !res)
        return -EADDRNOTAVAIL;
    /* ":PORT" means every IPv4 interface (AI_PASSIVE with no host). */
    struct addrinfo *pick = res;
    if (!host[0])
        for (struct addrinfo *a = res; a; a = a->ai_next)
            if (a->ai_family == AF_INET) {
                pick = a;
                break;
            }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* 1,000 idle connections need more descriptors than the usual soft limit
 * of 1024: raise it to the hard limit (or 4096). */
static void serve_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rlim_t want = SERVE_MAX_CONNS + 64;
    if (rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static void serve_sleep_until(int64_t deadline_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_ns / 1000000000LL),
                          .tv_nsec = (long)(deadline_ns % 1000000000LL)};
    while (!serve_stop && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void serve_free(struct serve *s)
{
    tm_sampler_free(&s->sampler);
    tm_follow_close(&s->runs);
    free(s->runs_out);
    free(s->ranks_out);
    for (size_t i = 0; i < SERVE_HEALTH_SLOTS; i++)
        free(s->hring[i].raw);
    free(s->hrates);
    tm_text_free(&s->metrics);
    tm_text_free(&s->health);
    cli_alerts_close(&s->alerts);
    struct MHD_Response **rs[] = {&s->r_metrics, &s->r_health, &s->r_index, &s->r_404, &s->r_405};
    for (size_t i = 0; i < sizeof rs / sizeof rs[0]; i++)
        if (*rs[i]) {
            MHD_destroy_response(*rs[i]);
            *rs[i] = NULL;
        }
    pthread_mutex_destroy(&s->lock);
}

static const char serve_index_html[] =
    "<!DOCTYPE html><html><head><title>trainmon exporter</title></head><body>"
    "<h1>trainmon " TM_VERSION "</h1><ul>"
    "<li><a href=\"/metrics\">/metrics</a> (Prometheus text format)</li>"
    "<li><a href=\"/health\">/health</a> (JSON verdict)</li></ul></body></html>\n";

int cmd_serve(int argc, char **argv)
{
    enum { OPT_LISTEN = 1000, OPT_RUNS, OPT_GPU, OPT_ALERT, OPT_ON_ALERT };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"runs", required_argument, NULL, OPT_RUNS},
        {"disk", required_argument, NULL, 'd'},
        {"interval", required_argument, NULL, 'i'},
        {"gpu", required_argument, NULL, OPT_GPU},
        {"alert", required_argument, NULL, OPT_ALERT},
        {"on-alert", required_argument, NULL, OPT_ON_ALERT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *listen = SERVE_DEFAULT_LISTEN, *runs_dir = NULL;
    double interval = 1.0;
    bool gpu_wanted = true;
    unsigned gpu_idx[64];
    size_t ngpu_idx = 0;
    static char devs[SERVE_MAX_DEVS][TM_DISK_NAME_MAX];
    size_t ndevs = 0;
    int npaths = 0;
    static struct cli_alerts al;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:i:h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN: listen = optarg; break;
        case OPT_RUNS: runs_dir = optarg; break;
        case 'd': {
            tm_blkdev bd;
            npaths++;
            if (tm_blkdev_resolve(optarg, 0, &bd) < 0) {
                cli_err("%s", tm_last_error());
                return 1;
            }
            if (bd.kind != TM_FS_BLOCK || !bd.top[0]) {
                cli_warn("%s", bd.why);
                break;
            }
            cli_add_dev(devs, &ndevs, SERVE_MAX_DEVS, bd.top);
            for (size_t k = 0; k < bd.nleaves; k++)
                cli_add_dev(devs, &ndevs, SERVE_MAX_DEVS, bd.leaves[k]);
            break;
        }
        case 'i':
            if (!cli_parse_seconds(optarg, &interval)) {
                cli_err("-i %s: not an interval in seconds", optarg);
                return 2;
            }
            break;
        case OPT_GPU:
            if (!cli_parse_gpus(optarg, &gpu_wanted, gpu_idx, &ngpu_idx)) {
                cli_err("--gpu %s: want all, none, or indices like 0,2", optarg);
                return 2;
            }
            break;
        case OPT_ALERT:
            if (cli_alerts_add_rule(&al, optarg))
                return 2;
            break;
        case OPT_ON_ALERT:
            if (cli_alerts_add_cmd(&al, optarg))
                return 2;
            break;
        case 'h': serve_usage(stdout); return 0;
        default: serve_usage(stderr); return 2;
        }
    }
    /* Rules are checked before anything is opened: a typo fails at once. */
    int arc = cli_alerts_check(&al);
    if (arc)
        return arc;
    if (optind < argc) {
        cli_err("serve: unexpected argument %s", argv[optind]);
        serve_usage(stderr);
        return 2;
    }
    struct sockaddr_storage ss;
    socklen_t sslen;
    if (serve_parse_listen(listen, &ss, &sslen) < 0) {
        cli_err("--listen %s: want HOST:PORT, [IPv6]:PORT or :PORT", listen);
        return 2;
    }
    if (runs_dir) {
        struct stat st;
        if (stat(runs_dir, &st) != 0) {
            cli_err("%s: %s", runs_dir, strerror(errno));
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            cli_err("%s: not a directory", runs_dir);
            return 1;
        }
    }
    if (npaths > 0 && ndevs == 0)
        cli_warn("no block device behind the given paths: exporting pressure, GPUs and runs");

    static struct serve s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.lock, NULL);
    tm_health_limits_default(&s.limits);
    s.hslots = (size_t)lround(SERVE_HEALTH_WINDOW_S / interval) + 1;
    if (s.hslots < 2)
        s.hslots = 2;
    if (s.hslots > SERVE_HEALTH_SLOTS)
        s.hslots = SERVE_HEALTH_SLOTS;
    int rc = 1;
    struct MHD_Daemon *daemon = NULL;

    /* The alert engine first: the sampler feeds it.  A rule's command
     * runner started here is stopped by serve_free on every failure below. */
    s.alerts = al;
    if (cli_alerts_open(&s.alerts))
        goto out;
    const char *names[SERVE_MAX_DEVS];
    for (size_t i = 0; i < ndevs; i++)
        names[i] = devs[i];
    tm_sampler_opts so = {.disks_off = npaths > 0 && ndevs == 0,
                          .disks = names,
                          .ndisks = ndevs,
                          .gpu_off = !gpu_wanted,
                          .gpus = gpu_idx,
                          .ngpus = ngpu_idx,
                          .prom = true,
                          .alerts = s.alerts.e};
    if (tm_sampler_new(&s.sampler, &so) < 0) {
        cli_err("%s", tm_last_error());
        goto out;
    }
    const char *oerr;
    if ((oerr = tm_sampler_open_error(s.sampler, "disk"))) {
        cli_err("%s", oerr);
        goto out;
    }
    if ((oerr = tm_sampler_open_error(s.sampler, "pressure")))
        cli_warn("pressure stall information unavailable: %s", oerr);
    if ((oerr = tm_sampler_open_error(s.sampler, "gpu")))
        cli_warn("%s", oerr);
    if (runs_dir) {
        s.runs_out = calloc(SERVE_MAX_RUNS, sizeof *s.runs_out);
        if (!s.runs_out || tm_follow_open(&s.runs, runs_dir, true) < 0) {
            cli_err("out of memory");
            goto out;
        }
    }
    const char *why = NULL;
    if (serve_load_mhd(&why) < 0) {
        cli_err("serve: cannot load libmicrohttpd: %s (make deps installs it)", why);
        goto out;
    }
    s.metrics = tm_text_new(SERVE_TEXT_CAP);
    s.health = tm_text_new(SERVE_TEXT_CAP);
    s.r_index = serve_static(serve_index_html, "text/html; charset=utf-8");
    s.r_404 = serve_static("not found: try /metrics or /health\n", "text/plain; charset=utf-8");
    s.r_405 = serve_static("method not allowed: GET or HEAD\n", "text/plain; charset=utf-8");
    if (!s.metrics || !s.health || !s.r_index || !s.r_404 || !s.r_405) {
        cli_err("out of memory");
        goto out;
    }
    MHD_add_response_header(s.r_405, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    /* Publish before listening, so that no scrape finds an empty body (the
     * disk collector's first sample only primes its rates). */
    serve_collect(&s);

    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = serve_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    serve_raise_nofile();

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    daemon = MHD_start_daemon(flags, 0, NULL, NULL, serve_handle, &s,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)SERVE_MAX_CONNS,
                              MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVE_CONN_TIMEOUT_S,
                              MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVE_CONN_MEMORY,
                              MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                              MHD_OPTION_END);
    if (!daemon) {
        cli_err("--listen %s: cannot listen (address in use, or not this host's)", listen);
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "trainmon: serving on %s (port %u): /metrics /health\n", listen,
            di ? (unsigned)di->port : 0u);

    int64_t step = (int64_t)(interval * 1e9), next = tm_now_mono_ns() + step;
    while (!serve_stop) {
        serve_sleep_until(next);
        if (serve_stop)
            break;
        serve_collect(&s);
        next += step;
        int64_t now = tm_now_mono_ns();
        if (next < now) /* fell behind (suspended): skip, do not catch up */
            next = now + step;
    }
    rc = 0;
out:
    if (daemon)
        MHD_stop_daemon(daemon);
    serve_free(&s);
    return rc;
}

#else /* TM_NO_HTTP: built where libmicrohttpd was missing */

#include "cli.h"

int cmd_serve(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_err("serve: this build has no HTTP server (libmicrohttpd was missing when it was "
            "built; make deps installs it)");
    return 1;
}
#endif
