/*
 * probe.h - the storage probe's arithmetic and its file (probe.c): the
 * request size taken from the dataset's files, the plan of tests, the
 * latency histogram, and the reader of DIR/probe.json that the report
 * (runsum.c) uses.  The measurement itself is tm_probe_run (trainmon.h).
 * Internal.
 */
#ifndef TM_PROBE_H
#define TM_PROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

/* O_DIRECT wants offsets, lengths and buffers aligned to the logical block
 * size: 4096 covers 512-byte and 4 KiB devices. */
#define TM_PROBE_ALIGN 4096u
#define TM_PROBE_SEQ_BLOCK (1024u * 1024u) /* sequential reads: 1 MiB, fio's usual */
#define TM_PROBE_RAND_MAX (1024u * 1024u)  /* a random read is at most 1 MiB */
#define TM_PROBE_MAX_FILES 256             /* files kept open for the reads (a sample) */
#define TM_PROBE_SCAN_MAX 100000           /* directory entries looked at */
#define TM_PROBE_MAX_DEPTH 16              /* directory levels walked */
#define TM_PROBE_DEFAULT_S 4.0
/* The first fifth of each test is a ramp, not counted (fio's ramp_time):
 * the requests' start-up, and the burst a throttle grants at the start of
 * its slice (blk-throttle allows one throttl_slice, 100 ms, of bytes at
 * once), which over a short test reads 10% above the limit. */
#define TM_PROBE_RAMP 0.2
/* The rate is the slope of the bytes read over time (a least-squares line
 * through the cumulative bytes at the end of each of TM_PROBE_BINS slices
 * of the test, after the ramp), not bytes / seconds: a throttle releases
 * reads in bursts, once per slice, and a count between two instants is off
 * by up to one burst (12-25% over a 0.8 s test), where the line through
 * the staircase is within 1% (tests/unit/test_probe.c).  Below
 * TM_PROBE_SLOPE_MIN_READS reads after the ramp, bytes / seconds. */
#define TM_PROBE_BINS 64
#define TM_PROBE_SLOPE_MIN_READS 16
#define TM_PROBE_JSON_MAX (256u * 1024u) /* bytes of probe.json read */
#define TM_PROBE_FILE_MAX 16             /* probes read from one probe.json */

/* The random reads' size for files of median size m: m rounded up to
 * TM_PROBE_ALIGN, at least TM_PROBE_ALIGN and at most TM_PROBE_RAND_MAX. */
uint64_t tm_probe_rand_block(uint64_t median);

/* The tests, in order: sequential TM_PROBE_SEQ_BLOCK at depth 1 and 4,
 * random rand_block at depth 1, 4 and 16.  Fills pattern, block_bytes and
 * queue_depth of out[0..cap); returns how many. */
size_t tm_probe_plan(uint64_t rand_block, tm_probe_test *out, size_t cap);

/* Latencies in a log-linear histogram: 16 buckets per power of two (6%
 * resolution), so that a test of any length keeps a fixed 5 KiB. */
#define TM_PROBE_HIST_BUCKETS 640
typedef struct tm_probe_hist {
    uint64_t n, sum_ns;
    uint64_t b[TM_PROBE_HIST_BUCKETS];
} tm_probe_hist;
/* The bucket of a latency of ns nanoseconds, and a bucket's lower bound
 * and width in nanoseconds. */
size_t tm_probe_hist_bucket(uint64_t ns);
void tm_probe_hist_bounds(size_t bucket, uint64_t *lo, uint64_t *width);
void tm_probe_hist_add(tm_probe_hist *h, uint64_t ns);
void tm_probe_hist_merge(tm_probe_hist *into, const tm_probe_hist *h);
/* The q-quantile (0 < q <= 1) in seconds: the middle of the bucket that
 * holds the ceil(q n)-th smallest latency; NAN for an empty histogram. */
double tm_probe_hist_quantile(const tm_probe_hist *h, double q);

/* The least-squares slope (bytes per second) of the cumulative bytes at
 * the end of bins first..n-1 (bins of bin_s seconds, bins[k] the bytes
 * of the reads that ended in bin k) over time; NAN for fewer than 2
 * points. */
double tm_probe_slope(const uint64_t *bins, size_t n, double bin_s, size_t first);

/* Fills a test's rates and latencies from what it read: bytes and
 * requests in seconds of wall time, latencies in h. */
void tm_probe_finish(tm_probe_test *t, uint64_t bytes, uint64_t requests, double seconds,
                     const tm_probe_hist *h);

/* Parses probe.json text (len bytes, not NUL-terminated) into out[0..cap).
 * Unknown keys are skipped; strings are cut to their fields with control
 * characters replaced by '?'; numbers that are negative, not finite or
 * out of range are NAN (rates) or 0 (counts).  Returns the probes read, or -EINVAL for text
 * that is not such a document (nesting deeper than 8 levels included). */
int tm_probe_parse(const char *buf, size_t len, tm_probe *out, size_t cap);

/* Reads DIR/probe.json (opened as record files are: no symlink, regular
 * files only, never blocking; at most TM_PROBE_JSON_MAX bytes) into
 * out[0..cap).  The probes read, 0 when there is no file, or a negative
 * errno. */
int tm_probe_read_dir(const char *dir, tm_probe *out, size_t cap);

/* Whether the probe measured disk (its device or one of its disks). */
bool tm_probe_covers(const tm_probe *p, const char *disk);

#endif
