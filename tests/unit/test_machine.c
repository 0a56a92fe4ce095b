/*
 * test_machine.c - the CPUs a job may use (machine.c): the CPU-list,
 * cpu.max and CFS parsers, reading fixture trees (tests/fixtures/machine_*),
 * the one worker-count advice, and the rules that use them on crafted runs:
 * host.cpu_oversubscribed and the worker count of input.cpu_bound.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "analysis.h"
#include "machine.h"
#include "rules.h"
#include "series.h"
#include "trainmon.h"

#define FX_NAME "test_machine"
#include "fixture.h"

static int parse_list(const char *s)
{
    return tm_machine_parse_cpulist(s, strlen(s));
}

/* --- parsers */

static void test_cpulist_counts_ranges_and_single_cpus(void **st)
{
    (void)st;
    assert_int_equal(parse_list("0-3,8,10-11"), 7);
    assert_int_equal(parse_list("0"), 1);
    assert_int_equal(parse_list("0-1\n"), 2);
    assert_int_equal(parse_list("5-5"), 1);
    assert_int_equal(parse_list("0-63,128-191"), 128);
}

static void test_cpulist_rejects_malformed_lists(void **st)
{
    (void)st;
    const char *bad[] = {"",   "\n",  "3-1",           "0,",        ",0",  "0--3", "a", "0-",
                         "-3", "0 1", "0-99999999999", "0-2000000", "1,,2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(parse_list(bad[i]), -EINVAL);
}

static void test_cpulist_needs_no_nul_terminator(void **st)
{
    (void)st;
    const char buf[] = {'0', '-', '3', '9', '9'};
    assert_int_equal(tm_machine_parse_cpulist(buf, 3), 4);
}

static void test_cpumax_quota_over_period_and_max_is_no_limit(void **st)
{
    (void)st;
    double c = 0;
    assert_int_equal(tm_machine_parse_cpumax("150000 100000\n", 14, &c), 0);
    assert_true(fabs(c - 1.5) < 1e-9);
    assert_int_equal(tm_machine_parse_cpumax("max 100000", 10, &c), 0);
    assert_true(isnan(c));
    assert_int_equal(tm_machine_parse_cpumax("200000", 6, &c), 0); /* default period */
    assert_true(fabs(c - 2.0) < 1e-9);
    const char *bad[] = {"", "max 0", "-5 100000", "0 100000", "1 2 3", "x 100000", "100 -1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(tm_machine_parse_cpumax(bad[i], strlen(bad[i]), &c), -EINVAL);
}

static void test_cfs_quota_of_minus_one_is_no_limit(void **st)
{
    (void)st;
    double c = 0;
    assert_int_equal(tm_machine_parse_cfs("-1\n", 3, "100000\n", 7, &c), 0);
    assert_true(isnan(c));
    assert_int_equal(tm_machine_parse_cfs("50000\n", 6, "100000\n", 7, &c), 0);
    assert_true(fabs(c - 0.5) < 1e-9);
    assert_int_equal(tm_machine_parse_cfs("50000", 5, "0", 1, &c), -EINVAL);
    assert_int_equal(tm_machine_parse_cfs("", 0, "100000", 6, &c), -EINVAL);
}

static void test_v1_cpu_path_skips_cpuset_and_cpuacct_alone(void **st)
{
    (void)st;
    char out[64];
    const char *t = "12:cpuset:/a\n3:cpuacct:/b\n4:cpu,cpuacct:/docker/abc\n0::/\n";
    assert_int_equal(tm_machine_parse_v1_cpu_path(t, strlen(t), out, sizeof out), 1);
    assert_string_equal(out, "/docker/abc");
    const char *v2 = "0::/user.slice\n";
    assert_int_equal(tm_machine_parse_v1_cpu_path(v2, strlen(v2), out, sizeof out), 0);
    assert_string_equal(out, "");
    char small[4];
    assert_int_equal(tm_machine_parse_v1_cpu_path(t, strlen(t), small, sizeof small), 0);
}

/* --- reading fixture trees */

static void use_fixture(const char *name)
{
    char proc[256], sys[256];
    snprintf(proc, sizeof proc, "tests/fixtures/%s/proc", name);
    snprintf(sys, sizeof sys, "tests/fixtures/%s/sys", name);
    tm_set_proc_root(proc);
    tm_set_sys_root(sys);
}

static int reset_roots(void **st)
{
    (void)st;
    tm_set_proc_root(NULL);
    tm_set_sys_root(NULL);
    return 0;
}

static void test_v2_usable_is_the_tightest_quota_below_the_affinity(void **st)
{
    (void)st;
    use_fixture("machine_v2");
    tm_machine m;
    tm_machine_read(&m, 4242);
    assert_int_equal(m.online, 16);
    assert_int_equal(m.affinity, 7);
    assert_true(fabs(m.quota - 1.5) < 1e-9); /* its own 1.5, not the parent's 3 */
    assert_true(fabs(m.usable - 1.5) < 1e-9);
}

static void test_v2_max_quota_leaves_the_affinity(void **st)
{
    (void)st;
    use_fixture("machine_v2max");
    tm_machine m;
    tm_machine_read(&m, 77);
    assert_int_equal(m.online, 4);
    assert_int_equal(m.affinity, 2);
    assert_true(isnan(m.quota));
    assert_true(fabs(m.usable - 2) < 1e-9);
}

static void test_v1_cfs_quota_of_a_container_limits_usable(void **st)
{
    (void)st;
    use_fixture("machine_v1");
    tm_machine m;
    tm_machine_read(&m, 99);
    assert_int_equal(m.affinity, 8);
    assert_true(fabs(m.quota - 2) < 1e-9);
    assert_true(fabs(m.usable - 2) < 1e-9);
}

static void test_missing_pid_leaves_online_only(void **st)
{
    (void)st;
    use_fixture("machine_v2");
    tm_machine m;
    tm_machine_read(&m, 5);
    assert_int_equal(m.affinity, -1);
    assert_true(isnan(m.quota));
    assert_true(fabs(m.usable - 16) < 1e-9);
}

static void test_this_process_has_usable_cpus(void **st)
{
    (void)st;
    tm_machine m;
    tm_machine_read(&m, 0);
    assert_true(m.usable >= 0.01);
    assert_true(m.affinity >= 1);
}

/* --- the one worker-count advice */

static void test_advice_never_proposes_more_workers_than_usable_cores(void **st)
{
    (void)st;
    char buf[1024];
    bool capped = false;
    /* The demo: 13 workers would keep up, the job may use 2 cores, 1 rank. */
    double n = tm_machine_workers_advice(buf, sizeof buf, 13, 1, 2.0, 1, false, "x", &capped);
    assert_true(capped);
    assert_true(n <= 2);
    assert_true(n == 2); /* the loop waits for data: the workers may have both cores */
    assert_non_null(strstr(buf, "would need about 13 workers per rank"));
    assert_non_null(strstr(buf, "may use 2 cores"));
    /* the 2 workers that fit do the work of 13 when a sample costs 2/13 of
     * now: 1 - 2/13 = 0.846, 85% less */
    assert_non_null(strstr(buf, "With the 2 workers that fit, each sample must cost 85% less "
                                "(2/13 of now) to keep up"));
    assert_non_null(strstr(buf, "or give the job 13 cores per rank"));
    /* the remedy is the first sentence (the report's "Top remedy"), the
     * arithmetic behind it follows */
    assert_int_equal(strncmp(buf, "With the 2 workers that fit", 27), 0);
    const char *end = strstr(buf, ". ");
    assert_non_null(end);
    assert_true(strstr(buf, "or give the job 13 cores per rank") < end);
    assert_true(strstr(buf, "would need about 13") > end);
    assert_null(strstr(buf, "num_workers=13"));
    assert_null(strstr(buf, "GPU"));
    /* Every number in the text is at most 2, but the need itself. */
    for (const char *p = strstr(buf, "num_workers="); p; p = strstr(p + 1, "num_workers="))
        assert_true(atof(p + 12) <= 2);
}

static void test_advice_within_the_cores_is_the_need(void **st)
{
    (void)st;
    char buf[1024];
    bool capped = true;
    double n = tm_machine_workers_advice(buf, sizeof buf, 3, 1, 16.0, 2, true, "", &capped);
    assert_false(capped);
    assert_true(n == 3);
    assert_non_null(strstr(buf, "num_workers=3"));
}

static void test_advice_on_unknown_cores_keeps_the_need_with_its_condition(void **st)
{
    (void)st;
    char buf[1024];
    double n = tm_machine_workers_advice(buf, sizeof buf, 5, 2, NAN, 1, true, "", NULL);
    assert_true(n == 5);
    assert_non_null(strstr(buf, "num_workers=5 if the machine has 5 free cores"));
}

static void test_advice_without_a_need_proposes_no_count(void **st)
{
    (void)st;
    char buf[1024];
    double n = tm_machine_workers_advice(buf, sizeof buf, NAN, 2, 4.0, 1, false, "", NULL);
    assert_true(isnan(n));
    assert_null(strstr(buf, "num_workers="));
    assert_null(strstr(buf, "nan"));
}

static void test_advice_with_workers_already_above_the_cores_says_so(void **st)
{
    (void)st;
    char buf[1024];
    double n = tm_machine_workers_advice(buf, sizeof buf, 8, 4, 2.0, 1, false, "", NULL);
    assert_true(n == 2);
    assert_non_null(strstr(buf, "already oversubscribe"));
    /* 2 of 8: 75% less */
    assert_non_null(strstr(buf, "each sample must cost 75% less (2/8 of now)"));
}

static void test_advice_with_no_core_per_rank_says_so(void **st)
{
    (void)st;
    char buf[1024];
    /* 3 ranks on 2 cores: floor(2/3) = 0 workers fit per rank */
    double n = tm_machine_workers_advice(buf, sizeof buf, 4, 1, 2.0, 3, false, "", NULL);
    assert_true(n == 0);
    assert_non_null(strstr(buf, "No core is left per rank for workers"));
    assert_int_equal(strncmp(buf,
                             "No core is left per rank for workers: give the job 4 cores per "
                             "rank, or make each sample cheaper",
                             96),
                     0);
    assert_null(strstr(buf, "must cost"));
}

/* --- rules on crafted runs */

static void write_meta(const char *json)
{
    char path[512];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
}

/* Steps whose compute is compute[i % ncomp], each waiting wait seconds. */
static void put_steps_compute(tm_rec *w, size_t n, const double *compute, size_t ncomp, double wait)
{
    uint8_t buf[64];
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        double d = compute[i % ncomp] + wait;
        tm_inproc_step s = {.step = i,
                            .start_ns = at(t),
                            .end_ns = at(t + d),
                            .data_wait_ns = (int64_t)(wait * (double)S_NS)};
        t += d;
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
}

static void put_psi_cpu(double some, double secs)
{
    tm_rec *s = open_rec("system.tmr", "system", -1);
    int id = tm_rec_series(s, TM_SER_PSI_CPU_SOME_AVG10, "", "");
    assert_true(id > 0);
    uint32_t u = (uint32_t)id;
    for (double t = 0; t <= secs; t += 0.5)
        assert_int_equal(tm_rec_sample(s, at(t), &u, &some, 1), 0);
    tm_rec_close(&s);
}

/* The job: 4 torch threads and 3 busy workers on 1 usable CPU,
 * tasks waiting for a CPU 63% of the time, compute alternating between
 * uncontended (0.05 s) and contended (0.4 s) steps. */
static void test_threads_and_workers_above_usable_cpus_with_pressure_is_oversubscribed(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"online_cpus\": 2, \"affinity_cpus\": 1, "
               "\"usable_cpus\": 1.000, \"data_paths\": []}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    assert_int_equal(tm_rec_event(r0, at(0), "torch_threads",
                                  "{\"why\": \"attach\", \"intra_op\": 2, \"inter_op\": 2}"),
                     0);
    assert_int_equal(tm_rec_event(r0, at(0.01), "torch_threads",
                                  "{\"why\": \"set_num_threads\", \"intra_op\": 4, "
                                  "\"inter_op\": 2, \"affinity_cpus\": 1}"),
                     0);
    const double comp[] = {0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.05, 0.05};
    put_steps_compute(r0, 60, comp, 10, 0.001);
    tm_rec_close(&r0);
    for (int k = 0; k < 3; k++)
        put_worker_file(k, 300u + (unsigned)k, 20, 0.5, 0.9, 100e6, 0);
    put_psi_cpu(0.63, 25);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "host.cpu_oversubscribed");
    assert_non_null(f);
    assert_true(ev_num(f, "runnable_threads") == 7); /* 4 x 1 + 3 */
    assert_true(ev_num(f, "usable_cpus") == 1);
    assert_true(ev_num(f, "torch_threads_per_rank") == 4);
    assert_true(ev_num(f, "workers_on_host") == 3);
    assert_true(fabs(ev_num(f, "compute_slowdown") - 8) < 0.01);
    assert_string_equal(tm_severity_name(f->severity), "high");
    assert_string_equal(tm_confidence_name(f->confidence), "high");
    /* The fix with its numbers: 1 thread, fewer workers (0 fit on 1 core). */
    assert_non_null(strstr(f->advice, "torch.set_num_threads(1)"));
    assert_non_null(strstr(f->advice, "OMP_NUM_THREADS=1"));
    assert_non_null(strstr(f->advice, "num_workers=0"));
    assert_true(ev_num(f, "runnable_threads_after") <= 1);
    assert_non_null(strstr(f->title, "7 runnable threads"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

/* The counts at attach are in the agent's meta (inproc.start); a later
 * torch.set_num_threads event wins over them, whatever the order. */
static void test_thread_counts_come_from_set_num_threads_else_the_meta(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"usable_cpus\": 1.000}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    assert_int_equal(tm_rec_event(r0, at(0.02), "inproc.start", "{\"pid\": 1, \"intra_op\": 2}"),
                     0);
    assert_int_equal(tm_rec_event(r0, at(0.01), "torch_threads", "{\"intra_op\": 6}"), 0);
    const double comp[] = {0.4, 0.05};
    put_steps_compute(r0, 60, comp, 2, 0.001);
    tm_rec_close(&r0);
    tm_rec *r1 = open_rec("rank1.tmr", "rank1", 1);
    assert_int_equal(tm_rec_event(r1, at(0), "inproc.start", "{\"pid\": 2, \"intra_op\": 3}"), 0);
    put_steps_compute(r1, 60, comp, 2, 0.001);
    tm_rec_close(&r1);
    put_psi_cpu(0.5, 15);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "host.cpu_oversubscribed");
    assert_non_null(f);
    assert_true(ev_num(f, "torch_threads_per_rank") == 6); /* the largest of 6 and 3 */
    assert_true(ev_num(f, "ranks_on_host") == 2);
    assert_true(ev_num(f, "runnable_threads") == 12);
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_threads_within_usable_cpus_are_not_oversubscribed(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"online_cpus\": 8, \"usable_cpus\": 8.000}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    assert_int_equal(tm_rec_event(r0, at(0), "torch_threads", "{\"intra_op\": 4}"), 0);
    const double comp[] = {0.4, 0.05};
    put_steps_compute(r0, 60, comp, 2, 0.001);
    tm_rec_close(&r0);
    for (int k = 0; k < 3; k++)
        put_worker_file(k, 300u + (unsigned)k, 20, 0.5, 0.9, 100e6, 0);
    put_psi_cpu(0.63, 15);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host.cpu_oversubscribed")); /* 7 threads on 8 CPUs */
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_excess_threads_without_pressure_or_slowdown_are_not_a_finding(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"usable_cpus\": 2.000}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    assert_int_equal(tm_rec_event(r0, at(0), "torch_threads", "{\"intra_op\": 4}"), 0);
    const double comp[] = {0.1, 0.1, 0.11};
    put_steps_compute(r0, 60, comp, 3, 0.001);
    tm_rec_close(&r0);
    put_psi_cpu(0.02, 15);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host.cpu_oversubscribed"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_unknown_thread_counts_are_no_oversubscription_finding(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"usable_cpus\": 1.000}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    const double comp[] = {0.4, 0.05};
    put_steps_compute(r0, 60, comp, 2, 0.001);
    tm_rec_close(&r0);
    put_psi_cpu(0.63, 15);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host.cpu_oversubscribed"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

/* The demo on a busy 2-core machine: the loop waits for data 90% of the
 * time, 1 torch thread + 2 workers on 2 CPUs.  The workers are what the
 * loop needs: no oversubscription finding (the input finding says why it
 * waits), and never "fewer workers". */
static void test_a_loop_waiting_for_data_with_one_thread_is_not_oversubscribed(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"usable_cpus\": 2.000}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    assert_int_equal(tm_rec_event(r0, at(0), "torch_threads", "{\"intra_op\": 1}"), 0);
    const double comp[] = {0.06, 0.06, 0.06, 0.02};
    put_steps_compute(r0, 60, comp, 4, 0.5);
    tm_rec_close(&r0);
    for (int k = 0; k < 2; k++)
        put_worker_file(k, 300u + (unsigned)k, 20, 1.0, 0.2, 100e6, 0);
    put_psi_cpu(0.9, 35);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "host.cpu_oversubscribed"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

/* The same loop with 4 torch threads: cut the threads, keep the workers. */
static void test_a_loop_waiting_for_data_is_told_to_cut_threads_not_workers(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"usable_cpus\": 2.000}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    assert_int_equal(tm_rec_event(r0, at(0), "torch_threads", "{\"intra_op\": 4}"), 0);
    const double comp[] = {0.06};
    put_steps_compute(r0, 60, comp, 1, 0.5);
    tm_rec_close(&r0);
    for (int k = 0; k < 2; k++)
        put_worker_file(k, 300u + (unsigned)k, 20, 1.0, 0.2, 100e6, 0);
    put_psi_cpu(0.9, 35);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "host.cpu_oversubscribed");
    assert_non_null(f);
    assert_non_null(strstr(f->advice, "torch.set_num_threads(1)"));
    assert_null(strstr(f->advice, "num_workers="));
    assert_true(isnan(ev_num(f, "advised_workers_per_rank")));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

