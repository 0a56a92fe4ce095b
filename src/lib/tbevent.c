/*
 * tbevent.c - TensorBoard event files without TensorFlow or a protobuf
 * library (docs/FORMAT.md "Exports").  An event file is a sequence of TFRecords,
 * each an Event protobuf; the few fields a scalar needs are encoded by hand:
 *
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; }
 *   Summary { repeated Value value = 1; }
 *   Value   { string tag = 1; float simple_value = 2; }
 *
 * Protobuf and TFRecord are little-endian whatever the host; the code
 * writes bytes explicitly rather than copying host integers.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rec.h"
#include "tbevent.h"
#include "util.h"

/* ------------------------------------------------------------- CRC-32C */

/* The CRC is the record files' CRC-32C (rec.c: table-driven, or SSE4.2
 * when the CPU has it); TFRecord stores it masked, because a CRC of data
 * that embeds CRCs is weak. */
uint32_t tm_tb_masked_crc(const void *data, size_t len)
{
    uint32_t crc = tm_crc32c(0, data, len);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ----------------------------------------------------------- encoding */

struct pb {
    uint8_t *p;
    size_t len, cap;
    bool overflow;
};

static void pb_bytes(struct pb *b, const void *data, size_t len)
{
    if (b->overflow || len > b->cap - b->len) {
        b->overflow = true;
        return;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

static void pb_varint(struct pb *b, uint64_t v)
{
    uint8_t tmp[10];
    size_t n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_bytes(b, tmp, n);
}

static void pb_le(struct pb *b, uint64_t v, size_t n)
{
    uint8_t tmp[8];
    for (size_t i = 0; i < n; i++)
        tmp[i] = (uint8_t)(v >> (8 * i));
    pb_bytes(b, tmp, n);
}

static void pb_double(struct pb *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    pb_le(b, u, 8);
}

static void pb_string(struct pb *b, uint8_t key, const char *s, size_t len)
{
    pb_varint(b, key);
    pb_varint(b, len);
    pb_bytes(b, s, len);
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v > 0x7F) {
        v >>= 7;
        n++;
    }
    return n;
}

#define TB_STR_MAX 4096

int tm_tb_encode_event(uint8_t *buf, size_t cap, double wall_time, bool has_step, int64_t step,
                       const char *file_version, const char *tag, float value)
{
    struct pb b = {.p = buf, .cap = cap};
    pb_varint(&b, 0x09); /* wall_time, fixed64 */
    pb_double(&b, wall_time);
    if (has_step) {
        pb_varint(&b, 0x10); /* step, varint (negative: ten bytes, as protobuf) */
        pb_varint(&b, (uint64_t)step);
    }
    if (file_version) {
        size_t len = strlen(file_version);
        if (len > TB_STR_MAX)
            return -EINVAL;
        pb_string(&b, 0x1A, file_version, len);
    }
    if (tag) {
        size_t tlen = strlen(tag);
        if (tlen > TB_STR_MAX)
            return -EINVAL;
        size_t value_len = 1 + varint_len(tlen) + tlen + 1 + 4; /* tag, simple_value */
        size_t summary_len = 1 + varint_len(value_len) + value_len;
        pb_varint(&b, 0x2A); /* summary */
        pb_varint(&b, summary_len);
        pb_varint(&b, 0x0A); /* value */
        pb_varint(&b, value_len);
        pb_string(&b, 0x0A, tag, tlen);
        pb_varint(&b, 0x15); /* simple_value, fixed32 */
        uint32_t u;
        memcpy(&u, &value, sizeof u);
        pb_le(&b, u, 4);
    }
    return b.overflow ? -ENOSPC : (int)b.len;
}

int tm_tb_frame(uint8_t *out, size_t cap, const uint8_t *data, size_t len)
{
    if (len > INT_MAX - 16 || cap < len + 16)
        return -ENOSPC;
    struct pb b = {.p = out, .cap = cap};
    pb_le(&b, len, 8);
    pb_le(&b, tm_tb_masked_crc(out, 8), 4);
    pb_bytes(&b, data, len);
    pb_le(&b, tm_tb_masked_crc(data, len), 4);
    return (int)b.len;
}

/* ------------------------------------------------------------- writer */

#define TB_RECORD_MAX (TB_STR_MAX * 2 + 128)

struct tm_tb_writer {
    int fd;
    int err; /* first write error, sticky */
    char path[4096];
};

/* Numbers the writers of this process, as TensorFlow's global uid does,
 * so two writers opened in the same second get different names. */
static atomic_uint tb_seq;

static int tb_write_event(tm_tb_writer *w, double wall_time, bool has_step, int64_t step,
                          const char *file_version, const char *tag, float value)
{
    uint8_t ev[TB_RECORD_MAX], rec[TB_RECORD_MAX + 16];
    int n = tm_tb_encode_event(ev, sizeof ev, wall_time, has_step, step, file_version, tag, value);
    if (n < 0)
        return tm_seterr(n, "%s: tag longer than %d bytes", w->path, TB_STR_MAX);
    int m = tm_tb_frame(rec, sizeof rec, ev, (size_t)n);
    if (m < 0)
        return tm_seterr(m, "%s: record too large", w->path);
    int rc = tm_write_full(w->fd, rec, (size_t)m);
    if (rc < 0) {
        if (!w->err)
            w->err = rc;
        return tm_seterr(rc, "%s: %s", w->path, strerror(-rc));
    }
    return 0;
}

int tm_tb_open(tm_tb_writer **out, const char *dir, double wall_time)
{
    if (!out || !dir)
        return tm_seterr(-EINVAL, "tensorboard: no directory given");
    if (wall_time <= 0)
        wall_time = (double)tm_now_real_ns() / 1e9;
    tm_tb_writer *w = calloc(1, sizeof *w);
    if (!w)
        return tm_seterr(-ENOMEM, "tensorboard: out of memory");
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    /* A '/' in a host name would make a path of the file name. */
    for (char *p = host; *p; p++)
        if (*p == '/')
            *p = '_';
    unsigned seq = atomic_fetch_add(&tb_seq, 1u);
    int len = snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%d.%u", dir,
                       (long long)wall_time, host, (int)getpid(), seq);
    if (len < 0 || (size_t)len >= sizeof w->path) {
        free(w);
        return tm_seterr(-ENAMETOOLONG, "%s: path too long", dir);
    }
    /* A new file, O_EXCL|O_NOFOLLOW, mode from the directory (safefile.c). */
    w->fd = tm_file_create(w->path, 0, 0);
    if (w->fd < 0) {
        int rc = w->fd; /* the message is set */
        free(w);
        return rc;
    }
    int rc = tb_write_event(w, wall_time, false, 0, "brain.Event:2", NULL, 0);
    if (rc < 0) {
        close(w->fd);
        unlink(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int tm_tb_scalar(tm_tb_writer *w, const char *tag, int64_t step, double wall_time, float value)
{
    if (!w || !tag)
        return tm_seterr(-EINVAL, "tensorboard: no tag");
    /* A tag is a protobuf string, which must be UTF-8 (readers refuse the
     * event otherwise); series labels come from record files and may not
     * be.  Ill-formed bytes become U+FFFD (tm_escape). */
    size_t len = strlen(tag);
    if (tm_utf8_valid_prefix(tag, len) == len)
        return tb_write_event(w, wall_time, true, step, NULL, tag, value);
    tm_buf b;
    tm_buf_init(&b, TB_STR_MAX);
    int rc = tm_buf_esc(&b, TM_ESC_UTF8, tag, len);
    rc = rc ? tm_seterr(rc, "%s: tag longer than %d bytes", w->path, TB_STR_MAX)
            : tb_write_event(w, wall_time, true, step, NULL, b.data, value);
    tm_buf_free(&b);
    return rc;
}

const char *tm_tb_path(const tm_tb_writer *w)
{
    return w ? w->path : "";
}

int tm_tb_close(tm_tb_writer **wp)
{
    tm_tb_writer *w = *wp;
    if (!w)
        return 0;
    int rc = w->err;
    if (fsync(w->fd) != 0 && !rc && errno != EINVAL)
        rc = tm_seterr(-errno, "%s: %s", w->path, strerror(errno));
    if (close(w->fd) != 0 && !rc)
        rc = tm_seterr(-errno, "%s: %s", w->path, strerror(errno));
    free(w);
    *wp = NULL;
    return rc;
}
