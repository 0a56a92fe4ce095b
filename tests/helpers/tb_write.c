/*
 * tb_write.c - writes a TensorBoard event file for tests/e2e/tb_reader.sh:
 * `tb_write DIR N` writes N steps of two scalars ("loss" = 1/(step+1) and
 * "gpu/allocated_bytes" = step * 2^20) at wall time 1700000000 + step/10,
 * and prints the file's path.
 */
#include <stdio.h>
#include <stdlib.h>

#include "trainmon.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: tb_write DIR N\n");
        return 2;
    }
    long n = strtol(argv[2], NULL, 10);
    tm_tb_writer *w = NULL;
    if (tm_tb_open(&w, argv[1], 1700000000.0) < 0) {
        fprintf(stderr, "tb_write: %s\n", tm_last_error());
        return 1;
    }
    printf("%s\n", tm_tb_path(w));
    for (long s = 0; s < n; s++) {
        double t = 1700000000.0 + (double)s / 10.0;
        if (tm_tb_scalar(w, "loss", s, t, (float)(1.0 / (double)(s + 1))) < 0 ||
            tm_tb_scalar(w, "gpu/allocated_bytes", s, t, (float)s * 1048576.0f) < 0) {
            fprintf(stderr, "tb_write: %s\n", tm_last_error());
            return 1;
        }
    }
    if (tm_tb_close(&w) < 0) {
        fprintf(stderr, "tb_write: %s\n", tm_last_error());
        return 1;
    }
    return 0;
}
