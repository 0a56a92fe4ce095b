/*
 * util.c - the error idiom, EINTR-safe I/O, configurable roots, tm_buf.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static __thread char tm_errbuf[512];

const char *tm_last_error(void)
{
    return tm_errbuf;
}

int tm_seterr(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tm_errbuf, sizeof tm_errbuf, fmt, ap);
    va_end(ap);
    return rc;
}

/* The roots are set once before collectors run (tests, fixtures); a plain
 * static copy is enough. */
static char tm_proc_root_buf[1024];
static char tm_sys_root_buf[1024];
static int tm_proc_root_set, tm_sys_root_set;

void tm_set_proc_root(const char *root)
{
    tm_proc_root_set = root != NULL;
    if (root)
        tm_strlcpy(tm_proc_root_buf, root, sizeof tm_proc_root_buf);
}

void tm_set_sys_root(const char *root)
{
    tm_sys_root_set = root != NULL;
    if (root)
        tm_strlcpy(tm_sys_root_buf, root, sizeof tm_sys_root_buf);
}

const char *tm_proc_root(void)
{
    if (tm_proc_root_set)
        return tm_proc_root_buf;
    const char *e = getenv("TRAINMON_PROC_ROOT");
    return e && *e ? e : "/proc";
}

const char *tm_sys_root(void)
{
    if (tm_sys_root_set)
        return tm_sys_root_buf;
    const char *e = getenv("TRAINMON_SYS_ROOT");
    return e && *e ? e : "/sys";
}

static int64_t tm_clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t tm_now_mono_ns(void)
{
    return tm_clock_ns(CLOCK_MONOTONIC);
}
int64_t tm_now_real_ns(void)
{
    return tm_clock_ns(CLOCK_REALTIME);
}

ssize_t tm_read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

