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
 * Robustness: one epoll thread; caps on connections in total (512) and per
 * client address (256), with admission past a lower soft cap cutting the
 * stalest connection instead of refusing the new one, so that the kubelet's
 * loopback /health probe gets in beside an attacker on the same address
 * (SERVE_MAX_CONNS says why); a 2 s deadline from accept (or the previous
 * response) to a request's headers, kept by a watchdog thread, which a
 * client trickling bytes does not extend (libmicrohttpd's own timeout is an
 * idle one); a per-connection memory cap (an oversized request gets
 * 431/413 and is dropped); only GET and HEAD are served.  /health answers
 * 503 "stale" when no collection finished for max(3 intervals, 5 s), decided
 * per request, so a stuck collector cannot keep saying "ok".  SIGTERM and
 * SIGINT end serve within a second in every state: the handler writes a
 * stop pipe that the main loop's sleep polls, and a main thread stuck in a
 * collection 0.4 s later is not waited for (serve_watchdog).
 * tests/e2e/serve_slowloris.sh attacks it with 3,000 trickling and 10,000
 * idle connections while probing /health.
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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
    __typeof__(MHD_get_connection_info) *get_connection_info;
} mhd;
#define MHD_start_daemon (*mhd.start_daemon)
#define MHD_stop_daemon (*mhd.stop_daemon)
#define MHD_get_daemon_info (*mhd.get_daemon_info)
#define MHD_create_response_from_buffer (*mhd.create_response_from_buffer)
#define MHD_add_response_header (*mhd.add_response_header)
#define MHD_queue_response (*mhd.queue_response)
#define MHD_destroy_response (*mhd.destroy_response)
#define MHD_get_connection_info (*mhd.get_connection_info)

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
    SERVE_SYM(get_connection_info, "MHD_get_connection_info");
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
/* Connection limits.  A scrape fleet opens a handful of connections (a
 * Prometheus pair, an agent, a probe; bench_serve's wrk keeps 16 open from
 * one address), so the caps are far above need, and low enough that memory
 * stays bounded: each connection may hold SERVE_CONN_MEMORY, 512 of them
 * 8 MiB.  Caps alone would lock out the kubelet's /health probe: it comes
 * from 127.0.0.1, the address of any attacker on the node, and
 * libmicrohttpd refuses a connection at a cap before reading its request,
 * so the probe would wait (total cap) or be refused (per-address cap) until
 * the attacker's connections time out.  Hence soft caps below the hard ones:
 * a connection admitted past a soft cap makes room by cutting the stalest
 * connection of its address (past the total soft cap: of all addresses),
 * that is one still waiting for its request, the oldest first, else one
 * whose response has been stuck past the header deadline (a slow reader).
 * The new connection always gets in; an attacker's connections only churn;
 * a probe, which sends its request at once, is the newest and is read
 * before 192 more connections from its address could push it out (at
 * 7,000 connects/s, about 27 ms).  Connections from other addresses are
 * not touched until the total soft cap, which one address cannot reach.
 * libmicrohttpd's hard caps leave room for what one of its turns accepts
 * (at most 11) while the connections cut in the previous turn close. */
#define SERVE_MAX_CONNS 512             /* libmicrohttpd's cap: refused beyond */
#define SERVE_CONNS_SOFT 448            /* beyond, admission cuts the stalest */
#define SERVE_MAX_PER_ADDR 256          /* libmicrohttpd's cap per client address */
#define SERVE_PER_ADDR_SOFT 192         /* beyond, admission cuts the address's stalest */
#define SERVE_HEADER_DEADLINE_MS 2000   /* accept (or last response) to request headers */
#define SERVE_SERVING_DEADLINE_MS 10000 /* request headers to response sent */
#define SERVE_SWEEP_MS 250              /* the watchdog checks the deadlines this often */
#define SERVE_STOP_GRACE_MS 400         /* after SIGTERM, the main thread's time to finish */
#define SERVE_STALE_MIN_S 5.0           /* /health: collection older than this (and */
#define SERVE_STALE_INTERVALS 3.0       /* than 3 intervals) is stale: 503 */
#define SERVE_CONN_TIMEOUT_S 10         /* idle (slow) clients are cut after this */
#define SERVE_CONN_MEMORY (16 * 1024)   /* per connection: request line + headers */
#define SERVE_TEXT_CAP (8u << 20)       /* /metrics larger than this is an error */
#define SERVE_HEALTH_WINDOW_S 10.0      /* /health judges disks over this window */
#define SERVE_HEALTH_SLOTS 64

