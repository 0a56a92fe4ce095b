/*
 * test_report.c - the run timeline (src/lib/timeline.c), the run summary
 * (src/lib/runsum.c) and the findings (src/lib/analysis.c and its rule
 * table, src/lib/rules_*.c, docs/DIAGNOSIS.md).  Each test writes a run
 * directory of record files the way the sampler and the CPython extension
 * do (tm_rec_* and tm_inproc_encode_*), loads it and asserts the finding,
 * its numbers and what must not be found.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis.h"
#include "rec.h"
#include "reportfmt.h"
#include "rules.h"
#include "series.h"
#include "trainmon.h"

#define FX_NAME "test_report"
#include "fixture.h"

struct cap {
    double allocated, reserved, peak, inactive, total, retries;
};

static void put_capture(tm_rec *w, double t, uint64_t step, struct cap c)
{
    uint8_t buf[256];
    tm_inproc_capture k = {.source = TM_CAPTURE_STEP,
                           .device = 0,
                           .step = step,
                           .allocated = c.allocated,
                           .reserved = c.reserved,
                           .peak_allocated = c.peak,
                           .active = NAN,
                           .inactive_split = c.inactive,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = c.total,
                           .num_alloc_retries = c.retries,
                           .num_ooms = NAN,
                           .host_rss = NAN,
                           .tag = "step",
                           .tag_len = 4};
    int len = tm_inproc_encode_capture(&k, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_CAPTURE, at(t), buf, (uint32_t)len), 0);
}

/* --- input */

static void test_data_wait_of_one_percent_is_input_ok(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.001);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.ok");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "info");
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.01) < 1e-6);
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    done(&run, &a);
}

/* A short job with no workers: 2 s of steps waiting 30% on the main
 * process's own fetch, and the disk sampled twice while the job's imports
 * read from a cold page cache (1.4 MB/s: both samples "at the max").  Two
 * samples are no plateau: not storage-bound (seen on a fresh CI machine
 * with Lightning and the HF Trainer). */
static void test_two_disk_samples_of_a_short_job_are_no_plateau(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 40, 0, 0.05, 0.015);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i < 2; i++)
        put_value(s, 0.5 + i, "disk.read_bytes_per_second", "device=vda", 1.4e6);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    assert_non_null(tm_analysis_find(a, "input.data_wait"));
    done(&run, &a);
}

static void test_throttled_disk_with_high_await_and_workers_in_d_state_is_disk_bound(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.06); /* 60% waiting */
    tm_rec_close(&r0);
    for (int p = 0; p < 4; p++)
        put_worker_file(p, 100u + (unsigned)p, 20, 0.5, 0.1, 200 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    assert_int_equal(tm_rec_event(s, at(0), "run_target",
                                  "{\"path\":\"/data\",\"kind\":\"block\",\"device\":\"vdb\","
                                  "\"disks\":[\"vdb\"],\"why\":\"\"}"),
                     0);
    for (int i = 0; i <= 100; i++) {
        double t = i * 0.1;
        /* A throttle holds the read rate at 50 MB/s, requests queue. */
        put_value(s, t, "disk.read_bytes_per_second", "device=vdb", 50e6 + (i % 3) * 1e5);
        put_value(s, t, "disk.read_await_seconds", "device=vdb", 0.025);
        put_value(s, t, "disk.utilization", "device=vdb", 1.0);
        put_value(s, t, "disk.queue_depth", "device=vdb", 8);
        /* The root disk is busier but is not behind the data. */
        put_value(s, t, "disk.read_bytes_per_second", "device=vda", 90e6);
        for (unsigned p = 0; p < 4; p++) {
            put_proc(s, t, "proc.process_state_d", 100 + p, (i + (int)p) % 5 ? 1 : 0);
            put_proc(s, t, "proc.process_cpu_utilization", 100 + p, 0.1);
            put_proc(s, t, "proc.process_read_bytes_per_second", 100 + p, 12.5e6);
        }
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.disk_bound");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "high");
    assert_string_equal(tm_confidence_name(f->confidence), "high");
    assert_non_null(strstr(f->evidence, "\"disk\":\"vdb\""));
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.6) < 1e-6);
    assert_true(fabs(ev_num(f, "disk_read_await_s") - 0.025) < 1e-9);
    assert_true(ev_num(f, "worker_d_state_share") >= 0.75);
    /* The loop computes 0.04 s of each 0.1 s step: it needs 2.5x the 50 MB/s. */
    double need = ev_num(f, "needed_read_bytes_per_second");
    assert_true(need > 124e6 && need < 127e6);
    assert_non_null(strstr(f->advice, "MB/s"));
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.ok"));
    done(&run, &a);
}

static void test_busy_workers_slower_than_compute_are_cpu_bound_with_a_worker_count(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.06); /* compute 0.04 s per step */
    tm_rec_close(&r0);
    for (int k = 0; k < 2; k++)
        put_worker_file(k, 200u + (unsigned)k, 50, 0.2, 0.95, 300 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 100; i++) {
        put_proc(s, i * 0.1, "proc.process_cpu_utilization", 200, 0.97);
        put_proc(s, i * 0.1, "proc.process_cpu_utilization", 201, 0.98);
        put_proc(s, i * 0.1, "proc.process_state_d", 200, 0);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_string_equal(tm_confidence_name(f->confidence), "high");
    /* 0.2 s per batch against 0.04 s of compute: 5 workers keep up. */
    assert_true(ev_num(f, "workers_needed") == 5);
    assert_true(ev_num(f, "workers_per_rank") == 2);
    assert_true(fabs(ev_num(f, "worker_cpu_per_fetch_second") - 0.95) < 1e-6);
    assert_non_null(strstr(f->advice, "num_workers=5"));
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    assert_null(tm_analysis_find(a, "host_mem.worker_growth"));
    done(&run, &a);
}

/* Time lost and the speed-up (docs/DIAGNOSIS.md "Time lost and the
 * speed-up"), by hand: 100 steps of 0.1 s, each waiting 0.06 s; step 0 is
 * warm-up, so 99 are judged: 99 x 0.06 = 5.94 s lost, of a run of 9.9 s
 * (the records' span: the step records are written at their ends,
 * 0.1 .. 10 s): 60%; with the input keeping up each step
 * would take 0.1 - 0.06 = 0.04 s, so 9.9 s / 3.96 s = 2.5x faster.  Two
 * ranks waiting alike side by side lose the same 5.94 s, not twice it. */
static void test_an_input_finding_states_time_lost_and_speedup(void **st)
{
    (void)st;
    for (int rank = 0; rank < 2; rank++) {
        char file[32], role[32];
        snprintf(file, sizeof file, "rank%d.tmr", rank);
        snprintf(role, sizeof role, "rank%d", rank);
        tm_rec *r = open_rec(file, role, rank);
        put_steps(r, 100, 0, 0.1, 0.06);
        tm_rec_close(&r);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "time_lost_s") - 5.94) < 1e-6);
    assert_true(fabs(ev_num(f, "speedup") - 2.5) < 1e-6);
    assert_true(fabs(ev_num(f, "run_s") - 9.9) < 1e-6);
    assert_true(fabs(ev_num(f, "time_lost_fraction") - 0.6) < 1e-6);
    assert_non_null(strstr(f->title, "; 5.9 s lost (60% of the run), about 2.5x faster if the "
                                     "input kept up"));
    done(&run, &a);
}

/* Under a second lost is said in its unit: 100 steps of 5 ms waiting 3 ms,
 * the first a warm-up: 99 x 3 ms = 297 ms, not "0.3 s". */
static void test_time_lost_under_a_second_is_said_in_ms(void **st)
{
    (void)st;
    tm_rec *r = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r, 100, 0, 0.005, 0.003);
    tm_rec_close(&r);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "time_lost_s") - 0.297) < 1e-9);
    assert_non_null(strstr(f->title, "; 297 ms lost (60% of the run), about 2.5x faster"));
    done(&run, &a);
}

static void test_data_wait_without_system_data_is_a_low_confidence_finding(void **st)
{
    (void)st;
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    put_steps(w, 50, 0, 0.1, 0.02);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_string_equal(tm_confidence_name(f->confidence), "low");
    assert_string_equal(tm_severity_name(f->severity), "medium");
    assert_null(tm_analysis_find(a, "input.ok"));
    done(&run, &a);
}

static void test_workers_off_cpu_without_system_data_are_not_called_disk_bound(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.05);
    tm_rec_close(&r0);
    /* Off CPU 95% of the fetch: sleeping, starved or on a disk; nothing says which. */
    put_worker_file(0, 300, 40, 0.25, 0.05, 200 * MiB, 0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_string_equal(tm_confidence_name(f->confidence), "low");
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    done(&run, &a);
}

/* Scenario (b) on a loaded machine: the worker gets a third of a core and
 * is never in D state; the disk is idle. */
/* n optimizer steps of 0.1 s with wait_ns of each waiting for data, into
 * the record file name (role), flagged flag where flagged(i) says so (NULL:
 * all of them). */
static void put_opt_steps(const char *name, const char *role, size_t n, int64_t wait_ns,
                          uint32_t flag, bool (*flagged)(size_t))
{
    tm_rec *r = open_rec(name, role, -1);
    uint8_t buf[128];
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = at(0.1 * (double)i),
                            .end_ns = at(0.1 * (double)(i + 1)),
                            .data_wait_ns = wait_ns,
                            .flags = !flagged || flagged(i) ? flag : 0,
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = 1,
                            .prep_ns = -1,
                            .prep_cpu_ns = -1,
                            .backward_ns = -1,
                            .wait_cpu_ns = -1,
                            .collective_ns = -1,
                            .opt_start_ns = -1,
                            .optimizer = 0};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(r, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&r);
}

/* A loop fed by a background thread (the step model: TM_STEP_FED_BY_THREAD,
 * no batch of its own, no preparation of its own): 50 optimizer steps of
 * 0.1 s, 0.06 s of each waiting for the thread's batch.  The wait is the
 * DataLoader's behind the thread, said as such, not the loop's own batch
 * preparation (input.main_prep). */
static void test_a_loop_fed_by_a_background_thread_is_told_to_use_workers(void **st)
{
    (void)st;
    put_opt_steps("pid42.tmr", "pid42", 50, 60000000, TM_STEP_FED_BY_THREAD, NULL);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.6) < 1e-6);
    assert_true(ev_num(f, "thread_fed_steps") == 49); /* step 0 is warm-up */
    assert_non_null(strstr(f->title, "batches that a background thread fetches"));
    assert_non_null(strstr(f->advice, "num_workers>0"));
    assert_null(tm_analysis_find(a, "input.main_prep"));
    done(&run, &a);
}

/* A loop without a DataLoader, 50 optimizer steps of 0.1 s: prep ms of
 * each its own batch preparation (the thread on a CPU cpu of it: 0.95,
 * CPU-bound; < 0: not measured), of which fwd ms after the forward (measured on every step,
 * or on the even ones: -1 on the others) and opt ms before the optimizer
 * step. */
static void put_prep_steps_cpu(double prep_ms, double fwd_ms, double opt_ms, bool fwd_even_only,
                               double cpu)
{
    tm_rec *r = open_rec("pid42.tmr", "pid42", -1);
    uint8_t buf[128];
    for (size_t i = 0; i < 50; i++) {
        int64_t prep = (int64_t)(prep_ms * 1e6);
        tm_inproc_step s = {.step = i,
                            .start_ns = at(0.1 * (double)i),
                            .end_ns = at(0.1 * (double)(i + 1)),
                            .data_wait_ns = prep,
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = 0,
                            .prep_ns = prep,
                            .prep_cpu_ns = cpu < 0 ? -1 : (int64_t)(cpu * (double)prep),
                            .backward_ns = -1,
                            .wait_cpu_ns = -1,
                            .collective_ns = -1,
                            .opt_start_ns = -1,
                            .optimizer = 0,
                            .prep_fwd_ns = fwd_even_only && i % 2 ? -1 : (int64_t)(fwd_ms * 1e6),
                            .prep_opt_ns = opt_ms > 0 ? (int64_t)(opt_ms * 1e6) : -1};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(r, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&r);
}

static void put_prep_steps(double prep_ms, double fwd_ms, double opt_ms, bool fwd_even_only)
{
    put_prep_steps_cpu(prep_ms, fwd_ms, opt_ms, fwd_even_only, 0.95);
}

/* nanoGPT's order: 60 ms of the 100 ms step is the loop's batch, 50 of them
 * between the forward and the backward pass: 50/60 = 83% of it there, 0
 * before the optimizer step; the finding names that place and says what it
 * means on a GPU.  nanochat's: 50 of 60 before the optimizer step.  Spread
 * (20, 20 and the rest 20 before the forward): each share said.  Measured
 * on every other step only (nanoGPT's, with the others -1): the share of
 * the measured steps, 83% again. */
static void test_main_prep_says_where_in_the_step_the_batch_is_made(void **st)
{
    (void)st;
    struct {
        double fwd, opt;
        bool even;
        const char *where, *gpu;
        double fwd_share, opt_share;
    } c[] = {
        {50, 0, false,
         "between the model's forward and its backward pass (83% of it), where "
         "nanoGPT's train.py calls get_batch",
         "On a GPU that work runs while the forward's kernels do", 50.0 / 60, 0},
        {0, 50, false,
         "between the last backward pass and the optimizer step (83% of it), "
         "where nanochat fetches its next batch",
         NULL, 0, 50.0 / 60},
        {20, 20, false,
         "33% of it before the forward, 33% between the forward and the "
         "backward pass, 33% between the last backward pass and the optimizer step",
         NULL, 1.0 / 3, 1.0 / 3},
        {50, 0, true, "between the model's forward and its backward pass (83% of it)", "On a GPU",
         50.0 / 60, 0},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        put_prep_steps(60, c[k].fwd, c[k].opt, c[k].even);
        tm_run *run;
        tm_analysis *a = analyze(&run);
        const tm_finding *f = tm_analysis_find(a, "input.main_prep");
        assert_non_null(f);
        assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.6) < 1e-6);
        assert_true(fabs(ev_num(f, "prep_after_forward_share") - c[k].fwd_share) < 1e-6);
        assert_true(fabs(ev_num(f, "prep_before_step_share") - c[k].opt_share) < 1e-6);
        assert_non_null(strstr(f->advice, c[k].where));
        if (c[k].gpu)
            assert_non_null(strstr(f->advice, c[k].gpu));
        else
            assert_null(strstr(f->advice, "On a GPU"));
        done(&run, &a);
        char path[512];
        snprintf(path, sizeof path, "%s/pid42.tmr", dir);
        assert_int_equal(unlink(path), 0);
    }
}

/* The records of before (no prep_fwd_ns, prep_opt_ns): the preparation is
 * before the forward, as it was said. */
static void test_main_prep_of_older_records_is_before_the_forward(void **st)
{
    (void)st;
    put_prep_steps(60, -1, 0, false); /* prep_fwd_ns -1 everywhere, prep_opt_ns -1 */
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.main_prep");
    assert_non_null(f);
    assert_true(isnan(ev_num(f, "prep_after_forward_share")));
    assert_true(ev_num(f, "prep_before_step_share") == 0);
    assert_non_null(
        strstr(f->advice, "between one step's optimizer or backward pass and the next forward"));
    done(&run, &a);
}

/* The host of record file name set to host (the header's field, its
 * CRC made again): another machine's record, as `trainmon report` reads
 * several hosts' run directories together. */
