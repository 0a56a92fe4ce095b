/*
 * ptree.h - internal entry points of the process-tree collector: the
 * parsers of /proc/PID files, exposed for unit tests and fuzzers.  Front-ends
 * use tm_ptree_* from include/trainmon.h.
 *
 * Every parser takes a buffer and its length; the buffer need not be
 * NUL-terminated and may hold any bytes.  They return 0 or -EINVAL.
 */
#ifndef TM_PTREE_H
#define TM_PTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

/* The most processes a tree details; more are counted in nproc_untracked. */
#define TM_PTREE_MAX_PROCS 4096

/* /proc/PID/stat: fills pid, comm (truncated to fit), state, ppid,
 * utime_s, stime_s, starttime and sets TM_PROC_HAVE_STAT in out->valid.
 * The fields are counted after the LAST ')' because comm may hold ')' and
 * blanks.  *num_threads (field 20) is stored when num_threads is not NULL. */
int tm_parse_proc_stat(const char *buf, size_t len, tm_procinfo *out, uint64_t *num_threads);

/* /proc/PID/io: rchar, wchar, read_bytes, write_bytes; sets
 * TM_PROC_HAVE_IO.  -EINVAL unless all four keys are present. */
int tm_parse_proc_io(const char *buf, size_t len, tm_procinfo *out);

/* The value in bytes of a "Key:   N kB" line, as in /proc/PID/smaps_rollup
 * ("Pss") and /proc/PID/status.  -EINVAL when the key is absent. */
int tm_parse_kb_field(const char *buf, size_t len, const char *key, uint64_t *bytes);
int tm_parse_smaps_pss(const char *buf, size_t len, uint64_t *pss_bytes);

/* A children file ("12 34 56 "): stores up to cap pids in out and returns
 * how many the text holds (which may exceed cap).  complete == false means
 * the read filled the buffer, so a number at its very end may be cut off and
 * is not taken. */
size_t tm_parse_pid_list(const char *buf, size_t len, bool complete, pid_t *out, size_t cap);

#endif /* TM_PTREE_H */
