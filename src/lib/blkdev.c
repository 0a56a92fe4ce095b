/*
 * blkdev.c - which block devices are behind a path (util-linux findmnt and /sys/dev/block;
 * docs/ARCHITECTURE.md).
 *
 * The mount is chosen by path, not by st_dev: the longest mountpoint that
 * is a prefix of the canonical path on component boundaries, the last entry
 * winning ties (over-mounts), as util-linux findmnt does.  st_dev cannot be
 * matched against mountinfo because btrfs subvolumes and overlayfs report
 * anonymous device numbers that no mountinfo line carries.
 *
 * The device is st_dev, or else the mount's MAJ:MIN, looked up in
 * <sys>/dev/block.  A partition's whole disk is its parent directory in
 * sysfs: minor numbers say nothing (loop1p1 is 259:0, an extended-minor
 * number).  Stacked devices (dm-N for LVM, crypt and multipath; mdN) list
 * what they sit on in <dev>/slaves, which is followed recursively; the
 * whole disks at the bottom are the "leaves", deduplicated.
 *
 * Filesystems without a device of their own are resolved by type: btrfs
 * through its mount source and <sys>/fs/btrfs/<uuid>/devices, overlayfs
 * through its layer directories; memory, network and FUSE filesystems
 * are not errors but kinds, with a sentence saying what is still measured.
 *
 * Every /proc and /sys read goes through tm_proc_path/tm_sys_path so that
 * the unit tests run this code on fixture trees.
 */
#include "blkdev.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "util.h"

/* A mount table larger than this is refused rather than read without end;
 * hosts with thousands of container mounts stay far below it. */
#define BLK_MOUNTINFO_MAX (16u << 20)
/* Stacking deeper than this (dm on dm on md ...) is taken to be a loop. */
#define BLK_MAX_DEPTH 16
/* Overlay layers visited in one resolution, nested overlays included: a
 * bound on work (kernels allow 500 lower layers; images rarely pass 128). */
#define BLK_MAX_LAYERS 512
/* Symlinks followed while resolving a path inside another root (as the
 * kernel's MAXSYMLINKS). */
#define BLK_MAX_LINKS 40

/* -------------------------------------------------------- mountinfo parser */

static int blk_is_octal(char c)
{
    return c >= '0' && c <= '7';
}

/* Undoes \ooo escapes; with colon_escape, also "\X" -> "X" for any other
 * X (overlayfs lets a user write "\:" for a colon inside a layer path).
 * \000 is left as written: a NUL would silently cut the string. */
static int blk_unescape(const char *src, size_t len, char *dst, size_t cap, bool colon_escape)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '\\' && i + 3 < len && blk_is_octal(src[i + 1]) && blk_is_octal(src[i + 2]) &&
            blk_is_octal(src[i + 3])) {
            unsigned v = (unsigned)(src[i + 1] - '0') * 64 + (unsigned)(src[i + 2] - '0') * 8 +
                         (unsigned)(src[i + 3] - '0');
            if (v != 0 && v < 256) {
                c = (char)v;
                i += 3;
            }
        } else if (c == '\\' && colon_escape && i + 1 < len) {
            c = src[++i];
        }
        if (o + 1 >= cap)
            return -ENAMETOOLONG;
        dst[o++] = c;
    }
    if (cap == 0)
        return -ENAMETOOLONG;
    dst[o] = '\0';
    return (int)o;
}

int tm_mountinfo_unescape(const char *src, size_t len, char *dst, size_t cap)
{
    if (!src || !dst)
        return -EINVAL;
    return blk_unescape(src, len, dst, cap, false);
}

/* Splits off the next space-separated field of [*p, end): fields are
 * separated by single spaces (the kernel escapes spaces inside them). */
static bool blk_field(const char **p, const char *end, const char **f, size_t *flen)
{
    const char *s = *p;
    if (s >= end)
        return false;
    const char *e = memchr(s, ' ', (size_t)(end - s));
    if (!e)
        e = end;
    *f = s;
    *flen = (size_t)(e - s);
    *p = e < end ? e + 1 : end;
    return true;
}

static int blk_field_int(const char *f, size_t flen, uint64_t max, uint64_t *v)
{
    const char *p = f;
    int rc = tm_parse_u64(&p, f + flen, v);
    if (rc)
        return rc;
    if (p != f + flen || *v > max)
        return -EINVAL;
    return 0;
}