#define SERVE_MAX_RUNS TM_FOLLOW_MAX_RUNS
#define SERVE_RECORDS_PER_PASS 200000 /* per file per interval: bounds a catch-up */

/* Set by the signal handler, read by every thread: a lock-free atomic is
 * both async-signal-safe and free of data races (sig_atomic_t is only the
 * former). */
static atomic_int serve_stop;
/* Written by the signal handler and never drained: readable means
 * "stopping" to every thread that polls it (the main loop's sleep, the
 * watchdog), whichever thread the signal landed on. */
static int serve_stop_pipe[2] = {-1, -1};

static void serve_on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    serve_stop = 1;
    if (serve_stop_pipe[1] >= 0) {
        ssize_t w = write(serve_stop_pipe[1], "s", 1);
        (void)w; /* a full pipe is readable already, which is all that counts */
    }
    errno = saved;
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

    pthread_mutex_t lock; /* guards the two published responses and their time */
    struct MHD_Response *r_metrics, *r_health;
    int64_t published_ns; /* when they were published (/health's staleness) */
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

/* /health names the damaged record files of the live runs (the reader
 * reads past damage, so the rest still counts; this says where to look). */
static void serve_health_files(struct serve *s)
{
    tm_health_file files[16];
    size_t n = 0;
    const tm_follow_run *R;
    for (size_t i = 0; (R = tm_follow_run_at(s->runs, i)) && n < sizeof files / sizeof files[0];
         i++) {
        const tm_follow_rank *k;
        for (size_t j = 0;
             (k = tm_follow_rank_at(s->runs, i, j)) && n < sizeof files / sizeof files[0]; j++)
            if (k->damage)
                files[n++] = (tm_health_file){.run = R->name,
                                              .file = k->file,
                                              .places = k->damage,
                                              .offset = k->damage_offset,
                                              .what = k->damage_what};
    }
    tm_health_write_files(s->health, files, n);
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

    if (serve_stop)
        return; /* stopping: the rest is not needed (a stuck one: serve_watchdog) */
    if (s->runs) {
        s->runs_ok = tm_follow_poll(s->runs, SERVE_RECORDS_PER_PASS) == 0;
        if (tm_follow_truncated(s->runs) && !s->warned_many) {
            cli_warn("--runs: more than %d live runs or %d record files in a run: following "
                     "the first ones",
                     TM_FOLLOW_MAX_RUNS, TM_FOLLOW_MAX_FILES);
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
    if (s->runs)
        serve_health_files(s);

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
    s->published_ns = tm_now_mono_ns();
    pthread_mutex_unlock(&s->lock);
    /* Scrapes in flight hold their own references. */
    if (om)
        MHD_destroy_response(om);
    if (oh)
        MHD_destroy_response(oh);
}

/* --- HTTP: connection admission and deadlines
 *
 * libmicrohttpd's timeout is an idle one (any byte resets it), so a client
 * trickling a header byte every second would hold its connection forever.
 * Each connection is tracked here from libmicrohttpd's start notification
 * to its close notification: when its current wait began, and whether a
 * request is being served.  The watchdog thread cuts a connection whose
 * request headers are not in SERVE_HEADER_DEADLINE_MS after it was accepted
 * (or after its previous response finished: keep-alive waits count too),
 * or whose response is not out SERVE_SERVING_DEADLINE_MS after its request;
 * admission cuts the stalest one past a soft cap (see SERVE_MAX_CONNS).
 * "Cut" is shutdown(2) of the socket: libmicrohttpd then reads end of file
 * and closes the connection on its next turn, in its own thread.  That is
 * safe from another thread because the close notification, which removes
 * the entry under the table's lock, comes before libmicrohttpd closes the
 * descriptor, so no descriptor is shut down after it could be reused. */

struct serve_conn {
    int fd;
    bool serving;           /* its request's headers are in; the response is under way */
    bool cut;               /* shut down here; libmicrohttpd has yet to close it */
    int64_t since_ns;       /* start of the current wait: accepted, request in, response out */
    size_t li;              /* index in serve_http.live */
    unsigned char addr[17]; /* the client address without the port: family, bytes */
};

static struct serve_http {
    pthread_mutex_t lock; /* guards the table; taken by libmicrohttpd and the watchdog */
    struct serve_conn slot[SERVE_MAX_CONNS]; /* libmicrohttpd's cap: never more live */
    struct serve_conn *live[SERVE_MAX_CONNS];
    size_t nlive;
    struct serve_conn *freel[SERVE_MAX_CONNS];
    size_t nfree;
    int64_t stale_ns;             /* /health: published bodies older than this are stale */
    atomic_bool done;             /* the main thread finished stopping */
    uint64_t cut_late, cut_admit; /* connections cut by deadline, by admission */
} serve_http = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void serve_http_init(double interval)
{
    for (size_t i = 0; i < SERVE_MAX_CONNS; i++)
        serve_http.freel[i] = &serve_http.slot[SERVE_MAX_CONNS - 1 - i];
    serve_http.nfree = SERVE_MAX_CONNS;
    double stale_s = SERVE_STALE_INTERVALS * interval;
    if (stale_s < SERVE_STALE_MIN_S)
        stale_s = SERVE_STALE_MIN_S;
    serve_http.stale_ns = (int64_t)(stale_s * 1e9);
}

/* The address without the port, so that every connection of one client
 * compares equal; an IPv4-mapped IPv6 address counts as the IPv4 one. */
static void serve_addr_key(const struct sockaddr *sa, unsigned char key[17])
{
    memset(key, 0, 17);
    if (!sa)
        return;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)sa;
        key[0] = 4;
        memcpy(key + 1, &in->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)sa;
        if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
            key[0] = 4;
            memcpy(key + 1, in6->sin6_addr.s6_addr + 12, 4);
        } else {
            key[0] = 6;
            memcpy(key + 1, &in6->sin6_addr, 16);
        }
    }
}

