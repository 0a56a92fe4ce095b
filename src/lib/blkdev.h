/*
 * blkdev.h - internal entry points of the path -> block device resolver
 * (blkdev.c), exposed for the unit tests and the fuzzer.  Front-ends use
 * tm_blkdev_resolve() from include/trainmon.h.
 */
#ifndef TM_BLKDEV_H
#define TM_BLKDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "trainmon.h"

#define TM_MOUNT_PATH_MAX 4096
#define TM_MOUNT_OPTS_MAX 8192

/* One line of /proc/PID/mountinfo (proc(5)), escapes (\040 etc.) undone. */
typedef struct tm_mount {
    int id, parent;
    unsigned major, minor;
    char root[TM_MOUNT_PATH_MAX];       /* the mount's root within its filesystem */
    char mountpoint[TM_MOUNT_PATH_MAX]; /* relative to the reading process's root */
    char fstype[64];                    /* "ext4", "fuse.sshfs" */
    char source[512];                   /* "/dev/sda1", "server:/x", "none" */
    char super_opts[TM_MOUNT_OPTS_MAX]; /* per-superblock options, still comma-separated */
} tm_mount;

/* Parses one mountinfo line (without its newline).  0 on success, -EINVAL
 * for a malformed line, -ENAMETOOLONG when a field does not fit (never
 * truncated: a cut mountpoint would match the wrong path). */
int tm_mountinfo_parse_line(const char *line, size_t len, tm_mount *out);

/* Parses the text of a mountinfo file.  Malformed lines are skipped.
 * Writes at most cap entries to out and returns how many lines parsed
 * (which may exceed cap), or -EINVAL for NULL arguments, -ENOMEM. */
int tm_mountinfo_parse(const char *buf, size_t len, tm_mount *out, size_t cap);

/* Undoes the kernel's octal escapes (\ooo, as seq_file's mangle writes
 * " \t\n\\") in src[0..len) into dst of cap bytes, NUL-terminated.
 * Returns the length, or -ENAMETOOLONG when it does not fit. */
int tm_mountinfo_unescape(const char *src, size_t len, char *dst, size_t cap);

/* Calls fn(layer, upper, arg) for each overlayfs layer directory named in
 * super options: upperdir first (upper true), then every lowerdir (a colon
 * list; "::" marks data-only layers) and lowerdir+/datadir+ entries,
 * unescaped (octal escapes and a backslash before a colon).  Stops and
 * returns fn's value when it is non-zero; returns the number of layers
 * otherwise, or -ENAMETOOLONG for a layer path that does not fit. */
int tm_overlay_layers(const char *opts, int (*fn)(const char *layer, bool upper, void *arg),
                      void *arg);

/* The resolver's core, without touching the real filesystem: the path is
 * taken as already resolved (canonical, absolute), st_dev as given (0 when
 * unknown: the mount entry's MAJ:MIN is used), the mount table is read
 * from mountinfo_path, and devices from the sysfs under tm_sys_root().
 * Overlay layers are matched lexically against the same table.  As
 * tm_blkdev_resolve otherwise. */
int tm_blkdev_resolve_at(const char *realpath, dev_t st_dev, const char *mountinfo_path,
                         tm_blkdev *out);

#endif /* TM_BLKDEV_H */