int tm_mountinfo_parse_line(const char *line, size_t len, tm_mount *out)
{
    if (!line || !out)
        return -EINVAL;
    const char *p = line, *end = line + len;
    const char *f;
    size_t fl;
    uint64_t v;
    int rc;

    /* 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue */
    if (!blk_field(&p, end, &f, &fl) || blk_field_int(f, fl, INT_MAX, &v))
        return -EINVAL;
    out->id = (int)v;
    if (!blk_field(&p, end, &f, &fl) || blk_field_int(f, fl, INT_MAX, &v))
        return -EINVAL;
    out->parent = (int)v;
    if (!blk_field(&p, end, &f, &fl))
        return -EINVAL;
    const char *colon = memchr(f, ':', fl);
    if (!colon || blk_field_int(f, (size_t)(colon - f), UINT_MAX, &v))
        return -EINVAL;
    out->major = (unsigned)v;
    if (blk_field_int(colon + 1, fl - (size_t)(colon + 1 - f), UINT_MAX, &v))
        return -EINVAL;
    out->minor = (unsigned)v;
    if (!blk_field(&p, end, &f, &fl) || fl == 0)
        return -EINVAL;
    if ((rc = blk_unescape(f, fl, out->root, sizeof out->root, false)) < 0)
        return rc;
    if (!blk_field(&p, end, &f, &fl) || fl == 0)
        return -EINVAL;
    if ((rc = blk_unescape(f, fl, out->mountpoint, sizeof out->mountpoint, false)) < 0)
        return rc;
    if (!blk_field(&p, end, &f, &fl)) /* per-mount options */
        return -EINVAL;
    /* Optional fields (shared:N, master:N, ...), zero or more, up to "-". */
    for (;;) {
        if (!blk_field(&p, end, &f, &fl))
            return -EINVAL;
        if (fl == 1 && f[0] == '-')
            break;
    }
    if (!blk_field(&p, end, &f, &fl) || fl == 0)
        return -EINVAL;
    if ((rc = blk_unescape(f, fl, out->fstype, sizeof out->fstype, false)) < 0)
        return rc;
    /* The source may be empty on old kernels; the super options may be
     * missing on a hand-written line.  Neither is worth refusing. */
    out->source[0] = '\0';
    out->super_opts[0] = '\0';
    if (blk_field(&p, end, &f, &fl) &&
        (rc = blk_unescape(f, fl, out->source, sizeof out->source, false)) < 0)
        return rc;
    if (p < end) {
        /* The rest of the line, should options ever contain a raw space. */
        if ((rc = blk_unescape(p, (size_t)(end - p), out->super_opts, sizeof out->super_opts,
                               false)) < 0)
            return rc;
    }
    return 0;
}

int tm_mountinfo_parse(const char *buf, size_t len, tm_mount *out, size_t cap)
{
    if (!buf || (!out && cap))
        return -EINVAL;
    const char *p = buf, *end = buf + len;
    tm_mount *scratch = NULL; /* lines beyond cap are parsed only to be counted */
    int n = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        tm_mount *m = (size_t)n < cap ? &out[n] : scratch;
        if (!m && (m = scratch = malloc(sizeof *scratch)) == NULL)
            return -ENOMEM;
        if (tm_mountinfo_parse_line(p, (size_t)(le - p), m) == 0 && n < INT_MAX)
            n++;
        p = nl ? nl + 1 : end;
    }
    free(scratch);
    return n;
}

/* ----------------------------------------------------- overlay layer list */

int tm_overlay_layers(const char *opts, int (*fn)(const char *layer, bool upper, void *arg),
                      void *arg)
{
    if (!opts || !fn)
        return -EINVAL;
    char layer[PATH_MAX];
    int count = 0;
    /* Two passes so that the upper layer (where writes go) comes first;
     * the kernel prints lowerdir before upperdir. */
    for (int pass = 0; pass < 2; pass++) {
        const char *p = opts;
        while (*p) {
            /* Commas inside values are escaped (\054), so a raw comma always
             * ends an option. */
            const char *e = strchrnul(p, ',');
            const char *val = NULL;
            bool list = false;
            static const char *const lower_keys[] = {"lowerdir=", "lowerdir+=", "datadir+="};
            if (pass == 0 && (size_t)(e - p) > 9 && memcmp(p, "upperdir=", 9) == 0) {
                val = p + 9;
            } else if (pass == 1) {
                for (size_t k = 0; k < TM_ARRAY_LEN(lower_keys); k++) {
                    size_t kl = strlen(lower_keys[k]);
                    if ((size_t)(e - p) > kl && memcmp(p, lower_keys[k], kl) == 0) {
                        val = p + kl;
                        list = k == 0;
                    }
                }
            }
            while (val && val < e) {
                /* lowerdir is a colon list; "\:" is a colon inside a path
                 * and "::" separates data-only layers (empty piece). */
                const char *q = val;
                if (list)
                    while (q < e && *q != ':')
                        q += (*q == '\\' && q + 1 < e) ? 2 : 1;
                else
                    q = e;
                if (q > val) {
                    int rc = blk_unescape(val, (size_t)(q - val), layer, sizeof layer, list);
                    if (rc < 0)
                        return rc;
                    if ((rc = fn(layer, pass == 0, arg)) != 0)
                        return rc;
                    if (count < INT_MAX)
                        count++;
                }
                val = q + 1;
            }
            p = *e ? e + 1 : e;
        }
    }
    return count;
}

