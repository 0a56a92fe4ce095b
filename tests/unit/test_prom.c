/*
 * test_prom.c - the Prometheus text of `trainmon serve` (tm_prom_*) and the
 * /health verdict (tm_health_*): exact text for fixture numbers, escaping,
 * and disk counters that never go backwards across 32-bit wraps.
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

#include <cmocka.h>

#include "prom.h"
#include "trainmon.h"

static tm_text *text(void)
{
    tm_text *t = tm_text_new(1 << 20);
    assert_non_null(t);
    return t;
}

/* The line of the text that starts with prefix, without its newline. */
static const char *line_of(tm_text *t, const char *prefix, char *out, size_t cap)
{
    const char *s = tm_text_data(t, NULL);
    size_t pl = strlen(prefix);
    for (const char *p = s; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= pl && strncmp(p, prefix, pl) == 0 && len < cap) {
            memcpy(out, p, len);
            out[len] = '\0';
            return out;
        }
        p += len + (nl ? 1 : 0);
    }
    return NULL;
}

static size_t count_of(const char *s, const char *needle)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static tm_diskstat disk(const char *name, int nfields)
{
    tm_diskstat d;
    memset(&d, 0, sizeof d);
    d.major = 8;
    snprintf(d.name, sizeof d.name, "%s", name);
    d.nfields = nfields;
    return d;
}

/* The value printed for family{device="dev"}. */
static const char *disk_value(tm_text *t, const char *family, const char *dev, char *buf,
                              size_t cap)
{
    char prefix[160];
    snprintf(prefix, sizeof prefix, "%s{device=\"%s\"} ", family, dev);
    const char *l = line_of(t, prefix, buf, cap);
    assert_non_null(l);
    return l + strlen(prefix);
}

/* ------------------------------------------------------------------ disks */