/* Caller holds the lock. */
static void serve_conn_cut(struct serve_conn *k)
{
    shutdown(k->fd, SHUT_RDWR);
    k->cut = true;
}

/* Whether admission may cut k: a connection waiting for its request, or one
 * whose response has been stuck past the header deadline (a slow reader). */
static bool serve_conn_evictable(const struct serve_conn *k, int64_t now)
{
    return !k->cut && (!k->serving || now - k->since_ns > SERVE_HEADER_DEADLINE_MS * 1000000LL);
}

/* Whether a is staler than b: waiting before serving, then the older. */
static bool serve_conn_staler(const struct serve_conn *a, const struct serve_conn *b)
{
    if (a->serving != b->serving)
        return !a->serving;
    return a->since_ns < b->since_ns;
}

/* Runs in libmicrohttpd's thread: admission (past a soft cap, cut the
 * stalest connection of the new one's address, else of all) and release. */
static void serve_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                                enum MHD_ConnectionNotificationCode toe)
{
    struct serve_http *h = cls;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        struct serve_conn *k = *socket_context;
        if (!k)
            return;
        pthread_mutex_lock(&h->lock);
        struct serve_conn *last = h->live[--h->nlive];
        h->live[k->li] = last;
        last->li = k->li;
        h->freel[h->nfree++] = k;
        pthread_mutex_unlock(&h->lock);
        *socket_context = NULL;
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_STARTED)
        return;
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!fi)
        return;
    int64_t now = tm_now_mono_ns();
    pthread_mutex_lock(&h->lock);
    if (!h->nfree) { /* cannot happen: the table is as large as libmicrohttpd's cap */
        shutdown(fi->connect_fd, SHUT_RDWR);
        pthread_mutex_unlock(&h->lock);
        return;
    }
    struct serve_conn *k = h->freel[--h->nfree];
    *k = (struct serve_conn){.fd = fi->connect_fd, .since_ns = now, .li = h->nlive};
    serve_addr_key(ai ? ai->client_addr : NULL, k->addr);
    h->live[h->nlive++] = k;
    *socket_context = k;

    size_t same = 0, all = 0;
    struct serve_conn *v_same = NULL, *v_all = NULL;
    for (size_t i = 0; i < h->nlive; i++) {
        struct serve_conn *q = h->live[i];
        if (q->cut)
            continue;
        all++;
        bool mine = memcmp(q->addr, k->addr, sizeof k->addr) == 0;
        same += mine;
        if (q == k || !serve_conn_evictable(q, now))
            continue;
        if (!v_all || serve_conn_staler(q, v_all))
            v_all = q;
        if (mine && (!v_same || serve_conn_staler(q, v_same)))
            v_same = q;
    }
    struct serve_conn *victim = same > SERVE_PER_ADDR_SOFT ? v_same : NULL;
    if (!victim && all > SERVE_CONNS_SOFT)
        victim = v_all;
    if (victim) {
        serve_conn_cut(victim);
        h->cut_admit++;
    }
    pthread_mutex_unlock(&h->lock);
}