/* ---------------------------------------------------------- the resolver */

typedef struct blk_ctx {
    const char *mountinfo; /* the text of the mount table */
    size_t mlen;
    const char *mountinfo_path; /* for messages */
    const char *root;           /* "" or "<proc>/PID/root": prefix for the real filesystem */
    bool touch_fs;              /* false for tm_blkdev_resolve_at: paths are lexical only */
    int depth;                  /* overlay recursion */
    unsigned *budget;           /* overlay layers still allowed in this resolution */
} blk_ctx;

/* Reads a whole mountinfo file into *buf (malloc'd, NUL-terminated).  The
 * file is generated on read, so a too-small buffer is simply retried with
 * a bigger one. */
static int blk_read_mountinfo(const char *path, char **buf, size_t *len)
{
    for (size_t cap = 64u << 10;; cap *= 4) {
        char *b = malloc(cap);
        if (!b)
            return tm_seterr(-ENOMEM, "%s: out of memory", path);
        ssize_t n = tm_read_file(path, b, cap);
        if (n >= 0) {
            *buf = b;
            *len = (size_t)n;
            return 0;
        }
        free(b);
        if (n != -EFBIG || cap >= BLK_MOUNTINFO_MAX)
            return (int)n; /* tm_read_file set the message */
    }
}

/* Length of mountpoint mp if it contains path on a component boundary
 * ("/data" contains "/data" and "/data/x", not "/database"), else 0. */
static size_t blk_prefix(const char *mp, const char *path)
{
    size_t n = strlen(mp);
    while (n > 1 && mp[n - 1] == '/')
        n--;
    if (n == 1 && mp[0] == '/')
        return path[0] == '/' ? 1 : 0;
    if (n == 0 || strncmp(mp, path, n) != 0)
        return 0;
    return path[n] == '\0' || path[n] == '/' ? n : 0;
}

/* Picks the mount entry for a canonical path into *best. */
static int blk_find_mount(const blk_ctx *c, const char *path, tm_mount *best)
{
    tm_mount *cur = malloc(sizeof *cur);
    if (!cur)
        return tm_seterr(-ENOMEM, "out of memory");
    size_t bestlen = 0;
    const char *p = c->mountinfo, *end = c->mountinfo + c->mlen;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (tm_mountinfo_parse_line(p, (size_t)(le - p), cur) == 0) {
            size_t n = blk_prefix(cur->mountpoint, path);
            /* >= : the later of two equal mountpoints is the one on top. */
            if (n > 0 && n >= bestlen) {
                memcpy(best, cur, sizeof *cur);
                bestlen = n;
            }
        }
        p = nl ? nl + 1 : end;
    }
    free(cur);
    if (bestlen == 0)
        return tm_seterr(-ENOENT, "%s: no mount entry for it in %s", path, c->mountinfo_path);
    return 0;
}

static const char *blk_basename(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The canonical sysfs directory of block device maj:min, or -errno. */
static int blk_sysdir(unsigned maj, unsigned min, char *dir, size_t cap)
{
    char link[PATH_MAX];
    int rc = tm_sys_path(link, sizeof link, "dev/block/%u:%u", maj, min);
    if (rc)
        return rc;
    char *r = realpath(link, NULL);
    if (!r)
        return -errno;
    if (strlen(r) >= cap)
        rc = -ENAMETOOLONG;
    else
        tm_strlcpy(dir, r, cap);
    free(r);
    return rc;
}

static bool blk_exists_in(const char *dir, const char *name)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p)
        return false;
    return access(p, F_OK) == 0;
}

static void blk_add_leaf(tm_blkdev *out, const char *name)
{
    for (size_t i = 0; i < out->nleaves; i++)
        if (strcmp(out->leaves[i], name) == 0)
            return;
    if (out->nleaves < TM_BLKDEV_MAX_LEAVES)
        tm_strlcpy(out->leaves[out->nleaves++], name, TM_DISK_NAME_MAX);
}

