/*
 * trainmon.h - the public interface of libtrainmon.
 *
 * Every front-end (the trainmon command, the HTTP exporter, the CPython
 * extension) uses only this header.  Modules:
 *
 *   tm_        errors, roots of /proc and /sys, clocks
 *   tm_disk_   /proc/diskstats with iostat -x semantics
 *   tm_blkdev_ path -> the block device(s) behind it
 *   tm_ptree_  a process tree: CPU, I/O, memory, states
 *   tm_psi_    pressure stall information, system-wide and per cgroup
 *   tm_rec_    record files: append-only, crash-safe, optionally size-bounded
 *   tm_reader_ reading record files, also while they grow or after damage
 *
 * Conventions (docs/ARCHITECTURE.md "Conventions"):
 *   - Functions return 0 (or a count) on success and a negative errno value
 *     on failure; tm_last_error() then holds a one-line message naming the
 *     thing and the reason.  The message is per thread.
 *   - A value that could not be measured is NAN (doubles) or has its bit
 *     clear in a `valid` mask; it is never reported as 0.
 *   - Destructors take T ** and set the pointer to NULL.
 */
#ifndef TRAINMON_H
#define TRAINMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TM_VERSION "0.1.0"

/* ---------------------------------------------------------------- basics */

/* The message of the last failed call on this thread ("" if none). */
const char *tm_last_error(void);

/* Roots of the /proc and /sys trees the collectors read.  Default: the
 * environment variables TRAINMON_PROC_ROOT and TRAINMON_SYS_ROOT, else
 * "/proc" and "/sys".  Passing NULL restores the default.  The strings are
 * copied.  Not thread-safe against running collectors: set them first. */
void tm_set_proc_root(const char *root);
void tm_set_sys_root(const char *root);
const char *tm_proc_root(void);
const char *tm_sys_root(void);

/* CLOCK_MONOTONIC and CLOCK_REALTIME in nanoseconds (vDSO, no syscall). */
int64_t tm_now_mono_ns(void);
int64_t tm_now_real_ns(void);

/* ------------------------------------------------- text out: valid UTF-8
 *
 * Strings in record files (tags, phase names, host and comm names, event
 * details, labels) come from other hosts, crafted files and process names,
 * so they may be any bytes.  Every writer of JSON, CSV, HTML, Prometheus
 * label values and TensorBoard tags passes them through tm_escape, which
 * keeps well-formed UTF-8 as it is, replaces each maximal ill-formed
 * subpart (Unicode 15 s.3.9; what Python's decode(errors="replace") and
 * the WHATWG decoder do) with U+FFFD, and escapes what the format needs. */

#define TM_UTF8_BAD 0xFFFFFFFFu

/* Decodes the sequence at s[0..len): returns the bytes it takes (1..4)
 * with *cp the code point, or, for an ill-formed sequence (stray
 * continuation byte, C0/C1/F5..FF lead, overlong form, surrogate, beyond
 * U+10FFFF, truncated), the length of its maximal ill-formed subpart (>= 1)
 * with *cp = TM_UTF8_BAD.  0 when len is 0. */
size_t tm_utf8_decode(const char *s, size_t len, uint32_t *cp);
/* Bytes of the longest well-formed UTF-8 prefix of s[0..len) (len when all
 * of it is well-formed). */
size_t tm_utf8_valid_prefix(const char *s, size_t len);

typedef enum tm_esc {
    TM_ESC_UTF8, /* only ill-formed bytes replaced (TensorBoard tags, JSON text) */
    TM_ESC_JSON, /* a JSON string's contents: \" \\ \n \t \r, \u00XX for other
                  * control characters and DEL (no quotes added) */
    TM_ESC_PROM, /* a Prometheus label value: \\ \" \n */
    TM_ESC_HTML, /* HTML text or attribute: & < > " ' as entities; control
                  * characters other than tab, newline and CR become U+FFFD */
    TM_ESC_CSV,  /* a CSV field's contents: " doubled (the caller quotes) */
    TM_ESC_TEXT, /* one line of text: control characters and DEL become '?' */
} tm_esc;

/* Writes s[0..len) escaped for how through put(ctx, bytes, n), in as few
 * calls as it can (runs of plain text go out whole).  Returns 0, or the
 * first non-zero return of put (which ends the call). */
typedef int (*tm_esc_put)(void *ctx, const char *p, size_t n);
int tm_escape(tm_esc how, const char *s, size_t len, tm_esc_put put, void *ctx);

/* v with prec (0..9) decimals into buf, as printf's "%.*f" writes it but
 * some twenty times cheaper (units.c): the same digits except that a value
 * within one rounding error of a tie may round up where printf rounds to
 * even.  NaN, infinities and |v| * 10^prec >= 1e15 go through printf.
 * Returns the length written (NUL not counted); cap should be >= 32 (less
 * goes through snprintf, truncated). */
size_t tm_fmt_fixed(char *buf, size_t cap, double v, int prec);

/* ------------------------------------------------------------ disk stats */

#define TM_DISK_NAME_MAX 32

/* One line of /proc/diskstats.  Millisecond fields are 32-bit in the kernel
 * and wrap; the others are 64-bit.  nfields is 14, 18 or 20: discard fields
 * are valid when nfields >= 18, flush fields when nfields >= 20. */
typedef struct tm_diskstat {
    unsigned major, minor;
    char name[TM_DISK_NAME_MAX];
    int nfields;
    uint64_t rd_ios, rd_merges, rd_sec;
    uint32_t rd_ms;
    uint64_t wr_ios, wr_merges, wr_sec;
    uint32_t wr_ms;
    uint32_t inflight;
    uint32_t io_ms, weighted_ms;
    uint64_t dc_ios, dc_merges, dc_sec;
    uint32_t dc_ms;
    uint64_t fl_ios;
    uint32_t fl_ms;
} tm_diskstat;

/* Rates over an interval, the numbers of `iostat -x` (sysstat's iostat.c;
 * Documentation/admin-guide/iostats.rst). Units as iostat: per second, kB (1024 bytes), ms,
 * percent.  Discard and flush values are NAN when the kernel does not report them. */
typedef struct tm_diskrate {
    unsigned major, minor;
    char name[TM_DISK_NAME_MAX];
    double r_s, w_s, d_s, f_s;
    double rkb_s, wkb_s, dkb_s;
    double rrqm_s, wrqm_s, drqm_s;
    double rrqm_pct, wrqm_pct, drqm_pct;
    double r_await, w_await, d_await, f_await;
    double rareq_sz, wareq_sz, dareq_sz;
    double aqu_sz;
    double util; /* percent, capped at 100 */
} tm_diskrate;

/* Parses the text of /proc/diskstats.  Lines with fewer than 14 fields
 * (old 7-field partition lines) and malformed lines are skipped.  Writes
 * at most cap entries to out and returns how many were parsed, or a
 * negative errno (-EINVAL for NULL arguments). */
int tm_diskstats_parse(const char *buf, size_t len, tm_diskstat *out, size_t cap);

/* Rates from two samples of the same device taken interval_s apart.  A
 * 64-bit counter that went backwards yields a rate of 0 (as iostat does);
 * 32-bit millisecond counters are taken modulo 2^32. */
void tm_disk_rate(const tm_diskstat *prev, const tm_diskstat *cur, double interval_s,
                  tm_diskrate *out);

/* Whether a device is a physical whole disk: present in <sys>/block, not a
 * partition and not a virtual device (loop, ram, zram, dm, md live under
 * /sys/devices/virtual).  Used when no device is named. */
bool tm_disk_is_physical(const char *name);

/* A disk collector: keeps /proc/diskstats open and selects devices.
 * names == NULL (or n == 0) selects every physical disk, re-checked each
 * sample so that disks that appear are picked up.  Names are copied. */
typedef struct tm_disk tm_disk;
int tm_disk_open(tm_disk **out, const char *const *names, size_t n);
/* Takes a sample.  On success *rates points to an array of *n rates over
 * the time since the previous sample, owned by the collector and valid
 * until the next call; the first call yields *n == 0.  A selected device
 * that vanished is left out (and appears again from the sample after it
 * returns). */
int tm_disk_sample(tm_disk *d, const tm_diskrate **rates, size_t *n);
/* The raw counters of the last sample (for recording), owned as above. */
int tm_disk_last_raw(tm_disk *d, const tm_diskstat **stats, size_t *n);
void tm_disk_close(tm_disk **d);

/* ------------------------------------------------- path -> block devices */

enum tm_fs_kind {
    TM_FS_BLOCK = 0, /* a block device (or several) is behind it */
    TM_FS_MEMORY,    /* tmpfs, ramfs: memory, no disk */
    TM_FS_NETWORK,   /* nfs, nfs4, cifs, smb3, lustre, ceph */
    TM_FS_FUSE,      /* fuse.* */
    TM_FS_OTHER,     /* proc, sysfs, overlay without block layers, ... */
};

#define TM_BLKDEV_MAX_LEAVES 32

typedef struct tm_blkdev {
    char path[4096];       /* the resolved path */
    char mountpoint[4096]; /* the mount it lives on */
    char fstype[64];
    char source[512]; /* the mount source (e.g. /dev/sda1, server:/x) */
    enum tm_fs_kind kind;
    char top[TM_DISK_NAME_MAX]; /* the device the filesystem sees (dm-0, sda1) */
    size_t nleaves;             /* whole disks behind it (sda, nvme0n1, loop1) */
    char leaves[TM_BLKDEV_MAX_LEAVES][TM_DISK_NAME_MAX];
    char why[1024]; /* one sentence: how it was found, or what is still measured */
} tm_blkdev;

/* Resolves a path to the devices behind it (util-linux findmnt and /sys/dev/block;
 * docs/ARCHITECTURE.md).  pid > 0 resolves inside that process's mount namespace (/proc/PID/root,
 * its mountinfo); pid == 0 uses the caller's.  A path with no block device is not an error: kind
 * says what it is and why explains what is measured. Returns -ENOENT etc. when the path does not
 * exist. */
int tm_blkdev_resolve(const char *path, pid_t pid, tm_blkdev *out);

/* tm_blkdev_resolve in a child process, waiting at most wait_s seconds: a
 * path on a hung mount (NFS whose server is gone, a stopped FUSE daemon)
 * blocks stat() in the kernel.  -ETIMEDOUT (tm_last_error says which path
 * and why) when it did not answer in time; otherwise as tm_blkdev_resolve. */
#define TM_BLKDEV_RESOLVE_WAIT_S 10.0
int tm_blkdev_resolve_within(const char *path, pid_t pid, tm_blkdev *out, double wait_s);

/* ------------------------------------------- storage ceiling (probe.c) */

/* What the storage behind a dataset delivers (`trainmon probe PATH`,
 * `trainmon run --probe`; docs/DIAGNOSIS.md "The storage ceiling"): reads
 * of the dataset's own files with O_DIRECT (the page cache is neither used
 * nor filled), sequential and random, at a few queue depths (that many
 * threads, each with one read in flight), for a few seconds in all. */

#define TM_PROBE_MAX_TESTS 8
#define TM_PROBE_MAX_DISKS 8

typedef struct tm_probe_test {
    char pattern[12];     /* "sequential" or "random" */
    uint64_t block_bytes; /* the request size asked for (a file's end cuts it) */
    unsigned queue_depth; /* reads in flight */
    uint64_t requests, bytes;
    double seconds, bytes_per_second, iops;
    double lat_mean_s, lat_p50_s, lat_p99_s; /* per read; NAN without reads */
} tm_probe_test;

typedef struct tm_probe {
    char path[4096];
    char device[TM_DISK_NAME_MAX]; /* the device the filesystem sees ("" unknown) */
    size_t ndisks;                 /* the whole disks behind it */
    char disks[TM_PROBE_MAX_DISKS][TM_DISK_NAME_MAX];
    uint64_t files;            /* regular files found (at most the scan bound) */
    uint64_t files_read;       /* files the reads were spread over (a sample) */
    uint64_t file_size_median; /* of the files read */
    double start_time;         /* seconds since the epoch */
    double seconds;            /* the whole probe */
    size_t ntests;
    tm_probe_test tests[TM_PROBE_MAX_TESTS];
} tm_probe;

/* Probes the storage behind path (a file or a directory, walked without
 * following symlinks or leaving its filesystem) for about seconds in all
 * (<= 0: 4).  Reads only; never writes.  0, or a negative errno with
 * tm_last_error() saying why (-EINVAL: memory (tmpfs, ramfs), or a
 * filesystem that refuses O_DIRECT; -ENODATA: no non-empty regular file). */
int tm_probe_run(const char *path, double seconds, tm_probe *out);
/* The best read rate of a pattern ("sequential", "random"; NULL: any):
 * the test, or NULL when none ran. */
const tm_probe_test *tm_probe_best(const tm_probe *p, const char *pattern);
/* probe.json: {"version": 1, "probes": [...]} of p[0..n) (docs/FORMAT.md),
 * malloc'ed and NUL-terminated (the caller frees it); NULL without memory. */
char *tm_probe_json(const tm_probe *p, size_t n);

/* ----------------------------------------------------------- process tree */