/* A request's headers are in (serving) or its response is out (waiting for
 * the next request on a kept-alive connection): a new wait starts. */
static void serve_conn_mark(struct MHD_Connection *c, bool serving)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct serve_conn *k = ci ? ci->socket_context : NULL;
    if (!k)
        return;
    pthread_mutex_lock(&serve_http.lock);
    if (k->serving != serving) {
        k->serving = serving;
        k->since_ns = tm_now_mono_ns();
    }
    pthread_mutex_unlock(&serve_http.lock);
}

static void serve_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                               enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)con_cls;
    (void)toe;
    serve_conn_mark(c, false);
}

/* Cuts the connections past their deadline. */
static void serve_conns_sweep(struct serve_http *h)
{
    int64_t now = tm_now_mono_ns();
    pthread_mutex_lock(&h->lock);
    for (size_t i = 0; i < h->nlive; i++) {
        struct serve_conn *k = h->live[i];
        int64_t limit_ms = k->serving ? SERVE_SERVING_DEADLINE_MS : SERVE_HEADER_DEADLINE_MS;
        if (!k->cut && now - k->since_ns > limit_ms * 1000000LL) {
            serve_conn_cut(k);
            h->cut_late++;
        }
    }
    pthread_mutex_unlock(&h->lock);
}

/* Whether the stop pipe became readable within timeout_ms. */
static bool serve_wait_stop(int timeout_ms)
{
    struct pollfd p = {.fd = serve_stop_pipe[0], .events = POLLIN};
    return poll(&p, 1, timeout_ms) > 0 || serve_stop;
}

/* The watchdog thread: sweeps the deadlines every SERVE_SWEEP_MS (here, not
 * in the main loop, which a slow collection can hold for seconds), and once
 * a stop is asked gives the main thread SERVE_STOP_GRACE_MS to finish; a
 * main thread still collecting then (a file that takes seconds to read) is
 * not waited for: the process exits.  serve writes nothing that a cut-short
 * collection could leave half done. */
static void *serve_watchdog(void *arg)
{
    struct serve_http *h = arg;
    while (!serve_wait_stop(SERVE_SWEEP_MS))
        serve_conns_sweep(h);
    int64_t end = tm_now_mono_ns() + SERVE_STOP_GRACE_MS * 1000000LL;
    while (!atomic_load(&h->done)) {
        if (tm_now_mono_ns() >= end) {
            /* write(2), not stdio: the main thread may hold stderr's lock. */
            static const char msg[] = "trainmon: serve: collection did not stop within 0.4 s "
                                      "of the signal; exiting without it\n";
            ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
            (void)w;
            _exit(0);
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* --- HTTP: the handler */

static enum MHD_Result serve_queue_shared(struct serve *s, struct MHD_Connection *c,
                                          struct MHD_Response **which)
{
    pthread_mutex_lock(&s->lock);
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, *which);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* /health: the published verdict, unless the collection that wrote it is
 * stale (decided now, at request time, so that a stuck collector cannot
 * keep saying "ok"): then 503, which a liveness probe acts on. */
static enum MHD_Result serve_queue_health(struct serve *s, struct MHD_Connection *c)
{
    pthread_mutex_lock(&s->lock);
    int64_t age_ns = tm_now_mono_ns() - s->published_ns;
    if (age_ns <= serve_http.stale_ns) {
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, s->r_health);
        pthread_mutex_unlock(&s->lock);
        return rc;
    }
    pthread_mutex_unlock(&s->lock);
    double age = (double)age_ns / 1e9, limit = (double)serve_http.stale_ns / 1e9;
    char body[320];
    int n = snprintf(body, sizeof body,
                     "{\"status\":\"stale\",\"reasons\":[\"no collection finished for %.1f s "
                     "(limit %.1f s): the exporter's data is stale\"],"
                     "\"last_collection_age_seconds\":%.3f,\"max_age_seconds\":%.1f}\n",
                     age, limit, age, limit);
    if (n < 0 || (size_t)n >= sizeof body)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer((size_t)n, body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, r);
    MHD_destroy_response(r);
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
    serve_conn_mark(c, true);
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, s->r_405);
    if (strcmp(url, "/metrics") == 0)
        return serve_queue_shared(s, c, &s->r_metrics);
    if (strcmp(url, "/health") == 0)
        return serve_queue_health(s, c);
    if (strcmp(url, "/") == 0)
        return MHD_queue_response(c, MHD_HTTP_OK, s->r_index);
    return MHD_queue_response(c, MHD_HTTP_NOT_FOUND, s->r_404);
}

static struct MHD_Response *serve_static(const char *body, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), (void *)(uintptr_t)body,
                                                             MHD_RESPMEM_PERSISTENT);
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
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
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

