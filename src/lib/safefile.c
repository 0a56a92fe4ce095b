/*
 * safefile.c - creating and opening files as a root agent (docs/SECURITY.md,
 * docs/SECURITY.md).
 *
 * trainmon runs as root on training nodes, in run directories and output
 * paths that other users may be able to write to.  Opening a path with
 * O_CREAT|O_TRUNC there lets anyone who planted a symlink make root
 * overwrite the link's target; a FIFO makes the open block; a hard link to
 * a file of root's makes a "new" file an old one; a directory someone else
 * owns can have entries swapped under it between two system calls.  So:
 *
 *   - the last component of a path is never followed (O_NOFOLLOW); the
 *     directories above it are the caller's choice (a user-named path may
 *     go through symlinked directories);
 *   - new files are O_EXCL, created under a directory fd (openat) once that
 *     directory has been opened O_NOFOLLOW and checked with fstat;
 *   - an existing file is looked at through its fd (fstat: regular, one
 *     link, the caller's) before it is truncated: never O_TRUNC at open;
 *   - an open that could meet a FIFO uses O_NONBLOCK, so it cannot hang;
 *   - a file that must never be seen half-written is replaced by renameat()
 *     from a temporary name made with O_EXCL in the same directory.
 *
 * None of this is on a hot path: these run once per file.
 */
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Temporary names tried before giving up (each one fails only when the
 * name exists: 62^6 choices). */
#define SAFE_TEMP_TRIES 100

/* --- messages */

/* The path of name under dirfd for a message: /proc/self/fd/N resolved,
 * or the bare name when that fails.  Error paths only. */
static void safe_at_path(int dirfd, const char *name, char *buf, size_t cap)
{
    char link[64], dir[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t n = dirfd >= 0 ? readlink(link, dir, sizeof dir - 1) : -1;
    if (n > 0) {
        dir[n] = '\0';
        snprintf(buf, cap, "%s%s%s", dir, strcmp(dir, "/") ? "/" : "", name);
    } else {
        snprintf(buf, cap, "%s", name);
    }
}

static const char *safe_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a directory";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISLNK(m))
        return "a symbolic link";
    if (S_ISSOCK(m))
        return "a socket";
    if (S_ISCHR(m))
        return "a character device";
    if (S_ISBLK(m))
        return "a block device";
    return "not a regular file";
}

/* The message for an open of name under dirfd that failed with -rc: says
 * what is there when that is the reason (a symlink for ELOOP, say). */
static int safe_open_err(int rc, int dirfd, const char *name, const char *shown)
{
    struct stat st;
    if ((rc == -ELOOP || rc == -EEXIST || rc == -ENOTDIR || rc == -ENXIO || rc == -EMLINK) &&
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode))
            return tm_seterr(-ELOOP, "%s: is a symbolic link; not followed", shown);
        if (rc == -EEXIST)
            return tm_seterr(rc, "%s: exists already (%s); not overwritten", shown,
                             S_ISREG(st.st_mode) ? "a regular file" : safe_kind(st.st_mode));
        if (rc == -ENOTDIR)
            return tm_seterr(rc, "%s: not a directory (%s)", shown,
                             S_ISREG(st.st_mode) ? "a regular file" : safe_kind(st.st_mode));
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
            return tm_seterr(-EINVAL, "%s: not a regular file (%s)", shown, safe_kind(st.st_mode));
    }
    return tm_seterr(rc, "%s: %s", shown, strerror(-rc));
}

/* Checks an open file: regular, one link, and (when it existed before:
 * owner) the caller's.  A file this process just created O_EXCL is not
 * checked for its owner: on an NFS export with root_squash root's new
 * files belong to nobody, and they are still the ones it made. */
static int safe_check_file(int fd, const char *shown, bool owner)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return tm_seterr(-errno, "%s: %s", shown, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return tm_seterr(-EINVAL, "%s: not a regular file (%s)", shown, safe_kind(st.st_mode));
    if (st.st_nlink != 1)
        return tm_seterr(-EMLINK, "%s: has %lu hard links; not overwritten", shown,
                         (unsigned long)st.st_nlink);
    if (owner && st.st_uid != geteuid())
        return tm_seterr(-EPERM, "%s: owned by uid %lu; not overwritten", shown,
                         (unsigned long)st.st_uid);
    return 0;
}

/* Splits path into its directory (as given; "." when none) and last
 * component, trailing slashes dropped.  -ENAMETOOLONG, -EINVAL (no name). */