enum {
    TM_PROC_HAVE_STAT = 1u << 0, /* state, CPU times */
    TM_PROC_HAVE_IO = 1u << 1,   /* /proc/PID/io (needs same uid or ptrace) */
    TM_PROC_HAVE_RSS = 1u << 2,
    TM_PROC_HAVE_PSS = 1u << 3, /* smaps_rollup */
};

typedef struct tm_procinfo {
    pid_t pid, ppid;
    uint64_t starttime; /* clock ticks since boot: guards against PID reuse */
    char comm[32];
    char state;     /* R, S, D, Z, ... */
    unsigned valid; /* TM_PROC_HAVE_* */
    double utime_s, stime_s;
    uint64_t rchar, wchar, read_bytes, write_bytes;
    uint64_t rss_bytes, pss_bytes;
} tm_procinfo;

/* One sample of a tree.  Rates are over the time since the previous sample
 * (NAN on the first sample or when no process had the data); sums are NAN
 * when no process in the tree could be read for them. */
typedef struct tm_ptree_stats {
    int64_t t_ns; /* monotonic */
    pid_t root;   /* the root pid given to tm_ptree_open */
    bool root_alive;
    size_t nproc;                 /* live processes in the tree, root included */
    size_t nproc_d;               /* of which in D state (uninterruptible, usually I/O) */
    size_t nproc_io_unreadable;   /* processes whose /proc/PID/io gave EACCES */
    size_t nproc_untracked;       /* descendants beyond the tree's cap (4096): counted
                                     here (at least), not in nproc, procs or the sums */
    double cpu_user_s, cpu_sys_s; /* sums over live processes */
    double read_bytes, write_bytes, rchar, wchar;
    double rss_bytes, pss_bytes;
    double cpu_pct; /* 100 = one core busy */
    double read_bytes_s, write_bytes_s, rchar_s;
    double cache_hit_hint;    /* 1 - d(read_bytes)/d(rchar), in [0,1]; NAN if no reads */
    const tm_procinfo *procs; /* nproc entries, owned by the tree, valid until next call */
} tm_ptree_stats;

typedef struct tm_ptree tm_ptree;
/* Watches root and its live descendants (children of every thread).
 * -ESRCH if root does not exist. */
int tm_ptree_open(tm_ptree **out, pid_t root);
/* Samples the tree.  When the root has exited, returns 0 with
 * root_alive == false and nproc counting what is left of the tree. */
int tm_ptree_sample(tm_ptree *t, tm_ptree_stats *out);
void tm_ptree_close(tm_ptree **t);

/* ---------------------------------------------------------------- pressure */

typedef struct tm_psi {
    bool has_some, has_full;
    double some_avg10, some_avg60, some_avg300; /* percent */
    uint64_t some_total_us;
    double full_avg10, full_avg60, full_avg300;
    uint64_t full_total_us;
} tm_psi;

/* Parses the text of a pressure file (/proc/pressure/X, <cgroup>/X.pressure). */
int tm_psi_parse(const char *buf, size_t len, tm_psi *out);

/* Per-cgroup block I/O byte and op counters. */
typedef struct tm_cgio {
    bool valid;
    uint64_t rbytes, wbytes, rios, wios;
} tm_cgio;

enum {
    TM_PRESSURE_HAVE_IO = 1u << 0,
    TM_PRESSURE_HAVE_CPU = 1u << 1,
    TM_PRESSURE_HAVE_MEM = 1u << 2,
    TM_PRESSURE_HAVE_CG_IO = 1u << 3,     /* cgroup v2 io.pressure */
    TM_PRESSURE_HAVE_CG_IOSTAT = 1u << 4, /* v2 io.stat or v1 blkio */
};

typedef struct tm_pressure_stats {
    unsigned valid;      /* TM_PRESSURE_HAVE_* */
    tm_psi io, cpu, mem; /* system-wide */
    tm_psi cg_io;        /* the watched process's cgroup (v2) */
    tm_cgio cg_iostat;   /* summed over devices, v2 io.stat or v1 blkio */
    char cgroup[512];    /* the cgroup path, "" if unknown */
} tm_pressure_stats;

typedef struct tm_pressure tm_pressure;
/* pid > 0: also that process's cgroup; pid == 0: system-wide only. */
int tm_pressure_open(tm_pressure **out, pid_t pid);
int tm_pressure_sample(tm_pressure *p, tm_pressure_stats *out);
void tm_pressure_close(tm_pressure **p);

/* ------------------------------------------------------------------ GPUs */

/* GPUs through their vendors' libraries, loaded at run time (never
 * linked), one backend per vendor.  docs/GPU.md says which backends there
 * are, what is read, which library versions are tried and how errors are
 * handled.  Every field below means the same whatever the vendor. */

enum {
    TM_GPU_HAVE_MEM = 1u << 0,          /* mem_total, mem_used, mem_free */
    TM_GPU_HAVE_MEM_RESERVED = 1u << 1, /* mem_reserved: not every driver tells it */
    TM_GPU_HAVE_UTIL = 1u << 2,         /* util_gpu, util_mem */
    TM_GPU_HAVE_TEMP = 1u << 3,
    TM_GPU_HAVE_POWER = 1u << 4,
    TM_GPU_HAVE_PCIE = 1u << 5,      /* pcie_rx_bytes_s, pcie_tx_bytes_s */
    TM_GPU_HAVE_CLOCK = 1u << 6,     /* sm_clock_mhz */
    TM_GPU_HAVE_THROTTLE = 1u << 7,  /* throttle_reasons */
    TM_GPU_HAVE_PROCS = 1u << 8,     /* nprocs/procs: the compute processes */
    TM_GPU_HAVE_PROC_UTIL = 1u << 9, /* per-process sm_util/mem_util were asked */
};

/* Why a GPU's clocks are held down: trainmon's own bits, which each
 * backend maps its vendor's reasons onto (a reason the vendor cannot tell
 * is never set).  The values are fixed: recorded files
 * (gpu.throttle_reasons) and /metrics carry the mask as a number. */
enum {
    TM_GPU_THROTTLE_GPU_IDLE = 0x1,
    TM_GPU_THROTTLE_APPLICATIONS_CLOCKS = 0x2,
    TM_GPU_THROTTLE_SW_POWER_CAP = 0x4,
    TM_GPU_THROTTLE_HW_SLOWDOWN = 0x8,
    TM_GPU_THROTTLE_SYNC_BOOST = 0x10,
    TM_GPU_THROTTLE_SW_THERMAL = 0x20,
    TM_GPU_THROTTLE_HW_THERMAL = 0x40,
    TM_GPU_THROTTLE_HW_POWER_BRAKE = 0x80,
    TM_GPU_THROTTLE_DISPLAY_CLOCKS = 0x100,
};

/* A process with a compute context on a GPU.  pid is the host's pid (GPU
 * drivers do not know pid namespaces). */
typedef struct tm_gpu_proc {
    pid_t pid;
    bool mem_valid; /* false: the driver does not report it (used_bytes 0) */
    uint64_t used_bytes;
    double sm_util, mem_util; /* percent over the driver's last samples; NAN unavailable */
} tm_gpu_proc;

typedef struct tm_gpu_stats {
    unsigned index; /* trainmon's index of the GPU (docs/GPU.md, "Backends") */
    char name[96], uuid[96];
    unsigned valid; /* TM_GPU_HAVE_* for this sample */
    bool lost;      /* fell off the bus: valid == 0 from then on */
    uint64_t mem_total, mem_used, mem_free, mem_reserved; /* bytes */
    double util_gpu, util_mem; /* percent of time a kernel / memory was busy; NAN unavailable */
    double temp_c, power_w;
    double pcie_rx_bytes_s, pcie_tx_bytes_s;
    double sm_clock_mhz;
    uint64_t throttle_reasons; /* TM_GPU_THROTTLE_* mask */
    size_t nprocs;
    const tm_gpu_proc *procs; /* owned by the collector, valid until the next sample */
} tm_gpu_stats;

typedef struct tm_gpu tm_gpu;

/* Loads the vendors' libraries and opens the GPUs with the given indices
 * (indices == NULL or n == 0: all of them).  Fails, with one message for
 * the user in tm_last_error(), when GPU metrics cannot be had:
 *   -ENOENT  no vendor library or no driver ("no ... driver found: GPU
 *            metrics off"),
 *   -ENODEV  no GPU, or an index that does not exist,
 *   -EACCES / -EIO  the library's initialisation failed (its message is
 *            given),
 *   -ENOSYS  the library lacks a call that is needed.
 * The caller says that once and goes on without GPU metrics. */
int tm_gpu_open(tm_gpu **out, const unsigned *indices, size_t n);

/* Samples every opened GPU.  *gpus points to *n entries owned by the
 * collector, valid until the next call or close.  Returns 0 even when some
 * fields or GPUs fail: a field the driver does not support (or may not
 * read) has its bit clear and is not asked again; a GPU that fell off the
 * bus has lost == true and valid == 0 and is not asked again, while the
 * others are still sampled.  Each new problem is queued once as a warning. */
int tm_gpu_sample(tm_gpu *g, const tm_gpu_stats **gpus, size_t *n);

/* The job's GPUs among those sampled, for a live view (trainmon run's
 * status line): mark[i] for gpus[i] on which a process of the job's tree
 * (procs, tm_ptree_stats) holds at least a tenth of the most it holds on
 * any GPU (or an amount the driver does not give: a CUDA context on
 * cuda:0 beside the GPU it trains on is none); every GPU when none of them
 * is on any (a container's pids).  The report's rule (src/lib/jobgpus.c). */
void tm_job_gpus_live(const tm_gpu_stats *gpus, size_t n, const tm_procinfo *procs, size_t np,
                      bool *mark);

/* The next queued warning ("GPU 1 (GPU-...) is lost (fallen off the bus):
 * its metrics stop"), or NULL when none is left.  The string stays valid
 * until the next call of tm_gpu_next_warning, tm_gpu_sample or close. */
const char *tm_gpu_next_warning(tm_gpu *g);

/* Shuts the vendors' libraries down and unloads them. */
void tm_gpu_close(tm_gpu **g);

/* Names of the set bits of a throttle mask, in bit order: "gpu_idle",
 * "applications_clocks_setting", "sw_power_cap", "hw_slowdown",
 * "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
 * "hw_power_brake", "display_clocks_setting" (unknown bits are left out).
 * Stores at most cap static strings and returns how many bits are named. */
size_t tm_gpu_throttle_names(uint64_t reasons, const char **names, size_t cap);

/* Attribution of GPU processes to a process tree (docs/GPU.md).  A GPU pid
 * belongs to the tree when it is the pid of one of the tree's processes
 * (the driver's host pids and the tree read from the host's /proc), or
 * when the NSpid line of <proc root>/PID/status maps it, in an inner
 * (container) pid namespace, to a pid of the tree (whose starttime must
 * agree when known). */
bool tm_gpu_pid_in_tree(pid_t gpu_pid, const tm_ptree_stats *tree);

/* GPU memory, in bytes, used by the tree's processes on the given GPUs.
 * NAN when it cannot be told: no GPU reports its processes, the matching
 * processes' memory is not reported, or no process matched while some GPU
 * pids are not visible under the proc root (trainmon inside a container
 * with its own pid namespace sees none of the driver's host pids). */
double tm_gpu_tree_memory(const tm_gpu_stats *gpus, size_t n, const tm_ptree_stats *tree);

/* (tm_rec is defined with the record files below; C11 allows the repeat.) */
typedef struct tm_rec tm_rec;

/* Records GPU samples as series (gpu.*, docs/GPU.md), labels
 * "gpu=<index>,uuid=<uuid>" and, per process, "gpu=<index>,pid=<pid>".
 * Lost GPUs and unavailable fields are left out.  As tm_sysrec_disk. */
int tm_sysrec_gpu(tm_rec *w, int64_t t_ns, const tm_gpu_stats *g, size_t n);

/* ------------------------------------------------------------ record files */

/* Record types (docs/FORMAT.md).  Readers skip types they do not know. */
enum tm_rec_type {
    TM_REC_SERIES = 1, /* defines a series: id, name, labels, unit */
    TM_REC_SAMPLE = 2, /* values of series at the record's time */
    TM_REC_EVENT = 3,  /* a named event with a JSON object of details */
    TM_REC_STRING = 4, /* interns a string: id, text (for tags, phases) */
    /* 16..63 are reserved for the in-process recorder (steps, tags, OOM). */
};

typedef struct tm_rec_opts {
    const char *role;    /* "system", "rank0", "pid123": goes in the header */
    int rank;            /* -1 if none */
    uint64_t max_size;   /* 0: grows without bound; else a ring of at most this many bytes */
    uint32_t block_size; /* 0: default (64 KiB) */
} tm_rec_opts;

typedef struct tm_rec tm_rec;

/* Creates the record file at path (tm_file_create: O_EXCL|O_NOFOLLOW, mode
 * from the directory's read bits); an existing regular file of the
 * caller's is truncated, a symlink, FIFO or hard-linked file refused.  Appends are memory copies
 * into a shared mapping of the file, so a record is in the page cache (and
 * survives the writer's death) as soon as the call returns.  Space is
 * reserved with fallocate ahead of use, so a full disk fails an append with
 * -ENOSPC rather than a SIGBUS.  After fork() the child's appends are
 * refused (-ECHILD): only the opener's process writes. */
int tm_rec_open(tm_rec **out, const char *path, const tm_rec_opts *opts);