/* SERVE_MAX_CONNS connections and the process's own files must fit under
 * the soft descriptor limit: raise it if needed (up to the hard limit). */
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

/* Sleeps until deadline_ns (CLOCK_MONOTONIC) or a stop, whichever is
 * first: the stop pipe wakes it whichever thread took the signal. */
static void serve_sleep_until(int64_t deadline_ns)
{
    for (;;) {
        int64_t left = deadline_ns - tm_now_mono_ns();
        if (left <= 0)
            return;
        int ms = left > 60000000000LL ? 60000 : (int)((left + 999999) / 1000000);
        if (serve_wait_stop(ms))
            return;
    }
}

/* TEST ONLY: TRAINMON_TEST_COLLECT_DELAY_MS, read once at startup, makes
 * each collection after the first start that much later, ignoring signals,
 * as a collection stuck in a file would (tests/e2e/serve_slowloris.sh: /health
 * turns stale, SIGTERM is still honoured).  Not documented for users. */
static long serve_test_delay_ms(void)
{
    const char *v = getenv("TRAINMON_TEST_COLLECT_DELAY_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    return ms > 0 && ms < 3600000 ? ms : 0;
}

static void serve_test_stall(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
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

/* What the command line asked for. */
struct serve_opts {
    const char *listen, *runs_dir;
    double interval;
    bool gpu_wanted;
    unsigned gpu_idx[64];
    size_t ngpu_idx;
    char (*devs)[TM_DISK_NAME_MAX]; /* SERVE_MAX_DEVS */
    size_t ndevs;
    int npaths;
    struct sockaddr_storage ss;
    socklen_t sslen;
};

/* Parses and checks the options: a bad one fails before anything is
 * opened.  Returns -1 to go on, else the exit status. */
static int serve_parse(int argc, char **argv, struct serve_opts *o, struct cli_alerts *al)
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
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "d:i:h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN:
            o->listen = optarg;
            break;
        case OPT_RUNS:
            o->runs_dir = optarg;
            break;
        case 'd': {
            tm_blkdev bd;
            o->npaths++;
            if (tm_blkdev_resolve_within(optarg, 0, &bd, TM_BLKDEV_RESOLVE_WAIT_S) < 0) {
                cli_err("%s", tm_last_error());
                return 1;
            }
            if (bd.kind != TM_FS_BLOCK || !bd.top[0]) {
                cli_warn("%s", bd.why);
                break;
            }
            cli_add_dev(o->devs, &o->ndevs, SERVE_MAX_DEVS, bd.top);
            for (size_t k = 0; k < bd.nleaves; k++)
                cli_add_dev(o->devs, &o->ndevs, SERVE_MAX_DEVS, bd.leaves[k]);
            break;
        }
        case 'i':
            if (!cli_parse_seconds(optarg, &o->interval)) {
                cli_err("-i %s: not an interval in seconds", optarg);
                return 2;
            }
            break;
        case OPT_GPU:
            if (!cli_parse_gpus(optarg, &o->gpu_wanted, o->gpu_idx, &o->ngpu_idx)) {
                cli_err("--gpu %s: want all, none, or indices like 0,2", optarg);
                return 2;
            }
            break;
        case OPT_ALERT:
            if (cli_alerts_add_rule(al, optarg))
                return 2;
            break;
        case OPT_ON_ALERT:
            if (cli_alerts_add_cmd(al, optarg))
                return 2;
            break;
        case 'h':
            serve_usage(stdout);
            return 0;
        default:
            serve_usage(stderr);
            return 2;
        }
    }
    /* Rules are checked before anything is opened: a typo fails at once. */
    int arc = cli_alerts_check(al);
    if (arc)
        return arc;
    if (optind < argc) {
        cli_err("serve: unexpected argument %s", argv[optind]);
        serve_usage(stderr);
        return 2;
    }
    if (serve_parse_listen(o->listen, &o->ss, &o->sslen) < 0) {
        cli_err("--listen %s: want HOST:PORT, [IPv6]:PORT or :PORT", o->listen);
        return 2;
    }
    if (o->runs_dir) {
        struct stat st;
        if (stat(o->runs_dir, &st) != 0) {
            cli_err("%s: %s", o->runs_dir, strerror(errno));
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            cli_err("%s: not a directory", o->runs_dir);
            return 1;
        }
    }
    if (o->npaths > 0 && o->ndevs == 0)
        cli_warn("no block device behind the given paths: exporting pressure, GPUs and runs");
    return -1;
}

