/*
 * utf8_writer - writes a run directory whose strings are not UTF-8, for
 * tests/e2e/utf8_out.sh: what a crafted file, another host's files or a
 * process name can put in front of every writer.
 *
 *   utf8_writer DIR
 *
 * DIR/rank0.tmr  rank 0, the host name in its header "gpu\xff\xfe-<e acute>";
 *                20 steps, a capture tagged with an overlong '/', phases
 *                named with a surrogate and with a quote and a control
 *                byte, an event with bad bytes in its name and details,
 *                an OOM whose phase and snapshot hold bad bytes
 * DIR/pid77.tmr  a training process without a rank whose role (its label
 *                in the report) is "py\xff", memory near capacity
 * DIR/system.tmr series whose labels hold bad bytes (a comm name, a
 *                device), one with a bad unit
 * DIR/meta.json  a command with a truncated sequence (the bytes raw in a
 *                JSON string: what a careless writer leaves)
 *
 * The header's host and role are set by rewriting the written header and
 * its CRC (docs/FORMAT.md), as a file from a host with such a name has them.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rec.h"
#include "trainmon.h"

static int fail(const char *what)
{
    fprintf(stderr, "utf8_writer: %s: %s\n", what, tm_last_error());
    return 1;
}

static int put(tm_rec *w, uint16_t type, int64_t t, const void *buf, int len)
{
    return len < 0 ? len : tm_rec_append(w, type, t, buf, (uint32_t)len);
}

/* Rewrites the header's host or role (NULL: keep) and its CRC. */
static int patch_header(const char *path, const char *host, const char *role)
{
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return -errno;
    tm_rec_filehdr h;
    int rc = 0;
    if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
        rc = -EIO;
        goto out;
    }
    if (host) {
        memset(h.host, 0, sizeof h.host);
        memcpy(h.host, host, strlen(host));
    }
    if (role) {
        memset(h.role, 0, sizeof h.role);
        memcpy(h.role, role, strlen(role));
    }
    h.crc = tm_crc32c(0, &h, offsetof(tm_rec_filehdr, crc));
    if (pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
        rc = -EIO;
out:
    close(fd);
    return rc;
}

static int write_training(const char *path, int rank, const char *role, double allocated)
{
    tm_rec_opts o = {.role = role, .rank = rank};
    tm_rec *w = NULL;
    if (tm_rec_open(&w, path, &o) < 0)
        return fail(path);
    uint8_t buf[4096];
    int rc = 0;
    int64_t t0 = tm_now_mono_ns() - 5000000000LL;
    static const char phase[] = "ph\xED\xA0\x80se";     /* U+D800 */
    static const char phase2[] = "q\"uo\x01te\xC3\xA9"; /* quote, control, e acute */
    tm_inproc_phase p = {
        .kind = TM_PHASE_ENTER, .depth = 1, .step = 0, .name = phase, .name_len = sizeof phase - 1};
    rc = rc ? rc : put(w, TM_REC_PHASE, t0, buf, tm_inproc_encode_phase(&p, buf, sizeof buf));
    tm_inproc_phase p2 = {.kind = TM_PHASE_ENTER,
                          .depth = 2,
                          .step = 0,
                          .name = phase2,
                          .name_len = sizeof phase2 - 1};
    rc = rc ? rc : put(w, TM_REC_PHASE, t0, buf, tm_inproc_encode_phase(&p2, buf, sizeof buf));
    for (uint64_t i = 0; i < 20 && !rc; i++) {
        int64_t s = t0 + (int64_t)i * 100000000;
        tm_inproc_step st = {
            .step = i, .start_ns = s, .end_ns = s + 100000000, .data_wait_ns = 60000000};
        rc = put(w, TM_REC_STEP, s + 100000000, buf, tm_inproc_encode_step(&st, buf, sizeof buf));
    }
    static const char tag[] = "tag\xC0\xAF\xFF-\xE2\x82"; /* overlong '/', lone FF, cut */
    tm_inproc_capture c = {.source = TM_CAPTURE_USER,
                           .device = 0,
                           .step = 20,
                           .allocated = allocated,
                           .reserved = allocated,
                           .peak_allocated = allocated,
                           .active = NAN,
                           .inactive_split = NAN,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = 8e9,
                           .num_alloc_retries = 0,
                           .num_ooms = 0,
                           .host_rss = NAN,
                           .tag = tag,
                           .tag_len = sizeof tag - 1};
    int64_t te = t0 + 2100000000;
    rc = rc ? rc : put(w, TM_REC_CAPTURE, te, buf, tm_inproc_encode_capture(&c, buf, sizeof buf));
    p2.kind = TM_PHASE_EXIT;
    rc = rc ? rc : put(w, TM_REC_PHASE, te, buf, tm_inproc_encode_phase(&p2, buf, sizeof buf));
    p.kind = TM_PHASE_EXIT;
    rc = rc ? rc : put(w, TM_REC_PHASE, te, buf, tm_inproc_encode_phase(&p, buf, sizeof buf));
    rc = rc ? rc : tm_rec_event(w, te, "ev\xFF", "{\"k\":\"v\xFE\xF4\x90\x80\x80\"}");
    static const char ophase[] = "fwd\xFF", snap[] = "oom\xF8\x88.pickle";
    tm_inproc_oom e = {.device = 0,
                       .seq = 1,
                       .step = 20,
                       .source = TM_OOM_OBSERVER,
                       .requested = 1e9,
                       .free_device = 1e8,
                       .total_device = 8e9,
                       .allocated = allocated,
                       .reserved = allocated,
                       .phase = ophase,
                       .phase_len = sizeof ophase - 1,
                       .snapshot = snap,
                       .snapshot_len = sizeof snap - 1};
    rc = rc ? rc : put(w, TM_REC_OOM, te, buf, tm_inproc_encode_oom(&e, buf, sizeof buf));
    tm_rec_close(&w);
    if (rc) {
        fprintf(stderr, "utf8_writer: %s: append: %s\n", path, strerror(-rc));
        return 1;
    }
    return 0;
}

