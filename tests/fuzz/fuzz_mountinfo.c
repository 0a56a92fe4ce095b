/*
 * fuzz_mountinfo.c - libFuzzer target: tm_mountinfo_parse on arbitrary
 * bytes (not NUL-terminated), tm_overlay_layers on each parsed entry's
 * super options, then the resolver's core (tm_blkdev_resolve_at) on the
 * input taken as a whole mount table, for "/" and a path under each of the
 * first mountpoints.  Devices are looked up in the committed fixture sysfs
 * when run from the repository root, else in none.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "blkdev.h"
#include "trainmon.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int count_layer(const char *layer, bool upper, void *arg)
{
    (void)upper;
    if (strlen(layer) >= 4096)
        abort();
    (*(int *)arg)++;
    return 0;
}

static void check_str(const char *s, size_t cap)
{
    if (strnlen(s, cap) >= cap)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tm_mount m[8];
    static tm_blkdev b;
    static int fd = -1;
    static char fdpath[64];
    if (fd < 0) {
        fd = memfd_create("mountinfo", 0);
        if (fd < 0)
            abort();
        snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
        tm_set_sys_root(access("tests/fixtures/blkdev/sys", F_OK) == 0
                            ? "tests/fixtures/blkdev/sys"
                            : "/nonexistent-trainmon-sys");
    }
    /* An exact-size copy, so that any read past size hits the redzone. */
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    int n = tm_mountinfo_parse(buf, size, m, 8);
    if (n < 0)
        abort();
    int nm = n < 8 ? n : 8;
    for (int i = 0; i < nm; i++) {
        check_str(m[i].root, sizeof m[i].root);
        check_str(m[i].mountpoint, sizeof m[i].mountpoint);
        check_str(m[i].fstype, sizeof m[i].fstype);
        check_str(m[i].source, sizeof m[i].source);
        check_str(m[i].super_opts, sizeof m[i].super_opts);
        int layers = 0;
        int rc = tm_overlay_layers(m[i].super_opts, count_layer, &layers);
        if (rc >= 0 && rc != layers)
            abort();
    }

    /* The resolver reads its table from a file: the memfd. */
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    char path[4200];
    for (int i = -1; i < nm && i < 3; i++) {
        if (i < 0)
            strcpy(path, "/");
        else if (m[i].mountpoint[0] == '/')
            snprintf(path, sizeof path, "%s/x", m[i].mountpoint);
        else
            continue;
        int rc = tm_blkdev_resolve_at(path, 0, fdpath, &b);
        if (rc == 0) {
            check_str(b.why, sizeof b.why);
            check_str(b.top, sizeof b.top);
            if (b.nleaves > TM_BLKDEV_MAX_LEAVES || b.why[0] == '\0')
                abort();
        }
    }
    free(buf);
    return 0;
}
