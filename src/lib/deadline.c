/*
 * deadline.c - a call that may block in the kernel, made with a deadline.
 *
 * A stat() or a read on a hung mount (NFS whose server is gone, a FUSE
 * filesystem whose daemon stopped answering, a stalled device) blocks in
 * the kernel, and no timer of the caller's can end it: the call does not
 * return until the filesystem answers.  trainmon touches the job's data
 * before the job starts (the -d paths' devices, the dataset's page cache,
 * the probe) and must never keep the job from starting, nor itself from
 * ending, because of it.  So such a call is made in a child process:
 *
 *   1. fork; the child runs fn(ctx, out) and writes its return value, its
 *      error text (tm_last_error) and out (plain data, outlen bytes)
 *      through a pipe, then exits;
 *   2. the parent polls the pipe until the message is whole or wait_s has
 *      passed;
 *   3. in time: it reaps the child and copies out back; too late: it kills
 *      the child (SIGKILL: a process blocked in a read dies when the read
 *      returns, at once for FUSE, whose waits are killable), does not wait
 *      for it (no caller waits for any child but its own: it stays a zombie
 *      until trainmon exits, then init reaps it) and returns -ETIMEDOUT.
 *      The child's standard streams are /dev/null and its signals the
 *      defaults, so that one blocked for good holds no pipe of trainmon's
 *      open and a SIGTERM to the process group ends it.
 *
 * The child only runs fn and writes to the pipe: fn must not take locks
 * that another thread of the parent may have held at the fork, which the
 * callers' walks (stat, open, read, malloc) do not.  A fork costs a few
 * hundred microseconds, paid once per path or walk, never per sample.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trainmon.h"
#include "util.h"

/* The message: the head, then out at an offset aligned for any type (out
 * is a struct of the caller's: the child writes it in place). */
struct msg_head {
    int rc;
    char err[512];
};
#define MSG_OUT_AT                                                                                 \
    ((sizeof(struct msg_head) + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) *               \
     _Alignof(max_align_t))

/* The child: stdin, stdout and stderr on /dev/null (a child blocked for
 * good must not keep the pipe of `trainmon run ... | tee` open), and the
 * signals trainmon handles back to their defaults (SIGTERM to the process
 * group ends the child, it is not passed on to the job). */
static void child_quiet(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        for (int k = 0; k < 3; k++)
            if (fd != k)
                dup2(fd, k);
        if (fd > 2)
            close(fd);
    }
}

int tm_call_within(double wait_s, tm_child_fn fn, void *ctx, void *out, size_t outlen)
{
    if (!fn || (outlen && !out) || !(wait_s > 0))
        return tm_seterr(-EINVAL, "tm_call_within: invalid argument");
    size_t total = MSG_OUT_AT + outlen;
    char *buf =
        aligned_alloc(_Alignof(max_align_t), (total + _Alignof(max_align_t) - 1) /
                                                 _Alignof(max_align_t) * _Alignof(max_align_t));
    if (!buf)
        return tm_seterr(-ENOMEM, "tm_call_within: out of memory");
    memset(buf, 0, total);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        int e = errno;
        free(buf);
        return tm_seterr(-e, "pipe: %s", strerror(e));
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(fds[0]);
        close(fds[1]);
        free(buf);
        return tm_seterr(-e, "fork: %s", strerror(e));
    }
    if (pid == 0) {
        close(fds[0]);
        child_quiet();
        struct msg_head *h = (struct msg_head *)buf;
        h->rc = fn(ctx, buf + MSG_OUT_AT);
        if (h->rc < 0)
            snprintf(h->err, sizeof h->err, "%s", tm_last_error());
        _exit(tm_write_full(fds[1], buf, total) == 0 ? 0 : 1);
    }
    close(fds[1]);
    int64_t deadline = tm_now_mono_ns() + (int64_t)(wait_s * 1e9);
    size_t got = 0;
    int late = 0;
    for (;;) {
        int64_t left = deadline - tm_now_mono_ns();
        if (left <= 0) {
            late = 1;
            break;
        }
        struct pollfd pf = {.fd = fds[0], .events = POLLIN};
        int pr = poll(&pf, 1, (int)(left / 1000000 + 1));
        if (pr <= 0)
            continue; /* EINTR, or the deadline: checked above */
        ssize_t n = read(fds[0], buf + got, total - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (got += (size_t)n) == total)
            break;
    }
    close(fds[0]);
    if (late) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, WNOHANG);
        free(buf);
        return tm_seterr(-ETIMEDOUT, "no answer within %g s", wait_s);
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    int rc;
    if (got != total) {
        rc = tm_seterr(-EIO, "the call ended without a result");
    } else {
        struct msg_head *h = (struct msg_head *)buf;
        h->err[sizeof h->err - 1] = '\0';
        rc = h->rc;
        if (rc < 0)
            tm_seterr(rc, "%s", h->err);
        else if (outlen)
            memcpy(out, buf + MSG_OUT_AT, outlen);
    }
    free(buf);
    return rc;
}

struct resolve_ctx {
    const char *path;
    pid_t pid;
};

static int resolve_in_child(void *ctx, void *out)
{
    const struct resolve_ctx *c = ctx;
    return tm_blkdev_resolve(c->path, c->pid, out);
}

int tm_blkdev_resolve_within(const char *path, pid_t pid, tm_blkdev *out, double wait_s)
{
    struct resolve_ctx c = {.path = path, .pid = pid};
    int rc = tm_call_within(wait_s, resolve_in_child, &c, out, sizeof *out);
    if (rc == -ETIMEDOUT)
        return tm_seterr(rc,
                         "%s: no answer from its filesystem within %g s (a hung mount: NFS "
                         "whose server is gone, a FUSE daemon that stopped)",
                         path, wait_s);
    return rc;
}