/* The whole disk of the sysfs device directory dir into disk: dir itself,
 * or for a partition its parent directory.  Returns whether dir is a
 * partition. */
static bool blk_whole_disk(const char *dir, char *disk, size_t cap)
{
    tm_strlcpy(disk, dir, cap);
    if (!blk_exists_in(dir, "partition"))
        return false;
    char *slash = strrchr(disk, '/');
    if (!slash || slash == disk)
        return false;
    *slash = '\0';
    return true;
}

static int blk_collect(const char *dir, tm_blkdev *out, int depth);

/* Follows every link in dir (a slaves/ or btrfs devices/ directory) to a
 * device directory and collects its disks; *n counts the devices.  A
 * missing dir counts none.  Sorted, so that the leaves come out in a
 * stable order. */
static int blk_collect_dir(const char *dir, tm_blkdev *out, int depth, size_t *n)
{
    struct dirent **ents = NULL;
    int nents = scandir(dir, &ents, NULL, alphasort);
    int rc = 0;
    *n = 0;
    for (int i = 0; i < nents; i++) {
        char p[PATH_MAX];
        char *r = NULL;
        if (rc == 0 && ents[i]->d_name[0] != '.' &&
            snprintf(p, sizeof p, "%s/%s", dir, ents[i]->d_name) < (int)sizeof p &&
            (r = realpath(p, NULL)) != NULL) { /* else: vanished meanwhile */
            (*n)++;
            rc = blk_collect(r, out, depth + 1);
        }
        free(r);
        free(ents[i]);
    }
    free(ents);
    return rc;
}

/* Adds the whole disks under the sysfs device directory dir: a partition
 * goes to its parent directory, a stacked device to each of its slaves. */
static int blk_collect(const char *dir, tm_blkdev *out, int depth)
{
    if (depth > BLK_MAX_DEPTH)
        return tm_seterr(-ELOOP, "%s: devices stacked deeper than %d", dir, BLK_MAX_DEPTH);
    char disk[PATH_MAX];
    blk_whole_disk(dir, disk, sizeof disk);
    char slaves[PATH_MAX];
    size_t nslaves;
    if (snprintf(slaves, sizeof slaves, "%s/slaves", disk) >= (int)sizeof slaves)
        return tm_seterr(-ENAMETOOLONG, "%s: path too long", disk);
    int rc = blk_collect_dir(slaves, out, depth, &nslaves);
    if (rc)
        return rc;
    if (nslaves == 0)
        blk_add_leaf(out, blk_basename(disk));
    return 0;
}

/* Writes the `why` sentence.  Paths can be longer than the sentence's
 * buffer: it is cut rather than refused, as it is only read by people. */
__attribute__((format(printf, 2, 3))) static void blk_why(tm_blkdev *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->why, sizeof out->why, fmt, ap);
    va_end(ap);
}

/* Appends ", "-joined leaves to buf (bounded). */
static void blk_join_leaves(const tm_blkdev *b, char *buf, size_t cap)
{
    size_t o = strlen(buf);
    for (size_t i = 0; i < b->nleaves && o < cap; i++) {
        int n = snprintf(buf + o, cap - o, "%s%s", i ? ", " : "", b->leaves[i]);
        if (n < 0)
            break;
        o += (size_t)n;
    }
}

/* Fills out from the sysfs directory of the device the filesystem is on. */
static int blk_from_dev(const char *dir, tm_blkdev *out)
{
    tm_strlcpy(out->top, blk_basename(dir), sizeof out->top);
    out->kind = TM_FS_BLOCK;
    out->nleaves = 0;
    int rc = blk_collect(dir, out, 0);
    if (rc)
        return rc;

    char whole[TM_DISK_NAME_MAX] = "";
    char disk[PATH_MAX];
    if (blk_whole_disk(dir, disk, sizeof disk))
        tm_strlcpy(whole, blk_basename(disk), sizeof whole);
    bool stacked = !(out->nleaves == 1 && strcmp(out->leaves[0], whole[0] ? whole : out->top) == 0);

    char srcpart[700];
    if (strncmp(out->source, "/dev/", 5) == 0 && strcmp(blk_basename(out->source), out->top) != 0)
        snprintf(srcpart, sizeof srcpart, ", %s = %s", out->source, out->top);
    else
        snprintf(srcpart, sizeof srcpart, " on %s", out->top);
    char partpart[64] = "";
    if (whole[0])
        snprintf(partpart, sizeof partpart, ", partition of %s", whole);
    blk_why(out, "%s is on %s (%s%s%s)%s", out->path, out->mountpoint, out->fstype, srcpart,
            partpart, stacked ? ", stacked on " : "");
    if (stacked)
        blk_join_leaves(out, out->why, sizeof out->why);
    return 0;
}

