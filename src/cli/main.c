/*
 * main.c - dispatches `trainmon SUBCOMMAND ...`.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trainmon.h"

void cli_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("trainmon: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("trainmon: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool cli_parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v))
        return false;
    if (strcmp(end, "ms") == 0)
        v /= 1000.0;
    else if (strcmp(end, "m") == 0)
        v *= 60.0;
    else if (*end && strcmp(end, "s") != 0)
        return false;
    if (v <= 0)
        return false;
    *out = v;
    return true;
}

bool cli_parse_size(const char *s, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (*s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return false;
    unsigned long long mul = 1;
    switch (*end) {
    case '\0': break;
    case 'k': case 'K': mul = 1ULL << 10; end++; break;
    case 'm': case 'M': mul = 1ULL << 20; end++; break;
    case 'g': case 'G': mul = 1ULL << 30; end++; break;
    default: return false;
    }
    if (*end == 'i' || *end == 'B')
        end++;
    if (*end == 'B')
        end++;
    if (*end || v == 0 || v > ~0ULL / mul)
        return false;
    *out = v * mul;
    return true;
}

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