static void test_disks_exposition_is_exact_for_a_20_field_line(void **state)
{
    (void)state;
    tm_diskstat d = disk("vda", 20);
    d.rd_ios = 152119;
    d.rd_merges = 57836;
    d.rd_sec = 22170778;
    d.rd_ms = 83331;
    d.wr_ios = 59230;
    d.wr_merges = 23573;
    d.wr_sec = 42091432;
    d.wr_ms = 314564;
    d.inflight = 3;
    d.io_ms = 56920;
    d.weighted_ms = 425817;
    d.dc_ios = 26023;
    d.dc_merges = 33;
    d.dc_sec = 44515712;
    d.dc_ms = 24332;
    d.fl_ios = 5904;
    d.fl_ms = 3589;
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
    tm_text *t = text();
    assert_int_equal(tm_prom_write_disks(t, acc), 0);
    const char *want =
        "# HELP trainmon_disk_reads_completed_total The total number of reads completed "
        "successfully.\n"
        "# TYPE trainmon_disk_reads_completed_total counter\n"
        "trainmon_disk_reads_completed_total{device=\"vda\"} 152119\n"
        "# HELP trainmon_disk_reads_merged_total The total number of reads merged.\n"
        "# TYPE trainmon_disk_reads_merged_total counter\n"
        "trainmon_disk_reads_merged_total{device=\"vda\"} 57836\n"
        "# HELP trainmon_disk_read_bytes_total The total number of bytes read successfully.\n"
        "# TYPE trainmon_disk_read_bytes_total counter\n"
        "trainmon_disk_read_bytes_total{device=\"vda\"} 11351438336\n"
        "# HELP trainmon_disk_read_time_seconds_total The total number of seconds spent by all "
        "reads.\n"
        "# TYPE trainmon_disk_read_time_seconds_total counter\n"
        "trainmon_disk_read_time_seconds_total{device=\"vda\"} 83.331\n"
        "# HELP trainmon_disk_writes_completed_total The total number of writes completed "
        "successfully.\n"
        "# TYPE trainmon_disk_writes_completed_total counter\n"
        "trainmon_disk_writes_completed_total{device=\"vda\"} 59230\n"
        "# HELP trainmon_disk_writes_merged_total The number of writes merged.\n"
        "# TYPE trainmon_disk_writes_merged_total counter\n"
        "trainmon_disk_writes_merged_total{device=\"vda\"} 23573\n"
        "# HELP trainmon_disk_written_bytes_total The total number of bytes written successfully.\n"
        "# TYPE trainmon_disk_written_bytes_total counter\n"
        "trainmon_disk_written_bytes_total{device=\"vda\"} 21550813184\n"
        "# HELP trainmon_disk_write_time_seconds_total This is the total number of seconds spent "
        "by all writes.\n"
        "# TYPE trainmon_disk_write_time_seconds_total counter\n"
        "trainmon_disk_write_time_seconds_total{device=\"vda\"} 314.564\n"
        "# HELP trainmon_disk_io_now The number of I/Os currently in progress.\n"
        "# TYPE trainmon_disk_io_now gauge\n"
        "trainmon_disk_io_now{device=\"vda\"} 3\n"
        "# HELP trainmon_disk_io_time_seconds_total Total seconds spent doing I/Os.\n"
        "# TYPE trainmon_disk_io_time_seconds_total counter\n"
        "trainmon_disk_io_time_seconds_total{device=\"vda\"} 56.920\n"
        "# HELP trainmon_disk_io_time_weighted_seconds_total The weighted number of seconds spent "
        "doing I/Os.\n"
        "# TYPE trainmon_disk_io_time_weighted_seconds_total counter\n"
        "trainmon_disk_io_time_weighted_seconds_total{device=\"vda\"} 425.817\n"
        "# HELP trainmon_disk_discards_completed_total The total number of discards completed "
        "successfully.\n"
        "# TYPE trainmon_disk_discards_completed_total counter\n"
        "trainmon_disk_discards_completed_total{device=\"vda\"} 26023\n"
        "# HELP trainmon_disk_discards_merged_total The total number of discards merged.\n"
        "# TYPE trainmon_disk_discards_merged_total counter\n"
        "trainmon_disk_discards_merged_total{device=\"vda\"} 33\n"
        "# HELP trainmon_disk_discarded_sectors_total The total number of sectors discarded "
        "successfully.\n"
        "# TYPE trainmon_disk_discarded_sectors_total counter\n"
        "trainmon_disk_discarded_sectors_total{device=\"vda\"} 44515712\n"
        "# HELP trainmon_disk_discard_time_seconds_total This is the total number of seconds spent "
        "by all discards.\n"
        "# TYPE trainmon_disk_discard_time_seconds_total counter\n"
        "trainmon_disk_discard_time_seconds_total{device=\"vda\"} 24.332\n"
        "# HELP trainmon_disk_flush_requests_total The total number of flush requests completed "
        "successfully.\n"
        "# TYPE trainmon_disk_flush_requests_total counter\n"
        "trainmon_disk_flush_requests_total{device=\"vda\"} 5904\n"
        "# HELP trainmon_disk_flush_requests_time_seconds_total This is the total number of "
        "seconds spent by all flush requests.\n"
        "# TYPE trainmon_disk_flush_requests_time_seconds_total counter\n"
        "trainmon_disk_flush_requests_time_seconds_total{device=\"vda\"} 3.589\n";
    assert_string_equal(tm_text_data(t, NULL), want);
    tm_text_free(&t);
    assert_null(t);
    tm_prom_disks_free(&acc);
    assert_null(acc);
}

static void test_disks_families_are_contiguous_over_devices(void **state)
{
    (void)state;
    tm_diskstat d[2] = {disk("sda", 14), disk("nvme0n1", 14)};
    d[0].rd_ios = 1;
    d[1].rd_ios = 2;
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    assert_int_equal(tm_prom_disks_update(acc, d, 2), 0);
    tm_text *t = text();
    assert_int_equal(tm_prom_write_disks(t, acc), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "# TYPE trainmon_disk_reads_completed_total counter\n"
                              "trainmon_disk_reads_completed_total{device=\"sda\"} 1\n"
                              "trainmon_disk_reads_completed_total{device=\"nvme0n1\"} 2\n"));
    assert_int_equal(count_of(s, "# TYPE trainmon_disk_reads_completed_total"), 1);
    tm_text_free(&t);
    tm_prom_disks_free(&acc);
}

