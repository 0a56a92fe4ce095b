/*
 * follow.c - the live-run follower: what the training processes of live
 * runs have written so far, read a little at a time while they write.
 *
 * `trainmon serve --runs` (/metrics) and `trainmon run` (its status line
 * and the run.* alert inputs) both follow run directories while the job
 * runs.  They used to do it each their own way, and counted steps and data
 * wait differently from each other and from the report; now both poll a
 * tm_follow, and every step goes through tm_follow_step, that is through
 * the one step accounting of steps.c (complete steps, capped waits,
 * warm-up left out of the judged values).  The in-process thresholds of
 * the Python extension (on_threshold) keep their window with the same two
 * function, tm_follow_step, and sum it with tm_stepwin_sum.
 *
 * Cost: one readdir and one stat per record file per pass, and for each
 * training process's file only the records appended since the last pass
 * (its reader stays open; tm_reader_refresh picks up what was appended).
 * Memory: per training process its reader (one block buffer, 64 KiB by
 * default) and about 4.5 KiB of state (mostly its step window); a few
 * hundred bytes per other record file; bounded by TM_FOLLOW_MAX_RUNS and
 * TM_FOLLOW_MAX_FILES.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "anatomy.h"
#include "stops.h"
#include "util.h"

#define FOLLOW_NAME_MAX 256

struct follow_file {
    char name[FOLLOW_NAME_MAX];
    dev_t dev;
    ino_t ino;
    bool seen;
    bool classified; /* its header was read: k says whether it is a training file */
    bool at_end;     /* the reader reached the end: refresh before reading on */
    tm_reader *r;    /* training files only, kept open */
    tm_follow_rank *k;
};

struct follow_run {
    char name[FOLLOW_NAME_MAX];
    char host[64];
    double newest_mtime;
    bool seen;
    struct follow_file *files;
    size_t nfiles, capfiles;
    const tm_follow_rank **ranks; /* the training files with a header, in file order */
    size_t nranks, capranks;
    tm_follow_run pub;
};

struct tm_follow {
    char dir[PATH_MAX];
    bool runs_dir;
    bool truncated;
    struct follow_run *runs; /* TM_FOLLOW_MAX_RUNS, or 1 */
    size_t nruns;
};

/* ---------------------------------------------------------- step accounting */

bool tm_follow_step(tm_steptally *t, tm_stepwin *w, const tm_inproc_step *s)
{
    if (!t || !tm_steptally_add(t, s))
        return false;
    /* The tally has just classified the step: it was warm-up when every
     * complete step so far is warm-up.  Warm-up stays out of windows for
     * the same reason it stays out of the tally's fraction. */
    double d, q;
    if (w && t->steps > t->warmup && tm_step_times(s, &d, &q))
        tm_stepwin_add(w, d, q);
    return true;
}

/* ------------------------------------------------------------- one file */

static void follow_file_reset(struct follow_file *ff)
{
    tm_reader_close(&ff->r);
    free(ff->k);
    ff->k = NULL;
    ff->classified = false;
    ff->at_end = false;
}

