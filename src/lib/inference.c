/*
 * inference.c - a process that never trains is an inference loop, and its
 * batches are its steps (docs/DIAGNOSIS.md, "Inference loops").
 *
 * The step model records a DataLoader batch fetched with grad disabled as
 * an eval batch, apart from the training steps: right for a training
 * job's evaluation, and wrong for a job that only evaluates.  Batch
 * scoring, embedding extraction, offline evaluation (`trainer.validate()`,
 * `Trainer.evaluate()`, `predict()`) all run under `torch.no_grad()` or
 * `inference_mode()`, and had no step at all: the report said "no steps to
 * judge ... iterate a DataLoader" of a loop that did, and said nothing of
 * the GPU that waited for its data, which is the question such a job asks.
 *
 * Only the whole process can tell an inference job from a training job
 * that evaluates before it trains (Lightning's sanity check, a baseline
 * eval): so the reader decides, per process, once its file is loaded.  A
 * process is an inference loop when
 *
 *   - it has no step record ended by a backward pass or an optimizer step
 *     (complete or closed at exit),
 *   - it has a record of a DataLoader batch: an eval record with batches
 *     >= 1 (a model.eval() span without a batch is no step of anyone's),
 *     or a loader-ended step (the HF Trainer's evaluate() and predict()
 *     fetch with grad enabled and run no_grad inside: the step model
 *     already made those steps), and
 *   - its inproc.boundaries event, written when it stopped, counted no
 *     backward pass, no optimizer step and no optimizer made: a job that
 *     made an optimizer trains, even one that died before its first step.
 *     A process that did not stop normally wrote no event and is not
 *     claimed (a training job killed in its warm-up eval looks the same),
 *   - and no process of the run trained: a trainer's separate scoring
 *     process (or a helper that took one batch) stays eval, out of the
 *     training verdict.
 *
 * Its eval records of batches then become loader-ended training steps,
 * numbered in order where the agent numbered none, and everything downstream (the step accounting,
 * the rules, the exports) reads them as such; the source's `inference` says how many, for the
 * report to say what its steps are.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"
#include "runsum.h"
#include "util.h"

/* A batch the process fetched: an eval record of a DataLoader batch, or a
 * loader-ended training step (a loop that fetches with grad enabled and
 * never runs a backward pass: the HF Trainer's evaluate() and predict()). */
static bool is_batch(const tm_inproc_step *s)
{
    return (s->phase == TM_STEP_EVAL && s->batches >= 1) ||
           (s->phase == TM_STEP_TRAIN && s->boundary == TM_STEP_BY_LOADER);
}

/* Whether a training process's records or its boundaries event say it
 * trained: a step ended by a backward pass or an optimizer step, or
 * backward passes, optimizer steps or optimizers made in the event. */
static bool trains(const tm_run_step *st, size_t n, const char *boundaries)
{
    for (size_t i = 0; i < n; i++)
        if (st[i].s.phase != TM_STEP_EVAL &&
            (st[i].s.phase != TM_STEP_TRAIN || st[i].s.boundary != TM_STEP_BY_LOADER))
            return true;
    static const char *const keys[] = {"backward_passes", "optimizer_steps", "optimizers_made"};
    for (size_t k = 0; boundaries && k < sizeof keys / sizeof *keys; k++) {
        double v = tm_event_num(boundaries, keys[k]);
        if (!isnan(v) && v > 0)
            return true;
    }
    return false;
}

bool tm_infer_is_inference(const tm_run_step *st, size_t n, const char *boundaries)
{
    /* no event: the process was killed (a preempted training job killed in
     * its warm-up eval looks the same): not claimed */
    if (!boundaries || trains(st, n, boundaries))
        return false;
    for (size_t i = 0; i < n; i++)
        if (is_batch(&st[i].s))
            return true;
    return false;
}

size_t tm_infer_convert(tm_run_step *st, size_t n)
{
    /* a process with loader-ended steps keeps their numbers (a ring file's
     * highest says how many it dropped); eval records alone, all numbered
     * 0 by the agent, are numbered in order */
    bool numbered = false;
    for (size_t i = 0; i < n && !numbered; i++)
        numbered = st[i].s.phase == TM_STEP_TRAIN;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step *s = &st[i].s;
        if (!is_batch(s))
            continue;
        s->phase = TM_STEP_TRAIN;
        s->boundary = TM_STEP_BY_LOADER;
        if (!numbered)
            s->step = k;
        k++;
        s->micro_batches = 0;
    }
    return k;
}

void tm_infer_run(tm_run_source *src, size_t nsrc, tm_run_step *steps, size_t nsteps,
                  const tm_run_event *ev, size_t nev)
{
    /* each source's last boundaries event, in one pass */
    const char **bnd = calloc(nsrc ? nsrc : 1, sizeof *bnd);
    if (!bnd)
        return; /* out of memory: the records as written */
    for (size_t i = 0; i < nev; i++)
        if (ev[i].source < nsrc && ev[i].name && !strcmp(ev[i].name, "inproc.boundaries"))
            bnd[ev[i].source] = ev[i].json ? ev[i].json : "";
    /* A run in which any process trained is a training run: a process of
     * it that only scored (a separate evaluation script, a helper that
     * took one batch) stays eval, out of the training verdict. */
    for (size_t b = 0, e; b < nsteps; b = e) {
        uint32_t s = steps[b].source;
        for (e = b; e < nsteps && steps[e].source == s;)
            e++;
        if (s < nsrc && tm_rec_is_training(&src[s].header) && trains(steps + b, e - b, bnd[s]))
            goto out;
    }
    for (size_t s = 0; s < nsrc; s++) /* trained without a step record */
        if (tm_rec_is_training(&src[s].header) && bnd[s] && trains(NULL, 0, bnd[s]))
            goto out;
    for (size_t b = 0, e; b < nsteps; b = e) {
        uint32_t s = steps[b].source;
        for (e = b; e < nsteps && steps[e].source == s;)
            e++;
        if (s < nsrc && tm_rec_is_training(&src[s].header) &&
            tm_infer_is_inference(steps + b, e - b, bnd[s]))
            src[s].inference = tm_infer_convert(steps + b, e - b);
    }
out:
    free(bnd);
}