static void test_disks_without_discard_fields_leave_those_families_out(void **state)
{
    (void)state;
    tm_diskstat d = disk("sda", 14);
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
    tm_text *t = text();
    assert_int_equal(tm_prom_write_disks(t, acc), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(
        strstr(s, "trainmon_disk_io_time_weighted_seconds_total{device=\"sda\"} 0.000"));
    assert_null(strstr(s, "discard"));
    assert_null(strstr(s, "flush"));
    tm_text_free(&t);
    tm_prom_disks_free(&acc);
}

static void test_diskstats_ms_counter_wraps_at_32_bits(void **state)
{
    (void)state;
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    tm_diskstat d = disk("sda", 14);
    d.rd_ios = 10;
    d.rd_ms = UINT32_MAX - 999; /* 4294966.296 s */
    assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
    d.rd_ios = 20;
    d.rd_ms = 1000; /* wrapped: 2000 ms later */
    assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
    tm_text *t = text();
    assert_int_equal(tm_prom_write_disks(t, acc), 0);
    char buf[256];
    /* 4294967295 - 999 + 2000 = 4294968296 ms: above 2^32, not 1.000 */
    assert_string_equal(
        disk_value(t, "trainmon_disk_read_time_seconds_total", "sda", buf, sizeof buf),
        "4294968.296");
    tm_text_free(&t);
    tm_prom_disks_free(&acc);
}

static void test_disk_counters_never_decrease_over_many_wraps(void **state)
{
    (void)state;
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    tm_diskstat d = disk("sda", 14);
    uint64_t prev = 0;
    uint32_t ms = 0;
    for (int i = 0; i < 40; i++) {
        d.rd_ios += 1;
        ms += 400000000u; /* wraps every ~11 steps */
        d.io_ms = ms;
        assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
        tm_text *t = text();
        assert_int_equal(tm_prom_write_disks(t, acc), 0);
        char buf[256];
        const char *v =
            disk_value(t, "trainmon_disk_io_time_seconds_total", "sda", buf, sizeof buf);
        uint64_t secs = strtoull(v, NULL, 10);
        assert_true(secs >= prev);
        assert_int_equal(secs, (uint64_t)(i + 1) * 400000u);
        prev = secs;
        tm_text_free(&t);
    }
    tm_prom_disks_free(&acc);
}

static void test_disk_replaced_device_restarts_its_counters(void **state)
{
    (void)state;
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    tm_diskstat d = disk("sdb", 14);
    d.rd_ios = 1000;
    d.rd_ms = 5000;
    assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
    d.rd_ios = 5; /* removed and added again: counters start over */
    d.rd_ms = 7;
    assert_int_equal(tm_prom_disks_update(acc, &d, 1), 0);
    tm_text *t = text();
    assert_int_equal(tm_prom_write_disks(t, acc), 0);
    char buf[256];
    assert_string_equal(
        disk_value(t, "trainmon_disk_read_time_seconds_total", "sdb", buf, sizeof buf), "0.007");
    tm_text_free(&t);
    tm_prom_disks_free(&acc);
}

static void test_disk_that_vanished_is_left_out(void **state)
{
    (void)state;
    tm_prom_disks *acc;
    assert_int_equal(tm_prom_disks_new(&acc), 0);
    tm_diskstat d[2] = {disk("sda", 14), disk("sdb", 14)};
    assert_int_equal(tm_prom_disks_update(acc, d, 2), 0);
    assert_int_equal(tm_prom_disks_update(acc, &d[1], 1), 0);
    tm_text *t = text();
    assert_int_equal(tm_prom_write_disks(t, acc), 0);
    assert_null(strstr(tm_text_data(t, NULL), "\"sda\""));
    assert_non_null(strstr(tm_text_data(t, NULL), "\"sdb\""));
    tm_text_free(&t);
    tm_prom_disks_free(&acc);
}

/* --------------------------------------------------------------- escaping */

static void test_label_values_escape_backslash_quote_and_newline(void **state)
{
    (void)state;
    tm_text *t = text();
    assert_int_equal(tm_prom_escape(t, "a\\b\"c\nd"), 0);
    assert_string_equal(tm_text_data(t, NULL), "a\\\\b\\\"c\\nd");
    tm_text_free(&t);
}

static void test_run_names_are_escaped_in_labels(void **state)
{
    (void)state;
    tm_prom_run r = {.name = "exp \"7\"\n", .host = "h\\1", .last_record_age_s = 1.5};
    tm_text *t = text();
    assert_int_equal(tm_prom_write_runs(t, &r, 1), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "trainmon_run_info{run=\"exp \\\"7\\\"\\n\",host=\"h\\\\1\"} 1\n"));
    assert_non_null(
        strstr(s, "trainmon_run_last_record_age_seconds{run=\"exp \\\"7\\\"\\n\"} 1.500\n"));
    tm_text_free(&t);
}

