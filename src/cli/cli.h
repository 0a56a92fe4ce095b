/*
 * cli.h - the trainmon command: one file per subcommand, each a client of
 * libtrainmon through include/trainmon.h only.
 */
#ifndef TM_CLI_H
#define TM_CLI_H

#include <stdbool.h>
#include <stdio.h>

/* Each subcommand takes argv with argv[0] = its own name and returns the
 * process exit code. */
int cmd_watch(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_run(int argc, char **argv);

/* One line on stderr: "trainmon: <message>\n". */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Warnings use the same prefix and go to stderr as well. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses "1", "0.5", "2s", "500ms" into seconds; false on garbage or <= 0. */
bool cli_parse_seconds(const char *s, double *out);
/* Parses "64M", "1G", "4096", "512k" into bytes; false on garbage or 0. */
bool cli_parse_size(const char *s, unsigned long long *out);

#endif