/* Sets the rank in the file's header in place (its CRC with it): a
 * process that learned its rank after it made the file (the CPython
 * extension's set_rank).  0, or a negative errno (-ECHILD in a forked
 * child). */
int tm_rec_set_rank(tm_rec *w, int32_t rank);

/* Appends one record of the given type.  t_ns == 0 means now.  Thread-safe.
 * Returns 0, -ENOSPC (disk full: further appends fail quickly), -E2BIG
 * (payload larger than a block), -ECHILD (in a forked child). */
int tm_rec_append(tm_rec *w, uint16_t type, int64_t t_ns, const void *payload, uint32_t len);

/* Appends n records in order under one lock, as n tm_rec_append calls
 * would (each complete and checksummed on its own); stops at the first
 * that fails and returns its error, the ones before it written.  For a
 * writer that makes several records at one instant (a training step's
 * optimizer-step and step records): the lock is taken once. */
typedef struct tm_rec_item {
    uint16_t type;
    int64_t t_ns; /* 0: now */
    const void *payload;
    uint32_t len;
} tm_rec_item;
int tm_rec_appendv(tm_rec *w, const tm_rec_item *items, size_t n);

/* Series helpers on top of tm_rec_append.  tm_rec_series returns an id
 * (>= 1) or a negative errno; the same (name, labels) returns the same id. */
int tm_rec_series(tm_rec *w, const char *name, const char *labels, const char *unit);
/* Appends values of n series taken at t_ns (0 = now).  NAN values are
 * left out (unavailable). */
int tm_rec_sample(tm_rec *w, int64_t t_ns, const uint32_t *ids, const double *values, size_t n);
/* Appends an event: a name and a JSON object text (may be NULL). */
int tm_rec_event(tm_rec *w, int64_t t_ns, const char *name, const char *json);

/* Bytes appended so far (payload and framing), and whether the file hit a
 * full disk. */
uint64_t tm_rec_bytes(const tm_rec *w);
bool tm_rec_full(const tm_rec *w);
void tm_rec_close(tm_rec **w);

/* --- recording collector samples as series (the sampler's side)
 *
 * Series names and units are listed in docs/FORMAT.md ("System series").
 * Each call appends one TM_REC_SAMPLE record (defining series on first
 * use); unavailable (NAN) values are left out.  t_ns == 0 means now.
 * Return 0 or a negative errno from tm_rec_append (-ENOSPC when full). */
int tm_sysrec_disk(tm_rec *w, int64_t t_ns, const tm_diskrate *rates, size_t n);
int tm_sysrec_pressure(tm_rec *w, int64_t t_ns, const tm_pressure_stats *ps);
int tm_sysrec_ptree(tm_rec *w, int64_t t_ns, const tm_ptree_stats *ts);

/* Per-process series of a tree's processes (proc.process_*{pid=P,comm=C}:
 * CPU cores, D state, read rates, RSS, PSS; src/lib/sysrec_procs.c lists
 * them).  Rates need the previous sample of the same process (pid and
 * starttime), which the tree itself does not keep, so a tm_procrec keeps
 * it.  At most TM_PROCREC_MAX processes per sample (the first ones of
 * ts->procs).  tm_procrec_write returns 0 or the first error of the
 * writer; the state is updated either way. */
#define TM_PROCREC_MAX 256
typedef struct tm_procrec tm_procrec;
int tm_procrec_new(tm_procrec **out);
int tm_procrec_write(tm_procrec *pr, tm_rec *w, int64_t t_ns, const tm_ptree_stats *ts);
void tm_procrec_free(tm_procrec **pr);

/* --- reading */

typedef struct tm_rec_header {
    uint32_t version;
    uint32_t block_size;
    uint64_t max_size; /* 0 if unbounded */
    int64_t start_real_ns, start_mono_ns;
    int32_t pid, rank;
    char host[64];
    char role[32];
} tm_rec_header;

typedef struct tm_record {
    uint16_t type;
    int64_t t_ns; /* monotonic, as written */
    uint32_t len;
    const uint8_t *payload; /* owned by the reader, valid until the next call */
    uint64_t offset;        /* of the record in the file */
} tm_record;

/* Damage found while reading: where and what. */
typedef struct tm_damage {
    uint64_t offset;
    char what[96];
} tm_damage;

typedef struct tm_reader tm_reader;
/* Opens a record file for reading.  -EINVAL ("not a trainmon record file")
 * when the header is unusable. */
int tm_reader_open(tm_reader **out, const char *path);
const tm_rec_header *tm_reader_header(const tm_reader *r);
/* Next record in time order of writing: 1 and *rec filled, 0 at the end of
 * what is intact, negative errno on an I/O error.  Damage does not stop
 * reading: it is noted (tm_reader_damage) and the reader resynchronises. */
int tm_reader_next(tm_reader *r, tm_record *rec);
/* Picks up records appended since the end was reached (a live file). */
int tm_reader_refresh(tm_reader *r);
/* Damage seen so far (a torn last record is not damage: see torn_tail). */
size_t tm_reader_damage(const tm_reader *r, const tm_damage **list);
bool tm_reader_torn_tail(const tm_reader *r);
void tm_reader_close(tm_reader **r);

/* Decoding payloads of the known types.  Strings point into the record
 * payload (not NUL-terminated: use the lengths).  Return 0 or -EINVAL for
 * a payload that is too short or inconsistent. */
typedef struct tm_rec_series_def {
    uint32_t id;
    const char *name, *labels, *unit;
    uint16_t name_len, labels_len, unit_len;
} tm_rec_series_def;
int tm_rec_decode_series(const tm_record *rec, tm_rec_series_def *out);
/* Sample: *n pairs; ids and values are copied into the caller's arrays of
 * capacity cap; returns the number of pairs in the record. */
int tm_rec_decode_sample(const tm_record *rec, uint32_t *ids, double *values, size_t cap);
typedef struct tm_rec_event_def {
    const char *name, *json;
    uint16_t name_len;
    uint32_t json_len;
} tm_rec_event_def;
int tm_rec_decode_event(const tm_record *rec, tm_rec_event_def *out);
/* The rank a process.rank event says ({"rank":R,...}: a process that
 * learned it from its process group after its file was made), or -1: not
 * such an event, or R not an integer in [0, 2^24). */
int32_t tm_rec_event_rank(const tm_rec_event_def *e);

/* --- in-process records (python/trainmon)
 *
 * Written by the CPython extension into rank<R>.tmr / pid<P>.tmr (and, by
 * DataLoader workers, worker-r<R>-<pid>.tmr).  Fixed little-endian layouts,
 * docs/FORMAT.md "In-process records".  Tags and phase names are stored
 * inline (not interned with TM_REC_STRING): every record stands alone, so a
 * ring file that dropped its oldest blocks still names every tag it keeps.
 * Times are CLOCK_MONOTONIC ns; f64 fields are NAN when unavailable. */

enum tm_inproc_type {
    TM_REC_STEP = 16,    /* one training step: data wait and duration */
    TM_REC_CAPTURE = 17, /* an allocator/host memory sample, tagged */
    TM_REC_PHASE = 18,   /* enter/exit of trainmon.phase("name") */
    TM_REC_OOM = 19,     /* a CUDA out-of-memory event */
    TM_REC_WORKER = 20,  /* one batch fetched by a DataLoader worker */
    TM_REC_OPTSTEP = 21, /* one optimizer.step() */
    TM_REC_ANATOMY = 22, /* what one device's memory is made of (memory anatomy) */
    TM_REC_OOMSUM = 23,  /* what the allocator held at an OOM (from its snapshot) */
};

#define TM_INPROC_NAME_MAX 1024 /* tags, phase and file names are cut here */

enum {
    TM_STEP_ENDED_BY_STOP = 1u << 0, /* the loader was exhausted (end of epoch) */
    TM_STEP_ENDED_AT_EXIT = 1u << 1, /* closed when the process stopped recording */
    /* The training thread fetched no batch itself: another thread of the
     * process did (a background prefetcher), `batches` of them meanwhile,
     * and data_wait_ns is the loop's time from the step's start to its first
     * forward, its wait for them (docs/DIAGNOSIS.md "The step model"). */
    TM_STEP_FED_BY_THREAD = 1u << 2,
    /* The optimizer step was skipped: AMP's GradScaler found inf/NaN in the
     * gradients at the loss scale and did not call optimizer.step() (the
     * step ends at scaler.step(); docs/DIAGNOSIS.md "amp.skipped_steps"). */
    TM_STEP_SKIPPED = 1u << 3,
    /* A batch of the step came from a DataLoader iterator made for it: the
     * fetch began right after an iter() while the iterator of the batch
     * before had not ended (no StopIteration between): `next(iter(loader))`
     * in the loop, each iter() starting the workers again or resetting
     * persistent ones (docs/DIAGNOSIS.md "input.new_iterator"). */
    TM_STEP_NEW_ITER = 1u << 4,
};

/* What ended a step (the step model, docs/DIAGNOSIS.md "The step model"):
 * the optimizer step where there is one, else the backward pass, else the
 * DataLoader batch.  0: not recorded (files before the step model: loader). */
enum tm_step_boundary {
    TM_STEP_BY_LOADER = 1,
    TM_STEP_BY_BACKWARD = 2,
    TM_STEP_BY_OPTIMIZER = 3,
};

/* Which part of the job a step record is: a training step, or one eval
 * batch (fetched with grad disabled, or followed by no backward pass
 * before the next fetch), recorded apart and left out of training
 * numbers.  0: not recorded (files before the step model: train). */
enum tm_step_phase {
    TM_STEP_TRAIN = 1,
    TM_STEP_EVAL = 2,
};

typedef struct tm_inproc_step {
    uint64_t step;        /* 0, 1, ... in this process */
    int64_t start_ns;     /* entry into the DataLoader __next__ that began it */
    int64_t end_ns;       /* entry into the next one (or StopIteration, exit) */
    int64_t data_wait_ns; /* time inside that first __next__: waiting for data */
    uint32_t flags;       /* TM_STEP_* */
    /* Appended by the step model (absent in older files: boundary 0, the
     * counts and times -1).  For a step without a DataLoader batch,
     * data_wait_ns is prep_ns: the loop prepares its batches itself. */
    uint32_t boundary;     /* tm_step_boundary */
    uint32_t phase;        /* tm_step_phase */
    int32_t micro_batches; /* backward passes in the step; -1 unknown */
    int32_t batches;       /* DataLoader batches fetched for training in it; -1 unknown */
    int64_t prep_ns;       /* host time from its start to its first forward; -1 unknown */
    int64_t prep_cpu_ns;   /* the training thread's CPU time in that span; -1 unknown */
    /* Appended for handoff and stragglers (absent in older files: -1). */
    int64_t backward_ns;   /* wall time inside torch.autograd.backward in the step (a DDP
                            * rank's wait for the gradient all-reduce is in it); -1 unknown */
    int64_t wait_cpu_ns;   /* the training thread's CPU time inside __next__ of a
                            * multi-process DataLoader (receiving the batch: unpickling,
                            * rebuilding shared tensors); -1 unknown or no such loader */
    int64_t collective_ns; /* wall time inside blocking torch.distributed collectives called
                            * by the loop on the training thread; -1 unknown */
    /* Appended when the optimizer-step record was folded into the step it
     * ends (one record a step; absent in older files and in steps no
     * optimizer step ended: -1).  The optimizer step ran from opt_start_ns
     * to end_ns; readers (tm_run_optsteps) see it as an optimizer step of
     * its own, as a separate TM_REC_OPTSTEP record is seen. */
    int64_t opt_start_ns; /* > 0: the lead optimizer's step that ended this step began here */
    int32_t optimizer;    /* that optimizer's number (0, 1, ... in order of first step); -1 */
    /* Appended for the preparation the loop does after its forward
     * (absent in older files and in steps that did not measure it: -1).
     * Both are parts of prep_ns (and so of the data wait). */
    int64_t prep_fwd_ns; /* between the forward's return and the backward (or the next module
                          * call), summed over the micro-batches: nanoGPT's get_batch; -1
                          * not measured (a sample of the steps, every step once it is seen) */
    int64_t prep_opt_ns; /* from the last backward's end to the optimizer step: nanochat's
                          * next batch; -1 none */
    /* Appended for the model run without gradients before the step's
     * training forward (absent in older files and in steps without one:
     * -1).  Part of the step's time after its preparation (prep_ns ends
     * at the first forward of any kind). */
    int64_t nograd_ns;    /* from the step's first module call under torch.no_grad() or
                           * inference_mode (the model in train mode) to its first with grad
                           * enabled: an RL rollout's policy, sampling; -1 none or unknown */
    int32_t nograd_calls; /* module calls under it made at the first one's depth (the loop's
                           * own calls of its model: a rollout's steps); -1 */
} tm_inproc_step;

enum tm_capture_source {
    TM_CAPTURE_USER = 1,  /* Monitor.capture(tag) */
    TM_CAPTURE_STEP = 2,  /* automatic, at a step boundary (attach) */
    TM_CAPTURE_PHASE = 3, /* automatic, on a phase change (tag = phase) */
    TM_CAPTURE_OOM = 4,   /* at an out-of-memory event */
};