static void follow_record(tm_follow_rank *k, int64_t mono_to_wall, const tm_record *rec)
{
    k->records++;
    if (rec->t_ns > k->last_t_ns) {
        k->last_t_ns = rec->t_ns;
        k->last_real_ns = tm_sat_add64(rec->t_ns, mono_to_wall);
    }
    switch (rec->type) {
    case TM_REC_STEP: {
        tm_inproc_step s;
        if (tm_inproc_decode_step(rec, &s) < 0)
            return;
        k->step_records++;
        if (!k->first_step_real_ns)
            k->first_step_real_ns = tm_sat_add64(s.start_ns, mono_to_wall);
        tm_follow_step(&k->tally, &k->win, &s);
        break;
    }
    case TM_REC_CAPTURE: {
        tm_inproc_capture c;
        if (tm_inproc_decode_capture(rec, &c) < 0 || isnan(c.allocated))
            return;
        k->allocated = c.allocated;
        k->reserved = c.reserved;
        k->peak_allocated = c.peak_allocated;
        /* Only some captures ask the device (mem_get_info); its size does
         * not change, so the last one known stays. */
        if (!isnan(c.total_device) && c.total_device > 0)
            k->total_device = c.total_device;
        break;
    }
    case TM_REC_ANATOMY: {
        tm_inproc_anatomy a;
        if (tm_inproc_decode_anatomy(rec, &a) < 0)
            return;
        char dev[40];
        tm_anat_device(dev, sizeof dev, &a);
        size_t i = 0;
        while (i < k->nanat && strcmp(k->anat[i].device, dev) != 0)
            i++;
        if (i == k->nanat) {
            if (k->nanat == TM_FOLLOW_ANAT_MAX)
                return;
            k->nanat++;
        }
        tm_anat_parts *p = &k->anat[i];
        tm_strlcpy(p->device, dev, sizeof p->device);
        p->bytes[TM_ANAT_PARAMS] = a.params;
        p->bytes[TM_ANAT_GRADS] = a.grads;
        p->bytes[TM_ANAT_STATE] = a.optim_state;
        p->bytes[TM_ANAT_ACT] = a.activations;
        p->bytes[TM_ANAT_UNKNOWN] = a.unknown;
        break;
    }
    case TM_REC_EVENT: {
        /* a rank learned from the process group after the file was made
         * (and its header classified): the live views' label */
        tm_rec_event_def e;
        int32_t r;
        if (tm_rec_decode_event(rec, &e) < 0)
            return;
        if (k->rank < 0 && (r = tm_rec_event_rank(&e)) >= 0) {
            k->rank = r;
            snprintf(k->label, sizeof k->label, "%d", (int)r);
        }
        /* what stopped the training thread: each stop once */
        double d;
        bool within;
        int s = tm_stop_of(e.name, e.name_len, e.json, e.json_len, &d, &within);
        if (s >= 0 && !within) {
            k->stops[s]++;
            k->stop_s[s] += d;
        }
        break;
    }
    case TM_REC_OOM: {
        k->ooms++;
        tm_inproc_oom o;
        if (tm_inproc_decode_oom(rec, &o) == 0 && !isnan(o.total_device) && o.total_device > 0)
            k->total_device = o.total_device;
        break;
    }
    default:
        break;
    }
}

/* Opens a file the first time it is seen whole: a training process's file
 * keeps its reader and gets a state; any other gives its host and is
 * closed.  A header not yet written is tried again next pass. */
static void follow_classify(struct follow_run *run, struct follow_file *ff, const char *path)
{
    if (tm_reader_open(&ff->r, path) < 0)
        return;
    const tm_rec_header *h = tm_reader_header(ff->r);
    if (!run->host[0])
        snprintf(run->host, sizeof run->host, "%.*s", (int)sizeof h->host, h->host);
    ff->classified = true;
    tm_follow_rank *k = tm_rec_is_training(h) ? calloc(1, sizeof *k) : NULL;
    if (!k) {
        tm_reader_close(&ff->r); /* not training (or no memory: left out) */
        return;
    }
    if (h->rank >= 0)
        snprintf(k->label, sizeof k->label, "%d", (int)h->rank);
    else
        snprintf(k->label, sizeof k->label, "%.*s", (int)sizeof h->role, h->role);
    snprintf(k->file, sizeof k->file, "%s", ff->name);
    snprintf(k->host, sizeof k->host, "%.*s", (int)sizeof h->host, h->host);
    k->rank = h->rank;
    k->ring = h->max_size > 0;
    tm_steptally_init(&k->tally);
    k->allocated = k->reserved = k->peak_allocated = k->total_device = NAN;
    ff->k = k;
}

/* What the reader found damaged so far (it reports every place once and
 * keeps reading past it). */
static void follow_damage(struct follow_file *ff)
{
    const tm_damage *dl;
    size_t nd = tm_reader_damage(ff->r, &dl);
    if (nd && ff->k) {
        ff->k->damage = nd;
        ff->k->damage_offset = dl[nd - 1].offset;
        tm_strlcpy(ff->k->damage_what, dl[nd - 1].what, sizeof ff->k->damage_what);
    }
}

static void follow_read(struct follow_file *ff, size_t max)
{
    if (ff->at_end && tm_reader_refresh(ff->r) < 0)
        return;
    ff->at_end = false;
    const tm_rec_header *h = tm_reader_header(ff->r);
    int64_t mono_to_wall = tm_sat_sub64(h->start_real_ns, h->start_mono_ns);
    tm_record rec;
    for (size_t i = 0; i < max; i++) {
        int rc = tm_reader_next(ff->r, &rec);
        if (rc <= 0) {
            ff->at_end = rc == 0;
            break;
        }
        follow_record(ff->k, mono_to_wall, &rec);
    }
    follow_damage(ff);
}

/* -------------------------------------------------------------- one run */

static bool follow_has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static void follow_run_free(struct follow_run *run)
{
    for (size_t i = 0; i < run->nfiles; i++)
        follow_file_reset(&run->files[i]);
    free(run->files);
    free(run->ranks);
    memset(run, 0, sizeof *run);
}