static void set_host(const char *name, const char *host)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    tm_rec_filehdr h;
    assert_int_equal(pread(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
    memset(h.host, 0, sizeof h.host);
    snprintf(h.host, sizeof h.host, "%s", host);
    h.crc = tm_crc32c(0, &h, offsetof(tm_rec_filehdr, crc));
    assert_int_equal(pwrite(fd, &h, sizeof h, 0), (ssize_t)sizeof h);
    close(fd);
}

/* The other processes' CPU of one case: each (pid, cores) over the 5 s of
 * the loop, from sample `from` of the 51 to sample `to` (0: the last). */
struct other {
    unsigned pid;
    double cores;
    int from, to;
};

static void put_others(const char *file, const struct other *o, size_t n, bool with_training)
{
    tm_rec *s = open_rec(file, "system", -1);
    for (int i = 0; i <= 50; i++) {
        if (with_training)
            put_proc(s, 0.1 * i, "proc.process_cpu_utilization", (unsigned)getpid(), 0.9);
        for (size_t k = 0; k < n; k++)
            if (i >= o[k].from && (o[k].to == 0 || i <= o[k].to) && o[k].pid)
                put_proc(s, 0.1 * i, "proc.process_cpu_utilization", o[k].pid, o[k].cores);
    }
    tm_rec_close(&s);
}

/* A loop fed by a producer process of its own (a multiprocessing queue,
 * tests/jobs/producer_queue.py): 60 ms of each 100 ms step its "batch
 * preparation", the training thread on a CPU 10% of it, while the job's
 * other processes (trainmon run's per-process series) were busy.  The
 * training process's own series (this process's pid, 0.9) is no other
 * process.  Each case:
 *   - pid 700 at 0.95 of a core, 701 (a launcher) at 0.02, under the 0.1
 *     counted: cause other_processes, 1 counted, 0.97 cores;
 *   - 0.3 and 0.1 (0.4, under the 0.5 of TM_AN_PREP_OTHERS_CPU): waiting;
 *   - a helper at 1.0 of a core for the last 4 of the 51 samples (0.4 s of
 *     the 5 s loop, 0.08 cores time-weighted, not its own 1.0): waiting;
 *   - a process at 0.05 for samples 0-10, then none (its reads failed)
 *     until one at 1.0 at sample 45: that rate covers the tick before it,
 *     not the 3.5 s back to sample 10 (0.71 cores): 0.03, waiting;
 *   - no series of the training process's pid (the job in a pid namespace
 *     of its own: the training process would read as "other"): waiting;
 *   - the thread's CPU not measured (NAN): unknown, no "nan%";
 *   - the thread on a CPU 50% of it: other_processes, "partly waits";
 *   - 0.3 on the loop's host and 0.3 on another's (hostB, a loop of its
 *     own there): each host apart, 0.3 < 0.5, not 0.6: waiting; with 0.6
 *     on hostB: that host's 0.6, its pid named with its host. */
static void test_main_prep_names_the_jobs_other_processes_it_waits_for(void **st)
{
    (void)st;
    const struct {
        double cpu; /* the training thread's share of its preparation */
        struct other o[2];
        bool with_training;
        const char *cause, *advice;
        double hostb, others; /* hostB's other process (0: no hostB) */
    } c[] = {
        {0.1,
         {{700, 0.95, 0, 0}, {701, 0.02, 0, 0}},
         true,
         "other_processes",
         "mostly waits",
         0,
         0.97},
        {0.1, {{700, 0.3, 0, 0}, {701, 0.1, 0, 0}}, true, "waiting", "slow storage", 0, NAN},
        {0.1, {{702, 1.0, 47, 0}, {0, 0, 0, 0}}, true, "waiting", "slow storage", 0, NAN},
        {0.1, {{703, 0.05, 0, 10}, {703, 1.0, 45, 45}}, true, "waiting", "slow storage", 0, NAN},
        {0.1, {{700, 0.95, 0, 0}, {0, 0, 0, 0}}, false, "waiting", "slow storage", 0, NAN},
        {-1, {{700, 0.95, 0, 0}, {0, 0, 0, 0}}, true, "unknown", "Prefetch them", 0, NAN},
        {0.5, {{700, 0.95, 0, 0}, {0, 0, 0, 0}}, true, "other_processes", "partly waits", 0, 0.95},
        {0.1, {{700, 0.3, 0, 0}, {0, 0, 0, 0}}, true, "waiting", "slow storage", 0.3, NAN},
        {0.1,
         {{700, 0.3, 0, 0}, {0, 0, 0, 0}},
         true,
         "other_processes",
         "pid 800 (python3) on hostB",
         0.6,
         0.6},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        put_prep_steps_cpu(60, 0, 0, false, c[k].cpu);
        put_others("system.tmr", c[k].o, 2, c[k].with_training);
        if (c[k].hostb > 0) { /* another host, with a loop of its own there */
            put_prep_steps_cpu(60, 0, 0, false, c[k].cpu);
            char path[512], to[512];
            snprintf(path, sizeof path, "%s/pid42.tmr", dir);
            snprintf(to, sizeof to, "%s/pidB.tmr", dir);
            assert_int_equal(rename(path, to), 0);
            set_host("pidB.tmr", "hostB");
            put_prep_steps_cpu(60, 0, 0, false, c[k].cpu);
            struct other b[] = {{800, c[k].hostb, 0, 0}};
            put_others("systemB.tmr", b, 1, true);
            set_host("systemB.tmr", "hostB");
        }
        tm_run *run;
        tm_analysis *a = analyze(&run);
        const tm_finding *f = tm_analysis_find(a, "input.main_prep");
        assert_non_null(f);
        char want[64];
        snprintf(want, sizeof want, "\"cause\":\"%s\"", c[k].cause);
        assert_non_null(strstr(f->evidence, want));
        assert_non_null(strstr(f->advice, c[k].advice));
        assert_null(strstr(f->advice, "nan"));
        if (isnan(c[k].others)) {
            assert_true(isnan(ev_num(f, "other_processes")));
        } else if (c[k].hostb == 0) {
            assert_true(ev_num(f, "other_processes") == 1);
            assert_true(fabs(ev_num(f, "other_processes_cpu") - c[k].others) < 1e-9);
            assert_true(ev_num(f, "other_process_top_pid") == 700);
            assert_non_null(strstr(f->title, "while the job's other processes kept"));
            assert_non_null(strstr(f->advice, "cores busy: pid 700 (python3). If")); /* one */
        } else { /* hostB's 0.6, not the sum of both hosts: that host, named */
            assert_true(fabs(ev_num(f, "other_processes_cpu") - 0.6) < 1e-9);
            assert_true(ev_num(f, "other_process_top_pid") == 800);
            assert_non_null(strstr(f->advice, "pid 800 (python3) on hostB"));
        }
        done(&run, &a);
        assert_int_equal(teardown(NULL), 0);
        assert_int_equal(setup(NULL), 0); /* a new run directory */
    }
}

static tm_analysis *amp_run(tm_run **run, size_t n, bool (*skipped)(size_t))
{
    put_opt_steps("pid42.tmr", "pid42", n, 0, TM_STEP_SKIPPED, skipped);
    return analyze(run);
}

static bool skip_backoff(size_t i)
{
    return i < 12; /* the scale backing off from 2^16 at the start */
}
static bool skip_every_fifth(size_t i)
{
    return i % 5 == 0;
}
static bool skip_from_150(size_t i)
{
    return i >= 150; /* the loss went NaN at step 150 */
}

static void test_amp_skipped_steps_beyond_the_backoff_are_a_finding(void **st)
{
    (void)st;
    tm_run *run;
    /* 12 skips at the start of 200 steps: GradScaler backing off, no finding */
    tm_analysis *a = amp_run(&run, 200, skip_backoff);
    assert_int_equal(a->sum.steps_total, 200); /* skipped steps are steps */
    assert_int_equal(a->sum.skipped_steps, 12);
    assert_null(tm_analysis_find(a, "amp.skipped_steps"));
    done(&run, &a);
    /* every fifth of 200 skipped: 40 (20%), medium (>= 1%, < 25%) */
    a = amp_run(&run, 200, skip_every_fifth);
    const tm_finding *f = tm_analysis_find(a, "amp.skipped_steps");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_true(ev_num(f, "skipped_steps") == 40);
    /* 40 x 0.1 s of 200 x 0.1 s, of the run's wall time */
    assert_true(fabs(ev_num(f, "time_lost_fraction") - 0.2) < 1e-9);
    assert_true(fabs(ev_num(f, "time_lost_s") - 0.2 * ev_num(f, "run_s")) < 1e-9);
    assert_true(fabs(ev_num(f, "skipped_share") - 0.2) < 1e-12); /* 40 / 200 */
    assert_true(ev_num(f, "skipped_in_a_row_at_end") == 0);      /* step 199 ran */
    assert_non_null(strstr(f->title, "skipped 40 of 200 optimizer steps (20.0%)"));
    assert_non_null(strstr(f->advice, "bfloat16"));
    done(&run, &a);
    /* steps 150..199 all skipped: the model stopped learning at 150 */
    a = amp_run(&run, 200, skip_from_150);
    f = tm_analysis_find(a, "amp.skipped_steps");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_true(ev_num(f, "skipped_in_a_row_at_end") == 50);
    assert_true(ev_num(f, "last_skipped_step") == 199);
    assert_true(fabs(ev_num(f, "time_lost_fraction") - 0.25) < 1e-9); /* 50 of 200 steps' time */
    assert_ptr_equal(f, &a->f[0]);                                    /* the verdict */
    assert_non_null(strstr(f->title, "the last 50 optimizer steps were all skipped"));
    assert_non_null(strstr(f->title, "from step 150 on"));
    assert_non_null(strstr(f->advice, "checkpoint before step 150"));
    done(&run, &a);
}

static void test_amp_skips_of_each_processs_start_are_no_finding(void **st)
{
    (void)st;
    /* four processes, each with the 12 skips of its scaler's start: 48
     * skipped of 800 (6%), but 12 a process: no finding */
    for (int p = 0; p < 4; p++) {
        char name[32], role[16];
        snprintf(name, sizeof name, "pid%d.tmr", 42 + p);
        snprintf(role, sizeof role, "pid%d", 42 + p);
        put_opt_steps(name, role, 200, 0, TM_STEP_SKIPPED, skip_backoff);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.skipped_steps, 48);
    assert_int_equal(a->sum.step_procs, 4);
    assert_null(tm_analysis_find(a, "amp.skipped_steps"));
    done(&run, &a);
}

static void test_cpu_starved_workers_without_d_state_are_cpu_bound_not_disk_bound(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.09);
    tm_rec_close(&r0);
    put_worker_file(0, 500, 50, 0.5, 0.35, 300 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 100; i++) {
        double t = i * 0.1;
        put_value(s, t, "disk.read_bytes_per_second", "device=vda", 2e3 * (i % 7));
        put_value(s, t, "disk.read_await_seconds", "device=vda", 0.0002);
        put_value(s, t, "psi.cpu.some_avg10", "", 0.6);
        put_value(s, t, "psi.io.some_avg10", "", 0.0);
        put_proc(s, t, "proc.process_state_d", 500, 0);
        put_proc(s, t, "proc.process_cpu_utilization", 500, 0.35);
        put_proc(s, t, "proc.process_read_bytes_per_second", 500, 0);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_needed") > 1);
    assert_true(fabs(ev_num(f, "psi_cpu_some") - 0.6) < 1e-9);
    assert_non_null(strstr(f->advice, "other processes"));
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    done(&run, &a);
}

/* Workers that sleep (a remote store) on a machine busy with other work. */
static void test_sleeping_workers_on_a_busy_machine_are_not_cpu_bound(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.09);
    tm_rec_close(&r0);
    put_worker_file(0, 550, 50, 0.5, 0.08, 300 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 100; i++) {
        put_value(s, i * 0.1, "psi.cpu.some_avg10", "", 0.9);
        put_proc(s, i * 0.1, "proc.process_state_d", 550, 0);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_non_null(strstr(f->advice, "something else"));
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    done(&run, &a);
}

static void
test_workers_in_d_state_on_a_disk_at_its_ceiling_are_disk_bound_under_cpu_pressure(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.09);
    tm_rec_close(&r0);
    put_worker_file(0, 600, 20, 0.5, 0.05, 300 * MiB, 0);
    put_worker_file(1, 601, 20, 0.5, 0.05, 300 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    assert_int_equal(
        tm_rec_event(s, at(0), "run_target", "{\"path\":\"/d\",\"disks\":[\"loop0\"]}"), 0);
    for (int i = 0; i <= 100; i++) {
        double t = i * 0.1;
        /* A read throttle above the device: the rate is flat, await is not. */
        put_value(s, t, "disk.read_bytes_per_second", "device=loop0", 4e6 + 5e4 * (i % 3));
        put_value(s, t, "disk.read_await_seconds", "device=loop0", 0.0004);
        put_value(s, t, "psi.cpu.some_avg10", "", 0.5); /* another job is busy too */
        for (unsigned p = 600; p < 602; p++) {
            put_proc(s, t, "proc.process_state_d", p, i % 10 ? 1 : 0);
            put_proc(s, t, "proc.process_read_bytes_per_second", p, 2e6);
        }
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.disk_bound");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "worker_d_state_share") - 0.9) < 0.02);
    assert_non_null(strstr(f->evidence, "\"disk\":\"loop0\""));
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    done(&run, &a);
}

/* Someone else's copy keeps the root disk at its ceiling; the workers read
 * nothing from it (their data is in the page cache) and are busy. */
static void test_a_busy_disk_the_workers_do_not_read_from_is_not_disk_bound(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.08);
    tm_rec_close(&r0);
    put_worker_file(0, 700, 50, 0.2, 0.9, 300 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 100; i++) {
        double t = i * 0.1;
        put_value(s, t, "disk.read_bytes_per_second", "device=vda", 200e6);
        put_value(s, t, "disk.read_await_seconds", "device=vda", 0.030);
        put_value(s, t, "disk.utilization", "device=vda", 1.0);
        put_value(s, t, "disk.queue_depth", "device=vda", 6);
        put_proc(s, t, "proc.process_state_d", 700, 0);
        put_proc(s, t, "proc.process_read_bytes_per_second", 700, 0);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_non_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    done(&run, &a);
}

/* Per-process series of processes that are not DataLoader workers (the
 * training process itself) say nothing about the workers. */
static void test_the_training_process_in_d_state_is_not_a_worker_in_d_state(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.08);
    tm_rec_close(&r0);
    put_worker_file(0, 800, 50, 0.2, 0.9, 300 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 100; i++) {
        put_proc(s, i * 0.1, "proc.process_state_d", 799, 1); /* the main process */
        put_proc(s, i * 0.1, "proc.process_state_d", 800, 0);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "worker_d_state_share") == 0);
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    done(&run, &a);
}

