/*
 * test_gpu.c - the NVML collector, through the real dlopen path, against
 * the fake NVML libraries built from tests/fakes/fake_nvml*.c (scripted
 * through the FAKE_NVML environment variable, read at nvmlInit), and the
 * attribution of GPU processes to a process tree on a temporary /proc tree.
 * The backend seam: a test backend of no vendor, given to tm_gpu_open_with
 * alone or beside NVML, shows that the vendor-neutral part (numbering,
 * lost GPUs, warnings, attribution, recording) does not depend on NVML.
 *
 * The fakes are found beside this binary: <dir of the test>/fakes/NAME.so,
 * i.e. build/tests/fakes/ (or build-asan/tests/fakes/).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
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

#include "gpu.h"
#include "trainmon.h"
#include "util.h"

#define GiB (1ull << 30)
#define MiB (1ull << 20)

static char fake_dir[PATH_MAX];

/* Selects a fake library and its script; returns the library's path. */
static const char *use_fake(const char *variant, const char *script)
{
    static char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s.so", fake_dir, variant);
    setenv("TRAINMON_NVML_LIB", path, 1);
    setenv("FAKE_NVML", script, 1);
    unsetenv("FAKE_NVML_SCRIPT");
    return path;
}

/* The fake's test hooks, looked up in the copy the collector loaded. */
struct hooks {
    void *dl;
    unsigned (*calls)(const char *);
    unsigned long long (*last_seen)(unsigned);
    void (*add_putil)(unsigned, unsigned, unsigned long long, unsigned, unsigned);
    int (*refs)(void);
};

static struct hooks hooks_of(const char *path)
{
    struct hooks h = {0};
    h.dl = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!h.dl)
        fail_msg("%s is not loaded", path);
    *(void **)&h.calls = dlsym(h.dl, "fake_nvml_calls");
    *(void **)&h.last_seen = dlsym(h.dl, "fake_nvml_last_seen");
    *(void **)&h.add_putil = dlsym(h.dl, "fake_nvml_add_putil");
    *(void **)&h.refs = dlsym(h.dl, "fake_nvml_refs");
    assert_non_null(h.calls);
    return h;
}

/* The collector a test has open: closed by the teardown when the test
 * fails half-way, so that the fake's next nvmlInit reloads its script. */
static tm_gpu *open_g;

static tm_gpu *open_all(void)
{
    int rc = tm_gpu_open(&open_g, NULL, 0);
    if (rc != 0)
        fail_msg("tm_gpu_open: %d %s", rc, tm_last_error());
    return open_g;
}

static void close_gpu(tm_gpu **g)
{
    tm_gpu_close(g);
    open_g = NULL;
}

static int close_teardown(void **state)
{
    (void)state;
    tm_gpu_close(&open_g);
    return 0;
}

static const tm_gpu_stats *sample(tm_gpu *g, size_t *n)
{
    const tm_gpu_stats *s = NULL;
    assert_int_equal(tm_gpu_sample(g, &s, n), 0);
    assert_non_null(s);
    return s;
}

static size_t drain_warnings(tm_gpu *g, char *last, size_t cap)
{
    size_t k = 0;
    const char *w;
    while ((w = tm_gpu_next_warning(g)) != NULL) {
        if (last)
            snprintf(last, cap, "%s", w);
        k++;
    }
    return k;
}

static const tm_gpu_proc *find_gproc(const tm_gpu_stats *s, pid_t pid)
{
    for (size_t i = 0; i < s->nprocs; i++)
        if (s->procs[i].pid == pid)
            return &s->procs[i];
    return NULL;
}

/* ------------------------------------------------------------ values */

static const char *FULL = "devices=2;"
                          "d0.name=NVIDIA H200;d0.uuid=GPU-11111111-2222-3333-4444-555555555555;"
                          "d0.mem=150754820096,8589934592,141691633664,473956352;"
                          "d0.util=97,41;d0.temp=63;d0.power_mw=412345;d0.pcie_kbps=1000,2000;"
                          "d0.sm_mhz=1980;d0.throttle=0x44;"
                          "d0.procs=4242:8589934592,4243:1048576;"
                          "d0.putil=4242:1000:88:40;"
                          "d1.name=NVIDIA H200;d1.uuid=GPU-second;d1.procs=";

static void test_values_come_through_exactly(void **state)
{
    (void)state;
    use_fake("fake_nvml", FULL);
    tm_gpu *g = open_all();
    size_t n = 0;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(n, 2);
    assert_int_equal(s[0].index, 0);
    assert_string_equal(s[0].name, "NVIDIA H200");
    assert_string_equal(s[0].uuid, "GPU-11111111-2222-3333-4444-555555555555");
    unsigned all = TM_GPU_HAVE_MEM | TM_GPU_HAVE_MEM_RESERVED | TM_GPU_HAVE_UTIL |
                   TM_GPU_HAVE_TEMP | TM_GPU_HAVE_POWER | TM_GPU_HAVE_PCIE | TM_GPU_HAVE_CLOCK |
                   TM_GPU_HAVE_THROTTLE | TM_GPU_HAVE_PROCS | TM_GPU_HAVE_PROC_UTIL;
    assert_int_equal(s[0].valid, all);
    assert_false(s[0].lost);
    assert_int_equal(s[0].mem_total, 150754820096ull);
    assert_int_equal(s[0].mem_used, 8589934592ull);
    assert_int_equal(s[0].mem_free, 141691633664ull);
    assert_int_equal(s[0].mem_reserved, 473956352ull);
    assert_true(s[0].util_gpu == 97.0 && s[0].util_mem == 41.0);
    assert_true(s[0].temp_c == 63.0);
    assert_true(s[0].power_w == 412.345);
    /* KB/s -> bytes/s; counter 1 is RX, 0 is TX. */
    assert_true(s[0].pcie_rx_bytes_s == 1000 * 1024.0);
    assert_true(s[0].pcie_tx_bytes_s == 2000 * 1024.0);
    assert_true(s[0].sm_clock_mhz == 1980.0);
    assert_int_equal(s[0].throttle_reasons, 0x44);
    assert_int_equal(s[0].nprocs, 2);
    assert_int_equal(s[0].procs[0].pid, 4242);
    assert_true(s[0].procs[0].mem_valid);
    assert_int_equal(s[0].procs[0].used_bytes, 8 * GiB);
    assert_true(s[0].procs[0].sm_util == 88.0 && s[0].procs[0].mem_util == 40.0);
    assert_int_equal(s[0].procs[1].pid, 4243);
    assert_int_equal(s[0].procs[1].used_bytes, 1 * MiB);
    assert_true(isnan(s[0].procs[1].sm_util)); /* no sample for it: unknown, not 0 */
    assert_int_equal(s[1].index, 1);
    assert_string_equal(s[1].uuid, "GPU-second");
    assert_true(s[1].valid & TM_GPU_HAVE_PROCS);
    assert_int_equal(s[1].nprocs, 0);
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    close_gpu(&g);
    assert_null(g);
}