/* --------------------------------------------------------------- pressure */

static void test_pressure_totals_are_seconds_from_microseconds(void **state)
{
    (void)state;
    tm_pressure_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.valid = TM_PRESSURE_HAVE_IO;
    ps.io.has_some = ps.io.has_full = true;
    ps.io.some_total_us = 1539519;
    ps.io.full_total_us = 1424240;
    tm_text *t = text();
    assert_int_equal(tm_prom_write_pressure(t, &ps), 0);
    assert_string_equal(
        tm_text_data(t, NULL),
        "# HELP trainmon_pressure_io_waiting_seconds_total Total time in seconds that some tasks "
        "were stalled waiting for io.\n"
        "# TYPE trainmon_pressure_io_waiting_seconds_total counter\n"
        "trainmon_pressure_io_waiting_seconds_total 1.539519\n"
        "# HELP trainmon_pressure_io_stalled_seconds_total Total time in seconds that all "
        "non-idle tasks were stalled on io.\n"
        "# TYPE trainmon_pressure_io_stalled_seconds_total counter\n"
        "trainmon_pressure_io_stalled_seconds_total 1.424240\n");
    tm_text_free(&t);
}

static void test_pressure_without_a_resource_leaves_it_out(void **state)
{
    (void)state;
    tm_pressure_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.valid = TM_PRESSURE_HAVE_CPU;
    ps.cpu.has_some = true; /* cpu "full" is absent on older kernels */
    ps.cpu.some_total_us = 2000000;
    tm_text *t = text();
    assert_int_equal(tm_prom_write_pressure(t, &ps), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "trainmon_pressure_cpu_waiting_seconds_total 2.000000\n"));
    assert_null(strstr(s, "_stalled_seconds_total"));
    assert_null(strstr(s, "_io_"));
    tm_text_free(&t);
}

/* ------------------------------------------------------------------- GPUs */

static tm_gpu_stats gpu0(void)
{
    tm_gpu_stats g;
    memset(&g, 0, sizeof g);
    g.index = 0;
    snprintf(g.name, sizeof g.name, "NVIDIA H100 80GB HBM3");
    snprintf(g.uuid, sizeof g.uuid, "GPU-1234");
    g.valid = TM_GPU_HAVE_MEM | TM_GPU_HAVE_UTIL | TM_GPU_HAVE_POWER | TM_GPU_HAVE_TEMP |
              TM_GPU_HAVE_THROTTLE | TM_GPU_HAVE_PROCS;
    g.mem_total = 85899345920ull;
    g.mem_used = 42949672960ull;
    g.mem_free = 42949672960ull;
    g.util_gpu = 87;
    g.util_mem = 40;
    g.power_w = 312.5;
    g.temp_c = 61;
    g.throttle_reasons = TM_GPU_THROTTLE_SW_POWER_CAP;
    g.temp_c = 61;
    return g;
}

