/*
 * test_alert.c - alert rules: parsing, Prometheus's for-semantics on
 * synthetic times, label sets, the collector feeds, the JSON handed to
 * --on-alert commands, and the runner (stdin, environment, no blocking).
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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "trainmon.h"

#define SEC 1000000000LL

/* --- parsing */

static void test_rule_with_for_duration_parses(void **state)
{
    (void)state;
    tm_alert_rule r;
    assert_int_equal(tm_alert_rule_parse("  disk.r_await_ms > 50 for 3m ", &r), 0);
    assert_string_equal(r.text, "disk.r_await_ms > 50 for 3m");
    assert_string_equal(r.metric, "disk.r_await_ms");
    assert_int_equal(r.op, TM_ALERT_GT);
    assert_true(r.threshold == 50.0);
    assert_true(r.for_ns == 180 * SEC);
    assert_string_equal(r.match, "");
}

static void test_rule_without_for_fires_at_once(void **state)
{
    (void)state;
    tm_alert_rule r;
    assert_int_equal(tm_alert_rule_parse("psi.io_some_pct>=20", &r), 0);
    assert_int_equal(r.op, TM_ALERT_GE);
    assert_true(r.for_ns == 0);
}

static void test_every_operator_and_duration_unit_parses(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        enum tm_alert_op op;
        int64_t for_ns;
    } cases[] = {
        {"gpu.temp_c < 30 for 30s", TM_ALERT_LT, 30 * SEC},
        {"gpu.temp_c <= 30 for 1h", TM_ALERT_LE, 3600 * SEC},
        {"gpu.temp_c == 30 for 500ms", TM_ALERT_EQ, SEC / 2},
        {"gpu.temp_c != 30 for 1.5m", TM_ALERT_NE, 90 * SEC},
        {"gpu.temp_c > 30 for 2d", TM_ALERT_GT, 2 * 86400 * SEC},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_alert_rule r;
        assert_int_equal(tm_alert_rule_parse(cases[i].text, &r), 0);
        assert_int_equal(r.op, cases[i].op);
        assert_true(r.for_ns == cases[i].for_ns);
    }
}

static void test_value_suffix_is_a_power_of_1024(void **state)
{
    (void)state;
    tm_alert_rule r;
    assert_int_equal(tm_alert_rule_parse("proc.rss_bytes > 8G", &r), 0);
    assert_true(r.threshold == 8.0 * 1024 * 1024 * 1024);
}

static void test_label_selector_is_normalised(void **state)
{
    (void)state;
    tm_alert_rule r;
    assert_int_equal(tm_alert_rule_parse("disk.util_pct{device=\"sda\", x=y} > 90", &r), 0);
    assert_string_equal(r.match, "device=sda,x=y");
}

static void test_unknown_metric_names_it_and_the_docs(void **state)
{
    (void)state;
    tm_alert_rule r;
    assert_int_equal(tm_alert_rule_parse("disk.foo > 1", &r), -EINVAL);
    assert_string_equal(tm_last_error(),
                        "'disk.foo > 1': unknown metric 'disk.foo' (see docs/ALERTS.md)");
}

