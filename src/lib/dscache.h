/*
 * dscache.h - how much of a dataset is in the page cache, measured without
 * reading a byte of it: a bounded walk of the data paths (how many regular
 * files, how many bytes), a sample of their files, and each sampled file's
 * resident pages (cachestat(2) on Linux >= 6.5, else mincore(2) over a
 * read-only mapping).  collect_dscache.c takes a reading as the job starts
 * and one as it ends; docs/DIAGNOSIS.md (data.page_cache) says how the
 * report reads them.  Internal.
 */
#ifndef TM_DSCACHE_H
#define TM_DSCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds of one reading.  The walk looks at most TM_DSC_WALK_MAX directory
 * entries for at most TM_DSC_WALK_NS (whichever comes first; the reading
 * then says the walk was cut short and its sizes are lower bounds) and
 * descends at most TM_DSC_DEPTH directories.  At most TM_DSC_SAMPLE files
 * are measured: the TM_DSC_LARGEST largest of the walk (a dataset of one
 * 50 GB file and a thousand small ones is mostly the big file) and a
 * uniform sample of the others (reservoir sampling with a fixed seed: the
 * same tree gives the same sample at the start and at the end). */
#define TM_DSC_SAMPLE 256
#define TM_DSC_LARGEST 16
#define TM_DSC_WALK_MAX 200000
#define TM_DSC_WALK_NS 2000000000LL
#define TM_DSC_DEPTH 32

/* How the resident pages were counted. */
enum tm_dsc_method {
    TM_DSC_NONE = 0,
    TM_DSC_CACHESTAT = 1, /* cachestat(2), Linux >= 6.5 */
    TM_DSC_MINCORE = 2,   /* mincore(2) over mmap(PROT_READ, MAP_SHARED) */
};

/* What a walk saw and what its sample measured: the input of the pure
 * estimate.  walk_* are sizes as the walk saw them; big_* and rest_* are
 * the measured files (sizes as measured, resident bytes), the largest
 * files apart from the uniform sample of the others.  A file whose
 * residency could not be read (cachestat refused, a mincore that would
 * lie) is in neither. */
typedef struct tm_dsc_tally {
    uint64_t files, bytes;   /* regular files walked and their sizes */
    uint64_t big_walk_bytes; /* walk sizes of the largest files that were measured */
    uint64_t big_bytes, big_cached;
    uint64_t rest_files, rest_bytes, rest_cached; /* the uniform sample */
    uint64_t unknown;                             /* sampled files not measured */
    bool complete;                                /* the walk saw every entry */
} tm_dsc_tally;

/* One reading; NAN where unavailable. */
typedef struct tm_dsc_reading {
    double files, bytes;    /* of the walk (lower bounds when !complete) */
    double cached_bytes;    /* estimated resident bytes of the dataset */
    double cached_fraction; /* cached_bytes / bytes, in [0, 1] */
    double files_measured;  /* files whose residency was read */
    double memory_bytes;    /* MemTotal (<proc>/meminfo) */
    bool complete;          /* the walk saw every entry */
    enum tm_dsc_method method;
} tm_dsc_reading;

/* The dataset's resident bytes from a tally: the largest files as
 * measured, plus the rest of the walked bytes at the resident ratio of the
 * uniform sample (at the largest files' ratio when the sample is empty).
 * Sets *cached and *fraction (NAN when nothing was measured or the walk
 * found no bytes; the fraction is clamped to [0, 1]).  0, or -EINVAL for
 * NULL arguments. */
int tm_dsc_estimate(const tm_dsc_tally *t, double *cached, double *fraction);

/* Takes a reading of the files under paths (n of them: directories walked,
 * regular files taken as they are; symlinks below a path and anything
 * that is not a regular file or a directory are skipped).  Never reads
 * file data, never follows a symlink below a given path, never blocks on
 * a FIFO or a device.  0 when at least one path could be opened (the
 * reading may still have no measured file), else a negative errno with
 * tm_last_error() set. */
int tm_dsc_measure(const char *const *paths, size_t n, tm_dsc_reading *out);

/* For tests: count resident pages with mincore even where cachestat
 * exists (the path kernels before 6.5, Debian 12's 6.1 among them, take);
 * false goes back to cachestat when the kernel has it. */
void tm_dsc_force_mincore(bool on);

#endif