/* Scenario (c): the first step waits for the workers to start. */
static void test_the_first_steps_wait_is_warmup_and_not_counted(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    uint8_t buf[64];
    for (uint64_t i = 0; i < 20; i++) {
        /* 0.5 s steps; the first waits 1 s more for the workers. */
        double start = i == 0 ? 0 : 1.0 + 0.5 * (double)i;
        double dur = i == 0 ? 1.5 : 0.5;
        tm_inproc_step k = {.step = i,
                            .start_ns = at(start),
                            .end_ns = at(start + dur),
                            .data_wait_ns = (int64_t)((i == 0 ? 1.0 : 0.005) * S_NS)};
        int len = tm_inproc_encode_step(&k, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(r0, TM_REC_STEP, k.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&r0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.ok");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.01) < 1e-6);
    assert_true(ev_num(f, "steps") == 20);
    done(&run, &a);
}

/* A process whose rank came from its process group after its file was
 * made (mp.spawn, Lightning's launcher: no RANK in the environment): its
 * process.rank event is its header's rank and its records'.  Crafted
 * ones (negative, 2^24 or more, not a number) are not, and a header that
 * names a rank keeps it. */
static void test_a_rank_learned_late_is_the_files_rank(void **st)
{
    (void)st;
    const struct {
        const char *file, *role;
        int rank;
        const char *js;
        int want;
    } f[] = {
        {"pid42.tmr", "pid42", -1, "{\"rank\":3,\"world_size\":4}", 3},
        {"pid43.tmr", "pid43", -1, "{\"rank\":-2}", -1},
        {"pid44.tmr", "pid44", -1, "{\"rank\":16777216}", -1},
        {"pid45.tmr", "pid45", -1, "{\"rank\":\"x\"}", -1},
        {"rank1.tmr", "rank1", 1, "{\"rank\":5}", 1},
    };
    for (size_t i = 0; i < 5; i++) {
        tm_rec *w = open_rec(f[i].file, f[i].role, f[i].rank);
        put_steps(w, 2, 0, 0.1, 0.001);
        assert_int_equal(tm_rec_event(w, at(0.15), "process.rank", f[i].js), 0);
        put_steps(w, 2, 0.2, 0.1, 0.001);
        tm_rec_close(&w);
    }
    tm_run *run;
    const char *dirs[] = {dir};
    assert_int_equal(tm_run_load(&run, dirs, 1), 0);
    const tm_run_source *src;
    size_t ns = tm_run_sources(run, &src);
    assert_int_equal(ns, 5);
    const tm_run_step *stp;
    size_t nst = tm_run_steps(run, &stp);
    assert_int_equal(nst, 20);
    for (size_t k = 0; k < ns; k++) {
        int want = -2;
        for (size_t i = 0; i < 5; i++)
            if (strcmp(src[k].file, f[i].file) == 0)
                want = f[i].want;
        assert_int_equal(src[k].header.rank, want);
        for (size_t j = 0; j < nst; j++)
            if (stp[j].source == k)
                assert_int_equal(stp[j].rank, want); /* the steps before the event too */
    }
    tm_run_free(&run);
}

/* --- GPU */

static void test_low_gpu_utilization_while_input_keeps_up_is_underutilized(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.001);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 10; i++)
        put_value(s, i, "gpu.utilization", "gpu=0,uuid=GPU-1", 0.3);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu.underutilized");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "gpu_utilization_mean") - 0.3) < 1e-9);
    done(&run, &a);
}

/* A training process on GPU 0 of four (NVML names its pid there, 20 GB),
 * GPU 0 at util0, GPUs 1-3 at util (their processes: pid 1 when other).
 * Its input keeps up (1 ms of 100 ms). */
static void put_one_of_four(double util0, double util, bool other)
{
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.001);
    tm_rec_close(&r0);
    char lab[64];
    snprintf(lab, sizeof lab, "gpu=0,pid=%d", (int)getpid());
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 10; i++) {
        put_value(s, i, "gpu.utilization", "gpu=0,uuid=GPU-0", util0);
        put_value(s, i, "gpu.process_memory_bytes", lab, 20e9);
        for (int g = 1; g < 4; g++) {
            char u[32], p[32];
            snprintf(u, sizeof u, "gpu=%d,uuid=GPU-%d", g, g);
            put_value(s, i, "gpu.utilization", u, util);
            snprintf(p, sizeof p, "gpu=%d,pid=1", g);
            if (other)
                put_value(s, i, "gpu.process_memory_bytes", p, 40e9);
        }
    }
    tm_rec_close(&s);
}

/* The job's GPU is the one NVML names it on.  95% beside three idle GPUs:
 * busy, no gpu.underutilized (the mean of all four, 0.2375, had said
 * "underutilized"); 20% beside three of another process's at 100%:
 * underutilized at 20% (the mean of four, 0.80, hid it).  The summary
 * says which: "mean of the job's 1 GPU(s) of 4 recorded". */
static void test_the_jobs_gpu_is_read_not_the_machines(void **st)
{
    put_one_of_four(0.95, 0.0, false);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_true(fabs(a->sum.gpu_util_mean - 0.95) < 1e-9);
    assert_int_equal(a->sum.ngpus, 1);
    assert_int_equal(a->sum.ngpus_recorded, 4);
    assert_null(tm_analysis_find(a, "gpu.underutilized"));
    char of[96];
    tm_an_gpus_of(of, sizeof of, &a->sum);
    assert_string_equal(of, "mean of the job's 1 GPU(s) of 4 recorded");
    done(&run, &a);
    teardown(st);
    setup(st);
    put_one_of_four(0.20, 1.0, true);
    a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu.underutilized");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "gpu_utilization_mean") - 0.20) < 1e-9);
    assert_true(ev_num(f, "gpus") == 1 && ev_num(f, "gpus_recorded") == 4);
    done(&run, &a);
}

/* gpu.util_swing: 40 steps of 0.5 s, each waiting 0.25 s for data; the
 * GPU sampled every 0.25 s is busy (0.95) and idle (0.05) in turn: half
 * the samples each, one change per sample, so a cycle (two changes) is
 * 0.5 s, the step: "about once per step", with the data wait. */
static void test_a_gpu_busy_and_idle_in_turn_at_the_step_period_is_a_swing(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 40, 0, 0.5, 0.25);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 80; i++)
        put_value(s, i * 0.25, "gpu.utilization", "gpu=0,uuid=GPU-1", i % 2 ? 0.05 : 0.95);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu.util_swing");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "medium");
    assert_string_equal(tm_confidence_name(f->confidence), "high");
    assert_true(fabs(ev_num(f, "busy_sample_share") - 0.5) < 0.05);
    assert_true(fabs(ev_num(f, "idle_sample_share") - 0.5) < 0.05);
    assert_true(fabs(ev_num(f, "swing_period_s") - 0.5) < 0.02);
    assert_true(fabs(ev_num(f, "data_wait_per_step_s") - 0.25) < 1e-6);
    assert_non_null(strstr(f->title, "about once per step"));
    assert_non_null(strstr(f->title, "each step waits 0.25 s for data"));
    assert_non_null(strstr(f->advice, "the idle samples are the data wait"));
    assert_non_null(tm_analysis_find(a, "input.data_wait"));
    done(&run, &a);
}

/* The input keeps up (1 ms of 100 ms), the GPU is busy 3 samples of 4
 * (mean 0.775: not underutilized) and idle the fourth: the idle samples
 * are host-side stalls; a low finding, not blamed on data. */
static void test_a_swing_while_the_input_keeps_up_points_at_the_host_side(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.001);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 40; i++)
        put_value(s, i * 0.25, "gpu.utilization", "gpu=0,uuid=GPU-1", i % 4 == 3 ? 0.1 : 1.0);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu.util_swing");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "low");
    assert_non_null(strstr(f->advice, "synchronizations"));
    assert_null(strstr(f->advice, "data wait"));
    assert_null(tm_analysis_find(a, "gpu.underutilized"));
    done(&run, &a);
}

/* Steady utilization (busy all along, or low all along) is no swing; the
 * low one while the input keeps up is gpu.underutilized's. */
static void test_steady_gpu_utilization_is_no_swing(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.001);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 40; i++) {
        put_value(s, i * 0.25, "gpu.utilization", "gpu=0,uuid=GPU-1", 0.9 + 0.01 * (i % 3));
        put_value(s, i * 0.25, "gpu.utilization", "gpu=1,uuid=GPU-2", 0.1);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gpu.util_swing"));
    done(&run, &a);
}

/* The swing of the test above on GPU 1, while the training process holds
 * 20 GB on GPU 0, busy all along.  On GPU 1 NVML names another process
 * (pid 1, 1 GB), or the training process with a stray context (1 GB: 5%
 * of its 20, under TM_AN_JOB_GPU_SHARE): none of the job's GPUs swings.
 * With 8 GB of the training process's on GPU 1 (40%: model parallel), it
 * is the job's, and its swing is said. */
static void put_swing_beside(int pid1, double mem1)
{
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.001);
    tm_rec_close(&r0);
    char lab0[64], lab1[64];
    snprintf(lab0, sizeof lab0, "gpu=0,pid=%d", (int)getpid());
    snprintf(lab1, sizeof lab1, "gpu=1,pid=%d", pid1);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 40; i++) {
        put_value(s, i * 0.25, "gpu.utilization", "gpu=0,uuid=GPU-1", 0.95);
        put_value(s, i * 0.25, "gpu.utilization", "gpu=1,uuid=GPU-2", i % 4 == 3 ? 0.1 : 1.0);
        put_value(s, i * 0.25, "gpu.process_memory_bytes", lab0, 20e9);
        put_value(s, i * 0.25, "gpu.process_memory_bytes", lab1, mem1);
    }
    tm_rec_close(&s);
}

static void test_another_jobs_gpu_swinging_is_not_this_jobs_swing(void **st)
{
    const struct {
        int pid1;
        double mem1;
        bool said;
    } cases[] = {{1, 1e9, false}, {(int)getpid(), 1e9, false}, {(int)getpid(), 8e9, true}};
    for (size_t c = 0; c < 3; c++) {
        if (c) {
            teardown(st);
            setup(st);
        }
        put_swing_beside(cases[c].pid1, cases[c].mem1);
        tm_run *run;
        tm_analysis *a = analyze(&run);
        const tm_finding *f = tm_analysis_find(a, "gpu.util_swing");
        assert_true((f != NULL) == cases[c].said);
        if (f)
            assert_non_null(strstr(f->evidence, "gpu=1"));
        assert_int_equal(a->sum.ngpus, cases[c].said ? 2 : 1);
        done(&run, &a);
    }
}

/* A loop without a DataLoader spending 85% of its steps before the
 * forward, on two GPUs of its own (20 GB and 8 GB): GPU 0 busy 1.0, GPU 1
 * swinging (1.0 three samples in four, 0.1 the fourth: mean 0.775).  The
 * mean of the two, 0.8875 >= 0.85 and >= 0.15 + 0.20: input.overlapped;
 * GPU 1's swing is said, but not as the data wait (its advice is the
 * host side's), beside an input finding that says nothing to do. */
static void test_a_swing_beside_an_overlapped_input_is_not_blamed_on_data(void **st)
{
    (void)st;
    double dur[40], prep[40];
    for (size_t i = 0; i < 40; i++)
        dur[i] = 0.25, prep[i] = 0.2125;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_opt_steps_of(r0, 40, dur, prep);
    tm_rec_close(&r0);
    char lab0[64], lab1[64];
    snprintf(lab0, sizeof lab0, "gpu=0,pid=%d", (int)getpid());
    snprintf(lab1, sizeof lab1, "gpu=1,pid=%d", (int)getpid());
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 40; i++) {
        put_value(s, i * 0.25, "gpu.utilization", "gpu=0,uuid=GPU-1", 1.0);
        put_value(s, i * 0.25, "gpu.utilization", "gpu=1,uuid=GPU-2", i % 4 == 3 ? 0.1 : 1.0);
        put_value(s, i * 0.25, "gpu.process_memory_bytes", lab0, 20e9);
        put_value(s, i * 0.25, "gpu.process_memory_bytes", lab1, 8e9);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_non_null(tm_analysis_find(a, "input.overlapped"));
    const tm_finding *f = tm_analysis_find(a, "gpu.util_swing");
    assert_non_null(f);
    assert_non_null(strstr(f->advice, "not the data wait"));
    assert_null(strstr(f->advice, "Fixing the input"));
    assert_null(strstr(f->advice, "input keeps up"));
    assert_null(strstr(f->title, "waits"));
    done(&run, &a);
}

static void test_idle_gpu_behind_a_waiting_loop_is_left_to_the_input_finding(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.05);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 10; i++)
        put_value(s, i, "gpu.utilization", "gpu=0,uuid=GPU-1", 0.3);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gpu.underutilized"));
    assert_non_null(tm_analysis_find(a, "input.data_wait"));
    done(&run, &a);
}

static void test_peak_above_90_percent_of_the_device_is_near_capacity(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 10, 0, 0.1, 0.001);
    for (int i = 0; i < 10; i++)
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){50 * GiB, 74 * GiB, 73 * GiB, 0, 80 * GiB, 0});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.near_capacity");
    assert_non_null(f);
    assert_int_equal(f->rank, 0);
    assert_true(fabs(ev_num(f, "peak_ratio") - 74.0 / 80) < 1e-9);
    assert_null(tm_analysis_find(a, "gpu_mem.growth"));
    done(&run, &a);
}

static void test_peak_at_80_percent_is_not_near_capacity(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    for (int i = 0; i < 10; i++)
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){50 * GiB, 64 * GiB, 60 * GiB, 0, 80 * GiB, 0});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gpu_mem.near_capacity"));
    done(&run, &a);
}

static void test_steady_growth_of_allocated_across_steps_is_a_leak(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.001);
    for (int i = 0; i < 100; i++) {
        double floor = 4 * GiB + i * 2 * MiB;
        /* Within a step memory peaks well above the floor; the floor rises. */
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){floor, 12 * GiB, floor + 6 * GiB, 0, 40 * GiB, 0});
        put_capture(w, i * 0.1 + 0.05, (uint64_t)i,
                    (struct cap){floor + 6 * GiB, 12 * GiB, floor + 6 * GiB, 0, 40 * GiB, 0});
    }
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.growth");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "bytes_per_step") - 2 * MiB) < 1);
    /* 40 GiB total, 12 GiB reserved: 28 GiB left at 2 MiB a step. */
    assert_true(fabs(ev_num(f, "steps_until_full") - 14336) < 1);
    done(&run, &a);
}

static void test_warmup_then_flat_memory_is_not_growth(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    for (int i = 0; i < 100; i++) {
        /* Optimizer state appears in the first steps, then noise only. */
        double floor = i < 5 ? 1 * GiB * (i + 1) : 6 * GiB + (i % 7) * MiB;
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){floor, 10 * GiB, 9 * GiB, 0, 40 * GiB, 0});
    }
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "gpu_mem.growth"));
    done(&run, &a);
}

static void test_inactive_split_blocks_at_peak_reserved_are_fragmentation(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_capture(w, 0.1, 1, (struct cap){5 * GiB, 8 * GiB, 6 * GiB, 0.5 * GiB, 40 * GiB, 0});
    put_capture(w, 0.2, 2, (struct cap){5 * GiB, 10 * GiB, 6 * GiB, 4 * GiB, 40 * GiB, 0});
    put_capture(w, 0.3, 3, (struct cap){5 * GiB, 9 * GiB, 6 * GiB, 0.1 * GiB, 40 * GiB, 0});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.fragmentation");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "ratio") - 0.4) < 1e-9);
    assert_true(ev_num(f, "step") == 2);
    assert_non_null(strstr(f->advice, "expandable_segments"));
    done(&run, &a);
}

static void test_allocation_retries_are_reported_with_their_rate(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 20, 0, 0.1, 0.001);
    for (int i = 0; i < 20; i++)
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){5 * GiB, 8 * GiB, 6 * GiB, 0, 40 * GiB, i < 10 ? 2 : 2 + (i - 9)});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.alloc_retries");
    assert_non_null(f);
    assert_true(ev_num(f, "alloc_retries") == 10);
    assert_true(ev_num(f, "first_seen_step") == 10);
    assert_string_equal(tm_severity_name(f->severity), "high"); /* 0.5 retries per step */
    done(&run, &a);
}

static void put_oom(tm_rec *w, double t, uint32_t seq, uint64_t step, const char *phase,
                    double requested, double free_dev, double allocated, double reserved,
                    const char *snapshot)
{
    uint8_t buf[512];
    tm_inproc_oom o = {.device = 0,
                       .seq = seq,
                       .step = step,
                       .source = TM_OOM_OBSERVER,
                       .requested = requested,
                       .free_device = free_dev,
                       .total_device = 80 * GiB,
                       .allocated = allocated,
                       .reserved = reserved,
                       .phase = phase,
                       .phase_len = (uint16_t)strlen(phase),
                       .snapshot = snapshot,
                       .snapshot_len = (uint16_t)strlen(snapshot)};
    int len = tm_inproc_encode_oom(&o, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_OOM, at(t), buf, (uint32_t)len), 0);
}

