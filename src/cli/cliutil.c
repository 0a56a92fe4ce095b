/*
 * cliutil.c - what the subcommands share: one-line errors, option value
 * parsing, JSON strings, directories, the devices behind data paths, and
 * saying alerts.  Like every CLI file, a client of include/trainmon.h only.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    case '\0':
        break;
    case 'k':
    case 'K':
        mul = 1ULL << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1ULL << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1ULL << 30;
        end++;
        break;
    default:
        return false;
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

static int cli_put(void *ctx, const char *p, size_t n)
{
    /* A write error stays on the stream (ferror), which callers check at
     * the end; going on costs nothing. */
    fwrite(p, 1, n, ctx);
    return 0;
}

void cli_fput_esc(FILE *f, tm_esc how, const char *s, size_t len)
{
    tm_escape(how, s, len, cli_put, f);
}

void cli_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    cli_fput_esc(f, TM_ESC_JSON, s, strlen(s));
    fputc('"', f);
}

int cli_mkdirs(const char *dir)
{
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return -ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -errno;
    return 0;
}

bool cli_parse_gpus(const char *arg, bool *wanted, unsigned *idx, size_t *n)
{
    *n = 0;
    *wanted = true;
    if (strcmp(arg, "all") == 0)
        return true;
    if (strcmp(arg, "none") == 0 || strcmp(arg, "off") == 0) {
        *wanted = false;
        return true;
    }
    const char *p = arg;
    while (*p) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || v > 1024 || *n >= CLI_MAX_GPUS || (*end && *end != ','))
            return false;
        idx[(*n)++] = (unsigned)v;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return false;
    }
    return *n > 0;
}

void cli_add_dev(char (*devs)[TM_DISK_NAME_MAX], size_t *n, size_t cap, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(devs[i], name) == 0)
            return;
    if (*n < cap)
        snprintf(devs[(*n)++], TM_DISK_NAME_MAX, "%s", name);
}

const char *cli_fs_kind_name(enum tm_fs_kind k)
{
    switch (k) {
    case TM_FS_BLOCK:
        return "block";
    case TM_FS_MEMORY:
        return "memory";
    case TM_FS_NETWORK:
        return "network";
    case TM_FS_FUSE:
        return "fuse";
    default:
        return "other";
    }
}

void cli_target_json(FILE *f, const char *path, const tm_blkdev *bd)
{
    fputs("{\"path\": ", f);
    cli_json_str(f, path);
    fputs(", \"kind\": ", f);
    cli_json_str(f, cli_fs_kind_name(bd->kind));
    fputs(", \"mountpoint\": ", f);
    cli_json_str(f, bd->mountpoint);
    fputs(", \"fstype\": ", f);
    cli_json_str(f, bd->fstype);
    fputs(", \"device\": ", f);
    cli_json_str(f, bd->top);
    fputs(", \"disks\": [", f);
    for (size_t i = 0; i < bd->nleaves; i++) {
        if (i)
            fputs(", ", f);
        cli_json_str(f, bd->leaves[i]);
    }
    fputs("], \"why\": ", f);
    cli_json_str(f, bd->why);
    fputc('}', f);
}

void cli_alerts_drain(tm_alert_engine *e, tm_alert_runner *r)
{
    tm_alert a;
    while (tm_alert_next(e, &a) == 1) {
        char value[32] = "unavailable";
        if (!isnan(a.value))
            snprintf(value, sizeof value, "%g", a.value);
        fprintf(stderr, "trainmon: alert %s: %s%s%s%s (value %s)\n",
                a.status == TM_ALERT_FIRING ? "firing" : "resolved", a.rule,
                a.labels[0] ? " {" : "", a.labels, a.labels[0] ? "}" : "", value);
        if (r)
            tm_alert_exec(r, &a);
    }
    if (r) {
        tm_alert_reap(r);
        for (const char *w; (w = tm_alert_runner_next_warning(r));)
            cli_warn("%s", w);
    }
}

int cli_alerts_add_rule(struct cli_alerts *a, const char *rule)
{
    if (a->nrules == TM_ALERT_MAX_RULES) {
        cli_err("--alert: more than %d rules", TM_ALERT_MAX_RULES);
        return 2;
    }
    a->rules[a->nrules++] = rule;
    return 0;
}

int cli_alerts_add_cmd(struct cli_alerts *a, const char *cmd)
{
    if (a->ncmds == CLI_MAX_ON_ALERT) {
        cli_err("--on-alert: more than %d commands", CLI_MAX_ON_ALERT);
        return 2;
    }
    a->cmds[a->ncmds++] = cmd;
    return 0;
}

int cli_alerts_check(const struct cli_alerts *a)
{
    if (a->ncmds && !a->nrules) {
        cli_err("--on-alert needs at least one --alert RULE");
        return 2;
    }
    for (size_t i = 0; i < a->nrules; i++) {
        tm_alert_rule rule;
        if (tm_alert_rule_parse(a->rules[i], &rule) < 0) {
            cli_err("--alert %s", tm_last_error());
            return 2;
        }
    }
    return 0;
}

int cli_alerts_open(struct cli_alerts *a)
{
    if (!a->nrules)
        return 0;
    if (tm_alert_new(&a->e) < 0) {
        cli_err("%s", tm_last_error());
        return 1;
    }
    for (size_t i = 0; i < a->nrules; i++)
        if (tm_alert_add_rule(a->e, a->rules[i]) < 0) { /* checked: only ENOMEM */
            cli_err("--alert %s", tm_last_error());
            cli_alerts_close(a);
            return 1;
        }
    if (a->ncmds && tm_alert_runner_new(&a->r, a->cmds, a->ncmds, 0, 0) < 0) {
        cli_err("%s", tm_last_error());
        cli_alerts_close(a);
        return 1;
    }
    return 0;
}

void cli_alerts_close(struct cli_alerts *a)
{
    /* Firing alerts are not resolved at exit; running commands finish on
     * their own. */
    tm_alert_runner_free(&a->r);
    tm_alert_free(&a->e);
}
