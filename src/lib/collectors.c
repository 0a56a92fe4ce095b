/*
 * collectors.c - the table of collectors the sampler runs, in the order it
 * samples, records and writes /metrics.  A new collector is its file
 * (collect_<name>.c defining tm_coll_<name>) and one X(<name>) line here.
 */
#include "collect.h"

#define TM_COLLECTORS(X)                                                                           \
    X(disk)                                                                                        \
    X(pressure)                                                                                    \
    X(ptree)                                                                                       \
    X(gpu)                                                                                         \
    X(vmstat)                                                                                      \
    X(dscache)                                                                                     \
    /* end of the table */

#define TM_COLL_EXTERN(name) extern const struct tm_collector_ops tm_coll_##name;
#define TM_COLL_ENTRY(name) &tm_coll_##name,

TM_COLLECTORS(TM_COLL_EXTERN)

const struct tm_collector_ops *const tm_collectors[] = {TM_COLLECTORS(TM_COLL_ENTRY)};
const size_t tm_ncollectors = sizeof tm_collectors / sizeof tm_collectors[0];
