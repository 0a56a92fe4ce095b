/*
 * test_jobgpus.c - the live view's job GPUs (tm_job_gpus_live in
 * src/lib/jobgpus.c, trainmon run's status line): the GPUs on which a
 * process of the job's tree holds at least a tenth of the most it holds on
 * any, every GPU when none of the tree is on any.  The report's rule over
 * recorded series is tested in test_report.c and test_rules_overlap.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "trainmon.h"

#define GB 1000000000ull

/* Four GPUs; gpu[i] lists one process (pid[i], bytes[i]; pid 0: none). */
static void four(tm_gpu_stats *g, tm_gpu_proc *p, const pid_t *pid, const uint64_t *bytes,
                 const bool *valid)
{
    memset(g, 0, 4 * sizeof *g);
    for (unsigned i = 0; i < 4; i++) {
        g[i].index = i;
        p[i] = (tm_gpu_proc){.pid = pid[i], .mem_valid = valid[i], .used_bytes = bytes[i]};
        g[i].nprocs = pid[i] ? 1 : 0;
        g[i].procs = &p[i];
    }
}

static void test_the_trees_gpus_are_the_jobs(void **st)
{
    (void)st;
    tm_gpu_stats g[4];
    tm_gpu_proc p[4];
    tm_procinfo tree[2] = {{.pid = 100}, {.pid = 101}};
    bool mark[4];
    const bool valid[4] = {true, true, true, true};
    /* the job (pid 101) on GPU 1 with 20 GB; GPU 2 another job's (pid 7) */
    four(g, p, (pid_t[]){0, 101, 7, 0}, (uint64_t[]){0, 20 * GB, 30 * GB, 0}, valid);
    tm_job_gpus_live(g, 4, tree, 2, mark);
    assert_true(!mark[0] && mark[1] && !mark[2] && !mark[3]);
    /* a stray context of the job's on GPU 0 (0.5 GB, 2.5% of its 20): none */
    four(g, p, (pid_t[]){101, 101, 7, 0}, (uint64_t[]){GB / 2, 20 * GB, 30 * GB, 0}, valid);
    tm_job_gpus_live(g, 4, tree, 2, mark);
    assert_true(!mark[0] && mark[1] && !mark[2] && !mark[3]);
    /* two processes of the job on GPUs 0 and 3, 4 GB and 40 GB: both (each
     * its own most) */
    four(g, p, (pid_t[]){100, 0, 7, 101}, (uint64_t[]){4 * GB, 0, 30 * GB, 40 * GB}, valid);
    tm_job_gpus_live(g, 4, tree, 2, mark);
    assert_true(mark[0] && !mark[1] && !mark[2] && mark[3]);
    /* the driver gives no amount (MIG, a container): present, the job's */
    const bool none[4] = {false, false, true, true};
    four(g, p, (pid_t[]){101, 0, 7, 0}, (uint64_t[]){0, 0, 30 * GB, 0}, none);
    tm_job_gpus_live(g, 4, tree, 2, mark);
    assert_true(mark[0] && !mark[1] && !mark[2] && !mark[3]);
    /* no process of the tree on any GPU (a container's pids): every GPU */
    four(g, p, (pid_t[]){7, 8, 0, 0}, (uint64_t[]){GB, GB, 0, 0}, valid);
    tm_job_gpus_live(g, 4, tree, 2, mark);
    assert_true(mark[0] && mark[1] && mark[2] && mark[3]);
    tm_job_gpus_live(g, 4, NULL, 0, mark);
    assert_true(mark[0] && mark[1] && mark[2] && mark[3]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_trees_gpus_are_the_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