/* Opens what serves: the alert engine (first: the sampler feeds it), the
 * sampler, the runs follower, libmicrohttpd and the static responses, and
 * publishes a first collection, so that no scrape finds an empty body.
 * 0, or -1 after saying why (serve_free closes what was opened). */
static int serve_open(struct serve *s, const struct serve_opts *o)
{
    pthread_mutex_init(&s->lock, NULL);
    tm_health_limits_default(&s->limits);
    s->hslots = (size_t)lround(SERVE_HEALTH_WINDOW_S / o->interval) + 1;
    if (s->hslots < 2)
        s->hslots = 2;
    if (s->hslots > SERVE_HEALTH_SLOTS)
        s->hslots = SERVE_HEALTH_SLOTS;
    if (cli_alerts_open(&s->alerts))
        return -1;
    const char *names[SERVE_MAX_DEVS];
    for (size_t i = 0; i < o->ndevs; i++)
        names[i] = o->devs[i];
    tm_sampler_opts so = {.disks_off = o->npaths > 0 && o->ndevs == 0,
                          .disks = names,
                          .ndisks = o->ndevs,
                          .gpu_off = !o->gpu_wanted,
                          .gpus = o->gpu_idx,
                          .ngpus = o->ngpu_idx,
                          .prom = true,
                          .alerts = s->alerts.e};
    if (tm_sampler_new(&s->sampler, &so) < 0) {
        cli_err("%s", tm_last_error());
        return -1;
    }
    const char *oerr;
    if ((oerr = tm_sampler_open_error(s->sampler, "disk"))) {
        cli_err("%s", oerr);
        return -1;
    }
    if ((oerr = tm_sampler_open_error(s->sampler, "pressure")))
        cli_warn("pressure stall information unavailable: %s", oerr);
    if ((oerr = tm_sampler_open_error(s->sampler, "gpu")))
        cli_warn("%s", oerr);
    if (o->runs_dir) {
        s->runs_out = calloc(SERVE_MAX_RUNS, sizeof *s->runs_out);
        if (!s->runs_out || tm_follow_open(&s->runs, o->runs_dir, true) < 0) {
            cli_err("out of memory");
            return -1;
        }
    }
    const char *why = NULL;
    if (serve_load_mhd(&why) < 0) {
        cli_err("serve: cannot load libmicrohttpd: %s (make deps installs it)", why);
        return -1;
    }
    s->metrics = tm_text_new(SERVE_TEXT_CAP);
    s->health = tm_text_new(SERVE_TEXT_CAP);
    s->r_index = serve_static(serve_index_html, "text/html; charset=utf-8");
    s->r_404 = serve_static("not found: try /metrics or /health\n", "text/plain; charset=utf-8");
    s->r_405 = serve_static("method not allowed: GET or HEAD\n", "text/plain; charset=utf-8");
    if (!s->metrics || !s->health || !s->r_index || !s->r_404 || !s->r_405) {
        cli_err("out of memory");
        return -1;
    }
    MHD_add_response_header(s->r_405, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    serve_collect(s);
    return 0;
}

/* Installs the signal handlers (they only set the flag and write the stop
 * pipe; the main loop and the watchdog poll that pipe, so a stop is seen at
 * once wherever the signal lands) and starts listening.  The daemon, or
 * NULL after saying why. */
static struct MHD_Daemon *serve_listen(struct serve *s, const struct serve_opts *o)
{
    if (pipe2(serve_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        cli_err("serve: pipe: %s", strerror(errno));
        return NULL;
    }
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa = {.sa_handler = serve_on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    serve_raise_nofile();
    serve_http_init(o->interval);

    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
    if (o->ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* The backlog holds a burst of connects while admission makes room, so
     * that a probe's SYN is not dropped (a dropped SYN is retried after 1 s). */
    struct MHD_Daemon *daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, serve_handle, s, MHD_OPTION_SOCK_ADDR,
        (const struct sockaddr *)&o->ss, MHD_OPTION_CONNECTION_LIMIT, (unsigned)SERVE_MAX_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)SERVE_MAX_PER_ADDR,
        MHD_OPTION_NOTIFY_CONNECTION, serve_on_connection, &serve_http, MHD_OPTION_NOTIFY_COMPLETED,
        serve_on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SERVE_CONN_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SERVE_CONN_MEMORY,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u, MHD_OPTION_END);
    if (!daemon)
        cli_err("--listen %s: cannot listen (address in use, or not this host's)", o->listen);
    return daemon;
}

/* Collects every interval until SIGTERM or SIGINT. */
static void serve_loop(struct serve *s, double interval)
{
    long test_delay_ms = serve_test_delay_ms();
    int64_t step = (int64_t)(interval * 1e9), next = tm_now_mono_ns() + step;
    while (!serve_stop) {
        serve_sleep_until(next);
        if (serve_stop)
            break;
        if (test_delay_ms)
            serve_test_stall(test_delay_ms);
        serve_collect(s);
        next += step;
        int64_t now = tm_now_mono_ns();
        if (next < now) /* fell behind (suspended): skip, do not catch up */
            next = now + step;
    }
}

int cmd_serve(int argc, char **argv)
{
    static char devs[SERVE_MAX_DEVS][TM_DISK_NAME_MAX];
    static struct serve_opts o;
    static struct cli_alerts al;
    memset(&o, 0, sizeof o);
    o.listen = SERVE_DEFAULT_LISTEN;
    o.interval = 1.0;
    o.gpu_wanted = true;
    o.devs = devs;
    int rc = serve_parse(argc, argv, &o, &al);
    if (rc >= 0)
        return rc;

    static struct serve s;
    memset(&s, 0, sizeof s);
    s.alerts = al; /* a rule's command runner started here is stopped by serve_free */
    rc = 1;
    struct MHD_Daemon *daemon = NULL;
    pthread_t watchdog;
    bool have_watchdog = false;
    if (serve_open(&s, &o) < 0 || !(daemon = serve_listen(&s, &o)))
        goto out;
    int prc = pthread_create(&watchdog, NULL, serve_watchdog, &serve_http);
    if (prc != 0) {
        cli_err("serve: cannot start the watchdog thread: %s", strerror(prc));
        goto out;
    }
    have_watchdog = true;
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "trainmon: serving on %s (port %u): /metrics /health\n", o.listen,
            di ? (unsigned)di->port : 0u);
    serve_loop(&s, o.interval);
    rc = 0;
out:
    if (daemon)
        MHD_stop_daemon(daemon);
    if (have_watchdog) {
        atomic_store(&serve_http.done, true);
        if (!serve_stop) { /* not a signal: wake the watchdog's sweep loop */
            serve_stop = 1;
            ssize_t w = write(serve_stop_pipe[1], "s", 1);
            (void)w;
        }
        pthread_join(watchdog, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (serve_stop_pipe[i] >= 0) {
            int fd = serve_stop_pipe[i];
            serve_stop_pipe[i] = -1; /* before the close: the handler checks it */
            close(fd);
        }
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
