/*
 * cli.h - the trainmon command: one file per subcommand, each a client of
 * libtrainmon through include/trainmon.h only.
 */
#ifndef TM_CLI_H
#define TM_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "trainmon.h"

/* Each subcommand takes argv with argv[0] = its own name and returns the
 * process exit code. */
int cmd_watch(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_probe(int argc, char **argv);

/* One line on stderr: "trainmon: <message>\n". */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Warnings use the same prefix and go to stderr as well. */
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses "1", "0.5", "2s", "500ms" into seconds; false on garbage or <= 0. */
bool cli_parse_seconds(const char *s, double *out);
/* Parses "64M", "1G", "4096", "512k" into bytes; false on garbage or 0. */
bool cli_parse_size(const char *s, unsigned long long *out);

/* --- cliutil.c */

#define CLI_MAX_GPUS 64

/* s as a JSON string (quotes included); well-formed UTF-8 passes through,
 * ill-formed bytes become U+FFFD (tm_escape). */
void cli_json_str(FILE *f, const char *s);
/* s[0..len) escaped for how (tm_escape) onto f. */
void cli_fput_esc(FILE *f, tm_esc how, const char *s, size_t len);
/* mkdir -p: 0 or a negative errno. */
int cli_mkdirs(const char *dir);
/* --gpu: "all", "none"/"off" (*wanted = false) or indices "0,2" (at most
 * CLI_MAX_GPUS into idx).  false on garbage. */
bool cli_parse_gpus(const char *arg, bool *wanted, unsigned *idx, size_t *n);
/* Adds name to devs[0..*n) (capacity cap) unless it is there already. */
void cli_add_dev(char (*devs)[TM_DISK_NAME_MAX], size_t *n, size_t cap, const char *name);
/* "block", "memory", "network", "fuse", "other". */
const char *cli_fs_kind_name(enum tm_fs_kind k);
/* The JSON object that describes a data path (meta.json, run_target and
 * watch_target events): path, kind, mountpoint, fstype, device, disks, why. */
void cli_target_json(FILE *f, const char *path, const tm_blkdev *bd);
/* --alert RULE / --on-alert CMD of watch, serve and run. */
#define CLI_MAX_ON_ALERT 16
struct cli_alerts {
    const char *rules[TM_ALERT_MAX_RULES];
    size_t nrules;
    const char *cmds[CLI_MAX_ON_ALERT];
    size_t ncmds;
    tm_alert_engine *e; /* NULL without rules */
    tm_alert_runner *r; /* NULL without commands */
};
/* One --alert or --on-alert value: 0, or 2 (said) past the limits. */
int cli_alerts_add_rule(struct cli_alerts *a, const char *rule);
int cli_alerts_add_cmd(struct cli_alerts *a, const char *cmd);
/* After the options: --on-alert needs a rule, and every rule must parse.
 * 0, or 2 (said).  Call before anything starts: a typo fails at once. */
int cli_alerts_check(const struct cli_alerts *a);
/* Makes the engine and the command runner: 0, or 1 (said). */
int cli_alerts_open(struct cli_alerts *a);
void cli_alerts_close(struct cli_alerts *a);
/* Says each pending alert transition on stderr and hands it to the
 * --on-alert commands (r may be NULL); reaps finished commands. */
void cli_alerts_drain(tm_alert_engine *e, tm_alert_runner *r);

#endif
