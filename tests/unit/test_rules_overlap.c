/*
 * test_rules_overlap.c - input.overlapped (src/lib/rules_overlap.c): a
 * loop that waited on the host while its GPU stayed busy (the host ran
 * ahead and waited on queued work) is not told to fix its input; the GPU
 * is the one the training process held memory on, else every GPU
 * recorded; one training process only.  Every number below is worked
 * out by hand in its comment.
 */
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
#include "trainmon.h"

#define FX_NAME "test_rules_overlap"
#include "fixture.h"

#define NSTEPS 40

/* A training process of NSTEPS optimizer steps of 0.1 s from 0 (4 s),
 * each spending share of it preparing its batch itself (no DataLoader)
 * or, with loader, waiting for a DataLoader batch; file and rank as
 * given; with reserved > 0 a capture of that much CUDA memory. */
static void put_capture(tm_rec *w, double reserved);

static void put_loop_of(const char *file, const char *role, int rank, double share, bool loader,
                        double reserved)
{
    double dur[NSTEPS], prep[NSTEPS], wait[NSTEPS];
    for (size_t i = 0; i < NSTEPS; i++) {
        dur[i] = 0.1;
        prep[i] = loader ? -1 : 0.1 * share;
        wait[i] = 0.1 * share;
    }
    tm_rec *w = open_rec(file, role, rank);
    put_steps_waiting(w, NSTEPS, dur, prep, wait, -1);
    if (reserved != 0)
        put_capture(w, reserved);
    tm_rec_close(&w);
}

static void put_loop(const char *file, const char *role, int rank, double share, bool loader)
{
    put_loop_of(file, role, rank, share, loader, 0);
}

/* A memory capture of the training process: reserved bytes of a CUDA
 * device (the process used a GPU), or, reserved < 0, only the device's
 * size (CUDA initialised, nothing reserved: torch.cuda.mem_get_info()). */
static void put_capture(tm_rec *w, double reserved)
{
    tm_inproc_capture c = {.source = 1,
                           .device = 0,
                           .step = 1,
                           .allocated = reserved > 0 ? reserved / 2 : NAN,
                           .reserved = reserved > 0 ? reserved : NAN,
                           .peak_allocated = NAN,
                           .active = NAN,
                           .inactive_split = NAN,
                           .requested = NAN,
                           .free_device = NAN,
                           .total_device = 80 * GiB,
                           .num_alloc_retries = NAN,
                           .num_ooms = NAN,
                           .host_rss = 1e9,
                           .tag = "step",
                           .tag_len = 4};
    uint8_t buf[512];
    int len = tm_inproc_encode_capture(&c, buf, sizeof buf);
    assert_true(len > 0);
    assert_int_equal(tm_rec_append(w, TM_REC_CAPTURE, at(0.05), buf, (uint32_t)len), 0);
}

/* The system record: gpu.utilization of GPU 0 (util0) and, if util1 >= 0,
 * of GPU 1, every 0.1 s from 0 to 4 s (n samples, at most 41); with
 * by_pid the training process (this one: the header's pid is the
 * writer's) holds memory on GPU 0, another process on GPU 1. */
static void put_gpus(size_t n, double util0, double util1, bool by_pid)
{
    char lab[64];
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (size_t i = 0; i < n; i++) {
        double t = 0.1 * (double)i;
        put_value(s, t, "gpu.utilization", "gpu=0,uuid=GPU-0", util0);
        if (util1 >= 0)
            put_value(s, t, "gpu.utilization", "gpu=1,uuid=GPU-1", util1);
        if (by_pid) {
            snprintf(lab, sizeof lab, "gpu=0,pid=%d", (int)getpid());
            put_value(s, t, "gpu.process_memory_bytes", lab, 2e9);
            put_value(s, t, "gpu.process_memory_bytes", "gpu=1,pid=1", 2e9);
        }
    }
    tm_rec_close(&s);
}

/* The run directory analysed: no input.overlapped, input.main_prep. */
static void expect_the_preparation_verdict(void)
{
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.overlapped"));
    assert_non_null(tm_analysis_find(a, "input.main_prep"));
    done(&run, &a);
}