typedef struct tm_inproc_capture {
    uint32_t source; /* tm_capture_source */
    int32_t device;  /* CUDA device index, -1 if none */
    uint64_t step;   /* steps begun so far */
    /* bytes, from torch's allocator ("<family>.all.current"/".peak") */
    double allocated, reserved, peak_allocated, active, inactive_split, requested;
    double free_device, total_device; /* cudaMemGetInfo */
    double num_alloc_retries, num_ooms;
    double host_rss; /* bytes, this process */
    const char *tag; /* into the payload, not NUL-terminated */
    uint16_t tag_len;
} tm_inproc_capture;

enum { TM_PHASE_ENTER = 1, TM_PHASE_EXIT = 2 };

typedef struct tm_inproc_phase {
    uint32_t kind;  /* TM_PHASE_ENTER or TM_PHASE_EXIT */
    uint32_t depth; /* nesting depth, 1 = outermost */
    uint64_t step;
    const char *name;
    uint16_t name_len;
} tm_inproc_phase;

enum { TM_OOM_OBSERVER = 1, TM_OOM_EXCEPTION = 2 };

typedef struct tm_inproc_oom {
    int32_t device; /* -1 if unknown */
    uint32_t seq;   /* 1 for the first OOM seen by this process */
    uint64_t step;
    uint32_t source; /* TM_OOM_OBSERVER (torch >= 2.0) or TM_OOM_EXCEPTION (at exit) */
    double requested, free_device, total_device, allocated, reserved; /* bytes; NAN unknown */
    const char *phase; /* innermost phase, "" if none */
    uint16_t phase_len;
    const char *snapshot; /* file name of the allocator snapshot, "" if none */
    uint16_t snapshot_len;
} tm_inproc_oom;

typedef struct tm_inproc_worker {
    int32_t worker_id;
    uint32_t pid;
    uint64_t batch;           /* batches fetched by this worker so far, from 0 */
    int64_t start_ns, end_ns; /* the fetch (dataset __getitem__ calls and collate) */
    double cpu_s;             /* the worker's CPU time (user+system) so far */
    double rss_bytes;         /* its resident set after the batch */
    /* Appended (absent in older files: layout 0, cpu_start_s NAN). */
    uint32_t layout;    /* 2 from writers that know cpu_start_s, 3 set */
    double cpu_start_s; /* the worker's CPU time when the fetch began: the fetch's own CPU
                         * is cpu_s - cpu_start_s (the time between fetches is the handoff:
                         * pickling into the queue, waiting for the next index) */
    /* Appended (layout 3; 0 unknown): the worker set, the DataLoader
     * iterator that started the worker: its base seed (worker_info.seed
     * less the worker id), the same in every worker one iter() started and
     * drawn anew by the next.  Two loaders' workers, both ids 0..N-1, are
     * told apart by it. */
    uint64_t set;
} tm_inproc_worker;

typedef struct tm_inproc_optstep {
    uint64_t step; /* steps begun when it ran */
    int64_t start_ns, end_ns;
    uint32_t optimizer; /* 0 for the first optimizer seen in the process, ... */
} tm_inproc_optstep;

/* Why an anatomy record was written. */
enum tm_anatomy_reason {
    TM_ANATOMY_FIRST = 1,   /* the lead optimizer's first step(s) */
    TM_ANATOMY_CHANGED = 2, /* a later check found parameters or state changed */
};

/* Memory anatomy: what one device's memory held at a lead optimizer step,
 * one record per device the optimizer's tensors live on (docs/DIAGNOSIS.md
 * "Memory anatomy").  Bytes are counted once per storage (tied weights,
 * views, fused/foreach state); NAN when unknown. */
typedef struct tm_inproc_anatomy {
    uint64_t step;                    /* steps begun when it was measured */
    int32_t device;                   /* device index; -1 for the CPU or none */
    uint32_t optimizer;               /* the lead optimizer's number (tm_inproc_optstep) */
    double params;                    /* parameters the optimizer holds */
    double grads;                     /* their gradients after the step (set_to_none: 0) */
    double optim_state;               /* the optimizer's state tensors (moments, step counts) */
    double activations;               /* allocated at the start of the next backward pass beyond the
                                       * rest (CUDA only; NAN elsewhere or not measured) */
    double unknown;                   /* tensors found whose storage could not be told apart */
    double allocated, reserved;       /* the allocator's bytes then (NAN on the CPU) */
    double free_device, total_device; /* cudaMemGetInfo then (NAN on the CPU) */
    int64_t batch_size;               /* leading dimension of that step's batch; -1 unknown */
    uint32_t reason;                  /* tm_anatomy_reason */
    const char *kind;                 /* the device type: "cuda", "cpu", ... */
    uint16_t kind_len;
} tm_inproc_anatomy;

/* How far the OOM analysis got (tm_inproc_oomsum.status). */
enum tm_oomsum_status {
    TM_OOMSUM_OK = 1,          /* the whole snapshot was read */
    TM_OOMSUM_CUT = 2,         /* the walk stopped at its block bound: totals are lower bounds */
    TM_OOMSUM_NO_SNAPSHOT = 3, /* the snapshot could not be taken (why says why) */
};
/* The allocator pool a request is served from (CUDACachingAllocator:
 * requests <= 1 MiB from small segments, larger ones from large). */
enum tm_oomsum_pool { TM_OOMSUM_SMALL = 1, TM_OOMSUM_LARGE = 2 };
#define TM_OOMSUM_SITES 5

/* The OOM summary: what the allocator held on the OOM's device, read from
 * the snapshot taken at that OOM (docs/DIAGNOSIS.md "gpu_mem.oom").  One
 * per OOM record, joined to it by the file it is in and seq.  Bytes are
 * NAN where unknown; the live_* split is NAN (and live_unknown the whole)
 * when no optimizer was known.  site<k> is "file:line:function" of the
 * innermost user frame of live blocks, site<k>_bytes their live bytes
 * ("" and NAN past the sites found). */
typedef struct tm_inproc_oomsum {
    uint32_t seq;        /* the OOM record's seq */
    int32_t device;      /* -1 if unknown */
    uint64_t step;       /* steps begun then */
    uint32_t status;     /* tm_oomsum_status */
    uint32_t pool;       /* tm_oomsum_pool of the request; 0 unknown */
    double requested;    /* the failed request */
    double free_device;  /* cudaMemGetInfo's free then */
    double largest_free; /* the largest inactive block in the request's pool */
    double free_cached;  /* bytes in inactive blocks of that pool ... */
    double fragments;    /* ... and how many blocks they are */
    double expandable;   /* usable with expandable_segments:True (DIAGNOSIS.md) */
    double reserved;     /* segments' total size on the device */
    double live;         /* active_allocated bytes on the device */
    double live_params, live_grads, live_optim_state, live_other, live_unknown;
    double blocks; /* blocks walked */
    double site1_bytes, site2_bytes, site3_bytes, site4_bytes, site5_bytes;
    const char *why; /* why status is not OK, or "" */
    uint16_t why_len;
    const char *site1, *site2, *site3, *site4, *site5;
    uint16_t site1_len, site2_len, site3_len, site4_len, site5_len;
} tm_inproc_oomsum;

/* Encoders: write the payload into buf (cap bytes) and return its length,
 * or -ENOSPC when it does not fit.  Names longer than TM_INPROC_NAME_MAX
 * are cut.  Decoders: 0, or -EINVAL for a payload of another type, too short
 * or inconsistent; strings point into rec->payload. */
int tm_inproc_encode_step(const tm_inproc_step *s, void *buf, size_t cap);
int tm_inproc_encode_capture(const tm_inproc_capture *c, void *buf, size_t cap);
int tm_inproc_encode_phase(const tm_inproc_phase *p, void *buf, size_t cap);
int tm_inproc_encode_oom(const tm_inproc_oom *o, void *buf, size_t cap);
int tm_inproc_encode_worker(const tm_inproc_worker *w, void *buf, size_t cap);
int tm_inproc_encode_optstep(const tm_inproc_optstep *o, void *buf, size_t cap);
int tm_inproc_encode_anatomy(const tm_inproc_anatomy *a, void *buf, size_t cap);
int tm_inproc_encode_oomsum(const tm_inproc_oomsum *o, void *buf, size_t cap);
int tm_inproc_decode_step(const tm_record *rec, tm_inproc_step *out);
int tm_inproc_decode_capture(const tm_record *rec, tm_inproc_capture *out);
int tm_inproc_decode_phase(const tm_record *rec, tm_inproc_phase *out);
int tm_inproc_decode_oom(const tm_record *rec, tm_inproc_oom *out);
int tm_inproc_decode_worker(const tm_record *rec, tm_inproc_worker *out);
int tm_inproc_decode_optstep(const tm_record *rec, tm_inproc_optstep *out);
int tm_inproc_decode_anatomy(const tm_record *rec, tm_inproc_anatomy *out);
int tm_inproc_decode_oomsum(const tm_record *rec, tm_inproc_oomsum *out);

/* Whether type is one of the in-process record types above. */
bool tm_inproc_is(uint16_t type);

/* Formats an in-process record for `trainmon dump`: the part of the line
 * after the time, as text ("step 12 dur=0.105s wait=0.021s ...") or, with
 * json, as the rest of a JSON object ("\"type\":\"step\",...}").  No
 * newline.  Returns the length written (NUL-terminated), -ENOENT for a type
 * that is not in-process, -EINVAL for an undecodable payload, -ENOSPC when
 * cap is too small (TM_INPROC_FORMAT_MAX bytes always suffice). */
#define TM_INPROC_FORMAT_MAX 16384
int tm_inproc_format(const tm_record *rec, bool json, char *buf, size_t cap);

/* The schema: every in-process record layout described once, as a table of
 * fields (src/lib/inproc_schema.h).  The encoders and decoders above, the
 * formatter (`trainmon dump`, `dump --json`), `trainmon export --format
 * jsonl` and Python's read_records and Monitor all walk it, so a field has
 * one name everywhere.  docs/FORMAT.md "In-process records". */
typedef enum tm_inproc_ctype {
    TM_INPROC_U32 = 1,
    TM_INPROC_I32,
    TM_INPROC_U64,
    TM_INPROC_I64,
    TM_INPROC_F64, /* NAN: unavailable */
    TM_INPROC_STR, /* u16 length at offset; the bytes follow the fixed part */
} tm_inproc_ctype;

typedef struct tm_inproc_field {
    const char *key; /* its one name: "allocated", "start_ns", ... */
    tm_inproc_ctype type;
    uint16_t offset;          /* in the payload (a string: of its u16 length) */
    const char *unit;         /* "ns", "bytes", "count", "" */
    const char *const *names; /* an enum's value names by value, NULL-terminated
                                 (NULL: not an enum; a value past the end is
                                 "unknown") */
    size_t member;            /* offsetof in the tm_inproc_* struct */
    size_t len_member;        /* a string's uint16_t length member there */
} tm_inproc_field;

/* Any decoded in-process record; the member is the one of its type. */
typedef union tm_inproc_any {
    tm_inproc_step step;
    tm_inproc_capture capture;
    tm_inproc_phase phase;
    tm_inproc_oom oom;
    tm_inproc_worker worker;
    tm_inproc_optstep optstep;
    tm_inproc_anatomy anatomy;
    tm_inproc_oomsum oomsum;
} tm_inproc_any;

/* A field's value; strings point where the decoded record's do. */
typedef struct tm_inproc_value {
    tm_inproc_ctype type;
    uint64_t u;    /* U32, U64 */
    int64_t i;     /* I32, I64 */
    double f;      /* F64 */
    const char *s; /* STR: s[0..len), not NUL-terminated */
    size_t len;
    bool absent; /* a field of a newer layout in a record of an older one
                    (dump and jsonl leave it out, read_records gives -1) */
} tm_inproc_value;

#define TM_INPROC_FIELDS_MAX 32 /* no type has more stored fields */

/* The stored fields of type in schema order (*out valid for the life of
 * the program); 0 for a type that is not in-process. */
size_t tm_inproc_fields(uint16_t type, const tm_inproc_field **out);
/* The type's name ("step", "capture", "phase", "oom", "worker",
 * "optimizer_step", "anatomy", "oom_summary": `type` in dump --json, `kind` in export jsonl and in
 * read_records), or NULL. */
const char *tm_inproc_type_name(uint16_t type);
/* Generic forms of the encoders and decoders above, by type. */
int tm_inproc_encode(uint16_t type, const tm_inproc_any *rec, void *buf, size_t cap);
int tm_inproc_decode(const tm_record *rec, tm_inproc_any *out);
/* The value of field f of a decoded record of f's type. */
tm_inproc_value tm_inproc_get(const tm_inproc_field *f, const tm_inproc_any *rec);
/* Writes a decoded record's fields as JSON object members, each with its
 * leading comma (",\"step\":12,\"duration_s\":0.1..."), NUL-terminated:
 * what dump --json prints after "type" and export jsonl after its run-level
 * keys.  Unavailable values are left out.  Returns the length, -ENOENT for
 * a type that is not in-process, -ENOSPC when cap is too small
 * (TM_INPROC_FORMAT_MAX always suffices). */
int tm_inproc_json(uint16_t type, const tm_inproc_any *rec, char *buf, size_t cap);

/* (a_ns - b_ns) in seconds, saturating: clocks read from a file may be
 * crafted, and their difference must stay bounded (dump, export). */
