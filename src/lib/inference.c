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
 *     A process that did not stop normally wrote no event and is judged by
 *     its records alone.
 *
 * Its eval records of batches then become loader-ended training steps,
 * all its batch steps numbered in order, and everything downstream (the step accounting, the
 * rules, the exports) reads them as such; the source's `inference` says
 * how many, for the report to say what its steps are.
 */
#include <math.h>
#include <string.h>

#include "infer.h"
#include "runsum.h"

/* A batch the process fetched: an eval record of a DataLoader batch, or a
 * loader-ended training step (a loop that fetches with grad enabled and
 * never runs a backward pass: the HF Trainer's evaluate() and predict()). */
static bool is_batch(const tm_inproc_step *s)
{
    return (s->phase == TM_STEP_EVAL && s->batches >= 1) ||
           (s->phase == TM_STEP_TRAIN && s->boundary == TM_STEP_BY_LOADER);
}

bool tm_infer_is_inference(const tm_run_step *st, size_t n, const char *boundaries)
{
    size_t batches = 0;
    for (size_t i = 0; i < n; i++) {
        const tm_inproc_step *s = &st[i].s;
        /* a step ended by a backward pass or an optimizer step trains;
         * phase 0 is a file before the step model, where every record
         * was a training step */
        if (s->phase != TM_STEP_EVAL &&
            (s->phase != TM_STEP_TRAIN || s->boundary != TM_STEP_BY_LOADER))
            return false;
        batches += is_batch(s);
    }
    if (!batches)
        return false;
    if (!boundaries)
        return true;
    static const char *const trains[] = {"backward_passes", "optimizer_steps", "optimizers_made"};
    for (size_t k = 0; k < sizeof trains / sizeof *trains; k++) {
        double v = tm_runsum_event_num(boundaries, trains[k]);
        if (!isnan(v) && v > 0) /* absent (an older agent): not known to train */
            return false;
    }
    return true;
}

size_t tm_infer_convert(tm_run_step *st, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step *s = &st[i].s;
        if (!is_batch(s))
            continue;
        s->phase = TM_STEP_TRAIN;
        s->boundary = TM_STEP_BY_LOADER;
        s->step = k++;
        s->micro_batches = 0;
    }
    return k;
}

void tm_infer_run(tm_run_source *src, size_t nsrc, tm_run_step *steps, size_t nsteps,
                  const tm_run_event *ev, size_t nev)
{
    size_t b = 0;
    while (b < nsteps) {
        uint32_t s = steps[b].source;
        size_t e = b;
        while (e < nsteps && steps[e].source == s)
            e++;
        if (s < nsrc && tm_rec_is_training(&src[s].header)) {
            const char *bnd = NULL; /* the last one the process wrote */
            for (size_t i = 0; i < nev; i++)
                if (ev[i].source == s && ev[i].name && !strcmp(ev[i].name, "inproc.boundaries"))
                    bnd = ev[i].json ? ev[i].json : "";
            if (tm_infer_is_inference(steps + b, e - b, bnd))
                src[s].inference = tm_infer_convert(steps + b, e - b);
        }
        b = e;
    }
}
