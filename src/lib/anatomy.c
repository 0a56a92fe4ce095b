/*
 * anatomy.c - the memory anatomy records of a run, as the report, the
 * rules (rules_anatomy.c) and /metrics read them (anatomy.h).
 */
#include <math.h>
#include <stdio.h>
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

double tm_anat_accounted(const tm_inproc_anatomy *a)
{
    double s = 0;
    const double parts[] = {a->params, a->grads, a->optim_state, a->unknown, a->activations};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (isfinite(parts[i]) && parts[i] > 0)
            s += parts[i];
    return s;
}

void tm_anat_device(char *buf, size_t cap, const tm_inproc_anatomy *a)
{
    /* the kind comes from a file: letters, digits and '_' only, as torch's
     * device types are, so that no report needs to escape it */
    char kind[33];
    size_t n = 0;
    for (size_t i = 0; i < a->kind_len && n < sizeof kind - 1; i++) {
        char c = a->kind[i];
        kind[n++] =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ? c : '_';
    }
    if (!n)
        kind[n++] = '?';
    kind[n] = '\0';
    if (a->device >= 0)
        snprintf(buf, cap, "%s:%d", kind, (int)a->device);
    else
        snprintf(buf, cap, "%s", kind);
}

void tm_anat_bytes(char *buf, size_t cap, double v)
{
    if (!isfinite(v))
        snprintf(buf, cap, "n/a");
    else if (fabs(v) >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else if (fabs(v) >= 1024.0 * 1024)
        snprintf(buf, cap, "%.1f MiB", v / (1024.0 * 1024));
    else if (fabs(v) >= 1024.0)
        snprintf(buf, cap, "%.1f KiB", v / 1024.0);
    else
        snprintf(buf, cap, "%.0f B", v);
}