static void test_bad_rules_are_refused_with_a_reason(void **state)
{
    (void)state;
    static const struct {
        const char *text, *why;
    } cases[] = {
        {"", "empty rule"},
        {"> 5", "expected a metric name"},
        {"disk.r_mb_s 5", "expected an operator"},
        {"disk.r_mb_s >", "expected a number"},
        {"disk.r_mb_s > fast", "expected a number"},
        {"disk.r_mb_s > 5 for", "unexpected 'for'"},
        {"disk.r_mb_s > 5 for 3", "bad duration '3'"},
        {"disk.r_mb_s > 5 for 3x", "bad duration"},
        {"disk.r_mb_s > 5 for -1s", "bad duration"},
        {"disk.r_mb_s > 5 when 3m", "unexpected 'when 3m'"},
        {"disk.r_mb_s{device} > 5", "bad label selector"},
        {"disk.r_mb_s > 5Q", "expected a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_alert_rule r;
        assert_int_equal(tm_alert_rule_parse(cases[i].text, &r), -EINVAL);
        if (!strstr(tm_last_error(), cases[i].why))
            fail_msg("'%s': message '%s' lacks '%s'", cases[i].text, tm_last_error(), cases[i].why);
        assert_null(strchr(tm_last_error(), '\n'));
    }
}

static void test_every_documented_metric_is_known(void **state)
{
    (void)state;
    static const char *names[] = {"disk.r_await_ms",
                                  "disk.w_await_ms",
                                  "disk.util_pct",
                                  "disk.r_mb_s",
                                  "disk.w_mb_s",
                                  "disk.aqu_sz",
                                  "psi.io_some_pct",
                                  "psi.io_full_pct",
                                  "psi.cpu_some_pct",
                                  "psi.mem_some_pct",
                                  "psi.mem_full_pct",
                                  "gpu.util_pct",
                                  "gpu.mem_used_pct",
                                  "gpu.mem_used_bytes",
                                  "gpu.temp_c",
                                  "gpu.power_w",
                                  "proc.cpu_pct",
                                  "proc.d_state",
                                  "proc.read_mb_s",
                                  "proc.rss_bytes",
                                  "run.data_wait_fraction",
                                  "run.gpu_memory_allocated_fraction"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        assert_non_null(tm_alert_metric_help(names[i]));
    assert_null(tm_alert_metric_help("disk"));
    assert_non_null(tm_alert_metric_name(0));
}

/* --- the state machine, on synthetic times */

struct seen {
    int firing, resolved;
    tm_alert last;
    char json[4096], labels[256];
};

static int drain(tm_alert_engine *e, struct seen *s)
{
    int n = 0;
    tm_alert a;
    while (tm_alert_next(e, &a) == 1) {
        n++;
        if (a.status == TM_ALERT_FIRING)
            s->firing++;
        else
            s->resolved++;
        s->last = a;
        snprintf(s->json, sizeof s->json, "%s", a.json);
        snprintf(s->labels, sizeof s->labels, "%s", a.labels);
    }
    return n;
}

static tm_alert_engine *engine(const char *rule)
{
    tm_alert_engine *e = NULL;
    assert_int_equal(tm_alert_new(&e), 0);
    assert_int_equal(tm_alert_add_rule(e, rule), 0);
    tm_alert_set_clock(e, 1700000000LL * SEC);
    return e;
}

static void test_fires_only_after_condition_held_for_duration(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.r_await_ms > 50 for 3s");
    struct seen s = {0};
    for (int i = 0; i <= 2; i++) { /* t = 10, 11, 12: held 2 s */
        tm_alert_feed(e, "disk.r_await_ms", "device=sda", 60, (10 + i) * SEC);
        assert_int_equal(drain(e, &s), 0);
    }
    tm_alert_feed(e, "disk.r_await_ms", "device=sda", 70, 13 * SEC); /* held 3 s */
    assert_int_equal(drain(e, &s), 1);
    assert_int_equal(s.firing, 1);
    assert_true(s.last.value == 70);
    assert_true(s.last.starts_real_ns == 1700000013LL * SEC);
    assert_true(s.last.ends_real_ns == 0);
    tm_alert_free(&e);
    assert_null(e);
}

static void test_fires_once_while_condition_keeps_holding(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.r_await_ms > 50 for 1s");
    struct seen s = {0};
    for (int i = 0; i < 20; i++)
        tm_alert_feed(e, "disk.r_await_ms", "device=sda", 60, (i + 1) * SEC);
    drain(e, &s);
    assert_int_equal(s.firing, 1);
    assert_int_equal(s.resolved, 0);
    tm_alert_free(&e);
}

static void test_resolves_once_when_condition_stops(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.r_await_ms > 50 for 1s");
    struct seen s = {0};
    tm_alert_feed(e, "disk.r_await_ms", "device=sda", 60, 1 * SEC);
    tm_alert_feed(e, "disk.r_await_ms", "device=sda", 60, 2 * SEC);
    drain(e, &s);
    for (int i = 3; i < 10; i++)
        tm_alert_feed(e, "disk.r_await_ms", "device=sda", 5, i * SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_int_equal(s.resolved, 1);
    assert_int_equal(s.last.status, TM_ALERT_RESOLVED);
    assert_true(s.last.value == 5);
    assert_true(s.last.starts_real_ns == 1700000002LL * SEC);
    assert_true(s.last.ends_real_ns == 1700000003LL * SEC);
    tm_alert_free(&e);
}

static void test_flapping_shorter_than_duration_never_fires(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.r_await_ms > 50 for 3s");
    struct seen s = {0};
    for (int i = 0; i < 40; i++) /* 2 s above, 1 s below, again and again */
        tm_alert_feed(e, "disk.r_await_ms", "device=sda", i % 3 == 2 ? 10 : 90, (i + 1) * SEC);
    assert_int_equal(drain(e, &s), 0);
    tm_alert_free(&e);
}

static void test_unavailable_value_breaks_the_condition(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("gpu.temp_c > 80 for 2s");
    struct seen s = {0};
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", 90, SEC / 2);
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", 90, 1 * SEC);
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", NAN, 2 * SEC);
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", 90, 3 * SEC);
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", 90, 4 * SEC);
    assert_int_equal(drain(e, &s), 0); /* pending again from t = 3 */
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", 90, 5 * SEC);
    assert_int_equal(drain(e, &s), 1);
    tm_alert_feed(e, "gpu.temp_c", "gpu=0", NAN, 6 * SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_int_equal(s.last.status, TM_ALERT_RESOLVED);
    assert_true(isnan(s.last.value));
    assert_non_null(strstr(s.json, "\"value\":null"));
    tm_alert_free(&e);
}

static void test_label_sets_are_independent(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.util_pct >= 90 for 2s");
    struct seen s = {0};
    for (int i = 0; i < 3; i++) {
        tm_alert_feed(e, "disk.util_pct", "device=sda", 95, (i + 1) * SEC);
        tm_alert_feed(e, "disk.util_pct", "device=sdb", i == 1 ? 10 : 95, (i + 1) * SEC);
    }
    assert_int_equal(drain(e, &s), 1);
    assert_string_equal(s.labels, "device=sda");
    tm_alert_feed(e, "disk.util_pct", "device=sdb", 95, 4 * SEC);
    tm_alert_feed(e, "disk.util_pct", "device=sda", 20, 4 * SEC);
    tm_alert_feed(e, "disk.util_pct", "device=sdb", 95, 5 * SEC);
    assert_int_equal(drain(e, &s), 2);
    assert_int_equal(s.firing, 2);
    assert_int_equal(s.resolved, 1);
    assert_string_equal(s.labels, "device=sdb");
    tm_alert_free(&e);
}

static void test_selector_limits_the_rule_to_matching_labels(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.util_pct{device=sdb} > 50");
    struct seen s = {0};
    tm_alert_feed(e, "disk.util_pct", "device=sda", 95, SEC);
    assert_int_equal(drain(e, &s), 0);
    tm_alert_feed(e, "disk.util_pct", "device=sdb", 95, SEC);
    assert_int_equal(drain(e, &s), 1);
    tm_alert_free(&e);
}

static void test_label_set_not_fed_for_stale_time_resolves(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.util_pct > 50");
    struct seen s = {0};
    tm_alert_feed(e, "disk.util_pct", "device=sdb", 95, SEC);
    tm_alert_feed(e, "disk.util_pct", "device=sda", 10, 100 * SEC);
    assert_int_equal(drain(e, &s), 1);
    tm_alert_feed(e, "disk.util_pct", "device=sda", 10, 400 * SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_int_equal(s.last.status, TM_ALERT_RESOLVED);
    assert_string_equal(s.labels, "device=sdb");
    tm_alert_free(&e);
}

static void test_json_has_the_documented_shape(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.r_mb_s > 5 for 1s");
    struct seen s = {0};
    tm_alert_feed(e, "disk.r_mb_s", "device=loop0", 20.5, 10 * SEC);
    tm_alert_feed(e, "disk.r_mb_s", "device=loop0", 20.5, 11 * SEC);
    drain(e, &s);
    char host[256] = "", want[1024];
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want,
             "{\"status\":\"firing\",\"rule\":\"disk.r_mb_s > 5 for 1s\","
             "\"metric\":\"disk.r_mb_s\",\"labels\":{\"device\":\"loop0\"},\"value\":20.5,"
             "\"threshold\":5,\"for_seconds\":1,\"starts_at\":\"2023-11-14T22:13:31.000Z\","
             "\"ends_at\":null,\"host\":\"%s\"}",
             host);
    assert_string_equal(s.json, want);
    tm_alert_feed(e, "disk.r_mb_s", "device=loop0", 0.25, 12 * SEC + 5000000);
    drain(e, &s);
    assert_non_null(strstr(s.json, "{\"status\":\"resolved\","));
    assert_non_null(strstr(s.json, "\"value\":0.25,"));
    assert_non_null(strstr(s.json, "\"ends_at\":\"2023-11-14T22:13:32.005Z\""));
    tm_alert_free(&e);
}

static void cb_count(const tm_alert *a, void *ctx)
{
    int *n = ctx;
    assert_non_null(strstr(a->json, "\"status\":\"firing\""));
    (*n)++;
}

static void test_callback_gets_transitions_instead_of_the_queue(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("psi.io_some_pct > 10");
    int n = 0;
    tm_alert_set_callback(e, cb_count, &n);
    tm_alert_feed(e, "psi.io_some_pct", NULL, 50, SEC);
    assert_int_equal(n, 1);
    tm_alert a;
    assert_int_equal(tm_alert_next(e, &a), 0);
    tm_alert_free(&e);
}

/* --- feeds */

static void test_disk_feed_uses_iostat_units(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("disk.r_mb_s > 5");
    struct seen s = {0};
    tm_diskrate r;
    memset(&r, 0, sizeof r);
    snprintf(r.name, sizeof r.name, "loop7");
    r.rkb_s = 6 * 1024;
    tm_alert_feed_disks(e, &r, 1, SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_string_equal(s.labels, "device=loop7");
    assert_true(s.last.value == 6.0);
    tm_alert_free(&e);
}

static void test_pressure_feed_uses_avg10_and_validity(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("psi.io_full_pct > 5");
    struct seen s = {0};
    tm_pressure_stats ps;
    memset(&ps, 0, sizeof ps);
    ps.io.has_full = true;
    ps.io.full_avg10 = 9;
    tm_alert_feed_pressure(e, &ps, SEC); /* TM_PRESSURE_HAVE_IO not set: unavailable */
    assert_int_equal(drain(e, &s), 0);
    ps.valid = TM_PRESSURE_HAVE_IO;
    tm_alert_feed_pressure(e, &ps, 2 * SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_string_equal(s.labels, "");
    assert_non_null(strstr(s.json, "\"labels\":{}"));
    tm_alert_free(&e);
}

static void test_gpu_feed_computes_used_percent(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("gpu.mem_used_pct > 90");
    struct seen s = {0};
    tm_gpu_stats g;
    memset(&g, 0, sizeof g);
    g.index = 1;
    snprintf(g.uuid, sizeof g.uuid, "GPU-abc");
    g.valid = TM_GPU_HAVE_MEM;
    g.mem_total = 100;
    g.mem_used = 95;
    tm_alert_feed_gpus(e, &g, 1, SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_string_equal(s.labels, "gpu=1,uuid=GPU-abc");
    assert_true(s.last.value == 95.0);
    tm_alert_free(&e);
}

static void test_ptree_feed_counts_d_state(void **state)
{
    (void)state;
    tm_alert_engine *e = engine("proc.d_state >= 2");
    struct seen s = {0};
    tm_ptree_stats ts;
    memset(&ts, 0, sizeof ts);
    ts.root = 42;
    ts.nproc = 5;
    ts.nproc_d = 3;
    ts.cpu_pct = ts.read_bytes_s = ts.rss_bytes = NAN;
    tm_alert_feed_ptree(e, &ts, SEC);
    assert_int_equal(drain(e, &s), 1);
    assert_string_equal(s.labels, "pid=42");
    tm_alert_free(&e);
}

/* --- the runner */

static void test_runner_gives_json_on_stdin_and_env(void **state)
{
    (void)state;
    char dir[] = "/tmp/tm-alert.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "cat > %s/stdin; printf '%%s|%%s|%%s|%%s|%%s' \"$TRAINMON_ALERT_STATUS\" "
             "\"$TRAINMON_ALERT_RULE\" \"$TRAINMON_ALERT_METRIC\" \"$TRAINMON_ALERT_VALUE\" "
             "\"$TRAINMON_ALERT_LABELS\" > %s/env; printf '%%s' \"$TRAINMON_ALERT_JSON\" > %s/json",
             dir, dir, dir);
    const char *cmds[] = {cmd};
    tm_alert_runner *r = NULL;
    assert_int_equal(tm_alert_runner_new(&r, cmds, 1, 0, 0), 0);
    tm_alert_engine *e = engine("disk.r_mb_s > 5");
    tm_alert_feed(e, "disk.r_mb_s", "device=loop0", 7.5, SEC);
    tm_alert a;
    assert_int_equal(tm_alert_next(e, &a), 1);
    assert_int_equal(tm_alert_exec(r, &a), 0);
    for (int i = 0; i < 500 && tm_alert_reap(r) > 0; i++)
        usleep(10000);
    assert_int_equal(tm_alert_reap(r), 0);
    char path[600], buf[4096];
    snprintf(path, sizeof path, "%s/stdin", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    char want[4096];
    snprintf(want, sizeof want, "%s\n", a.json);
    assert_string_equal(buf, want);
    snprintf(path, sizeof path, "%s/env", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_string_equal(buf, "firing|disk.r_mb_s > 5|disk.r_mb_s|7.5|device=loop0");
    snprintf(path, sizeof path, "%s/json", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    assert_string_equal(buf, a.json);
    assert_null(tm_alert_runner_next_warning(r));
    char rm[700];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    assert_int_equal(system(rm), 0);
    tm_alert_free(&e);
    tm_alert_runner_free(&r);
    assert_null(r);
}

static void test_runner_never_blocks_and_kills_overdue_commands(void **state)
{
    (void)state;
    const char *cmds[] = {"sleep 30"};
    tm_alert_runner *r = NULL;
    assert_int_equal(tm_alert_runner_new(&r, cmds, 1, 1, 0.2), 0);
    tm_alert_engine *e = engine("disk.r_mb_s > 5");
    tm_alert_feed(e, "disk.r_mb_s", "device=a", 7.5, SEC);
    tm_alert_feed(e, "disk.r_mb_s", "device=b", 7.5, SEC);
    tm_alert a;
    int64_t t0 = tm_now_mono_ns();
    assert_int_equal(tm_alert_next(e, &a), 1);
    assert_int_equal(tm_alert_exec(r, &a), 0);
    assert_int_equal(tm_alert_next(e, &a), 1);
    assert_int_equal(tm_alert_exec(r, &a), 0); /* queued: one at a time */
    assert_true(tm_now_mono_ns() - t0 < SEC / 2);
    assert_int_equal(tm_alert_reap(r), 2);
    size_t left = 2;
    for (int i = 0; i < 300 && left; i++) {
        usleep(10000);
        left = tm_alert_reap(r);
    }
    assert_int_equal(left, 0);
    const char *w = tm_alert_runner_next_warning(r);
    assert_non_null(w);
    assert_string_equal(w, "--on-alert 'sleep 30': killed after 0 s");
    tm_alert_free(&e);
    tm_alert_runner_free(&r);
}

static void test_runner_reports_failing_command(void **state)
{
    (void)state;
    const char *cmds[] = {"exit 3"};
    tm_alert_runner *r = NULL;
    assert_int_equal(tm_alert_runner_new(&r, cmds, 1, 0, 0), 0);
    tm_alert_engine *e = engine("disk.r_mb_s > 5");
    tm_alert_feed(e, "disk.r_mb_s", "device=a", 7.5, SEC);
    tm_alert a;
    assert_int_equal(tm_alert_next(e, &a), 1);
    assert_int_equal(tm_alert_exec(r, &a), 0);
    for (int i = 0; i < 500 && tm_alert_reap(r) > 0; i++)
        usleep(10000);
    const char *w = tm_alert_runner_next_warning(r);
    assert_non_null(w);
    assert_string_equal(w, "--on-alert 'exit 3': exited with status 3");
    tm_alert_free(&e);
    tm_alert_runner_free(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_with_for_duration_parses),
        cmocka_unit_test(test_rule_without_for_fires_at_once),
        cmocka_unit_test(test_every_operator_and_duration_unit_parses),
        cmocka_unit_test(test_value_suffix_is_a_power_of_1024),
        cmocka_unit_test(test_label_selector_is_normalised),
        cmocka_unit_test(test_unknown_metric_names_it_and_the_docs),
        cmocka_unit_test(test_bad_rules_are_refused_with_a_reason),
        cmocka_unit_test(test_every_documented_metric_is_known),
        cmocka_unit_test(test_fires_only_after_condition_held_for_duration),
        cmocka_unit_test(test_fires_once_while_condition_keeps_holding),
        cmocka_unit_test(test_resolves_once_when_condition_stops),
        cmocka_unit_test(test_flapping_shorter_than_duration_never_fires),
        cmocka_unit_test(test_unavailable_value_breaks_the_condition),
        cmocka_unit_test(test_label_sets_are_independent),
        cmocka_unit_test(test_selector_limits_the_rule_to_matching_labels),
        cmocka_unit_test(test_label_set_not_fed_for_stale_time_resolves),
        cmocka_unit_test(test_json_has_the_documented_shape),
        cmocka_unit_test(test_callback_gets_transitions_instead_of_the_queue),
        cmocka_unit_test(test_disk_feed_uses_iostat_units),
        cmocka_unit_test(test_pressure_feed_uses_avg10_and_validity),
        cmocka_unit_test(test_gpu_feed_computes_used_percent),
        cmocka_unit_test(test_ptree_feed_counts_d_state),
        cmocka_unit_test(test_runner_gives_json_on_stdin_and_env),
        cmocka_unit_test(test_runner_never_blocks_and_kills_overdue_commands),
        cmocka_unit_test(test_runner_reports_failing_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