/* The demo's scenario on a 2-core machine: a worker takes 0.25 s per batch,
 * a step computes in 0.02 s, 13 workers would keep up. */
static void test_cpu_bound_advice_fits_the_usable_cores_and_knows_no_gpu(void **st)
{
    (void)st;
    write_meta("{\"host\": \"h\", \"online_cpus\": 2, \"usable_cpus\": 2.000, "
               "\"data_paths\": [{\"path\": \"/data\"}]}\n");
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    const double comp[] = {0.02};
    put_steps_compute(r0, 100, comp, 1, 0.24);
    tm_rec_close(&r0);
    put_worker_file(0, 200, 50, 0.25, 0.97, 100e6, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    assert_int_equal(
        tm_rec_event(s, at(0), "run_target", "{\"path\": \"/data\", \"disks\": [\"sda\"]}"), 0);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.cpu_bound");
    assert_non_null(f);
    assert_true(ev_num(f, "workers_needed") == 13);
    assert_true(ev_num(f, "workers_advised") <= 2);
    assert_null(strstr(f->advice, "num_workers=13"));
    assert_non_null(strstr(f->advice, "may use 2 cores"));
    assert_null(strstr(f->advice, "GPU"));
    assert_null(strstr(f->advice, "-d DATA"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_data_wait_advice_without_gpu_or_data_paths(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("pid42.tmr", "pid42", -1);
    const double comp[] = {0.08};
    put_steps_compute(r0, 50, comp, 1, 0.02);
    tm_rec_close(&r0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_null(strstr(f->advice, "GPU"));
    assert_non_null(strstr(f->advice, "the training loop"));
    assert_non_null(strstr(f->advice, "-d DATA")); /* not given: proposed */
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_data_wait_advice_does_not_repeat_the_d_option_given(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("pid42.tmr", "pid42", -1);
    const double comp[] = {0.08};
    put_steps_compute(r0, 50, comp, 1, 0.02);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    assert_int_equal(tm_rec_event(s, at(0), "run_target", "{\"path\": \"/d\", \"disks\": []}"), 0);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_null(strstr(f->advice, "-d DATA"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

static void test_data_wait_advice_with_a_gpu_speaks_of_the_gpu(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("pid42.tmr", "pid42", -1);
    const double comp[] = {0.08};
    put_steps_compute(r0, 50, comp, 1, 0.02);
    tm_rec_close(&r0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    int id = tm_rec_series(s, TM_SER_GPU_UTILIZATION, "gpu=0", "");
    assert_true(id > 0);
    uint32_t u = (uint32_t)id;
    double v = 0.6;
    for (double t = 0; t <= 5; t += 0.5)
        assert_int_equal(tm_rec_sample(s, at(t), &u, &v, 1), 0);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.data_wait");
    assert_non_null(f);
    assert_non_null(strstr(f->advice, "keeps the GPU waiting"));
    assert_non_null(strstr(f->advice, "pin_memory=True"));
    tm_analysis_free(&a);
    tm_run_free(&run);
}

#define RUN_TEST(t) cmocka_unit_test_setup_teardown(t, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpulist_counts_ranges_and_single_cpus),
        cmocka_unit_test(test_cpulist_rejects_malformed_lists),
        cmocka_unit_test(test_cpulist_needs_no_nul_terminator),
        cmocka_unit_test(test_cpumax_quota_over_period_and_max_is_no_limit),
        cmocka_unit_test(test_cfs_quota_of_minus_one_is_no_limit),
        cmocka_unit_test(test_v1_cpu_path_skips_cpuset_and_cpuacct_alone),
        cmocka_unit_test_teardown(test_v2_usable_is_the_tightest_quota_below_the_affinity,
                                  reset_roots),
        cmocka_unit_test_teardown(test_v2_max_quota_leaves_the_affinity, reset_roots),
        cmocka_unit_test_teardown(test_v1_cfs_quota_of_a_container_limits_usable, reset_roots),
        cmocka_unit_test_teardown(test_missing_pid_leaves_online_only, reset_roots),
        cmocka_unit_test(test_this_process_has_usable_cpus),
        cmocka_unit_test(test_advice_never_proposes_more_workers_than_usable_cores),
        cmocka_unit_test(test_advice_within_the_cores_is_the_need),
        cmocka_unit_test(test_advice_on_unknown_cores_keeps_the_need_with_its_condition),
        cmocka_unit_test(test_advice_without_a_need_proposes_no_count),
        cmocka_unit_test(test_advice_with_workers_already_above_the_cores_says_so),
        cmocka_unit_test(test_advice_with_no_core_per_rank_says_so),
        RUN_TEST(test_threads_and_workers_above_usable_cpus_with_pressure_is_oversubscribed),
        RUN_TEST(test_thread_counts_come_from_set_num_threads_else_the_meta),
        RUN_TEST(test_threads_within_usable_cpus_are_not_oversubscribed),
        RUN_TEST(test_excess_threads_without_pressure_or_slowdown_are_not_a_finding),
        RUN_TEST(test_unknown_thread_counts_are_no_oversubscription_finding),
        RUN_TEST(test_a_loop_waiting_for_data_with_one_thread_is_not_oversubscribed),
        RUN_TEST(test_a_loop_waiting_for_data_is_told_to_cut_threads_not_workers),
        RUN_TEST(test_cpu_bound_advice_fits_the_usable_cores_and_knows_no_gpu),
        RUN_TEST(test_data_wait_advice_without_gpu_or_data_paths),
        RUN_TEST(test_data_wait_advice_does_not_repeat_the_d_option_given),
        RUN_TEST(test_data_wait_advice_with_a_gpu_speaks_of_the_gpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
