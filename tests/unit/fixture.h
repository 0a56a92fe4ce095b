/*
 * fixture.h - a run directory written the way trainmon writes one, for the
 * unit tests of the timeline, the summary and the rules (test_report.c,
 * test_rules_cache.c, test_rules_mount.c, test_anatomy.c, test_probe.c,
 * test_machine.c): record files made with
 * tm_rec_* and tm_inproc_encode_* as the sampler and the CPython extension
 * make them, then loaded and analysed.
 *
 * Include it after <cmocka.h> and the library headers, with FX_NAME
 * defined to the test's name (the temporary directory's prefix).  Every
 * time in a fixture is seconds after T0, a monotonic base taken at setup.
 * FX_OWN_SETUP leaves setup() and teardown() to the includer (it must
 * still fill dir and T0).  The functions are static and marked unused: a
 * test takes the ones it needs.
 */
#ifndef TM_TEST_FIXTURE_H
#define TM_TEST_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_UNUSED __attribute__((unused))
#define S_NS 1000000000LL
#define MiB (1024.0 * 1024.0)
#define GiB (1024.0 * 1024.0 * 1024.0)

static char dir[256];
static int64_t T0; /* monotonic base of every fixture */

#ifndef FX_OWN_SETUP
static FX_UNUSED int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/%s.XXXXXX", FX_NAME);
    if (!mkdtemp(dir))
        return -1;
    T0 = tm_now_mono_ns();
    return 0;
}
#endif

static FX_UNUSED int teardown(void **st)
{
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static FX_UNUSED tm_rec *open_rec(const char *file, const char *role, int rank)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tm_rec_opts o = {.role = role, .rank = rank};
    tm_rec *w = NULL;
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    return w;
}

static FX_UNUSED int64_t at(double s)
{
    return T0 + (int64_t)(s * (double)S_NS);
}

/* Steps of dur seconds, of which wait waiting for data, from time start. */
static FX_UNUSED void put_steps(tm_rec *w, size_t n, double start, double dur, double wait)
{
    uint8_t buf[64];
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = at(start + (double)i * dur),
                            .end_ns = at(start + (double)(i + 1) * dur),
                            .data_wait_ns = (int64_t)(wait * (double)S_NS)};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
}

/* One point of a system series at time t. */
static FX_UNUSED void put_value(tm_rec *w, double t, const char *name, const char *labels, double v)
{
    int id = tm_rec_series(w, name, labels, "");
    assert_true(id > 0);
    uint32_t u = (uint32_t)id;
    assert_int_equal(tm_rec_sample(w, at(t), &u, &v, 1), 0);
}

/* Batches of one worker: fetch seconds each, busy CPU share of it. */
static FX_UNUSED void put_worker_batches(tm_rec *w, int id, unsigned pid, size_t n, double fetch,
                                         double busy, double rss0, double rss_step)
{
    uint8_t buf[64];
    for (size_t b = 0; b < n; b++) {
        tm_inproc_worker k = {.worker_id = id,
                              .pid = pid,
                              .batch = b,
                              .start_ns = at((double)b * fetch),
                              .end_ns = at((double)(b + 1) * fetch),
                              .cpu_s = busy * fetch * (double)(b + 1),
                              .rss_bytes = rss0 + rss_step * (double)b};
        int len = tm_inproc_encode_worker(&k, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_WORKER, k.end_ns, buf, (uint32_t)len), 0);
    }
}

/* A worker's own record file (worker-r<rank>-<pid>.tmr), as the
 * extension writes it in each DataLoader worker. */
static FX_UNUSED void put_worker_file(int id, unsigned pid, size_t n, double fetch, double busy,
                                      double rss0, double rss_step)
{
    char file[64], role[32];
    snprintf(file, sizeof file, "worker-r0-%u.tmr", pid);
    snprintf(role, sizeof role, "worker%d", id);
    tm_rec *w = open_rec(file, role, 0);
    put_worker_batches(w, id, pid, n, fetch, busy, rss0, rss_step);
    tm_rec_close(&w);
}

/* A per-process series point as trainmon run records it (sysrec_procs.c). */
static FX_UNUSED void put_proc(tm_rec *w, double t, const char *name, unsigned pid, double v)
{
    char lab[64];
    snprintf(lab, sizeof lab, "pid=%u,comm=python3", pid);
    put_value(w, t, name, lab, v);
}

/* The run directory loaded and analysed (done() frees both). */
static FX_UNUSED tm_analysis *analyze(tm_run **run)
{
    const char *dirs[] = {dir};
    assert_int_equal(tm_run_load(run, dirs, 1), 0);
    tm_analysis *a = NULL;
    assert_int_equal(tm_analyze(*run, &a), 0);
    return a;
}

/* The number after "key": in a finding's evidence (NAN if absent or null). */
static FX_UNUSED double ev_num(const tm_finding *f, const char *key)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(f->evidence, pat);
    if (!p)
        return NAN;
    p += strlen(pat);
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

