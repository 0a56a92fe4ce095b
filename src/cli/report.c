/*
 * report.c - `trainmon report RUN... [--json] [--html FILE] [-o FILE]`: every record file
 * of the run directories on one timeline, a summary and the findings
 * (docs/DIAGNOSIS.md).  Damaged files are reported from what is intact,
 * one line per damaged place on stderr.  --html also writes the report as
 * one self-contained HTML page with charts.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "trainmon.h"

/* A text report is a few KB, an HTML one under 2 MB even for a day-long
 * run (charts are downsampled); the cap only guards against a runaway. */
#define REPORT_TEXT_CAP (64u << 20)

static void report_usage(FILE *f)
{
    fputs("usage: trainmon report RUN... [--json] [--html FILE] [-o FILE]\n"
          "  merge the record files of run directories (several hosts' directories\n"
          "  merge by wall-clock time) and print a summary and findings with advice\n"
          "  --json     one JSON object (docs/DIAGNOSIS.md)\n"
          "  --html FILE  also write the report as one self-contained HTML page with\n"
          "             charts (no scripts, fonts or links to fetch)\n"
          "  -o FILE    write the report to FILE instead of stdout\n",
          f);
}

/* Writes text to path (or stdout when NULL).  0, or 1 with a message. */
static int report_output(const char *path, const char *text, size_t len)
{
    /* A named output: no symlink followed, no FIFO, no other user's file. */
    int fd = path ? tm_file_open_output(path, 0666) : -1;
    FILE *f = path ? (fd >= 0 ? fdopen(fd, "w") : NULL) : stdout;
    if (!f) {
        if (fd >= 0) {
            cli_err("%s: %s", path, strerror(errno));
            close(fd);
        } else {
            cli_err("%s", tm_last_error());
        }
        return 1;
    }
    size_t w = fwrite(text, 1, len, f);
    int rc = (w == len && fflush(f) == 0) ? 0 : 1;
    if (rc)
        cli_err("%s: %s", path ? path : "stdout", strerror(errno));
    if (path && fclose(f) != 0 && !rc) {
        cli_err("%s: %s", path, strerror(errno));
        rc = 1;
    }
    return rc;
}

int cmd_report(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"html", required_argument, NULL, 'H'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    const char *out = NULL, *html = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            json = true;
            break;
        case 'o':
            out = optarg;
            break;
        case 'H':
            html = optarg;
            break;
        case 'h':
            report_usage(stdout);
            return 0;
        default:
            report_usage(stderr);
            return 2;
        }
    }
    if (optind >= argc) {
        cli_err("report: no run directory given (usage: trainmon report RUN... [--json])");
        return 2;
    }
    tm_run *run = NULL;
    tm_analysis *an = NULL;
    tm_text *t = NULL;
    int ret = 1;
    if (tm_run_load(&run, (const char *const *)argv + optind, (size_t)(argc - optind)) < 0) {
        cli_err("%s", tm_last_error());
        return 1;
    }
    const char *const *notes;
    size_t nn = tm_run_notes(run, &notes);
    for (size_t i = 0; i < nn; i++)
        cli_err("%s", notes[i]);
    if (tm_analyze(run, &an) < 0 || !(t = tm_text_new(REPORT_TEXT_CAP))) {
        cli_err("report: %s", an ? "out of memory" : tm_last_error());
        goto out;
    }
    int rc = tm_report_write(run, an, t, json);
    if (rc < 0) {
        if (rc == -E2BIG)
            cli_err("report: the report does not fit in %u MiB", REPORT_TEXT_CAP >> 20);
        else
            cli_err("report: %s", strerror(-rc));
        goto out;
    }
    size_t len;
    const char *text = tm_text_data(t, &len);
    ret = report_output(out, text, len);
    if (ret == 0 && html) {
        tm_text_reset(t);
        rc = tm_report_html(run, an, t);
        if (rc < 0) {
            if (rc == -E2BIG)
                cli_err("report: the HTML report does not fit in %u MiB", REPORT_TEXT_CAP >> 20);
            else
                cli_err("report: %s", strerror(-rc));
            ret = 1;
            goto out;
        }
        text = tm_text_data(t, &len);
        ret = report_output(html, text, len);
    }
out:
    tm_text_free(&t);
    tm_analysis_free(&an);
    tm_run_free(&run);
    return ret;
}
