/*
 * stops.h - what stopped a training thread inside its steps, from the
 * agent's events (stops.c).  Internal.
 */
#ifndef TM_STOPS_H
#define TM_STOPS_H

#include <stdbool.h>
#include <stddef.h>

#include "trainmon.h"

typedef struct tm_stop_def {
    const char *event;     /* the event's name */
    const char *only;      /* the marker, in its JSON, of one on the training thread */
    const char *within[2]; /* markers of one inside another stop (its time is that one's) */
    const char *name;      /* the kind's name: Prometheus's stop="..." label */
    const char *label;     /* the Chrome trace's slice name */
    const char *key;       /* the JSON key whose value follows the label there */
} tm_stop_def;

/* The kind's definition, i < TM_STOP_KINDS; NULL past the end. */
const tm_stop_def *tm_stop_def_at(size_t i);

/* The stop an event is (its kind, a TM_STOP_*), or -1: an event of a
 * kind in the table, on the training thread, with a duration dur_s in
 * (0, a year).  *within: it happened inside another stop.  The name and
 * JSON are the writer's, not NUL-terminated (lengths given) and not
 * trusted; a JSON over 1 KiB is read as far as its first KiB. */
int tm_stop_of(const char *name, size_t name_len, const char *json, size_t json_len, double *dur_s,
               bool *within);

#endif