static int write_system(const char *path)
{
    tm_rec_opts o = {.role = "system", .rank = -1};
    tm_rec *w = NULL;
    if (tm_rec_open(&w, path, &o) < 0)
        return fail(path);
    int ids[3];
    ids[0] = tm_rec_series(w, "proc.process_cpu_cores", "pid=77,comm=py\xFF\xC3", "cores");
    ids[1] = tm_rec_series(w, "disk.read_bytes_per_second", "device=sd\xFE", "bytes/s");
    ids[2] = tm_rec_series(w, "gpu.utilization", "gpu=0,uuid=GPU-\xED\xBF\xBF", "ratio\xFF");
    for (int i = 0; i < 3; i++)
        if (ids[i] < 0)
            return fail("series");
    int64_t t0 = tm_now_mono_ns() - 5000000000LL;
    int rc = 0;
    for (int k = 0; k < 10 && !rc; k++) {
        uint32_t id[3] = {(uint32_t)ids[0], (uint32_t)ids[1], (uint32_t)ids[2]};
        double v[3] = {0.5 + k * 0.01, 1e6 * k, 0.3};
        rc = tm_rec_sample(w, t0 + k * 250000000LL, id, v, 3);
    }
    tm_rec_close(&w);
    return rc ? fail("sample") : 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: utf8_writer DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/rank0.tmr", argv[1]);
    if (write_training(path, 0, "rank0", 2e9))
        return 1;
    if (patch_header(path, "gpu\xFF\xFE-\xC3\xA9", NULL) < 0) {
        fprintf(stderr, "utf8_writer: %s: cannot patch the header\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s/pid77.tmr", argv[1]);
    if (write_training(path, -1, "pid77", 7.9e9))
        return 1;
    if (patch_header(path, NULL, "py\xFF") < 0) {
        fprintf(stderr, "utf8_writer: %s: cannot patch the header\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s/system.tmr", argv[1]);
    if (write_system(path))
        return 1;
    snprintf(path, sizeof path, "%s/meta.json", argv[1]);
    FILE *f = fopen(path, "w");
    if (!f)
        return fail(path);
    fputs("{\"command\": [\"python\", \"tr\xE2\x82"
          "ain.py\", \"--name=\xFF\"], \"host\": \"h\xFE\"}\n",
          f);
    return fclose(f) == 0 ? 0 : 1;
}