double tm_clock_diff_s(int64_t a_ns, int64_t b_ns);

/* --- one step accounting (steps.c)
 *
 * What a step's duration and data wait are, for every consumer: the report,
 * /metrics, the run.* alert inputs, the status line and on_threshold.  A
 * step counts when it is complete (not TM_STEP_ENDED_AT_EXIT, positive
 * duration, not an eval batch); its wait is capped at its duration; the first TM_STEP_WARMUP
 * complete steps of a process are warm-up, counted as steps but left out of
 * the data-wait fraction unless they are all there is. */
#define TM_STEP_WARMUP 1

/* The training thread's CPU time in a step's batch preparation
 * (prep_cpu_ns) is a system call to read (0.7-2 us on a VM), so the agent
 * reads it on a systematic sample of the steps that grows sparser: step 1
 * and every 16th after it up to step 64, every 64th up to step 1024, every
 * 256th after (steps 1, 17, 33, 49, 65, 129, ..., 1025, 1281, ...).  A
 * 40-step job has three read steps, a 1,000-step job 19; past step 64 the
 * reads cost 2 per 64 steps.  The CPU share is the ratio of the sums over
 * the read steps, each weighted by the steps it stands for, those since
 * the read before it (tm_prep_cpu_weight: 16 up to step 65, 64 up to step
 * 1025, 256 after), so a long job's late steps count as much as its early
 * ones, and the last read of a job that ends mid-interval no more than its
 * own. */
static inline unsigned tm_prep_cpu_every(uint64_t step)
{
    return step <= 64 ? 16u : step <= 1024 ? 64u : 256u;
}

/* Whether the agent reads the CPU clock around step's preparation. */
static inline bool tm_prep_cpu_due(uint64_t step)
{
    return step >= 1 && (step - 1) % tm_prep_cpu_every(step) == 0;
}

/* The steps a read step stands for: the interval that ends at it (step 1,
 * the first, stands for the first interval). */
static inline double tm_prep_cpu_weight(uint64_t step)
{
    return (double)tm_prep_cpu_every(step ? step - 1 : 0);
}

/* Whether a record file was written by a training process (a rank or a
 * plain Python process), not by the sampler or a DataLoader worker: the one
 * test the report, the live follower and the status line use. */
bool tm_rec_is_training(const tm_rec_header *h);

/* The duration and the capped data wait of s, in seconds; false (outputs
 * untouched) when s is not a complete step. */
bool tm_step_times(const tm_inproc_step *s, double *dur_s, double *wait_s);

/* Running totals of one process's steps (plain struct: copy, zero, merge). */
typedef struct tm_steptally {
    uint64_t steps;        /* complete steps, warm-up included */
    uint64_t warmup;       /* of which warm-up */
    uint64_t next_step;    /* highest step number seen + 1 */
    double step_s, wait_s; /* after warm-up: durations, capped waits */
    double warm_step_s, warm_wait_s;
    uint64_t eval_steps; /* complete eval batches (phase TM_STEP_EVAL) */
    double eval_s;       /* their summed duration */
    /* After warm-up, the steps whose data wait is batch preparation in the
     * main process (no DataLoader batch, prep_ns measured), and the training
     * thread's CPU time in it where measured (prep_cpu_known_s: their prep),
     * these two weighted by tm_prep_cpu_weight: a ratio of them is a share. */
    uint64_t prep_steps;
    double prep_s, prep_cpu_s, prep_cpu_known_s;
    /* Of prep_s: the part between the forward and the backward pass on the
     * steps that measured it (prep_fwd_ns >= 0) and those steps' prep
     * (prep_fwd_known_s: a ratio of the two is a share), each weighted by
     * the steps it stands for, those since the step that measured it
     * before (prep_fwd_last: its number; a sample of the steps, or every
     * step), and the part from the last backward pass to the optimizer step
     * (prep_opt_ns, every step). */
    double prep_fwd_s, prep_fwd_known_s, prep_opt_s;
    uint64_t prep_fwd_last;
    /* After warm-up, the training thread's CPU time inside the waits of a
     * multi-process DataLoader (receiving batches) and the waits it was
     * measured over. */
    double recv_cpu_s, recv_known_s;
    /* After warm-up, the steps fed by a background thread
     * (TM_STEP_FED_BY_THREAD). */
    uint64_t fed_steps;
    /* All complete steps whose optimizer step GradScaler skipped
     * (TM_STEP_SKIPPED), warm-up included; the skipped steps in a row that
     * end the steps added so far, and the highest skipped step number + 1
     * (0: none), both of the process whose steps ended last when merged (a
     * job resumed in the same run after it died skipping is judged by the
     * resumed process); the longest run of them (merged: the largest); the
     * skipped steps' summed duration (s); the end of the latest step added
     * (ns). */
    uint64_t skipped_steps, skip_run_end, skip_run_max, skip_last;
    double skipped_s;
    int64_t last_end_ns;
    /* After warm-up, the steps that ran the model under no_grad before
     * their training forward (nograd_calls > 0: an RL rollout, sampling),
     * that time (each capped at its step's duration, net of its data wait)
     * and the calls made in it; the eval batches' time between judged
     * steps (of eval_s: the loop's, not an eval before the job trained or
     * after it ended; eval_pend_s: since the last judged step). */
    uint64_t nograd_steps, nograd_calls;
    double nograd_s, eval_loop_s, eval_pend_s;
} tm_steptally;

void tm_steptally_init(tm_steptally *t);
/* Adds one step record; true when it counted as a complete (training)
 * step.  An eval batch is counted in eval_steps / eval_s only. */
bool tm_steptally_add(tm_steptally *t, const tm_inproc_step *s);
/* Share of step time spent waiting for data over the judged steps; NAN
 * when no complete step has been seen. */
double tm_steptally_wait_fraction(const tm_steptally *t);
/* Mean step time and mean data wait per judged step (s); NAN when none. */
double tm_steptally_step_mean(const tm_steptally *t);
double tm_steptally_wait_mean(const tm_steptally *t);
/* The process's step total: with ring (the file may have dropped its
 * oldest records) the highest step number + 1 when that is larger. */
uint64_t tm_steptally_total(const tm_steptally *t, bool ring);
/* Adds from's totals to into's (ranks of one job, all together). */
void tm_steptally_merge(tm_steptally *into, const tm_steptally *from);

/* The last steps, for windowed values (on_threshold's window, alerts). */
#define TM_STEPWIN_MAX 256
typedef struct tm_stepwin {
    uint64_t n; /* steps added so far */
    double dur[TM_STEPWIN_MAX], wait[TM_STEPWIN_MAX];
} tm_stepwin;
/* Adds one complete step (from tm_step_times); the wait is capped again. */
void tm_stepwin_add(tm_stepwin *w, double dur_s, double wait_s);
/* Sums over the last min(last, TM_STEPWIN_MAX, added) steps; returns how
 * many were summed. */
size_t tm_stepwin_sum(const tm_stepwin *w, size_t last, double *dur_s, double *wait_s);

/* --- the live-run follower (follow.c)
 *
 * Follows a run directory (or a directory of run directories) while its
 * processes write: one reader per record file kept open, and each
 * tm_follow_poll reads only what was appended since the last one.  It is
 * how `trainmon serve --runs` (/metrics) and `trainmon run` (the status
 * line and the run.* alert inputs) see live runs, so that they count the
 * same steps and the same data wait as the report (steps.c).
 *
 * Per pass: the directory is listed; a training process's record file
 * (tm_rec_is_training on its header) is read up to max_records_per_file
 * records (a long file is caught up over several passes); a file replaced
 * by another of the same name (another device/inode: a restarted process)
 * starts again from nothing; a file that went away is dropped with its
 * state.  Other record files (system.tmr, DataLoader workers') are opened
 * once for their header (the host) and then only their mtime counts.
 * With runs_dir, each subdirectory is a run, followed while one of its
 * *.tmr files changed in the last TM_FOLLOW_LIVE_S seconds (at most
 * TM_FOLLOW_MAX_RUNS runs); without, dir itself is the one run, always
 * followed.  At most TM_FOLLOW_MAX_FILES record files per run. */
#define TM_FOLLOW_LIVE_S 900.0
#define TM_FOLLOW_MAX_RUNS 64
#define TM_FOLLOW_MAX_FILES 1024
/* Steps the windowed values of `trainmon run` (status line, run.* alerts)
 * are taken over: the last this many judged steps of each process. */
#define TM_FOLLOW_WINDOW 100

/* What one training process's record file says so far.  NAN: unavailable. */
/* One device's memory anatomy as /metrics shows it: bytes of parameters,
 * gradients, optimizer state, activations and unknown (NAN: not measured). */
#define TM_FOLLOW_ANAT_MAX 4
enum { TM_ANAT_PARAMS, TM_ANAT_GRADS, TM_ANAT_STATE, TM_ANAT_ACT, TM_ANAT_UNKNOWN, TM_ANAT_N };
typedef struct tm_anat_parts {
    char device[40]; /* "cuda:0", "cpu" (tm_anat_device: letters, digits, '_', ':') */
    double bytes[TM_ANAT_N];
} tm_anat_parts;

/* What stopped a training thread inside its steps, from the agent's
 * events (stops.c): torch.compile's compilations, checkpoint saves the
 * loop waited for, the garbage collector's pauses (those written as
 * events: every full one, and young ones of 1 ms and more, at most 50 a
 * second of each). */
enum { TM_STOP_COMPILE, TM_STOP_CHECKPOINT, TM_STOP_GC, TM_STOP_KINDS };

typedef struct tm_follow_rank {
    char label[32];        /* the rank ("0"), or the role outside a distributed job ("pid42") */
    char file[256];        /* the record file's name in its run directory */
    char host[64];         /* from the header */
    int32_t rank;          /* from the header, -1 if none */
    bool ring;             /* the header has a max_size: oldest records may be gone */
    uint64_t step_records; /* step records read (complete or not) */
    tm_steptally tally;    /* every step read (steps.c) */
    tm_stepwin win;        /* the judged steps (after warm-up), newest last */
    double allocated, reserved, peak_allocated, total_device; /* last capture, bytes */
    uint64_t ooms;                                            /* OOM records read */
    int64_t last_t_ns;    /* monotonic time of the newest record read (writer's clock); 0 none */
    int64_t last_real_ns; /* the same in wall-clock ns since the epoch (header clock bases) */
    uint64_t records;     /* records read */
    int64_t first_step_real_ns; /* wall clock of the first step record read; 0 none */
    /* Damage the reader found in the file (tm_reader_damage): how many
     * places, and the last one's offset and description; 0 when intact. */
    size_t damage;
    uint64_t damage_offset;
    char damage_what[96];
    /* The latest memory anatomy of each device (TM_REC_ANATOMY), the first
     * TM_FOLLOW_ANAT_MAX devices seen. */
    size_t nanat;
    tm_anat_parts anat[TM_FOLLOW_ANAT_MAX];
    /* The training thread's stops (TM_STOP_*): how many and their seconds,
     * each once (a pause inside a compilation or save is that one's). */
    uint64_t stops[TM_STOP_KINDS];
    double stop_s[TM_STOP_KINDS];
} tm_follow_rank;

typedef struct tm_follow_run {
    const char *name;      /* the run directory's base name */
    const char *host;      /* from the first header that names one; "" unknown */
    double newest_mtime_s; /* wall-clock seconds of the newest *.tmr change; 0: none */
    size_t nranks;         /* training processes whose header was read */
} tm_follow_run;

typedef struct tm_follow tm_follow;

/* Nothing is read until the first poll.  -ENOMEM. */
int tm_follow_open(tm_follow **out, const char *dir, bool runs_dir);
/* One pass (see above).  0, or a negative errno when dir cannot be listed
 * (the state of the last pass is kept). */
int tm_follow_poll(tm_follow *f, size_t max_records_per_file);
/* Runs and their ranks as of the last poll; pointers stay valid until the
 * next poll or close.  tm_follow_run_at(f, i) is NULL past the end, and so
 * is tm_follow_rank_at past the run's nranks. */
size_t tm_follow_nruns(const tm_follow *f);
const tm_follow_run *tm_follow_run_at(const tm_follow *f, size_t i);
const tm_follow_rank *tm_follow_rank_at(const tm_follow *f, size_t run, size_t j);
/* Whether runs or files were left out by the caps (the caller says so once). */
bool tm_follow_truncated(const tm_follow *f);
void tm_follow_close(tm_follow **f);

/* Adds one step record to a process's tally and, when it is a judged
 * complete step (past warm-up), to its window: the one way the follower
 * and the in-process thresholds account a step.  True when it counted.
 * Windowed values (tm_stepwin_sum over w) are thus never the warm-up's: a
 * live alert or threshold must not fire on workers starting; they are
 * unavailable until the first step after it. */
bool tm_follow_step(tm_steptally *t, tm_stepwin *w, const tm_inproc_step *s);

/* --- the CPUs a job may use (machine.c)
 *
 * Its affinity (Cpus_allowed_list of /proc/PID/status) and its cgroup's
 * CPU quota (v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, the
 * tightest along its cgroup path), read under the proc and sys roots.
 * `trainmon run` writes them into meta.json ("online_cpus",
 * "affinity_cpus", "cpu_quota", "usable_cpus"); the report reads them. */