static bool blk_in_list(const char *s, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0)
            return true;
    return false;
}

/* Sets kind and why for a filesystem with no block device behind it. */
static void blk_no_device(tm_blkdev *out, const tm_mount *m)
{
    static const char *const memory[] = {"tmpfs", "ramfs", "devtmpfs"};
    static const char *const network[] = {"nfs",    "nfs4", "cifs",   "smb3", "smbfs", "ceph",
                                          "lustre", "gpfs", "beegfs", "9p",   "afs",   "glusterfs"};
    out->top[0] = '\0';
    out->nleaves = 0;
    if (blk_in_list(m->fstype, memory, TM_ARRAY_LEN(memory))) {
        out->kind = TM_FS_MEMORY;
        blk_why(out,
                "%s is on %s (memory): no disk behind it; process I/O and memory pressure are "
                "still measured",
                out->path, m->fstype);
    } else if (blk_in_list(m->fstype, network, TM_ARRAY_LEN(network))) {
        out->kind = TM_FS_NETWORK;
        blk_why(out,
                "%s is on %s (%s from %s), a network filesystem: no block device behind it; "
                "process I/O counters and I/O pressure are still measured",
                out->path, out->mountpoint, m->fstype, m->source);
    } else if (strcmp(m->fstype, "fuse") == 0 || strncmp(m->fstype, "fuse.", 5) == 0) {
        out->kind = TM_FS_FUSE;
        blk_why(out,
                "%s is on %s (%s from %s), a FUSE filesystem: no block device behind it; "
                "process I/O counters and I/O pressure are still measured",
                out->path, out->mountpoint, m->fstype, m->source);
    } else if (m->major != 0) {
        out->kind = TM_FS_OTHER;
        blk_why(out,
                "%s is on %s (%s from %s), device %u:%u, which is not in %s/dev/block: no disk "
                "statistics for it; process I/O counters and I/O pressure are still measured",
                out->path, out->mountpoint, m->fstype, m->source, m->major, m->minor,
                tm_sys_root());
    } else {
        out->kind = TM_FS_OTHER;
        blk_why(out,
                "%s is on %s (%s): no block device behind it; process I/O counters and I/O "
                "pressure are still measured",
                out->path, out->mountpoint, m->fstype);
    }
}

/* btrfs: stat() gives an anonymous device per subvolume and mountinfo
 * another one, so the device comes from the mount source, and for a
 * multi-device filesystem from <sys>/fs/btrfs/<uuid>/devices, the
 * filesystem whose device list holds the source.  Returns 1 if found. */
static int blk_btrfs(const blk_ctx *c, const tm_mount *m, tm_blkdev *out)
{
    char want[2][TM_DISK_NAME_MAX] = {"", ""};
    char srcdir[PATH_MAX] = "";
    if (strncmp(m->source, "/dev/", 5) == 0)
        tm_strlcpy(want[0], blk_basename(m->source), sizeof want[0]);
    if (c->touch_fs && m->source[0] == '/') {
        /* /dev/mapper/x names dm-N in sysfs: ask the device node. */
        char node[PATH_MAX];
        struct stat st;
        if (snprintf(node, sizeof node, "%s%s", c->root, m->source) < (int)sizeof node &&
            stat(node, &st) == 0 && S_ISBLK(st.st_mode) &&
            blk_sysdir(major(st.st_rdev), minor(st.st_rdev), srcdir, sizeof srcdir) == 0)
            tm_strlcpy(want[1], blk_basename(srcdir), sizeof want[1]);
    }
    if (!want[0][0] && !want[1][0])
        return 0;

    char fsroot[PATH_MAX];
    if (tm_sys_path(fsroot, sizeof fsroot, "fs/btrfs"))
        return 0;
    DIR *fs = opendir(fsroot);
    int found = 0, rc = 0;
    while (fs && !found) {
        struct dirent *u = readdir(fs);
        if (!u)
            break;
        if (u->d_name[0] == '.')
            continue;
        char devs[PATH_MAX];
        if (snprintf(devs, sizeof devs, "%s/%s/devices", fsroot, u->d_name) >= (int)sizeof devs)
            continue;
        const char *hit = NULL;
        if (want[0][0] && blk_exists_in(devs, want[0]))
            hit = want[0];
        else if (want[1][0] && blk_exists_in(devs, want[1]))
            hit = want[1];
        if (!hit)
            continue;
        found = 1;
        tm_strlcpy(out->top, hit, sizeof out->top);
        out->nleaves = 0;
        size_t ndev = 0;
        rc = blk_collect_dir(devs, out, 0, &ndev);
        if (rc)
            break;
        out->kind = TM_FS_BLOCK;
        blk_why(out, "%s is on %s (btrfs on %s, %zu device%s), disks ", out->path, out->mountpoint,
                m->source, ndev, ndev == 1 ? "" : "s");
        blk_join_leaves(out, out->why, sizeof out->why);
    }
    if (fs)
        closedir(fs);
    if (rc)
        return rc;
    if (!found && srcdir[0]) {
        /* No sysfs entry for the filesystem (old kernel): the source alone. */
        if ((rc = blk_from_dev(srcdir, out)) != 0)
            return rc;
        found = 1;
    }
    return found;
}