/* build-nanogpt on a GPU: 85% of each step between the optimizer step
 * and the next forward (a blocking copy waiting for the GPU), and the GPU
 * 98% busy.  Had the GPU idled for the 85% it could have been busy at
 * most 15%; 0.98 >= 0.15 + 0.20 and >= 0.85: overlapped, and no
 * input.main_prep. */
static void test_a_prep_span_while_the_gpu_is_busy_is_overlapped(void **st)
{
    (void)st;
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    put_gpus(41, 0.98, -1, true);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.overlapped");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "low");
    assert_true(fabs(ev_num(f, "data_wait_fraction") - 0.85) < 1e-6);
    assert_true(fabs(ev_num(f, "gpu_utilization_mean") - 0.98) < 1e-9);
    assert_true(fabs(ev_num(f, "gpu_busy_if_starved") - 0.15) < 1e-6);
    /* the samples in the analysis window, the steps' span (0 to 4 s, the
     * ends to a nanosecond): 41, give or take the two at the ends */
    assert_true(ev_num(f, "gpus") == 1);
    assert_true(ev_num(f, "gpu_samples") >= 39 && ev_num(f, "gpu_samples") <= 41);
    assert_non_null(strstr(f->title, "preparing its batches"));
    assert_non_null(strstr(f->advice, "blocking copy"));
    assert_null(tm_analysis_find(a, "input.main_prep"));
    assert_null(tm_analysis_find(a, "input.ok"));
    done(&run, &a);
}

/* The same loop with its GPU 20% busy: under 0.15 + 0.20 = 0.35, the GPU
 * idled through the preparation: input.main_prep as before. */
static void test_a_prep_span_while_the_gpu_idles_is_the_preparation(void **st)
{
    (void)st;
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    put_gpus(41, 0.20, -1, true);
    expect_the_preparation_verdict();
}

/* A DataLoader loop waiting 30% of each step: the GPU busy 95% >= 0.70 +
 * 0.20 = 0.90: overlapped ("waited for data"); busy 88% (>= 0.85 but
 * under 0.90): input.data_wait as before. */
static void test_the_margin_over_what_a_starved_gpu_could_do_decides(void **st)
{
    (void)st;
    put_loop("pid42.tmr", "pid42", -1, 0.30, true);
    put_gpus(41, 0.95, -1, true);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.overlapped");
    assert_non_null(f);
    assert_non_null(strstr(f->title, "waited for data 30%"));
    assert_null(tm_analysis_find(a, "input.data_wait"));
    done(&run, &a);
    teardown(st);
    setup(st);
    put_loop("pid42.tmr", "pid42", -1, 0.30, true);
    put_gpus(41, 0.88, -1, true);
    a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.overlapped"));
    assert_non_null(tm_analysis_find(a, "input.data_wait"));
    done(&run, &a);
}

/* Two GPUs, the job on GPU 0 (98%), GPU 1 idle: with the processes'
 * memory the job's GPU alone counts (98%: overlapped, 1 GPU, "the
 * training process"); without it, and with no device memory of its own
 * (a CPU job beside another's GPU), the GPUs are not the job's: the
 * preparation verdict. */
static void test_the_gpu_is_the_one_the_training_process_held_memory_on(void **st)
{
    (void)st;
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    put_gpus(41, 0.98, 0.0, true);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.overlapped");
    assert_non_null(f);
    assert_true(ev_num(f, "gpus") == 1);
    assert_true(fabs(ev_num(f, "gpu_utilization_mean") - 0.98) < 1e-9);
    assert_non_null(strstr(f->evidence, "\"gpus_of\":\"the training process\""));
    done(&run, &a);
    teardown(st);
    setup(st);
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    put_gpus(41, 0.98, 0.0, false);
    expect_the_preparation_verdict();
}

/* The training process holds mem0 bytes on GPU 0 (util0) and a stray
 * context of 0.5 GB on GPU 1 (util1: idle, or another job's) */
