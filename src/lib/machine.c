/*
 * machine.c - the CPUs a job may use (machine.h).  The affinity mask
 * bounds which CPUs its threads run on; the cgroup CPU quota bounds how
 * much CPU time they get per period, whatever the mask says (a container
 * with --cpus=2 on a 64-core host sees 64 CPUs online and in its mask).
 * The usable CPUs are the smaller of the two.  The quota of every
 * ancestor cgroup applies too, so the tightest one along the path counts.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "machine.h"
#include "util.h"

#define MACHINE_MAX_CPU (1 << 20)

static bool m_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* A decimal number of at most 9 digits at *p (before end); advances *p. */
static int m_uint(const char **p, const char *end, long *out)
{
    const char *s = *p;
    long v = 0;
    int digits = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        if (++digits > 9)
            return -EINVAL;
        v = v * 10 + (*s - '0');
        s++;
    }
    if (!digits)
        return -EINVAL;
    *p = s;
    *out = v;
    return 0;
}

int tm_machine_parse_cpulist(const char *buf, size_t len)
{
    if (!buf)
        return -EINVAL;
    const char *p = buf, *end = buf + len;
    while (end > p && m_space(end[-1]))
        end--;
    if (p == end)
        return -EINVAL;
    long count = 0;
    for (;;) {
        long a, b;
        if (m_uint(&p, end, &a) < 0)
            return -EINVAL;
        b = a;
        if (p < end && *p == '-') {
            p++;
            if (m_uint(&p, end, &b) < 0)
                return -EINVAL;
        }
        if (b < a || b >= MACHINE_MAX_CPU)
            return -EINVAL;
        count += b - a + 1;
        if (count > MACHINE_MAX_CPU)
            return -EINVAL;
        if (p == end)
            break;
        if (*p++ != ',')
            return -EINVAL;
    }
    return (int)count;
}

/* One whitespace-separated token of buf[0..len) at *p: [*s, *e). */
static bool m_token(const char **p, const char *end, const char **s, const char **e)
{
    const char *q = *p;
    while (q < end && m_space(*q))
        q++;
    if (q == end)
        return false;
    *s = q;
    while (q < end && !m_space(*q))
        q++;
    *e = q;
    *p = q;
    return true;
}