static int safe_split(const char *path, char *dir, size_t dcap, char *base, size_t bcap)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return len ? -ENAMETOOLONG : -EINVAL;
    memcpy(buf, path, len + 1);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    char *slash = strrchr(buf, '/');
    const char *b = slash ? slash + 1 : buf;
    if (!*b || strcmp(b, ".") == 0 || strcmp(b, "..") == 0)
        return -EINVAL;
    if (strlen(b) >= bcap)
        return -ENAMETOOLONG;
    memcpy(base, b, strlen(b) + 1);
    if (!slash)
        snprintf(dir, dcap, ".");
    else if (slash == buf)
        snprintf(dir, dcap, "/");
    else {
        *slash = '\0';
        if (strlen(buf) >= dcap)
            return -ENAMETOOLONG;
        memcpy(dir, buf, strlen(buf) + 1);
    }
    return 0;
}

/* --- random names */

static void safe_random_name(char *out, size_t n)
{
    static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char r[32];
    if (n > sizeof r)
        n = sizeof r;
    if (getrandom(r, n, GRND_NONBLOCK) != (ssize_t)n) {
        /* No entropy yet (early boot): the name only has to be new, and
         * O_EXCL makes sure of that; unpredictability is a bonus. */
        static unsigned long ctr;
        uint64_t x = (uint64_t)tm_now_mono_ns() ^ ((uint64_t)getpid() << 32) ^ ++ctr;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            r[i] = (unsigned char)x;
        }
    }
    for (size_t i = 0; i < n; i++)
        out[i] = set[r[i] % (sizeof set - 1)];
    out[n] = '\0';
}

/* --- directories */

/* Checks an open directory: the caller's, and not writable by others. */
static int safe_check_dir(int fd, const char *shown, unsigned flags)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return tm_seterr(-errno, "%s: %s", shown, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return tm_seterr(-ENOTDIR, "%s: not a directory", shown);
    if (st.st_uid != geteuid())
        return tm_seterr(-EPERM, "%s: owned by uid %lu", shown, (unsigned long)st.st_uid);
    if (!(flags & TM_SAFE_WRITABLE_OK) && (st.st_mode & (S_IWGRP | S_IWOTH)))
        return tm_seterr(-EPERM, "%s: writable by others (mode %04o)", shown,
                         (unsigned)(st.st_mode & 07777));
    return 0;
}

/* A directory path copied into buf without its trailing slashes: "link/"
 * would follow the link whatever O_NOFOLLOW says. */
static int safe_dir_path(const char *path, char *buf, size_t cap)
{
    if (!path || !*path)
        return tm_seterr(-EINVAL, "directory: no path");
    size_t len = strlen(path);
    if (len >= cap)
        return tm_seterr(-ENAMETOOLONG, "%.64s...: path too long", path);
    memcpy(buf, path, len + 1);
    while (len > 1 && buf[len - 1] == '/')
        buf[--len] = '\0';
    return 0;
}

int tm_dir_open_checked(const char *path, unsigned flags)
{
    char buf[PATH_MAX];
    int rc = safe_dir_path(path, buf, sizeof buf);
    if (rc < 0)
        return rc;
    int fd = tm_open(buf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0);
    if (fd < 0)
        return safe_open_err(fd, AT_FDCWD, buf, path);
    rc = safe_check_dir(fd, path, flags);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static int safe_mkdir_parents(char *buf)
{
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int e = mkdir(buf, 0755) == 0 ? 0 : errno;
        *p = '/';
        if (e && e != EEXIST)
            return -e;
    }
    return 0;
}

