/*
 * anatomy.h - the memory anatomy records of a run (TM_REC_ANATOMY, issue
 * #16) as the report, the rules and /metrics read them: the latest record
 * of each (record file, device), and what it adds up to.  A process writes
 * one record per device at the lead optimizer's first step and again when a
 * later check finds the bytes changed: the latest is what the device holds
 * now.  Internal.
 */
#ifndef TM_ANATOMY_H
#define TM_ANATOMY_H

#include <stddef.h>
#include <stdint.h>

#include "trainmon.h"

/* No run reports more devices than this (a process on 8 GPUs and the CPU,
 * 8 processes per host and more hosts still fit); the rest are left out. */
#define TM_ANAT_MAX 256

/* The latest anatomy record of each (source, kind, device) of source
 * (UINT32_MAX: every source), in source order then first appearance, into
 * out[0..cap): pointers into the run, valid while it is.  Returns how many
 * were stored. */
size_t tm_anat_latest(const tm_run *r, uint32_t source, const tm_run_anatomy **out, size_t cap);

/* Bytes the record accounts for: parameters, gradients, optimizer state,
 * unknown and, when measured, activations. */
double tm_anat_accounted(const tm_inproc_anatomy *a);

/* "cuda:0", "cpu": the device's name, into buf. */
void tm_anat_device(char *buf, size_t cap, const tm_inproc_anatomy *a);

/* "8.1 KiB", "1.50 GiB", "512 B"; "n/a" when not finite. */
void tm_anat_bytes(char *buf, size_t cap, double v);

#endif