static void test_oom_names_step_phase_request_free_and_snapshot_once(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 42, 0, 0.1, 0.001);
    for (int i = 0; i < 42; i++)
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){60 * GiB, 78 * GiB, 70 * GiB, 0, 80 * GiB, 0});
    /* The observer fires twice for one OOM (a cuDNN retry). */
    put_oom(w, 4.25, 1, 42, "backward", 4 * GiB, 1 * GiB, 78 * GiB, 78.5 * GiB,
            "oom-rank0-1.pickle");
    put_oom(w, 4.26, 1, 42, "backward", 4 * GiB, 1 * GiB, 78 * GiB, 78.5 * GiB,
            "oom-rank0-1.pickle");
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *list;
    size_t n = tm_analysis_findings(a, &list), nooms = 0;
    for (size_t i = 0; i < n; i++)
        nooms += strcmp(list[i].id, "gpu_mem.oom") == 0;
    assert_int_equal(nooms, 1);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.oom");
    assert_string_equal(tm_severity_name(f->severity), "high");
    assert_true(ev_num(f, "step") == 42);
    assert_true(ev_num(f, "requested_bytes") == 4 * GiB);
    assert_true(ev_num(f, "free_device_bytes") == 1 * GiB);
    assert_non_null(strstr(f->evidence, "\"phase\":\"backward\""));
    assert_non_null(strstr(f->evidence, "\"cause\":\"peak\""));
    char snap[400];
    snprintf(snap, sizeof snap, "\"snapshot\":\"%s/oom-rank0-1.pickle\"", dir);
    assert_non_null(strstr(f->evidence, snap));
    assert_true(ev_num(f, "trend_bytes_per_step") == 0);
    assert_ptr_equal(&list[0], f); /* high severity comes first */
    done(&run, &a);
}

static void test_oom_with_enough_cached_memory_blames_fragmentation(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_oom(w, 1, 1, 7, "forward", 2 * GiB, 0.5 * GiB, 60 * GiB, 79 * GiB, "");
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.oom");
    assert_non_null(f);
    assert_non_null(strstr(f->evidence, "\"cause\":\"fragmentation\""));
    assert_null(strstr(f->evidence, "\"snapshot\""));
    assert_non_null(strstr(f->advice, "expandable_segments"));
    done(&run, &a);
}

/* --- host memory, ranks */

static void test_worker_rss_growing_every_batch_is_copy_on_read(void **st)
{
    (void)st;
    tm_rec *w = open_rec("worker-r0-400.tmr", "worker0", 0);
    put_worker_batches(w, 0, 400, 100, 0.1, 0.9, 500 * MiB, 2 * MiB);
    tm_rec_close(&w);
    tm_rec *w2 = open_rec("worker-r0-401.tmr", "worker1", 0);
    put_worker_batches(w2, 1, 401, 100, 0.1, 0.9, 500 * MiB, 0);
    tm_rec_close(&w2);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "host_mem.worker_growth");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_growing") == 1);
    assert_true(ev_num(f, "workers_checked") == 2);
    assert_true(ev_num(f, "worst_pid") == 400);
    /* 2 MiB every 0.1 s */
    assert_true(fabs(ev_num(f, "worst_bytes_per_hour") / (2 * MiB * 36000) - 1) < 1e-5);
    /* The text and the page name the worker by rank, not by pid alone;
     * JSON keeps the number. */
    tm_text *t = tm_text_new(1 << 20);
    assert_int_equal(tm_report_write(run, a, t, false), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), "worst_pid 400 (rank 0 worker 0), "));
    tm_text_reset(t);
    assert_int_equal(tm_report_html(run, a, t), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), ">400 (rank 0 worker 0)</td>"));
    tm_text_reset(t);
    assert_int_equal(tm_report_write(run, a, t, true), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), "\"worst_pid\":400,"));
    tm_text_free(&t);
    done(&run, &a);
}

/* Copy-on-read turns shared pages private: RSS stays, PSS grows.  PSS is
 * re-read every 5 s and repeated in the 0.5 s samples between. */
static void test_worker_pss_rising_while_rss_stays_flat_is_copy_on_read(void **st)
{
    (void)st;
    put_worker_file(0, 77, 100, 0.2, 0.5, 900 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i < 40; i++) {
        double t = i * 0.5;
        put_proc(s, t, "proc.process_rss_bytes", 77, 900 * MiB);
        put_proc(s, t, "proc.process_pss_bytes", 77, 100 * MiB + (i / 10) * 30 * MiB);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "host_mem.worker_growth");
    assert_non_null(f);
    assert_non_null(strstr(f->evidence, "\"measure\":\"pss\""));
    assert_true(ev_num(f, "worst_pid") == 77);
    /* From the worker's first batch (it ends at 0.2 s: the reading at 0 is
     * start-up) the distinct readings are at 0.5, 5, 10 and 15 s: 100,
     * 130, 160, 190 MiB.  Least squares: mean t 7.625, mean v 145;
     * sum dt*dv = 727.5, sum dt^2 = 117.6875: 6.18163 MiB/s, a rise of
     * 6.18163 * 14.5 = 89.63 MiB. */
    assert_true(fabs(ev_num(f, "worst_rise_bytes") - 727.5 / 117.6875 * 14.5 * MiB) < 0.01 * MiB);
    assert_true(fabs(ev_num(f, "worst_bytes_per_hour") - 727.5 / 117.6875 * MiB * 3600) < 1 * MiB);
    done(&run, &a);
}

static void test_a_worker_pss_that_jumps_once_then_stays_is_not_growth(void **st)
{
    (void)st;
    put_worker_file(0, 78, 100, 0.2, 0.5, 900 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i < 60; i++) /* the first batches load a model: +200 MiB, then flat */
        put_proc(s, i * 0.5, "proc.process_pss_bytes", 78,
                 (i < 10 ? 100 * MiB : 300 * MiB) + (i % 3) * 64 * 1024);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host_mem.worker_growth"));
    done(&run, &a);
}

static void test_the_training_process_growing_is_not_worker_growth(void **st)
{
    (void)st;
    put_worker_file(0, 80, 100, 0.2, 0.5, 400 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i < 60; i++) {
        put_proc(s, i * 0.5, "proc.process_pss_bytes", 79, 1 * GiB + i * 20 * MiB);
        put_proc(s, i * 0.5, "proc.process_pss_bytes", 80, 200 * MiB + (i % 2) * MiB);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host_mem.worker_growth"));
    done(&run, &a);
}

/* --- the handoff from idle workers (input.handoff) */

/* One optimizer-ended step of a DataLoader loop: from t, dur seconds,
 * wait of it in __next__, recv_cpu of that on the training thread's CPU
 * (< 0: unknown), batches DataLoader batches and as many backward passes. */
static void put_loader_step(tm_rec *w, uint64_t i, double t, double dur, double wait,
                            double recv_cpu, int batches)
{
    uint8_t buf[128];
    tm_inproc_step s = {.step = i,
                        .start_ns = at(t),
                        .end_ns = at(t + dur),
                        .data_wait_ns = (int64_t)(wait * (double)S_NS),
                        .boundary = TM_STEP_BY_OPTIMIZER,
                        .phase = TM_STEP_TRAIN,
                        .micro_batches = batches,
                        .batches = batches,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = -1,
                        .wait_cpu_ns = recv_cpu < 0 ? -1 : (int64_t)(recv_cpu * (double)S_NS),
                        .collective_ns = -1};
    int len = tm_inproc_encode_step(&s, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
}

/* Optimizer steps of a DataLoader loop: batches each, dur seconds, wait
 * of it waiting for the batch, recv_cpu of the wait on the training
 * thread's CPU; every every-th step (from step 1 on) waits long_wait
 * instead (a new set of workers starting). */
static void put_loader_steps_of(tm_rec *w, size_t n, double dur, double wait, double recv_cpu,
                                size_t every, double long_wait, int batches)
{
    for (size_t i = 0; i < n; i++) {
        double wt = every && i > 0 && i % every == 0 ? long_wait : wait;
        put_loader_step(w, i, (double)i * dur, dur, wt, recv_cpu, batches);
    }
}

static void put_loader_steps(tm_rec *w, size_t n, double dur, double wait, double recv_cpu,
                             size_t every, double long_wait)
{
    put_loader_steps_of(w, n, dur, wait, recv_cpu, every, long_wait, 1);
}

/* One worker record, layout 3 (72 bytes). */
static void put_worker_rec(tm_rec *w, const tm_inproc_worker *k)
{
    uint8_t buf[128];
    int len = tm_inproc_encode_worker(k, buf, sizeof buf);
    assert_int_equal(len, 72);
    assert_int_equal(tm_rec_append(w, TM_REC_WORKER, k->end_ns, buf, (uint32_t)len), 0);
}

/* A worker process fetching n batches of fetch seconds (cpu of it on a
 * CPU), one every period seconds from t0: idle in between, and 4 ms of
 * CPU between fetches (handing the batch over).  Of worker set `set`
 * (layout 3), or none (0: layout 2, as writers before sets). */
static void put_set_worker(int rank, int id, unsigned pid, uint64_t set, size_t n, double t0,
                           double fetch, double cpu, double period)
{
    char file[64], role[32];
    snprintf(file, sizeof file, "worker-r%d-%u.tmr", rank, pid);
    snprintf(role, sizeof role, "worker%d", id);
    tm_rec *w = open_rec(file, role, rank);
    for (size_t b = 0; b < n; b++) {
        double t = t0 + (double)b * period;
        tm_inproc_worker k = {.worker_id = id,
                              .pid = pid,
                              .batch = b,
                              .start_ns = at(t),
                              .end_ns = at(t + fetch),
                              .cpu_s = 1.0 + (double)(b + 1) * cpu + (double)b * 0.004,
                              .rss_bytes = 100 * MiB,
                              .layout = set ? 3 : 2,
                              .cpu_start_s = 1.0 + (double)b * (cpu + 0.004),
                              .set = set};
        put_worker_rec(w, &k);
    }
    tm_rec_close(&w);
}

static void put_rank_worker(int rank, int id, unsigned pid, size_t n, double t0, double fetch,
                            double cpu, double period)
{
    put_set_worker(rank, id, pid, 0, n, t0, fetch, cpu, period);
}

static void put_idle_worker(int id, unsigned pid, size_t n, double t0, double fetch, double cpu,
                            double period)
{
    put_rank_worker(0, id, pid, n, t0, fetch, cpu, period);
}

/* 4 epochs of 2 idle workers on rank, a new set each epoch (pids pid0,
 * pid0 + 1, ...), their first fetches 10 and 20 ms into steps 0, 25, 50
 * and 75 of 50 ms steps: 12 batches each, 4 ms (3 ms of CPU) every 40 ms */
static void put_epoch_workers(int rank, unsigned pid0)
{
    for (unsigned e = 0; e < 4; e++) {
        put_rank_worker(rank, 0, pid0 + 2 * e, 12, 1.25 * e + 0.01, 0.004, 0.003, 0.040);
        put_rank_worker(rank, 1, pid0 + 2 * e + 1, 12, 1.25 * e + 0.02, 0.004, 0.003, 0.040);
    }
}

static void test_idle_workers_behind_a_waiting_loop_are_handoff_not_cpu_bound(void **st)
{
    (void)st;
    /* 100 steps of 20 ms, 12 ms of each waiting for its batch, 3 ms of the
     * wait on the training thread's CPU; 2 workers each fetching a batch
     * in 4 ms (3 ms of CPU) every 40 ms: they fetch 10% of their time. */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.020, 0.012, 0.003, 0, 0);
    tm_rec_close(&r0);
    put_idle_worker(0, 300, 50, 0.0, 0.004, 0.003, 0.040);
    put_idle_worker(1, 301, 50, 0.020, 0.004, 0.003, 0.040);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.handoff");
    assert_non_null(f);
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.data_wait"));
    assert_null(tm_analysis_find(a, "input.disk_bound"));
    /* 4 ms of fetch in each 40 ms period: 50 * 0.004 s over a lifetime of
     * 49 * 0.040 + 0.004 = 1.964 s: 0.10183 */
    assert_true(fabs(ev_num(f, "worker_fetch_share") - 0.2 / 1.964) < 1e-4);
    assert_true(fabs(ev_num(f, "wait_per_batch_median_s") - 0.012) < 1e-6);
    assert_true(fabs(ev_num(f, "receive_cpu_share") - 0.25) < 1e-6); /* 3 of 12 ms */
    /* the fetch's own CPU, not the difference of consecutive batches
     * (which would add the 4 ms of handoff between them): 3 ms */
    assert_true(fabs(ev_num(f, "worker_cpu_per_batch_s") - 0.003) < 1e-6);
    assert_true(ev_num(f, "worker_restarts") == 0);
    assert_string_equal(tm_confidence_name(f->confidence), "high"); /* 10% < 25% */
    /* 3 ms of CPU per fetch < 12 ms of handoff: fetching in the main
     * process is cheaper */
    assert_non_null(strstr(f->advice, "num_workers=0"));
    assert_null(strstr(f->advice, "persistent_workers"));
    assert_null(strstr(f->advice, "pin_memory")); /* no GPU in the run */
    done(&run, &a);
}

static void test_worker_restarts_alone_making_the_loop_wait_are_startup(void **st)
{
    (void)st;
    /* 100 steps of 50 ms waiting 2 ms, but every 25th step waits 40 ms:
     * the workers of each of 4 epochs start anew (8 processes for 2 ids),
     * their first fetches 10 and 20 ms into steps 0, 25, 50 and 75 */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 25, 0.040);
    tm_rec_close(&r0);
    put_epoch_workers(0, 400);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    /* idle workers, but the wait is their start, not the handoff */
    assert_null(tm_analysis_find(a, "input.handoff"));
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.data_wait"));
    /* 6 processes beyond the first 2, 2 per set: 3 new sets */
    assert_true(ev_num(f, "worker_restarts") == 6);
    assert_true(ev_num(f, "worker_set_restarts") == 3);
    /* waits after warm-up (step 0): 3 long of 40 ms, 96 of 2 ms; the 3
     * longest are 120 of 120 + 192 = 312 ms: 38%, under the 50% of
     * TM_AN_STARTUP_SHARE, but without them the 96 other judged steps
     * (99 * 50 - 120 = 4830 ms) wait 192 ms: 3.98%, under 5%: the
     * restarts alone make the loop input-bound (312 / 4950 = 6.3%) */
    assert_true(fabs(ev_num(f, "startup_wait_share") - 120.0 / 312.0) < 1e-4);
    assert_true(fabs(ev_num(f, "startup_wait_s") - 0.120) < 1e-6);
    assert_true(fabs(ev_num(f, "startup_wait_per_set_s") - 0.040) < 1e-6);
    assert_true(fabs(ev_num(f, "steady_wait_fraction") - 192.0 / 4830.0) < 1e-4);
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 312.0 / 4950.0) < 1e-4);
    assert_string_equal(tm_confidence_name(f->confidence), "medium"); /* 38% < 50% */
    assert_string_equal(tm_severity_name(f->severity), "low");        /* 6.3% < 10% */
    assert_non_null(strstr(f->advice, "persistent_workers=True"));
    assert_non_null(strstr(f->advice, "started 3 times after the first"));
    assert_non_null(strstr(f->advice, "waited 4.0% of the time"));
    /* 40 ms a set: a fork start, not spawn's re-import */
    assert_null(strstr(f->advice, "forkserver"));
    done(&run, &a);
}

