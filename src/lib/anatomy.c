/*
 * anatomy.c - one memory anatomy record as the report, the rules
 * (rules_anatomy.c) and /metrics read it (anatomy.h): what it adds up to,
 * its device's name, bytes for people.  Needs no run (the extension's
 * follower uses it too); anatomy_run.c finds the records in a run.
 */
#include <math.h>
#include <stdio.h>

#include "anatomy.h"

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