static FX_UNUSED void done(tm_run **run, tm_analysis **a)
{
    tm_analysis_free(a);
    tm_run_free(run);
}

/* The step model's records and the agent's gc.pause events, as test_rules_gc.c
 * and test_rules_stalls.c write them. */
/* One gc.pause event as the agent writes it, at the pause's end */
static FX_UNUSED void put_pause_in(tm_rec *w, double begin, double dur, int gen, unsigned step,
                                   bool autogc, bool in_save)
{
    char js[256];
    snprintf(js, sizeof js,
             "{\"gen\":%d,\"dur_s\":%.6f,\"collected\":0,\"step\":%u,\"train\":true,\"auto\":%s,"
             "\"in_save\":%s}",
             gen, dur, step, autogc ? "true" : "false", in_save ? "true" : "false");
    assert_int_equal(tm_rec_event(w, at(begin + dur), "gc.pause", js), 0);
}

static FX_UNUSED void put_pause(tm_rec *w, double begin, double dur, int gen, unsigned step,
                                bool autogc)
{
    put_pause_in(w, begin, dur, gen, step, autogc, false);
}

/* One automatic full collection as an agent that says whether it began in
 * a batch preparation span writes it (prep) */
static FX_UNUSED void put_pause_prep(tm_rec *w, double begin, double dur, unsigned step, bool prep)
{
    char js[256];
    snprintf(js, sizeof js,
             "{\"gen\":2,\"dur_s\":%.6f,\"collected\":0,\"step\":%u,\"train\":true,"
             "\"auto\":true,\"in_save\":false,\"prep\":%s}",
             dur, step, prep ? "true" : "false");
    assert_int_equal(tm_rec_event(w, at(begin + dur), "gc.pause", js), 0);
}

/* Optimizer steps one after another from time 0: dur[i] seconds each, of
 * which prep[i] the loop's own batch preparation (< 0: a loop with a
 * DataLoader and no preparation of its own, waiting wait[i] for its batch,
 * or 1 ms when wait is NULL), cpu of it on a CPU (< 0: all of it).
 * Returns the end of the last. */
static FX_UNUSED double put_steps_waiting(tm_rec *w, size_t n, const double *dur,
                                          const double *prep, const double *wait, double cpu)
{
    uint8_t buf[128];
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        bool own = prep[i] >= 0;
        int64_t p = own ? (int64_t)llround(prep[i] * 1e9) : -1;
        tm_inproc_step s = {.step = i,
                            .start_ns = at(t),
                            .end_ns = at(t + dur[i]),
                            .data_wait_ns = own    ? p
                                            : wait ? (int64_t)llround(wait[i] * 1e9)
                                                   : 1000000,
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = own ? 0 : 1,
                            .prep_ns = p,
                            .prep_cpu_ns = own && cpu >= 0 ? (int64_t)llround(cpu * 1e9) : p,
                            .backward_ns = -1,
                            .wait_cpu_ns = -1,
                            .collective_ns = -1,
                            .opt_start_ns = at(t + dur[i]) - 1000,
                            .optimizer = 0};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
        t += dur[i];
    }
    return t;
}

/* One optimizer step of a DataLoader loop, number i, from t for dur
 * seconds, 1 ms of it waiting for its batch (steps with gaps between:
 * what a save or an eval run took out of the loop) */
static FX_UNUSED void put_loader_step_at(tm_rec *w, size_t i, double t, double dur)
{
    uint8_t buf[128];
    tm_inproc_step s = {.step = i,
                        .start_ns = at(t),
                        .end_ns = at(t + dur),
                        .data_wait_ns = 1000000,
                        .boundary = TM_STEP_BY_OPTIMIZER,
                        .phase = TM_STEP_TRAIN,
                        .micro_batches = 1,
                        .batches = 1,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = -1,
                        .wait_cpu_ns = -1,
                        .collective_ns = -1,
                        .opt_start_ns = at(t + dur) - 1000,
                        .optimizer = 0};
    int len = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
}

static FX_UNUSED double put_opt_steps_cpu(tm_rec *w, size_t n, const double *dur,
                                          const double *prep, double cpu)
{
    return put_steps_waiting(w, n, dur, prep, NULL, cpu);
}

static FX_UNUSED double put_opt_steps_of(tm_rec *w, size_t n, const double *dur, const double *prep)
{
    return put_opt_steps_cpu(w, n, dur, prep, -1);
}

/* n steps of dur s each with a DataLoader, from 0 (at most 100) */
static FX_UNUSED double put_even_steps(tm_rec *w, size_t n, double dur)
{
    double d[100], prep[100];
    assert_true(n <= 100);
    for (size_t i = 0; i < n; i++)
        d[i] = dur, prep[i] = -1;
    return put_opt_steps_of(w, n, d, prep);
}

#endif
