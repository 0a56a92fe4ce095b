/*
 * test_psi.c - pressure files, cgroup files and the pressure collector on
 * fixture trees (tests/fixtures/psi_*).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "psi.h"
#include "trainmon.h"

#define S(lit) lit, sizeof(lit) - 1

/* cmocka 1.1's assert_float_equal compares floats: too coarse for byte
 * counts.  This compares doubles and prints both on failure. */
static void assert_near_impl(double a, double b, double eps, const char *expr, const char *file,
                             int line)
{
    if (!(fabs(a - b) <= eps)) {
        print_error("%s: %.17g is not within %g of %.17g\n", expr, a, eps, b);
        _fail(file, line);
    }
}
#define assert_near(a, b, eps) assert_near_impl((a), (b), (eps), #a, __FILE__, __LINE__)

static void use_fixture(const char *name)
{
    char proc[256], sys[256];
    snprintf(proc, sizeof proc, "tests/fixtures/%s/proc", name);
    snprintf(sys, sizeof sys, "tests/fixtures/%s/sys", name);
    tm_set_proc_root(proc);
    tm_set_sys_root(sys);
}

static int reset_roots(void **state)
{
    (void)state;
    tm_set_proc_root(NULL);
    tm_set_sys_root(NULL);
    return 0;
}

/* ------------------------------------------------------------ tm_psi_parse */

static void test_psi_parse_some_and_full_lines(void **state)
{
    (void)state;
    tm_psi p;
    assert_int_equal(tm_psi_parse(S("some avg10=0.00 avg60=0.22 avg300=0.09 total=1539519\n"
                                    "full avg10=1.50 avg60=0.20 avg300=12.34 total=1424240\n"),
                                  &p),
                     0);
    assert_true(p.has_some);
    assert_true(p.has_full);
    assert_near(p.some_avg10, 0.0, 1e-9);
    assert_near(p.some_avg60, 0.22, 1e-9);
    assert_near(p.some_avg300, 0.09, 1e-9);
    assert_int_equal(p.some_total_us, 1539519);
    assert_near(p.full_avg10, 1.5, 1e-9);
    assert_near(p.full_avg300, 12.34, 1e-9);
    assert_int_equal(p.full_total_us, 1424240);
}

static void test_psi_parse_cpu_without_full_line_before_5_13(void **state)
{
    (void)state;
    tm_psi p;
    assert_int_equal(
        tm_psi_parse(S("some avg10=40.21 avg60=11.80 avg300=3.35 total=12411536\n"), &p), 0);
    assert_true(p.has_some);
    assert_false(p.has_full);
    assert_near(p.some_avg10, 40.21, 1e-9);
    assert_int_equal(p.some_total_us, 12411536);
}

