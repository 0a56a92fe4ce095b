/*
 * run_export.c - `run_export RUNDIR chrome FILE` or `run_export RUNDIR
 * tensorboard DIR`: the library's run exporters (tm_export_chrome,
 * tm_export_tensorboard) on a real run directory, for
 * tests/e2e/export_trace_tb.sh, independent of the export subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "trainmon.h"

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: run_export RUNDIR chrome|tensorboard OUT\n");
        return 2;
    }
    tm_run *r = NULL;
    const char *dirs[] = {argv[1]};
    if (tm_run_load(&r, dirs, 1) < 0) {
        fprintf(stderr, "run_export: %s\n", tm_last_error());
        return 1;
    }
    size_t clipped = 0;
    int rc = strcmp(argv[2], "chrome") == 0 ? tm_export_chrome(r, argv[3], &clipped)
                                            : tm_export_tensorboard(r, argv[3]);
    tm_run_free(&r);
    if (rc < 0) {
        fprintf(stderr, "run_export: %s\n", tm_last_error());
        return 1;
    }
    printf("clipped %zu\n", clipped);
    return 0;
}
