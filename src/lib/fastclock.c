/* fastclock: the anchors of the counter-derived clock (the model is in
 * fastclock.h). */
#include "fastclock.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

/* ns per tick in 32.32, within 0.01-10 ns a tick (100 GHz-100 MHz) */
#define MULT_MIN 42949672.0    /* 0.01 * 2^32 */
#define MULT_MAX 42949672960.0 /* 10 * 2^32 */

static int64_t off(tm_fastclock *c, const char *why, int64_t ns)
{
    c->state = TM_FASTCLOCK_OFF;
    c->off_why = why;
    return ns;
}

int64_t tm_fastclock_update(tm_fastclock *c, uint64_t tsc_a, int64_t ns, uint64_t tsc_b)
{
    c->anchors++;
    if (c->state == TM_FASTCLOCK_OFF)
        return ns;
    if (tsc_b < tsc_a || tsc_a < c->tsc0)
        return off(c, "the time-stamp counter went back", ns);
    uint64_t bound = c->state == TM_FASTCLOCK_ON ? c->pair_ticks
                     : c->pair_calib             ? c->pair_calib
                                                 : TM_FASTCLOCK_PAIR_TICKS_CALIB;
    if (tsc_b - tsc_a > bound) { /* not a pair: the clock's own reading stands */
        c->bad_pairs++;
        /* while calibrating every read is a pair: where they are never
         * close (a clock read that is a slow system call), stop paying */
        if (c->state == TM_FASTCLOCK_CALIB && ++c->calib_bad >= TM_FASTCLOCK_CALIB_BAD)
            return off(c, "counter and clock reads are never close together", ns);
        return ns;
    }
    uint64_t tsc = tsc_a + (tsc_b - tsc_a) / 2;
    if (c->state == TM_FASTCLOCK_ON) {
        /* The converted time against the clock's (see fastclock.h). */
        int64_t el = ns - c->ns0;
        uint64_t d = tsc - c->tsc0;
        if (el < 0 || d > (uint64_t)INT64_MAX >> 8)
            return off(c, "the time-stamp counter disagrees with CLOCK_MONOTONIC", ns);
        int64_t dev = c->ns0 + tm_fastclock_conv(c, d) - ns;
        if (dev < 0)
            dev = -dev;
        int64_t pair = c->pair_ns; /* the midpoint's uncertainty, at most */
        if (dev > TM_FASTCLOCK_AGREE_NS + pair + el / (1000000 / TM_FASTCLOCK_AGREE_PPM)) {
            if (++c->recalibs >= TM_FASTCLOCK_RECALIB_MAX)
                return off(c, "the time-stamp counter keeps disagreeing with CLOCK_MONOTONIC", ns);
            /* the kernel's rate moved: a new baseline from this pair */
            c->state = TM_FASTCLOCK_CALIB;
            c->calib_bad = 0;
            c->tsc0 = c->base_tsc = c->mid_tsc = tsc;
            c->ns0 = c->base_ns = c->mid_ns = ns;
            return ns;
        }
    }
    /* the baseline follows the kernel's rate: moved to the pair taken
     * ROTATE ago, so it is 30-60 s old from then on */
    if (ns - c->mid_ns >= TM_FASTCLOCK_ROTATE_NS) {
        c->base_tsc = c->mid_tsc;
        c->base_ns = c->mid_ns;
        c->mid_tsc = tsc;
        c->mid_ns = ns;
    }
    int64_t span_ns = ns - c->base_ns;
    if (span_ns >= TM_FASTCLOCK_CALIB_NS && tsc > c->base_tsc) {
        double m = (double)span_ns / (double)(tsc - c->base_tsc) * 4294967296.0;
        if (!(m >= MULT_MIN && m <= MULT_MAX))
            return off(c, "the time-stamp counter's rate is out of range", ns);
        c->mult = (uint64_t)m;
        c->span_ticks = (uint64_t)((double)TM_FASTCLOCK_SPAN_NS / m * 4294967296.0);
        c->step_ticks = (uint64_t)((double)TM_FASTCLOCK_STEP_NS / m * 4294967296.0);
        c->pair_ticks =
            (uint64_t)((double)(c->pair_ns ? c->pair_ns : TM_FASTCLOCK_PAIR_NS) / m * 4294967296.0);
        c->state = TM_FASTCLOCK_ON;
    }
    c->tsc0 = tsc;
    c->ns0 = ns;
    return ns;
}

/* the kernel keeps CLOCK_MONOTONIC from the counter */
static int clocksource_is_tsc(void)
{
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return 0;
    char buf[16];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strcmp(buf, "tsc\n") == 0 || strcmp(buf, "tsc") == 0;
}

void tm_fastclock_init(tm_fastclock *c)
{
    memset(c, 0, sizeof *c);
    c->state = TM_FASTCLOCK_OFF;
#if TM_FASTCLOCK_TSC
    const char *e = getenv("TRAINMON_FASTCLOCK");
    int mode = PR_TSC_ENABLE;
    if (e && strcmp(e, "0") == 0) {
        c->off_why = "TRAINMON_FASTCLOCK=0";
        return;
    }
    if (prctl(PR_GET_TSC, &mode, 0, 0, 0) == 0 && mode != PR_TSC_ENABLE) {
        c->off_why = "the process may not read the time-stamp counter (prctl PR_SET_TSC)";
        return;
    }
    if (!clocksource_is_tsc()) {
        c->off_why = "the kernel's clocksource is not tsc";
        return;
    }
    const char *pe = getenv("TRAINMON_FASTCLOCK_PAIR_NS");
    long long pns = pe ? atoll(pe) : 0;
    c->pair_ns = pns > 0 && pns <= 1000000000LL ? pns : TM_FASTCLOCK_PAIR_NS;
    /* before the rate is known: 4096 ticks a microsecond (4 GHz) */
    c->pair_calib =
        ((uint64_t)c->pair_ns * TM_FASTCLOCK_PAIR_TICKS_CALIB + TM_FASTCLOCK_PAIR_NS - 1) /
        TM_FASTCLOCK_PAIR_NS;
    /* The first pair: the clock read once before (the vDSO's first read
     * faults it in), then the closest of up to four pairs. */
    (void)tm_now_mono_ns();
    uint64_t best = UINT64_MAX, tsc = 0;
    int64_t ns = 0;
    for (int i = 0; i < 4 && best > c->pair_calib / 4; i++) {
        uint64_t a = __rdtsc();
        int64_t n = tm_now_mono_ns();
        uint64_t b = __rdtsc();
        if (b >= a && b - a < best) {
            best = b - a;
            tsc = a + (b - a) / 2;
            ns = n;
        }
    }
    if (best > c->pair_calib) {
        c->off_why = "no close pair of counter and clock reads";
        return;
    }
    c->state = TM_FASTCLOCK_CALIB;
    c->tsc0 = c->base_tsc = c->mid_tsc = tsc;
    c->ns0 = c->base_ns = c->mid_ns = ns;
#else
    c->off_why = "not an x86-64 build";
#endif
}
