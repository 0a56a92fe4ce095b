/*
 * test_rules_cache.c - data.page_cache and data.small_files
 * (src/lib/rules_cache.c, docs/DIAGNOSIS.md) and the dataset evidence of
 * input.disk_bound: run directories written the way the sampler
 * (collect_dscache.c, the disk collector) and the CPython extension do,
 * loaded and analysed; numbers worked out by hand in the comments.
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
#include "probe.h"
#include "rules.h"
#include "series.h"
#include "trainmon.h"

#define FX_NAME "test_rules_cache"
#include "fixture.h"

/* The two dataset readings of collect_dscache.c. */
static void put_dataset(tm_rec *s, double files, double bytes, double start, double end, double mem)
{
    const char *at[] = {"at=start", "at=end"};
    double frac[] = {start, end};
    for (int k = 0; k < 2; k++) {
        double t = k ? 10.5 : 0;
        put_value(s, t, TM_SER_DATASET_FILES, at[k], files);
        put_value(s, t, TM_SER_DATASET_BYTES, at[k], bytes);
        put_value(s, t, TM_SER_DATASET_CACHED_FRACTION, at[k], frac[k]);
        put_value(s, t, TM_SER_DATASET_WALK_COMPLETE, at[k], 1);
        put_value(s, t, TM_SER_DATASET_MEMORY_BYTES, at[k], mem);
    }
}

/* A job that waits for data 60% of each 0.1 s step (compute 0.04 s), two
 * workers reading from vdb in D state, and the disk reading req bytes per
 * request at rps requests per second; named: `run -d` names vdb (the
 * run_target event); reads: the workers' read rates were sampled. */
static void put_waiting_job_of(double rps, double req, bool named, bool reads)
{
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 100, 0, 0.1, 0.06);
    tm_rec_close(&r0);
    for (int p = 0; p < 2; p++)
        put_worker_file(p, 100u + (unsigned)p, 20, 0.5, 0.1, 200 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    if (named)
        assert_int_equal(tm_rec_event(s, at(0), "run_target",
                                      "{\"path\":\"/data\",\"kind\":\"block\",\"device\":\"vdb\","
                                      "\"disks\":[\"vdb\"],\"why\":\"\"}"),
                         0);
    for (int i = 0; i <= 100; i++) {
        double t = i * 0.1;
        put_value(s, t, "disk.read_bytes_per_second", "device=vdb", rps * req);
        put_value(s, t, "disk.reads_per_second", "device=vdb", rps);
        put_value(s, t, "disk.read_await_seconds", "device=vdb", 0.025);
        put_value(s, t, "disk.utilization", "device=vdb", 1.0);
        put_value(s, t, "disk.queue_depth", "device=vdb", 4);
        for (unsigned p = 0; p < 2; p++) {
            put_proc(s, t, "proc.process_state_d", 100 + p, 1);
            put_proc(s, t, "proc.process_cpu_utilization", 100 + p, 0.05);
            if (reads)
                put_proc(s, t, "proc.process_read_bytes_per_second", 100 + p, rps * req / 2);
        }
    }
    tm_rec_close(&s);
}

static void put_waiting_job(double rps, double req)
{
    put_waiting_job_of(rps, req, true, true);
}

static void put_readings(double files, double bytes, double start, double end, double mem)
{
    tm_rec *s = open_rec("system2.tmr", "system", -1);
    put_dataset(s, files, bytes, start, end, mem);
    tm_rec_close(&s);
}

/* --- the packing gain, by hand */