static void test_newest_symbols_are_used_first(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", FULL);
    tm_gpu *g = open_all();
    size_t n;
    sample(g, &n);
    struct hooks h = hooks_of(lib);
    assert_int_equal(h.calls("nvmlInit_v2"), 1);
    assert_int_equal(h.calls("nvmlInit"), 0);
    assert_int_equal(h.calls("nvmlDeviceGetCount_v2"), 1);
    assert_int_equal(h.calls("nvmlDeviceGetHandleByIndex_v2"), 2);
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo_v2"), 2);
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo"), 0);
    assert_true(h.calls("nvmlDeviceGetComputeRunningProcesses_v3") >= 2);
    assert_int_equal(h.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
    assert_int_equal(h.calls("nvmlDeviceGetCurrentClocksEventReasons"), 2);
    assert_int_equal(h.calls("nvmlDeviceGetCurrentClocksThrottleReasons"), 0);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_selected_indices_only(void **state)
{
    (void)state;
    use_fake("fake_nvml", FULL);
    const unsigned idx[] = {1};
    assert_int_equal(tm_gpu_open(&open_g, idx, 1), 0);
    tm_gpu *g = open_g;
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(n, 1);
    assert_int_equal(s[0].index, 1);
    assert_string_equal(s[0].uuid, "GPU-second");
    close_gpu(&g);
}

/* ------------------------------------------------------------ opening */

static void test_missing_library_is_enoent_with_one_message(void **state)
{
    (void)state;
    setenv("TRAINMON_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    tm_gpu *g = (tm_gpu *)&g; /* must be reset to NULL */
    assert_int_equal(tm_gpu_open(&g, NULL, 0), -ENOENT);
    assert_null(g);
    assert_string_equal(tm_last_error(), "no NVIDIA driver found: GPU metrics off");
}

static void test_driver_not_loaded_is_enoent(void **state)
{
    (void)state;
    use_fake("fake_nvml", "init_err=9");
    tm_gpu *g = NULL;
    assert_int_equal(tm_gpu_open(&g, NULL, 0), -ENOENT);
    assert_null(g);
    assert_string_equal(tm_last_error(), "no NVIDIA driver found: GPU metrics off");
}

static void test_init_no_permission_gives_nvml_message(void **state)
{
    (void)state;
    use_fake("fake_nvml", "init_err=4");
    tm_gpu *g = NULL;
    assert_int_equal(tm_gpu_open(&g, NULL, 0), -EACCES);
    assert_string_equal(tm_last_error(), "NVML: Insufficient Permissions: GPU metrics off");
}

static void test_no_gpu_is_enodev(void **state)
{
    (void)state;
    use_fake("fake_nvml", "devices=0");
    tm_gpu *g = NULL;
    assert_int_equal(tm_gpu_open(&g, NULL, 0), -ENODEV);
    assert_string_equal(tm_last_error(), "no NVIDIA GPU found: GPU metrics off");
}

static void test_index_out_of_range_is_enodev_and_shuts_down(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", "devices=2");
    void *keep = dlopen(lib, RTLD_NOW); /* keeps the fake loaded to read its refs */
    assert_non_null(keep);
    struct hooks h = hooks_of(lib);
    tm_gpu *g = NULL;
    const unsigned idx[] = {0, 2};
    assert_int_equal(tm_gpu_open(&g, idx, 2), -ENODEV);
    assert_string_equal(tm_last_error(), "GPU 2: no such GPU (2 found)");
    assert_int_equal(h.refs(), 0);
    dlclose(h.dl);
    dlclose(keep);
}

static void test_close_shuts_nvml_down(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", "devices=1");
    tm_gpu *g = open_all();
    struct hooks h = hooks_of(lib); /* our reference keeps it loaded after close */
    assert_int_equal(h.refs(), 1);
    close_gpu(&g);
    assert_int_equal(h.refs(), 0);
    assert_int_equal(h.calls("nvmlShutdown"), 1);
    dlclose(h.dl);
}

/* ------------------------------------------------------------ fallbacks */

static void test_memory_v2_absent_falls_back_to_plain_call(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml_nomemv2", "d0.mem=1000,300,700,50");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_true(s[0].valid & TM_GPU_HAVE_MEM);
    assert_false(s[0].valid & TM_GPU_HAVE_MEM_RESERVED);
    assert_int_equal(s[0].mem_total, 1000);
    assert_int_equal(s[0].mem_used, 300);
    assert_int_equal(s[0].mem_free, 700);
    struct hooks h = hooks_of(lib);
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo"), 1);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_memory_v2_refused_falls_back_to_plain_call_for_good(void **state)
{
    (void)state;
    /* A library newer than the driver: _v2 is exported but refused. */
    const char *lib = use_fake("fake_nvml", "d0.mem=1000,300,700,50;d0.err.memv2=25");
    tm_gpu *g = open_all();
    struct hooks h = hooks_of(lib);
    size_t n;
    const tm_gpu_stats *s = NULL;
    for (int i = 0; i < 3; i++) {
        s = sample(g, &n);
        assert_true(s[0].valid & TM_GPU_HAVE_MEM);
        assert_false(s[0].valid & TM_GPU_HAVE_MEM_RESERVED);
        assert_int_equal(s[0].mem_used, 300);
    }
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo_v2"), 1);
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo"), 3);
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_memory_not_supported_at_all_is_off_silently(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", "d0.mem=1000,300,700,50;d0.err.mem=3");
    tm_gpu *g = open_all();
    struct hooks h = hooks_of(lib);
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_false(s[0].valid & (TM_GPU_HAVE_MEM | TM_GPU_HAVE_MEM_RESERVED));
    assert_true(s[0].valid & TM_GPU_HAVE_UTIL);
    sample(g, &n);
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo_v2"), 1);
    assert_int_equal(h.calls("nvmlDeviceGetMemoryInfo"), 1);
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_procs_v3_absent_falls_back_to_v2(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml_nov3", "d0.procs=10:100,20:200,30:300");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(s[0].nprocs, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s[0].procs[i].pid, 10 * (i + 1));
        assert_int_equal(s[0].procs[i].used_bytes, 100 * (i + 1));
    }
    struct hooks h = hooks_of(lib);
    assert_true(h.calls("nvmlDeviceGetComputeRunningProcesses_v2") >= 1);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_legacy_library_uses_unversioned_calls(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml_legacy",
                               "d0.mem=1000,300,700,50;d0.procs=10:100,20:na;d0.throttle=0x4");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    struct hooks h = hooks_of(lib);
    assert_int_equal(h.calls("nvmlInit"), 1);
    assert_int_equal(h.calls("nvmlDeviceGetCount"), 1);
    assert_int_equal(h.calls("nvmlDeviceGetHandleByIndex"), 1);
    assert_int_equal(s[0].valid & TM_GPU_HAVE_MEM_RESERVED, 0);
    assert_int_equal(s[0].mem_used, 300);
    /* 16-byte nvmlProcessInfo_v1_t entries */
    assert_int_equal(s[0].nprocs, 2);
    assert_int_equal(s[0].procs[0].pid, 10);
    assert_int_equal(s[0].procs[0].used_bytes, 100);
    assert_int_equal(s[0].procs[1].pid, 20);
    assert_false(s[0].procs[1].mem_valid);
    assert_int_equal(s[0].throttle_reasons, 0x4);
    assert_int_equal(h.calls("nvmlDeviceGetCurrentClocksThrottleReasons"), 1);
    close_gpu(&g);
    dlclose(h.dl);
}

/* ------------------------------------------------------------ field errors */

static void test_not_supported_field_is_clear_and_not_asked_again(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", "d0.err.temp=3");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = NULL;
    for (int i = 0; i < 3; i++)
        s = sample(g, &n);
    assert_false(s[0].valid & TM_GPU_HAVE_TEMP);
    assert_true(isnan(s[0].temp_c));
    assert_true(s[0].valid & TM_GPU_HAVE_MEM);
    assert_true(s[0].valid & TM_GPU_HAVE_POWER);
    assert_true(s[0].valid & TM_GPU_HAVE_UTIL);
    struct hooks h = hooks_of(lib);
    assert_int_equal(h.calls("nvmlDeviceGetTemperature"), 1);
    assert_int_equal(h.calls("nvmlDeviceGetPowerUsage"), 3);
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_no_permission_field_is_clear_with_one_warning(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", "d0.uuid=GPU-x;d0.procs=1:1;d0.err.procs=4");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_false(s[0].valid & TM_GPU_HAVE_PROCS);
    assert_int_equal(s[0].nprocs, 0);
    assert_true(s[0].valid & TM_GPU_HAVE_MEM);
    char w[256] = "";
    assert_int_equal(drain_warnings(g, w, sizeof w), 1);
    assert_string_equal(w, "GPU 0 (GPU-x): processes: no permission to read it (NVML): left out");
    sample(g, &n);
    sample(g, &n);
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    struct hooks h = hooks_of(lib);
    assert_int_equal(h.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_other_error_is_warned_once_and_retried(void **state)
{
    (void)state;
    const char *lib = use_fake("fake_nvml", "d0.uuid=GPU-x;d0.err.power=999");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = NULL;
    for (int i = 0; i < 3; i++)
        s = sample(g, &n);
    assert_false(s[0].valid & TM_GPU_HAVE_POWER);
    assert_true(isnan(s[0].power_w));
    char w[256] = "";
    assert_int_equal(drain_warnings(g, w, sizeof w), 1);
    assert_string_equal(w, "GPU 0 (GPU-x): power: Unknown Error");
    struct hooks h = hooks_of(lib);
    assert_int_equal(h.calls("nvmlDeviceGetPowerUsage"), 3);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_gpu_lost_after_two_samples_others_still_sampled(void **state)
{
    (void)state;
    const char *lib =
        use_fake("fake_nvml", "devices=2;d0.uuid=GPU-aaa;d0.lost_after=2;d1.uuid=GPU-bbb");
    tm_gpu *g = open_all();
    struct hooks h = hooks_of(lib);
    size_t n;
    const tm_gpu_stats *s = NULL;
    for (int i = 0; i < 2; i++) {
        s = sample(g, &n);
        assert_false(s[0].lost);
        assert_true(s[0].valid & TM_GPU_HAVE_MEM);
    }
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    s = sample(g, &n);
    assert_true(s[0].lost);
    assert_int_equal(s[0].valid, 0);
    assert_false(s[1].lost);
    assert_true(s[1].valid & TM_GPU_HAVE_MEM);
    char w[256] = "";
    assert_int_equal(drain_warnings(g, w, sizeof w), 1);
    assert_string_equal(w, "GPU 0 (GPU-aaa) is lost (fallen off the bus): its metrics stop");
    /* Not asked again: only GPU 1 calls from now on. */
    unsigned util_calls = h.calls("nvmlDeviceGetUtilizationRates");
    s = sample(g, &n);
    assert_true(s[0].lost);
    assert_true(s[1].valid & TM_GPU_HAVE_UTIL);
    assert_int_equal(h.calls("nvmlDeviceGetUtilizationRates"), util_calls + 1);
    assert_int_equal(drain_warnings(g, NULL, 0), 0);
    close_gpu(&g);
    dlclose(h.dl);
}

/* ------------------------------------------------------------ processes */

static void test_insufficient_size_grows_buffer_until_all_processes(void **state)
{
    (void)state;
    /* 40 processes, 16 more visible at each call: the size asked for is
     * stale by the time the buffer is offered, twice. */
    char script[2048] = "d0.procs_grow=16;d0.procs=";
    for (int i = 0; i < 40; i++) {
        char item[32];
        snprintf(item, sizeof item, "%s%d:%d", i ? "," : "", 1000 + i, (i + 1) * 4096);
        strcat(script, item);
    }
    const char *lib = use_fake("fake_nvml", script);
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_true(s[0].valid & TM_GPU_HAVE_PROCS);
    assert_int_equal(s[0].nprocs, 40);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(s[0].procs[i].pid, 1000 + i);
        assert_int_equal(s[0].procs[i].used_bytes, (uint64_t)(i + 1) * 4096);
    }
    struct hooks h = hooks_of(lib);
    assert_true(h.calls("nvmlDeviceGetComputeRunningProcesses_v3") >= 3);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_32_byte_process_entries_read_right(void **state)
{
    (void)state;
    use_fake("fake_nvml", "proc_entry_size=32;d0.procs=111:1000,222:2000,333:3000");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(s[0].nprocs, 3);
    assert_int_equal(s[0].procs[0].pid, 111);
    assert_int_equal(s[0].procs[0].used_bytes, 1000);
    assert_int_equal(s[0].procs[1].pid, 222);
    assert_int_equal(s[0].procs[1].used_bytes, 2000);
    assert_int_equal(s[0].procs[2].pid, 333);
    assert_int_equal(s[0].procs[2].used_bytes, 3000);
    close_gpu(&g);
}

static void test_one_32_byte_process_entry_read_right(void **state)
{
    (void)state;
    use_fake("fake_nvml", "proc_entry_size=32;d0.procs=111:1000");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(s[0].nprocs, 1);
    assert_int_equal(s[0].procs[0].pid, 111);
    assert_int_equal(s[0].procs[0].used_bytes, 1000);
    close_gpu(&g);
}

static void test_process_memory_not_available_is_not_zero(void **state)
{
    (void)state;
    use_fake("fake_nvml", "d0.procs=77:na");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(s[0].nprocs, 1);
    assert_false(s[0].procs[0].mem_valid);
    close_gpu(&g);
}

static void test_process_utilization_timestamp_carried(void **state)
{
    (void)state;
    const char *lib =
        use_fake("fake_nvml", "d0.procs=100:1,101:1;"
                              "d0.putil=100:2000:60:25,100:1000:50:20,101:1500:30:10");
    tm_gpu *g = open_all();
    struct hooks h = hooks_of(lib);
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(h.last_seen(0), 0);
    assert_true(s[0].valid & TM_GPU_HAVE_PROC_UTIL);
    assert_true(find_gproc(&s[0], 100)->sm_util == 60.0); /* the newest of its samples */
    assert_true(find_gproc(&s[0], 100)->mem_util == 25.0);
    assert_true(find_gproc(&s[0], 101)->sm_util == 30.0);

    s = sample(g, &n); /* nothing newer than 2000: NOT_FOUND */
    assert_int_equal(h.last_seen(0), 2000);
    assert_true(s[0].valid & TM_GPU_HAVE_PROC_UTIL);
    assert_true(isnan(find_gproc(&s[0], 100)->sm_util));

    h.add_putil(0, 100, 2500, 70, 5);
    s = sample(g, &n);
    assert_int_equal(h.last_seen(0), 2000);
    assert_true(find_gproc(&s[0], 100)->sm_util == 70.0);
    assert_true(isnan(find_gproc(&s[0], 101)->sm_util));
    s = sample(g, &n);
    assert_int_equal(h.last_seen(0), 2500);
    close_gpu(&g);
    dlclose(h.dl);
}

static void test_process_utilization_over_100_is_dropped(void **state)
{
    (void)state;
    use_fake("fake_nvml", "d0.procs=100:1;d0.putil=100:1000:50:20,100:2000:4000000000:25");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_true(find_gproc(&s[0], 100)->sm_util == 50.0);
    close_gpu(&g);
}

/* ------------------------------------------------------------ names */

static void test_throttle_names_in_bit_order(void **state)
{
    (void)state;
    const char *names[16];
    size_t k = tm_gpu_throttle_names(0x44, names, 16);
    assert_int_equal(k, 2);
    assert_string_equal(names[0], "sw_power_cap");
    assert_string_equal(names[1], "hw_thermal_slowdown");
    k = tm_gpu_throttle_names(0x1ff | (1ull << 40), names, 16);
    assert_int_equal(k, 9); /* unknown bits left out */
    assert_string_equal(names[0], "gpu_idle");
    assert_string_equal(names[1], "applications_clocks_setting");
    assert_string_equal(names[3], "hw_slowdown");
    assert_string_equal(names[4], "sync_boost");
    assert_string_equal(names[5], "sw_thermal_slowdown");
    assert_string_equal(names[7], "hw_power_brake");
    assert_string_equal(names[8], "display_clocks_setting");
    assert_int_equal(tm_gpu_throttle_names(0x88, names, 1), 2); /* counts past cap */
    assert_string_equal(names[0], "hw_slowdown");
    assert_int_equal(tm_gpu_throttle_names(0, names, 16), 0);
}

/* ------------------------------------------------------------ attribution */

static char proc_root[PATH_MAX];

static void write_file(const char *rel, const char *text)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", proc_root, rel);
    char dir[PATH_MAX + 128];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdir(dir, 0755);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void add_proc(pid_t pid, const char *nspid, unsigned long long starttime)
{
    char rel[64], text[512];
    snprintf(rel, sizeof rel, "%d/status", (int)pid);
    snprintf(text, sizeof text, "Name:\tpython\nTgid:\t%d\nNSpid:\t%s\nVmRSS:\t 100 kB\n", (int)pid,
             nspid);
    write_file(rel, text);
    snprintf(rel, sizeof rel, "%d/stat", (int)pid);
    snprintf(text, sizeof text,
             "%d (python) S 1 1 1 0 -1 0 0 0 0 0 10 5 0 0 20 0 1 0 %llu 1000 10 0\n", (int)pid,
             starttime);
    write_file(rel, text);
}

static int attr_setup(void **state)
{
    (void)state;
    snprintf(proc_root, sizeof proc_root, "/tmp/test_gpu_proc.XXXXXX");
    if (!mkdtemp(proc_root))
        return -1;
    tm_set_proc_root(proc_root);
    return 0;
}

static int attr_teardown(void **state)
{
    (void)state;
    tm_set_proc_root(NULL);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", proc_root);
    return system(cmd) == 0 ? 0 : -1;
}

static tm_procinfo tree_proc(pid_t pid, unsigned long long starttime)
{
    tm_procinfo p = {0};
    p.pid = pid;
    p.valid = TM_PROC_HAVE_STAT;
    p.starttime = starttime;
    return p;
}

static void test_host_pid_of_the_tree_is_attributed(void **state)
{
    (void)state;
    add_proc(4242, "4242", 500);
    add_proc(999, "999", 600);
    tm_procinfo procs[] = {tree_proc(4242, 500), tree_proc(4243, 501)};
    tm_ptree_stats tree = {.root = 4242, .root_alive = true, .nproc = 2, .procs = procs};
    tm_gpu_proc gp[] = {{.pid = 4242, .mem_valid = true, .used_bytes = 8 * GiB},
                        {.pid = 999, .mem_valid = true, .used_bytes = 1 * GiB}};
    tm_gpu_stats s = {.valid = TM_GPU_HAVE_PROCS, .nprocs = 2, .procs = gp};
    assert_true(tm_gpu_pid_in_tree(4242, &tree));
    assert_false(tm_gpu_pid_in_tree(999, &tree));
    assert_true(tm_gpu_tree_memory(&s, 1, &tree) == (double)(8 * GiB));
}

static void test_container_pid_is_attributed_through_nspid(void **state)
{
    (void)state;
    /* The tree is known by the pids of a container (7, 8); NVML reports
     * host pids whose NSpid lines map them there. */
    add_proc(31337, "31337\t7", 700);
    add_proc(31338, "31338\t8", 123); /* pid 8 of another namespace: start time differs */
    tm_procinfo procs[] = {tree_proc(7, 700), tree_proc(8, 800)};
    tm_ptree_stats tree = {.root = 7, .root_alive = true, .nproc = 2, .procs = procs};
    assert_true(tm_gpu_pid_in_tree(31337, &tree));
    assert_false(tm_gpu_pid_in_tree(31338, &tree));
    tm_gpu_proc gp[] = {{.pid = 31337, .mem_valid = true, .used_bytes = 3 * GiB},
                        {.pid = 31338, .mem_valid = true, .used_bytes = 5 * GiB}};
    tm_gpu_stats s = {.valid = TM_GPU_HAVE_PROCS, .nprocs = 2, .procs = gp};
    assert_true(tm_gpu_tree_memory(&s, 1, &tree) == (double)(3 * GiB));
}

static void test_tree_memory_is_zero_when_no_visible_gpu_process_matches(void **state)
{
    (void)state;
    add_proc(999, "999", 600);
    tm_procinfo procs[] = {tree_proc(7, 700)};
    tm_ptree_stats tree = {.root = 7, .nproc = 1, .procs = procs};
    tm_gpu_proc gp[] = {{.pid = 999, .mem_valid = true, .used_bytes = GiB}};
    tm_gpu_stats s = {.valid = TM_GPU_HAVE_PROCS, .nprocs = 1, .procs = gp};
    assert_true(tm_gpu_tree_memory(&s, 1, &tree) == 0.0);
}

static void test_tree_memory_unknown_when_gpu_pids_are_invisible(void **state)
{
    (void)state;
    /* trainmon in a container of its own: NVML's host pid 5555 is not in
     * its /proc, so "0 bytes" could be wrong. */
    tm_procinfo procs[] = {tree_proc(7, 700)};
    tm_ptree_stats tree = {.root = 7, .nproc = 1, .procs = procs};
    tm_gpu_proc gp[] = {{.pid = 5555, .mem_valid = true, .used_bytes = GiB}};
    tm_gpu_stats s = {.valid = TM_GPU_HAVE_PROCS, .nprocs = 1, .procs = gp};
    assert_true(isnan(tm_gpu_tree_memory(&s, 1, &tree)));
}

static void test_tree_memory_unknown_without_process_lists(void **state)
{
    (void)state;
    tm_procinfo procs[] = {tree_proc(7, 700)};
    tm_ptree_stats tree = {.root = 7, .nproc = 1, .procs = procs};
    tm_gpu_stats s = {.valid = TM_GPU_HAVE_MEM};
    assert_true(isnan(tm_gpu_tree_memory(&s, 1, &tree)));
    tm_gpu_proc gp[] = {{.pid = 7, .mem_valid = false}};
    tm_gpu_stats s2 = {.valid = TM_GPU_HAVE_PROCS, .nprocs = 1, .procs = gp};
    assert_true(isnan(tm_gpu_tree_memory(&s2, 1, &tree)));
}

static void test_nspid_line_parsed(void **state)
{
    (void)state;
    pid_t p[4];
    const char t[] = "Name:\tx\nNSpid:\t31337\t7\t1\nVmRSS:\t1 kB\n";
    assert_int_equal(tm_gpu_parse_nspid(t, sizeof t - 1, p, 4), 3);
    assert_int_equal(p[0], 31337);
    assert_int_equal(p[1], 7);
    assert_int_equal(p[2], 1);
    const char none[] = "Name:\tx\nPid:\t5\n";
    assert_int_equal(tm_gpu_parse_nspid(none, sizeof none - 1, p, 4), -ENOENT);
    const char bad[] = "NSpid:\tx\n";
    assert_int_equal(tm_gpu_parse_nspid(bad, sizeof bad - 1, p, 4), -EINVAL);
}

/* ------------------------------------------------------------ recording */

static void test_sysrec_gpu_writes_base_units_and_leaves_out_unavailable(void **state)
{
    (void)state;
    use_fake("fake_nvml", "devices=2;d0.uuid=GPU-a;d0.mem=1000,300,700,50;d0.util=97,41;"
                          "d0.err.temp=3;d0.sm_mhz=1500;d0.power_mw=250000;"
                          "d0.procs=42:4096;d0.putil=42:10:80:5;d1.lost_after=0");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_true(s[1].lost);
    char path[] = "/tmp/test_gpu_rec.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tm_rec *w = NULL;
    tm_rec_opts o = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    assert_int_equal(tm_sysrec_gpu(w, 0, s, n), 0);
    tm_rec_close(&w);
    close_gpu(&g);

    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    char names[64][160];
    uint32_t sid[64];
    size_t ns = 0;
    double got[64];
    size_t ngot = 0;
    uint32_t gid[64];
    tm_record rec;
    while (tm_reader_next(r, &rec) == 1) {
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def d;
            assert_int_equal(tm_rec_decode_series(&rec, &d), 0);
            assert_true(ns < 64);
            snprintf(names[ns], sizeof names[ns], "%.*s{%.*s}", (int)d.name_len, d.name,
                     (int)d.labels_len, d.labels);
            sid[ns++] = d.id;
        } else if (rec.type == TM_REC_SAMPLE) {
            int k = tm_rec_decode_sample(&rec, gid + ngot, got + ngot, 64 - ngot);
            assert_true(k > 0);
            ngot += (size_t)k;
        }
    }
    tm_reader_close(&r);
    unlink(path);
    struct {
        const char *series;
        double v;
    } want[] = {
        {"gpu.memory_used_bytes{gpu=0,uuid=GPU-a}", 300},
        {"gpu.memory_total_bytes{gpu=0,uuid=GPU-a}", 1000},
        {"gpu.memory_free_bytes{gpu=0,uuid=GPU-a}", 700},
        {"gpu.memory_reserved_bytes{gpu=0,uuid=GPU-a}", 50},
        {"gpu.utilization{gpu=0,uuid=GPU-a}", 0.97},
        {"gpu.memory_utilization{gpu=0,uuid=GPU-a}", 0.41},
        {"gpu.power_watts{gpu=0,uuid=GPU-a}", 250},
        {"gpu.sm_clock_hertz{gpu=0,uuid=GPU-a}", 1.5e9},
        {"gpu.throttle_reasons{gpu=0,uuid=GPU-a}", 0},
        {"gpu.pcie_rx_bytes_per_second{gpu=0,uuid=GPU-a}", 0},
        {"gpu.process_memory_bytes{gpu=0,pid=42}", 4096},
        {"gpu.process_sm_utilization{gpu=0,pid=42}", 0.8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        size_t j = 0;
        while (j < ns && strcmp(names[j], want[i].series) != 0)
            j++;
        if (j == ns)
            fail_msg("series %s not recorded", want[i].series);
        size_t k = 0;
        while (k < ngot && gid[k] != sid[j])
            k++;
        assert_true(k < ngot);
        if (fabs(got[k] - want[i].v) > 1e-9)
            fail_msg("%s = %g, want %g", want[i].series, got[k], want[i].v);
    }
    for (size_t j = 0; j < ns; j++) {
        if (strstr(names[j], "temperature") || strstr(names[j], "gpu=1"))
            fail_msg("%s should be left out", names[j]);
    }
}

/* ------------------------------------------------------------ the backend seam */

/* A backend of no vendor, driven through tm_gpu_open_with: what gpu.c does
 * (numbering, lost GPUs, the warnings queue, resetting a sample,
 * attribution, recording) must hold for it as for NVML. */
#define TB_DEVS 4
struct tb_dev {
    char uuid[32];
    tm_gpu_proc procs[2];
    size_t nprocs;
    unsigned lost_at; /* the sample (1, 2, ...) at which it falls off the bus; 0 never */
    int add_err;      /* add fails with this */
    unsigned samples;
};
static struct tb_state {
    int open_err;
    unsigned count;
    unsigned warnings_per_sample;
    struct tb_dev dev[TB_DEVS];
    unsigned opens, closes;
    tm_gpu *g;
} tb;

static int tb_open(tm_gpu *g, void **ctx)
{
    if (tb.open_err)
        return tm_seterr(tb.open_err, "no test driver found: GPU metrics off");
    tb.g = g;
    tb.opens++;
    *ctx = &tb;
    return 0;
}

static unsigned tb_count(void *ctx)
{
    return ((struct tb_state *)ctx)->count;
}

static int tb_add(void *ctx, unsigned idx, tm_gpu_stats *s)
{
    struct tb_state *t = ctx;
    if (t->dev[idx].add_err)
        return tm_seterr(t->dev[idx].add_err, "GPU %u: busy", s->index);
    snprintf(s->name, sizeof s->name, "Test GPU %u", idx);
    snprintf(s->uuid, sizeof s->uuid, "%s", t->dev[idx].uuid);
    return (int)idx;
}

static void tb_sample(void *ctx, int slot, tm_gpu_stats *s)
{
    struct tb_state *t = ctx;
    struct tb_dev *d = &t->dev[slot];
    d->samples++;
    s->mem_total = 1000;
    s->mem_used = 250 * d->samples;
    s->mem_free = s->mem_total - s->mem_used;
    s->valid |= TM_GPU_HAVE_MEM;
    if (d->lost_at && d->samples >= d->lost_at) {
        s->lost = true; /* with a valid bit set before: gpu.c must clear it */
        return;
    }
    if (d->samples % 2 == 1) { /* every other sample only */
        s->temp_c = 70;
        s->valid |= TM_GPU_HAVE_TEMP;
    }
    s->throttle_reasons = TM_GPU_THROTTLE_HW_THERMAL;
    s->valid |= TM_GPU_HAVE_THROTTLE;
    s->nprocs = d->nprocs;
    s->procs = d->procs;
    s->valid |= TM_GPU_HAVE_PROCS;
    for (unsigned i = 0; i < t->warnings_per_sample; i++)
        tm_gpu_warn(t->g, "GPU %u (%s): test warning %u", s->index, s->uuid, i);
}

static void tb_close(void *ctx)
{
    ((struct tb_state *)ctx)->closes++;
}

static const struct tm_gpu_backend test_backend = {
    .name = "test",
    .vendor = "Test",
    .open = tb_open,
    .count = tb_count,
    .add = tb_add,
    .sample = tb_sample,
    .close = tb_close,
};

static void tb_reset(unsigned count)
{
    memset(&tb, 0, sizeof tb);
    tb.count = count;
    for (unsigned i = 0; i < TB_DEVS; i++)
        snprintf(tb.dev[i].uuid, sizeof tb.dev[i].uuid, "TEST-%u", i);
}

static int seam_setup(void **state)
{
    tb_reset(2);
    return attr_setup(state);
}

static int seam_teardown(void **state)
{
    tm_gpu_close(&open_g);
    return attr_teardown(state);
}

/* The value of one series ("name{labels}") in a record file; false when
 * the series was not recorded. */
static bool rec_value(const char *path, const char *series, double *v)
{
    tm_reader *r = NULL;
    assert_int_equal(tm_reader_open(&r, path), 0);
    bool found = false;
    uint32_t want_id = 0;
    tm_record rec;
    while (tm_reader_next(r, &rec) == 1) {
        if (rec.type == TM_REC_SERIES) {
            tm_rec_series_def d;
            assert_int_equal(tm_rec_decode_series(&rec, &d), 0);
            char name[256];
            snprintf(name, sizeof name, "%.*s{%.*s}", (int)d.name_len, d.name, (int)d.labels_len,
                     d.labels);
            if (strcmp(name, series) == 0) {
                want_id = d.id;
                found = true;
            }
        } else if (rec.type == TM_REC_SAMPLE && found) {
            uint32_t ids[64];
            double vals[64];
            int k = tm_rec_decode_sample(&rec, ids, vals, 64);
            for (int i = 0; i < k; i++)
                if (ids[i] == want_id)
                    *v = vals[i];
        }
    }
    tm_reader_close(&r);
    return found;
}

static void test_seam_other_backend_attributed_warned_and_recorded(void **state)
{
    (void)state;
    /* GPU 0 runs the tree's process 4242 and a stranger 999; GPU 1 runs
     * the tree's container pid 7 (host pid 31337). */
    add_proc(4242, "4242", 500);
    add_proc(999, "999", 600);
    add_proc(31337, "31337\t7", 700);
    tb.dev[0].procs[0] = (tm_gpu_proc){
        .pid = 4242, .mem_valid = true, .used_bytes = 8 * GiB, .sm_util = NAN, .mem_util = NAN};
    tb.dev[0].procs[1] = (tm_gpu_proc){
        .pid = 999, .mem_valid = true, .used_bytes = GiB, .sm_util = NAN, .mem_util = NAN};
    tb.dev[0].nprocs = 2;
    tb.dev[1].procs[0] = (tm_gpu_proc){
        .pid = 31337, .mem_valid = true, .used_bytes = 3 * GiB, .sm_util = 40, .mem_util = NAN};
    tb.dev[1].nprocs = 1;
    tb.warnings_per_sample = 1;
    const struct tm_gpu_backend *const list[] = {&test_backend};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 1, NULL, 0), 0);
    assert_int_equal(tb.opens, 1);
    size_t n;
    const tm_gpu_stats *s = sample(open_g, &n);
    assert_int_equal(n, 2);
    assert_int_equal(s[1].index, 1);
    assert_string_equal(s[1].name, "Test GPU 1");
    assert_string_equal(s[1].uuid, "TEST-1");
    assert_true(s[0].valid & TM_GPU_HAVE_TEMP);
    const char *names[4];
    assert_int_equal(tm_gpu_throttle_names(s[0].throttle_reasons, names, 4), 1);
    assert_string_equal(names[0], "hw_thermal_slowdown");

    tm_procinfo procs[] = {tree_proc(4242, 500), tree_proc(7, 700)};
    tm_ptree_stats tree = {.root = 4242, .root_alive = true, .nproc = 2, .procs = procs};
    assert_true(tm_gpu_tree_memory(s, n, &tree) == (double)(8 * GiB + 3 * GiB));
    assert_true(tm_gpu_pid_in_tree(s[1].procs[0].pid, &tree));
    assert_false(tm_gpu_pid_in_tree(s[0].procs[1].pid, &tree));

    char last[256];
    assert_int_equal(drain_warnings(open_g, last, sizeof last), 2);
    assert_string_equal(last, "GPU 1 (TEST-1): test warning 0");

    /* The second sample: what the backend leaves out is unavailable again,
     * not the last value. */
    s = sample(open_g, &n);
    assert_false(s[0].valid & TM_GPU_HAVE_TEMP);
    assert_true(isnan(s[0].temp_c));
    assert_int_equal(s[0].mem_used, 500);

    char path[] = "/tmp/test_gpu_seam.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    tm_rec *w = NULL;
    tm_rec_opts o = {.role = "system", .rank = -1};
    assert_int_equal(tm_rec_open(&w, path, &o), 0);
    assert_int_equal(tm_sysrec_gpu(w, 0, s, n), 0);
    tm_rec_close(&w);
    double v = -1;
    assert_true(rec_value(path, "gpu.memory_used_bytes{gpu=1,uuid=TEST-1}", &v));
    assert_true(v == 500);
    assert_true(rec_value(path, "gpu.throttle_reasons{gpu=0,uuid=TEST-0}", &v));
    assert_true(v == (double)TM_GPU_THROTTLE_HW_THERMAL);
    assert_true(rec_value(path, "gpu.process_memory_bytes{gpu=0,pid=4242}", &v));
    assert_true(v == (double)(8 * GiB));
    assert_true(rec_value(path, "gpu.process_sm_utilization{gpu=1,pid=31337}", &v));
    assert_true(v == 0.4);
    assert_false(rec_value(path, "gpu.temperature_celsius{gpu=0,uuid=TEST-0}", &v));
    unlink(path);

    tm_gpu_close(&open_g);
    assert_null(open_g);
    assert_int_equal(tb.closes, 1);
}

static void test_seam_lost_gpu_said_once_and_not_sampled_again(void **state)
{
    (void)state;
    tb.dev[1].lost_at = 2;
    const struct tm_gpu_backend *const list[] = {&test_backend};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 1, NULL, 0), 0);
    size_t n;
    const tm_gpu_stats *s = sample(open_g, &n);
    assert_false(s[1].lost);
    assert_int_equal(drain_warnings(open_g, NULL, 0), 0);
    char last[256];
    for (int i = 0; i < 3; i++) {
        s = sample(open_g, &n);
        assert_true(s[1].lost);
        assert_int_equal(s[1].valid, 0); /* the bit the backend set is cleared */
        assert_int_equal(s[1].nprocs, 0);
        assert_true(s[0].valid & TM_GPU_HAVE_MEM);
        assert_int_equal(drain_warnings(open_g, last, sizeof last), i == 0 ? 1 : 0);
        if (i == 0)
            assert_string_equal(last,
                                "GPU 1 (TEST-1) is lost (fallen off the bus): its metrics stop");
    }
    assert_int_equal(tb.dev[1].samples, 2);
    assert_int_equal(tb.dev[0].samples, 4);
}

static void test_seam_warnings_bounded_with_count_of_dropped(void **state)
{
    (void)state;
    tb.count = 1;
    tb.warnings_per_sample = 20;
    const struct tm_gpu_backend *const list[] = {&test_backend};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 1, NULL, 0), 0);
    size_t n;
    sample(open_g, &n);
    char last[256];
    assert_int_equal(drain_warnings(open_g, last, sizeof last), 17);
    assert_string_equal(last, "4 more GPU warnings were dropped");
}

static void test_seam_gpus_numbered_over_backends_in_table_order(void **state)
{
    (void)state;
    use_fake("fake_nvml", "devices=2;d0.uuid=GPU-n0;d1.uuid=GPU-n1;d0.mem=1000,300,700,50");
    tb.warnings_per_sample = 1;
    const struct tm_gpu_backend *const list[] = {&tm_gpu_nvml, &test_backend};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 2, NULL, 0), 0);
    size_t n;
    const tm_gpu_stats *s = sample(open_g, &n);
    assert_int_equal(n, 4);
    const char *uuids[] = {"GPU-n0", "GPU-n1", "TEST-0", "TEST-1"};
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(s[i].index, i);
        assert_string_equal(s[i].uuid, uuids[i]);
    }
    assert_int_equal(s[0].mem_used, 300);
    char last[256];
    assert_int_equal(drain_warnings(open_g, last, sizeof last), 2);
    assert_string_equal(last, "GPU 3 (TEST-1): test warning 0");
    tm_gpu_close(&open_g);

    /* Selected by trainmon's index, in the order asked. */
    const unsigned idx[] = {3, 0};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 2, idx, 2), 0);
    s = sample(open_g, &n);
    assert_int_equal(n, 2);
    assert_int_equal(s[0].index, 3);
    assert_string_equal(s[0].uuid, "TEST-1");
    assert_int_equal(s[1].index, 0);
    assert_string_equal(s[1].uuid, "GPU-n0");
    tm_gpu_close(&open_g);

    /* A backend none of whose GPUs is asked for is closed at once. */
    unsigned closes = tb.closes;
    const unsigned nv_only[] = {1};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 2, nv_only, 1), 0);
    assert_int_equal(tb.closes, closes + 1);
    tm_gpu_close(&open_g);
    const unsigned none[] = {4};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 2, none, 1), -ENODEV);
    assert_string_equal(tm_last_error(), "GPU 4: no such GPU (4 found)");
}

