/*
 * test_rules_mount.c - data.hung_mount (src/lib/rules_mount.c): a -d path
 * whose filesystem did not answer when the run started, from its
 * run_target_unanswered event: high when the job made no step, medium
 * when it made steps, nothing without the event.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "analysis.h"
#include "trainmon.h"

#define FX_NAME "test_rules_mount"
#include "fixture.h"

/* system.tmr with the events `run` writes: one answering path, and
 * nhung that did not answer within 10 s */
static void put_system(int nhung)
{
    tm_rec *s = open_rec("system.tmr", "system", -1);
    assert_int_equal(tm_rec_event(s, at(0), "run_target",
                                  "{\"path\":\"/data\",\"kind\":\"block\",\"device\":\"vdb\","
                                  "\"disks\":[\"vdb\"],\"why\":\"\"}"),
                     0);
    static const char *const hung[] = {"{\"path\":\"/mnt/nfs/imagenet\",\"wait_s\":10}",
                                       "{\"path\":\"/mnt/sshfs\",\"wait_s\":10}"};
    for (int i = 0; i < nhung; i++)
        assert_int_equal(tm_rec_event(s, at(0), "run_target_unanswered", hung[i]), 0);
    for (int i = 0; i <= 20; i++)
        put_value(s, i * 0.5, "disk.read_bytes_per_second", "device=vdb", 0);
    tm_rec_close(&s);
}

static void test_a_hung_path_and_no_step_is_high_and_leads(void **st)
{
    (void)st;
    put_system(2);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "data.hung_mount");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_HIGH);
    assert_int_equal(f->confidence, TM_CONF_HIGH);
    assert_true(ev_num(f, "paths") == 2 && ev_num(f, "waited_s") == 10 && ev_num(f, "steps") == 0);
    assert_non_null(strstr(f->evidence, "\"path\":\"/mnt/nfs/imagenet\""));
    assert_non_null(strstr(f->title, "/mnt/nfs/imagenet (and 1 more) did not answer within 10 s"));
    assert_non_null(strstr(f->title, "made no step"));
    assert_non_null(strstr(f->advice, "`stat /mnt/nfs/imagenet`"));
    const tm_finding *all;
    assert_true(tm_analysis_findings(a, &all) > 0);
    assert_string_equal(all[0].id, "data.hung_mount"); /* the answer to "no steps" */
    done(&run, &a);
}

static void test_a_hung_path_of_a_job_that_made_steps_is_medium(void **st)
{
    (void)st;
    put_system(1);
    tm_rec *r0 = open_rec("rank0.tmr", "rank0", 0);
    put_steps(r0, 50, 0, 0.1, 0.01);
    tm_rec_close(&r0);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    const tm_finding *f = tm_analysis_find(a, "data.hung_mount");
    assert_non_null(f);
    assert_int_equal(f->severity, TM_SEV_MEDIUM);
    assert_true(ev_num(f, "paths") == 1 && ev_num(f, "steps") == 50);
    assert_null(strstr(f->title, "(and"));
    assert_non_null(strstr(f->title, "the job made steps"));
    done(&run, &a);
}

static void test_no_finding_when_every_path_answered(void **st)
{
    (void)st;
    put_system(0);
    tm_run *run = NULL;
    tm_analysis *a = analyze(&run);
    assert_null(tm_analysis_find(a, "data.hung_mount"));
    done(&run, &a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_a_hung_path_and_no_step_is_high_and_leads, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_a_hung_path_of_a_job_that_made_steps_is_medium, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_no_finding_when_every_path_answered, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
