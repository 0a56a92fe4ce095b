/*
 * util.h - helpers shared by the library's modules: the error idiom, reads
 * that retry EINTR, paths under the configurable /proc and /sys roots, and a
 * bounded growable buffer.  Internal: front-ends use include/trainmon.h.
 */
#ifndef TM_UTIL_H
#define TM_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "trainmon.h"

#define TM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Sets this thread's error message (printf-style) and returns rc, so that a
 * failing path reads `return tm_seterr(-errno, "%s: %s", path, strerror(errno));`. */
int tm_seterr(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* read()/pread() until len bytes, EOF or an error; EINTR is retried here and
 * nowhere else.  Return the bytes read or a negative errno. */
ssize_t tm_read_full(int fd, void *buf, size_t len);
ssize_t tm_pread_full(int fd, void *buf, size_t len, off_t off);
/* write() until all of buf is written; EINTR retried.  0 or negative errno. */
int tm_write_full(int fd, const void *buf, size_t len);

/* fn(ctx, out) in a child process, with a deadline (deadline.c): a call
 * that may block in the kernel on a hung mount.  out (outlen bytes of plain
 * data) is copied back.  fn's return value (its error text carried over),
 * -ETIMEDOUT when the child did not answer within wait_s (it is killed and
 * left to be reaped), or another negative errno. */
typedef int (*tm_child_fn)(void *ctx, void *out);
int tm_call_within(double wait_s, tm_child_fn fn, void *ctx, void *out, size_t outlen);

/* open() with O_CLOEXEC, EINTR retried.  fd or negative errno. */
int tm_open(const char *path, int flags, mode_t mode);

/* Reads a whole small file into buf (NUL-terminated).  Returns the length,
 * -EFBIG when it does not fit in cap-1 bytes, or a negative errno.  Sets
 * the error message. */
ssize_t tm_read_file(const char *path, char *buf, size_t cap);
/* The same for a file already opened as path (fd is closed). */
ssize_t tm_read_fd_file(int fd, const char *path, char *buf, size_t cap);

/* Re-reads a kept-open file from offset 0 (a /proc file) into buf,
 * NUL-terminated; as tm_read_file. */
ssize_t tm_pread_file(int fd, char *buf, size_t cap);

/* Formats "<proc root>/..." and "<sys root>/..." into buf.  -ENAMETOOLONG
 * when it does not fit. */
int tm_proc_path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int tm_sys_path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies src into dst of cap bytes, always NUL-terminated, truncating. */
void tm_strlcpy(char *dst, const char *src, size_t cap);

/* The number after "key": in an agent event's JSON text (NAN when absent,
 * not a number, or negative); the text is the writer's and not trusted:
 * strtod stops at its end.  json is NUL-terminated. */
double tm_event_num(const char *json, const char *key);

/* Parses an unsigned decimal at *p, advancing *p past it; leading blanks
 * skipped.  0 on success, -EINVAL if there is no digit, -ERANGE on overflow. */
int tm_parse_u64(const char **p, const char *end, uint64_t *out);

/* A growable byte buffer with a hard cap (curl's dynbuf habit): appends
 * beyond the cap fail with -E2BIG and free nothing else; tm_buf_free
 * releases the memory. */
typedef struct tm_buf {
    char *data;
    size_t len, alloc, cap;
} tm_buf;
void tm_buf_init(tm_buf *b, size_t cap);
int tm_buf_add(tm_buf *b, const void *data, size_t len);
int tm_buf_printf(tm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a va_list: a piece of any length (up to the buffer's cap). */
int tm_buf_vprintf(tm_buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Appends s escaped for how (tm_escape: always valid UTF-8 out). */
int tm_buf_esc(tm_buf *b, tm_esc how, const char *s, size_t len);
/* Appends s as the contents of a JSON string (no quotes added):
 * tm_buf_esc with TM_ESC_JSON. */
int tm_buf_json_str(tm_buf *b, const char *s, size_t len);
void tm_buf_reset(tm_buf *b);
void tm_buf_free(tm_buf *b);

/* Saturating int64 arithmetic for clocks read from record files: a crafted
 * or corrupted timestamp must give a wrong-but-bounded number, never signed
 * overflow (undefined behaviour, and a UBSan abort in the fuzzers). */
static inline int64_t tm_sat_add64(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}
static inline int64_t tm_sat_sub64(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}
/* (a - b) in seconds, saturated. */
static inline double tm_ns_diff_s(int64_t a, int64_t b)
{
    return (double)tm_sat_sub64(a, b) / 1e9;
}

#endif /* TM_UTIL_H */
