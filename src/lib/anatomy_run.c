/*
 * anatomy_run.c - the memory anatomy records of a loaded run (anatomy.h):
 * the latest record of each device of each record file.
 */
#include <stdbool.h>
#include <string.h>

#include "anatomy.h"

static bool same_device(const tm_run_anatomy *a, const tm_run_anatomy *b)
{
    return a->source == b->source && a->a.device == b->a.device && a->a.kind_len == b->a.kind_len &&
           memcmp(a->a.kind, b->a.kind, a->a.kind_len) == 0;
}

size_t tm_anat_latest(const tm_run *r, uint32_t source, const tm_run_anatomy **out, size_t cap)
{
    const tm_run_anatomy *list;
    size_t n = tm_run_anatomies(r, &list), k = 0;
    for (size_t i = 0; i < n; i++) {
        const tm_run_anatomy *x = &list[i];
        if (source != UINT32_MAX && x->source != source)
            continue;
        size_t j = 0;
        while (j < k && !same_device(out[j], x))
            j++;
        if (j < k) {
            /* records of one file are in the order written: the latest wins
             * (a later step; on a tie, the later record) */
            if (x->a.step >= out[j]->a.step)
                out[j] = x;
        } else if (k < cap) {
            out[k++] = x;
        }
    }
    return k;
}