static void put_gpus_stray(double util0, double mem0, double util1)
{
    char lab0[64], lab1[64];
    snprintf(lab0, sizeof lab0, "gpu=0,pid=%d", (int)getpid());
    snprintf(lab1, sizeof lab1, "gpu=1,pid=%d", (int)getpid());
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (size_t i = 0; i < 41; i++) {
        double t = 0.1 * (double)i;
        put_value(s, t, "gpu.utilization", "gpu=0,uuid=GPU-0", util0);
        put_value(s, t, "gpu.utilization", "gpu=1,uuid=GPU-1", util1);
        put_value(s, t, "gpu.process_memory_bytes", lab0, mem0);
        put_value(s, t, "gpu.process_memory_bytes", lab1, 0.5e9);
    }
    tm_rec_close(&s);
}

/* A stray context (0.5 GB, 2.5% of the 20 GB the process holds on GPU 0:
 * under TM_AN_JOB_GPU_SHARE) is no GPU of the job's.  Its GPU 98% busy,
 * the stray one idle: 0.98 over 1 GPU, overlapped (both GPUs, 0.49: not).
 * A DataLoader loop waiting 30%, its GPU 82% busy, the stray one 100% (the
 * other job's): 0.82 < 0.90, input.data_wait (both: 0.91, overlapped). */
static void test_a_stray_context_on_another_gpu_is_no_gpu_of_the_jobs(void **st)
{
    (void)st;
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    put_gpus_stray(0.98, 20e9, 0.0);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.overlapped");
    assert_non_null(f);
    assert_true(ev_num(f, "gpus") == 1);
    assert_true(fabs(ev_num(f, "gpu_utilization_mean") - 0.98) < 1e-9);
    done(&run, &a);
    teardown(st);
    setup(st);
    put_loop("pid42.tmr", "pid42", -1, 0.30, true);
    put_gpus_stray(0.82, 20e9, 1.0);
    a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.overlapped"));
    assert_non_null(tm_analysis_find(a, "input.data_wait"));
    assert_true(fabs(a->sum.job_gpu_util - 0.82) < 1e-9);
    done(&run, &a);
}

/* Not said: two training processes (a rank's GPU spins in NCCL's kernels
 * while it waits for the other), and under 10 GPU samples (5 here). */
static void test_ranks_and_few_samples_keep_the_input_verdict(void **st)
{
    (void)st;
    put_loop("rank0.tmr", "rank0", 0, 0.85, false);
    put_loop("rank1.tmr", "rank1", 1, 0.85, false);
    put_gpus(41, 0.98, -1, false);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "input.overlapped"));
    assert_non_null(tm_analysis_find(a, "input.main_prep"));
    done(&run, &a);
    teardown(st);
    setup(st);
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    put_gpus(5, 0.98, -1, true);
    expect_the_preparation_verdict();
}

/* NVML does not name the process (a container's pid), but its captures
 * hold CUDA memory: every GPU recorded, one at 98% (overlapped), or two
 * at 98% and 0% (mean 0.49 < 0.85: the preparation verdict). */
static void test_a_gpu_job_nvml_does_not_name_reads_every_gpu(void **st)
{
    (void)st;
    put_loop_of("pid42.tmr", "pid42", -1, 0.85, false, 4 * GiB);
    put_gpus(41, 0.98, -1, false);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "input.overlapped");
    assert_non_null(f);
    assert_non_null(strstr(f->evidence, "\"gpus_of\":\"all recorded\""));
    done(&run, &a);
    teardown(st);
    setup(st);
    put_loop_of("pid42.tmr", "pid42", -1, 0.85, false, 4 * GiB);
    put_gpus(41, 0.98, 0.0, false);
    expect_the_preparation_verdict();
}

/* A CPU job that only asked CUDA for the device's size (its captures hold
 * the device's total, no memory reserved), NVML not naming it, beside a
 * GPU 98% busy: not the job's GPU, the preparation verdict. */
