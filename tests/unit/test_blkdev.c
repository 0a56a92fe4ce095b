/*
 * test_blkdev.c - path -> block device resolution: the mountinfo parser,
 * the overlay option parser, and the resolver's core on the fixture tree
 * tests/fixtures/blkdev (a mount table and a sysfs with a partitioned loop
 * device, LVM on partitions, dm-crypt on LVM, md on partitions, btrfs on
 * two disks, an overlay, tmpfs, NFS, FUSE, an over-mount, a mountpoint with
 * a space).  A few tests resolve real paths on this machine or in a
 * temporary /proc root standing in for another process's mount namespace.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "blkdev.h"
#include "trainmon.h"
#include "util.h"

#define FIX "tests/fixtures/blkdev"
#define FIX_MOUNTINFO FIX "/proc/self/mountinfo"

static int use_fixture(void **state)
{
    (void)state;
    tm_set_proc_root(FIX "/proc");
    tm_set_sys_root(FIX "/sys");
    return 0;
}

static int reset_roots(void **state)
{
    (void)state;
    tm_set_proc_root(NULL);
    tm_set_sys_root(NULL);
    return 0;
}

/* Resolves an already-canonical path on the fixture tree, st_dev unknown. */
static tm_blkdev *resolve_fix(const char *path)
{
    static tm_blkdev b;
    int rc = tm_blkdev_resolve_at(path, 0, FIX_MOUNTINFO, &b);
    if (rc)
        fail_msg("resolve %s: %d %s", path, rc, tm_last_error());
    return &b;
}