static void test_seam_absent_backend_left_out_failing_one_reported(void **state)
{
    (void)state;
    const struct tm_gpu_backend *const list[] = {&tm_gpu_nvml, &test_backend};
    /* No NVIDIA library: the other vendor's GPUs alone, renumbered from 0. */
    setenv("TRAINMON_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(tm_gpu_open_with(&open_g, list, 2, NULL, 0), 0);
    size_t n;
    const tm_gpu_stats *s = sample(open_g, &n);
    assert_int_equal(n, 2);
    assert_int_equal(s[0].index, 0);
    assert_string_equal(s[0].uuid, "TEST-0");
    tm_gpu_close(&open_g);

    /* Neither there: the first backend's message. */
    tb.open_err = -ENOENT;
    assert_int_equal(tm_gpu_open_with(&open_g, list, 2, NULL, 0), -ENOENT);
    assert_null(open_g);
    assert_string_equal(tm_last_error(), "no NVIDIA driver found: GPU metrics off");

    /* A driver that is there but fails says more than an absent one. */
    use_fake("fake_nvml", "init_err=4");
    const struct tm_gpu_backend *const rev[] = {&test_backend, &tm_gpu_nvml};
    assert_int_equal(tm_gpu_open_with(&open_g, rev, 2, NULL, 0), -EACCES);
    assert_string_equal(tm_last_error(), "NVML: Insufficient Permissions: GPU metrics off");
}

static void test_seam_unusable_gpu_left_out_when_enumerating_fatal_when_asked(void **state)
{
    (void)state;
    tb.dev[0].add_err = -EACCES;
    const struct tm_gpu_backend *const list[] = {&test_backend};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 1, NULL, 0), 0);
    size_t n;
    const tm_gpu_stats *s = sample(open_g, &n);
    assert_int_equal(n, 1);
    assert_int_equal(s[0].index, 1);
    char last[256];
    assert_int_equal(drain_warnings(open_g, last, sizeof last), 1);
    assert_string_equal(last, "GPU 0: busy: left out");
    tm_gpu_close(&open_g);

    const unsigned idx[] = {0};
    assert_int_equal(tm_gpu_open_with(&open_g, list, 1, idx, 1), -EACCES);
    assert_string_equal(tm_last_error(), "GPU 0: busy");
    tb.dev[1].add_err = -EIO;
    assert_int_equal(tm_gpu_open_with(&open_g, list, 1, NULL, 0), -ENODEV);
    assert_string_equal(tm_last_error(), "no usable Test GPU: GPU metrics off");
    assert_int_equal(tb.closes, tb.opens); /* every failed open closed the backend */
}

