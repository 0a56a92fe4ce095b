/*
 * run.c - `trainmon run [options] -- CMD...`: runs a training job with no
 * code change, records the system around it and the Python processes from
 * the inside, and prints the report when the job ends.
 *
 * What it does, in order:
 *   0. With --probe, before the recording starts, measures what the storage
 *      behind each -d path delivers (tm_probe_run in a child process, so
 *      that a hung mount cannot hold the job back: O_DIRECT reads of the
 *      dataset's files, a few seconds, one probe per device) and, once
 *      the run directory exists, writes DIR/probe.json (docs/FORMAT.md), which the report's disk
 * verdict compares the job's reads with.
 *   1. Creates the run directory (-o DIR, else ./trainmon-runs/<date>-<cmd>;
 *      0700, 0750 with --group-readable; an existing DIR must be the
 *      caller's and closed to others) and writes meta.json (a new temporary
 *      name and renameat; secret-looking arguments redacted unless
 *      --keep-args).  Files are created through safefile.c
 *      (docs/SECURITY.md).
 *   2. Starts CMD with the in-process recorder injected into its Python
 *      processes: DIR/.python-XXXXXX/sitecustomize.py (a directory made new
 *      for the run) is first on PYTHONPATH; it chains to the sitecustomize
 *      it hides, then loads trainmon, which attaches when torch is imported
 *      (TRAINMON_ATTACH=1, TRAINMON_RUN_DIR=DIR).  Which trainmon package
 *      is decided there, by the job's interpreter (sitecustomize.py): its
 *      own when it is this binary's version (TRAINMON_VERSION), else the
 *      package beside the binary (TRAINMON_PKG_DIR, never put on
 *      PYTHONPATH) when it has an extension built for that interpreter,
 *      else none, said on stderr and in DIR/agent-<pid>.json.  The package
 *      beside the binary is TRAINMON_PYTHONPATH when set, else
 *      <dir of the trainmon binary>/../python (the build tree) or
 *      <dir>/../share/trainmon/python (make install) when they hold
 *      trainmon/__init__.py, and only when run_pkg_trusted.
 *   3. Samples every interval into DIR/system.tmr: the disks behind the -d
 *      paths (every physical disk when none), pressure, the job's process
 *      tree (sums and per process: CPU, D state, reads, RSS, PSS) and GPUs.
 *   4. Forwards SIGINT, SIGTERM and SIGHUP sent to trainmon to the job.  A
 *      signal that the terminal sent (Ctrl-C) is not forwarded: the job is
 *      in the same foreground process group and got it already (a second
 *      KeyboardInterrupt would only hurt).  The job stays in trainmon's
 *      process group so that it keeps the terminal (pdb, input()).
 *   5. When the job ends (however), takes a last sample, records job_exit,
 *      rewrites meta.json with the end and prints `trainmon report DIR`.
 *      Returns the job's exit status; a job killed by signal N gives
 *      128+N, as a shell does.
 *
 * meta.json: {"trainmon_version", "command": [argv of CMD], "trainmon_argv",
 * "host", "cwd", "start_time" (seconds since the epoch), "interval_seconds",
 * "max_size", "python_injection", "data_paths": [{path, kind, mountpoint,
 * fstype, device, disks, why}], "online_cpus", "affinity_cpus", "cpu_quota",
 * "usable_cpus" (the CPUs the job may use, machine.c: each left out when
 * unknown; the job's own, re-read at every sample), "pid"} and, once the
 * job has ended,
 * "end_time", "exit_status" (the status trainmon returns) and "signal" (N,
 * or null when the job exited by itself).
 *
 * Exit status of trainmon itself when the job did not run: 2 for a usage
 * error (no command, an unknown option, a -d path that does not exist), 127
 * when CMD is not found, 126 when it cannot be executed, 1 when the run
 * directory cannot be made or is refused (not a directory, another user's,
 * writable by others, a symlink).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "trainmon.h"
#include "util.h"

/* --memory-history: the events torch keeps by default here (its docs'
 * example), and at most (each event holds a stack: memory in the job). */
#define RUN_MEMORY_HISTORY 100000ul
#define RUN_MEMORY_HISTORY_MAX 10000000ul
#define RUN_MAX_DEVS 256
#define RUN_MAX_TARGETS 64
#define RUN_RATE_WINDOW 5           /* ticks over which the live steps/s is taken */
#define RUN_RECORDS_PER_PASS 200000 /* per record file per tick: bounds a catch-up */

extern char **environ;

/* --- signals: a self-pipe wakes the loop; forwarding happens in the
 * handler itself (kill is async-signal-safe), so the job gets the signal
 * even while trainmon is busy sampling. */

static int run_wake_fd[2] = {-1, -1};
static volatile sig_atomic_t run_child_pid;
static volatile sig_atomic_t run_forwarded;

static void run_on_signal(int sig, siginfo_t *si, void *uctx)
{
    (void)uctx;
    int saved = errno;
    if (sig != SIGCHLD && run_child_pid > 0 && si && si->si_code != SI_KERNEL) {
        kill((pid_t)run_child_pid, sig);
        run_forwarded = sig;
    }
    if (run_wake_fd[1] >= 0) {
        char c = 1;
        ssize_t rc = write(run_wake_fd[1], &c, 1);
        (void)rc; /* a full pipe already holds a wake-up */
    }
    errno = saved;
}