/* The whole token [s, e) as a signed decimal (at most 18 digits). */
static int m_int_token(const char *s, const char *e, long long *out)
{
    bool neg = s < e && *s == '-';
    if (neg)
        s++;
    if (s == e || e - s > 18)
        return -EINVAL;
    long long v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return -EINVAL;
        v = v * 10 + (*s - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

static bool m_rest_blank(const char *p, const char *end)
{
    for (; p < end; p++)
        if (!m_space(*p))
            return false;
    return true;
}

int tm_machine_parse_cpumax(const char *buf, size_t len, double *cpus)
{
    if (!buf || !cpus)
        return -EINVAL;
    const char *p = buf, *end = buf + len, *qs, *qe, *ps, *pe;
    if (!m_token(&p, end, &qs, &qe))
        return -EINVAL;
    long long period = 100000, quota = -1;
    bool has_period = m_token(&p, end, &ps, &pe);
    if (has_period && (m_int_token(ps, pe, &period) < 0 || period <= 0))
        return -EINVAL;
    if (!m_rest_blank(p, end))
        return -EINVAL;
    if (qe - qs == 3 && memcmp(qs, "max", 3) == 0) {
        *cpus = NAN;
        return 0;
    }
    if (m_int_token(qs, qe, &quota) < 0 || quota <= 0)
        return -EINVAL;
    *cpus = (double)quota / (double)period;
    return 0;
}

int tm_machine_parse_cfs(const char *quota, size_t qlen, const char *period, size_t plen,
                         double *cpus)
{
    if (!quota || !period || !cpus)
        return -EINVAL;
    const char *p = quota, *end = quota + qlen, *s, *e;
    long long q, per;
    if (!m_token(&p, end, &s, &e) || m_int_token(s, e, &q) < 0 || !m_rest_blank(p, end))
        return -EINVAL;
    if (q == -1) {
        *cpus = NAN;
        return 0;
    }
    if (q <= 0)
        return -EINVAL;
    p = period;
    end = period + plen;
    if (!m_token(&p, end, &s, &e) || m_int_token(s, e, &per) < 0 || per <= 0 ||
        !m_rest_blank(p, end))
        return -EINVAL;
    *cpus = (double)q / (double)per;
    return 0;
}

/* Whether the comma-separated list [s, e) holds the name exactly. */
static bool m_list_has(const char *s, const char *e, const char *name)
{
    size_t n = strlen(name);
    while (s < e) {
        const char *c = memchr(s, ',', (size_t)(e - s));
        const char *ie = c ? c : e;
        if ((size_t)(ie - s) == n && memcmp(s, name, n) == 0)
            return true;
        s = ie + 1;
    }
    return false;
}

int tm_machine_parse_v1_cpu_path(const char *buf, size_t len, char *out, size_t cap)
{
    if (!buf || !out || cap == 0)
        return -EINVAL;
    out[0] = '\0';
    const char *p = buf, *end = buf + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        const char *line = p;
        p = eol + 1;
        /* "id:controllers:path"; the path may hold colons itself. */
        const char *c1 = memchr(line, ':', (size_t)(eol - line));
        if (!c1)
            continue;
        const char *c2 = memchr(c1 + 1, ':', (size_t)(eol - c1 - 1));
        if (!c2 || !m_list_has(c1 + 1, c2, "cpu"))
            continue;
        size_t n = (size_t)(eol - c2 - 1);
        if (n == 0 || n >= cap || memchr(c2 + 1, '\0', n))
            continue;
        memcpy(out, c2 + 1, n);
        out[n] = '\0';
        return 1;
    }
    return 0;
}

/* --- reading a job's CPUs */

#define M_BUF 8192

/* A cgroup path usable under a mount point: absolute, without ".."
 * components (a process outside our cgroup namespace shows "/../.."). */
static bool m_path_ok(const char *path)
{
    if (path[0] != '/')
        return false;
    for (const char *s = path; (s = strstr(s, "/..")) != NULL; s += 3)
        if (s[3] == '/' || s[3] == '\0')
            return false;
    return true;
}

/* The quota at one cgroup directory dir (under the sys root): NAN when
 * none or unreadable. */
static double m_quota_at(const char *dir, bool v2, char *buf)
{
    char path[PATH_MAX];
    double cpus = NAN;
    if (v2) {
        if (tm_sys_path(path, sizeof path, "/fs/cgroup%s/cpu.max", dir) < 0)
            return NAN;
        ssize_t n = tm_read_file(path, buf, M_BUF);
        if (n < 0 || tm_machine_parse_cpumax(buf, (size_t)n, &cpus) < 0)
            return NAN;
        return cpus;
    }
    char pbuf[64];
    const char *mounts[] = {"/fs/cgroup/cpu,cpuacct", "/fs/cgroup/cpu"};
    for (size_t i = 0; i < 2; i++) {
        if (tm_sys_path(path, sizeof path, "%s%s/cpu.cfs_period_us", mounts[i], dir) < 0)
            continue;
        ssize_t pn = tm_read_file(path, pbuf, sizeof pbuf);
        if (pn < 0)
            continue;
        if (tm_sys_path(path, sizeof path, "%s%s/cpu.cfs_quota_us", mounts[i], dir) < 0)
            continue;
        ssize_t qn = tm_read_file(path, buf, M_BUF);
        if (qn < 0 || tm_machine_parse_cfs(buf, (size_t)qn, pbuf, (size_t)pn, &cpus) < 0)
            return NAN;
        return cpus;
    }
    return NAN;
}

/* The tightest quota from the cgroup path up to the mount's root (the
 * root of a container's own cgroup namespace is its cgroup). */
static double m_quota_along(const char *cgpath, bool v2, char *buf)
{
    char dir[PATH_MAX];
    tm_strlcpy(dir, cgpath, sizeof dir);
    double best = NAN;
    for (;;) {
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
            dir[--n] = '\0';
        double q = m_quota_at(strcmp(dir, "/") == 0 ? "" : dir, v2, buf);
        if (!isnan(q) && !(q >= best))
            best = q;
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
    }
    if (strcmp(cgpath, "/") != 0) {
        double q = m_quota_at("", v2, buf);
        if (!isnan(q) && !(q >= best))
            best = q;
    }
    return best;
}

void tm_machine_read(tm_machine *m, pid_t pid)
{
    static __thread char buf[M_BUF];
    char path[PATH_MAX], who[32];
    m->online = m->affinity = -1;
    m->quota = m->usable = NAN;
    if (pid > 0)
        snprintf(who, sizeof who, "%d", (int)pid);
    else
        snprintf(who, sizeof who, "self");
    ssize_t n;
    if (tm_sys_path(path, sizeof path, "/devices/system/cpu/online") == 0 &&
        (n = tm_read_file(path, buf, sizeof buf)) >= 0) {
        int c = tm_machine_parse_cpulist(buf, (size_t)n);
        if (c > 0)
            m->online = c;
    }
    if (tm_proc_path(path, sizeof path, "/%s/status", who) == 0 &&
        (n = tm_read_file(path, buf, sizeof buf)) >= 0) {
        const char *k = strstr(buf, "\nCpus_allowed_list:");
        if (k) {
            k += strlen("\nCpus_allowed_list:");
            const char *eol = strchr(k, '\n');
            size_t len = eol ? (size_t)(eol - k) : strlen(k);
            while (len && m_space(*k)) {
                k++;
                len--;
            }
            int c = tm_machine_parse_cpulist(k, len);
            if (c > 0)
                m->affinity = c;
        }
    }
    if (tm_proc_path(path, sizeof path, "/%s/cgroup", who) == 0 &&
        (n = tm_read_file(path, buf, sizeof buf)) >= 0) {
        char cg[PATH_MAX], v1[PATH_MAX];
        bool have_v2 = false;
        /* The v2 line is "0::/path". */
        for (const char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
            if (strncmp(l, "0::", 3) == 0) {
                const char *eol = strchr(l, '\n');
                size_t len = eol ? (size_t)(eol - l - 3) : strlen(l + 3);
                if (len > 0 && len < sizeof cg) {
                    memcpy(cg, l + 3, len);
                    cg[len] = '\0';
                    have_v2 = true;
                }
                break;
            }
        int v1found = tm_machine_parse_v1_cpu_path(buf, (size_t)n, v1, sizeof v1);
        if (v1found == 1 && m_path_ok(v1))
            m->quota = m_quota_along(v1, false, buf);
        else if (have_v2 && m_path_ok(cg))
            m->quota = m_quota_along(cg, true, buf);
    }
    m->usable = tm_machine_usable(m);
}

double tm_machine_usable(const tm_machine *m)
{
    double cpus = m->affinity > 0 ? (double)m->affinity : m->online > 0 ? (double)m->online : NAN;
    if (!isnan(m->quota) && m->quota > 0 && !(m->quota >= cpus))
        cpus = m->quota;
    return cpus;
}

/* --- advice */

double tm_machine_workers_fit(double usable, size_t ranks, bool keep_loop_core)
{
    if (!(usable > 0))
        return NAN;
    double per = floor(usable / (double)(ranks ? ranks : 1) + 1e-9) - (keep_loop_core ? 1 : 0);
    return per > 0 ? per : 0;
}

double tm_machine_workers_advice(char *buf, size_t cap, double need, double now, double usable,
                                 size_t ranks, bool gpu, const char *why, bool *capped)
{
    const char *cheaper = gpu ? "make each sample cheaper (decode smaller images, move "
                                "augmentation to the GPU, cache decoded data)"
                              : "make each sample cheaper (decode smaller images, cache "
                                "decoded data, pre-process the data set once ahead)";
    char paren[384];
    snprintf(paren, sizeof paren, "(%s%snow %.0f)", why ? why : "", why && why[0] ? "; " : "", now);
    double fit = tm_machine_workers_fit(usable, ranks, false);
    if (capped)
        *capped = false;
    if (!(need >= 0)) { /* the batch or compute time was not measured */
        snprintf(buf, cap, "The workers' time per batch is unknown %s: %s%s.", paren, cheaper,
                 isnan(fit) ? "" : ", or add workers while cores are free");
        return NAN;
    }
    if (isnan(fit)) {
        snprintf(buf, cap,
                 "About %.0f workers per rank would keep up %s. Set num_workers=%.0f if the "
                 "machine has %.0f free cores per rank; otherwise %s.",
                 need, paren, need, need, cheaper);
        return need;
    }
    char per[48];
    if (ranks > 1)
        snprintf(per, sizeof per, " (%.3g per rank)", usable / (double)ranks);
    else
        per[0] = '\0';
    if (need <= fit) {
        snprintf(buf, cap,
                 "About %.0f workers per rank would keep up %s. Set num_workers=%.0f: it fits "
                 "the %.3g core%s the job may use%s.",
                 need, paren, need, usable, usable == 1 ? "" : "s", per);
        return need;
    }
    if (capped)
        *capped = true;
    /* The remedy first (the report's "Top remedy" is the advice's first
     * sentence), then the arithmetic behind it.  By how much a sample must
     * get cheaper for the workers that fit to keep up: fit workers do the
     * work of need when each sample costs fit/need of now. */
    size_t len;
    if (fit >= 1)
        len = (size_t)snprintf(
            buf, cap,
            "With the %.0f worker%s that fit%s%s, each sample must cost %.0f%% less (%.0f/%.0f "
            "of now) to keep up: %s, or give the job %.0f cores per rank.",
            fit, fit == 1 ? "" : "s", fit == 1 ? "s" : "", ranks > 1 ? " per rank" : "",
            100 * (1 - fit / need), fit, need, cheaper, need);
    else
        len = (size_t)snprintf(buf, cap,
                               "No core is left per rank for workers: give the job %.0f cores "
                               "per rank, or %s.",
                               need, cheaper);
    if (len >= cap)
        return fit;
    size_t more = (size_t)snprintf(buf + len, cap - len,
                                   " It would need about %.0f workers per rank %s but the job may "
                                   "use %.3g core%s%s",
                                   need, paren, usable, usable == 1 ? "" : "s", per);
    if (more >= cap - len)
        return fit;
    len += more;
    if (now > fit)
        snprintf(buf + len, cap - len,
                 "; %.0f workers per rank already oversubscribe those cores (num_workers=%.0f "
                 "fits).",
                 now, fit);
    else if (now < fit)
        snprintf(buf + len, cap - len, "; until then num_workers=%.0f uses the cores there are.",
                 fit);
    else
        snprintf(buf + len, cap - len, ".");
    return fit;
}
