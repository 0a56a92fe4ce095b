/*
 * collect_vmstat.h - the parsers and rate arithmetic of the page-cache
 * collector (collect_vmstat.c), for its unit test and fuzz target.
 * Internal.
 */
#ifndef TM_COLLECT_VMSTAT_H
#define TM_COLLECT_VMSTAT_H

#include <stddef.h>
#include <stdint.h>

enum {
    TM_VM_HAVE_MAJFAULT = 1u << 0, /* /proc/vmstat pgmajfault */
    TM_VM_HAVE_PGPGIN = 1u << 1,   /* /proc/vmstat pgpgin (KiB) */
    TM_VM_HAVE_REFAULT = 1u << 2,  /* workingset_refault_file (>= 5.9) or workingset_refault */
    TM_VM_HAVE_CACHED = 1u << 3,   /* /proc/meminfo Cached */
    TM_VM_HAVE_DIRTY = 1u << 4,    /* /proc/meminfo Dirty */
    TM_VM_HAVE_MEMTOTAL = 1u << 5, /* /proc/meminfo MemTotal (dscache.c) */
};

/* The counters and gauges of one sample; a field is meaningful only with
 * its TM_VM_HAVE_* bit. */
typedef struct tm_vmstat {
    unsigned valid;
    uint64_t pgmajfault;      /* major faults since boot */
    uint64_t pgpgin_kib;      /* KiB read from block devices into memory since boot */
    uint64_t refault;         /* page-cache pages evicted and read back again since boot */
    uint64_t cached_bytes;    /* page cache (meminfo Cached, kB * 1024) */
    uint64_t dirty_bytes;     /* waiting to be written back */
    uint64_t mem_total_bytes; /* meminfo MemTotal, kB * 1024 */
} tm_vmstat;

/* Rates over an interval; NAN where unavailable (no previous sample, a
 * field the kernel lacks, no time elapsed).  A counter that went backwards
 * gives 0, as tm_disk_rate does. */
typedef struct tm_vmrate {
    double majfault_s;
    double pagein_bytes_s;
    double refault_s;
    double cached_bytes, dirty_bytes;
} tm_vmrate;

/* Parse the text of /proc/vmstat and /proc/meminfo into out, setting the
 * bits of what they found (other fields and bits are left alone).  Unknown
 * and malformed lines are skipped.  0, or -EINVAL for NULL arguments. */
int tm_vmstat_parse(const char *buf, size_t len, tm_vmstat *out);
int tm_meminfo_parse(const char *buf, size_t len, tm_vmstat *out);
/* prev may be NULL (the first sample: gauges only). */
void tm_vmstat_rate(const tm_vmstat *prev, const tm_vmstat *cur, double interval_s, tm_vmrate *out);

#endif