static void run_usage(FILE *f)
{
    fputs(
        "usage: trainmon run [-o DIR] [-d PATH]... [-i SEC] [--max-size SIZE] [--no-python]\n"
        "                    [--probe[=SEC]] [--group-readable] [--keep-args]\n"
        "                    [--memory-history[=N]]\n"
        "                    [--serve ADDR] [--alert RULE [--on-alert CMD]]... [--] CMD [ARG...]\n"
        "\n"
        "Runs CMD, records the system and its Python processes into a run directory,\n"
        "and prints the report when it ends.  Returns CMD's exit status (128+N when\n"
        "it was killed by signal N).\n"
        "\n"
        "  -o DIR          the run directory (default ./trainmon-runs/<date>-<cmd>)\n"
        "  -d PATH         a dataset path: watch the disk(s) behind it and how much of\n"
        "                  it is in the page cache at the start and end (repeatable;\n"
        "                  default: every physical disk); a path whose filesystem does\n"
        "                  not answer within 10 s (a hung mount) is left out, said in\n"
        "                  the report, and the job starts\n"
        "  -i SEC          sampling interval (default 1; accepts 500ms, 2s)\n"
        "  --max-size SIZE bound each record file (flight-recorder ring, e.g. 64M)\n"
        "  --no-python     do not inject the in-process recorder into Python\n"
        "  --probe[=SEC]   before the job, measure what the storage behind each -d PATH\n"
        "                  delivers (trainmon probe; SEC in all per device, default 4)\n"
        "                  into DIR/probe.json: the report compares the job's reads\n"
        "                  with it; storage that does not answer within 20 s + 2 x SEC\n"
        "                  (a hung mount) is left unprobed and the job starts\n"
        "  --group-readable  make the run directory 0750 and its files 0640 (default\n"
        "                  0700 and 0600: only the owner reads the recording)\n"
        "  --keep-args     store the command line in meta.json as given (default: the\n"
        "                  values of arguments named like token, key, password, passwd,\n"
        "                  secret or credential, and of NAME_TOKEN=VALUE words, are\n"
        "                  stored as <redacted>)\n"
        "  --memory-history[=N]  keep the CUDA allocator's last N events (default N\n"
        "                  100000) with the Python stack of each, so that an OOM's\n"
        "                  report names the lines of the job that hold the memory\n"
        "                  (torch's _record_memory_history, torch >= 2.0; off by\n"
        "                  default).  Cost: PyTorch states about 2 us per recorded\n"
        "                  allocation or free (Python trace collection, docs\n"
        "                  \"Understanding CUDA Memory Usage\", torch_cuda_memory);\n"
        "                  tests/gpu/check.sh measures it on a real GPU\n"
        "  --serve ADDR    also run the Prometheus exporter (trainmon serve) on ADDR\n"
        "                  (e.g. 127.0.0.1:10436) for the run's directory\n"
        "  --alert RULE    e.g. 'disk.r_await_ms > 50 for 3m', 'run.data_wait_fraction >\n"
        "                  0.3 for 1m' (repeatable; docs/ALERTS.md)\n"
        "  --on-alert CMD  run CMD on each alert firing and resolving (alert JSON on\n"
        "                  stdin, TRAINMON_ALERT_* in the environment; repeatable)\n"
        "\n"
        "Python: each Python process of CMD loads its own installed trainmon when it\n"
        "is this binary's version, else the package beside the binary (the build\n"
        "tree's python/, or PREFIX/share/trainmon/python) when that has an extension\n"
        "built for its interpreter; else it runs unrecorded, with one line on stderr\n"
        "naming the interpreter and the pip command that fixes it (the report says\n"
        "so too).  TRAINMON_PYTHONPATH names another directory holding trainmon/.\n"
        "\n"
        "Exit status without a job: 2 usage (also a -d PATH that does not exist),\n"
        "127 command not found, 126 not executable, 1 run directory not made (also an\n"
        "existing DIR that is not a directory, not the caller's or writable by others).\n",
        f);
}

/* --- small helpers */

/* Whether CMD can be found the way execvp will look for it: 0, -ENOENT or
 * -EACCES. */
static int run_find_command(const char *cmd)
{
    if (strchr(cmd, '/')) {
        if (access(cmd, F_OK) != 0)
            return -ENOENT;
        struct stat st;
        if (stat(cmd, &st) == 0 && S_ISDIR(st.st_mode))
            return -EACCES;
        return access(cmd, X_OK) == 0 ? 0 : -EACCES;
    }
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/bin:/usr/bin";
    int found = -ENOENT;
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char buf[PATH_MAX];
        if (snprintf(buf, sizeof buf, "%.*s%s%s", (int)len, path, len ? "/" : "", cmd) <
            (int)sizeof buf) {
            struct stat st;
            if (stat(buf, &st) == 0 && !S_ISDIR(st.st_mode)) {
                if (access(buf, X_OK) == 0)
                    return 0;
                found = -EACCES;
            }
        }
        path += len;
        if (*path == ':')
            path++;
    }
    return found;
}

/* --- data paths */

struct run_target {
    const char *path;
    tm_blkdev bd;
};

/* --- the run */

struct run {
    char dir[PATH_MAX];
    int argc; /* CMD */
    char **argv;
    int targc; /* trainmon's own argv, for meta.json */
    char **targv;
    double interval;
    unsigned long long max_size;
    bool inject;
    bool group_readable;          /* --group-readable: 0750 directory, 0640 files */
    bool keep_args;               /* --keep-args: meta.json keeps secret-looking arguments */
    unsigned long memory_history; /* --memory-history=N: allocator events kept; 0 off */
    double probe_s;               /* --probe: seconds per device, 0 off */
    struct run_target targets[RUN_MAX_TARGETS];
    size_t ntargets;
    const char *hung[RUN_MAX_TARGETS]; /* -d paths whose filesystem did not answer */
    double hung_wait[RUN_MAX_TARGETS]; /* how long each was waited for */
    size_t nhung;
    char tops[RUN_MAX_DEVS][TM_DISK_NAME_MAX]; /* the devices the data paths sit on */
    size_t ntops;
    int64_t start_real_ns;
    pid_t pid;
    tm_machine mach; /* the CPUs the job may use: trainmon's own (inherited) until the job's */

    tm_rec *w;
    bool rec_failed;
    tm_sampler *sampler; /* disks, pressure, the job's tree, GPUs, ... */

    /* --alert / --on-alert, --serve */
    struct cli_alerts alerts;
    const char *serve_addr;
    pid_t serve_pid;

    /* live status (TTY only) and the training processes' steps (status,
     * run.* alerts), followed in the run directory */
    bool tty, status_shown;
    tm_follow *follow;
    uint64_t steps_seen;                 /* all ranks' step totals at the last tick */
    uint64_t win_steps[RUN_RATE_WINDOW]; /* steps added in each of the last ticks */
    double win_dt[RUN_RATE_WINDOW];
    size_t win_pos;
};

/* Says a failed append once (a full disk), then stays quiet: the job goes
 * on whatever happens to the recording. */
static void run_rec_check(struct run *r, int rc)
{
    if (rc >= 0 || r->rec_failed)
        return;
    r->rec_failed = true;
    cli_warn("%s/system.tmr: %s: system recording stopped; the job goes on", r->dir, strerror(-rc));
}

static void run_event(struct run *r, const char *name, const char *json)
{
    if (r->w)
        run_rec_check(r, tm_rec_event(r->w, 0, name, json));
}

/* Writes one argument list as JSON strings, each redacted unless
 * --keep-args (tm_arg_redact: the values of secret-looking options). */
static void run_json_args(FILE *f, const struct run *r, char *const *argv, int argc)
{
    for (int i = 0; i < argc; i++) {
        char buf[512];
        if (i)
            fputs(", ", f);
        cli_json_str(f, r->keep_args
                            ? argv[i]
                            : tm_arg_redact((const char *const *)argv, argc, i, buf, sizeof buf));
    }
}

/* The CPUs the job may use (tm_machine), each left out when unknown: the
 * report judges thread counts against the machine the job ran on. */
static void run_json_machine(FILE *f, const tm_machine *m)
{
    if (m->online > 0)
        fprintf(f, ", \"online_cpus\": %d", m->online);
    if (m->affinity > 0)
        fprintf(f, ", \"affinity_cpus\": %d", m->affinity);
    if (isfinite(m->quota))
        fprintf(f, ", \"cpu_quota\": %.3f", m->quota);
    if (isfinite(m->usable))
        fprintf(f, ", \"usable_cpus\": %.3f", m->usable);
}