typedef struct tm_machine {
    int online;    /* CPUs online on the host; -1 unknown */
    int affinity;  /* CPUs in the job's affinity mask; -1 unknown */
    double quota;  /* cgroup quota in CPUs (1.5: 150 ms per 100 ms); NAN none or unknown */
    double usable; /* min(affinity (else online), quota); NAN nothing known */
} tm_machine;

/* Reads what is known of pid's CPUs (0: this process).  Fields that
 * cannot be read stay unknown; never fails. */
void tm_machine_read(tm_machine *m, pid_t pid);

/* --- runs: record files on one timeline, and what they mean
 *
 * A run is one or more run directories (several hosts' directories given
 * together merge on wall-clock time).  tm_run_load reads every *.tmr in
 * them once and keeps what they hold in compact arrays.  All times below
 * are wall-clock ns since the epoch: a record's monotonic time plus its
 * file's start_real_ns - start_mono_ns (in-process start_ns/end_ns fields
 * are converted the same way).  Arrays are grouped by source (record file)
 * in load order, each source's records in order of writing; `source` is an
 * index into tm_run_sources.  Every pointer handed out stays valid until
 * tm_run_free.  docs/DIAGNOSIS.md describes the analysis. */

typedef struct tm_run tm_run;
/* (tm_text is defined with the Prometheus exposition below.) */
typedef struct tm_text tm_text;

typedef struct tm_run_source {
    const char *path; /* DIR/FILE, DIR as given */
    const char *dir;  /* the run directory it came from, as given */
    const char *file; /* base name: "system.tmr", "rank0.tmr", ... */
    tm_rec_header header;
    int64_t mono_to_wall_ns;   /* wall = monotonic + this */
    int64_t first_ns, last_ns; /* wall clock of its first and last record; 0: none */
    uint64_t records;          /* records read */
    size_t ndamage;            /* damaged places skipped */
    bool torn_tail;            /* a torn last record was ignored */
    /* > 0: an inference loop (the process never trained): its DataLoader
     * batches, recorded as eval, were read as this many loader-ended
     * training steps (docs/DIAGNOSIS.md "Inference loops") */
    uint64_t inference;
} tm_run_source;

/* One series of one source.  t_ns and v hold n points; series sampled
 * together may point to the same t_ns array. */
typedef struct tm_run_series {
    uint32_t source;
    const char *name, *labels, *unit; /* NUL-terminated; labels "" if none */
    size_t n;
    const int64_t *t_ns;
    const double *v;
} tm_run_series;

typedef struct tm_run_event {
    uint32_t source;
    int64_t t_ns;
    const char *name;
    const char *json; /* the details as written ("" if none; not validated) */
} tm_run_event;

/* In-process records: the decoded tm_inproc_* structs, times in wall clock,
 * strings (tag, name, phase, snapshot) NUL-terminated in the run's memory.
 * rank is the source header's rank (-1 if none). */
typedef struct tm_run_step {
    uint32_t source;
    int32_t rank;
    tm_inproc_step s;
} tm_run_step;
typedef struct tm_run_capture {
    uint32_t source;
    int32_t rank;
    int64_t t_ns;
    tm_inproc_capture c;
} tm_run_capture;
typedef struct tm_run_phase {
    uint32_t source;
    int32_t rank;
    int64_t t_ns;
    tm_inproc_phase p;
} tm_run_phase;
typedef struct tm_run_oom {
    uint32_t source;
    int32_t rank;
    int64_t t_ns;
    tm_inproc_oom o;
} tm_run_oom;
typedef struct tm_run_oomsum {
    uint32_t source;
    int32_t rank;
    int64_t t_ns;
    tm_inproc_oomsum o;
} tm_run_oomsum;
typedef struct tm_run_worker {
    uint32_t source;
    int32_t rank;
    tm_inproc_worker w;
} tm_run_worker;
typedef struct tm_run_optstep {
    uint32_t source;
    int32_t rank;
    tm_inproc_optstep o;
} tm_run_optstep;
typedef struct tm_run_anatomy {
    uint32_t source;
    int32_t rank;
    int64_t t_ns;
    tm_inproc_anatomy a;
} tm_run_anatomy;

/* Loads the run directories dirs[0..n).  Files that are not record files
 * and damaged places are skipped and noted (tm_run_notes); what is intact
 * is kept.  Fails, with one line in tm_last_error(), when a directory does
 * not exist ("DIR: No such file or directory") or when no record file
 * could be read in any of them ("DIR: no trainmon record files"). */
int tm_run_load(tm_run **out, const char *const *dirs, size_t n);
void tm_run_free(tm_run **r);

/* One line per damaged file or skipped file, without a prefix:
 * "RUN/rank0.tmr: damaged record at offset N, skipped". */
size_t tm_run_notes(const tm_run *r, const char *const **lines);

/* The directories, and each one's meta.json text (NULL when absent). */
size_t tm_run_dirs(const tm_run *r, const char *const **dirs);
const char *tm_run_meta(const tm_run *r, size_t dir);

/* Earliest and latest record time over all sources (0, 0 if none). */
void tm_run_span(const tm_run *r, int64_t *start_ns, int64_t *end_ns);

size_t tm_run_sources(const tm_run *r, const tm_run_source **list);
size_t tm_run_series_list(const tm_run *r, const tm_run_series **list);
size_t tm_run_events(const tm_run *r, const tm_run_event **list);
size_t tm_run_steps(const tm_run *r, const tm_run_step **list);
size_t tm_run_captures(const tm_run *r, const tm_run_capture **list);
size_t tm_run_phases(const tm_run *r, const tm_run_phase **list);
size_t tm_run_ooms(const tm_run *r, const tm_run_oom **list);
size_t tm_run_workers(const tm_run *r, const tm_run_worker **list);
size_t tm_run_optsteps(const tm_run *r, const tm_run_optstep **list);
size_t tm_run_anatomies(const tm_run *r, const tm_run_anatomy **list);
size_t tm_run_oomsums(const tm_run *r, const tm_run_oomsum **list);
/* The OOM summary of the OOM record o of source (the first with its seq),
 * or NULL. */
const tm_inproc_oomsum *tm_run_oomsum_of(const tm_run *r, uint32_t source, uint32_t seq);

/* Label value of key in a "k=v,k2=v2" label text, copied into buf (cap
 * bytes).  false when the key is absent. */
bool tm_labels_get(const char *labels, const char *key, char *buf, size_t cap);

/* What a flight-recorder ring dropped (ringinfo.c).  A ring file
 * (--max-size; its header's max_size > 0) keeps its newest blocks only.
 * Steps are numbered from 0 in each process, so a ring whose first kept
 * step record is number N dropped N steps, and the process's true total is
 * tm_steptally_total(t, true): its highest step number + 1. */
typedef struct tm_ringinfo {
    uint32_t source;        /* index into tm_run_sources (sums: the count of ring files) */
    bool ring;              /* a ring (sums: any training file is one) */
    uint64_t steps_kept;    /* complete steps in the file (tm_steptally.steps) */
    uint64_t steps_total;   /* tm_steptally_total(t, ring) */
    uint64_t first_step;    /* lowest step number kept; 0 when there is none */
    uint64_t steps_dropped; /* ring: first_step; else 0 */
    int64_t kept_from_ns;   /* wall clock of the first record kept; 0 if none.  Sums:
                             * the latest over files that dropped steps, from which
                             * on every process's data is there */
} tm_ringinfo;
/* One entry per training record file (tm_rec_is_training), in source
 * order, into out[0..cap); returns how many there are (may exceed cap). */
size_t tm_run_ringinfo(const tm_run *r, tm_ringinfo *out, size_t cap);
/* The entries added up over the run's training files (for the report and
 * /metrics); true when at least one of them is a ring. */
bool tm_run_ring_summary(const tm_run *r, tm_ringinfo *sum);

/* Findings (docs/DIAGNOSIS.md): stable ids, each with the numbers it was
 * decided on.  Severity and confidence are ordered enums (a larger value
 * is more severe, more certain); their names below are the words the text,
 * JSON and HTML reports print. */
enum tm_severity { TM_SEV_INFO, TM_SEV_LOW, TM_SEV_MEDIUM, TM_SEV_HIGH };
enum tm_confidence { TM_CONF_LOW, TM_CONF_MEDIUM, TM_CONF_HIGH };
/* "info", "low", "medium", "high"; "?" for a value outside the enum. */
const char *tm_severity_name(enum tm_severity s);
/* "low", "medium", "high"; "?" for a value outside the enum. */
const char *tm_confidence_name(enum tm_confidence c);

typedef struct tm_finding {
    const char *id; /* "input.disk_bound", "gpu_mem.oom", ... */
    enum tm_severity severity;
    enum tm_confidence confidence; /* how much data backs it */
    int32_t rank;                  /* the rank concerned, -1 for the whole run */
    const char *title;             /* one line */
    const char *evidence;          /* a JSON object text of the numbers */
    const char *advice;
} tm_finding;

typedef struct tm_analysis tm_analysis;
/* Applies every rule of docs/DIAGNOSIS.md to the run.  -ENOMEM only. */
int tm_analyze(const tm_run *r, tm_analysis **out);
/* Findings, most severe first.  Valid until tm_analysis_free. */
size_t tm_analysis_findings(const tm_analysis *a, const tm_finding **list);
/* The first finding with this id, NULL if none. */
const tm_finding *tm_analysis_find(const tm_analysis *a, const char *id);
void tm_analysis_free(tm_analysis **a);

/* The report of `trainmon report`: text for people, or (json) one JSON
 * object {"run","summary","findings","damage"} (docs/DIAGNOSIS.md).  a ==
 * NULL analyses the run first.  0, or the tm_text's error. */
int tm_report_write(const tm_run *r, const tm_analysis *a, tm_text *out, bool json);
/* The report as one self-contained HTML page (`trainmon report --html`):
 * the run, the summary, the findings with their evidence as tables, and
 * inline SVG charts on one time axis, each line downsampled to at most
 * about 1,000 points.  No scripts, fonts or links to fetch.  a == NULL
 * analyses the run first.  0, or the tm_text's error. */
int tm_report_html(const tm_run *r, const tm_analysis *a, tm_text *out);

/* ------------------------------------------------- Prometheus exposition */

/* The text of `trainmon serve` (docs/METRICS.md lists every family): the
 * Prometheus text format 0.0.4, one HELP and TYPE line per family, label
 * values escaped (\\ \" \n), base units, unavailable values left out.
 * Writers append to a tm_text and return 0, -E2BIG when the text's cap
 * is reached or -ENOMEM; after a failure the text keeps failing (the error
 * is sticky until tm_text_reset) so that a caller may check once at the
 * end. */

typedef struct tm_text tm_text;
/* A growable text of at most cap bytes.  NULL when out of memory. */
tm_text *tm_text_new(size_t cap);
/* The text so far, NUL-terminated, owned by t and valid until the next
 * append, reset or free.  *len (if len != NULL) gets its length. */
const char *tm_text_data(const tm_text *t, size_t *len);
/* 0, or the first error of an append since the last reset. */
int tm_text_error(const tm_text *t);
/* Empties the text (keeping its memory) and clears the error. */
void tm_text_reset(tm_text *t);
void tm_text_free(tm_text **t);

/* Disk counters in the units and names of node_exporter's diskstats
 * collector, prefixed trainmon_disk_.  The kernel's millisecond fields are
 * 32-bit and wrap after 49.7 days, while a Prometheus counter may only go
 * down on a real reset: the accumulator keeps a 64-bit value per device,
 * adding the 32-bit difference (modulo 2^32) at each update.  A device
 * whose 64-bit counters went down (removed and added again) restarts from
 * its current values, which Prometheus sees as a counter reset.  Devices
 * absent from an update are forgotten.  At most 4096 devices. */
typedef struct tm_prom_disks tm_prom_disks;
int tm_prom_disks_new(tm_prom_disks **out);
/* raw: the counters of one /proc/diskstats sample (tm_disk_last_raw). */
int tm_prom_disks_update(tm_prom_disks *d, const tm_diskstat *raw, size_t n);
int tm_prom_write_disks(tm_text *t, const tm_prom_disks *d);
void tm_prom_disks_free(tm_prom_disks **d);

/* Pressure stall totals as counters in seconds (node_exporter's
 * node_pressure_* names with the trainmon_ prefix), system-wide. */
int tm_prom_write_pressure(tm_text *t, const tm_pressure_stats *ps);

/* GPU gauges, labelled gpu="<index>",uuid="<uuid>"; per-process memory
 * adds pid="<pid>".  Lost GPUs export only trainmon_gpu_lost 1. */
int tm_prom_write_gpus(tm_text *t, const tm_gpu_stats *g, size_t n);

/* One training process of a live run: what its record file says so far.
 * Counters are sums over the records read; NAN (or steps_valid false)
 * when the file has none of them. */