static void test_gpu_exposition_has_base_units_and_labels(void **state)
{
    (void)state;
    tm_gpu_stats g = gpu0();
    tm_gpu_proc p[2] = {{.pid = 4242, .mem_valid = true, .used_bytes = 1048576},
                        {.pid = 4243, .mem_valid = false}};
    g.nprocs = 2;
    g.procs = p;
    tm_text *t = text();
    assert_int_equal(tm_prom_write_gpus(t, &g, 1), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "trainmon_gpu_info{gpu=\"0\",uuid=\"GPU-1234\",name=\"NVIDIA H100 "
                              "80GB HBM3\"} 1\n"));
    assert_non_null(strstr(s, "trainmon_gpu_lost{gpu=\"0\",uuid=\"GPU-1234\"} 0\n"));
    assert_non_null(
        strstr(s, "trainmon_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-1234\"} 42949672960\n"));
    assert_non_null(
        strstr(s, "trainmon_gpu_memory_total_bytes{gpu=\"0\",uuid=\"GPU-1234\"} 85899345920\n"));
    assert_non_null(
        strstr(s, "trainmon_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-1234\"} 0.87\n"));
    assert_non_null(strstr(s, "trainmon_gpu_power_watts{gpu=\"0\",uuid=\"GPU-1234\"} 312.5\n"));
    assert_non_null(strstr(s, "trainmon_gpu_throttle_reasons{gpu=\"0\",uuid=\"GPU-1234\"} 4\n"));
    assert_non_null(strstr(s, "trainmon_gpu_throttle_active{gpu=\"0\",uuid=\"GPU-1234\","
                              "reason=\"sw_power_cap\"} 1\n"));
    assert_non_null(strstr(s, "trainmon_gpu_throttle_active{gpu=\"0\",uuid=\"GPU-1234\","
                              "reason=\"hw_slowdown\"} 0\n"));
    assert_non_null(strstr(s, "trainmon_gpu_process_memory_used_bytes{gpu=\"0\",uuid=\"GPU-1234\","
                              "pid=\"4242\"} 1048576\n"));
    assert_null(strstr(s, "pid=\"4243\"")); /* memory not reported: left out, not 0 */
    assert_null(strstr(s, "reserved"));     /* valid bit clear */
    assert_null(strstr(s, "pcie"));
    tm_text_free(&t);
}

static void test_lost_gpu_exports_only_that_it_is_lost(void **state)
{
    (void)state;
    tm_gpu_stats g[2] = {gpu0(), gpu0()};
    g[1].index = 1;
    snprintf(g[1].uuid, sizeof g[1].uuid, "GPU-lost");
    g[1].lost = true;
    g[1].valid = 0;
    tm_text *t = text();
    assert_int_equal(tm_prom_write_gpus(t, g, 2), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "trainmon_gpu_lost{gpu=\"1\",uuid=\"GPU-lost\"} 1\n"));
    assert_null(strstr(s, "trainmon_gpu_memory_used_bytes{gpu=\"1\""));
    assert_int_equal(count_of(s, "# TYPE trainmon_gpu_memory_used_bytes gauge"), 1);
    tm_text_free(&t);
}

/* ------------------------------------------------------------------- runs */