ssize_t tm_pread_full(int fd, void *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, off + (off_t)got);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (n == 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

int tm_write_full(int fd, const void *buf, size_t len)
{
    size_t put = 0;
    while (put < len) {
        ssize_t n = write(fd, (const char *)buf + put, len - put);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        put += (size_t)n;
    }
    return 0;
}

int tm_open(const char *path, int flags, mode_t mode)
{
    for (;;) {
        int fd = open(path, flags | O_CLOEXEC, mode);
        if (fd >= 0)
            return fd;
        if (errno != EINTR)
            return -errno;
    }
}

ssize_t tm_pread_file(int fd, char *buf, size_t cap)
{
    if (cap == 0)
        return -EINVAL;
    /* /proc files are generated on read: read until EOF, then check the
     * buffer was big enough by asking for one byte more. */
    ssize_t n = tm_pread_full(fd, buf, cap - 1, 0);
    if (n < 0)
        return n;
    if ((size_t)n == cap - 1) {
        char extra;
        ssize_t m = tm_pread_full(fd, &extra, 1, (off_t)n);
        if (m > 0)
            return -EFBIG;
    }
    buf[n] = '\0';
    return n;
}

ssize_t tm_read_fd_file(int fd, const char *path, char *buf, size_t cap)
{
    ssize_t n = tm_pread_file(fd, buf, cap);
    close(fd);
    if (n == -EFBIG)
        return tm_seterr((int)n, "%s: larger than %zu bytes", path, cap - 1);
    if (n < 0)
        return tm_seterr((int)n, "%s: %s", path, strerror((int)-n));
    return n;
}

ssize_t tm_read_file(const char *path, char *buf, size_t cap)
{
    int fd = tm_open(path, O_RDONLY, 0);
    if (fd < 0)
        return tm_seterr(fd, "%s: %s", path, strerror(-fd));
    return tm_read_fd_file(fd, path, buf, cap);
}

__attribute__((format(printf, 4, 0))) static int
tm_root_path(char *buf, size_t cap, const char *root, const char *fmt, va_list ap)
{
    int a = snprintf(buf, cap, "%s/", root);
    if (a < 0 || (size_t)a >= cap)
        return -ENAMETOOLONG;
    int b = vsnprintf(buf + a, cap - (size_t)a, fmt, ap);
    if (b < 0 || (size_t)b >= cap - (size_t)a)
        return -ENAMETOOLONG;
    return 0;
}

int tm_proc_path(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tm_root_path(buf, cap, tm_proc_root(), fmt, ap);
    va_end(ap);
    return rc;
}

int tm_sys_path(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tm_root_path(buf, cap, tm_sys_root(), fmt, ap);
    va_end(ap);
    return rc;
}

void tm_strlcpy(char *dst, const char *src, size_t cap)
{
    if (cap == 0)
        return;
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

int tm_parse_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    if (s >= end || *s < '0' || *s > '9')
        return -EINVAL;
    uint64_t v = 0;
    while (s < end && *s >= '0' && *s <= '9') {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -ERANGE;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return 0;
}

void tm_buf_init(tm_buf *b, size_t cap)
{
    b->data = NULL;
    b->len = b->alloc = 0;
    b->cap = cap;
}

int tm_buf_add(tm_buf *b, const void *data, size_t len)
{
    if (len > b->cap || b->len > b->cap - len)
        return -E2BIG;
    if (b->len + len + 1 > b->alloc) {
        size_t want = b->alloc ? b->alloc : 256;
        while (want < b->len + len + 1)
            want *= 2;
        if (want > b->cap + 1)
            want = b->cap + 1;
        char *p = realloc(b->data, want);
        if (!p)
            return -ENOMEM;
        b->data = p;
        b->alloc = want;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int tm_buf_vprintf(tm_buf *b, const char *fmt, va_list ap)
{
    /* Most pieces are short: format on the stack, and only a longer one
     * (a long tag, a path) costs a second pass into the heap. */
    char small[512];
    va_list again;
    va_copy(again, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    int rc;
    if (n < 0) {
        rc = -EINVAL;
    } else if ((size_t)n < sizeof small) {
        rc = tm_buf_add(b, small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (!big) {
            rc = -ENOMEM;
        } else {
            vsnprintf(big, (size_t)n + 1, fmt, again);
            rc = tm_buf_add(b, big, (size_t)n);
            free(big);
        }
    }
    va_end(again);
    return rc;
}

int tm_buf_printf(tm_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = tm_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------- text out: valid UTF-8 */

size_t tm_utf8_decode(const char *s, size_t len, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    *cp = TM_UTF8_BAD;
    if (!len)
        return 0;
    unsigned char c = u[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    /* Unicode Table 3-7: the lead byte fixes the length and the range of
     * the second byte (which rules out overlong forms, surrogates and code
     * points beyond U+10FFFF); later bytes are plain continuations. */
    size_t need;
    uint32_t v;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 1;
        v = c & 0x1Fu;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        v = c & 0x0Fu;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        v = c & 0x07u;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 1; /* a continuation byte alone, C0, C1, F5..FF */
    }
    for (size_t i = 1; i <= need; i++) {
        if (i >= len || u[i] < lo || u[i] > hi)
            return i; /* the maximal ill-formed subpart: what was valid so far */
        v = v << 6 | (u[i] & 0x3Fu);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = v;
    return need + 1;
}

size_t tm_utf8_valid_prefix(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        if ((unsigned char)s[i] < 0x80) {
            i++;
            continue;
        }
        uint32_t cp;
        size_t n = tm_utf8_decode(s + i, len - i, &cp);
        if (cp == TM_UTF8_BAD)
            break;
        i += n;
    }
    return i;
}

#define TM_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD in UTF-8 */

/* The replacement of ASCII byte c under how (its length in *n), or NULL
 * when c goes out as it is. */
static const char *esc_ascii(tm_esc how, unsigned char c, char tmp[8], size_t *n)
{
    const char *r = NULL;
    bool ctl = c < 0x20 || c == 0x7f;
    switch (how) {
    case TM_ESC_UTF8:
        break;
    case TM_ESC_JSON:
        switch (c) {
        case '"':
            r = "\\\"";
            break;
        case '\\':
            r = "\\\\";
            break;
        case '\n':
            r = "\\n";
            break;
        case '\t':
            r = "\\t";
            break;
        case '\r':
            r = "\\r";
            break;
        default:
            if (ctl) {
                snprintf(tmp, 8, "\\u%04x", c);
                r = tmp;
            }
        }
        break;
    case TM_ESC_PROM:
        r = c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : NULL;
        break;
    case TM_ESC_HTML:
        switch (c) {
        case '&':
            r = "&amp;";
            break;
        case '<':
            r = "&lt;";
            break;
        case '>':
            r = "&gt;";
            break;
        case '"':
            r = "&quot;";
            break;
        case '\'':
            r = "&#39;";
            break;
        default:
            /* HTML has no escape for them (&#1; is a parse error too). */
            if (ctl && c != '\t' && c != '\n' && c != '\r')
                r = TM_REPLACEMENT;
        }
        break;
    case TM_ESC_CSV:
        r = c == '"' ? "\"\"" : NULL;
        break;
    case TM_ESC_TEXT:
        r = ctl ? "?" : NULL;
        break;
    }
    if (r)
        *n = strlen(r);
    return r;
}

int tm_escape(tm_esc how, const char *s, size_t len, tm_esc_put put, void *ctx)
{
    size_t from = 0, i = 0;
    int rc;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        const char *rep;
        size_t rlen = 0, adv = 1;
        char tmp[8];
        if (c >= 0x80) {
            uint32_t cp;
            adv = tm_utf8_decode(s + i, len - i, &cp);
            if (cp != TM_UTF8_BAD) {
                i += adv;
                continue;
            }
            rep = TM_REPLACEMENT;
            rlen = 3;
        } else if (!(rep = esc_ascii(how, c, tmp, &rlen))) {
            i++;
            continue;
        }
        if (i > from && (rc = put(ctx, s + from, i - from)) != 0)
            return rc;
        if ((rc = put(ctx, rep, rlen)) != 0)
            return rc;
        i += adv;
        from = i;
    }
    return i > from ? put(ctx, s + from, i - from) : 0;
}

static int buf_put(void *ctx, const char *p, size_t n)
{
    return tm_buf_add(ctx, p, n);
}

int tm_buf_esc(tm_buf *b, tm_esc how, const char *s, size_t len)
{
    return tm_escape(how, s, len, buf_put, b);
}

int tm_buf_json_str(tm_buf *b, const char *s, size_t len)
{
    return tm_buf_esc(b, TM_ESC_JSON, s, len);
}

void tm_buf_reset(tm_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void tm_buf_free(tm_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->alloc = 0;
}

double tm_event_num(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(json, pat);
    if (!p)
        return NAN;
    p += strlen(pat);
    char *end;
    double v = strtod(p, &end);
    return end == p || !isfinite(v) || v < 0 ? NAN : v;
}
