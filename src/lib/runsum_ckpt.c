/*
 * runsum_ckpt.c - the checkpoint saves of a run, for checkpoint.blocking
 * (docs/DIAGNOSIS.md).
 *
 * The agent wraps torch.save (and the frameworks' savers, and
 * torch.distributed.checkpoint's: see _trainmon.c) and writes one
 * checkpoint.save event at the end of each call: its wall time (dur_s), the thread's CPU time in it
 * (cpu_s), the bytes written (a path's size, a file object's position;
 * null unknown), the steps begun so far, and whether it blocked the loop
 * (blocking: the training thread) or ran beside it (a background thread).
 * The step model has already taken a blocking save's time out of the
 * steps, so here it is added back up:
 *
 *   - per process, the blocking saves' time against its loop time: its
 *     complete training steps (warm-up included), its eval runs and those
 *     saves (the import and set-up before the first step are no loop
 *     time: a short job would otherwise hide its saves behind them);
 *   - only the saves that began inside the loop (from its first complete
 *     training step's start to its last one's end) are the loop's: a save
 *     before training (the initial weights) or after it (the final model)
 *     costs the loop nothing, and is counted apart (ckpt_outside);
 *   - the process whose saves blocked longest is the one summarized (in a
 *     DDP job rank 0 saves while the others wait for it at the next
 *     collective: its share is the job's);
 *   - saves in other threads are counted apart: they cost the loop only
 *     what they take from its CPUs and the GIL.
 *
 * The events are the writer's text and not trusted: a number that does
 * not parse, or is negative, is unknown (tm_event_num).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runsum.h"
#include "trainmon.h"
#include "util.h"

static bool is_save(const tm_run_event *e)
{
    return e->name && strcmp(e->name, "checkpoint.save") == 0 && e->json;
}

static bool blocking(const char *js)
{
    return strstr(js, "\"blocking\":true") != NULL;
}

/* The save's duration (0 when unknown) */
static double save_dur(const tm_run_event *e)
{
    double d = tm_event_num(e->json, "dur_s");
    return isfinite(d) ? d : 0;
}

/* Whether save e began inside its process's loop (events are written at
 * the save's end: it began dur_s before) */
static bool in_loop(const tm_run_loop *L, const tm_run_event *e)
{
    const tm_run_loop *l = &L[e->source];
    if (l->lo >= l->hi)
        return false;
    double begin = (double)e->t_ns - save_dur(e) * 1e9;
    return begin >= (double)l->lo && begin < (double)l->hi;
}

void tm_runsum_checkpoints(const tm_runview *v, tm_an_summary *S)
{
    S->ckpt_procs = S->ckpt_saves = S->ckpt_bg_saves = S->ckpt_outside = 0;
    S->ckpt_calls = S->ckpt_to_memory = S->ckpt_async = 0;
    S->ckpt_s = S->ckpt_bg_s = 0;
    S->ckpt_median_s = S->ckpt_bytes = S->ckpt_write_bps = S->ckpt_cpu_share = NAN;
    S->ckpt_every_steps = S->ckpt_loop_s = S->ckpt_step_s = NAN;
    const tm_run_event *ev;
    size_t nev = tm_run_events(v->r, &ev), nsaves = 0;
    for (size_t i = 0; i < nev; i++)
        nsaves += is_save(&ev[i]);
    if (nsaves == 0 || v->nsrc == 0)
        return;
    tm_run_loop *L = tm_runsum_loops(v);
    double *blk_s = calloc(v->nsrc, sizeof *blk_s);
    size_t *blk_n = calloc(v->nsrc, sizeof *blk_n);
    double *tmp = malloc(3 * nsaves * sizeof *tmp);
    if (!L || !blk_s || !blk_n || !tmp)
        goto out;
    /* per process: the blocking saves inside its loop and their time */
    for (size_t i = 0; i < nev; i++) {
        if (!is_save(&ev[i]) || ev[i].source >= v->nsrc)
            continue;
        double d = save_dur(&ev[i]);
        if (!blocking(ev[i].json)) {
            S->ckpt_bg_saves++;
            S->ckpt_bg_s += d;
            continue;
        }
        if (!in_loop(L, &ev[i])) {
            S->ckpt_outside++;
            continue;
        }
        uint32_t s = ev[i].source;
        S->ckpt_procs += blk_n[s]++ == 0;
        blk_s[s] += d;
    }
    size_t best = v->nsrc;
    for (size_t s = 0; s < v->nsrc; s++)
        if (blk_n[s] && (best == v->nsrc || blk_s[s] > blk_s[best]))
            best = s;
    if (best == v->nsrc)
        goto out;
    S->ckpt_s = blk_s[best];
    S->ckpt_calls = blk_n[best];
    /* its loop time: complete training steps, eval runs, blocking saves */
    S->ckpt_loop_s = L[best].train_s + L[best].eval_s + S->ckpt_s;
    if (L[best].train_n)
        S->ckpt_step_s = L[best].train_s / (double)L[best].train_n;
    /* its checkpoints: consecutive saves at the same step are one (the
     * Hugging Face Trainer saves the optimizer, the scheduler and the RNG
     * states in calls of their own); their medians: time, bytes, steps
     * from one to the next */
    size_t k = 0, kb = 0, ks = 0, ng = 0;
    double *gb = tmp + nsaves, *gs = tmp + 2 * nsaves;
    double bytes = 0, bytes_s = 0, cpu = 0, cpu_s = 0;
    double g_step = NAN, g_d = 0, g_b = 0;
    bool g_bknown = true;
    for (size_t i = 0; i <= nev; i++) {
        bool end = i == nev;
        if (!end && (!is_save(&ev[i]) || ev[i].source != best || !blocking(ev[i].json) ||
                     !in_loop(L, &ev[i])))
            continue;
        double d = end ? NAN : tm_event_num(ev[i].json, "dur_s");
        double b = end ? NAN : tm_event_num(ev[i].json, "bytes");
        double c = end ? NAN : tm_event_num(ev[i].json, "cpu_s");
        double n = end ? NAN : tm_event_num(ev[i].json, "step");
        if (!end && isnan(d))
            continue;
        if (!end && strstr(ev[i].json, "\"to\":\"memory\""))
            S->ckpt_to_memory++;
        if (!end && strstr(ev[i].json, "\"via\":\"torch.distributed.checkpoint.async_save\""))
            S->ckpt_async++;
        if (ng && (end || isnan(n) || n != g_step)) { /* the checkpoint before ends */
            tmp[k++] = g_d;
            if (g_bknown)
                gb[kb++] = g_b;
            if (!isnan(g_step) && !isnan(n) && n > g_step)
                gs[ks++] = n - g_step;
            ng = 0;
        }
        if (end)
            break;
        if (ng == 0) {
            g_step = n;
            g_d = g_b = 0;
            g_bknown = true;
        }
        ng++;
        g_d += d;
        if (isnan(b))
            g_bknown = false;
        else {
            g_b += b;
            bytes += b;
            bytes_s += d;
        }
        if (!isnan(c)) {
            cpu += c < d ? c : d;
            cpu_s += d;
        }
    }
    S->ckpt_saves = k;
    S->ckpt_median_s = tm_runsum_median(tmp, k);
    S->ckpt_bytes = tm_runsum_median(gb, kb);
    S->ckpt_every_steps = tm_runsum_median(gs, ks);
    if (bytes_s > 0)
        S->ckpt_write_bps = bytes / bytes_s;
    if (cpu_s > 0)
        S->ckpt_cpu_share = cpu / cpu_s;
out:
    free(L);
    free(blk_s);
    free(blk_n);
    free(tmp);
}
