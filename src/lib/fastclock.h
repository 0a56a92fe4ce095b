/* fastclock: CLOCK_MONOTONIC nanoseconds from the CPU's time-stamp counter,
 * for the in-process agent's hot path (issue #14).
 *
 * The model.  A CLOCK_MONOTONIC read through the vDSO is the counter read
 * (rdtsc) plus the kernel's conversion behind a sequence lock: 27-33 ns on
 * the 2-core VM of docs/BENCHMARKS.md, against 12 ns for rdtsc alone.  The
 * agent reads the clock 3-18 times a training step (data wait, backward,
 * the optimizer step), a quarter of its cost per step.  So within a step
 * it reads the counter and converts it itself:
 *
 *     ns = anchor_ns + (tsc - anchor_tsc) * mult / 2^32
 *
 * where (anchor_tsc, anchor_ns) is a pair read together at the last anchor
 * (tm_fastclock_step_end: the end of a training step TM_FASTCLOCK_STEP_NS
 * or more after the last anchor, and any read more than
 * TM_FASTCLOCK_SPAN_NS after it; the counter is read
 * before and after the clock, and a pair whose two reads are more than
 * TM_FASTCLOCK_PAIR_NS apart, preempted or faulted in between, is not
 * used: a process's first clock read faults in the vDSO, and one such pair
 * as the baseline was seen to put the rate 117 ppm off), and mult is nanoseconds
 * per tick over a long baseline (from a pair at least TM_FASTCLOCK_CALIB_NS
 * old, rotated every TM_FASTCLOCK_ROTATE_NS so that the kernel's own rate
 * adjustments, NTP's, are followed).  Between anchors the error is the
 * rate's error times the time since the anchor.  The rate's error is at
 * most the two pairs' half widths over the baseline: 5 ppm for the widest
 * pairs allowed over the first 200 ms baseline, ~0.1 ppm for the usual
 * 60 ns pairs, ~0.03 ppm from 30 s on; so under a microsecond over a 1 s
 * step.  The clock is re-read at every anchor, so errors never add up, and
 * each anchor checks the converted time against it (TM_FASTCLOCK_AGREE_NS
 * plus TM_FASTCLOCK_AGREE_PPM of the time since the last anchor): one off
 * by more (the kernel slewing its clock faster than the baseline follows,
 * NTP's or chrony's correction of an offset) calibrates again from that
 * anchor, every read a clock_gettime for TM_FASTCLOCK_CALIB_NS.
 *
 * When.  Only where the kernel itself keeps CLOCK_MONOTONIC from the
 * counter (clocksource "tsc": it found the counter invariant and in step
 * across CPUs), on x86-64, and where the process may read it (prctl
 * PR_GET_TSC).  Everywhere else, and for good once the counter goes back
 * or TM_FASTCLOCK_RECALIB_MAX calibrations have each ended in a
 * disagreement (a migrated VM, a counter the kernel gave up on later),
 * every read is clock_gettime, as before.
 *
 * tm_fastclock_update is the arithmetic as a pure function of the pair
 * read (tests/unit/test_fastclock.c checks it with hand-computed numbers);
 * tm_fastclock_now is the inline read, never earlier than the one before
 * it (tm_fastclock_ret).  Not thread-safe: the agent reads
 * it with the GIL held. */
#ifndef TM_FASTCLOCK_H
#define TM_FASTCLOCK_H

#include <stdint.h>

#include "trainmon.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define TM_FASTCLOCK_TSC 1
#else
#define TM_FASTCLOCK_TSC 0
#endif

/* the baseline must be this old before counter reads are converted */
#define TM_FASTCLOCK_CALIB_NS 200000000LL /* 200 ms: rate error <= 5e-6 */
/* a read this long after the last anchor anchors again */
#define TM_FASTCLOCK_SPAN_NS 1000000000LL /* 1 s */
/* a step's end this long after the last anchor anchors again; a shorter
 * step's end is a counter read.  A pair costs two counter reads, a
 * clock_gettime and the arithmetic (~80 ns on the VMs of
 * docs/BENCHMARKS.md, 8 % of the agent's 1 us a step on a 1 ms step);
 * one every 10 ms keeps a read within the rate's error times 10 ms of the
 * clock: 50 ns with the widest pairs over the first 200 ms baseline, ~1 ns
 * with the usual ones.  A kernel slewing its clock is seen at the next
 * anchor, 10 ms later at most (a step's end) or 1 s (any read). */
#define TM_FASTCLOCK_STEP_NS 10000000LL /* 10 ms */
/* the baseline moves to a pair at least this old, once it is twice as old */
#define TM_FASTCLOCK_ROTATE_NS 30000000000LL /* 30 s */
/* a pair whose counter reads are further apart is not used (the
 * environment's TRAINMON_FASTCLOCK_PAIR_NS sets another bound: under
 * valgrind, bench/agent_cost.py, a clock read takes microseconds) */