static void test_cuda_initialised_without_memory_is_no_gpu_job(void **st)
{
    (void)st;
    put_loop_of("pid42.tmr", "pid42", -1, 0.85, false, -1);
    put_gpus(41, 0.98, -1, false);
    expect_the_preparation_verdict();
}

/* NVML names the process on GPU 0, which has no utilization series (MIG:
 * not supported), while GPU 1 (another's) is 98% busy: the job's GPU is
 * unknown, not GPU 1; the preparation verdict. */
static void test_the_jobs_gpu_without_utilization_is_unknown(void **st)
{
    (void)st;
    put_loop("pid42.tmr", "pid42", -1, 0.85, false);
    char lab[64];
    snprintf(lab, sizeof lab, "gpu=0,pid=%d", (int)getpid());
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (size_t i = 0; i < 41; i++) {
        put_value(s, 0.1 * (double)i, "gpu.process_memory_bytes", lab, 2e9);
        put_value(s, 0.1 * (double)i, "gpu.utilization", "gpu=1,uuid=GPU-1", 0.98);
    }
    tm_rec_close(&s);
    expect_the_preparation_verdict();
}

/* Only the samples inside training steps count: 20 steps of 0.1 s, each
 * 30% preparation, 0.1 s apart (an eval run between: no step), the GPU
 * 88% busy in the steps and 100% between.  Over the whole span the mean
 * is (0.88 + 1) / 2 = 0.94 >= 0.70 + 0.20: overlapped; over the steps
 * 0.88 < 0.90: not, and the preparation verdict stays. */
static void test_only_samples_inside_the_steps_count(void **st)
{
    (void)st;
    uint8_t buf[128];
    tm_rec *w = open_rec("pid42.tmr", "pid42", -1);
    for (size_t i = 0; i < 20; i++) {
        double t = 0.2 * (double)i; /* a step at [t, t+0.1), none at [t+0.1, t+0.2) */
        int64_t p = 30000000;       /* 30 ms of 100 */
        tm_inproc_step s = {.step = i,
                            .start_ns = at(t),
                            .end_ns = at(t + 0.1),
                            .data_wait_ns = p,
                            .boundary = TM_STEP_BY_OPTIMIZER,
                            .phase = TM_STEP_TRAIN,
                            .micro_batches = 1,
                            .batches = 0,
                            .prep_ns = p,
                            .prep_cpu_ns = p,
                            .backward_ns = -1,
                            .wait_cpu_ns = -1,
                            .collective_ns = -1,
                            .opt_start_ns = at(t + 0.1) - 1000,
                            .optimizer = 0};
        int len = tm_inproc_encode_step(&s, buf, sizeof buf);
        assert_true(len > 0);
        assert_int_equal(tm_rec_append(w, TM_REC_STEP, s.end_ns, buf, (uint32_t)len), 0);
    }
    tm_rec_close(&w);
    char lab[64];
    snprintf(lab, sizeof lab, "gpu=0,pid=%d", (int)getpid());
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (size_t i = 0; i < 80; i++) { /* every 0.05 s: two in each step, two between */
        double t = 0.025 + 0.05 * (double)i;
        bool in_step = fmod(t, 0.2) < 0.1;
        put_value(s, t, "gpu.utilization", "gpu=0,uuid=GPU-0", in_step ? 0.88 : 1.0);
        put_value(s, t, "gpu.process_memory_bytes", lab, 2e9);
    }
    tm_rec_close(&s);
    expect_the_preparation_verdict();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_prep_span_while_the_gpu_is_busy_is_overlapped, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_prep_span_while_the_gpu_idles_is_the_preparation,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_margin_over_what_a_starved_gpu_could_do_decides,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_gpu_is_the_one_the_training_process_held_memory_on,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_stray_context_on_another_gpu_is_no_gpu_of_the_jobs,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_ranks_and_few_samples_keep_the_input_verdict, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_gpu_job_nvml_does_not_name_reads_every_gpu, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_the_jobs_gpu_without_utilization_is_unknown, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_cuda_initialised_without_memory_is_no_gpu_job, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_only_samples_inside_the_steps_count, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