static double follow_mtime(const struct stat *st)
{
    return (double)st->st_mtim.tv_sec + (double)st->st_mtim.tv_nsec / 1e9;
}

/* The newest change of any *.tmr in dirpath (0: none), without opening
 * them: whether a run not followed yet is live. */
static double follow_newest(const char *dirpath)
{
    DIR *d = opendir(dirpath);
    if (!d)
        return 0;
    double newest = 0;
    char path[PATH_MAX];
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!follow_has_suffix(de->d_name, ".tmr"))
            continue;
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dirpath, de->d_name) < (int)sizeof path &&
            lstat(path, &st) == 0 && S_ISREG(st.st_mode) && follow_mtime(&st) > newest)
            newest = follow_mtime(&st);
    }
    closedir(d);
    return newest;
}

static struct follow_file *follow_file_add(tm_follow *f, struct follow_run *run, const char *name)
{
    if (run->nfiles == run->capfiles) {
        if (run->capfiles >= TM_FOLLOW_MAX_FILES) {
            f->truncated = true;
            return NULL;
        }
        size_t cap = run->capfiles ? run->capfiles * 2 : 8;
        if (cap > TM_FOLLOW_MAX_FILES)
            cap = TM_FOLLOW_MAX_FILES;
        struct follow_file *p = realloc(run->files, cap * sizeof *p);
        if (!p)
            return NULL;
        run->files = p;
        run->capfiles = cap;
    }
    struct follow_file *ff = &run->files[run->nfiles++];
    memset(ff, 0, sizeof *ff);
    snprintf(ff->name, sizeof ff->name, "%s", name);
    return ff;
}

/* Lists one run directory, follows its record files and notes the newest
 * change of any.  -errno when it cannot be listed. */
static int follow_run_scan(tm_follow *f, struct follow_run *run, const char *dirpath, size_t max)
{
    DIR *d = opendir(dirpath);
    if (!d)
        return -errno;
    for (size_t i = 0; i < run->nfiles; i++)
        run->files[i].seen = false;
    run->newest_mtime = 0;
    char path[PATH_MAX];
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!follow_has_suffix(de->d_name, ".tmr") || strlen(de->d_name) >= FOLLOW_NAME_MAX)
            continue;
        if (snprintf(path, sizeof path, "%s/%s", dirpath, de->d_name) >= (int)sizeof path)
            continue;
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (follow_mtime(&st) > run->newest_mtime)
            run->newest_mtime = follow_mtime(&st);
        struct follow_file *ff = NULL;
        for (size_t i = 0; i < run->nfiles && !ff; i++)
            if (strcmp(run->files[i].name, de->d_name) == 0)
                ff = &run->files[i];
        if (ff && (ff->dev != st.st_dev || ff->ino != st.st_ino))
            follow_file_reset(ff); /* a new process under the old name: from nothing */
        if (!ff && !(ff = follow_file_add(f, run, de->d_name)))
            continue;
        ff->dev = st.st_dev;
        ff->ino = st.st_ino;
        ff->seen = true;
        if (!ff->classified)
            follow_classify(run, ff, path);
        if (ff->k && ff->r)
            follow_read(ff, max);
    }
    closedir(d);
    /* Files that went away take their state with them. */
    size_t k = 0;
    for (size_t i = 0; i < run->nfiles; i++) {
        if (run->files[i].seen)
            run->files[k++] = run->files[i];
        else
            follow_file_reset(&run->files[i]);
    }
    run->nfiles = k;
    run->nranks = 0;
    if (run->capranks < run->capfiles) {
        const tm_follow_rank **p = realloc(run->ranks, run->capfiles * sizeof *p);
        if (p) {
            run->ranks = p;
            run->capranks = run->capfiles;
        }
    }
    for (size_t i = 0; i < run->nfiles && run->nranks < run->capranks; i++)
        if (run->files[i].k)
            run->ranks[run->nranks++] = run->files[i].k;
    return 0;
}

static void follow_publish(struct follow_run *run)
{
    run->pub = (tm_follow_run){.name = run->name,
                               .host = run->host,
                               .newest_mtime_s = run->newest_mtime,
                               .nranks = run->nranks};
}

/* ------------------------------------------------------------- the API */