static void test_a_set_whose_worker_starts_a_step_late_is_one_set(void **st)
{
    (void)st;
    /* as above, but each set's worker 1 is scheduled late (4 workers on 2
     * cores): its first fetch 60 ms into the epoch, in the step after the
     * one that waited (steps 1, 26, 51, 76).  Taken by the order of the
     * first fetches, ids 0, 1 | 0, 1 | ...: still 4 sets, 3 after the
     * first, and only the waiting steps are theirs (the old marking took
     * worker 1's step too: 6 "sets", each of the 2 ms steps among them) */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 25, 0.040);
    tm_rec_close(&r0);
    for (unsigned e = 0; e < 4; e++) {
        put_rank_worker(0, 0, 400 + 2 * e, 12, 1.25 * e + 0.01, 0.004, 0.003, 0.040);
        put_rank_worker(0, 1, 400 + 2 * e + 1, 12, 1.25 * e + 0.06, 0.004, 0.003, 0.040);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    assert_true(ev_num(f, "worker_restarts") == 6);
    assert_true(ev_num(f, "worker_set_restarts") == 3);
    /* the three 40 ms waits, as when the set started together */
    assert_true(fabs(ev_num(f, "startup_wait_s") - 0.120) < 1e-6);
    assert_true(fabs(ev_num(f, "startup_wait_per_set_s") - 0.040) < 1e-6);
    assert_non_null(strstr(f->advice, "started 3 times after the first"));
    done(&run, &a);
}

/* Two loaders restarted together each epoch (A: pids 400 + 4e and 401 +
 * 4e, B: 402 + 4e and 403 + 4e, ids 0 and 1 each), B's worker 1 scheduled
 * late, in the step after the waiting one.  By pid (the order iter() made
 * them) the sets are A's and B's, both first fetching in step 25e: one
 * step marked an epoch, 3 after the first (ordered by first fetch, A0 B0
 * A1 | B1 made a "set" of B1 alone in the next step: 7 sets). */
static void test_loaders_restarted_together_with_a_late_worker_mark_one_step(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 25, 0.040);
    tm_rec_close(&r0);
    for (unsigned e = 0; e < 4; e++) {
        put_rank_worker(0, 0, 400 + 4 * e, 12, 1.25 * e + 0.010, 0.004, 0.003, 0.040);
        put_rank_worker(0, 1, 401 + 4 * e, 12, 1.25 * e + 0.020, 0.004, 0.003, 0.040);
        put_rank_worker(0, 0, 402 + 4 * e, 12, 1.25 * e + 0.015, 0.004, 0.003, 0.040);
        put_rank_worker(0, 1, 403 + 4 * e, 12, 1.25 * e + 0.060, 0.004, 0.003, 0.040);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    assert_true(ev_num(f, "worker_set_restarts") == 3);
    assert_true(fabs(ev_num(f, "startup_wait_per_set_s") - 0.040) < 1e-6);
    done(&run, &a);
}

/* Pids that wrap around inside a set (32765/32766, 32767/300, 301/302,
 * 303/304), each set's worker 1 late: taken from the pid after the wrap
 * (in plain pid order 300 (id 1) would be a set alone, in step 26, and
 * 32767 (id 0) another, in step 25), still 4 sets, 3 after the first,
 * 40 ms each. */
static void test_worker_pids_that_wrap_around_keep_their_sets(void **st)
{
    (void)st;
    static const unsigned pid0[4] = {32765, 32767, 301, 303};
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 25, 0.040);
    tm_rec_close(&r0);
    for (unsigned e = 0; e < 4; e++) {
        put_rank_worker(0, 0, pid0[e], 12, 1.25 * e + 0.01, 0.004, 0.003, 0.040);
        put_rank_worker(0, 1, e == 1 ? 300 : pid0[e] + 1, 12, 1.25 * e + 0.06, 0.004, 0.003, 0.040);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    assert_true(ev_num(f, "worker_set_restarts") == 3);
    assert_true(fabs(ev_num(f, "startup_wait_per_set_s") - 0.040) < 1e-6);
    done(&run, &a);
}

static void test_slow_worker_sets_are_startup_with_the_start_method(void **st)
{
    (void)st;
    /* 40 steps (2 epochs of 20) of 5 ms waiting 0.5 ms, but the first of
     * the second epoch takes 395 ms, 390 ms of it waiting for its 2 new
     * workers (a forkserver's start: their first fetch at 450 ms, inside
     * the step from 95 to 490 ms); the workers fetch back to back on a
     * CPU (busy: a CPU vote), 4 ms a batch against 4.5 ms of compute */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    double t = 0;
    for (size_t i = 0; i < 40; i++) {
        double dur = i == 20 ? 0.395 : 0.005, wt = i == 20 ? 0.390 : 0.0005;
        put_loader_step(r0, i, t, dur, wt, -1, 1);
        t += dur;
    }
    tm_rec_close(&r0);
    for (unsigned e = 0; e < 2; e++) {
        put_idle_worker(0, 600 + 2 * e, 10, 0.45 * e, 0.004, 0.004, 0.004);
        put_idle_worker(1, 601 + 2 * e, 10, 0.45 * e, 0.004, 0.004, 0.004);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.handoff"));
    assert_null(tm_analysis_find(a, "input.data_wait"));
    assert_true(ev_num(f, "worker_set_restarts") == 1);
    /* judged: 39 steps (38 * 5 + 395 = 585 ms); wait 390 + 38 * 0.5 =
     * 409 ms (70%): the longest is 95% of it */
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 409.0 / 585.0) < 1e-4);
    assert_true(fabs(ev_num(f, "startup_wait_share") - 390.0 / 409.0) < 1e-4);
    /* without it: 19 ms of 585 - 390 = 195 ms, 9.7%: more to find */
    assert_true(fabs(ev_num(f, "steady_wait_fraction") - 19.0 / 195.0) < 1e-4);
    assert_string_equal(tm_confidence_name(f->confidence), "medium");
    assert_string_equal(tm_severity_name(f->severity), "high");
    assert_non_null(strstr(f->title, "1 step waiting for a new set"));
    assert_non_null(strstr(f->title, "(390 ms on average)"));
    /* 390 ms >= TM_AN_STARTUP_SLOW_S: the start method's re-import */
    assert_non_null(strstr(f->advice, "forkserver"));
    assert_non_null(strstr(f->advice, "multiprocessing_context=\"fork\""));
    assert_non_null(strstr(f->advice, "still waited 10% of the time"));
    /* the votes run again on the steady state: the workers fetch back to
     * back (saturated) on a CPU, so their CPU is named for the rest */
    assert_non_null(strstr(f->evidence, "\"steady_verdict\":\"input.cpu_bound\""));
    assert_non_null(strstr(f->advice, "the signals point at input.cpu_bound"));
    done(&run, &a);
}

/* 20 steps of 50 ms, each waiting 40 ms, and in every `sets`-th step
 * (0: one set for all, persistent workers) a new set of 2 workers (pids 500 + 2i, 501 + 2i) whose
 * first fetches begin 5 and 6 ms into step i, 2 batches each (the prefetch); flags on every step
 * but the first (TM_STEP_NEW_ITER: the agent saw a batch from an iterator made for it). */
static void put_iter_steps(unsigned sets, uint32_t flags)
{
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    uint8_t buf[128];
    for (uint64_t i = 0; i < 20; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = at(0.05 * (double)i),
                            .end_ns = at(0.05 * (double)(i + 1)),
                            .data_wait_ns = 40000000,
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = 1,
                            .prep_ns = -1,
                            .prep_cpu_ns = -1,
                            .backward_ns = -1,
                            .wait_cpu_ns = -1,
                            .collective_ns = -1,
                            .flags = i ? flags : 0};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(r0, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&r0);
    if (!sets) { /* persistent: one set, a batch a step */
        put_rank_worker(0, 0, 500, 10, 0.005, 0.004, 0.003, 0.1);
        put_rank_worker(0, 1, 501, 10, 0.055, 0.004, 0.003, 0.1);
    }
    for (unsigned i = 0; sets && i < 20; i += sets) {
        put_rank_worker(0, 0, 500 + 2 * i, 2, 0.05 * i + 0.005, 0.004, 0.003, 0.004);
        put_rank_worker(0, 1, 501 + 2 * i, 2, 0.05 * i + 0.006, 0.004, 0.003, 0.004);
    }
}

/* `next(iter(loader))` inside the loop, 80% of the time waiting:
 *   - a new set in every step and the steps flagged: input.new_iterator,
 *     19 of 19 judged steps (step 0 is warm-up), the workers started
 *     anew, 40 ms a step; not input.worker_startup;
 *   - the steps flagged, no new set (persistent_workers: each iter()
 *     resets them): input.new_iterator, the workers reset;
 *   - a set in every step, no step flagged (a loader of one batch an
 *     epoch, `for x in loader`: each iterator runs out): input.worker_
 *     startup, every step, advising persistent_workers;
 *   - a set every other step, none flagged: sets in 9 of 19 steps, under
 *     the 90% of TM_AN_STARTUP_EVERY and under a set per 4 steps: no
 *     start-up finding. */
static void test_a_new_iterator_every_step_is_said_as_such(void **st)
{
    (void)st;
    const struct {
        unsigned sets;
        uint32_t flags;
        const char *id, *title, *advice;
    } c[] = {
        {1, TM_STEP_NEW_ITER, "input.new_iterator",
         "19 of 19 steps took their batch from an iterator made for it (40.0 ms a step",
         "starts them anew"},
        {0, TM_STEP_NEW_ITER, "input.new_iterator", "a new DataLoader iterator for every batch",
         "resets them (persistent_workers=True)"},
        {1, 0, "input.worker_startup", "in 19 steps waiting for a new set",
         "persistent_workers=True on the DataLoader"},
        {2, 0, NULL, NULL, NULL},
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        put_iter_steps(c[k].sets, c[k].flags);
        tm_run *run;
        tm_analysis *a = analyze(&run);
        const tm_finding *f = c[k].id ? tm_analysis_find(a, c[k].id) : NULL;
        if (c[k].id) {
            assert_non_null(f);
            assert_non_null(strstr(f->title, c[k].title));
            assert_non_null(strstr(f->advice, c[k].advice));
            assert_string_equal(tm_severity_name(f->severity), "high");
            assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.8) < 1e-6);
        }
        if (!c[k].id || strcmp(c[k].id, "input.new_iterator") != 0)
            assert_null(tm_analysis_find(a, "input.new_iterator"));
        if (!c[k].id || strcmp(c[k].id, "input.worker_startup") != 0)
            assert_null(tm_analysis_find(a, "input.worker_startup"));
        if (k == 0) {
            assert_true(ev_num(f, "new_iterator_steps") == 19);
            assert_non_null(strstr(f->advice, "next(iter(loader))"));
            assert_non_null(strstr(f->advice, "its 2 workers"));
            assert_null(tm_analysis_find(a, "input.handoff"));
        }
        if (k == 2) {
            assert_non_null(strstr(f->evidence, "\"restarts\":\"every_step\""));
            assert_non_null(strstr(f->advice, "epochs of a batch or two"));
            assert_null(strstr(f->advice, "next(iter(loader))"));
        }
        done(&run, &a);
        assert_int_equal(teardown(NULL), 0);
        assert_int_equal(setup(NULL), 0); /* a new run directory */
    }
}

static void test_worker_restarts_in_a_handoff_advise_persistent_workers(void **st)
{
    (void)st;
    /* 100 steps of 50 ms waiting 3 ms (the handoff: idle workers), every
     * 25th waiting 45 ms for a new set: the 3 long waits are 135 of
     * 135 + 96 * 3 = 423 ms (32%: under TM_AN_STARTUP_SHARE, over
     * TM_AN_HANDOFF_RESTART_SHARE), and without them the loop still waits
     * 288 / (4950 - 135) = 6.0%: the handoff, with the restarts' advice */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.003, 0.001, 25, 0.045);
    tm_rec_close(&r0);
    put_epoch_workers(0, 700);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.worker_startup"));
    const tm_finding *f = tm_analysis_find(a, "input.handoff");
    assert_non_null(f);
    assert_true(ev_num(f, "worker_restarts") == 6);
    assert_true(fabs(ev_num(f, "restart_wait_share") - 135.0 / 423.0) < 1e-4);
    assert_non_null(strstr(f->advice, "persistent_workers=True"));
    assert_non_null(strstr(f->advice, "started 3 more times (each epoch)"));
    done(&run, &a);
}

static void test_even_waits_with_restarts_are_not_startup(void **st)
{
    (void)st;
    /* 100 steps of 50 ms waiting 2.5 ms, every 25th 3 ms, 4 sets of idle
     * workers: the 3 longest waits (9 ms of 249) removed, the loop would
     * wait 240 / 4941 = 4.86%, under 5%; but 3 ms is no start-up: under
     * TM_AN_STARTUP_OUTLIER (4) times the median wait of 2.5 ms */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.0025, 0.001, 25, 0.003);
    tm_rec_close(&r0);
    put_epoch_workers(0, 900);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.worker_startup"));
    assert_non_null(tm_analysis_find(a, "input.handoff"));
    done(&run, &a);
}

static void test_a_long_wait_without_a_worker_start_is_not_startup(void **st)
{
    (void)st;
    /* 100 steps of 50 ms waiting 2.2 ms, step 60 waiting 45 ms (a slow
     * shard, a pause: no worker starts in it); new sets of fork workers in
     * steps 25, 50 and 75, whose waits are ordinary (2.2 ms).  The 3
     * longest waits (45 + 2 * 2.2) would be taken for start-ups and leave
     * (260.6 - 49.4) / (4950 - 49.4) = 4.3%, under 5%; the steps the sets
     * started in hold 6.6 ms, no outlier (2.2 ms, not 4 x the median) */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.0022, 0.001, 60, 0.045);
    tm_rec_close(&r0);
    put_epoch_workers(0, 1000);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.worker_startup"));
    const tm_finding *f = tm_analysis_find(a, "input.handoff");
    assert_non_null(f);
    /* the 3 steps the sets started in: 6.6 of 260.6 ms */
    assert_true(fabs(ev_num(f, "restart_wait_share") - 6.6 / 260.6) < 1e-4);
    done(&run, &a);
}