static void test_run_rank_series_are_labelled_by_run_and_rank(void **state)
{
    (void)state;
    tm_prom_rank k[2];
    memset(k, 0, sizeof k);
    snprintf(k[0].rank, sizeof k[0].rank, "0");
    k[0].steps = 120;
    k[0].step_seconds = 12.5;
    k[0].data_wait_seconds = 3.25;
    k[0].steps_valid = true;
    k[0].allocated_bytes = 1073741824;
    k[0].reserved_bytes = 2147483648.0;
    k[0].peak_allocated_bytes = 1610612736;
    k[0].memory_valid = true;
    k[0].ooms = 1;
    snprintf(k[1].rank, sizeof k[1].rank, "1"); /* no steps, no memory yet */
    tm_prom_run r = {
        .name = "exp1", .host = "node7", .last_record_age_s = 0.25, .nranks = 2, .ranks = k};
    tm_text *t = text();
    assert_int_equal(tm_prom_write_runs(t, &r, 1), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "trainmon_run_info{run=\"exp1\",host=\"node7\"} 1\n"));
    assert_non_null(strstr(s, "# TYPE trainmon_run_steps_total counter\n"
                              "trainmon_run_steps_total{run=\"exp1\",rank=\"0\"} 120\n"));
    assert_non_null(
        strstr(s, "trainmon_run_data_wait_seconds_total{run=\"exp1\",rank=\"0\"} 3.25\n"));
    assert_non_null(
        strstr(s, "trainmon_run_gpu_reserved_bytes{run=\"exp1\",rank=\"0\"} 2147483648\n"));
    assert_non_null(strstr(s, "trainmon_run_ooms_total{run=\"exp1\",rank=\"0\"} 1\n"));
    assert_non_null(strstr(s, "trainmon_run_ooms_total{run=\"exp1\",rank=\"1\"} 0\n"));
    assert_null(strstr(s, "trainmon_run_steps_total{run=\"exp1\",rank=\"1\"}"));
    assert_null(strstr(s, "trainmon_run_gpu_allocated_bytes{run=\"exp1\",rank=\"1\"}"));
    tm_text_free(&t);
}

/* The training thread's stops: every kind of a rank with steps, zero
 * before its first (rate() then sees the first increase), none for a rank
 * without steps yet. */
static void test_run_stops_are_counters_per_kind(void **state)
{
    (void)state;
    tm_prom_rank k[2];
    memset(k, 0, sizeof k);
    snprintf(k[0].rank, sizeof k[0].rank, "0");
    k[0].steps = 10;
    k[0].steps_valid = true;
    k[0].stops[TM_STOP_COMPILE] = 3;
    k[0].stop_s[TM_STOP_COMPILE] = 41.5;
    k[0].stops[TM_STOP_GC] = 2;
    k[0].stop_s[TM_STOP_GC] = 0.25;
    snprintf(k[1].rank, sizeof k[1].rank, "1"); /* no steps yet */
    k[1].stops[TM_STOP_COMPILE] = 1;
    tm_prom_run r = {.name = "exp1", .host = "", .last_record_age_s = NAN, .nranks = 2, .ranks = k};
    tm_text *t = text();
    assert_int_equal(tm_prom_write_runs(t, &r, 1), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(
        strstr(s, "# TYPE trainmon_run_stop_seconds_total counter\n"
                  "trainmon_run_stop_seconds_total{run=\"exp1\",rank=\"0\",stop=\"compile\"} 41.5\n"
                  "trainmon_run_stop_seconds_total{run=\"exp1\",rank=\"0\",stop=\"checkpoint\"} 0\n"
                  "trainmon_run_stop_seconds_total{run=\"exp1\",rank=\"0\",stop=\"gc\"} 0.25\n"));
    assert_non_null(
        strstr(s, "# TYPE trainmon_run_stops_total counter\n"
                  "trainmon_run_stops_total{run=\"exp1\",rank=\"0\",stop=\"compile\"} 3\n"
                  "trainmon_run_stops_total{run=\"exp1\",rank=\"0\",stop=\"checkpoint\"} 0\n"
                  "trainmon_run_stops_total{run=\"exp1\",rank=\"0\",stop=\"gc\"} 2\n"));
    assert_null(strstr(s, "rank=\"1\",stop="));
    tm_text_free(&t);
}

/* ------------------------------------------------------------- the text */

static void test_text_over_its_cap_fails_and_stays_failed(void **state)
{
    (void)state;
    tm_text *t = tm_text_new(64);
    assert_non_null(t);
    tm_prom_run r = {.name = "a-run-name-long-enough-to-overflow-a-tiny-text",
                     .host = "h",
                     .last_record_age_s = 1};
    assert_int_equal(tm_prom_write_runs(t, &r, 1), -E2BIG);
    assert_int_equal(tm_text_error(t), -E2BIG);
    size_t len;
    tm_text_data(t, &len);
    assert_true(len <= 64);
    tm_text_reset(t);
    assert_int_equal(tm_text_error(t), 0);
    tm_text_data(t, &len);
    assert_int_equal(len, 0);
    tm_text_free(&t);
}

static void test_exporter_series_name_version_and_collectors(void **state)
{
    (void)state;
    const char *names[2] = {"disk", "gpu"};
    bool ok[2] = {true, false};
    tm_prom_self self = {.collect_s = 0.000206,
                         .collects = 3,
                         .collect_cpu_s = 0.0005,
                         .names = names,
                         .success = ok,
                         .n = 2};
    tm_text *t = text();
    assert_int_equal(tm_prom_write_exporter(t, &self), 0);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "trainmon_exporter_build_info{version=\"" TM_VERSION "\"} 1\n"));
    assert_non_null(strstr(s, "trainmon_scrape_duration_seconds 0.000206\n"));
    assert_non_null(strstr(s, "trainmon_exporter_collections_total 3\n"));
    assert_non_null(strstr(s, "trainmon_scrape_collector_success{collector=\"disk\"} 1\n"
                              "trainmon_scrape_collector_success{collector=\"gpu\"} 0\n"));
    tm_text_free(&t);
}