static void test_pack_gain_by_hand(void **st)
{
    (void)st;
    double gain, after, speedup;
    /* 4 KiB requests: a 128 KiB readahead window carries 32x the bytes;
     * 150 reads/s x 4096 B = 614400 B/s becomes 19660800 B/s.  A 0.1 s
     * step of 0.04 s compute waits 0.06 s; 32x faster reads wait
     * 0.06 / 32 = 0.001875 s: 0.1 / 0.041875 = 2.3881 times faster. */
    tm_an_pack_gain(4096, 614400, NAN, 0.1, 0.04, &gain, &after, &speedup);
    assert_true(fabs(gain - 32) < 1e-12);
    assert_true(fabs(after - 19660800) < 1e-6);
    assert_true(fabs(speedup - 0.1 / 0.041875) < 1e-12);
    /* 256 KiB requests are already larger than a readahead window: no
     * gain (1x, never less), no speed-up. */
    tm_an_pack_gain(262144, 1e6, NAN, 0.1, 0.04, &gain, &after, &speedup);
    assert_true(gain == 1 && after == 1e6 && fabs(speedup - 1) < 1e-12);
    /* No request size: nothing to say. */
    tm_an_pack_gain(NAN, 1e6, NAN, 0.1, 0.04, &gain, &after, &speedup);
    assert_true(isnan(gain) && isnan(after) && isnan(speedup));
    /* A probe got 4 MB/s from the disk reading sequentially: 614400 B/s
     * can grow to 4e6 B/s, 4e6 / 614400 = 6.5104x, not 32x; the wait of
     * 0.06 s becomes 0.06 / 6.5104 = 0.0092160 s: 0.1 / 0.049216 = 2.0319
     * times faster. */
    tm_an_pack_gain(4096, 614400, 4e6, 0.1, 0.04, &gain, &after, &speedup);
    assert_true(fabs(gain - 4e6 / 614400) < 1e-12);
    assert_true(fabs(after - 4e6) < 1e-6);
    assert_true(fabs(speedup - 0.1 / (0.04 + 0.06 * 614400 / 4e6)) < 1e-12);
    /* A ceiling above the packed rate changes nothing; one below the rate
     * now never makes the gain less than 1. */
    tm_an_pack_gain(4096, 614400, 1e9, 0.1, 0.04, &gain, &after, &speedup);
    assert_true(fabs(gain - 32) < 1e-12);
    tm_an_pack_gain(4096, 614400, 1e5, 0.1, 0.04, &gain, &after, &speedup);
    assert_true(gain == 1 && after == 614400);
}

/* --- data.page_cache */

static void test_cold_first_epoch_then_all_cached_says_later_epochs_are_not_disk_bound(void **st)
{
    (void)st;
    /* 48 KiB reads: no small-files finding. */
    put_waiting_job(100, 49152);
    put_readings(1000, 49152000, 0.0, 0.99, 24 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "data.page_cache");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "low");
    assert_non_null(strstr(f->title, "epoch 1 read from disk, 99% cached after: later epochs "
                                     "will not be disk-bound"));
    assert_true(ev_num(f, "dataset_cached_fraction_start") == 0);
    assert_true(fabs(ev_num(f, "dataset_cached_fraction_end") - 0.99) < 1e-9);
    /* 49152000 B / 24 GiB = 0.0019073 */
    assert_true(fabs(ev_num(f, "dataset_memory_ratio") - 49152000 / (24 * GiB)) <
                1e-8); /* 6 digits */
    const tm_finding *d = tm_analysis_find(a, "input.disk_bound");
    assert_non_null(d);
    assert_true(fabs(ev_num(d, "dataset_cached_fraction_end") - 0.99) < 1e-9);
    assert_non_null(strstr(d->advice, "later epochs will read it from memory"));
    assert_null(tm_analysis_find(a, "data.small_files"));
    done(&run, &a);
}

static void test_dataset_cached_at_start_is_said_read_from_memory(void **st)
{
    (void)st;
    put_waiting_job(2, 49152);
    put_readings(1000, 49152000, 0.98, 1.0, 24 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "data.page_cache");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "info");
    assert_non_null(strstr(f->title, "dataset cached: 98% of the 46.9 MiB of data"));
    done(&run, &a);
}