static void test_psi_parse_rejects_text_without_some_line(void **state)
{
    (void)state;
    tm_psi p;
    assert_int_equal(tm_psi_parse(S(""), &p), -EINVAL);
    assert_int_equal(tm_psi_parse(S("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), &p),
                     -EINVAL);
    assert_int_equal(tm_psi_parse(S("some avg10=0.00 avg60=0.00 total=5\n"), &p), -EINVAL);
    assert_int_equal(tm_psi_parse(S("some avg10=x avg60=0.00 avg300=0.00 total=5\n"), &p), -EINVAL);
}

static void test_psi_parse_needs_no_nul_terminator(void **state)
{
    (void)state;
    const char text[] = "some avg10=0.00 avg60=0.00 avg300=0.00 total=123456789";
    tm_psi p;
    /* Cut in the middle of total: the number read is the part inside len. */
    assert_int_equal(tm_psi_parse(text, sizeof text - 1 - 3, &p), 0);
    assert_int_equal(p.some_total_us, 123456);
}

/* -------------------------------------------------------------- io.stat */

static void test_cg_iostat_sums_devices_and_ignores_unknown_keys(void **state)
{
    (void)state;
    tm_cgio io;
    int n =
        tm_cg_parse_iostat(S("259:0 rbytes=1048576 wbytes=4096 rios=256 wios=1 dbytes=0 dios=0\n"
                             "8:0 rbytes=2097152 wbytes=8192 rios=512 wios=2 dbytes=512 "
                             "dios=1 cost.vrate=100.00 newkey=7\n"),
                           &io);
    assert_int_equal(n, 2);
    assert_true(io.valid);
    assert_int_equal(io.rbytes, 3145728);
    assert_int_equal(io.wbytes, 12288);
    assert_int_equal(io.rios, 768);
    assert_int_equal(io.wios, 3);
}

static void test_cg_iostat_empty_file_is_valid_zero(void **state)
{
    (void)state;
    tm_cgio io = {.rbytes = 99};
    assert_int_equal(tm_cg_parse_iostat(S(""), &io), 0);
    assert_true(io.valid);
    assert_int_equal(io.rbytes, 0);
}

/* ----------------------------------------------------------------- blkio */

static void test_blkio_sums_read_and_write_over_devices_not_total(void **state)
{
    (void)state;
    uint64_t rd = 1, wr = 1;
    int n = tm_cg_parse_blkio(S("254:0 Read 1000\n254:0 Write 200\n254:0 Sync 1200\n"
                                "254:0 Async 0\n254:0 Discard 0\n254:0 Total 1200\n"
                                "8:0 Read 30\n8:0 Write 4\n8:0 Total 34\nTotal 1234\n"),
                              &rd, &wr);
    assert_int_equal(n, 4);
    assert_int_equal(rd, 1030);
    assert_int_equal(wr, 204);
}

static void test_blkio_total_only_is_zero(void **state)
{
    (void)state;
    uint64_t rd = 1, wr = 1;
    assert_int_equal(tm_cg_parse_blkio(S("Total 0\n"), &rd, &wr), 0);
    assert_int_equal(rd, 0);
    assert_int_equal(wr, 0);
}

/* ------------------------------------------------------ /proc/PID/cgroup */

static void test_proc_cgroup_hybrid_finds_v2_and_blkio_paths(void **state)
{
    (void)state;
    char v2[256], blkio[256];
    int r = tm_cg_parse_proc_cgroup(S("12:cpu,cpuacct:/a\n7:blkio:/user.slice/job\n"
                                      "1:name=systemd:/x\n0::/user.slice/job:with:colons\n"),
                                    v2, sizeof v2, blkio, sizeof blkio);
    assert_int_equal(r, TM_CG_HAVE_V2 | TM_CG_HAVE_BLKIO);
    assert_string_equal(v2, "/user.slice/job:with:colons");
    assert_string_equal(blkio, "/user.slice/job");
}

static void test_proc_cgroup_blkio_comounted_with_other_controllers(void **state)
{
    (void)state;
    char v2[64], blkio[64];
    int r =
        tm_cg_parse_proc_cgroup(S("3:cpu,blkio,memory:/grp\n"), v2, sizeof v2, blkio, sizeof blkio);
    assert_int_equal(r, TM_CG_HAVE_BLKIO);
    assert_string_equal(blkio, "/grp");
    assert_string_equal(v2, "");
}

static void test_proc_cgroup_pure_v2(void **state)
{
    (void)state;
    char v2[64], blkio[64];
    int r = tm_cg_parse_proc_cgroup(S("0::/job.slice/train-1.scope\n"), v2, sizeof v2, blkio,
                                    sizeof blkio);
    assert_int_equal(r, TM_CG_HAVE_V2);
    assert_string_equal(v2, "/job.slice/train-1.scope");
    assert_string_equal(blkio, "");
}

static void test_proc_cgroup_path_with_nul_byte_is_left_out(void **state)
{
    (void)state;
    /* Found by fuzz_pressure: a path that would read as "" in C. */
    char v2[64], blkio[64];
    static const char text[] = "0::\0\0slice/job\n";
    assert_int_equal(
        tm_cg_parse_proc_cgroup(text, sizeof text - 1, v2, sizeof v2, blkio, sizeof blkio), 0);
    assert_string_equal(v2, "");
}

/* ------------------------------------------------------------- collector */

static void test_pressure_v2_reads_system_and_cgroup_files(void **state)
{
    (void)state;
    use_fixture("psi_v2");
    tm_pressure *p = NULL;
    assert_int_equal(tm_pressure_open(&p, 4242), 0);
    tm_pressure_stats s;
    assert_int_equal(tm_pressure_sample(p, &s), 0);
    assert_int_equal(s.valid, TM_PRESSURE_HAVE_IO | TM_PRESSURE_HAVE_CPU | TM_PRESSURE_HAVE_MEM |
                                  TM_PRESSURE_HAVE_CG_IO | TM_PRESSURE_HAVE_CG_IOSTAT);
    assert_near(s.io.some_avg10, 1.5, 1e-9);
    assert_int_equal(s.cpu.some_total_us, 12411536);
    assert_string_equal(s.cgroup, "/job.slice/train-1.scope");
    assert_near(s.cg_io.some_avg10, 12.0, 1e-9);
    assert_int_equal(s.cg_io.full_total_us, 87654);
    assert_int_equal(s.cg_iostat.rbytes, 3145728);
    assert_int_equal(s.cg_iostat.wios, 3);
    tm_pressure_close(&p);
    assert_null(p);
}

static void test_pressure_hybrid_uses_unified_mount_and_v1_blkio(void **state)
{
    (void)state;
    use_fixture("psi_hybrid");
    tm_pressure *p = NULL;
    assert_int_equal(tm_pressure_open(&p, 4242), 0);
    tm_pressure_stats s;
    assert_int_equal(tm_pressure_sample(p, &s), 0);
    assert_true(s.valid & TM_PRESSURE_HAVE_CG_IO);
    assert_int_equal(s.cg_io.some_total_us, 4444);
    assert_true(s.valid & TM_PRESSURE_HAVE_CG_IOSTAT);
    assert_int_equal(s.cg_iostat.rbytes, 1030);
    assert_int_equal(s.cg_iostat.wbytes, 204);
    assert_int_equal(s.cg_iostat.rios, 13);
    assert_int_equal(s.cg_iostat.wios, 3);
    assert_true(s.cpu.has_some);
    assert_false(s.cpu.has_full);
    tm_pressure_close(&p);
}

static void test_pressure_without_psi_is_not_an_error(void **state)
{
    (void)state;
    use_fixture("psi_none");
    tm_pressure *p = NULL;
    assert_int_equal(tm_pressure_open(&p, 4242), 0);
    tm_pressure_stats s;
    assert_int_equal(tm_pressure_sample(p, &s), 0);
    assert_int_equal(s.valid, 0);
    assert_string_equal(s.cgroup, "/");
    tm_pressure_close(&p);
}

static void test_pressure_missing_pid_is_esrch(void **state)
{
    (void)state;
    use_fixture("psi_v2");
    tm_pressure *p = NULL;
    assert_int_equal(tm_pressure_open(&p, 999999), -ESRCH);
    assert_null(p);
    assert_string_equal(tm_last_error(), "pid 999999: No such process");
}

static void test_pressure_system_wide_only_with_pid_zero(void **state)
{
    (void)state;
    use_fixture("psi_v2");
    tm_pressure *p = NULL;
    assert_int_equal(tm_pressure_open(&p, 0), 0);
    tm_pressure_stats s;
    assert_int_equal(tm_pressure_sample(p, &s), 0);
    assert_int_equal(s.valid, TM_PRESSURE_HAVE_IO | TM_PRESSURE_HAVE_CPU | TM_PRESSURE_HAVE_MEM);
    assert_string_equal(s.cgroup, "");
    tm_pressure_close(&p);
}

static void test_pressure_live_machine_reads_own_cgroup(void **state)
{
    (void)state;
    /* On the real /proc and /sys: whatever this kernel has, the call works
     * and what it marks valid is parsed. */
    tm_pressure *p = NULL;
    assert_int_equal(tm_pressure_open(&p, getpid()), 0);
    tm_pressure_stats s;
    assert_int_equal(tm_pressure_sample(p, &s), 0);
    if (access("/proc/pressure/io", R_OK) == 0)
        assert_true(s.valid & TM_PRESSURE_HAVE_IO);
    assert_true(s.cgroup[0] == '/');
    tm_pressure_close(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_psi_parse_some_and_full_lines),
        cmocka_unit_test(test_psi_parse_cpu_without_full_line_before_5_13),
        cmocka_unit_test(test_psi_parse_rejects_text_without_some_line),
        cmocka_unit_test(test_psi_parse_needs_no_nul_terminator),
        cmocka_unit_test(test_cg_iostat_sums_devices_and_ignores_unknown_keys),
        cmocka_unit_test(test_cg_iostat_empty_file_is_valid_zero),
        cmocka_unit_test(test_blkio_sums_read_and_write_over_devices_not_total),
        cmocka_unit_test(test_blkio_total_only_is_zero),
        cmocka_unit_test(test_proc_cgroup_hybrid_finds_v2_and_blkio_paths),
        cmocka_unit_test(test_proc_cgroup_blkio_comounted_with_other_controllers),
        cmocka_unit_test(test_proc_cgroup_pure_v2),
        cmocka_unit_test(test_proc_cgroup_path_with_nul_byte_is_left_out),
        cmocka_unit_test_teardown(test_pressure_v2_reads_system_and_cgroup_files, reset_roots),
        cmocka_unit_test_teardown(test_pressure_hybrid_uses_unified_mount_and_v1_blkio,
                                  reset_roots),
        cmocka_unit_test_teardown(test_pressure_without_psi_is_not_an_error, reset_roots),
        cmocka_unit_test_teardown(test_pressure_missing_pid_is_esrch, reset_roots),
        cmocka_unit_test_teardown(test_pressure_system_wide_only_with_pid_zero, reset_roots),
        cmocka_unit_test(test_pressure_live_machine_reads_own_cgroup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