/* ----------------------------------------------------------------- health */

static tm_diskrate rate(const char *name, double util, double r_await)
{
    tm_diskrate r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "%s", name);
    r.util = util;
    r.r_await = r_await;
    r.w_await = 0;
    return r;
}

static void test_health_is_ok_for_a_busy_disk_that_keeps_up(void **state)
{
    (void)state;
    tm_health_limits l;
    tm_health_limits_default(&l);
    tm_diskrate r = rate("nvme0n1", 99, 0.4); /* parallel device: 99% util is not saturation */
    tm_text *t = text();
    bool bad = true;
    assert_int_equal(tm_health_write_json(t, &l, &r, 1, NULL, NULL, 0, &bad), 0);
    assert_false(bad);
    assert_non_null(strstr(tm_text_data(t, NULL), "{\"status\":\"ok\",\"reasons\":[]"));
    tm_text_free(&t);
}

static void test_health_names_damaged_files_without_degrading_the_node(void **state)
{
    (void)state;
    tm_health_limits l;
    tm_health_limits_default(&l);
    tm_text *t = text();
    bool bad = true;
    assert_int_equal(tm_health_write_json(t, &l, NULL, 0, NULL, NULL, 0, &bad), 0);
    tm_health_file f = {
        .run = "exp\"1", .file = "rank0.tmr", .places = 2, .offset = 4496, .what = "bad CRC"};
    assert_int_equal(tm_health_write_files(t, &f, 1), 0);
    const char *d = tm_text_data(t, NULL);
    assert_non_null(strstr(d, "{\"status\":\"ok\""));
    assert_non_null(strstr(d, ",\"damaged_files\":[{\"run\":\"exp\\\"1\",\"file\":\"rank0.tmr\","
                              "\"places\":2,\"offset\":4496,\"what\":\"bad CRC\"}]}\n"));
    assert_int_equal(strstr(d, "}\n") - d + 2, (long)strlen(d)); /* one object, one newline */
    /* Not after a health object: refused, nothing appended. */
    tm_text_reset(t);
    tm_text_puts(t, "x");
    assert_true(tm_health_write_files(t, &f, 1) < 0);
    tm_text_free(&t);
}

static void test_health_disk_busy_and_slow_is_saturated(void **state)
{
    (void)state;
    tm_health_limits l;
    tm_health_limits_default(&l);
    tm_diskrate r = rate("sda", 97, 120);
    tm_text *t = text();
    bool bad = false;
    assert_int_equal(tm_health_write_json(t, &l, &r, 1, NULL, NULL, 0, &bad), 0);
    assert_true(bad);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "\"status\":\"degraded\""));
    assert_non_null(strstr(s, "disk sda saturated: 97% util, r_await 120.0 ms"));
    assert_non_null(strstr(s, "\"device\":\"sda\",\"saturated\":true"));
    tm_text_free(&t);
}