static void test_dataset_three_times_the_ram_reads_from_disk_every_epoch(void **st)
{
    (void)st;
    put_waiting_job(100, 262144);
    /* 72 GiB against 24 GiB: 3.0x. */
    put_readings(500000, 72 * GiB, 0.01, 0.30, 24 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "data.page_cache");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "medium");
    assert_non_null(strstr(f->title, "the dataset is 3.0x the RAM (72.00 GiB against 24.00 GiB): "
                                     "every epoch reads it from disk"));
    assert_true(fabs(ev_num(f, "dataset_memory_ratio") - 3.0) < 1e-12);
    const tm_finding *d = tm_analysis_find(a, "input.disk_bound");
    assert_non_null(d);
    assert_non_null(strstr(d->advice, "3.0x the RAM"));
    done(&run, &a);
}

static void test_no_readings_no_page_cache_finding(void **st)
{
    (void)st;
    put_waiting_job(100, 49152);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "data.page_cache"));
    const tm_finding *d = tm_analysis_find(a, "input.disk_bound");
    assert_non_null(d);
    assert_null(strstr(d->evidence, "dataset_"));
    done(&run, &a);
}

/* --- data.small_files */

/* With `run --probe` of the same disk, the gain is what the disk gave the
 * probe reading sequentially: 4 MB/s, 4e6 / 614400 = 6.51x (the probe's
 * sequential test is its first two, test_probe.c's put_probe pattern). */
static void test_the_probe_caps_the_gain_of_packing(void **st)
{
    (void)st;
    put_waiting_job(150, 4096);
    put_readings(2000, 8192000, 0.0, 0.6, 24 * GiB);
    static tm_probe p;
    memset(&p, 0, sizeof p);
    snprintf(p.path, sizeof p.path, "/data");
    snprintf(p.device, sizeof p.device, "vdb");
    p.ntests = tm_probe_plan(4096, p.tests, TM_PROBE_MAX_TESTS);
    for (size_t i = 0; i < p.ntests; i++) /* sequential 4 MB/s, random 0.7 MB/s */
        p.tests[i].bytes_per_second = p.tests[i].pattern[0] == 's' ? 4e6 : 0.7e6;
    char *js = tm_probe_json(&p, 1);
    assert_non_null(js);
    char path[600];
    snprintf(path, sizeof path, "%s/probe.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(js, f);
    fclose(f);
    free(js);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *x = tm_analysis_find(a, "data.small_files");
    assert_non_null(x);
    assert_true(fabs(ev_num(x, "expected_read_gain") - 4e6 / 614400) < 1e-3);
    assert_true(fabs(ev_num(x, "expected_read_bytes_per_second") - 4e6) < 1);
    assert_true(fabs(ev_num(x, "probe_sequential_read_bytes_per_second") - 4e6) < 1);
    assert_non_null(strstr(x->evidence, "\"gain_capped_by_probe\":true"));
    assert_non_null(strstr(x->advice, "only 4.0 MB/s reading sequentially: up to 6.5x"));
    assert_null(strstr(x->advice, "19.7 MB/s"));
    done(&run, &a);
}

static void test_small_requests_at_a_high_rate_advise_packing_with_the_gain(void **st)
{
    (void)st;
    /* 150 reads/s of 4 KiB from 2000 files of 4 KiB: test_pack_gain_by_hand's
     * numbers. */
    put_waiting_job(150, 4096);
    put_readings(2000, 8192000, 0.0, 0.6, 24 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "data.small_files");
    assert_non_null(f);
    assert_string_equal(tm_severity_name(f->severity), "medium");
    assert_string_equal(tm_confidence_name(f->confidence), "high");
    assert_true(fabs(ev_num(f, "read_request_bytes") - 4096) < 1e-6);
    assert_true(fabs(ev_num(f, "mean_file_bytes") - 4096) < 1e-9);
    assert_true(fabs(ev_num(f, "expected_read_gain") - 32) < 1e-6);
    assert_true(fabs(ev_num(f, "expected_read_bytes_per_second") - 19660800) < 1);
    assert_true(fabs(ev_num(f, "expected_speedup") - 2.38806) < 1e-4);
    /* it needs 614400 x 0.1 / 0.04 = 1536000 B/s */
    assert_true(fabs(ev_num(f, "needed_read_bytes_per_second") - 1536000) < 1);
    assert_non_null(strstr(f->title, "150 reads/s of 4.0 KiB"));
    assert_non_null(strstr(f->advice, "WebDataset"));
    assert_non_null(strstr(f->advice, "up to 19.7 MB/s at the same 150 requests/s"));
    done(&run, &a);
}

static void test_large_files_read_in_small_pieces_are_not_small_files(void **st)
{
    (void)st;
    /* The same requests, but the dataset is 10 files of 100 MB. */
    put_waiting_job(150, 4096);
    put_readings(10, 1e9, 0.0, 0.1, 24 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "data.small_files"));
    done(&run, &a);
}

