/*
 * main.c - dispatches `trainmon SUBCOMMAND ...`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trainmon.h"

static void usage(FILE *f)
{
    fputs("usage: trainmon COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  run [-o DIR] [-d PATH]... [-i SEC] [--max-size SIZE] [--no-python] -- CMD...\n"
          "        run a training command, record it, and print the report at the end\n"
          "  report RUN... [--json] [-o FILE]\n"
          "        findings with evidence and advice for recorded run directories\n"
          "  export RUN... --format csv|jsonl|chrome|tensorboard [-o OUT]\n"
          "        the timeline for pandas, Perfetto/Chrome or TensorBoard\n"
          "  watch [PATH...] [--pid PID] [-i SEC] [-n COUNT] [--json] [-o DIR]\n"
          "        live per-interval view of the disks behind PATHs (every physical\n"
          "        disk if none), pressure, and with --pid a process tree\n"
          "  dump FILE [--json]\n"
          "        print the records of a trainmon record file (.tmr)\n"
          "  serve [--listen ADDR] [--runs DIR] [-d PATH]...\n"
          "        Prometheus exporter: /metrics and /health for this node and its runs\n"
          "  probe PATH [-t SEC] [--json]\n"
          "        what the storage behind a dataset delivers (O_DIRECT reads)\n"
          "  version\n"
          "\n"
          "trainmon COMMAND --help shows a command's options.\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "watch") == 0)
        return cmd_watch(argc - 1, argv + 1);
    if (strcmp(cmd, "dump") == 0)
        return cmd_dump(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "report") == 0)
        return cmd_report(argc - 1, argv + 1);
    if (strcmp(cmd, "export") == 0)
        return cmd_export(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0)
        return cmd_serve(argc - 1, argv + 1);
    if (strcmp(cmd, "probe") == 0)
        return cmd_probe(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("trainmon %s\n", TM_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    cli_err("%s: unknown command (try 'trainmon --help')", cmd);
    return 2;
}