static int blk_core(blk_ctx *c, const char *path, dev_t st_dev, tm_blkdev *out);

/* Canonicalises path as seen from root ("" for our own root, else
 * "<proc>/PID/root"), following symlinks inside root: an absolute link
 * restarts at root, ".." stops at it.  realpath() cannot be used under
 * /proc/PID/root: it would read that magic link as "/" and continue in our
 * namespace. */
static int blk_canon_in_root(const char *root, const char *path, char *canon, size_t cap)
{
    size_t big = 2 * PATH_MAX;
    char *rest = malloc(big), *tmp = malloc(big), *full = malloc(big);
    char link[PATH_MAX];
    int rc = 0, links = 0;
    size_t clen = 0;
    if (!rest || !tmp || !full || cap < 2) {
        rc = -ENOMEM;
        goto out;
    }
    if (strlen(path) >= big) {
        rc = -ENAMETOOLONG;
        goto out;
    }
    tm_strlcpy(rest, path, big);
    canon[0] = '\0';
    const char *p = rest;
    for (;;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchrnul(p, '/');
        size_t n = (size_t)(e - p);
        if (n == 1 && p[0] == '.') {
            p = e;
            continue;
        }
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (clen > 0 && canon[clen - 1] != '/')
                clen--;
            if (clen > 0)
                clen--;
            canon[clen] = '\0';
            p = e;
            continue;
        }
        size_t old = clen;
        if (clen + 1 + n >= cap) {
            rc = -ENAMETOOLONG;
            goto out;
        }
        canon[clen++] = '/';
        memcpy(canon + clen, p, n);
        clen += n;
        canon[clen] = '\0';
        if (snprintf(full, big, "%s%s", root, canon) >= (int)big) {
            rc = -ENAMETOOLONG;
            goto out;
        }
        struct stat st;
        if (lstat(full, &st) < 0) {
            rc = -errno;
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            if (++links > BLK_MAX_LINKS) {
                rc = -ELOOP;
                goto out;
            }
            ssize_t ln = readlink(full, link, sizeof link - 1);
            if (ln < 0) {
                rc = -errno;
                goto out;
            }
            link[ln] = '\0';
            if (snprintf(tmp, big, "%s/%s", link, e) >= (int)big) {
                rc = -ENAMETOOLONG;
                goto out;
            }
            char *t = rest;
            rest = tmp;
            tmp = t;
            p = rest;
            clen = link[0] == '/' ? 0 : old;
            canon[clen] = '\0';
            continue;
        }
        if (*e && !S_ISDIR(st.st_mode)) {
            rc = -ENOTDIR;
            goto out;
        }
        p = e;
    }
    if (clen == 0) {
        canon[0] = '/';
        canon[1] = '\0';
    }
out:
    free(rest);
    free(tmp);
    free(full);
    return rc;
}

/* Canonical path and st_dev of path seen from root; realpath() for our
 * own root. */
static int blk_locate(const char *root, const char *path, char *canon, size_t cap, dev_t *dev)
{
    int rc;
    if (!root[0]) {
        char *r = realpath(path, NULL);
        if (!r)
            return tm_seterr(-errno, "%s: %s", path, strerror(errno));
        if (strlen(r) >= cap) {
            free(r);
            return tm_seterr(-ENAMETOOLONG, "%s: %s", path, strerror(ENAMETOOLONG));
        }
        tm_strlcpy(canon, r, cap);
        free(r);
    } else if ((rc = blk_canon_in_root(root, path, canon, cap)) != 0) {
        return tm_seterr(rc, "%s: %s", path, strerror(-rc));
    }
    char full[2 * PATH_MAX];
    struct stat st;
    snprintf(full, sizeof full, "%s%s", root, canon);
    if (stat(full, &st) < 0)
        return tm_seterr(-errno, "%s: %s", path, strerror(errno));
    *dev = st.st_dev;
    return 0;
}