int tm_follow_open(tm_follow **out, const char *dir, bool runs_dir)
{
    if (!out || !dir)
        return tm_seterr(-EINVAL, "tm_follow_open: NULL argument");
    *out = NULL;
    tm_follow *f = calloc(1, sizeof *f);
    if (!f)
        return tm_seterr(-ENOMEM, "follow %s: out of memory", dir);
    if (strlen(dir) >= sizeof f->dir) {
        free(f);
        return tm_seterr(-ENAMETOOLONG, "%s: path too long", dir);
    }
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    f->runs_dir = runs_dir;
    f->runs = calloc(runs_dir ? TM_FOLLOW_MAX_RUNS : 1, sizeof *f->runs);
    if (!f->runs) {
        free(f);
        return tm_seterr(-ENOMEM, "follow %s: out of memory", dir);
    }
    *out = f;
    return 0;
}

/* dir itself is the run, named after its last component. */
static int follow_poll_one(tm_follow *f, size_t max)
{
    struct follow_run *run = &f->runs[0];
    if (f->nruns == 0) {
        memset(run, 0, sizeof *run);
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", f->dir);
        size_t len = strlen(tmp);
        while (len > 1 && tmp[len - 1] == '/')
            tmp[--len] = '\0';
        const char *base = strrchr(tmp, '/');
        snprintf(run->name, sizeof run->name, "%s", base && base[1] ? base + 1 : tmp);
        f->nruns = 1;
    }
    int rc = follow_run_scan(f, run, f->dir, max);
    follow_publish(run);
    return rc < 0 ? tm_seterr(rc, "%s: %s", f->dir, strerror(-rc)) : 0;
}

static bool follow_live(double newest, double now)
{
    return newest > 0 && now - newest <= TM_FOLLOW_LIVE_S;
}

/* Each subdirectory of dir is a run, followed while it is live. */
static int follow_poll_runs(tm_follow *f, size_t max)
{
    DIR *d = opendir(f->dir);
    if (!d)
        return tm_seterr(-errno, "%s: %s", f->dir, strerror(errno));
    for (size_t i = 0; i < f->nruns; i++)
        f->runs[i].seen = false;
    double now = (double)tm_now_real_ns() / 1e9;
    char path[PATH_MAX];
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || strlen(de->d_name) >= FOLLOW_NAME_MAX)
            continue;
        if (snprintf(path, sizeof path, "%s/%s", f->dir, de->d_name) >= (int)sizeof path)
            continue;
        /* lstat: a run is a real directory inside the runs directory; a
         * symlink planted there must not lead a root exporter elsewhere. */
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        struct follow_run *run = NULL;
        for (size_t i = 0; i < f->nruns && !run; i++)
            if (strcmp(f->runs[i].name, de->d_name) == 0)
                run = &f->runs[i];
        if (!run) {
            /* Ended runs are not opened at all: only their mtimes are read. */
            if (!follow_live(follow_newest(path), now))
                continue;
            if (f->nruns >= TM_FOLLOW_MAX_RUNS) {
                f->truncated = true;
                continue;
            }
            run = &f->runs[f->nruns++];
            memset(run, 0, sizeof *run);
            snprintf(run->name, sizeof run->name, "%s", de->d_name);
        }
        if (follow_run_scan(f, run, path, max) == 0)
            run->seen = follow_live(run->newest_mtime, now);
    }
    closedir(d);
    /* Runs that ended (or went away) are closed and forgotten. */
    size_t k = 0;
    for (size_t i = 0; i < f->nruns; i++) {
        if (f->runs[i].seen)
            f->runs[k++] = f->runs[i];
        else
            follow_run_free(&f->runs[i]);
    }
    f->nruns = k;
    for (size_t i = 0; i < f->nruns; i++)
        follow_publish(&f->runs[i]);
    return 0;
}

int tm_follow_poll(tm_follow *f, size_t max_records_per_file)
{
    if (!f)
        return tm_seterr(-EINVAL, "tm_follow_poll: NULL argument");
    return f->runs_dir ? follow_poll_runs(f, max_records_per_file)
                       : follow_poll_one(f, max_records_per_file);
}

size_t tm_follow_nruns(const tm_follow *f)
{
    return f ? f->nruns : 0;
}

const tm_follow_run *tm_follow_run_at(const tm_follow *f, size_t i)
{
    return f && i < f->nruns ? &f->runs[i].pub : NULL;
}

const tm_follow_rank *tm_follow_rank_at(const tm_follow *f, size_t run, size_t j)
{
    return f && run < f->nruns && j < f->runs[run].nranks ? f->runs[run].ranks[j] : NULL;
}

bool tm_follow_truncated(const tm_follow *f)
{
    return f && f->truncated;
}

void tm_follow_close(tm_follow **f)
{
    if (!f || !*f)
        return;
    for (size_t i = 0; i < (*f)->nruns; i++)
        follow_run_free(&(*f)->runs[i]);
    free((*f)->runs);
    free(*f);
    *f = NULL;
}