int tm_dir_make_private(const char *path, mode_t mode, unsigned flags, bool *created)
{
    if (created)
        *created = false;
    char buf[PATH_MAX];
    int prc = safe_dir_path(path, buf, sizeof buf);
    if (prc < 0)
        return prc;
    if (flags & TM_SAFE_PARENTS) {
        int rc = safe_mkdir_parents(buf);
        if (rc < 0)
            return tm_seterr(rc, "%s: %s", path, strerror(-rc));
    }
    bool made = mkdir(buf, mode & 07777) == 0;
    if (!made && errno != EEXIST)
        return tm_seterr(-errno, "%s: %s", path, strerror(errno));
    /* Checked whether new or not: between mkdir and open a writable parent
     * lets someone swap in a symlink or a directory of theirs. */
    int fd = tm_dir_open_checked(buf, flags);
    if (fd < 0)
        return fd;
    /* mkdir's mode went through the umask: make it exact. */
    if (made && fchmod(fd, mode & 07777) != 0) {
        int rc = tm_seterr(-errno, "%s: chmod: %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (created)
        *created = made;
    return fd;
}

int tm_dir_make_temp(int dirfd, const char *prefix, mode_t mode, char *name, size_t cap)
{
    if (!prefix || !name || strlen(prefix) + 7 > cap || strchr(prefix, '/'))
        return tm_seterr(-EINVAL, "temporary directory: bad prefix");
    for (int i = 0; i < SAFE_TEMP_TRIES; i++) {
        size_t pl = strlen(prefix);
        memcpy(name, prefix, pl);
        safe_random_name(name + pl, 6);
        if (mkdirat(dirfd, name, 0700) != 0) {
            if (errno == EEXIST)
                continue;
            char shown[PATH_MAX + 64];
            safe_at_path(dirfd, name, shown, sizeof shown);
            return tm_seterr(-errno, "%s: %s", shown, strerror(errno));
        }
        char shown[PATH_MAX + 64];
        int fd;
        do
            fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        while (fd < 0 && errno == EINTR);
        if (fd < 0) {
            int rc = -errno;
            safe_at_path(dirfd, name, shown, sizeof shown);
            return safe_open_err(rc, dirfd, name, shown);
        }
        int rc = 0;
        if (fchmod(fd, mode & 07777) != 0)
            rc = -errno;
        safe_at_path(dirfd, name, shown, sizeof shown);
        if (rc < 0)
            rc = tm_seterr(rc, "%s: chmod: %s", shown, strerror(-rc));
        else
            rc = safe_check_dir(fd, shown, 0);
        if (rc < 0) {
            close(fd);
            return rc;
        }
        return fd;
    }
    return tm_seterr(-EEXIST, "%s: no free temporary name after %d tries", prefix, SAFE_TEMP_TRIES);
}

/* --- files */

int tm_file_create_at(int dirfd, const char *name, mode_t mode)
{
    if (!name || !*name || strchr(name, '/'))
        return tm_seterr(-EINVAL, "file: bad name");
    int fd;
    do
        fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    while (fd < 0 && errno == EINTR);
    char shown[PATH_MAX + 64];
    if (fd < 0) {
        int rc = -errno;
        safe_at_path(dirfd, name, shown, sizeof shown);
        return safe_open_err(rc, dirfd, name, shown);
    }
    /* A new file is regular with one link; checked anyway (a filesystem
     * that lies, a link made in the instant after creation). */
    int rc = fchmod(fd, mode & 0777) == 0 ? 0 : -errno;
    if (rc == 0) {
        struct stat st;
        if (fstat(fd, &st) != 0)
            rc = -errno;
        else if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
            safe_at_path(dirfd, name, shown, sizeof shown);
            rc = safe_check_file(fd, shown, false);
        }
    } else {
        safe_at_path(dirfd, name, shown, sizeof shown);
        rc = tm_seterr(rc, "%s: chmod: %s", shown, strerror(-rc));
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int tm_file_replace_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode)
{
    if (!name || !*name || strchr(name, '/') || strlen(name) > NAME_MAX - 9 || (!data && len))
        return tm_seterr(-EINVAL, "file: bad name");
    char tmp[NAME_MAX + 1];
    int fd = -EEXIST;
    for (int i = 0; i < SAFE_TEMP_TRIES && fd == -EEXIST; i++) {
        int n = snprintf(tmp, sizeof tmp, ".%s.", name);
        safe_random_name(tmp + n, 6);
        fd = tm_file_create_at(dirfd, tmp, mode);
        /* EEXIST (a leftover, or something planted): another name.  A
         * symlink there is reported as -ELOOP: another name too. */
        if (fd == -ELOOP)
            fd = -EEXIST;
    }
    if (fd < 0)
        return fd;
    char shown[PATH_MAX + 64];
    int rc = tm_write_full(fd, data, len);
    if (rc == 0 && fsync(fd) != 0 && errno != EINVAL)
        rc = -errno;
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(dirfd, tmp, dirfd, name) != 0)
        rc = -errno;
    if (rc < 0) {
        unlinkat(dirfd, tmp, 0);
        safe_at_path(dirfd, name, shown, sizeof shown);
        return tm_seterr(rc, "%s: %s", shown, strerror(-rc));
    }
    return 0;
}

/* Opens an existing name under dirfd without following a link or blocking
 * on a FIFO, checks it and truncates it.  accmode O_WRONLY or O_RDWR. */
static int safe_reuse_at(int dirfd, const char *name, int accmode, const char *shown)
{
    int fd;
    do
        fd = openat(dirfd, name, accmode | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return safe_open_err(-errno, dirfd, name, shown);
    int rc = safe_check_file(fd, shown, true);
    if (rc == 0 && ftruncate(fd, 0) != 0)
        rc = tm_seterr(-errno, "%s: %s", shown, strerror(errno));
    int fl = fcntl(fd, F_GETFL);
    if (rc == 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
        rc = tm_seterr(-errno, "%s: %s", shown, strerror(errno));
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int tm_file_create(const char *path, mode_t mode, unsigned flags)
{
    if (!path)
        return tm_seterr(-EINVAL, "file: no path");
    char dir[PATH_MAX], base[NAME_MAX + 1];
    int rc = safe_split(path, dir, sizeof dir, base, sizeof base);
    if (rc < 0)
        return tm_seterr(rc, "%s: %s", path, rc == -EINVAL ? "not a file name" : strerror(-rc));
    /* The directories on the way are the caller's (followed as given). */
    int dfd = tm_open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0)
        return tm_seterr(dfd, "%s: %s", path, strerror(-dfd));
    if (mode == 0) {
        struct stat st;
        mode = 0600;
        if (fstat(dfd, &st) == 0)
            mode |= st.st_mode & (S_IRGRP | S_IROTH);
    }
    int fd;
    do
        fd = openat(dfd, base, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    while (fd < 0 && errno == EINTR);
    if (fd < 0 && errno == EEXIST && (flags & TM_SAFE_REUSE)) {
        fd = safe_reuse_at(dfd, base, O_RDWR, path);
    } else if (fd < 0) {
        fd = safe_open_err(-errno, dfd, base, path);
    } else if (fchmod(fd, mode & 0777) != 0 || (rc = safe_check_file(fd, path, false)) < 0) {
        if (rc == 0)
            rc = tm_seterr(-errno, "%s: chmod: %s", path, strerror(errno));
        close(fd);
        fd = rc;
    }
    close(dfd);
    return fd;
}

int tm_file_open_output(const char *path, mode_t mode)
{
    if (!path || !*path)
        return tm_seterr(-EINVAL, "output: no path");
    char dir[PATH_MAX], base[NAME_MAX + 1];
    int rc = safe_split(path, dir, sizeof dir, base, sizeof base);
    if (rc < 0)
        return tm_seterr(rc, "%s: %s", path, rc == -EINVAL ? "not a file name" : strerror(-rc));
    int dfd = tm_open(dir, O_RDONLY | O_DIRECTORY, 0);
    if (dfd < 0)
        return tm_seterr(dfd, "%s: %s", path, strerror(-dfd));
    int fd;
    do
        fd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
    while (fd < 0 && errno == EINTR);
    if (fd < 0 && errno == EEXIST)
        fd = safe_reuse_at(dfd, base, O_WRONLY, path);
    else if (fd < 0)
        fd = safe_open_err(-errno, dfd, base, path);
    close(dfd);
    return fd;
}

/* --- secrets on command lines */

/* Whether the name [s, s+n) holds one of the words that mark a secret. */
static bool safe_secret_name(const char *s, size_t n)
{
    static const char *const words[] = {"token",  "key",    "password",
                                        "passwd", "secret", "credential"};
    for (size_t w = 0; w < TM_ARRAY_LEN(words); w++) {
        size_t wl = strlen(words[w]);
        for (size_t i = 0; i + wl <= n; i++)
            if (strncasecmp(s + i, words[w], wl) == 0)
                return true;
    }
    return false;
}

/* An option name: after the dashes, up to '=' or the end. */
static bool safe_secret_option(const char *a, size_t *name_end)
{
    if (a[0] != '-' || strcmp(a, "--") == 0 || strcmp(a, "-") == 0)
        return false;
    const char *eq = strchr(a, '=');
    size_t n = eq ? (size_t)(eq - a) : strlen(a);
    *name_end = n;
    return safe_secret_name(a, n);
}

const char *tm_arg_redact(const char *const *argv, int argc, int i, char *buf, size_t cap)
{
    if (!argv || i < 0 || i >= argc || !argv[i])
        return "";
    const char *a = argv[i];
    size_t n;
    /* The value of "--password VALUE": a secret option without '='. */
    if (i > 0 && argv[i - 1] && strncmp(a, "--", 2) != 0 && !strchr(argv[i - 1], '=') &&
        safe_secret_option(argv[i - 1], &n)) {
        snprintf(buf, cap, "<redacted>");
        return buf;
    }
    if (a[0] == '-' && strchr(a, '=') && safe_secret_option(a, &n)) {
        snprintf(buf, cap, "%.*s=<redacted>", (int)n, a);
        return buf;
    }
    /* NAME=VALUE with NAME an environment variable's name. */
    const char *eq = strchr(a, '=');
    if (eq && eq > a && !(a[0] >= '0' && a[0] <= '9')) {
        bool env = true;
        for (const char *p = a; p < eq && env; p++)
            env = *p == '_' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                  (*p >= 'A' && *p <= 'Z');
        if (env && safe_secret_name(a, (size_t)(eq - a))) {
            snprintf(buf, cap, "%.*s=<redacted>", (int)(eq - a), a);
            return buf;
        }
    }
    return a;
}
