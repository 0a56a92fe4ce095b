/*
 * chrome.c - Chrome/Perfetto JSON traces (docs/FORMAT.md "Exports"), the format
 * both chrome://tracing and ui.perfetto.dev open.
 *
 * Metadata, counters and instants are written as they come.  Complete
 * slices ("X") are kept and written at close: the viewers require slices
 * on one thread to nest (a slice that starts inside another must end inside
 * it), and a timeline built from records does not guarantee that (a phase
 * that outlives its step, clocks of two processes).  At close the slices of
 * each (pid, tid) are sorted by start, longer first on ties, and a child
 * that overruns its parent is cut at the parent's end.  Times are kept in
 * integer nanoseconds so that the nesting test is exact; they are written
 * as microseconds with three decimals.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define CHROME_MAX_SLICES (8u << 20)
#define CHROME_FLUSH_AT (1u << 20) /* bytes buffered before a write */

struct chrome_slice {
    int pid, tid;
    int64_t ts, dur;
    size_t seq;
    char *name, *args;
};

struct tm_chrome {
    FILE *f;
    char path[4096];
    int err; /* first error, sticky */
    bool first;
    bool regular; /* removed on error only if a regular file (not /dev/stdout) */
    tm_buf b;     /* the event being written */
    struct chrome_slice *s;
    size_t n, cap;
};

static void chrome_fail(tm_chrome *c, int rc)
{
    if (!c->err)
        c->err = rc;
}

static void chrome_time(tm_buf *b, int *bad, int64_t ns)
{
    const char *sign = "";
    uint64_t u = (uint64_t)ns;
    if (ns < 0) {
        sign = "-";
        u = (uint64_t)0 - u;
    }
    *bad |= tm_buf_printf(b, "%s%llu.%03llu", sign, (unsigned long long)(u / 1000),
                          (unsigned long long)(u % 1000));
}

static void chrome_str(tm_buf *b, int *bad, const char *s)
{
    *bad |= tm_buf_add(b, "\"", 1);
    *bad |= tm_buf_json_str(b, s ? s : "", s ? strlen(s) : 0);
    *bad |= tm_buf_add(b, "\"", 1);
}

/* Whether args looks like a JSON object: the caller's text goes in as is,
 * so at least refuse what would certainly break the file. */
static bool chrome_args_ok(const char *args)
{
    if (!args)
        return true;
    size_t len = strlen(args);
    while (len && (args[len - 1] == ' ' || args[len - 1] == '\n'))
        len--;
    while (*args == ' ')
        args++, len--;
    return len >= 2 && args[0] == '{' && args[len - 1] == '}';
}

/* Starts an event: '{' after a comma when needed, then "ph" and "name". */
static int chrome_begin(tm_chrome *c, char ph, const char *name)
{
    if (c->err)
        return c->err;
    tm_buf_reset(&c->b);
    int bad = 0;
    bad |= tm_buf_printf(&c->b, "%s{\"ph\":\"%c\",\"name\":", c->first ? "\n" : ",\n", ph);
    chrome_str(&c->b, &bad, name);
    return bad;
}

static int chrome_end(tm_chrome *c, int bad)
{
    bad |= tm_buf_add(&c->b, "}", 1);
    if (bad) {
        chrome_fail(c, bad < 0 ? bad : -EINVAL);
        return tm_seterr(c->err, "%s: event too large or out of memory", c->path);
    }
    if (fwrite(c->b.data, 1, c->b.len, c->f) != c->b.len) {
        chrome_fail(c, errno ? -errno : -EIO);
        return tm_seterr(c->err, "%s: %s", c->path, strerror(-c->err));
    }
    c->first = false;
    return 0;
}