struct blk_ovl {
    blk_ctx *c, *host; /* layers are named in the mounter's namespace: try host first */
    tm_blkdev *out, *layer;
    char uppers[256], lowers[512]; /* the layers' top devices, for the sentence */
    size_t nblock;
    int depth; /* of the layers: one below the overlay */
};

/* Appends name to a ", " list unless it is there already. */
static void blk_list_add(char *list, size_t cap, const char *name)
{
    size_t nl = strlen(name);
    for (const char *s = list; (s = strstr(s, name)) != NULL; s += nl)
        if ((s == list || s[-1] == ' ') && (s[nl] == '\0' || s[nl] == ','))
            return;
    size_t o = strlen(list);
    snprintf(list + o, cap - o, "%s%s", o ? ", " : "", name);
}

static int blk_ovl_layer(const char *layer, bool upper, void *arg)
{
    struct blk_ovl *o = arg;
    char canon[PATH_MAX];
    dev_t dev = 0;
    int rc = -ENOENT;
    blk_ctx *tries[2] = {o->host ? o->host : o->c, o->host ? o->c : NULL};
    if (*o->c->budget == 0)
        tries[0] = NULL; /* counted as unresolved */
    else
        (*o->c->budget)--;
    for (size_t i = 0; i < 2 && tries[i] && rc; i++) {
        blk_ctx *c = tries[i];
        if (c->touch_fs) {
            rc = blk_locate(c->root, layer, canon, sizeof canon, &dev);
        } else {
            tm_strlcpy(canon, layer, sizeof canon);
            dev = 0;
            rc = 0;
        }
        if (rc == 0) {
            memset(o->layer, 0, sizeof *o->layer);
            c->depth = o->depth;
            rc = blk_core(c, canon, dev, o->layer);
        }
    }
    /* A layer that cannot be resolved does not sink the others. */
    const char *what = rc ? "?" : o->layer->kind == TM_FS_BLOCK ? o->layer->top : o->layer->fstype;
    blk_list_add(upper ? o->uppers : o->lowers, upper ? sizeof o->uppers : sizeof o->lowers, what);
    if (rc == 0 && o->layer->kind == TM_FS_BLOCK) {
        if (o->nblock++ == 0) /* the upper layer comes first */
            tm_strlcpy(o->out->top, o->layer->top, sizeof o->out->top);
        for (size_t i = 0; i < o->layer->nleaves; i++)
            blk_add_leaf(o->out, o->layer->leaves[i]);
    }
    return 0;
}

/* overlayfs: the devices of its layers.  top is the upper layer's device
 * (where writes go), else the first lower layer's. */
static int blk_overlay(blk_ctx *c, const tm_mount *m, tm_blkdev *out)
{
    if (c->depth >= 4)
        return tm_seterr(-ELOOP, "%s: overlays nested too deep", out->path);
    struct blk_ovl o = {.c = c, .out = out, .depth = c->depth + 1};
    blk_ctx host = {.root = "", .touch_fs = true};
    char *hostbuf = NULL, hostpath[PATH_MAX];
    int rc = 0;
    o.layer = malloc(sizeof *o.layer);
    if (!o.layer) {
        rc = tm_seterr(-ENOMEM, "out of memory");
        goto out;
    }
    if (c->touch_fs && c->root[0] &&
        tm_proc_path(hostpath, sizeof hostpath, "self/mountinfo") == 0 &&
        blk_read_mountinfo(hostpath, &hostbuf, &host.mlen) == 0) {
        host.mountinfo = hostbuf;
        host.mountinfo_path = hostpath;
        host.depth = c->depth;
        host.budget = c->budget;
        o.host = &host;
    }
    out->top[0] = '\0';
    out->nleaves = 0;
    int saved = c->depth;
    rc = tm_overlay_layers(m->super_opts, blk_ovl_layer, &o);
    c->depth = saved;
    if (rc < 0)
        goto out;
    rc = 0;
    if (o.nblock == 0) {
        out->kind = TM_FS_OTHER;
        blk_why(out,
                "%s is on %s (overlay; upper on %s; lower on %s): no layer is on a block "
                "device; process I/O counters and I/O pressure are still measured",
                out->path, out->mountpoint, o.uppers[0] ? o.uppers : "none",
                o.lowers[0] ? o.lowers : "none");
        goto out;
    }
    out->kind = TM_FS_BLOCK;
    blk_why(out, "%s is on %s (overlay; upper on %s; lower on %s), disks ", out->path,
            out->mountpoint, o.uppers[0] ? o.uppers : "none", o.lowers[0] ? o.lowers : "none");
    blk_join_leaves(out, out->why, sizeof out->why);
out:
    free(hostbuf);
    free(o.layer);
    return rc;
}