/* Writes meta.json, replaced atomically (a temporary name made with O_EXCL
 * in the checked run directory, then renameat: a planted symlink is never
 * written through); ended adds the end fields. */
static int run_write_meta(const struct run *r, bool ended, int status, int sig)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -errno;
    char host[256] = "", cwd[PATH_MAX] = "";
    gethostname(host, sizeof host - 1);
    if (!getcwd(cwd, sizeof cwd))
        cwd[0] = '\0';
    fputs("{\"trainmon_version\": \"" TM_VERSION "\", \"command\": [", f);
    run_json_args(f, r, r->argv, r->argc);
    fputs("], \"trainmon_argv\": [\"trainmon\"", f);
    if (r->targc > 0)
        fputs(", ", f);
    run_json_args(f, r, r->targv, r->targc);
    fputs("], \"host\": ", f);
    cli_json_str(f, host);
    fputs(", \"cwd\": ", f);
    cli_json_str(f, cwd);
    fprintf(f, ", \"start_time\": %.6f, \"interval_seconds\": %.3f, \"max_size\": %llu",
            (double)r->start_real_ns / 1e9, r->interval, r->max_size);
    fprintf(f, ", \"python_injection\": %s, \"data_paths\": [", r->inject ? "true" : "false");
    for (size_t i = 0; i < r->ntargets; i++) {
        if (i)
            fputs(", ", f);
        cli_target_json(f, r->targets[i].path, &r->targets[i].bd);
    }
    fputc(']', f);
    run_json_machine(f, &r->mach);
    if (r->pid > 0)
        fprintf(f, ", \"pid\": %d", (int)r->pid);
    if (ended) {
        fprintf(f, ", \"end_time\": %.6f, \"exit_status\": %d", (double)tm_now_real_ns() / 1e9,
                status);
        if (sig > 0)
            fprintf(f, ", \"signal\": %d", sig);
        else
            fputs(", \"signal\": null", f);
    }
    fputs("}\n", f);
    if (fclose(f) != 0) {
        free(buf);
        return -ENOMEM;
    }
    /* The directory is checked again: it is the one run_make_dir made or
     * accepted, still the caller's and closed to others. */
    int dfd = tm_dir_open_checked(r->dir, 0);
    int rc = dfd;
    if (dfd >= 0) {
        rc = tm_file_replace_at(dfd, "meta.json", buf, len, r->group_readable ? 0640 : 0600);
        close(dfd);
    }
    free(buf);
    return rc;
}

/* Makes the run directory: DIR as given, or a new one under
 * ./trainmon-runs named after the time and the command; 0700 (0750 with
 * --group-readable).  An existing DIR is accepted only when it is a
 * directory of the caller's that others cannot write and that holds no
 * meta.json; anything else is one line and no job. */