static void assert_leaves(const tm_blkdev *b, size_t n, const char *const *names)
{
    assert_int_equal(b->nleaves, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(b->leaves[i], names[i]);
}

/* ---------------------------------------------------------------- parser */

static void test_mountinfo_parse_reads_every_field(void **state)
{
    (void)state;
    static const char line[] = "33 26 9:0 /sub /raid rw,noatime shared:13 master:2 - xfs "
                               "/dev/md0 rw,attr2,inode64";
    tm_mount *m = malloc(sizeof *m);
    assert_non_null(m);
    assert_int_equal(tm_mountinfo_parse_line(line, strlen(line), m), 0);
    assert_int_equal(m->id, 33);
    assert_int_equal(m->parent, 26);
    assert_int_equal(m->major, 9);
    assert_int_equal(m->minor, 0);
    assert_string_equal(m->root, "/sub");
    assert_string_equal(m->mountpoint, "/raid");
    assert_string_equal(m->fstype, "xfs");
    assert_string_equal(m->source, "/dev/md0");
    assert_string_equal(m->super_opts, "rw,attr2,inode64");
    free(m);
}

static void test_mountinfo_parse_unescapes_space_tab_newline_backslash(void **state)
{
    (void)state;
    static const char line[] =
        "40 26 259:0 /a\\134b /mnt/my\\040disk\\011x\\012y rw - ext4 /dev/loop1p1 rw";
    tm_mount *m = malloc(sizeof *m);
    assert_non_null(m);
    assert_int_equal(tm_mountinfo_parse_line(line, strlen(line), m), 0);
    assert_string_equal(m->root, "/a\\b");
    assert_string_equal(m->mountpoint, "/mnt/my disk\tx\ny");
    assert_int_equal(m->major, 259);
    free(m);
}

static void test_mountinfo_unescape_keeps_nul_escape_and_short_escapes(void **state)
{
    (void)state;
    char out[32];
    /* \000 would cut the string; a backslash without three octal digits
     * is not an escape. */
    assert_int_equal(tm_mountinfo_unescape("a\\000b\\04", 9, out, sizeof out), 9);
    assert_string_equal(out, "a\\000b\\04");
}

static void test_mountinfo_parse_without_separator_is_invalid(void **state)
{
    (void)state;
    static const char line[] = "33 26 9:0 / /raid rw shared:13 xfs /dev/md0 rw";
    tm_mount *m = malloc(sizeof *m);
    assert_non_null(m);
    assert_int_equal(tm_mountinfo_parse_line(line, strlen(line), m), -EINVAL);
    free(m);
}

static void test_mountinfo_overlong_mountpoint_is_refused_not_truncated(void **state)
{
    (void)state;
    size_t n = TM_MOUNT_PATH_MAX + 64;
    char *line = malloc(n + 64);
    tm_mount *m = malloc(sizeof *m);
    assert_non_null(line);
    assert_non_null(m);
    int o = snprintf(line, n + 64, "1 0 8:1 / /");
    memset(line + o, 'x', n);
    strcpy(line + o + n, " rw - ext4 /dev/sda1 rw");
    assert_int_equal(tm_mountinfo_parse_line(line, strlen(line), m), -ENAMETOOLONG);
    free(line);
    free(m);
}

static void test_mountinfo_parse_skips_malformed_lines(void **state)
{
    (void)state;
    static const char buf[] = "26 1 254:0 / / rw - ext4 /dev/vda rw\n"
                              "garbage\n"
                              "27 26 x:0 / /bad rw - ext4 /dev/x rw\n"
                              "30 26 259:0 / /mnt/t rw - ext4 /dev/loop1p1 rw\n";
    tm_mount *m = calloc(4, sizeof *m);
    assert_non_null(m);
    assert_int_equal(tm_mountinfo_parse(buf, sizeof buf - 1, m, 4), 2);
    assert_string_equal(m[0].mountpoint, "/");
    assert_string_equal(m[1].mountpoint, "/mnt/t");
    free(m);
}

static void test_mountinfo_parse_counts_lines_beyond_cap(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = fopen(FIX_MOUNTINFO, "r");
    assert_non_null(f);
    char line[512];
    tm_buf b;
    tm_buf_init(&b, 1 << 20);
    while (fgets(line, sizeof line, f))
        assert_int_equal(tm_buf_add(&b, line, strlen(line)), 0);
    fclose(f);
    buf = b.data;
    len = b.len;
    tm_mount *m = calloc(2, sizeof *m);
    assert_non_null(m);
    assert_int_equal(tm_mountinfo_parse(buf, len, m, 2), 18);
    assert_string_equal(m[1].mountpoint, "/sys");
    free(m);
    tm_buf_free(&b);
}

/* ---------------------------------------------------------- overlay opts */

struct layers {
    char names[8][64];
    bool upper[8];
    int n;
};

static int add_layer(const char *layer, bool upper, void *arg)
{
    struct layers *l = arg;
    if (l->n < 8) {
        tm_strlcpy(l->names[l->n], layer, sizeof l->names[0]);
        l->upper[l->n++] = upper;
    }
    return 0;
}

static void test_overlay_layers_upper_first_then_each_lower(void **state)
{
    (void)state;
    struct layers l = {0};
    int n = tm_overlay_layers("rw,lowerdir=/l/a:/l/b\\:c::/l/data,upperdir=/u\\054x,workdir=/w",
                              add_layer, &l);
    assert_int_equal(n, 4);
    assert_string_equal(l.names[0], "/u,x");
    assert_true(l.upper[0]);
    assert_string_equal(l.names[1], "/l/a");
    assert_string_equal(l.names[2], "/l/b:c");
    assert_string_equal(l.names[3], "/l/data");
    assert_false(l.upper[3]);
}

static void test_overlay_layers_reads_lowerdir_plus_keys(void **state)
{
    (void)state;
    struct layers l = {0};
    int n = tm_overlay_layers("ro,lowerdir+=/a,lowerdir+=/b,datadir+=/d", add_layer, &l);
    assert_int_equal(n, 3);
    assert_string_equal(l.names[0], "/a");
    assert_string_equal(l.names[2], "/d");
    assert_false(l.upper[0]);
}

/* ------------------------------------------------------- mount selection */

static void test_resolve_prefix_only_on_component_boundary(void **state)
{
    (void)state;
    /* /data is mounted, /database is not: it lives on / (vda). */
    tm_blkdev *b = resolve_fix("/database/train/x");
    assert_string_equal(b->mountpoint, "/");
    assert_string_equal(b->top, "vda");
}

static void test_resolve_longest_mountpoint_prefix_wins(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/data/train/x");
    assert_string_equal(b->mountpoint, "/data");
    assert_string_equal(b->top, "dm-0");
}

static void test_resolve_mountpoint_itself_matches(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/mnt/t");
    assert_string_equal(b->mountpoint, "/mnt/t");
}

static void test_resolve_last_entry_wins_on_over_mount(void **state)
{
    (void)state;
    /* /over: loop1p1 first, then vg-data mounted on top of it. */
    tm_blkdev *b = resolve_fix("/over/f");
    assert_string_equal(b->mountpoint, "/over");
    assert_string_equal(b->source, "/dev/mapper/vg-data");
    assert_string_equal(b->top, "dm-0");
}

static void test_resolve_mountpoint_with_escaped_space(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/mnt/my disk/f");
    assert_string_equal(b->mountpoint, "/mnt/my disk");
    assert_string_equal(b->top, "vda");
}

/* ---------------------------------------------------------- block devices */

static void test_resolve_whole_disk(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/etc/passwd");
    assert_int_equal(b->kind, TM_FS_BLOCK);
    static const char *const leaves[] = {"vda"};
    assert_leaves(b, 1, leaves);
    assert_string_equal(b->why, "/etc/passwd is on / (ext4 on vda)");
}

static void test_resolve_partition_whole_disk_is_sysfs_parent(void **state)
{
    (void)state;
    /* 259:0 is loop1p1: an extended minor; only sysfs knows its disk. */
    tm_blkdev *b = resolve_fix("/mnt/t/f");
    assert_int_equal(b->kind, TM_FS_BLOCK);
    assert_string_equal(b->top, "loop1p1");
    static const char *const leaves[] = {"loop1"};
    assert_leaves(b, 1, leaves);
    assert_string_equal(b->why, "/mnt/t/f is on /mnt/t (ext4 on loop1p1, partition of loop1)");
}

static void test_resolve_dm_slaves_give_deduplicated_leaves(void **state)
{
    (void)state;
    /* dm-0 sits on sda1, sda2 and sdb: two whole disks. */
    tm_blkdev *b = resolve_fix("/data/x");
    assert_string_equal(b->top, "dm-0");
    static const char *const leaves[] = {"sda", "sdb"};
    assert_leaves(b, 2, leaves);
    assert_string_equal(
        b->why, "/data/x is on /data (ext4, /dev/mapper/vg-data = dm-0), stacked on sda, sdb");
}

static void test_resolve_dm_on_dm_recurses_to_disks(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/secure/k");
    assert_string_equal(b->top, "dm-1");
    static const char *const leaves[] = {"sda", "sdb"};
    assert_leaves(b, 2, leaves);
}

static void test_resolve_md_on_partitions(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/raid/shard0");
    assert_string_equal(b->top, "md0");
    static const char *const leaves[] = {"sdc", "sdd"};
    assert_leaves(b, 2, leaves);
    assert_string_equal(b->why, "/raid/shard0 is on /raid (xfs on md0), stacked on sdc, sdd");
}

static void test_resolve_stacking_cycle_is_eloop(void **state)
{
    (void)state;
    tm_blkdev b;
    assert_int_equal(tm_blkdev_resolve_at("/cycle/f", 0, FIX_MOUNTINFO, &b), -ELOOP);
    assert_non_null(strstr(tm_last_error(), "stacked deeper"));
}

static void test_resolve_st_dev_is_preferred_over_mount_majmin(void **state)
{
    (void)state;
    /* The file's own device wins when it is a block device (mountinfo
     * can disagree, e.g. overlay files on old kernels). */
    tm_blkdev b;
    assert_int_equal(tm_blkdev_resolve_at("/data/x", makedev(8, 16), FIX_MOUNTINFO, &b), 0);
    assert_string_equal(b.top, "sdb");
    assert_string_equal(b.mountpoint, "/data");
}

static void test_resolve_device_missing_from_sysfs_is_other(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/gone/f");
    assert_int_equal(b->kind, TM_FS_OTHER);
    assert_int_equal(b->nleaves, 0);
    assert_non_null(strstr(b->why, "8:96"));
    assert_non_null(strstr(b->why, "still measured"));
}

/* ---------------------------------------------- anonymous devices by type */

static void test_resolve_btrfs_multi_device_from_sysfs_fs(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/pool/ds/x");
    assert_int_equal(b->kind, TM_FS_BLOCK);
    assert_string_equal(b->top, "sde");
    static const char *const leaves[] = {"sde", "sdf"};
    assert_leaves(b, 2, leaves);
    assert_non_null(strstr(b->why, "btrfs on /dev/sde, 2 devices"));
}

static void test_resolve_overlay_collects_leaves_of_all_layers(void **state)
{
    (void)state;
    /* upper /var/lib/upper is on / (vda); lower /mnt/t/lower1 on loop1p1,
     * lower /var/lib/lower0 on vda. */
    tm_blkdev *b = resolve_fix("/merged/img/1.jpg");
    assert_int_equal(b->kind, TM_FS_BLOCK);
    assert_string_equal(b->fstype, "overlay");
    assert_string_equal(b->top, "vda");
    static const char *const leaves[] = {"vda", "loop1"};
    assert_leaves(b, 2, leaves);
    assert_string_equal(b->why, "/merged/img/1.jpg is on /merged (overlay; upper on vda; lower on "
                                "loop1p1, vda), disks vda, loop1");
}

static void test_resolve_overlay_on_memory_layers_is_other(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/ovl-mem/f");
    assert_int_equal(b->kind, TM_FS_OTHER);
    assert_int_equal(b->nleaves, 0);
    assert_non_null(strstr(b->why, "upper on tmpfs"));
}

static void test_resolve_tmpfs_is_memory(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/scratch/f");
    assert_int_equal(b->kind, TM_FS_MEMORY);
    assert_int_equal(b->nleaves, 0);
    assert_string_equal(b->top, "");
    assert_string_equal(b->why, "/scratch/f is on tmpfs (memory): no disk behind it; process I/O "
                                "and memory pressure are still measured");
}

static void test_resolve_nfs4_is_network(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/nfs/imagenet/x");
    assert_int_equal(b->kind, TM_FS_NETWORK);
    assert_int_equal(b->nleaves, 0);
    assert_string_equal(b->source, "server:/export");
    assert_non_null(strstr(b->why, "network filesystem"));
    assert_non_null(strstr(b->why, "server:/export"));
    assert_non_null(strstr(b->why, "still measured"));
}

static void test_resolve_fuse_is_fuse(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/home/u/remote/x");
    assert_int_equal(b->kind, TM_FS_FUSE);
    assert_string_equal(b->fstype, "fuse.sshfs");
    assert_non_null(strstr(b->why, "FUSE filesystem"));
    assert_non_null(strstr(b->why, "still measured"));
}

static void test_resolve_proc_is_other(void **state)
{
    (void)state;
    tm_blkdev *b = resolve_fix("/proc/1/status");
    assert_int_equal(b->kind, TM_FS_OTHER);
    assert_non_null(strstr(b->why, "(proc)"));
}

/* ---------------------------------------------------------- real paths */

static void test_resolve_missing_path_is_enoent_naming_it(void **state)
{
    (void)state;
    tm_blkdev b;
    assert_int_equal(tm_blkdev_resolve("/nonexistent-trainmon/x", 0, &b), -ENOENT);
    assert_string_equal(tm_last_error(), "/nonexistent-trainmon/x: No such file or directory");
}

static void test_resolve_root_of_this_machine(void **state)
{
    (void)state;
    /* Whatever / is on here (a block device on a VM, overlay in a
     * container), it resolves and says how. */
    tm_blkdev b;
    int rc = tm_blkdev_resolve("/", 0, &b);
    if (rc)
        fail_msg("resolve /: %d %s", rc, tm_last_error());
    assert_string_equal(b.path, "/");
    assert_string_equal(b.mountpoint, "/");
    assert_true(b.why[0] != '\0');
    if (b.kind == TM_FS_BLOCK)
        assert_true(b.nleaves >= 1);
}

/* A fake /proc with process 4242 whose root is a directory tree we build:
 * /data/link -> /real/dir (absolute, so it must be followed inside the
 * process's root, not ours), /real/dir/f. */
static char tmproot[64];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void put(const char *rel, const char *text)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", tmproot, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void mk(const char *rel)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/%s", tmproot, rel);
    assert_int_equal(mkdir(p, 0755), 0);
}