static void test_nvml_throttle_bits_mapped_unknown_ones_left_out(void **state)
{
    (void)state;
    use_fake("fake_nvml", "d0.throttle=0x10000000188");
    tm_gpu *g = open_all();
    size_t n;
    const tm_gpu_stats *s = sample(g, &n);
    assert_int_equal(s[0].throttle_reasons, TM_GPU_THROTTLE_HW_SLOWDOWN |
                                                TM_GPU_THROTTLE_HW_POWER_BRAKE |
                                                TM_GPU_THROTTLE_DISPLAY_CLOCKS);
    close_gpu(&g);
}

int main(void)
{
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return 1;
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(fake_dir, sizeof fake_dir, "%.*s/fakes", (int)(sizeof fake_dir - 8), exe);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_values_come_through_exactly, close_teardown),
        cmocka_unit_test_teardown(test_newest_symbols_are_used_first, close_teardown),
        cmocka_unit_test_teardown(test_selected_indices_only, close_teardown),
        cmocka_unit_test_teardown(test_missing_library_is_enoent_with_one_message, close_teardown),
        cmocka_unit_test_teardown(test_driver_not_loaded_is_enoent, close_teardown),
        cmocka_unit_test_teardown(test_init_no_permission_gives_nvml_message, close_teardown),
        cmocka_unit_test_teardown(test_no_gpu_is_enodev, close_teardown),
        cmocka_unit_test_teardown(test_index_out_of_range_is_enodev_and_shuts_down, close_teardown),
        cmocka_unit_test_teardown(test_close_shuts_nvml_down, close_teardown),
        cmocka_unit_test_teardown(test_memory_v2_absent_falls_back_to_plain_call, close_teardown),
        cmocka_unit_test_teardown(test_memory_v2_refused_falls_back_to_plain_call_for_good,
                                  close_teardown),
        cmocka_unit_test_teardown(test_memory_not_supported_at_all_is_off_silently, close_teardown),
        cmocka_unit_test_teardown(test_procs_v3_absent_falls_back_to_v2, close_teardown),
        cmocka_unit_test_teardown(test_legacy_library_uses_unversioned_calls, close_teardown),
        cmocka_unit_test_teardown(test_not_supported_field_is_clear_and_not_asked_again,
                                  close_teardown),
        cmocka_unit_test_teardown(test_no_permission_field_is_clear_with_one_warning,
                                  close_teardown),
        cmocka_unit_test_teardown(test_other_error_is_warned_once_and_retried, close_teardown),
        cmocka_unit_test_teardown(test_gpu_lost_after_two_samples_others_still_sampled,
                                  close_teardown),
        cmocka_unit_test_teardown(test_insufficient_size_grows_buffer_until_all_processes,
                                  close_teardown),
        cmocka_unit_test_teardown(test_32_byte_process_entries_read_right, close_teardown),
        cmocka_unit_test_teardown(test_one_32_byte_process_entry_read_right, close_teardown),
        cmocka_unit_test_teardown(test_process_memory_not_available_is_not_zero, close_teardown),
        cmocka_unit_test_teardown(test_process_utilization_timestamp_carried, close_teardown),
        cmocka_unit_test_teardown(test_process_utilization_over_100_is_dropped, close_teardown),
        cmocka_unit_test_teardown(test_throttle_names_in_bit_order, close_teardown),
        cmocka_unit_test_setup_teardown(test_host_pid_of_the_tree_is_attributed, attr_setup,
                                        attr_teardown),
        cmocka_unit_test_setup_teardown(test_container_pid_is_attributed_through_nspid, attr_setup,
                                        attr_teardown),
        cmocka_unit_test_setup_teardown(
            test_tree_memory_is_zero_when_no_visible_gpu_process_matches, attr_setup,
            attr_teardown),
        cmocka_unit_test_setup_teardown(test_tree_memory_unknown_when_gpu_pids_are_invisible,
                                        attr_setup, attr_teardown),
        cmocka_unit_test_teardown(test_tree_memory_unknown_without_process_lists, close_teardown),
        cmocka_unit_test_teardown(test_nspid_line_parsed, close_teardown),
        cmocka_unit_test_teardown(test_sysrec_gpu_writes_base_units_and_leaves_out_unavailable,
                                  close_teardown),
        cmocka_unit_test_teardown(test_nvml_throttle_bits_mapped_unknown_ones_left_out,
                                  close_teardown),
        cmocka_unit_test_setup_teardown(test_seam_other_backend_attributed_warned_and_recorded,
                                        seam_setup, seam_teardown),
        cmocka_unit_test_setup_teardown(test_seam_lost_gpu_said_once_and_not_sampled_again,
                                        seam_setup, seam_teardown),
        cmocka_unit_test_setup_teardown(test_seam_warnings_bounded_with_count_of_dropped,
                                        seam_setup, seam_teardown),
        cmocka_unit_test_setup_teardown(test_seam_gpus_numbered_over_backends_in_table_order,
                                        seam_setup, seam_teardown),
        cmocka_unit_test_setup_teardown(test_seam_absent_backend_left_out_failing_one_reported,
                                        seam_setup, seam_teardown),
        cmocka_unit_test_setup_teardown(
            test_seam_unusable_gpu_left_out_when_enumerating_fatal_when_asked, seam_setup,
            seam_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