int tm_chrome_open(tm_chrome **out, const char *path)
{
    tm_chrome *c = calloc(1, sizeof *c);
    if (!c)
        return tm_seterr(-ENOMEM, "chrome trace: out of memory");
    tm_strlcpy(c->path, path, sizeof c->path);
    /* Standard output (export without -o) is whatever the caller made it;
     * any other path is a user-named output: no symlink followed at its
     * last component, no FIFO or device, no other user's file (safefile.c). */
    bool to_stdout = strcmp(path, "/dev/stdout") == 0 || strcmp(path, "-") == 0;
    int fd = to_stdout ? fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0) : tm_file_open_output(path, 0666);
    if (fd < 0 && to_stdout)
        fd = tm_seterr(-errno, "%s: %s", path, strerror(errno));
    c->f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!c->f) {
        int rc = fd >= 0 ? tm_seterr(-errno, "%s: %s", path, strerror(errno)) : fd;
        if (fd >= 0)
            close(fd);
        free(c);
        return rc;
    }
    /* Only a file this call opened by name is removed on an error (never
     * the file behind /dev/stdout). */
    c->regular = !to_stdout;
    setvbuf(c->f, NULL, _IOFBF, CHROME_FLUSH_AT);
    tm_buf_init(&c->b, 1u << 20);
    c->first = true;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", c->f);
    *out = c;
    return 0;
}

static int chrome_meta(tm_chrome *c, const char *what, int pid, int tid, bool with_tid,
                       const char *name)
{
    int bad = chrome_begin(c, 'M', what);
    if (bad && c->err)
        return c->err;
    bad |= tm_buf_printf(&c->b, ",\"pid\":%d", pid);
    if (with_tid)
        bad |= tm_buf_printf(&c->b, ",\"tid\":%d", tid);
    bad |= tm_buf_add(&c->b, ",\"args\":{\"name\":", 16);
    chrome_str(&c->b, &bad, name);
    bad |= tm_buf_add(&c->b, "}", 1);
    return chrome_end(c, bad);
}

int tm_chrome_process_name(tm_chrome *c, int pid, const char *name)
{
    return chrome_meta(c, "process_name", pid, 0, false, name);
}

int tm_chrome_thread_name(tm_chrome *c, int pid, int tid, const char *name)
{
    return chrome_meta(c, "thread_name", pid, tid, true, name);
}

int tm_chrome_slice(tm_chrome *c, int pid, int tid, const char *name, int64_t ts_ns, int64_t dur_ns,
                    const char *args_json)
{
    if (c->err)
        return c->err;
    if (dur_ns < 0 || !name || !chrome_args_ok(args_json))
        return tm_seterr(-EINVAL, "%s: slice '%s': negative duration or bad args", c->path,
                         name ? name : "");
    if (c->n == c->cap) {
        if (c->cap >= CHROME_MAX_SLICES)
            return tm_seterr(-E2BIG, "%s: more than %u slices", c->path, CHROME_MAX_SLICES);
        size_t ncap = c->cap ? c->cap * 2 : 1024;
        struct chrome_slice *p = realloc(c->s, ncap * sizeof *p);
        if (!p)
            return tm_seterr(-ENOMEM, "%s: out of memory", c->path);
        c->s = p;
        c->cap = ncap;
    }
    struct chrome_slice *s = &c->s[c->n];
    *s = (struct chrome_slice){.pid = pid, .tid = tid, .ts = ts_ns, .dur = dur_ns, .seq = c->n};
    s->name = strdup(name);
    s->args = args_json ? strdup(args_json) : NULL;
    if (!s->name || (args_json && !s->args)) {
        free(s->name);
        free(s->args);
        return tm_seterr(-ENOMEM, "%s: out of memory", c->path);
    }
    c->n++;
    return 0;
}

int tm_chrome_counter(tm_chrome *c, int pid, const char *name, int64_t ts_ns,
                      const char *const *keys, const double *values, size_t n)
{
    size_t have = 0;
    for (size_t i = 0; i < n; i++)
        have += isfinite(values[i]);
    if (have == 0)
        return c->err; /* all unavailable: nothing to draw */
    int bad = chrome_begin(c, 'C', name);
    if (bad && c->err)
        return c->err;
    bad |= tm_buf_printf(&c->b, ",\"pid\":%d,\"ts\":", pid);
    chrome_time(&c->b, &bad, ts_ns);
    bad |= tm_buf_add(&c->b, ",\"args\":{", 9);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(values[i]))
            continue;
        if (!first)
            bad |= tm_buf_add(&c->b, ",", 1);
        first = false;
        chrome_str(&c->b, &bad, keys[i]);
        bad |= tm_buf_printf(&c->b, ":%.15g", values[i]);
    }
    bad |= tm_buf_add(&c->b, "}", 1);
    return chrome_end(c, bad);
}