static int make_pid_root(void **state)
{
    (void)state;
    strcpy(tmproot, "/tmp/tm-blkdev-XXXXXX");
    if (!mkdtemp(tmproot))
        return -1;
    mk("proc");
    mk("proc/4242");
    mk("proc/4242/root");
    mk("proc/4242/root/data");
    mk("proc/4242/root/real");
    mk("proc/4242/root/real/dir");
    mk("sys");
    put("proc/4242/root/real/dir/f", "x");
    put("proc/4242/mountinfo", "26 1 254:0 / / rw - ext4 /dev/vda rw\n"
                               "35 26 0:46 / /real rw - tmpfs tmpfs rw\n");
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/proc/4242/root/data/link", tmproot);
    if (symlink("/real/dir", p) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/proc", tmproot);
    tm_set_proc_root(p);
    /* An empty sysfs: the real st_dev of these files names no device, so
     * the mount table alone decides (tmpfs). */
    snprintf(p, sizeof p, "%s/sys", tmproot);
    tm_set_sys_root(p);
    return 0;
}

static int remove_pid_root(void **state)
{
    reset_roots(state);
    return nftw(tmproot, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_resolve_in_pid_root_follows_absolute_symlink_inside_it(void **state)
{
    (void)state;
    tm_blkdev b;
    int rc = tm_blkdev_resolve("/data/link/f", 4242, &b);
    if (rc)
        fail_msg("resolve: %d %s", rc, tm_last_error());
    assert_string_equal(b.path, "/real/dir/f");
    assert_string_equal(b.mountpoint, "/real");
    assert_int_equal(b.kind, TM_FS_MEMORY);
}

static void test_resolve_in_pid_root_dotdot_stops_at_its_root(void **state)
{
    (void)state;
    tm_blkdev b;
    int rc = tm_blkdev_resolve("/../../real/./dir/f", 4242, &b);
    if (rc)
        fail_msg("resolve: %d %s", rc, tm_last_error());
    assert_string_equal(b.path, "/real/dir/f");
}

static void test_resolve_in_pid_root_missing_path_is_enoent(void **state)
{
    (void)state;
    tm_blkdev b;
    assert_int_equal(tm_blkdev_resolve("/data/nope", 4242, &b), -ENOENT);
    assert_string_equal(tm_last_error(), "/data/nope: No such file or directory");
}

static void test_resolve_unknown_pid_is_esrch(void **state)
{
    (void)state;
    tm_blkdev b;
    assert_int_equal(tm_blkdev_resolve("/data", 4243, &b), -ESRCH);
    assert_non_null(strstr(tm_last_error(), "4243"));
}

static void test_resolve_relative_path_in_pid_root_is_einval(void **state)
{
    (void)state;
    tm_blkdev b;
    assert_int_equal(tm_blkdev_resolve("data", 4242, &b), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mountinfo_parse_reads_every_field),
        cmocka_unit_test(test_mountinfo_parse_unescapes_space_tab_newline_backslash),
        cmocka_unit_test(test_mountinfo_unescape_keeps_nul_escape_and_short_escapes),
        cmocka_unit_test(test_mountinfo_parse_without_separator_is_invalid),
        cmocka_unit_test(test_mountinfo_overlong_mountpoint_is_refused_not_truncated),
        cmocka_unit_test(test_mountinfo_parse_skips_malformed_lines),
        cmocka_unit_test(test_mountinfo_parse_counts_lines_beyond_cap),
        cmocka_unit_test(test_overlay_layers_upper_first_then_each_lower),
        cmocka_unit_test(test_overlay_layers_reads_lowerdir_plus_keys),
        cmocka_unit_test_setup_teardown(test_resolve_prefix_only_on_component_boundary, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_longest_mountpoint_prefix_wins, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_mountpoint_itself_matches, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_last_entry_wins_on_over_mount, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_mountpoint_with_escaped_space, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_whole_disk, use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_partition_whole_disk_is_sysfs_parent,
                                        use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_dm_slaves_give_deduplicated_leaves,
                                        use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_dm_on_dm_recurses_to_disks, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_md_on_partitions, use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_stacking_cycle_is_eloop, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_st_dev_is_preferred_over_mount_majmin,
                                        use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_device_missing_from_sysfs_is_other,
                                        use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_btrfs_multi_device_from_sysfs_fs, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_overlay_collects_leaves_of_all_layers,
                                        use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_overlay_on_memory_layers_is_other, use_fixture,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_tmpfs_is_memory, use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_nfs4_is_network, use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_fuse_is_fuse, use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_proc_is_other, use_fixture, reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_missing_path_is_enoent_naming_it, reset_roots,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_root_of_this_machine, reset_roots,
                                        reset_roots),
        cmocka_unit_test_setup_teardown(test_resolve_in_pid_root_follows_absolute_symlink_inside_it,
                                        make_pid_root, remove_pid_root),
        cmocka_unit_test_setup_teardown(test_resolve_in_pid_root_dotdot_stops_at_its_root,
                                        make_pid_root, remove_pid_root),
        cmocka_unit_test_setup_teardown(test_resolve_in_pid_root_missing_path_is_enoent,
                                        make_pid_root, remove_pid_root),
        cmocka_unit_test_setup_teardown(test_resolve_unknown_pid_is_esrch, make_pid_root,
                                        remove_pid_root),
        cmocka_unit_test_setup_teardown(test_resolve_relative_path_in_pid_root_is_einval,
                                        make_pid_root, remove_pid_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
