/*
 * sysrec.h - the shared step of recording collector samples as series:
 * define each (name, labels) on first use and append one sample record of
 * the values that are available.  Internal.
 */
#ifndef TM_SYSREC_H
#define TM_SYSREC_H

#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

/* One value to record: series name, unit, value (NAN = unavailable). */
struct tm_sysrec_val {
    const char *name;
    const char *unit;
    double v;
};

/* Appends the available values of vals (at most 64) under labels as one
 * TM_REC_SAMPLE at t_ns.  0 or a negative errno from the writer. */
int tm_sysrec_put(tm_rec *w, int64_t t_ns, const char *labels, const struct tm_sysrec_val *vals,
                  size_t n);

#endif