typedef struct tm_prom_rank {
    char rank[32];             /* label value: "0", "1", or the role ("pid42") */
    uint64_t steps;            /* tm_steptally_total (ring: highest step number + 1) */
    double step_seconds;       /* sum of complete steps' durations */
    double data_wait_seconds;  /* sum of their data waits, each capped at its step */
    double data_wait_fraction; /* tm_steptally_wait_fraction; NAN none */
    double allocated_bytes, reserved_bytes, peak_allocated_bytes; /* latest capture */
    uint64_t ooms; /* out-of-memory events recorded */
    /* Ring files (--max-size): steps the ring dropped before they were read
     * (the step total less the complete steps seen) and the wall-clock time
     * (s since the epoch) the kept steps start at; NAN for other files. */
    double ring_steps_dropped, ring_kept_from_s;
    bool steps_valid, memory_valid;
    size_t nanat; /* the memory anatomy of each device (tm_follow_rank) */
    tm_anat_parts anat[TM_FOLLOW_ANAT_MAX];
    uint64_t stops[TM_STOP_KINDS]; /* the training thread's stops (tm_follow_rank) */
    double stop_s[TM_STOP_KINDS];
} tm_prom_rank;

/* Fills *out from what a follower knows of one training process (steps
 * through the one step accounting). */
void tm_prom_rank_set(tm_prom_rank *out, const tm_follow_rank *k);

typedef struct tm_prom_run {
    const char *name;         /* the run directory's base name */
    const char *host;         /* from the record headers, "" if unknown */
    double last_record_age_s; /* seconds since a record file last changed */
    size_t nranks;
    const tm_prom_rank *ranks;
} tm_prom_run;

int tm_prom_write_runs(tm_text *t, const tm_prom_run *runs, size_t n);

/* The exporter's own series. */
typedef struct tm_prom_self {
    double collect_s;         /* wall seconds the last collection took; NAN: left out */
    uint64_t collects;        /* collections since start */
    double collect_cpu_s;     /* CPU seconds spent collecting since start; NAN: left out */
    const char *const *names; /* collectors ... */
    const bool *success;      /* ... and whether each one's last sample worked */
    size_t n;
} tm_prom_self;

/* trainmon_exporter_build_info{version} 1, trainmon_scrape_duration_seconds,
 * trainmon_exporter_collections_total, trainmon_exporter_collect_cpu_seconds_total
 * and trainmon_scrape_collector_success{collector}. */
int tm_prom_write_exporter(tm_text *t, const tm_prom_self *self);

/* Writes one label value with \\, \" and \n escaped (no quotes added). */
int tm_prom_escape(tm_text *t, const char *s);

/* --- node health for schedulers (GET /health of `trainmon serve`)
 *
 * The verdict is "degraded" when any limit is crossed, with one reason
 * each; docs/METRICS.md documents the rules.  A limit of NAN is off. */
typedef struct tm_health_limits {
    double disk_util_pct;  /* a disk is saturated when %util >= this ... */
    double disk_await_ms;  /* ... and r_await or w_await > this (both) */
    double gpu_mem_ratio;  /* GPU memory used / total > this: nearly full */
    double io_full_avg10;  /* /proc/pressure/io full avg10 > this (percent) */
    double mem_full_avg10; /* /proc/pressure/memory full avg10 > this */
} tm_health_limits;

/* 90 %, 50 ms, 0.95, 20 %, 10 %. */
void tm_health_limits_default(tm_health_limits *l);

/* Writes {"status":"ok"|"degraded","reasons":[...],"disks":[...],
 * "gpus":[...],"pressure":{...}} for the given numbers (rates over the
 * health window; ps may be NULL).  *degraded (if not NULL) gets the
 * verdict. */
int tm_health_write_json(tm_text *t, const tm_health_limits *lim, const tm_diskrate *rates,
                         size_t nrates, const tm_pressure_stats *ps, const tm_gpu_stats *gpus,
                         size_t ngpus, bool *degraded);

/* A damaged record file of a live run (serve --runs): /health names it
 * under "damaged_files" so that one bad file is found without a look at
 * the exporter's log.  It does not make the node "degraded": the rest of
 * the file and the other runs are still read. */
typedef struct tm_health_file {
    const char *run, *file; /* the run directory's and the file's names */
    size_t places;          /* damaged places found */
    uint64_t offset;        /* the last one's offset */
    const char *what;       /* and what it was */
} tm_health_file;
/* Adds "damaged_files":[...] to an object written by tm_health_write_json:
 * call it right after, on the same text (it reopens the closing brace). */
int tm_health_write_files(tm_text *t, const tm_health_file *files, size_t n);

/* ------------------------------------------- alerts without Prometheus */

/* Threshold rules evaluated in-process, with Prometheus's for-semantics,
 * for `trainmon run|watch|serve --alert RULE --on-alert CMD`.  The rule
 * syntax and every metric name are in docs/ALERTS.md:
 *
 *   METRIC[{label=value,...}] OP VALUE [for DURATION]
 *
 * OP is one of > >= < <= == !=; VALUE a number, optionally with a K, M, G
 * or T suffix (powers of 1024); DURATION a number with ms, s, m, h or d
 * ("30s", "3m", "1h"), absent meaning "at once".  Per rule and label set an
 * alert is inactive, pending (the condition holds, for less than DURATION)
 * or firing; it fires when the condition has held continuously for
 * DURATION (each value fed counts; a value that breaks the condition sends
 * it back to inactive) and resolves at the first value that breaks the
 * condition after that.  An unavailable value (NAN) breaks the condition,
 * as a vanished series does in Prometheus; a label set not fed for
 * TM_ALERT_STALE_S seconds while other values of its metric arrive is
 * resolved the same way. */

#define TM_ALERT_RULE_MAX 256   /* bytes of a rule's text */
#define TM_ALERT_LABELS_MAX 256 /* bytes of "k=v,k=v" */
#define TM_ALERT_MAX_RULES 64
#define TM_ALERT_MAX_SERIES 256 /* label sets tracked per rule; more are ignored */
#define TM_ALERT_STALE_S 300.0

enum tm_alert_op { TM_ALERT_GT, TM_ALERT_GE, TM_ALERT_LT, TM_ALERT_LE, TM_ALERT_EQ, TM_ALERT_NE };

typedef struct tm_alert_rule {
    char text[TM_ALERT_RULE_MAX]; /* as given, blanks trimmed */
    char metric[64];
    char match[TM_ALERT_LABELS_MAX]; /* "k=v,..." that must all be in a label set; "" any */
    enum tm_alert_op op;
    double threshold;
    int64_t for_ns;
} tm_alert_rule;

/* Parses a rule.  -EINVAL with a one-line message that quotes the rule
 * ("'disk.foo > 1': unknown metric 'disk.foo' (see docs/ALERTS.md)"): the
 * CLI prefixes the option name. */
int tm_alert_rule_parse(const char *text, tm_alert_rule *out);

/* Whether name is a known metric, and its one-line description ("read
 * latency, ms (iostat r_await); labels device").  NULL if unknown. */
const char *tm_alert_metric_help(const char *name);
/* The i-th known metric name (for listings), NULL past the end. */
const char *tm_alert_metric_name(size_t i);

enum tm_alert_status { TM_ALERT_FIRING = 1, TM_ALERT_RESOLVED = 2 };

/* One transition.  Strings are owned by the engine and valid until the
 * next tm_alert_next (or, in a callback, until it returns). */
typedef struct tm_alert {
    enum tm_alert_status status;
    const char *rule; /* the rule's text */
    const char *metric;
    const char *labels; /* "device=sda", "" for none */
    double value;       /* the value that fired it / that resolved it (NAN: unavailable) */
    double threshold;
    double for_s;
    int64_t starts_real_ns; /* when it fired (wall clock) */
    int64_t ends_real_ns;   /* when it resolved; 0 while firing */
    const char *host;
    /* One line: {"status":"firing"|"resolved","rule":..,"metric":..,
     * "labels":{..},"value":x|null,"threshold":y,"for_seconds":z,
     * "starts_at":"ISO8601","ends_at":"ISO8601"|null,"host":".."} */
    const char *json;
} tm_alert;

typedef struct tm_alert_engine tm_alert_engine;
typedef void (*tm_alert_fn)(const tm_alert *a, void *ctx);

int tm_alert_new(tm_alert_engine **out);
/* Adds a rule (parsed as tm_alert_rule_parse).  Returns its index. */
int tm_alert_add_rule(tm_alert_engine *e, const char *text);
size_t tm_alert_nrules(const tm_alert_engine *e);
/* With a callback, each transition is handed to fn at once (on the feeding
 * thread) instead of being queued.  fn == NULL restores the queue. */
void tm_alert_set_callback(tm_alert_engine *e, tm_alert_fn fn, void *ctx);
/* Wall clock of a monotonic time, for starts_at/ends_at: by default the
 * offset between the two clocks at tm_alert_new.  Tests pin it. */
void tm_alert_set_clock(tm_alert_engine *e, int64_t real_minus_mono_ns);

/* Feeds one value of a metric for a label set ("k=v,k=v", NULL or "" for
 * none) at monotonic time t_ns (0 = now), and evaluates the rules on that
 * metric.  Metrics no rule uses cost one string comparison per rule. */
void tm_alert_feed(tm_alert_engine *e, const char *metric, const char *labels, double value,
                   int64_t t_ns);
/* The same for whole collector samples (metric names in docs/ALERTS.md). */
void tm_alert_feed_disks(tm_alert_engine *e, const tm_diskrate *rates, size_t n, int64_t t_ns);
void tm_alert_feed_pressure(tm_alert_engine *e, const tm_pressure_stats *ps, int64_t t_ns);
void tm_alert_feed_gpus(tm_alert_engine *e, const tm_gpu_stats *g, size_t n, int64_t t_ns);
void tm_alert_feed_ptree(tm_alert_engine *e, const tm_ptree_stats *ts, int64_t t_ns);
/* The run.* metrics of every rank of every run a follower sees (labels
 * run, rank): run.steps; run.data_wait_fraction, run.step_time_seconds and
 * run.data_wait_seconds over the last TM_FOLLOW_WINDOW judged steps
 * (tm_stepwin_sum of tm_follow_rank.win); run.gpu_memory_{allocated,reserved}_{fraction,bytes}
 * from the last capture. */
void tm_alert_feed_runs(tm_alert_engine *e, const tm_follow *f, int64_t t_ns);

/* The next queued transition: 1 and *out filled, 0 when none is left.  At
 * most 1024 are queued; beyond that the oldest are dropped (counted in
 * tm_alert_dropped). */
int tm_alert_next(tm_alert_engine *e, tm_alert *out);
uint64_t tm_alert_dropped(const tm_alert_engine *e);
void tm_alert_free(tm_alert_engine **e);

/* Running --on-alert commands without ever blocking the sampler.  Each
 * command runs as `/bin/sh -c CMD` in its own process group, with the alert
 * JSON on stdin, stdout sent to the caller's stderr, and the environment
 * TRAINMON_ALERT_STATUS (firing|resolved), TRAINMON_ALERT_RULE,
 * TRAINMON_ALERT_METRIC, TRAINMON_ALERT_VALUE, TRAINMON_ALERT_LABELS and
 * TRAINMON_ALERT_JSON.  tm_alert_exec forks and returns; tm_alert_reap
 * (call it every interval) collects finished commands with waitpid on
 * their own pids only (never waitpid(-1): the caller's other children,
 * such as the job of `trainmon run`, are left alone), kills the process
 * group of a command running longer than the timeout, and starts queued
 * ones.  At most max_running commands run at once; up to 256 more wait in
 * a queue, after which new ones are dropped with a warning.  Closing does
 * not wait for or kill running commands. */
typedef struct tm_alert_runner tm_alert_runner;
/* cmds (copied): every command receives every alert.  max_running 0: 4;
 * timeout_s <= 0: 60. */
int tm_alert_runner_new(tm_alert_runner **out, const char *const *cmds, size_t n,
                        unsigned max_running, double timeout_s);
/* Starts (or queues) every command for one alert.  0, or a negative errno
 * for the first command that could not be started or queued (also queued
 * as a warning). */
int tm_alert_exec(tm_alert_runner *r, const tm_alert *a);
/* Reaps finished commands, kills overdue ones, starts queued ones.  Returns
 * how many are still running or queued. */
size_t tm_alert_reap(tm_alert_runner *r);
/* The next warning ("--on-alert 'cmd': exited with status 3", "... killed
 * after 60 s"), NULL when none is left; valid until the next call of any
 * tm_alert_runner function. */
const char *tm_alert_runner_next_warning(tm_alert_runner *r);
void tm_alert_runner_free(tm_alert_runner **r);

/* ------------------------------------------- trace and TensorBoard writers */

/* TensorBoard event files (docs/FORMAT.md "Exports"): TFRecord framing with masked
 * CRC-32C, Event protobufs written by hand (no protobuf library).  The file
 * is created in dir as events.out.tfevents.<10-digit secs>.<host>.<pid>.<n>
 * (n counts the writers of this process), and its first record is the
 * file_version "brain.Event:2".  Records go straight to the file (one
 * write each), so a reader sees whole records only. */
typedef struct tm_tb_writer tm_tb_writer;
/* wall_time: seconds since the epoch for the name and first record; <= 0
 * means now.  dir must exist. */
int tm_tb_open(tm_tb_writer **out, const char *dir, double wall_time);
/* Appends Event{wall_time, step, summary{value{tag, simple_value}}}. */
int tm_tb_scalar(tm_tb_writer *w, const char *tag, int64_t step, double wall_time, float value);
/* The file's path, owned by the writer. */
const char *tm_tb_path(const tm_tb_writer *w);
/* fsyncs and closes; 0 or the first write error seen. */
int tm_tb_close(tm_tb_writer **w);

