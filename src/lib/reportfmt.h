/*
 * reportfmt.h - helpers shared by the report writers: reportfmt.c (text
 * and JSON) and reporthtml.c (HTML).  Internal.
 */
#ifndef TM_REPORTFMT_H
#define TM_REPORTFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

struct tm_an_summary;

/* ns since the epoch as "2026-01-02T03:04:05.678Z", or "n/a" for ns <= 0. */
void tm_rpt_iso_time(char *buf, size_t cap, int64_t ns);

/* The raw text of a JSON array of strings under top-level key "key" in
 * meta.json, checked to be exactly that (so that it can be copied into
 * the report), or NULL with *len 0. */
const char *tm_rpt_meta_str_array(const char *meta, const char *key, size_t *len);

/* v with prec decimals and a suffix, or "n/a". */
void tm_rpt_fmt_num(char *buf, size_t cap, double v, int prec, const char *suffix);

/* The summary's word on inference loops (inference.c): what the steps of
 * a run some of whose processes never trained are; NULL when none. */
const char *tm_rpt_inference_line(const struct tm_an_summary *S);
/* The summary's torch.compile line into buf ("5 compilations (3
 * recompilations), 325 ms (3.3% of the loop), 240 ms after warm-up"):
 * false when the run compiled nothing in a loop (steps.compile). */
bool tm_rpt_compile_line(char *buf, size_t cap, const struct tm_an_summary *S);

/* The headline that opens the text report and the HTML page: the most
 * severe finding (tm_analyze sorts them), what it costs when its evidence
 * says (time_lost_fraction, time_lost_s, speedup), and the first sentence
 * of its advice.  Strings are "" when there is nothing to say. */
typedef struct tm_rpt_head {
    const tm_finding *f; /* NULL: no findings, no headline */
    char verdict[512];   /* the finding's title, capitalised */
    char cost[256];      /* "41.0% of the run (123 s) waiting for data; about 1.7x ..." */
    char remedy[512];    /* the advice's first sentence */
} tm_rpt_head;
void tm_rpt_headline(const tm_analysis *a, tm_rpt_head *h);

/* A process of the run named by rank (tm_unit_pid_namer; ctx is the
 * tm_run): "rank R" for a training process's pid (its record file's
 * header), "rank R worker K" for a DataLoader worker's (its batch
 * records).  false when no process with a rank has that pid, or when
 * processes of two hosts do (a pid alone cannot tell them apart). */
bool tm_rpt_pid_name(void *run, long pid, char *buf, size_t cap);

/* The same name for a pid on one host (on_host; NULL: on any one host, as
 * above), for the charts of series recorded on that host. */
bool tm_rpt_pid_rank(const tm_run *r, long pid, const char *on_host, char *buf, size_t cap);

/* Whether src[i] is the first of src[0..i] from its host (to list each
 * host of a run once). */
bool tm_rpt_first_of_host(const tm_run_source *src, size_t i);

#endif
