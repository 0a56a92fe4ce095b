/*
 * infer.h - inference loops (inference.c): a process that never trains
 * has its DataLoader batches as its steps.
 */
#ifndef TM_INFER_H
#define TM_INFER_H

#include <stddef.h>

#include "trainmon.h"

/* Whether the step records st[0..n) of one training process, with the
 * details of its inproc.boundaries event (NULL: none, the process did not
 * stop normally: false), are an inference loop's: no step ended by a
 * backward pass or an optimizer step, a record of a DataLoader batch (an
 * eval record with batches >= 1, or a loader-ended step), and an event
 * that saw no backward pass, no optimizer step and no optimizer made. */
bool tm_infer_is_inference(const tm_run_step *st, size_t n, const char *boundaries);

/* Makes the DataLoader batches in st[0..n) (eval records of batches and
 * loader-ended steps) the process's loader-ended training steps, numbered
 * 0, 1, ... in order where none was a training step (else their numbers
 * kept); returns how many.  Call it only where tm_infer_is_inference said so. */
size_t tm_infer_convert(tm_run_step *st, size_t n);

/* Both, for every training source of a loaded run (tm_run_load), unless
 * a process of the run trained: sets each inference source's `inference`
 * to its steps.  steps are grouped by source in source order. */
void tm_infer_run(tm_run_source *src, size_t nsrc, tm_run_step *steps, size_t nsteps,
                  const tm_run_event *ev, size_t nev);

#endif
