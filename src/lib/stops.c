/*
 * stops.c - what stopped a training thread inside its steps: torch.compile's
 * compilations, checkpoint saves the loop waited for, the garbage
 * collector's pauses.  The agent writes each as one event at its end with
 * its duration (dur_s) and a marker saying whether the training thread was
 * the one stopped (docs/FORMAT.md, events).  One table, read by the Chrome
 * trace's "stops" track (runexport.c: every one, nested as they happened)
 * and by the live follower's totals (follow.c: each once, a pause inside a
 * compilation or a save left to that one), which /metrics exports as
 * trainmon_run_stop_seconds_total{stop=...} (prom.c).  The report's rules
 * read the same events with their own summaries (runsum_compile.c,
 * runsum_ckpt.c, runsum_gc.c), which also place them in the steps.
 *
 * A new kind of stop is a line in the table and a TM_STOP_* in trainmon.h.
 */
#include <string.h>

#include "stops.h"
#include "util.h"

static const tm_stop_def stops[TM_STOP_KINDS] = {
    [TM_STOP_COMPILE] =
        {"compile", "\"training\":true", {NULL, NULL}, "compile", "torch.compile", "id"},
    [TM_STOP_CHECKPOINT] = {"checkpoint.save",
                            "\"blocking\":true",
                            {NULL, NULL},
                            "checkpoint",
                            "checkpoint save",
                            "via"},
    [TM_STOP_GC] = {"gc.pause",
                    "\"train\":true",
                    {"\"in_compile\":true", "\"in_save\":true"},
                    "gc",
                    "gc pause, generation",
                    "gen"},
};

const tm_stop_def *tm_stop_def_at(size_t i)
{
    return i < TM_ARRAY_LEN(stops) ? &stops[i] : NULL;
}

int tm_stop_of(const char *name, size_t name_len, const char *json, size_t json_len, double *dur_s,
               bool *within)
{
    if (!name || !json)
        return -1;
    size_t k = 0;
    while (k < TM_ARRAY_LEN(stops) &&
           !(strlen(stops[k].event) == name_len && memcmp(stops[k].event, name, name_len) == 0))
        k++;
    if (k == TM_ARRAY_LEN(stops))
        return -1;
    char buf[1024]; /* the writer's text: bounded and NUL-terminated here */
    size_t n = json_len < sizeof buf - 1 ? json_len : sizeof buf - 1;
    memcpy(buf, json, n);
    buf[n] = '\0';
    if (!strstr(buf, stops[k].only))
        return -1;
    double d = tm_event_num(buf, "dur_s");
    if (!(d > 0) || d >= 3.2e7) /* unknown, or more than a year: a text may say anything */
        return -1;
    bool in = false;
    for (size_t w = 0; w < TM_ARRAY_LEN(stops[k].within); w++)
        in = in || (stops[k].within[w] && strstr(buf, stops[k].within[w]));
    if (dur_s)
        *dur_s = d;
    if (within)
        *within = in;
    return (int)k;
}