static void test_worker_startup_on_two_ranks_counts_each_ranks_sets(void **st)
{
    (void)st;
    /* 2 ranks as in the first start-up test: each 100 steps of 50 ms
     * waiting 2 ms, 40 ms in steps 25, 50 and 75, where its new workers
     * start (2 per set); a worker marks only its own rank's step */
    for (int r = 0; r < 2; r++) {
        char file[32], role[32];
        snprintf(file, sizeof file, "rank%d.tmr", r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec *w = open_rec(file, role, r);
        put_loader_steps(w, 100, 0.050, 0.002, 0.001, 25, 0.040);
        tm_rec_close(&w);
        put_epoch_workers(r, 2000 + 100 * (unsigned)r);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_per_rank") == 2);
    assert_true(ev_num(f, "worker_restarts") == 12);    /* 16 processes, 4 ids */
    assert_true(ev_num(f, "worker_set_restarts") == 6); /* 3 steps on each rank */
    /* each rank's own numbers, pooled: 240 of 624 ms */
    assert_true(fabs(ev_num(f, "startup_wait_share") - 240.0 / 624.0) < 1e-4);
    assert_true(fabs(ev_num(f, "startup_wait_per_set_s") - 0.040) < 1e-6);
    assert_non_null(strstr(f->advice, "started 3 times after the first on each rank"));
    done(&run, &a);
}

static void test_workers_needed_counts_the_batches_of_a_step(void **st)
{
    (void)st;
    /* gradient accumulation: 100 steps of 40 ms, each taking 4 batches
     * and waiting 12 ms of it (28 ms of compute); 2 workers on a CPU all
     * their fetch, 16 ms a batch, one batch every 20 ms each (80% of their
     * lifetime): a step needs 4 * 16 = 64 ms of fetching in 28 ms,
     * ceil(64 / 28) = 3 workers; per batch alone (ceil(16 / 28) = 1)
     * they would seem to keep up */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps_of(r0, 100, 0.040, 0.012, 0.001, 0, 0, 4);
    tm_rec_close(&r0);
    put_idle_worker(0, 1100, 200, 0.0, 0.016, 0.016, 0.020);
    put_idle_worker(1, 1101, 200, 0.010, 0.016, 0.016, 0.020);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.data_wait"));
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_needed") == 3);
    assert_non_null(strstr(f->advice, "0.016 s per batch x 4.0 batches / 0.028 s"));
    done(&run, &a);
}

static void test_cpu_busy_workers_that_keep_up_are_not_cpu_bound(void **st)
{
    (void)st;
    /* 100 steps of 10 ms waiting 3 ms (30%), 7 ms of compute; 2 workers on
     * a CPU all their fetch (12 ms a batch) and fetching 60% of their
     * lifetime (one batch every 20 ms each): a CPU vote, but 2 workers
     * make a batch every 6 ms, faster than the 7 ms of compute
     * (ceil(12 / 7) = 2 needed, 2 there): not CPU-bound workers */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.010, 0.003, 0.001, 0, 0);
    tm_rec_close(&r0);
    put_idle_worker(0, 800, 50, 0.0, 0.012, 0.012, 0.020);
    put_idle_worker(1, 801, 50, 0.010, 0.012, 0.012, 0.020);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.cpu_bound"));
    assert_null(tm_analysis_find(a, "input.handoff"));
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_needed") == 2);
    assert_true(ev_num(f, "workers_per_rank") == 2);
    assert_non_null(strstr(f->advice, "more workers will not help"));
    assert_non_null(strstr(f->advice, "a step's 1 batch every 6.0 ms"));
    assert_null(strstr(f->advice, "num_workers="));
    done(&run, &a);
}

/* A persistent worker of set `set` over `epochs` epochs of epoch_s
 * seconds: n batches a epoch fetched back to back, fetch seconds each (all
 * of it on a CPU), from t0 into each epoch; idle for the rest (the epoch's
 * end, the eval run). */
static void put_epochs_worker(int id, unsigned pid, uint64_t set, int epochs, double epoch_s,
                              size_t n, double t0, double fetch)
{
    char file[64], role[32];
    snprintf(file, sizeof file, "worker-r0-%u.tmr", pid);
    snprintf(role, sizeof role, "worker%d", id);
    tm_rec *w = open_rec(file, role, 0);
    uint64_t b = 0;
    for (int e = 0; e < epochs; e++)
        for (size_t k = 0; k < n; k++, b++) {
            double t = (double)e * epoch_s + t0 + (double)k * fetch;
            tm_inproc_worker r = {.worker_id = id,
                                  .pid = pid,
                                  .batch = b,
                                  .start_ns = at(t),
                                  .end_ns = at(t + fetch),
                                  .cpu_s = 1.0 + (double)(b + 1) * fetch,
                                  .rss_bytes = 100 * MiB,
                                  .layout = 3,
                                  .cpu_start_s = 1.0 + (double)b * fetch,
                                  .set = set};
            put_worker_rec(w, &r);
        }
    tm_rec_close(&w);
}

/* 4 epochs of 0.5 s: 15 steps of 15 ms (8 ms of compute, 7 ms waiting
 * for the batch) from 30 ms in, then an eval run; a training loader of 2
 * persistent workers (set 0xA0) fetching 8 and 7 batches of train_fetch
 * seconds back to back from the epoch's start, and a validation loader of
 * 2 (set 0xB0) fetching 2 and 1 batches of 30 ms at 0.3 s into each epoch. */
static void put_train_and_val_loaders(double train_fetch)
{
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    for (uint64_t i = 0; i < 60; i++)
        put_loader_step(r0, i, (double)(i / 15) * 0.5 + 0.03 + (double)(i % 15) * 0.015, 0.015,
                        0.007, 0.001, 1);
    tm_rec_close(&r0);
    put_epochs_worker(0, 1200, 0xA0, 4, 0.5, 8, 0.0, train_fetch);
    put_epochs_worker(1, 1201, 0xA0, 4, 0.5, 7, 0.0, train_fetch);
    put_epochs_worker(0, 1202, 0xB0, 4, 0.5, 2, 0.3, 0.030);
    put_epochs_worker(1, 1203, 0xB0, 4, 0.5, 1, 0.3, 0.030);
}

static void test_workers_idle_between_short_epochs_that_are_behind_are_cpu_bound(void **st)
{
    (void)st;
    /* The training workers fetch 30 ms a batch: 2 make one every 15 ms,
     * the loop computes 8 ms a batch, so it waits on them (7 ms a step).
     * Their lifetime share is low all the same: worker 0 fetches 8 x 30 =
     * 240 ms of each 500, 0.96 s of its life from 0 to 1.74 s (0.5517),
     * worker 1 0.84 of 1.71 s (0.4912), the validation workers 0.24 of
     * 1.56 s (0.1538) and 0.12 of 1.53 s (0.0784): weighted by their
     * batches (32, 28, 8, 4), 32.954 / 72 = 0.4577, under 0.50.  That read "handoff: the
     * batches were ready ... more workers will not help" (tqdm_epochs.py's
     * report).  The training loader (60 of the 72 batches, 2 workers):
     * 30 ms x 1 batch a step / (2 x 8 ms) = 1.875 > 1: behind, not the
     * handoff. */
    put_train_and_val_loaders(0.030);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_true(fabs(a->sum.worker_util - 0.4577) < 1e-4);
    assert_true(a->sum.lead_workers_per_rank == 2);
    assert_true(fabs(a->sum.lead_batch_median_s - 0.030) < 1e-9);
    assert_true(fabs(a->sum.lead_batches_per_step - 1.0) < 1e-9); /* 60 batches, 60 steps */
    assert_null(tm_analysis_find(a, "input.handoff"));
    /* Nor "more workers will not help": the workers' arithmetic is the
     * training loader's, 2 workers that need 30 ms x 1 / 8 ms = 3.75, 4;
     * all four workers and their median (30 ms too) read 4 <= 4, "they
     * keep up" (input.data_wait), which the validation loader's two,
     * idle through training, do not help. */
    assert_null(tm_analysis_find(a, "input.data_wait"));
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_per_rank") == 2);
    assert_true(ev_num(f, "workers_needed") == 4);
    assert_true(fabs(ev_num(f, "loader_batch_time_median_s") - 0.030) < 1e-9);
    assert_true(ev_num(f, "workers") == 4);
    done(&run, &a);
}

static void test_workers_idle_between_short_epochs_that_keep_up_are_handoff(void **st)
{
    (void)st;
    /* The same loop whose training workers fetch 4 ms a batch: 4 / (2 x 8)
     * = 0.25, the batches were ready; the handoff, as before */
    put_train_and_val_loaders(0.004);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.handoff");
    assert_non_null(f);
    assert_true(fabs(ev_num(f, "worker_fetch_per_compute") - 0.25) < 1e-6);
    /* 4 workers in all, per (rank, loader, id) */
    assert_true(ev_num(f, "workers_per_rank") == 4);
    done(&run, &a);
}

static void test_busy_workers_are_not_handoff(void **st)
{
    (void)st;
    /* workers fetching back to back (100% of their time) while the loop
     * waits: not the handoff */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.020, 0.012, 0.001, 0, 0);
    tm_rec_close(&r0);
    put_idle_worker(0, 500, 50, 0.0, 0.040, 0.039, 0.040);
    put_idle_worker(1, 501, 50, 0.0, 0.040, 0.039, 0.040);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.handoff"));
    /* 40 ms a batch against 8 ms of compute: ceil(40 / 8) = 5 workers
     * needed, 2 there: CPU-bound workers */
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_needed") == 5);
    done(&run, &a);
}

/* --- ranks */

/* A DDP rank: n optimizer steps of dur seconds, wait of it waiting for
 * data, bwd in the backward pass (its wait for the all-reduce included)
 * and coll in a collective the loop called. */
static void put_ddp_rank(int rank, size_t n, double dur, double wait, double bwd, double coll)
{
    char file[32], role[32];
    snprintf(file, sizeof file, "rank%d.tmr", rank);
    snprintf(role, sizeof role, "rank%d", rank);
    tm_rec *w = open_rec(file, role, rank);
    uint8_t buf[128];
    for (size_t i = 0; i < n; i++) {
        tm_inproc_step s = {.step = i,
                            .start_ns = at((double)i * dur),
                            .end_ns = at((double)(i + 1) * dur),
                            .data_wait_ns = (int64_t)(wait * (double)S_NS),
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = 1,
                            .prep_ns = -1,
                            .prep_cpu_ns = -1,
                            .backward_ns = (int64_t)(bwd * (double)S_NS),
                            .wait_cpu_ns = -1,
                            .collective_ns = (int64_t)(coll * (double)S_NS)};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&w);
}

static void
test_a_rank_slow_in_data_is_the_straggler_and_the_waiting_ranks_are_not_blamed(void **st)
{
    (void)st;
    /* steps of 100 ms everywhere; rank 2 waits 50 ms for data, the others
     * 2 ms and then 45 ms more than rank 2 in backward (55 vs 10 ms) */
    put_ddp_rank(0, 50, 0.100, 0.002, 0.055, 0.001);
    put_ddp_rank(1, 50, 0.100, 0.002, 0.055, 0.001);
    put_ddp_rank(2, 50, 0.100, 0.050, 0.010, 0.001);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "ranks.straggler");
    assert_non_null(f);
    assert_int_equal(f->rank, 2);
    assert_non_null(strstr(f->evidence, "\"cause\":\"data\""));
    /* sync wait: backward beyond the shortest (10 ms) + collective 1 ms */
    assert_true(fabs(ev_num(f, "sync_wait_s") - 0.001) < 1e-9);
    assert_true(fabs(ev_num(f, "others_sync_wait_s") - 0.046) < 1e-9);
    assert_true(fabs(ev_num(f, "data_wait_s") - 0.050) < 1e-9);
    assert_int_equal(f->severity, TM_SEV_HIGH); /* 45 of 100 ms */
    /* the waiting ranks' compute includes their wait: not theirs */
    assert_null(tm_analysis_find(a, "ranks.imbalance"));
    done(&run, &a);
}

static void test_a_rank_slow_in_compute_is_the_straggler_with_cause_compute(void **st)
{
    (void)st;
    /* rank 1's forward takes 40 ms more; rank 0 waits it out in backward */
    put_ddp_rank(0, 50, 0.100, 0.002, 0.050, 0);
    put_ddp_rank(1, 50, 0.100, 0.002, 0.010, 0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "ranks.straggler");
    assert_non_null(f);
    assert_int_equal(f->rank, 1);
    assert_non_null(strstr(f->evidence, "\"cause\":\"compute\""));
    /* own compute: 98 ms of compute less the sync wait: 98 vs 58 ms */
    assert_true(fabs(ev_num(f, "own_compute_s") - 0.098) < 1e-9);
    assert_true(fabs(ev_num(f, "others_own_compute_s") - 0.058) < 1e-9);
    assert_null(tm_analysis_find(a, "ranks.imbalance"));
    done(&run, &a);
}

static void test_ranks_waiting_alike_have_no_straggler(void **st)
{
    (void)st;
    put_ddp_rank(0, 50, 0.100, 0.002, 0.030, 0.001);
    put_ddp_rank(1, 50, 0.100, 0.002, 0.032, 0.001);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "ranks.straggler"));
    done(&run, &a);
}

/* A worker started by spawn or forkserver imports torch before its first
 * batch: 20 -> 130 MiB in 6 s, then flat through 20 s of batches. */
static void test_a_spawned_workers_start_up_before_its_first_batch_is_not_growth(void **st)
{
    (void)st;
    put_idle_worker(0, 88, 40, 6.0, 0.004, 0.003, 0.5);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 52; i++) {
        double t = i * 0.5;
        double pss = t < 6.0 ? 20 * MiB + t / 6.0 * 110 * MiB : 130 * MiB;
        put_proc(s, t, "proc.process_pss_bytes", 88, pss);
        put_proc(s, t, "proc.process_rss_bytes", 88, pss + 10 * MiB);
    }
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host_mem.worker_growth"));
    done(&run, &a);
}

static void put_rank(int rank, double dur, double reserved)
{
    char file[32], role[32];
    snprintf(file, sizeof file, "rank%d.tmr", rank);
    snprintf(role, sizeof role, "rank%d", rank);
    tm_rec *w = open_rec(file, role, rank);
    put_steps(w, 50, 0, dur, 0.001);
    put_capture(w, 1, 10, (struct cap){reserved / 2, reserved, reserved / 2, 0, 80 * GiB, 0});
    tm_rec_close(&w);
}

static void test_one_slow_rank_is_imbalance(void **st)
{
    (void)st;
    put_rank(0, 0.1, 20 * GiB);
    put_rank(1, 0.1, 20 * GiB);
    put_rank(2, 0.1, 20 * GiB);
    put_rank(3, 0.15, 20 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "ranks.imbalance");
    assert_non_null(f);
    assert_int_equal(f->rank, 3);
    assert_true(fabs(ev_num(f, "ratio") - 1.5) < 1e-6);
    assert_non_null(strstr(f->evidence, "\"measure\":\"step time\""));
    done(&run, &a);
}

static void test_one_rank_holding_more_memory_is_imbalance(void **st)
{
    (void)st;
    put_rank(0, 0.1, 30 * GiB);
    put_rank(1, 0.1, 20 * GiB);
    put_rank(2, 0.1, 20 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "ranks.imbalance");
    assert_non_null(f);
    assert_int_equal(f->rank, 0);
    assert_non_null(strstr(f->evidence, "peak GPU memory"));
    done(&run, &a);
}

static void test_ranks_alike_are_not_imbalance(void **st)
{
    (void)st;
    put_rank(0, 0.1, 20 * GiB);
    put_rank(1, 0.105, 20.5 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "ranks.imbalance"));
    done(&run, &a);
}

/* --- the timeline and bad input */

static void test_times_are_wall_clock_and_series_keep_their_labels(void **st)
{
    (void)st;
    tm_rec *s = open_rec("system.tmr", "system", -1);
    put_value(s, 1, "disk.utilization", "device=vda", 0.5);
    put_value(s, 2, "disk.utilization", "device=vda", 0.7);
    put_value(s, 2, "disk.utilization", "device=vdb", 0.1);
    tm_rec_close(&s);
    int64_t real = tm_now_real_ns(), mono = tm_now_mono_ns();
    const char *dirs[] = {dir};
    tm_run *run;
    assert_int_equal(tm_run_load(&run, dirs, 1), 0);
    const tm_run_series *ser;
    assert_int_equal(tm_run_series_list(run, &ser), 2);
    assert_string_equal(ser[0].name, "disk.utilization");
    assert_string_equal(ser[0].labels, "device=vda");
    assert_int_equal(ser[0].n, 2);
    assert_true(ser[0].v[1] == 0.7);
    /* 1 s after T0, in wall-clock time (within 50 ms of this clock pair). */
    int64_t want = real - mono + at(1);
    assert_true(llabs(ser[0].t_ns[0] - want) < 50000000);
    char v[16];
    assert_true(tm_labels_get(ser[1].labels, "device", v, sizeof v));
    assert_string_equal(v, "vdb");
    tm_run_free(&run);
}