/* The core: mount entry by path, then device by st_dev, the mount's
 * MAJ:MIN, or the filesystem type. */
static int blk_core(blk_ctx *c, const char *path, dev_t st_dev, tm_blkdev *out)
{
    tm_mount *m = malloc(sizeof *m);
    char dir[PATH_MAX];
    int rc;
    if (!m)
        return tm_seterr(-ENOMEM, "out of memory");
    tm_strlcpy(out->path, path, sizeof out->path);
    if ((rc = blk_find_mount(c, path, m)) != 0)
        goto out;
    tm_strlcpy(out->mountpoint, m->mountpoint, sizeof out->mountpoint);
    tm_strlcpy(out->fstype, m->fstype, sizeof out->fstype);
    tm_strlcpy(out->source, m->source, sizeof out->source);

    if ((major(st_dev) != 0 && blk_sysdir(major(st_dev), minor(st_dev), dir, sizeof dir) == 0) ||
        (m->major != 0 && blk_sysdir(m->major, m->minor, dir, sizeof dir) == 0)) {
        rc = blk_from_dev(dir, out);
        goto out;
    }
    if (strcmp(m->fstype, "btrfs") == 0) {
        rc = blk_btrfs(c, m, out);
        if (rc != 0) {
            rc = rc < 0 ? rc : 0;
            goto out;
        }
    } else if (strcmp(m->fstype, "overlay") == 0) {
        rc = blk_overlay(c, m, out);
        goto out;
    }
    blk_no_device(out, m);
out:
    free(m);
    return rc;
}

int tm_blkdev_resolve_at(const char *realpath_, dev_t st_dev, const char *mountinfo_path,
                         tm_blkdev *out)
{
    if (!realpath_ || !mountinfo_path || !out || realpath_[0] != '/')
        return tm_seterr(-EINVAL, "tm_blkdev_resolve_at: invalid argument");
    memset(out, 0, sizeof *out);
    unsigned budget = BLK_MAX_LAYERS;
    blk_ctx c = {
        .root = "", .touch_fs = false, .mountinfo_path = mountinfo_path, .budget = &budget};
    char *buf = NULL;
    int rc = blk_read_mountinfo(mountinfo_path, &buf, &c.mlen);
    if (rc)
        return rc;
    c.mountinfo = buf;
    rc = blk_core(&c, realpath_, st_dev, out);
    free(buf);
    return rc;
}

int tm_blkdev_resolve(const char *path, pid_t pid, tm_blkdev *out)
{
    if (!path || !out || !path[0])
        return tm_seterr(-EINVAL, "tm_blkdev_resolve: empty path");
    memset(out, 0, sizeof *out);
    char root[PATH_MAX] = "", mi[PATH_MAX], canon[PATH_MAX];
    char *buf = NULL;
    dev_t dev = 0;
    int rc;
    if (pid > 0) {
        if (path[0] != '/')
            return tm_seterr(-EINVAL, "%s: a path in process %d's namespace must be absolute", path,
                             (int)pid);
        if ((rc = tm_proc_path(root, sizeof root, "%d/root", (int)pid)) != 0 ||
            (rc = tm_proc_path(mi, sizeof mi, "%d/mountinfo", (int)pid)) != 0)
            return tm_seterr(rc, "%s: %s", path, strerror(-rc));
        struct stat st;
        if (stat(root, &st) < 0) {
            if (errno == ENOENT)
                return tm_seterr(-ESRCH, "process %d: %s", (int)pid, strerror(ESRCH));
            return tm_seterr(-errno, "%s: %s", root, strerror(errno));
        }
    } else if ((rc = tm_proc_path(mi, sizeof mi, "self/mountinfo")) != 0) {
        return tm_seterr(rc, "%s: %s", path, strerror(-rc));
    }
    if ((rc = blk_locate(root, path, canon, sizeof canon, &dev)) != 0)
        return rc;
    unsigned budget = BLK_MAX_LAYERS;
    blk_ctx c = {.root = root, .touch_fs = true, .mountinfo_path = mi, .budget = &budget};
    if ((rc = blk_read_mountinfo(mi, &buf, &c.mlen)) != 0)
        return rc;
    c.mountinfo = buf;
    rc = blk_core(&c, canon, dev, out);
    free(buf);
    return rc;
}