/* Chrome/Perfetto JSON trace ({"traceEvents":[...]}, docs/FORMAT.md "Exports"),
 * written as it goes except for complete slices: those are kept per
 * writer and written at close, sorted per (pid, tid) by start (longer
 * first on ties), with a child that overruns its parent clipped to the
 * parent's end so that slices on one thread always nest, as the viewers
 * require (a slice that starts inside another and ends after it is taken
 * as its child: right for a phase that outlived its step, while two
 * overlapping siblings lose the overlap from the later one).  Times are nanoseconds in,
 * microseconds (3 decimals) out. Strings are written as raw UTF-8 with " \ and control characters
 * escaped.  args_json, where taken, is the text of a JSON object or NULL. */
typedef struct tm_chrome tm_chrome;
int tm_chrome_open(tm_chrome **out, const char *path);
int tm_chrome_process_name(tm_chrome *c, int pid, const char *name);
int tm_chrome_thread_name(tm_chrome *c, int pid, int tid, const char *name);
int tm_chrome_slice(tm_chrome *c, int pid, int tid, const char *name, int64_t ts_ns, int64_t dur_ns,
                    const char *args_json);
/* A counter event: one track per key; NAN values are left out (and an
 * event with none is not written). */
int tm_chrome_counter(tm_chrome *c, int pid, const char *name, int64_t ts_ns,
                      const char *const *keys, const double *values, size_t n);
/* scope: 'g' global, 'p' process, 't' thread. */
int tm_chrome_instant(tm_chrome *c, int pid, int tid, const char *name, int64_t ts_ns, char scope,
                      const char *args_json);
/* Writes the slices and the closing bracket; 0 or the first error.  On an
 * error a regular file is removed: nothing half-written is presented as valid.
 * *clipped (if not NULL) gets the number of slices clipped. */
int tm_chrome_close(tm_chrome **c, size_t *clipped);

/* A loaded run (tm_run_load) as a Chrome trace at path: one process per
 * record file ("rank R", "system"), tid 1 steps (with the data wait as a
 * child slice), tid 2 phases, allocator bytes as counters, OOMs as
 * instants, disk MB/s and GPU utilization/memory of the system file as
 * counters.  *clipped (if not NULL) as tm_chrome_close. */
int tm_export_chrome(const tm_run *r, const char *path, size_t *clipped);
/* The run as TensorBoard event files under out (created if needed):
 * out/rank<R>/ with step_time_s, data_wait_s per step and
 * gpu_allocated_bytes, gpu_reserved_bytes per capture; out/system/ with
 * every system series as "<series>/<labels>" scalars (step = point
 * index).  One event file per record file. */
int tm_export_tensorboard(const tm_run *r, const char *out);

/* -------------------------------------------------------------- safe files */

/* trainmon runs as root beside other users' files: nothing it creates or
 * overwrites may be steered by an entry someone else planted (a symlink, a
 * FIFO, a hard link, a directory of theirs).  Every file trainmon writes is
 * opened through these helpers (docs/SECURITY.md):
 *   - no symlink is followed at the last component of a path (O_NOFOLLOW);
 *     the directories above it are the caller's to trust;
 *   - new files are created O_EXCL, under a directory fd where there is one;
 *   - an existing file is used only when fstat says it is a regular file
 *     with one link, owned by the caller; it is truncated only after that;
 *   - a directory is used only when it is owned by the caller and not
 *     writable by group or others (unless TM_SAFE_WRITABLE_OK);
 *   - meta.json-like files are replaced through a temporary name + renameat.
 * Each returns a file descriptor (O_CLOEXEC) or 0, or a negative errno with
 * a one-line tm_last_error() naming the path and the reason: "DIR: owned by
 * uid 65534", "DIR: writable by others (mode 0777)", "PATH: is a symbolic
 * link; not followed", "PATH: not a regular file", "PATH: has 2 hard links;
 * not overwritten". */
enum {
    TM_SAFE_WRITABLE_OK = 1u << 0, /* accept a directory group/others may write
                                      (ownership is still checked) */
    TM_SAFE_PARENTS = 1u << 1,     /* tm_dir_make_private: make missing parents (0755) */
    TM_SAFE_REUSE = 1u << 2,       /* tm_file_create: reuse (truncate) an existing
                                      regular file of the caller's */
};

/* Opens the directory at path (O_DIRECTORY|O_NOFOLLOW, trailing slashes
 * ignored) after checking it is owned by geteuid() and, unless
 * TM_SAFE_WRITABLE_OK, not writable by group or others.  -ELOOP symlink,
 * -ENOTDIR not a directory, -EPERM wrong owner or mode. */
int tm_dir_open_checked(const char *path, unsigned flags);

/* Makes the directory at path with exactly mode (0700, 0750), or accepts an
 * existing one that passes tm_dir_open_checked.  Only the last component is
 * made unless TM_SAFE_PARENTS.  Returns the checked directory fd; *created
 * (if not NULL) says whether it is new. */
int tm_dir_make_private(const char *path, mode_t mode, unsigned flags, bool *created);

/* Makes a new directory prefix + 6 random characters under dirfd
 * (mkdtemp-style: never an existing one), with exactly mode.  Returns its
 * fd and writes the name into name (cap bytes). */
int tm_dir_make_temp(int dirfd, const char *prefix, mode_t mode, char *name, size_t cap);

/* Creates a new file name under dirfd: openat(O_WRONLY|O_CREAT|O_EXCL|
 * O_NOFOLLOW|O_CLOEXEC) with exactly mode, then fstat: a regular file with
 * one link.  -EEXIST (anything already there, a symlink included). */
int tm_file_create_at(int dirfd, const char *name, mode_t mode);

/* Replaces name under dirfd with len bytes of data, atomically: written to
 * a new temporary ".name.XXXXXX" in the same directory (O_EXCL), fsynced,
 * then renameat() over name.  A reader sees the old content or the new,
 * never a mix; an entry planted at name (a symlink) is replaced, not
 * followed.  0 or a negative errno (the temporary is removed). */
int tm_file_replace_at(int dirfd, const char *name, const void *data, size_t len, mode_t mode);

/* Creates the file at path (O_RDWR|O_CREAT|O_EXCL|O_NOFOLLOW) in the
 * directory path names (followed as given).  With TM_SAFE_REUSE an existing
 * regular file of the caller's with one link is opened without following a
 * link and truncated; without it -EEXIST.  mode 0: 0600 plus the group and
 * other read bits of the directory (a 0750 run directory gets 0640 files,
 * a 0700 one 0600).  For record files. */
int tm_file_create(const char *path, mode_t mode, unsigned flags);

/* Opens an output file the user named (-o FILE, --html FILE) for writing:
 * created (mode) when missing; an existing one must be a regular file with
 * one link owned by the caller, and is truncated only then.  A symlink at
 * the last component is refused; the directories above may be symlinks.
 * Never blocks on a FIFO (refused as not a regular file). */
int tm_file_open_output(const char *path, mode_t mode);

/* Secrets on a command line, for what is stored (meta.json): argv[i] as it
 * should be written down.  Redacted, case-insensitively, when a name holds
 * token, key, password, passwd, secret or credential: "--api-key=VALUE"
 * gives "--api-key=<redacted>", the word after "--password" (unless it
 * starts with "--") gives "<redacted>", and an environment-like word
 * "HF_TOKEN=VALUE" gives "HF_TOKEN=<redacted>".  Returns argv[i] itself or
 * buf (cap bytes, which the redacted text is written into). */
const char *tm_arg_redact(const char *const *argv, int argc, int i, char *buf, size_t cap);

/* ------------------------------------------------------------- the sampler */

/* One sampler drives every collector (disks, pressure, the process tree
 * with its per-process series, GPUs, page cache and faults): `watch`, `run`
 * and `serve` each call tm_sampler_tick once per interval and only print.
 * docs/FORMAT.md lists the series it records, docs/ALERTS.md the alert
 * inputs it feeds, docs/METRICS.md the Prometheus lines it writes. */

typedef struct tm_sampler tm_sampler;
typedef struct tm_alert_engine tm_alert_engine;

typedef struct tm_sampler_opts {
    bool disks_off;           /* no disk collector (paths with no block device) */
    const char *const *disks; /* device names; NULL or ndisks 0: every physical disk */
    size_t ndisks;
    pid_t root_pid;       /* process tree rooted here; 0: none */
    pid_t pressure_pid;   /* also this process's cgroup (falling back to
                             system-wide when it cannot be read); 0: system-wide */
    bool gpu_off;         /* no GPU collector (--gpu none) */
    const unsigned *gpus; /* NVML indices; NULL or ngpus 0: all */
    size_t ngpus;
    bool per_process;        /* also the tree's per-process series (tm_procrec) */
    bool prom;               /* keep the counters tm_sampler_prom writes */
    tm_rec *rec;             /* series go here; NULL: nothing is recorded */
    tm_alert_engine *alerts; /* inputs fed here; NULL: none */
    /* The dataset's paths (`run -d`): their page-cache residency is read
     * at the first sample and after tm_sampler_finish (dscache.c); NULL or
     * 0: not measured. */
    const char *const *data_paths;
    size_t ndata_paths;
} tm_sampler_opts;

/* Opens every collector the options ask for.  A collector that cannot be
 * opened is off, with its message in tm_sampler_open_error (the front-ends
 * say it in their own words); the sampler itself fails only for bad
 * arguments or memory.  The options' arrays are copied; rec and alerts are
 * borrowed and must outlive the sampler. */
int tm_sampler_new(tm_sampler **out, const tm_sampler_opts *opts);
/* Sets the process-tree root and the pressure cgroup's process (`run`
 * knows its job's pid only after the fork) and re-opens those collectors. */
int tm_sampler_set_root(tm_sampler *s, pid_t pid);
/* Records into w from the next tick on (NULL: stops recording); `watch`
 * opens its recording only once it knows something can be measured. */
void tm_sampler_set_rec(tm_sampler *s, tm_rec *w);
/* Samples every open collector, then records the valid samples and feeds
 * them to the alert engine, at monotonic time t_ns (0 = now).  Failures are
 * queued as warnings; returns 0, or -EINVAL for a NULL sampler. */
int tm_sampler_tick(tm_sampler *s, int64_t t_ns);
/* Samples without recording or feeding: the first sample of rates only
 * primes them, and `watch` prints and records from the second on. */
int tm_sampler_prime(tm_sampler *s);
void tm_sampler_free(tm_sampler **s);
/* The job has ended: the next tick also takes the end-of-run readings (the
 * dataset's page-cache residency), which no ordinary tick takes. */
void tm_sampler_finish(tm_sampler *s);

/* Whether the named collector ("disk", "pressure", "ptree", "gpu",
 * "vmstat") is open, and why it is not (NULL when it is, or was not asked
 * for). */
bool tm_sampler_on(const tm_sampler *s, const char *name);
const char *tm_sampler_open_error(const tm_sampler *s, const char *name);
/* The collectors /metrics reports on (open, or asked for and failed unless
 * optional hardware), with whether their last sample worked: at most cap,
 * returns how many.  Names are static strings. */
size_t tm_sampler_collectors(const tm_sampler *s, const char **names, bool *ok, size_t cap);

/* The last tick's samples, owned by the sampler and valid until the next
 * tick or free.  false / NULL when the collector is off or its last sample
 * failed (unavailable is not zero); *n is then 0. */
bool tm_sampler_disks(const tm_sampler *s, const tm_diskrate **rates, size_t *n);
bool tm_sampler_disk_raw(const tm_sampler *s, const tm_diskstat **raw, size_t *n);
const tm_pressure_stats *tm_sampler_pressure(const tm_sampler *s);
const tm_ptree_stats *tm_sampler_ptree(const tm_sampler *s);
bool tm_sampler_gpus(const tm_sampler *s, const tm_gpu_stats **gpus, size_t *n);

/* Appends every collector's Prometheus lines (disks, pressure, GPUs, page
 * cache; opts.prom must be set for the disk counters) to t.  Returns
 * tm_text_error(t). */
int tm_sampler_prom(tm_sampler *s, tm_text *t);

/* What went wrong since the last call, oldest first (at most 32 are kept;
 * later ones are dropped).  kind: a collector's own warning (GPU lost), a
 * failed sample, or a failed append to the record file (said once per
 * sampler, err -ENOSPC when the disk is full).  Strings stay valid until
 * the next call. */
enum tm_sampler_warn_kind {
    TM_SAMPLER_WARN_NOTE = 1,
    TM_SAMPLER_WARN_SAMPLE = 2,
    TM_SAMPLER_WARN_RECORD = 3,
};
typedef struct tm_sampler_warning {
    enum tm_sampler_warn_kind kind;
    const char *collector; /* "gpu", "disk", ... */
    int err;               /* negative errno for SAMPLE and RECORD, else 0 */
    const char *msg;       /* for NOTE and SAMPLE; "" for RECORD */
} tm_sampler_warning;
/* 1 and *out filled, or 0 when none is left. */
int tm_sampler_next_warning(tm_sampler *s, tm_sampler_warning *out);

#ifdef __cplusplus
}
#endif
#endif /* TRAINMON_H */