static void test_series_sampled_together_share_times_and_gaps_keep_their_own(void **st)
{
    (void)st;
    tm_rec *w = open_rec("system.tmr", "system", -1);
    uint32_t a = (uint32_t)tm_rec_series(w, "a", "", ""),
             b = (uint32_t)tm_rec_series(w, "b", "", ""),
             c = (uint32_t)tm_rec_series(w, "c", "", "");
    /* a, b, c at 1 s; a, c at 2 s (b unavailable); a, b, c at 3 s */
    uint32_t all[] = {a, b, c}, ac[] = {a, c};
    double v1[] = {1, 10, 100}, v2[] = {2, 200}, v3[] = {3, 30, 300};
    assert_int_equal(tm_rec_sample(w, at(1), all, v1, 3), 0);
    assert_int_equal(tm_rec_sample(w, at(2), ac, v2, 2), 0);
    assert_int_equal(tm_rec_sample(w, at(3), all, v3, 3), 0);
    tm_rec_close(&w);
    const char *dirs[] = {dir};
    tm_run *run;
    assert_int_equal(tm_run_load(&run, dirs, 1), 0);
    const tm_run_series *s;
    assert_int_equal(tm_run_series_list(run, &s), 3);
    assert_int_equal(s[0].n, 3);
    assert_int_equal(s[1].n, 2);
    assert_int_equal(s[2].n, 3);
    assert_true(s[1].t_ns[1] == s[0].t_ns[2] && s[1].v[1] == 30);
    assert_true(s[2].t_ns[1] == s[0].t_ns[1] && s[2].v[1] == 200);
    assert_ptr_equal(s[2].t_ns, s[0].t_ns); /* one time array for a and c */
    assert_ptr_not_equal(s[1].t_ns, s[0].t_ns);
    tm_run_free(&run);
}

static void test_a_damaged_middle_and_a_truncated_tail_are_noted_and_the_rest_is_read(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 200, 0, 0.1, 0.001);
    tm_rec_close(&w);
    char path[512];
    snprintf(path, sizeof path, "%s/rank0.tmr", dir);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    /* Records are 64 bytes from offset 4096 + 16: break the 50th's payload,
     * and cut the file in the middle of the 150th. */
    off_t rec50 = 4096 + 16 + 50 * 64;
    assert_int_equal(pwrite(fd, "XXXX", 4, rec50 + 30), 4);
    assert_int_equal(ftruncate(fd, 4096 + 16 + 150 * 64 + 20), 0);
    close(fd);
    const char *dirs[] = {dir};
    tm_run *run;
    assert_int_equal(tm_run_load(&run, dirs, 1), 0);
    const tm_run_step *steps;
    assert_int_equal(tm_run_steps(run, &steps), 149);
    const char *const *notes;
    size_t nn = tm_run_notes(run, &notes);
    assert_int_equal(nn, 2);
    char want[600];
    snprintf(want, sizeof want, "%s/rank0.tmr: damaged record at offset %lld, skipped", dir,
             (long long)rec50);
    assert_string_equal(notes[0], want);
    assert_non_null(strstr(notes[1], "torn last record"));
    const tm_run_source *src;
    assert_int_equal(tm_run_sources(run, &src), 1);
    assert_int_equal(src[0].ndamage, 1);
    assert_true(src[0].torn_tail);
    tm_run_free(&run);
}

static void test_a_file_that_is_not_a_record_file_is_skipped_and_named(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 3, 0, 0.1, 0.001);
    tm_rec_close(&w);
    char path[512];
    snprintf(path, sizeof path, "%s/junk.tmr", dir);
    FILE *f = fopen(path, "w");
    fputs("not a record file", f);
    fclose(f);
    const char *dirs[] = {dir};
    tm_run *run;
    assert_int_equal(tm_run_load(&run, dirs, 1), 0);
    const char *const *notes;
    assert_int_equal(tm_run_notes(run, &notes), 1);
    assert_non_null(strstr(notes[0], "junk.tmr"));
    const tm_run_step *steps;
    assert_int_equal(tm_run_steps(run, &steps), 3);
    tm_run_free(&run);
}

static void test_a_missing_directory_fails_naming_it(void **st)
{
    (void)st;
    const char *dirs[] = {"/nonexistent/run"};
    tm_run *run = (tm_run *)1;
    assert_int_equal(tm_run_load(&run, dirs, 1), -ENOENT);
    assert_null(run);
    assert_string_equal(tm_last_error(), "/nonexistent/run: No such file or directory");
}

static void test_an_empty_directory_fails_saying_it_has_no_record_files(void **st)
{
    (void)st;
    const char *dirs[] = {dir};
    tm_run *run;
    assert_true(tm_run_load(&run, dirs, 1) < 0);
    char want[300];
    snprintf(want, sizeof want, "%s: no trainmon record files", dir);
    assert_string_equal(tm_last_error(), want);
}

static void test_two_hosts_directories_merge_into_one_run(void **st)
{
    (void)st;
    char sub[2][290];
    for (int i = 0; i < 2; i++) {
        snprintf(sub[i], sizeof sub[i], "%s/host%d", dir, i);
        assert_int_equal(mkdir(sub[i], 0755), 0);
        char path[700], role[16];
        snprintf(path, sizeof path, "%s/rank%d.tmr", sub[i], i);
        snprintf(role, sizeof role, "rank%d", i);
        tm_rec_opts o = {.role = role, .rank = i};
        tm_rec *w;
        assert_int_equal(tm_rec_open(&w, path, &o), 0);
        put_steps(w, 10, i * 0.5, 0.1, 0.001);
        tm_rec_close(&w);
    }
    const char *dirs[] = {sub[0], sub[1]};
    tm_run *run;
    tm_analysis *a;
    assert_int_equal(tm_run_load(&run, dirs, 2), 0);
    const tm_run_source *src;
    assert_int_equal(tm_run_sources(run, &src), 2);
    assert_string_equal(src[1].dir, sub[1]);
    int64_t s0, s1;
    tm_run_span(run, &s0, &s1);
    /* rank 0's first step ends at 0.1 s, rank 1's last at 1.5 s */
    assert_true(s1 - s0 >= 1300000000LL && s1 - s0 < 1500000000LL);
    assert_int_equal(tm_analyze(run, &a), 0);
    assert_int_equal(a->nranks, 2);
    done(&run, &a);
}

static void test_json_report_has_run_summary_findings_and_damage(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.001);
    tm_rec_close(&w);
    char path[512];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"trainmon_version\": \"0.1.0\", \"command\": [\"python\", \"tr\\\"ain.py\"], "
          "\"host\": \"h\"}",
          f);
    fclose(f);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    tm_text *t = tm_text_new(1 << 20);
    assert_int_equal(tm_report_write(run, a, t, true), 0);
    const char *s = tm_text_data(t, NULL);
    assert_true(s[0] == '{');
    assert_non_null(strstr(s, "\"run\":{\"dirs\":["));
    assert_non_null(strstr(s, "\"command\":[\"python\", \"tr\\\"ain.py\"]"));
    assert_non_null(strstr(s, "\"summary\":{\"steps\":100,"));
    assert_non_null(strstr(s, "\"step_time_median_s\":0.1,"));
    assert_non_null(strstr(s, "\"findings\":[{\"id\":\"input.ok\""));
    assert_non_null(strstr(s, "\"damage\":[]}"));
    tm_text_reset(t);
    assert_int_equal(tm_report_write(run, NULL, t, false), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), "[info] input.ok"));
    tm_text_free(&t);
    done(&run, &a);
}

/* The text report opens with the verdict and prints evidence in units:
 * 100 steps of 0.1 s, 0.04 s of each waiting for data, no workers. */
static void test_text_report_opens_with_the_verdict_and_units(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 100, 0, 0.1, 0.04);
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    tm_text *t = tm_text_new(1 << 20);
    assert_int_equal(tm_report_write(run, a, t, false), 0);
    const char *s = tm_text_data(t, NULL);
    const char *v = strstr(s, "\nVerdict: Input-bound: the loop waited for data 40% of the time");
    const char *sum = strstr(s, "\nSummary\n");
    assert_non_null(v);
    assert_non_null(sum);
    assert_true(v < sum);
    /* The rule's title says the cost (100 steps x 0.04 s lost; 0.1 s a
     * step against 0.06 s of compute: 1.7x); the headline does not say it
     * twice.  Then the advice's first sentence, and only that. */
    assert_non_null(strstr(s, "\nVerdict: Input-bound: the loop waited for data 40% of the time; "
                              "4.0 s lost (40% of the run), about 1.7x faster if the input kept "
                              "up\n  Top remedy: The data loading keeps the training loop "
                              "waiting.\n\nSummary\n"));
    assert_non_null(strstr(s, "  step time          median 100 ms (compute 60.0 ms)\n"));
    assert_non_null(strstr(s, "evidence: data_wait_fraction 40.0%, threshold 0.05, steps 100, "
                              "step_time_median_s 100 ms, compute_time_median_s 60.0 ms"));
    /* JSON keeps base units */
    tm_text_reset(t);
    assert_int_equal(tm_report_write(run, a, t, true), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), "\"step_time_median_s\":0.1,"));
    tm_text_free(&t);
    done(&run, &a);
}

/* The headline's cost, from the evidence keys the input rules carry. */
static void test_headline_says_time_lost_and_speedup(void **st)
{
    (void)st;
    tm_finding f = {.id = "input.disk_bound",
                    .severity = TM_SEV_HIGH,
                    .rank = -1,
                    .title = "input-bound, storage-bound: the loop waited",
                    .evidence = "{\"time_lost_s\":123.4,\"time_lost_fraction\":0.41,"
                                "\"speedup\":1.7}",
                    .advice = "Put the data on local NVMe. Or cache it in 1.5 GiB of RAM."};
    tm_analysis a = {.f = &f, .nf = 1};
    tm_rpt_head h;
    tm_rpt_headline(&a, &h);
    assert_ptr_equal(h.f, &f);
    assert_string_equal(h.verdict, "Input-bound, storage-bound: the loop waited");
    assert_string_equal(h.cost, "41.0% of the run (123 s) waiting for data; about 1.7x faster if "
                                "the input kept up");
    assert_string_equal(h.remedy, "Put the data on local NVMe.");
    /* a title that says its cost already (tm_an_input_cost) is not repeated */
    f.title = "input-bound: 41% waiting; 123 s lost (41% of the run), about 1.7x faster if the "
              "input kept up";
    tm_rpt_headline(&a, &h);
    assert_string_equal(h.cost, "");
    assert_string_equal(h.verdict, "Input-bound: 41% waiting; 123 s lost (41% of the run), about "
                                   "1.7x faster if the input kept up");
    f.title = "input-bound, storage-bound: the loop waited";
    /* a finding of another family: no "input" words; speedup alone */
    f.id = "gpu.underutilized";
    f.evidence = "{\"speedup\":2.0,\"time_lost_fraction\":null}";
    f.advice = "Use torch.compile on 1.5x more data";
    tm_rpt_headline(&a, &h);
    assert_string_equal(h.cost, "about 2x faster if this were fixed");
    assert_string_equal(h.remedy, "Use torch.compile on 1.5x more data");
    /* without the keys, no cost; no findings, no headline */
    f.evidence = "{}";
    tm_rpt_headline(&a, &h);
    assert_string_equal(h.cost, "");
    a.nf = 0;
    tm_rpt_headline(&a, &h);
    assert_null(h.f);
}

/* --- HTML */

static char *html_of(const char *run_dir)
{
    const char *dirs[] = {run_dir};
    tm_run *run = NULL;
    assert_int_equal(tm_run_load(&run, dirs, 1), 0);
    tm_text *t = tm_text_new(64u << 20);
    assert_non_null(t);
    assert_int_equal(tm_report_html(run, NULL, t), 0);
    char *page = strdup(tm_text_data(t, NULL));
    tm_text_free(&t);
    tm_run_free(&run);
    return page;
}

/* The page opens with the verdict and the top remedy, then the charts,
 * then the run table; evidence cells show units, the base value on hover;
 * the chart lines are named by rank. */
static void test_html_opens_with_the_verdict_and_shows_units(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank1.tmr", "rank1", 1);
    put_steps(w, 100, 0, 0.1, 0.04);
    tm_rec_close(&w);
    char *page = html_of(dir);
    const char *v = strstr(page, "<div class=\"verdict sev-high\"><p class=\"vt\">Input-bound: "
                                 "the loop waited for data 40% of the time");
    const char *rem = strstr(page, "<p class=\"vr\"><b>Top remedy:</b> The data loading keeps "
                                   "the training loop waiting.</p>");
    const char *run = strstr(page, "<table class=\"run\">");
    const char *charts = strstr(page, "<h2>Timeline</h2>");
    assert_non_null(v);
    assert_non_null(rem);
    assert_non_null(run);
    assert_non_null(charts);
    assert_true(v < rem && rem < charts && charts < run);
    assert_non_null(
        strstr(page, "<tr><th>step_time_median_s</th><td title=\"0.1\">100 ms</td></tr>"));
    assert_non_null(
        strstr(page, "<tr><th>data_wait_fraction</th><td title=\"0.4\">40.0%</td></tr>"));
    assert_non_null(strstr(page, "<title>rank 1</title>"));
    free(page);
}

/* The process memory chart names its lines by rank: the training process
 * (its record file's pid) and its DataLoader worker (the pid of its batch
 * records), on the host that recorded the series; a pid no record file
 * names keeps "pid comm". */
static void test_html_chart_lines_of_processes_are_named_by_rank(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 40, 0, 0.1, 0.01);
    tm_rec_close(&w);
    put_worker_file(0, 4242, 40, 0.1, 0.5, 100 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i < 8; i++) {
        double t = 0.5 * i;
        put_proc(s, t, TM_SER_PROC_PROCESS_PSS_BYTES, (unsigned)getpid(), (200 + i) * MiB);
        put_proc(s, t, TM_SER_PROC_PROCESS_PSS_BYTES, 4242, (100 + i) * MiB);
        put_proc(s, t, TM_SER_PROC_PROCESS_PSS_BYTES, 777, (50 + i) * MiB);
    }
    tm_rec_close(&s);
    char *page = html_of(dir);
    assert_non_null(strstr(page, "Process memory (PSS)"));
    assert_non_null(strstr(page, "rank 0 worker 0"));
    assert_non_null(strstr(page, "777 python3"));
    assert_null(strstr(page, "4242 python3"));
    char own[32];
    snprintf(own, sizeof own, "%d python3", (int)getpid());
    assert_null(strstr(page, own));
    free(page);
}

static void test_html_report_escapes_the_run_name_and_draws_svg_charts(void **st)
{
    (void)st;
    char sub[512], path[600];
    snprintf(sub, sizeof sub, "%s/r&<x>", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(path, sizeof path, "%s/rank0.tmr", sub);
    tm_rec_opts o = {.role = "rank0", .rank = 0};
    tm_rec *w = NULL;
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    put_steps(w, 100, 0, 0.1, 0.02);
    tm_rec_close(&w);
    char *page = html_of(sub);
    assert_non_null(strstr(page, "r&amp;&lt;x&gt;"));
    assert_null(strstr(page, "r&<x>"));
    assert_non_null(strstr(page, "<svg"));
    assert_non_null(strstr(page, "<path"));
    assert_non_null(strstr(page, "input.data_wait"));
    assert_null(strstr(page, "<script"));
    assert_null(strstr(page, "http"));
    free(page);
}

static void test_html_chart_lines_of_a_long_run_keep_at_most_1000_points(void **st)
{
    (void)st;
    tm_rec *w = open_rec("rank0.tmr", "rank0", 0);
    put_steps(w, 50000, 0, 0.1, 0.01);
    tm_rec_close(&w);
    char *page = html_of(dir);
    size_t paths = 0;
    for (const char *p = strstr(page, " d=\""); p; p = strstr(p, " d=\"")) {
        size_t points = 0;
        for (p += 4; *p && *p != '"'; p++)
            points += *p == 'M' || *p == 'L';
        assert_true(points > 0);
        assert_true(points <= 1000);
        paths++;
    }
    assert_int_equal(paths, 2); /* step time and data wait of rank 0 */
    free(page);
}

static void test_titles_give_memory_in_gib_and_mib(void **st)
{
    (void)st;
    put_rank(0, 0.1, 30 * GiB);
    put_rank(1, 0.1, 20 * GiB);
    put_rank(2, 0.1, 20 * GiB);
    tm_rec *w = open_rec("rank3.tmr", "rank3", 3);
    put_steps(w, 10, 0, 0.1, 0.001);
    for (int i = 0; i < 10; i++)
        put_capture(w, i * 0.1, (uint64_t)i,
                    (struct cap){50 * GiB, 74 * GiB, 73 * GiB, 0, 80 * GiB, 0});
    tm_rec_close(&w);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "gpu_mem.near_capacity");
    assert_non_null(f);
    assert_non_null(strstr(f->title, "peak 74.00 GiB of 80.00 GiB (92%)"));
    f = tm_analysis_find(a, "ranks.imbalance");
    assert_non_null(f);
    assert_non_null(strstr(f->title, "74.00 GiB against a median of 25.00 GiB"));
    done(&run, &a);
}