#define TM_FASTCLOCK_PAIR_NS 1000LL
#define TM_FASTCLOCK_PAIR_TICKS_CALIB 4096u /* before the rate is known: >= 1 us at 4 GHz */
/* this many pairs not used while calibrating: off for good */
#define TM_FASTCLOCK_CALIB_BAD 64u
/* an anchor whose converted time is off the clock by more than
 * AGREE_NS + the pair's width + AGREE_PPM of the time since the last
 * anchor: calibrated again; the RECALIB_MAX-th time, off for good */
#define TM_FASTCLOCK_AGREE_NS 10000LL /* 10 us */
#define TM_FASTCLOCK_AGREE_PPM 20     /* 4x the first baseline's worst rate error */
#define TM_FASTCLOCK_RECALIB_MAX 8u

enum {
    TM_FASTCLOCK_OFF = 0, /* every read is clock_gettime */
    TM_FASTCLOCK_CALIB,   /* counter usable; the baseline is too young yet */
    TM_FASTCLOCK_ON,      /* counter reads converted */
};

typedef struct {
    int state;           /* TM_FASTCLOCK_* */
    const char *off_why; /* why OFF (a static string), NULL when not off */
    uint64_t span_ticks; /* TM_FASTCLOCK_SPAN_NS in ticks (ON) */
    uint64_t step_ticks; /* TM_FASTCLOCK_STEP_NS in ticks (ON) */
    uint64_t mult;       /* ns per tick, 32.32 fixed point (ON) */
    uint64_t tsc0;       /* the last anchor */
    int64_t ns0;
    uint64_t base_tsc; /* the rate's baseline */
    int64_t base_ns;
    uint64_t mid_tsc; /* the next baseline (rotation) */
    int64_t mid_ns;
    uint64_t pair_ticks; /* pair_ns in ticks (ON), else the CALIB bound */
    int64_t pair_ns;     /* TM_FASTCLOCK_PAIR_NS, or the environment's */
    uint64_t pair_calib; /* the bound in ticks before the rate is known */
    uint64_t tsc_reads;  /* counter reads (the agent's cost: bench/agent_cost.py) */
    uint64_t anchors;    /* pairs read */
    uint64_t bad_pairs;  /* pairs not used (their reads too far apart) */
    uint32_t calib_bad;  /* ... of them in this calibration */
    uint32_t recalibs;   /* disagreements that calibrated again */
    int64_t last;        /* the latest time returned: no read goes back */
} tm_fastclock;

/* Decides whether the counter may be used here and reads the first pair. */
void tm_fastclock_init(tm_fastclock *c);

/* The arithmetic of an anchor: the clock read ns between the counter reads
 * tsc_a and tsc_b.  Updates the baseline and the rate, checks the
 * agreement, returns ns. */
int64_t tm_fastclock_update(tm_fastclock *c, uint64_t tsc_a, int64_t ns, uint64_t tsc_b);

/* ticks after the anchor -> ns after it (ON) */
static inline int64_t tm_fastclock_conv(const tm_fastclock *c, uint64_t ticks)
{
    return (int64_t)(((unsigned __int128)ticks * c->mult) >> 32);
}

/* t, or the latest time returned if that is later: a converted read may
 * run up to the rate's error (well under a microsecond) ahead of the
 * clock's next reading, and a step's parts must not end before they begin */
static inline int64_t tm_fastclock_ret(tm_fastclock *c, int64_t t)
{
    if (t < c->last)
        t = c->last;
    c->last = t;
    return t;
}

/* Reads a pair now and anchors on it (the end of a step). */
static inline int64_t tm_fastclock_anchor(tm_fastclock *c)
{
#if TM_FASTCLOCK_TSC
    if (c->state != TM_FASTCLOCK_OFF) {
        uint64_t a = __rdtsc();
        int64_t ns = tm_now_mono_ns();
        c->tsc_reads += 2;
        return tm_fastclock_ret(c, tm_fastclock_update(c, a, ns, __rdtsc()));
    }
#endif
    return tm_fastclock_ret(c, tm_now_mono_ns());
}

/* CLOCK_MONOTONIC ns now: converted while the last anchor is less than
 * span_ticks old, else an anchor. */
static inline int64_t tm_fastclock_read(tm_fastclock *c, uint64_t span_ticks)
{
#if TM_FASTCLOCK_TSC
    if (c->state == TM_FASTCLOCK_ON) {
        uint64_t d = __rdtsc() - c->tsc0;
        c->tsc_reads++;
        if (d < span_ticks)
            return tm_fastclock_ret(c, c->ns0 + tm_fastclock_conv(c, d));
    }
    return tm_fastclock_anchor(c);
#else
    (void)span_ticks;
    return tm_fastclock_ret(c, tm_now_mono_ns());
#endif
}

/* CLOCK_MONOTONIC ns now. */
static inline int64_t tm_fastclock_now(tm_fastclock *c)
{
    return tm_fastclock_read(c, c->span_ticks);
}

/* CLOCK_MONOTONIC ns at a step's end: an anchor when the last is
 * TM_FASTCLOCK_STEP_NS old or more. */
static inline int64_t tm_fastclock_step_end(tm_fastclock *c)
{
    return tm_fastclock_read(c, c->step_ticks);
}

#endif
