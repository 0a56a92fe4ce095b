/*
 * cgmark.c - callgrind client requests for bench/agent_loops.py (loaded
 * with ctypes).  The bench runs under `valgrind --tool=callgrind
 * --instr-atstart=no`: start-up (the torch import) runs uninstrumented, and
 * each measured loop is bracketed by cg_begin() and cg_end(label), so that
 * every dump holds exactly one loop's instructions.  Outside valgrind the
 * requests are a few no-op instructions.
 *
 * cg_clock_ns(clock, n) is the native cost of one clock_gettime(clock)
 * (best of 5 runs of n reads), for converting the clock reads counted
 * under valgrind, where none goes through the vDSO, to time; cg_tsc_ns(n)
 * the same for a read of the time-stamp counter.
 */
#include <time.h>

#include <valgrind/callgrind.h>
#include <valgrind/valgrind.h>

int cg_running(void);
void cg_begin(void);
void cg_end(const char *label);
double cg_clock_ns(int clock, int n);
double cg_tsc_ns(int n);

int cg_running(void)
{
    return (int)RUNNING_ON_VALGRIND;
}

void cg_begin(void)
{
    CALLGRIND_START_INSTRUMENTATION;
    CALLGRIND_ZERO_STATS;
}

void cg_end(const char *label)
{
    CALLGRIND_DUMP_STATS_AT(label);
    CALLGRIND_STOP_INSTRUMENTATION;
}

static double mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

double cg_clock_ns(int clock, int n)
{
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        struct timespec ts;
        double t0 = mono_ns();
        for (int i = 0; i < n; i++)
            clock_gettime((clockid_t)clock, &ts);
        double per = (mono_ns() - t0) / (double)n;
        if (per < best)
            best = per;
    }
    return best;
}

/* cg_tsc_ns(n): the native cost of one read of the time-stamp counter
 * (rdtsc, the agent's clock between anchors: src/lib/fastclock.h), best of
 * 5 runs of n reads; 0 where there is none (not x86-64). */
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
double cg_tsc_ns(int n)
{
#if defined(__x86_64__)
    double best = 1e30;
    unsigned long long sink = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = mono_ns();
        for (int i = 0; i < n; i++)
            sink += __rdtsc();
        double per = (mono_ns() - t0) / (double)n;
        if (per < best)
            best = per;
    }
    return sink ? best : best; /* sink: the reads are not optimized out */
#else
    (void)n;
    return 0;
#endif
}