static int run_make_dir(struct run *r, const char *outdir)
{
    char want[PATH_MAX];
    mode_t mode = r->group_readable ? 0750 : 0700;
    if (outdir) {
        if (snprintf(want, sizeof want, "%s", outdir) >= (int)sizeof want) {
            cli_err("%s: path too long", outdir);
            return -ENAMETOOLONG;
        }
        bool created = false;
        int fd = tm_dir_make_private(want, mode, TM_SAFE_PARENTS, &created);
        if (fd < 0) {
            cli_err("%s", tm_last_error());
            return fd;
        }
        struct stat st;
        bool held = !created && fstatat(fd, "meta.json", &st, AT_SYMLINK_NOFOLLOW) == 0;
        close(fd);
        if (held) {
            cli_err("%s: already holds a run (meta.json); choose another -o", outdir);
            return -EEXIST;
        }
    } else {
        char stamp[32], base[NAME_MAX + 1];
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tmv);
        const char *b = strrchr(r->argv[0], '/');
        snprintf(base, sizeof base, "%s", b ? b + 1 : r->argv[0]);
        for (char *p = base; *p; p++)
            if (!(*p == '-' || *p == '_' || *p == '.' || (*p >= '0' && *p <= '9') ||
                  (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
                *p = '_';
        int rc = cli_mkdirs("trainmon-runs");
        if (rc < 0) {
            cli_err("trainmon-runs: %s", strerror(-rc));
            return rc;
        }
        /* Two runs started in the same second get -2, -3, ... */
        for (int i = 1;; i++) {
            if (i == 1)
                snprintf(want, sizeof want, "trainmon-runs/%s-%.64s", stamp, base);
            else
                snprintf(want, sizeof want, "trainmon-runs/%s-%.64s-%d", stamp, base, i);
            if (mkdir(want, 0700) == 0)
                break;
            if (errno != EEXIST || i > 1000) {
                cli_err("%s: %s", want, strerror(errno));
                return -errno;
            }
        }
        /* New, but checked (a writable trainmon-runs lets someone swap it)
         * and given its exact mode (mkdir's went through the umask). */
        int fd = tm_dir_open_checked(want, 0);
        if (fd < 0) {
            cli_err("%s", tm_last_error());
            return fd;
        }
        rc = fchmod(fd, mode) == 0 ? 0 : -errno;
        close(fd);
        if (rc < 0) {
            cli_err("%s: chmod: %s", want, strerror(-rc));
            return rc;
        }
    }
    if (!realpath(want, r->dir)) {
        int e = errno;
        cli_err("%s: %s", want, strerror(e));
        return -e;
    }
    return 0;
}

/* Whether the job's interpreter may load trainmon from a directory (the
 * job may run as root): owned by root or the caller and writable by nobody
 * else, itself and its trainmon/ package (another user's trainmon/ there
 * would run as the job).  Says why not, once. */
static bool run_pkg_trusted(const char *dir)
{
    char sub[PATH_MAX + 16];
    snprintf(sub, sizeof sub, "%s/trainmon", dir);
    const char *paths[] = {dir, sub};
    for (size_t i = 0; i < 2; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0)
            continue; /* a missing package is Python's to report */
        const char *why = NULL;
        char owner[64];
        if (st.st_uid != 0 && st.st_uid != geteuid()) {
            snprintf(owner, sizeof owner, "owned by uid %lu", (unsigned long)st.st_uid);
            why = owner;
        } else if (st.st_mode & (S_IWGRP | S_IWOTH)) {
            why = "writable by others";
        }
        if (why) {
            cli_warn("%s: %s: not loaded into the job's Python", paths[i], why);
            return false;
        }
    }
    return true;
}

/* The directory holding the trainmon package beside the binary
 * (trainmon/__init__.py), or "" when there is none (also when the one
 * found is not safe to run: run_pkg_trusted).  The sitecustomize decides
 * whether the job loads it (TRAINMON_PKG_DIR). */
static void run_find_pkg(char *out, size_t cap)
{
    out[0] = '\0';
    const char *env = getenv("TRAINMON_PYTHONPATH");
    if (env && *env) {
        if (run_pkg_trusted(env))
            snprintf(out, cap, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    if (!realpath("/proc/self/exe", exe))
        return;
    char *slash = strrchr(exe, '/');
    if (!slash)
        return;
    *slash = '\0';
    static const char *const rel[] = {"../python", "../share/trainmon/python"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        char probe[PATH_MAX * 2];
        snprintf(probe, sizeof probe, "%s/%s/trainmon/__init__.py", exe, rel[i]);
        if (access(probe, R_OK) == 0) {
            char dir[PATH_MAX * 2], real[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/%s", exe, rel[i]);
            if (realpath(dir, real) && run_pkg_trusted(real))
                snprintf(out, cap, "%s", real);
            return;
        }
    }
}

/* The sitecustomize that Python runs at start-up in every process of the
 * job (src/cli/sitecustomize.py, made a C string by the Makefile).  It
 * decides which trainmon package the job's own interpreter loads, and must
 * never break the user's program: everything is guarded, and a failure is
 * one line on stderr and DIR/agent-<pid>.json. */
static const char run_sitecustomize[] =
#include "sitecustomize.inc"
    ;

/* Writes DIR/.python-XXXXXX/sitecustomize.py and sets the environment the
 * job inherits.  The directory goes first on the job's PYTHONPATH, so it is
 * made new every run (mkdtemp-style, never an existing one: a .python that
 * someone else made, with their json.py in it, would run as the job) and
 * the file is created O_EXCL in it.  A failure leaves the job
 * uninstrumented, never unrun. */
static void run_setup_python(const struct run *r)
{
    char name[32], pydir[PATH_MAX + 40];
    int dfd = tm_dir_open_checked(r->dir, 0);
    int pfd = dfd < 0 ? dfd
                      : tm_dir_make_temp(dfd, ".python-", r->group_readable ? 0750 : 0700, name,
                                         sizeof name);
    int sfd =
        pfd < 0 ? pfd : tm_file_create_at(pfd, "sitecustomize.py", r->group_readable ? 0640 : 0600);
    int rc = sfd;
    if (sfd >= 0) {
        FILE *f = fdopen(sfd, "w");
        rc = f && fputs(run_sitecustomize, f) >= 0 ? 0 : -(errno ? errno : EIO);
        if (f ? fclose(f) != 0 && rc == 0 : close(sfd) != 0)
            rc = rc ? rc : -errno;
    }
    if (pfd >= 0)
        close(pfd);
    if (dfd >= 0)
        close(dfd);
    if (rc < 0) {
        if (sfd >= 0) /* a write error: the open ones set their message */
            cli_warn("%s/%s/sitecustomize.py: %s: Python processes are not instrumented", r->dir,
                     name, strerror(-rc));
        else
            cli_warn("%s: Python processes are not instrumented", tm_last_error());
        return;
    }
    snprintf(pydir, sizeof pydir, "%s/%s", r->dir, name);
    const char *old = getenv("PYTHONPATH");
    size_t cap = strlen(pydir) + (old ? strlen(old) : 0) + 2;
    char *pp = malloc(cap);
    if (!pp)
        return;
    snprintf(pp, cap, "%s%s%s", pydir, old && *old ? ":" : "", old && *old ? old : "");
    setenv("PYTHONPATH", pp, 1);
    free(pp);
    /* The package beside the binary is not put on PYTHONPATH, where it
     * would shadow the job's own: the sitecustomize loads it only when the
     * interpreter has no trainmon of this version and it has an extension
     * built for that interpreter. */
    char pkg[PATH_MAX];
    run_find_pkg(pkg, sizeof pkg);
    if (pkg[0])
        setenv("TRAINMON_PKG_DIR", pkg, 1);
    else
        unsetenv("TRAINMON_PKG_DIR");
    setenv("TRAINMON_VERSION", TM_VERSION, 1);
    unsetenv("TRAINMON_AGENT_SAID"); /* said once per job: set by the first process that says */
    setenv("TRAINMON_ATTACH", "1", 1);
    if (r->keep_args)
        setenv("TRAINMON_KEEP_ARGS", "1", 1); /* the extension's own meta keeps them too */
    if (r->max_size) {
        char v[32];
        snprintf(v, sizeof v, "%llu", r->max_size);
        setenv("TRAINMON_MAX_SIZE", v, 1);
    }
    if (r->memory_history) { /* read by trainmon.attach() (python/trainmon) */
        char v[32];
        snprintf(v, sizeof v, "%lu", r->memory_history);
        setenv("TRAINMON_MEMORY_HISTORY", v, 1);
    } else {
        unsetenv("TRAINMON_MEMORY_HISTORY");
    }
}

/* --- live status line */

/* Reads what the training processes appended since the last tick (the
 * follower keeps their files open) and notes how many steps it added, for
 * the steps/s of the status line. */
static void run_steps_update(struct run *r, double dt)
{
    if (!r->follow && tm_follow_open(&r->follow, r->dir, false) < 0)
        return;
    tm_follow_poll(r->follow, RUN_RECORDS_PER_PASS);
    uint64_t total = 0;
    const tm_follow_rank *k;
    for (size_t j = 0; (k = tm_follow_rank_at(r->follow, 0, j)); j++)
        total += tm_steptally_total(&k->tally, k->ring);
    size_t slot = r->win_pos++ % RUN_RATE_WINDOW;
    /* Fewer than before: a file was replaced or went away; no rate then. */
    r->win_steps[slot] = total >= r->steps_seen ? total - r->steps_seen : 0;
    r->win_dt[slot] = dt;
    r->steps_seen = total;
}

static void run_status(struct run *r, const tm_diskrate *rates, size_t nrates,
                       const tm_gpu_stats *gpus, size_t ngpus, bool have_disks)
{
    uint64_t ws = 0;
    double wt = 0;
    for (size_t i = 0; i < RUN_RATE_WINDOW; i++) {
        ws += r->win_steps[i];
        wt += r->win_dt[i];
    }
    /* The wait share over each rank's last TM_FOLLOW_WINDOW judged steps
     * (the run.data_wait_fraction alert input), all ranks together. */
    double wd = 0, ww = 0;
    size_t nranks = 0;
    const tm_follow_rank *k;
    for (; r->follow && (k = tm_follow_rank_at(r->follow, 0, nranks)); nranks++) {
        double d, q;
        if (tm_stepwin_sum(&k->win, TM_FOLLOW_WINDOW, &d, &q)) {
            wd += d;
            ww += q;
        }
    }
    /* Several ranks: steps/s is per rank (the job's pace), not their sum. */
    char line[256];
    int len = snprintf(line, sizeof line, "[trainmon] ");
    if (ws && wt > 0 && wd > 0)
        len += snprintf(line + len, sizeof line - (size_t)len, "%.1f steps/s  wait %.0f%%",
                        (double)ws / (double)(nranks ? nranks : 1) / wt, 100.0 * ww / wd);
    else
        len += snprintf(line + len, sizeof line - (size_t)len, "- steps/s  wait -");
    if (have_disks) {
        double rd = 0;
        for (size_t i = 0; i < nrates; i++) {
            bool top = r->ntops == 0;
            for (size_t j = 0; j < r->ntops && !top; j++)
                top = strcmp(rates[i].name, r->tops[j]) == 0;
            if (top && !isnan(rates[i].rkb_s))
                rd += rates[i].rkb_s * 1024.0;
        }
        len += snprintf(line + len, sizeof line - (size_t)len, "  disk %.1f MB/s", rd / 1e6);
    }
    /* the job's GPUs (a one-GPU job on an eight-GPU machine shows its own) */
    bool mine[64];
    const tm_ptree_stats *pt = tm_sampler_ptree(r->sampler);
    if (ngpus <= 64)
        tm_job_gpus_live(gpus, ngpus, pt ? pt->procs : NULL, pt ? pt->nproc : 0, mine);
    double util = 0, used = 0, total = 0;
    size_t nu = 0, nm = 0;
    for (size_t i = 0; i < ngpus; i++) {
        if (ngpus <= 64 && !mine[i])
            continue;
        if (gpus[i].valid & TM_GPU_HAVE_UTIL) {
            util += gpus[i].util_gpu;
            nu++;
        }
        if (gpus[i].valid & TM_GPU_HAVE_MEM) {
            used += (double)gpus[i].mem_used;
            total += (double)gpus[i].mem_total;
            nm++;
        }
    }
    if (nu)
        len += snprintf(line + len, sizeof line - (size_t)len, "  gpu %.0f%%", util / (double)nu);
    if (nm && len > 0 && (size_t)len < sizeof line)
        snprintf(line + len, sizeof line - (size_t)len, " %.1f/%.0f GiB", used / 1073741824.0,
                 total / 1073741824.0);
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    r->status_shown = true;
}

static void run_status_clear(struct run *r)
{
    if (r->status_shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        r->status_shown = false;
    }
}

/* --- alerts */

/* Says each alert transition on stderr and hands it to the --on-alert
 * commands (started, never waited for here). */
static void run_alerts(struct run *r)
{
    run_status_clear(r);
    cli_alerts_drain(r->alerts.e, r->alerts.r);
}

/* --serve ADDR: `trainmon serve` for the directory holding this run, as a
 * child process (its own HTTP threads never share a process with the
 * sampler).  Failure to start it is a warning: the job still runs. */
static void run_start_serve(struct run *r, const char *const *paths, size_t npaths)
{
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", r->dir);
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent)
        *slash = '\0';
    else
        snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
    char *args[8 + 2 * RUN_MAX_TARGETS];
    size_t n = 0;
    static char a0[] = "trainmon", a1[] = "serve", a2[] = "--listen", a4[] = "--runs",
                dflag[] = "-d";
    args[n++] = a0;
    args[n++] = a1;
    args[n++] = a2;
    args[n++] = (char *)r->serve_addr;
    args[n++] = a4;
    args[n++] = parent;
    for (size_t i = 0; i < npaths; i++) {
        args[n++] = dflag;
        args[n++] = (char *)paths[i];
    }
    args[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        cli_warn("--serve: fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        execv("/proc/self/exe", args);
        fprintf(stderr, "trainmon: --serve: /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    r->serve_pid = pid;
}

static void run_stop_serve(struct run *r)
{
    if (r->serve_pid <= 0)
        return;
    kill(r->serve_pid, SIGTERM);
    int st;
    while (waitpid(r->serve_pid, &st, 0) < 0 && errno == EINTR)
        ;
    r->serve_pid = 0;
}

/* --- sampling */

/* Says the sampler's warnings: the GPUs' own word for word (above the
 * status line), a failed recording once; failed samples are left to the
 * report, which sees the gaps. */
static void run_sampler_warnings(struct run *r)
{
    tm_sampler_warning wn;
    while (tm_sampler_next_warning(r->sampler, &wn) == 1) {
        if (wn.kind == TM_SAMPLER_WARN_RECORD) {
            run_rec_check(r, wn.err);
        } else if (wn.kind == TM_SAMPLER_WARN_NOTE) {
            run_status_clear(r);
            cli_warn("%s", wn.msg);
        }
    }
}

static void run_sample(struct run *r, double dt, bool status)
{
    int64_t t = tm_now_mono_ns();
    /* One tick samples every collector, records the system series and
     * feeds the system alert inputs. */
    tm_sampler_tick(r->sampler, t);
    /* The job's own CPUs (a job started through taskset or a launcher that
     * sets its affinity differs from trainmon's): the last full reading
     * wins; a job already gone (its affinity unreadable) or one whose
     * cgroup could no longer be read (a quota lost at exit) keeps the one
     * before. */
    tm_machine m;
    tm_machine_read(&m, r->pid);
    if (m.affinity > 0 && !(isnan(m.quota) && isfinite(r->mach.quota)))
        r->mach = m;
    run_sampler_warnings(r);
    const tm_diskrate *rates = NULL;
    size_t nrates = 0;
    tm_sampler_disks(r->sampler, &rates, &nrates);
    const tm_gpu_stats *gpus = NULL;
    size_t ngpus = 0;
    tm_sampler_gpus(r->sampler, &gpus, &ngpus);

    if (status || r->alerts.e)
        run_steps_update(r, dt);
    if (r->alerts.e) {
        /* Per rank, labels run and rank (docs/ALERTS.md). */
        tm_alert_feed_runs(r->alerts.e, r->follow, t);
        run_alerts(r);
    }
    if (status)
        run_status(r, rates, nrates, gpus, ngpus, tm_sampler_on(r->sampler, "disk"));
}

/* Waits until deadline (monotonic ns) or a signal's wake-up. */
static void run_wait(int64_t deadline_ns)
{
    int64_t left = deadline_ns - tm_now_mono_ns();
    if (left > 0) {
        struct pollfd p = {.fd = run_wake_fd[0], .events = POLLIN};
        int ms = (int)((left + 999999) / 1000000);
        poll(&p, 1, ms);
    }
    char buf[64];
    while (read(run_wake_fd[0], buf, sizeof buf) > 0)
        ;
}

/* --- option parsing and set-up */

static int run_parse(struct run *r, int argc, char **argv, const char **outdir, const char **paths,
                     size_t *npaths)
{
    enum {
        OPT_MAXSIZE = 1000,
        OPT_NOPY,
        OPT_ALERT,
        OPT_ON_ALERT,
        OPT_SERVE,
        OPT_GROUP,
        OPT_KEEP,
        OPT_PROBE,
        OPT_MEMHIST
    };
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},
        {"data", required_argument, NULL, 'd'},
        {"interval", required_argument, NULL, 'i'},
        {"max-size", required_argument, NULL, OPT_MAXSIZE},
        {"no-python", no_argument, NULL, OPT_NOPY},
        {"alert", required_argument, NULL, OPT_ALERT},
        {"on-alert", required_argument, NULL, OPT_ON_ALERT},
        {"serve", required_argument, NULL, OPT_SERVE},
        {"group-readable", no_argument, NULL, OPT_GROUP},
        {"keep-args", no_argument, NULL, OPT_KEEP},
        {"probe", optional_argument, NULL, OPT_PROBE},
        {"memory-history", optional_argument, NULL, OPT_MEMHIST},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    optind = 0; /* a full re-initialisation of getopt (glibc) */
    opterr = 0;
    /* "+": options end at the command, so that its own options stay its own. */
    while ((c = getopt_long(argc, argv, "+:o:d:i:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o':
            *outdir = optarg;
            break;
        case 'd':
            if (*npaths >= RUN_MAX_TARGETS) {
                cli_err("-d %s: at most %d data paths", optarg, RUN_MAX_TARGETS);
                return 2;
            }
            paths[(*npaths)++] = optarg;
            break;
        case 'i':
            if (!cli_parse_seconds(optarg, &r->interval)) {
                cli_err("-i %s: not an interval in seconds", optarg);
                return 2;
            }
            break;
        case OPT_MAXSIZE:
            if (!cli_parse_size(optarg, &r->max_size)) {
                cli_err("--max-size %s: not a size (e.g. 64M)", optarg);
                return 2;
            }
            break;
        case OPT_NOPY:
            r->inject = false;
            break;
        case OPT_ALERT:
            if (cli_alerts_add_rule(&r->alerts, optarg))
                return 2;
            break;
        case OPT_ON_ALERT:
            if (cli_alerts_add_cmd(&r->alerts, optarg))
                return 2;
            break;
        case OPT_SERVE:
            r->serve_addr = optarg;
            break;
        case OPT_GROUP:
            r->group_readable = true;
            break;
        case OPT_KEEP:
            r->keep_args = true;
            break;
        case OPT_PROBE:
            r->probe_s = 4.0;
            if (optarg && (!cli_parse_seconds(optarg, &r->probe_s) || r->probe_s > 600)) {
                cli_err("--probe=%s: not a time in seconds (at most 600)", optarg);
                return 2;
            }
            break;
        case OPT_MEMHIST: {
            r->memory_history = RUN_MEMORY_HISTORY;
            if (optarg) {
                char *end;
                errno = 0;
                unsigned long long n = strtoull(optarg, &end, 10);
                if (errno || end == optarg || *end || optarg[0] == '-' || n == 0 ||
                    n > RUN_MEMORY_HISTORY_MAX) {
                    cli_err("--memory-history=%s: not a number of events from 1 to %lu", optarg,
                            (unsigned long)RUN_MEMORY_HISTORY_MAX);
                    return 2;
                }
                r->memory_history = (unsigned long)n;
            }
            break;
        }
        case 'h':
            run_usage(stdout);
            return 0;
        case ':':
            cli_err("%s: needs a value (try 'trainmon run --help')", argv[optind - 1]);
            return 2;
        default:
            if (optopt)
                cli_err("-%c: unknown option (try 'trainmon run --help')", optopt);
            else
                cli_err("%s: unknown option (try 'trainmon run --help')", argv[optind - 1]);
            return 2;
        }
    }
    if (optind >= argc) {
        cli_err("run: no command given (usage: trainmon run [OPTIONS] -- CMD...)");
        return 2;
    }
    if (r->probe_s > 0 && *npaths == 0) {
        cli_err("--probe: needs a data path to probe (-d PATH)");
        return 2;
    }
    r->argc = argc - optind;
    r->argv = argv + optind;
    return -1; /* go on */
}

static void run_close_all(struct run *r)
{
    tm_follow_close(&r->follow);
    tm_sampler_free(&r->sampler); /* before the writer it records into */
    tm_rec_close(&r->w);
    cli_alerts_close(&r->alerts);
}

/* --- the steps of cmd_run */

/* Resolves the -d paths to their disks (devs, the top devices in r->tops)
 * and finds the command: everything that can be wrong with the request is
 * said before the job starts and before a run directory exists.  Returns
 * -1 to go on, else trainmon's exit status. */
#define RUN_RESOLVE_AFTER_HUNG_S 2.0
static int run_resolve(struct run *r, const char **paths, size_t *npaths,
                       char (*devs)[TM_DISK_NAME_MAX], size_t *ndevs)
{
    size_t keep = 0;
    for (size_t i = 0; i < *npaths; i++) {
        struct run_target *t = &r->targets[r->ntargets];
        /* after one hung path, the others (most often on the same mount)
         * get a shorter wait: 64 paths do not hold the job for 640 s */
        double wait = r->nhung ? RUN_RESOLVE_AFTER_HUNG_S : TM_BLKDEV_RESOLVE_WAIT_S;
        int rc = tm_blkdev_resolve_within(paths[i], 0, &t->bd, wait);
        if (rc == -ETIMEDOUT) {
            /* A hung mount: the job would block on it as trainmon did, and
             * the recording of that (workers in D state, no reads) is worth
             * having; the path is left out of the disk and cache measures. */
            cli_warn("%s: left out of this run's disk and cache measures; the job starts",
                     tm_last_error());
            r->hung_wait[r->nhung] = wait;
            r->hung[r->nhung++] = paths[i];
            continue;
        }
        if (rc < 0) {
            cli_err("%s", tm_last_error());
            return 2;
        }
        paths[keep++] = paths[i];
        t->path = paths[i];
        r->ntargets++;
        if (t->bd.kind == TM_FS_BLOCK && t->bd.top[0]) {
            cli_add_dev(devs, ndevs, RUN_MAX_DEVS, t->bd.top);
            cli_add_dev(r->tops, &r->ntops, RUN_MAX_DEVS, t->bd.top);
            for (size_t k = 0; k < t->bd.nleaves; k++)
                cli_add_dev(devs, ndevs, RUN_MAX_DEVS, t->bd.leaves[k]);
        }
    }
    *npaths = keep;
    int rc = run_find_command(r->argv[0]);
    if (rc < 0) {
        cli_err("%s: %s", r->argv[0], rc == -ENOENT ? "command not found" : strerror(-rc));
        return rc == -ENOENT ? 127 : 126;
    }
    return -1;
}

/* Makes the run directory and opens the recording: system.tmr, the sampler
 * (disks and GPUs now, the job's tree once it has a pid), the targets'
 * events, the Python injection, the --serve child and meta.json.  -1 to go
 * on, else trainmon's exit status (everything opened is closed). */
static int run_open(struct run *r, const char *outdir, const char *const *paths, size_t npaths,
                    char (*devs)[TM_DISK_NAME_MAX], size_t ndevs)
{
    if (cli_alerts_open(&r->alerts))
        return 1;
    if (run_make_dir(r, outdir) < 0) {
        cli_alerts_close(&r->alerts);
        return 1;
    }
    fprintf(stderr, "trainmon: recording into %s\n", r->dir);
    for (size_t i = 0; i < r->ntargets; i++) {
        const struct run_target *t = &r->targets[i];
        if (t->bd.kind == TM_FS_BLOCK && t->bd.top[0])
            fprintf(stderr, "trainmon: data %s: %s\n", t->path, t->bd.why);
        else
            cli_warn("%s", t->bd.why);
    }

    char sys_path[PATH_MAX + 16];
    tm_rec_opts o = {.role = "system", .rank = -1, .max_size = r->max_size};
    if (snprintf(sys_path, sizeof sys_path, "%s/system.tmr", r->dir) >= (int)sizeof sys_path) {
        cli_warn("%s: path too long; the job runs unrecorded", r->dir);
    } else if (tm_rec_open(&r->w, sys_path, &o) < 0) {
        cli_warn("%s; the job runs unrecorded", tm_last_error());
        r->w = NULL;
    }
    const char *names[RUN_MAX_DEVS];
    for (size_t i = 0; i < ndevs; i++)
        names[i] = devs[i];
    tm_sampler_opts so = {.disks_off = !(npaths == 0 || ndevs > 0),
                          .disks = names,
                          .ndisks = ndevs,
                          .per_process = true,
                          .rec = r->w,
                          .alerts = r->alerts.e,
                          .data_paths = paths,
                          .ndata_paths = npaths};
    if (tm_sampler_new(&r->sampler, &so) < 0) {
        cli_err("%s", tm_last_error());
        run_close_all(r);
        return 1;
    }
    const char *oerr;
    if ((oerr = tm_sampler_open_error(r->sampler, "disk")))
        cli_warn("disks: %s", oerr);
    if ((oerr = tm_sampler_open_error(r->sampler, "gpu")))
        fprintf(stderr, "trainmon: %s\n", oerr); /* said once; the rest is still worth recording */
    for (size_t i = 0; i < r->ntargets && r->w; i++) {
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (!m)
            continue;
        cli_target_json(m, r->targets[i].path, &r->targets[i].bd);
        fclose(m);
        run_event(r, "run_target", buf);
        free(buf);
    }
    for (size_t i = 0; i < r->nhung && r->w; i++) {
        /* the report's data.hung_mount */
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        if (!m)
            continue;
        fputs("{\"path\":", m);
        cli_json_str(m, r->hung[i]);
        fprintf(m, ",\"wait_s\":%g}", r->hung_wait[i]);
        fclose(m);
        run_event(r, "run_target_unanswered", buf);
        free(buf);
    }
    if (r->inject)
        run_setup_python(r);
    if (r->serve_addr)
        run_start_serve(r, paths, npaths);
    setenv("TRAINMON_RUN_DIR", r->dir, 1);
    tm_machine_read(&r->mach, 0); /* the job inherits it; re-read for the job at each sample */
    r->start_real_ns = tm_now_real_ns();
    int rc = run_write_meta(r, false, 0, 0);
    if (rc < 0)
        cli_warn("%s/meta.json: %s", r->dir, strerror(-rc));
    return -1;
}

/* --probe: one probe per device behind the -d paths (the first path on
 * it; a path with no block device is probed on its own), before the
 * recording and the job start, so that neither slows the other and the
 * run's span is the job's.  A probe that fails is said and left out: the
 * job runs anyway.  run_probe_write puts them into DIR/probe.json. */
static tm_probe run_probes[RUN_MAX_TARGETS];
static size_t run_nprobes;

/* One probe, in a child process (tm_call_within): a read on a hung mount
 * (NFS whose server is gone, a stalled device) blocks in the kernel, and no
 * deadline of the probe's own can end it.  trainmon waits at most
 * RUN_PROBE_GRACE_S + 2 x the probe's time for it, then abandons the probe
 * and the job starts anyway.  0, or a negative errno with tm_last_error()
 * saying why. */
#define RUN_PROBE_GRACE_S 20.0
struct run_probe_ctx {
    const char *path;
    double secs;
};

static int run_probe_in_child(void *ctx, void *out)
{
    const struct run_probe_ctx *c = ctx;
    return tm_probe_run(c->path, c->secs, out);
}

static int run_probe_child(const char *path, double secs, tm_probe *out)
{
    static tm_probe p; /* large: not on the stack */
    struct run_probe_ctx c = {.path = path, .secs = secs};
    double wait_s = RUN_PROBE_GRACE_S + 2 * (secs > 0 ? secs : 4.0);
    int rc = tm_call_within(wait_s, run_probe_in_child, &c, &p, sizeof p);
    if (rc == -ETIMEDOUT)
        return tm_seterr(rc,
                         "%s: no answer from the storage within %.0f s (a hung mount, or reads "
                         "slower than a few KB/s): probe abandoned",
                         path, wait_s);
    if (rc < 0)
        return rc;
    *out = p;
    return 0;
}

static void run_probe(struct run *r)
{
    if (r->probe_s <= 0)
        return;
    tm_probe *probes = run_probes;
    size_t n = 0;
    for (size_t i = 0; i < r->ntargets; i++) {
        const struct run_target *t = &r->targets[i];
        if (t->bd.kind == TM_FS_MEMORY)
            continue; /* nothing to probe; the target's warning said so */
        bool seen = false;
        for (size_t k = 0; k < i && t->bd.top[0]; k++)
            seen |= !strcmp(r->targets[k].bd.top, t->bd.top);
        if (seen)
            continue;
        fprintf(stderr, "trainmon: probing the storage behind %s (%g s, O_DIRECT reads)\n", t->path,
                r->probe_s);
        if (run_probe_child(t->path, r->probe_s, &probes[n]) < 0) {
            cli_warn("--probe: %s; the report will not know this storage's ceiling",
                     tm_last_error());
            continue;
        }
        const tm_probe_test *b = tm_probe_best(&probes[n], NULL);
        if (b && b->requests)
            fprintf(stderr,
                    "trainmon: probe %s%s: at most %.1f MB/s (%s reads of %.0f KiB, %u in "
                    "flight)\n",
                    probes[n].device[0] ? "/dev/" : "",
                    probes[n].device[0] ? probes[n].device : t->path, b->bytes_per_second / 1e6,
                    b->pattern, (double)b->bytes / (double)b->requests / 1024, b->queue_depth);
        n++;
    }
    run_nprobes = n;
}

static void run_probe_write(const struct run *r)
{
    if (run_nprobes == 0)
        return;
    char *json = tm_probe_json(run_probes, run_nprobes);
    int dfd = json ? tm_dir_open_checked(r->dir, 0) : -ENOMEM;
    int rc = dfd;
    if (dfd >= 0) {
        rc = tm_file_replace_at(dfd, "probe.json", json, strlen(json),
                                r->group_readable ? 0640 : 0600);
        close(dfd);
    }
    if (rc < 0)
        cli_warn("%s/probe.json: %s", r->dir, strerror(-rc));
    free(json);
}

/* Everything run_open started, stopped again when the job cannot be
 * started (a failed pipe or fork): the --serve child too. */
static int run_abort(struct run *r, const char *what)
{
    cli_err("%s: %s", what, strerror(errno));
    run_stop_serve(r);
    run_close_all(r);
    return 1;
}

/* Installs the signal handlers and starts the job.  Signals are installed
 * before the fork so that none is lost; the child puts back what it
 * inherited (SIG_DFL for the forwarded ones, which a background shell may
 * have ignored: forwarding to a job that ignores them would be pointless).
 * An exec failure reaches the parent through a close-on-exec pipe.  -1 with
 * *pid set to go on, else trainmon's exit status. */
static int run_spawn(struct run *r, pid_t *pidp)
{
    if (pipe2(run_wake_fd, O_CLOEXEC | O_NONBLOCK) != 0)
        return run_abort(r, "pipe");
    struct sigaction sa = {.sa_sigaction = run_on_signal, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigemptyset(&sa.sa_mask);
    struct sigaction old_pipe;
    sigaction(SIGPIPE, NULL, &old_pipe);
    sa.sa_flags |= SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int errpipe[2];
    if (pipe2(errpipe, O_CLOEXEC) != 0)
        return run_abort(r, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(errpipe[0]);
        close(errpipe[1]);
        return run_abort(r, "fork");
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        signal(SIGCHLD, SIG_DFL);
        sigaction(SIGPIPE, &old_pipe, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        close(errpipe[0]);
        execvp(r->argv[0], r->argv);
        int e = errno;
        ssize_t wr = write(errpipe[1], &e, sizeof e);
        (void)wr;
        _exit(e == ENOENT ? 127 : 126);
    }
    close(errpipe[1]);
    r->pid = pid;
    run_child_pid = pid;
    int exec_err = 0;
    ssize_t got;
    while ((got = read(errpipe[0], &exec_err, sizeof exec_err)) < 0 && errno == EINTR)
        ;
    close(errpipe[0]);
    if (got == (ssize_t)sizeof exec_err) {
        cli_err("%s: %s", r->argv[0], strerror(exec_err));
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        int code = exec_err == ENOENT ? 127 : 126;
        run_event(r, "job_exec_failed", NULL);
        run_stop_serve(r);
        run_close_all(r);
        run_write_meta(r, true, code, 0);
        return code;
    }

    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (m) {
        fprintf(m, "{\"pid\": %d, \"command\": [", (int)pid);
        run_json_args(m, r, r->argv, r->argc); /* redacted as in meta.json */
        fputs("]}", m);
        fclose(m);
        run_event(r, "job_start", buf);
        free(buf);
    }
    tm_sampler_set_root(r->sampler, pid);
    const char *oerr;
    if ((oerr = tm_sampler_open_error(r->sampler, "ptree")))
        cli_warn("process tree: %s", oerr);
    /* The counters as the job starts: its first recorded sample, one
     * interval later, has rates over that interval, and a job shorter than
     * one interval still gets one sample of rates over its whole life. */
    tm_sampler_prime(r->sampler);
    r->tty = isatty(STDERR_FILENO);
    *pidp = pid;
    return -1;
}

/* Samples every interval on absolute deadlines (no drift) until the job
 * ends, waking early when it does (SIGCHLD).  The job is looked at with
 * WNOWAIT so that the last sample still sees it as a zombie, with its
 * final CPU times, before it is reaped. */
static void run_follow_job(struct run *r, pid_t pid)
{
    int64_t step = (int64_t)(r->interval * 1e9);
    int64_t prev_t = tm_now_mono_ns(), next = prev_t + step;
    siginfo_t si;
    for (;;) {
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
            break;
        run_wait(next);
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid)
            break; /* the last sample below covers the job's end */
        int64_t now = tm_now_mono_ns();
        if (now < next)
            continue; /* woken by a forwarded signal */
        run_sample(r, (double)(now - prev_t) / 1e9, r->tty);
        prev_t = now;
        next += step;
        if (next < tm_now_mono_ns())
            next = tm_now_mono_ns() + step; /* a stall: skip, do not burst */
    }
    tm_sampler_finish(r->sampler); /* the last sample takes the end-of-run readings */
    run_sample(r, (double)(tm_now_mono_ns() - prev_t) / 1e9, false);
}

/* Reaps the job, records its exit, finalizes meta.json and prints the
 * report.  Returns the job's status as a shell gives it (128+N for a
 * signal). */
static int run_finish(struct run *r, pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    run_child_pid = 0;
    int status = 0, sig = 0;
    if (WIFEXITED(st)) {
        status = WEXITSTATUS(st);
    } else if (WIFSIGNALED(st)) {
        sig = WTERMSIG(st);
        status = 128 + sig;
    }
    char json[128];
    if (sig)
        snprintf(json, sizeof json, "{\"status\": %d, \"signal\": %d}", status, sig);
    else
        snprintf(json, sizeof json, "{\"status\": %d, \"signal\": null}", status);
    run_event(r, "job_exit", json);
    run_status_clear(r);
    run_stop_serve(r);
    run_close_all(r);
    int rc = run_write_meta(r, true, status, sig);
    if (rc < 0)
        cli_warn("%s/meta.json: %s", r->dir, strerror(-rc));
    if (sig)
        fprintf(stderr, "trainmon: the job was killed by signal %d (%s)\n", sig, strsignal(sig));
    else
        fprintf(stderr, "trainmon: the job exited with status %d\n", status);

    fflush(NULL);
    static char report_name[] = "report";
    char *rargv[] = {report_name, r->dir, NULL};
    optind = 0;
    int rrc = cmd_report(2, rargv);
    if (rrc != 0)
        cli_warn("the report could not be made (exit %d); the recording is in %s", rrc, r->dir);
    else
        fprintf(stderr, "trainmon: run directory %s\n", r->dir);
    close(run_wake_fd[0]);
    close(run_wake_fd[1]);
    run_wake_fd[0] = run_wake_fd[1] = -1;
    return status;
}

int cmd_run(int argc, char **argv)
{
    /* Large (the targets): not on the stack.  Zero as a static and not
     * memset: a command runs once per process, and clearing 700 KB would
     * make every page of it resident. */
    static struct run run;
    struct run *r = &run;
    r->interval = 1.0;
    r->inject = true;
    r->targc = argc - 1;
    r->targv = argv + 1;
    const char *outdir = NULL;
    const char *paths[RUN_MAX_TARGETS];
    size_t npaths = 0;
    int rc = run_parse(r, argc, argv, &outdir, paths, &npaths);
    if (rc >= 0)
        return rc;
    /* Alert rules are checked before anything starts: a typo never starts
     * the training. */
    rc = cli_alerts_check(&r->alerts);
    if (rc)
        return rc;
    static char devs[RUN_MAX_DEVS][TM_DISK_NAME_MAX];
    size_t ndevs = 0;
    if ((rc = run_resolve(r, paths, &npaths, devs, &ndevs)) >= 0)
        return rc;
    run_probe(r);
    if ((rc = run_open(r, outdir, paths, npaths, devs, ndevs)) >= 0)
        return rc;
    run_probe_write(r);
    pid_t pid = 0;
    if ((rc = run_spawn(r, &pid)) >= 0)
        return rc;
    run_follow_job(r, pid);
    return run_finish(r, pid);
}
