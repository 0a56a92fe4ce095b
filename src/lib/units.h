/*
 * units.h - numbers for people: the unit and precision of an evidence
 * number chosen from its key's suffix by one table (units.c), for the text
 * and HTML reports.  JSON keeps base units (seconds, bytes, fractions) and
 * never goes through here.  Internal, except tm_fmt_fixed (trainmon.h).
 */
#ifndef TM_UNITS_H
#define TM_UNITS_H

#include <stdbool.h>
#include <stddef.h>

#include "trainmon.h"

typedef enum tm_unit {
    TM_UNIT_PLAIN,      /* integers whole, else 3 significant digits */
    TM_UNIT_COUNT,      /* rounded to an integer: "12" */
    TM_UNIT_SECONDS,    /* "850 us", "35.7 ms", "2.4 s", "123 s" */
    TM_UNIT_BYTES,      /* binary, as the titles: "512 B", "7.7 MiB", "1.50 GiB" */
    TM_UNIT_BYTES_RATE, /* decimal, as iostat and the titles: "7.7 MB/s" */
    TM_UNIT_BYTES_HOUR, /* "120 MiB/h" */
    TM_UNIT_BYTES_STEP, /* "1.2 MiB/step" */
    TM_UNIT_FRACTION,   /* 0..1 shown as a percentage: "87.3%" */
    TM_UNIT_PERCENT,    /* already a percentage: "87.3%" */
    TM_UNIT_FACTOR,     /* "1.7x" */
} tm_unit;

/* The unit of an evidence key: the first entry of the table in units.c
 * whose name is the key or a "_"-separated suffix of it; TM_UNIT_PLAIN
 * when none is. */
tm_unit tm_unit_of_key(const char *key, size_t len);

/* v in unit u into buf (at most cap bytes, NUL-terminated), "n/a" when v
 * is not finite.  Returns buf. */
const char *tm_unit_fmt(char *buf, size_t cap, tm_unit u, double v);

/* The end of the JSON value starting at p (strings, arrays and objects
 * skipped whole), or NULL when it is cut short or unbalanced. */
const char *tm_json_value_end(const char *p);

/* Names a process for people by its pid ("rank 0", "rank 0 worker 1"):
 * true and buf filled, or false when the pid is no known rank's.  ctx is
 * the caller's (the report writers pass the run). */
typedef bool (*tm_unit_pid_namer)(void *ctx, long pid, char *buf, size_t cap);

/* The raw JSON value v[0..len) found under key[0..klen) in a finding's
 * evidence, appended to t for people, escaped with esc: a number in the
 * key's unit, a string without its quotes, an object as "{k v, ...}" (its
 * members in the parent key's unit: per_rank_sync_wait_s holds seconds;
 * members of a per_rank* object are named "rank K"); anything else as
 * written.  A number under a key ending in "pid" that namer (may be NULL)
 * knows is followed by its name: "4242 (rank 0 worker 1)". */
void tm_unit_json_value(tm_text *t, tm_esc esc, const char *key, size_t klen, const char *v,
                        size_t len, tm_unit_pid_namer namer, void *ctx);

/* A finding's evidence (a JSON object) as one line for people, escaped
 * with esc: "key value, key value; not measured: key, key".  Evidence that
 * is not an object is written as it is. */
void tm_unit_evidence_line(tm_text *t, tm_esc esc, const char *json, tm_unit_pid_namer namer,
                           void *ctx);

/* The number under top-level key of a flat evidence object, NAN when it is
 * absent, null or not a number. */
double tm_unit_evidence_num(const char *json, const char *key);

/* The raw JSON value under top-level key of a flat evidence object:
 * true and *v, *len set (pointing into json), false when absent. */
bool tm_unit_evidence_member(const char *json, const char *key, const char **v, size_t *len);

#endif