static void test_a_few_small_reads_per_second_are_not_small_files(void **st)
{
    (void)st;
    put_waiting_job(20, 4096); /* 20 reads/s: under 50 */
    put_readings(2000, 8192000, 0.0, 0.6, 24 * GiB);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "data.small_files"));
    done(&run, &a);
}

/* The requests of the test above are the job's data only where something
 * says so: the workers' reads were sampled (their 614400 B/s), or `run -d`
 * named the disk.  Neither (no -d, the workers' read rates not sampled: a
 * loop shorter than the sampling interval, a synthetic dataset beside
 * another process's imports): no data.small_files. */
static void test_small_reads_nobody_ties_to_the_data_are_not_small_files(void **st)
{
    const bool cases[][3] = {/* named, reads, said */
                             {false, false, false},
                             {false, true, true},
                             {true, false, true}};
    for (size_t c = 0; c < 3; c++) {
        if (c) {
            teardown(st);
            setup(st);
        }
        put_waiting_job_of(150, 4096, cases[c][0], cases[c][1]);
        put_readings(2000, 8192000, 0.0, 0.6, 24 * GiB);
        tm_run *run;
        tm_analysis *a = analyze(&run);
        assert_true((tm_analysis_find(a, "data.small_files") != NULL) == cases[c][2]);
        assert_true(a->sum.disk_named == cases[c][0]);
        done(&run, &a);
    }
}

/* A loop shorter than the sampling interval: 10 steps of 0.1 s from 0.5 s
 * (window 0.5 to 1.5 s), the workers' read rates sampled at 0 and 2 s
 * (1 MB/s each over [0, 2]).  No sample lies in the window, but the
 * interval ending at 2 s covers it: 2 x 1e6 B/s x 1.0 s / 1.0 s = 2e6
 * B/s (was unknown, and data.small_files took any disk's reads for the
 * job's). */
static void test_workers_reads_over_a_window_shorter_than_a_sample(void **st)
{
    (void)st;
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 10, 0.5, 0.1, 0.06);
    tm_rec_close(&r0);
    for (int p = 0; p < 2; p++)
        put_worker_file(p, 100u + (unsigned)p, 5, 0.5, 0.1, 200 * MiB, 0);
    tm_rec *s = open_rec("system.tmr", "system", -1);
    for (int i = 0; i <= 1; i++)
        for (unsigned p = 0; p < 2; p++)
            put_proc(s, 2.0 * i, "proc.process_read_bytes_per_second", 100 + p, 1e6);
    tm_rec_close(&s);
    tm_run *run;
    tm_analysis *a = analyze(&run);
    assert_true(fabs(a->sum.worker_read_bps - 2e6) < 1);
    done(&run, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_gain_by_hand),
        cmocka_unit_test_setup_teardown(
            test_cold_first_epoch_then_all_cached_says_later_epochs_are_not_disk_bound, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_dataset_cached_at_start_is_said_read_from_memory,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_dataset_three_times_the_ram_reads_from_disk_every_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_readings_no_page_cache_finding, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_small_requests_at_a_high_rate_advise_packing_with_the_gain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_the_probe_caps_the_gain_of_packing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_large_files_read_in_small_pieces_are_not_small_files,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_a_few_small_reads_per_second_are_not_small_files,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_small_reads_nobody_ties_to_the_data_are_not_small_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_workers_reads_over_a_window_shorter_than_a_sample,
                                        setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