int tm_chrome_instant(tm_chrome *c, int pid, int tid, const char *name, int64_t ts_ns, char scope,
                      const char *args_json)
{
    if (scope != 'g' && scope != 'p' && scope != 't')
        scope = 't';
    if (!chrome_args_ok(args_json))
        return tm_seterr(-EINVAL, "%s: instant '%s': bad args", c->path, name ? name : "");
    int bad = chrome_begin(c, 'i', name);
    if (bad && c->err)
        return c->err;
    bad |= tm_buf_printf(&c->b, ",\"s\":\"%c\",\"pid\":%d,\"tid\":%d,\"ts\":", scope, pid, tid);
    chrome_time(&c->b, &bad, ts_ns);
    if (args_json)
        bad |= tm_buf_printf(&c->b, ",\"args\":%s", args_json);
    return chrome_end(c, bad);
}

static int slice_cmp(const void *a, const void *b)
{
    const struct chrome_slice *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    if (x->tid != y->tid)
        return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    if (x->dur != y->dur)
        return x->dur > y->dur ? -1 : 1; /* the parent first */
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Sorts, clips and writes the slices. */
static void chrome_write_slices(tm_chrome *c, size_t *clipped)
{
    if (c->n)
        qsort(c->s, c->n, sizeof *c->s, slice_cmp);
    int64_t *stack = NULL; /* ends of the open slices of the current thread */
    size_t depth = 0, scap = 0;
    for (size_t i = 0; i < c->n && !c->err; i++) {
        struct chrome_slice *s = &c->s[i];
        if (i == 0 || s->pid != c->s[i - 1].pid || s->tid != c->s[i - 1].tid)
            depth = 0;
        while (depth && stack[depth - 1] <= s->ts)
            depth--;
        /* ts and dur come from record files: sums saturate (util.h). */
        if (depth && tm_sat_add64(s->ts, s->dur) > stack[depth - 1]) {
            s->dur = tm_sat_sub64(stack[depth - 1], s->ts);
            (*clipped)++;
        }
        if (depth == scap) {
            size_t ncap = scap ? scap * 2 : 16;
            int64_t *p = realloc(stack, ncap * sizeof *p);
            if (!p) {
                chrome_fail(c, -ENOMEM);
                break;
            }
            stack = p;
            scap = ncap;
        }
        stack[depth++] = tm_sat_add64(s->ts, s->dur);
        int bad = chrome_begin(c, 'X', s->name);
        if (bad && c->err)
            break;
        bad |= tm_buf_printf(&c->b, ",\"pid\":%d,\"tid\":%d,\"ts\":", s->pid, s->tid);
        chrome_time(&c->b, &bad, s->ts);
        bad |= tm_buf_add(&c->b, ",\"dur\":", 7);
        chrome_time(&c->b, &bad, s->dur);
        if (s->args)
            bad |= tm_buf_printf(&c->b, ",\"args\":%s", s->args);
        chrome_end(c, bad);
    }
    free(stack);
}

int tm_chrome_close(tm_chrome **cp, size_t *clipped)
{
    tm_chrome *c = *cp;
    size_t nclip = 0;
    if (!c)
        return 0;
    chrome_write_slices(c, &nclip);
    if (!c->err && fputs("\n]}\n", c->f) == EOF)
        chrome_fail(c, -EIO);
    if (fflush(c->f) != 0 && !c->err)
        chrome_fail(c, errno ? -errno : -EIO);
    if (fclose(c->f) != 0 && !c->err)
        chrome_fail(c, errno ? -errno : -EIO);
    int rc = c->err;
    if (rc) {
        if (c->regular)
            unlink(c->path); /* never leave half a trace that looks like one */
        tm_seterr(rc, "%s: %s", c->path, strerror(-rc));
    }
    for (size_t i = 0; i < c->n; i++) {
        free(c->s[i].name);
        free(c->s[i].args);
    }
    free(c->s);
    tm_buf_free(&c->b);
    free(c);
    *cp = NULL;
    if (clipped)
        *clipped = nclip;
    return rc;
}