static void test_health_gpu_memory_over_95_percent_is_nearly_full(void **state)
{
    (void)state;
    tm_health_limits l;
    tm_health_limits_default(&l);
    tm_gpu_stats g = gpu0();
    g.mem_used = g.mem_total / 100 * 97;
    tm_text *t = text();
    bool bad = false;
    assert_int_equal(tm_health_write_json(t, &l, NULL, 0, NULL, &g, 1, &bad), 0);
    assert_true(bad);
    assert_non_null(strstr(tm_text_data(t, NULL), "GPU 0 memory nearly full: 97.0% used"));
    tm_text_free(&t);
}

static void test_health_io_full_pressure_degrades(void **state)
{
    (void)state;
    tm_health_limits l;
    tm_health_limits_default(&l);
    tm_pressure_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.valid = TM_PRESSURE_HAVE_IO;
    ps.io.has_some = ps.io.has_full = true;
    ps.io.full_avg10 = 35.5;
    tm_text *t = text();
    bool bad = false;
    assert_int_equal(tm_health_write_json(t, &l, NULL, 0, &ps, NULL, 0, &bad), 0);
    assert_true(bad);
    const char *s = tm_text_data(t, NULL);
    assert_non_null(strstr(s, "I/O pressure"));
    assert_non_null(strstr(s, "\"io\":{\"some_avg10\":0,\"full_avg10\":35.5}"));
    tm_text_free(&t);
}

static void test_health_unavailable_numbers_are_null_not_zero(void **state)
{
    (void)state;
    tm_health_limits l;
    tm_health_limits_default(&l);
    tm_diskrate r = rate("sda", 10, NAN);
    tm_text *t = text();
    assert_int_equal(tm_health_write_json(t, &l, &r, 1, NULL, NULL, 0, NULL), 0);
    assert_non_null(strstr(tm_text_data(t, NULL), "\"r_await_ms\":null"));
    tm_text_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disks_exposition_is_exact_for_a_20_field_line),
        cmocka_unit_test(test_disks_families_are_contiguous_over_devices),
        cmocka_unit_test(test_disks_without_discard_fields_leave_those_families_out),
        cmocka_unit_test(test_diskstats_ms_counter_wraps_at_32_bits),
        cmocka_unit_test(test_disk_counters_never_decrease_over_many_wraps),
        cmocka_unit_test(test_disk_replaced_device_restarts_its_counters),
        cmocka_unit_test(test_disk_that_vanished_is_left_out),
        cmocka_unit_test(test_label_values_escape_backslash_quote_and_newline),
        cmocka_unit_test(test_run_names_are_escaped_in_labels),
        cmocka_unit_test(test_pressure_totals_are_seconds_from_microseconds),
        cmocka_unit_test(test_pressure_without_a_resource_leaves_it_out),
        cmocka_unit_test(test_gpu_exposition_has_base_units_and_labels),
        cmocka_unit_test(test_lost_gpu_exports_only_that_it_is_lost),
        cmocka_unit_test(test_run_rank_series_are_labelled_by_run_and_rank),
        cmocka_unit_test(test_run_stops_are_counters_per_kind),
        cmocka_unit_test(test_text_over_its_cap_fails_and_stays_failed),
        cmocka_unit_test(test_exporter_series_name_version_and_collectors),
        cmocka_unit_test(test_health_is_ok_for_a_busy_disk_that_keeps_up),
        cmocka_unit_test(test_health_disk_busy_and_slow_is_saturated),
        cmocka_unit_test(test_health_gpu_memory_over_95_percent_is_nearly_full),
        cmocka_unit_test(test_health_io_full_pressure_degrades),
        cmocka_unit_test(test_health_unavailable_numbers_are_null_not_zero),
        cmocka_unit_test(test_health_names_damaged_files_without_degrading_the_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