/* --- workers are counted per (rank, worker id) */

static void test_eight_ranks_of_four_workers_are_32_workers_and_4_per_rank(void **st)
{
    (void)st;
    char file[64], role[32];
    for (int r = 0; r < 8; r++) {
        snprintf(file, sizeof file, "rank%d.tmr", r);
        snprintf(role, sizeof role, "rank%d", r);
        tm_rec *w = open_rec(file, role, r);
        put_steps(w, 100, 0, 0.1, 0.06); /* 60% waiting, 0.04 s of compute */
        tm_rec_close(&w);
        /* Every rank's DataLoader numbers its workers 0..3 again. */
        for (int k = 0; k < 4; k++) {
            unsigned pid = 1000u + 10u * (unsigned)r + (unsigned)k;
            snprintf(file, sizeof file, "worker-r%d-%u.tmr", r, pid);
            snprintf(role, sizeof role, "worker%d", k);
            w = open_rec(file, role, r);
            put_worker_batches(w, k, pid, 20, 0.2, 0.95, 300 * MiB, 0);
            tm_rec_close(&w);
        }
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.workers, 32);
    assert_int_equal(a->nranks, 8);
    for (size_t i = 0; i < a->nranks; i++)
        assert_int_equal(a->ranks[i].workers, 4);
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "workers") == 32);
    assert_true(ev_num(f, "workers_per_rank") == 4);
    assert_non_null(strstr(f->advice, "now 4)"));
    done(&run, &a);
}

static void test_worker_ids_above_255_are_not_folded_onto_small_ones(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.06);
    tm_rec_close(&r0);
    /* Ids 1 and 257 were one worker under an 8-bit mask. */
    put_worker_file(1, 501, 20, 0.2, 0.95, 300 * MiB, 0);
    put_worker_file(257, 502, 20, 0.2, 0.95, 300 * MiB, 0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.workers, 2);
    assert_int_equal(a->ranks[0].workers, 2);
    done(&run, &a);
}

/* --- worker sets: two loaders' workers, both ids 0 and 1 (runsum_sets.c) */

/* 100 steps of 50 ms waiting 2 ms; workers fetching a 4 ms batch every
 * 40 ms.  Sets side by side: ids 0 and 1 of set 11 (pids 300, 301) and of
 * set 22 (302, 303), all 5 s of the run (FixMatch's two loaders, each
 * with 2 persistent workers). */
static void put_two_loaders(uint64_t a, uint64_t b)
{
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 0, 0);
    tm_rec_close(&r0);
    put_set_worker(0, 0, 300, a, 124, 0.010, 0.004, 0.003, 0.040);
    put_set_worker(0, 1, 301, a, 124, 0.020, 0.004, 0.003, 0.040);
    put_set_worker(0, 0, 302, b, 124, 0.011, 0.004, 0.003, 0.040);
    put_set_worker(0, 1, 303, b, 124, 0.021, 0.004, 0.003, 0.040);
}

static void test_two_loaders_side_by_side_are_four_workers_and_no_restart(void **st)
{
    (void)st;
    put_two_loaders(11, 22);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.workers, 4);
    assert_int_equal(a->ranks[0].workers, 4);
    assert_int_equal(a->sum.worker_restarts, 0);
    assert_null(tm_analysis_find(a, "input.worker_startup"));
    done(&run, &a);
}

static void test_two_loaders_without_sets_read_as_before(void **st)
{
    (void)st;
    /* layout 2 (no set): ids 0 and 1 twice, 2 workers and 2 restarts, as
     * every report before sets said */
    put_two_loaders(0, 0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.workers, 2);
    assert_int_equal(a->sum.worker_restarts, 2);
    done(&run, &a);
}

static void test_an_eval_loaders_sets_inside_a_persistent_one_share_its_ids(void **st)
{
    (void)st;
    /* the training loader's persistent workers (set 5, all 5 s) and an
     * eval loader's, started anew at 1.25, 2.5 and 3.75 s for 0.2 s (sets
     * 6, 7, 8: 5 batches each): inside the long set, not side by side
     * with it for half of its life, so ids 0 and 1 as before: 2 workers,
     * 6 processes started beyond them */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 0, 0);
    tm_rec_close(&r0);
    put_set_worker(0, 0, 300, 5, 124, 0.010, 0.004, 0.003, 0.040);
    put_set_worker(0, 1, 301, 5, 124, 0.020, 0.004, 0.003, 0.040);
    for (unsigned e = 1; e <= 3; e++) {
        put_set_worker(0, 0, 300 + 2 * e, 5 + e, 5, 1.25 * e, 0.004, 0.003, 0.040);
        put_set_worker(0, 1, 301 + 2 * e, 5 + e, 5, 1.25 * e + 0.01, 0.004, 0.003, 0.040);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_int_equal(a->sum.workers, 2);
    assert_int_equal(a->sum.worker_restarts, 6);
    done(&run, &a);
}

static void test_two_loaders_started_each_epoch_mark_one_step_an_epoch(void **st)
{
    (void)st;
    /* 4 epochs of 25 steps (50 ms, 2 ms waiting, 40 ms at each epoch's
     * start); each epoch both loaders start 2 workers (sets 10e + 1 and
     * 10e + 2, their pids interleaved: ids 0, 0, 1, 1 by pid), worker 0's
     * first fetches 10 and 11 ms into steps 0, 25, 50 and 75, worker 1's
     * (scheduled late) 60 and 61 ms in, in the step after */
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_loader_steps(r0, 100, 0.050, 0.002, 0.001, 25, 0.040);
    tm_rec_close(&r0);
    for (unsigned e = 0; e < 4; e++) {
        unsigned p = 400 + 4 * e;
        uint64_t sa = 10 * e + 1, sb = 10 * e + 2;
        put_set_worker(0, 0, p, sa, 12, 1.25 * e + 0.010, 0.004, 0.003, 0.040);
        put_set_worker(0, 0, p + 1, sb, 12, 1.25 * e + 0.011, 0.004, 0.003, 0.040);
        put_set_worker(0, 1, p + 2, sa, 12, 1.25 * e + 0.060, 0.004, 0.003, 0.040);
        put_set_worker(0, 1, p + 3, sb, 12, 1.25 * e + 0.061, 0.004, 0.003, 0.040);
    }
    tm_run *run;
    tm_analysis *a = analyze(&run);
    /* 2 loaders of 2 workers; 16 processes, 12 beyond those 4 */
    assert_int_equal(a->sum.workers, 4);
    assert_int_equal(a->sum.worker_restarts, 12);
    /* the sets of steps 25, 50 and 75 (step 0 is warm-up), a late worker
     * no set of its own; by pid order alone ids 0, 0, 1, 1 are three sets
     * an epoch, the last (worker 1 of the second loader) marking the step
     * after: 6 */
    const tm_finding *f = tm_analysis_find(a, "input.worker_startup");
    assert_non_null(f);
    assert_true(ev_num(f, "worker_set_restarts") == 3);
    done(&run, &a);
}

/* --- the rule table */

static void test_rule_table_has_unique_ids_each_with_one_apply_function(void **st)
{
    (void)st;
    const struct tm_rule *r;
    size_t n = tm_an_rules(&r);
    assert_true(n >= 12);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(r[i].id);
        assert_true((r[i].run != NULL) != (r[i].rank != NULL));
        assert_true(r[i].max <= TM_SEV_HIGH);
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(r[i].id, r[j].id);
    }
}

static void test_severity_and_confidence_names_are_the_reports_words(void **st)
{
    (void)st;
    assert_string_equal(tm_severity_name(TM_SEV_INFO), "info");
    assert_string_equal(tm_severity_name(TM_SEV_LOW), "low");
    assert_string_equal(tm_severity_name(TM_SEV_MEDIUM), "medium");
    assert_string_equal(tm_severity_name(TM_SEV_HIGH), "high");
    assert_string_equal(tm_severity_name((enum tm_severity)42), "?");
    assert_string_equal(tm_confidence_name(TM_CONF_LOW), "low");
    assert_string_equal(tm_confidence_name(TM_CONF_MEDIUM), "medium");
    assert_string_equal(tm_confidence_name(TM_CONF_HIGH), "high");
    assert_string_equal(tm_confidence_name((enum tm_confidence)42), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
        T(test_data_wait_of_one_percent_is_input_ok),
        T(test_html_chart_lines_of_processes_are_named_by_rank),
        T(test_html_report_escapes_the_run_name_and_draws_svg_charts),
        T(test_html_chart_lines_of_a_long_run_keep_at_most_1000_points),
        T(test_two_disk_samples_of_a_short_job_are_no_plateau),
        T(test_throttled_disk_with_high_await_and_workers_in_d_state_is_disk_bound),
        T(test_busy_workers_slower_than_compute_are_cpu_bound_with_a_worker_count),
        T(test_an_input_finding_states_time_lost_and_speedup),
        T(test_time_lost_under_a_second_is_said_in_ms),
        T(test_data_wait_without_system_data_is_a_low_confidence_finding),
        T(test_workers_off_cpu_without_system_data_are_not_called_disk_bound),
        T(test_a_loop_fed_by_a_background_thread_is_told_to_use_workers),
        T(test_main_prep_says_where_in_the_step_the_batch_is_made),
        T(test_main_prep_of_older_records_is_before_the_forward),
        T(test_main_prep_names_the_jobs_other_processes_it_waits_for),
        T(test_a_new_iterator_every_step_is_said_as_such),
        T(test_amp_skipped_steps_beyond_the_backoff_are_a_finding),
        T(test_amp_skips_of_each_processs_start_are_no_finding),
        T(test_cpu_starved_workers_without_d_state_are_cpu_bound_not_disk_bound),
        T(test_sleeping_workers_on_a_busy_machine_are_not_cpu_bound),
        T(test_workers_in_d_state_on_a_disk_at_its_ceiling_are_disk_bound_under_cpu_pressure),
        T(test_a_busy_disk_the_workers_do_not_read_from_is_not_disk_bound),
        T(test_the_training_process_in_d_state_is_not_a_worker_in_d_state),
        T(test_the_first_steps_wait_is_warmup_and_not_counted),
        T(test_low_gpu_utilization_while_input_keeps_up_is_underutilized),
        T(test_a_gpu_busy_and_idle_in_turn_at_the_step_period_is_a_swing),
        T(test_a_swing_while_the_input_keeps_up_points_at_the_host_side),
        T(test_steady_gpu_utilization_is_no_swing),
        T(test_the_jobs_gpu_is_read_not_the_machines),
        T(test_a_rank_learned_late_is_the_files_rank),
        T(test_another_jobs_gpu_swinging_is_not_this_jobs_swing),
        T(test_a_swing_beside_an_overlapped_input_is_not_blamed_on_data),
        T(test_idle_gpu_behind_a_waiting_loop_is_left_to_the_input_finding),
        T(test_peak_above_90_percent_of_the_device_is_near_capacity),
        T(test_peak_at_80_percent_is_not_near_capacity),
        T(test_steady_growth_of_allocated_across_steps_is_a_leak),
        T(test_warmup_then_flat_memory_is_not_growth),
        T(test_inactive_split_blocks_at_peak_reserved_are_fragmentation),
        T(test_allocation_retries_are_reported_with_their_rate),
        T(test_oom_names_step_phase_request_free_and_snapshot_once),
        T(test_oom_with_enough_cached_memory_blames_fragmentation),
        T(test_worker_rss_growing_every_batch_is_copy_on_read),
        T(test_worker_pss_rising_while_rss_stays_flat_is_copy_on_read),
        T(test_a_worker_pss_that_jumps_once_then_stays_is_not_growth),
        T(test_a_spawned_workers_start_up_before_its_first_batch_is_not_growth),
        T(test_the_training_process_growing_is_not_worker_growth),
        T(test_idle_workers_behind_a_waiting_loop_are_handoff_not_cpu_bound),
        T(test_worker_restarts_alone_making_the_loop_wait_are_startup),
        T(test_two_loaders_side_by_side_are_four_workers_and_no_restart),
        T(test_two_loaders_without_sets_read_as_before),
        T(test_an_eval_loaders_sets_inside_a_persistent_one_share_its_ids),
        T(test_two_loaders_started_each_epoch_mark_one_step_an_epoch),
        T(test_slow_worker_sets_are_startup_with_the_start_method),
        T(test_worker_restarts_in_a_handoff_advise_persistent_workers),
        T(test_even_waits_with_restarts_are_not_startup),
        T(test_a_long_wait_without_a_worker_start_is_not_startup),
        T(test_worker_startup_on_two_ranks_counts_each_ranks_sets),
        T(test_a_set_whose_worker_starts_a_step_late_is_one_set),
        T(test_loaders_restarted_together_with_a_late_worker_mark_one_step),
        T(test_worker_pids_that_wrap_around_keep_their_sets),
        T(test_workers_needed_counts_the_batches_of_a_step),
        T(test_cpu_busy_workers_that_keep_up_are_not_cpu_bound),
        T(test_busy_workers_are_not_handoff),
        T(test_workers_idle_between_short_epochs_that_are_behind_are_cpu_bound),
        T(test_workers_idle_between_short_epochs_that_keep_up_are_handoff),
        T(test_a_rank_slow_in_data_is_the_straggler_and_the_waiting_ranks_are_not_blamed),
        T(test_a_rank_slow_in_compute_is_the_straggler_with_cause_compute),
        T(test_ranks_waiting_alike_have_no_straggler),
        T(test_one_slow_rank_is_imbalance),
        T(test_one_rank_holding_more_memory_is_imbalance),
        T(test_ranks_alike_are_not_imbalance),
        T(test_times_are_wall_clock_and_series_keep_their_labels),
        T(test_series_sampled_together_share_times_and_gaps_keep_their_own),
        T(test_a_damaged_middle_and_a_truncated_tail_are_noted_and_the_rest_is_read),
        T(test_a_file_that_is_not_a_record_file_is_skipped_and_named),
        T(test_a_missing_directory_fails_naming_it),
        T(test_an_empty_directory_fails_saying_it_has_no_record_files),
        T(test_two_hosts_directories_merge_into_one_run),
        T(test_json_report_has_run_summary_findings_and_damage),
        T(test_text_report_opens_with_the_verdict_and_units),
        T(test_headline_says_time_lost_and_speedup),
        T(test_html_opens_with_the_verdict_and_shows_units),
        T(test_titles_give_memory_in_gib_and_mib),
        T(test_eight_ranks_of_four_workers_are_32_workers_and_4_per_rank),
        T(test_worker_ids_above_255_are_not_folded_onto_small_ones),
        T(test_rule_table_has_unique_ids_each_with_one_apply_function),
        T(test_severity_and_confidence_names_are_the_reports_words),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
