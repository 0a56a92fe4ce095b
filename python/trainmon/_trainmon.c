/*
 * _trainmon.c - the in-process recorder of trainmon, a CPython extension.
 *
 * Everything that runs per step, per capture or per batch is here, in C:
 * clocks, reading torch's allocator statistics out of the nested dict of
 * one torch._C._cuda_memoryStats(dev) call, threshold checks, and appends
 * to the process's record file through libtrainmon (a memory copy into a
 * shared mapping, no system call).  trainmon/__init__.py only installs the
 * hooks that call these functions.
 *
 * Nothing here may raise into the training job: the functions the hooks
 * call return normally whatever happens, and a failure is said once on
 * stderr ("trainmon: ...") and then kept quiet.  All state is guarded by
 * the GIL: every entry point is called with it held.
 *
 * Processes: the file is opened by the training process.  A DataLoader
 * worker forked from it inherits the writer, whose appends libtrainmon
 * refuses in the child (-ECHILD), so a worker can never write into the
 * parent's file; workers open their own worker-r<rank>-<pid>.tmr lazily.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h> /* PyFrame_GetBack: Python.h has it from 3.11 */
#endif

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fastclock.h"
#include "trainmon.h"

#if PY_VERSION_HEX < 0x03090000
#define PyObject_CallNoArgs(f) PyObject_CallObject((f), NULL)
#define PyObject_CallOneArg(f, a) PyObject_CallFunctionObjArgs((f), (a), NULL)
#endif

#define GIB (1024.0 * 1024.0 * 1024.0)
#define RSS_REFRESH_NS 10000000LL /* host RSS is re-read at most every 10 ms */
#define WINDOW_MAX TM_STEPWIN_MAX /* steps kept for threshold windows */
#define PHASE_MAX 32
#define THRESH_MAX 32

enum {
    F_ALLOC,
    F_RESERVED,
    F_PEAK,
    F_ACTIVE,
    F_INACTIVE,
    F_REQUESTED,
    F_FREE,
    F_TOTAL,
    F_RETRIES,
    F_OOMS,
    F_RSS,
    F_N
};

/* ------------------------------------------------------------ reporting */

/* Each kind of failure is said once per process. */
enum { R_OPEN, R_APPEND, R_FULL, R_STATS, R_WORKER, R_MEMINFO, R_INTERNAL, R_N };
static unsigned char reported[R_N];

static void report_once(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_once(int kind, const char *fmt, ...)
{
    if (reported[kind])
        return;
    reported[kind] = 1;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb); /* writing must not clobber (or raise) an error */
    PySys_WriteStderr("trainmon: %s\n", msg);
    PyErr_Restore(et, ev, tb);
}

/* Clears a Python error raised inside trainmon and says it once. */
static void swallow(int kind, const char *what)
{
    if (!PyErr_Occurred())
        return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    const char *s = "?";
    PyObject *str = ev ? PyObject_Str(ev) : NULL;
    if (str)
        s = PyUnicode_AsUTF8(str);
    PyErr_Clear();
    report_once(kind, "%s failed (%s); going on without it", what, s ? s : "?");
    Py_XDECREF(str);
    Py_XDECREF(et);
    Py_XDECREF(ev);
    Py_XDECREF(tb);
}

/* ---------------------------------------------------------------- state */

static tm_rec *g_rec;   /* this process's record file, or NULL */
static pid_t g_rec_pid; /* who opened it */
static char g_run_dir[4096];
static int g_rank = -1;

static tm_rec *g_wrec; /* a DataLoader worker's own file */
static pid_t g_wrec_pid;
static uint64_t g_wbatch;
static unsigned long long g_max_size; /* open()'s max_size (--max-size): workers' too */

/* torch callables, bound by __init__.py (NULL: no torch / no CUDA build) */
static PyObject *g_memstats; /* torch._C._cuda_memoryStats */
static PyObject *g_is_init;  /* torch.cuda.is_initialized */
static PyObject *g_meminfo;  /* torch.cuda.mem_get_info */
static PyObject *g_curdev;   /* torch.cuda.current_device */
static int g_cuda_ready;     /* is_initialized() said True */
static int g_cuda_news;      /* ... and the glue has not been told yet */

/* host RSS, cached */
static int g_statm_fd = -1;
static pid_t g_statm_pid;
static int64_t g_rss_t;
static double g_rss = NAN;
static long g_page;

/* steps */
static unsigned long g_thread; /* the training thread (train_thread below) */
static int g_thread_trains;    /* g_thread ran a backward pass or an optimizer step */
static int g_depth;
static uint64_t g_steps; /* steps begun (the step model below) */
static int64_t g_in_t;
static uintptr_t g_in_iter; /* the iterator of the __next__ open (held_stop) */
/* The DataLoader iterators made last (hook_iter), in a run of iter() calls
 * with no fetch between (zip(a, b) makes two): a loop's first __next__ on
 * one of them counts its wait from the first call's start (g_iter_t0), and
 * the run is over (next_enter).  g_iter_t1: the last call's end, or the
 * end of an old iterator's shutdown after it (py_loader_gone). */
#define ITER_RUN_MAX 4
static uintptr_t g_iter_its[ITER_RUN_MAX];
static int g_iter_n;
static unsigned long g_iter_th;
static int64_t g_iter_t0, g_iter_t1;
/* ...when it comes this soon after: `for x in loader`, `it = iter(loader);
 * next(it)`, accelerate's and Lightning's fetchers (a few calls between);
 * an iterator made earlier and used later (at set-up) is not the step's
 * wait. */
#define ITER_JOIN_NS 20000000LL

/* Whether the run of iter() calls on this thread is still open at t */
static int iter_run_open(unsigned long th, int64_t t)
{
    return g_iter_n > 0 && g_iter_th == th && t - g_iter_t1 <= ITER_JOIN_NS;
}
/* The iterators whose batches a backward pass took, the latest first (a
 * step fed by up to this many loaders): an iterator that ends while none
 * of its batches ever trained is an eval loop's (held_stop). */
#define TRAINED_MAX 4
static uintptr_t g_trained[TRAINED_MAX];

static void trained_note_slow(uintptr_t it)
{
    int i = 1;
    while (i < TRAINED_MAX - 1 && g_trained[i] != it)
        i++;
    memmove(g_trained + 1, g_trained, (size_t)i * sizeof *g_trained);
    g_trained[0] = it;
}

/* ...at every backward pass, where it is the one noted last */
static inline void trained_note(uintptr_t it)
{
    if (__builtin_expect(g_trained[0] != it, 0) && it)
        trained_note_slow(it);
}

static int trained(uintptr_t it)
{
    for (int i = 0; i < TRAINED_MAX; i++)
        if (g_trained[i] == it)
            return 1;
    return 0;
}

/* ...at every fetch, where it is the one that trained last */
static inline int is_trained(uintptr_t it)
{
    return __builtin_expect(g_trained[0] == it, 1) || trained(it);
}

static void trained_forget(uintptr_t it)
{
    for (int i = 0; i < TRAINED_MAX; i++)
        if (g_trained[i] == it) {
            memmove(g_trained + i, g_trained + i + 1,
                    (size_t)(TRAINED_MAX - 1 - i) * sizeof *g_trained);
            g_trained[TRAINED_MAX - 1] = 0;
            return;
        }
}

/* The closed steps, through the one step accounting (steps.c, follow.c):
 * thresholds and stats() see the numbers the report and /metrics see. */
static tm_steptally g_tally;
static tm_stepwin g_win;

static double g_last[F_N]; /* the latest allocator sample */
static double g_total_dev = NAN;

/* phases */
static PyObject *g_phase[PHASE_MAX];
static int g_nphase;

/* optimizer */
static int64_t g_opt_t0;

/* OOM */
static uint32_t g_ooms;

/* thresholds */
enum {
    M_DATA_WAIT_FRACTION,
    M_DATA_WAIT_S,
    M_STEP_TIME_S,
    M_ALLOC_FRACTION,
    M_RESERVED_FRACTION,
    M_ALLOCATED_BYTES,
    M_RESERVED_BYTES,
    M_RETRIES,
    M_HOST_RSS
};
static const struct {
    const char *name;
    int metric;
} metric_names[] = {
    {"data_wait_fraction", M_DATA_WAIT_FRACTION},
    {"data_wait_share", M_DATA_WAIT_FRACTION},
    {"data_wait_seconds", M_DATA_WAIT_S},
    {"step_time_seconds", M_STEP_TIME_S},
    {"gpu_memory_allocated_fraction", M_ALLOC_FRACTION},
    {"gpu_mem_allocated_fraction", M_ALLOC_FRACTION},
    {"allocated_share", M_ALLOC_FRACTION},
    {"gpu_memory_reserved_fraction", M_RESERVED_FRACTION},
    {"gpu_mem_reserved_fraction", M_RESERVED_FRACTION},
    {"reserved_share", M_RESERVED_FRACTION},
    {"gpu_memory_allocated_bytes", M_ALLOCATED_BYTES},
    {"gpu_memory_reserved_bytes", M_RESERVED_BYTES},
    {"gpu_memory_alloc_retries_total", M_RETRIES},
    {"alloc_retries", M_RETRIES},
    {"host_rss_bytes", M_HOST_RSS},
};

typedef struct thresh {
    int metric;
    double above;
    int window;
    int armed;   /* the value was under (or never seen): a crossing fires */
    int pending; /* fired; the callback has not run yet */
    double value;
    uint64_t step;
} thresh;
static thresh g_th[THRESH_MAX];
static int g_nth;
static int g_need_rss; /* a threshold on host RSS exists */

/* --------------------------------------------------------------- helpers */

/* The agent's clock: CLOCK_MONOTONIC, read from the CPU's counter between
 * anchors where the kernel keeps that clock from it (src/lib/fastclock.h:
 * 12 ns a read, not 27-33), anchored at the end of a training step 10 ms
 * or more after the last anchor (step_end_ns). */
static tm_fastclock g_clk;

static int64_t now_ns(void)
{
    return tm_fastclock_now(&g_clk);
}

/* the clock at a step's end, an anchor when the last is 10 ms old */
static int64_t step_end_ns(void)
{
    return tm_fastclock_step_end(&g_clk);
}

static double host_rss(int64_t t, int force)
{
    if (!force && t - g_rss_t < RSS_REFRESH_NS && g_statm_fd >= 0)
        return g_rss;
    pid_t me = getpid();
    if (g_statm_fd < 0 || g_statm_pid != me) {
        /* /proc/self resolves at open: a forked child must reopen. */
        if (g_statm_fd >= 0)
            close(g_statm_fd);
        g_statm_fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
        g_statm_pid = me;
        if (g_page <= 0)
            g_page = sysconf(_SC_PAGESIZE);
    }
    g_rss_t = t;
    g_rss = NAN;
    if (g_statm_fd < 0)
        return g_rss;
    char buf[128];
    ssize_t n = pread(g_statm_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return g_rss;
    buf[n] = '\0';
    unsigned long long size, res;
    if (sscanf(buf, "%llu %llu", &size, &res) == 2)
        g_rss = (double)res * (double)g_page;
    return g_rss;
}

static int lazy_open(void);

/* Appends a record to the process's file.  -ECHILD (a forked worker) is
 * the normal case there and said nowhere; a full disk is said once. */
static void rec_put(uint16_t type, int64_t t, const void *p, int len)
{
    if (len < 0)
        return;
    if (!g_rec) {
        lazy_open(); /* the first record makes the file */
        if (!g_rec)
            return;
    }
    int rc = tm_rec_append(g_rec, type, t, p, (uint32_t)len);
    if (rc == -ENOSPC)
        report_once(R_FULL, "%s: disk full: recording stopped, the job goes on", g_run_dir);
    else if (rc && rc != -ECHILD)
        report_once(R_APPEND, "recording failed: %s", tm_last_error());
}

static double dict_num(PyObject *d, const char *key)
{
    PyObject *v = d ? PyDict_GetItemString(d, key) : NULL; /* borrowed, no error set */
    if (!v)
        return NAN;
    if (PyLong_Check(v)) {
        double x = PyLong_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return NAN;
        }
        return x;
    }
    if (PyFloat_Check(v))
        return PyFloat_AS_DOUBLE(v);
    return NAN;
}

/* d[family]["all"][stat] */
static double family_num(PyObject *d, const char *family, const char *stat)
{
    PyObject *f = PyDict_GetItemString(d, family);
    if (!f || !PyDict_Check(f))
        return NAN;
    PyObject *all = PyDict_GetItemString(f, "all");
    if (!all || !PyDict_Check(all))
        return NAN;
    return dict_num(all, stat);
}

/* Whether CUDA has been initialised by the job (trainmon never does it). */
static int cuda_ready(void)
{
    if (g_cuda_ready)
        return 1;
    if (!g_memstats || !g_is_init)
        return 0;
    PyObject *r = PyObject_CallNoArgs(g_is_init);
    if (!r) {
        swallow(R_STATS, "torch.cuda.is_initialized()");
        return 0;
    }
    g_cuda_ready = PyObject_IsTrue(r) == 1;
    g_cuda_news = g_cuda_ready;
    Py_DECREF(r);
    return g_cuda_ready;
}

static int current_device(int dev)
{
    if (dev >= 0 || !g_curdev)
        return dev;
    PyObject *r = PyObject_CallNoArgs(g_curdev);
    if (!r) {
        swallow(R_STATS, "torch.cuda.current_device()");
        return -1;
    }
    long d = PyLong_AsLong(r);
    Py_DECREF(r);
    if (d == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return (int)d;
}

/* Fills f[] with the allocator's numbers for dev (NAN when unavailable);
 * with_free also asks the driver for free and total memory.  Returns the
 * device used, -1 if none. */
static int read_alloc(int dev, int with_free, double *f)
{
    for (int i = 0; i < F_N; i++)
        f[i] = NAN;
    if (!cuda_ready())
        return -1;
    dev = current_device(dev);
    if (dev < 0)
        return -1;
    PyObject *arg = PyLong_FromLong(dev);
    PyObject *d = arg ? PyObject_CallOneArg(g_memstats, arg) : NULL;
    if (!d) {
        Py_XDECREF(arg);
        swallow(R_STATS, "torch._C._cuda_memoryStats()");
        return dev;
    }
    if (PyDict_Check(d) && PyDict_Size(d) > 0) {
        f[F_ALLOC] = family_num(d, "allocated_bytes", "current");
        f[F_PEAK] = family_num(d, "allocated_bytes", "peak");
        f[F_RESERVED] = family_num(d, "reserved_bytes", "current");
        f[F_ACTIVE] = family_num(d, "active_bytes", "current");
        f[F_INACTIVE] = family_num(d, "inactive_split_bytes", "current");
        f[F_REQUESTED] = family_num(d, "requested_bytes", "current");
        f[F_RETRIES] = dict_num(d, "num_alloc_retries");
        f[F_OOMS] = dict_num(d, "num_ooms");
    }
    Py_DECREF(d);
    if (with_free && g_meminfo) {
        PyObject *r = PyObject_CallOneArg(g_meminfo, arg);
        if (r && PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2) {
            f[F_FREE] = PyFloat_AsDouble(PyTuple_GET_ITEM(r, 0));
            f[F_TOTAL] = PyFloat_AsDouble(PyTuple_GET_ITEM(r, 1));
            if (PyErr_Occurred()) {
                PyErr_Clear();
                f[F_FREE] = f[F_TOTAL] = NAN;
            }
            if (!isnan(f[F_TOTAL]))
                g_total_dev = f[F_TOTAL];
        }
        Py_XDECREF(r);
        swallow(R_MEMINFO, "torch.cuda.mem_get_info()");
    }
    if (isnan(f[F_TOTAL]))
        f[F_TOTAL] = g_total_dev;
    Py_DECREF(arg);
    return dev;
}

/* The capture record of an allocator sample f[] (the Monitor keeps these
 * in its history too). */
static tm_inproc_capture capture_of(uint32_t source, int dev, const double *f, const char *tag,
                                    Py_ssize_t tlen)
{
    tm_inproc_capture c = {
        .source = source,
        .device = dev,
        .step = g_steps,
        .allocated = f[F_ALLOC],
        .reserved = f[F_RESERVED],
        .peak_allocated = f[F_PEAK],
        .active = f[F_ACTIVE],
        .inactive_split = f[F_INACTIVE],
        .requested = f[F_REQUESTED],
        .free_device = f[F_FREE],
        .total_device = f[F_TOTAL],
        .num_alloc_retries = f[F_RETRIES],
        .num_ooms = f[F_OOMS],
        .host_rss = f[F_RSS],
        .tag = tag,
        .tag_len = (uint16_t)(tlen > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : tlen),
    };
    return c;
}

static void put_capture(uint32_t source, int dev, const double *f, const char *tag, Py_ssize_t tlen,
                        int64_t t)
{
    char buf[256 + TM_INPROC_NAME_MAX];
    tm_inproc_capture c = capture_of(source, dev, f, tag, tlen);
    rec_put(TM_REC_CAPTURE, t, buf, tm_inproc_encode_capture(&c, buf, sizeof buf));
}

/* An automatic sample (step boundary, phase change): only once the job
 * has initialised CUDA, and without the driver call for free memory. */
static void auto_sample(uint32_t source, const char *tag, Py_ssize_t tlen, int64_t t)
{
    if (!g_memstats || !cuda_ready())
        return;
    double f[F_N];
    int dev = read_alloc(-1, 0, f);
    f[F_RSS] = g_need_rss ? host_rss(t, 0) : NAN;
    memcpy(g_last, f, sizeof g_last);
    put_capture(source, dev, f, tag, tlen, t);
}

static const char *utf8(PyObject *s, Py_ssize_t *len)
{
    const char *p = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, len) : NULL;
    if (!p) {
        PyErr_Clear();
        *len = 1;
        return "?";
    }
    return p;
}

/* ------------------------------------------------------------ recorder */

/* The record file is created lazily, by the first record of the process
 * (a step, a capture, an OOM, an event): a process that imports trainmon
 * and records nothing (the torchrun agent, a helper script spawned with
 * TRAINMON_ATTACH=1) leaves no file behind.  py_open keeps what opening
 * needs; lazy_open opens, once per process. */
static struct {
    pid_t pid; /* the process py_open was called in; 0: none */
    int tried;
    char path[4096], role[32];
    int rank;
    unsigned long long max_size;
    char *meta;
} g_lazy;

static int lazy_open(void)
{
    /* The hot path (every record) makes no system call: once a writer is
     * open it is used, also in a forked child, where the record writer's
     * atfork handler makes every append a harmless -ECHILD; and a failed or
     * foreign open is tried once. */
    if (g_rec)
        return 1;
    if (g_lazy.tried)
        return 0;
    g_lazy.tried = 1;
    pid_t me = getpid();
    if (g_lazy.pid != me)
        return 0; /* a forked child of a process that never recorded */
    char path[4200], role[64];
    snprintf(path, sizeof path, "%s", g_lazy.path);
    snprintf(role, sizeof role, "%s", g_lazy.role);
    if (access(path, F_OK) == 0) {
        /* Another process of this run took the name since (a spawned
         * worker, a second script): never truncate it. */
        size_t n = strlen(g_lazy.path);
        if (n > 4 && strcmp(g_lazy.path + n - 4, ".tmr") == 0)
            n -= 4;
        snprintf(path, sizeof path, "%.*s-pid%d.tmr", (int)n, g_lazy.path, (int)me);
        snprintf(role, sizeof role, "%.20s-pid%d", g_lazy.role, (int)me);
    }
    tm_rec_opts o = {.role = role, .rank = g_lazy.rank, .max_size = g_lazy.max_size};
    tm_rec *w = NULL;
    if (tm_rec_open(&w, path, &o)) {
        report_once(R_OPEN, "cannot record (%s); the job goes on without a record file",
                    tm_last_error());
        return 0;
    }
    /* A writer inherited from a parent stays mapped in it: leave it. */
    g_rec = w;
    g_rec_pid = me;
    if (g_lazy.meta)
        tm_rec_event(g_rec, 0, "inproc.start", g_lazy.meta);
    return 1;
}

static PyObject *py_open(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path, *role, *run_dir, *meta;
    int rank;
    unsigned long long max_size = 0;
    if (!PyArg_ParseTuple(args, "ssisz|K", &path, &run_dir, &rank, &role, &meta, &max_size))
        return NULL;
    if ((g_rec && g_rec_pid == getpid()) || g_lazy.pid == getpid())
        Py_RETURN_TRUE;
    /* The run directory: only its last component is made (0700); an
     * existing one must be this user's, or another user could read the
     * recording or swap files in it.  (A directory others may write is
     * accepted: a sticky tmpfs root, a shared scratch; the record file is
     * still created O_EXCL|O_NOFOLLOW there by tm_rec_open.) */
    int dfd = tm_dir_make_private(run_dir, 0700, TM_SAFE_WRITABLE_OK, NULL);
    if (dfd < 0) {
        report_once(R_OPEN, "cannot record (%s); the job goes on without a record file",
                    tm_last_error());
        Py_RETURN_FALSE;
    }
    close(dfd);
    if (strlen(path) >= sizeof g_lazy.path) {
        report_once(R_OPEN, "cannot record (path too long); the job goes on without a record file");
        Py_RETURN_FALSE;
    }
    free(g_lazy.meta);
    g_lazy.meta = meta ? strdup(meta) : NULL;
    snprintf(g_lazy.path, sizeof g_lazy.path, "%s", path);
    snprintf(g_lazy.role, sizeof g_lazy.role, "%s", role);
    g_lazy.rank = rank;
    g_lazy.max_size = max_size;
    g_lazy.tried = 0;
    g_lazy.pid = getpid();
    if (g_rec && g_rec_pid != g_lazy.pid)
        g_rec = NULL; /* a forked child's own file: the parent's writer stays mapped, unused */
    g_rank = rank;
    g_max_size = max_size;
    snprintf(g_run_dir, sizeof g_run_dir, "%s", run_dir);
    Py_RETURN_TRUE;
}

/* set_rank(rank, world_size, path, role, meta_json) -> True when this
 * process's record file is yet to be made (it will be made at path, role
 * and rank as given, its inproc.start the new meta), False when it is
 * made (its header's rank is set in place, and a process.rank event says
 * it to the live readers): the
 * rank learned from the process group (the glue's _learn_rank).  Forked
 * DataLoader workers record it from now on (g_rank). */
static PyObject *py_set_rank(PyObject *self, PyObject *args)
{
    (void)self;
    int rank, world;
    const char *path, *role, *meta;
    if (!PyArg_ParseTuple(args, "iissz", &rank, &world, &path, &role, &meta))
        return NULL;
    pid_t me = getpid();
    if (rank < 0 || g_lazy.pid != me)
        Py_RETURN_FALSE;
    g_rank = rank;
    if (!(g_rec && g_rec_pid == me) && !g_lazy.tried && strlen(path) < sizeof g_lazy.path) {
        snprintf(g_lazy.path, sizeof g_lazy.path, "%s", path);
        snprintf(g_lazy.role, sizeof g_lazy.role, "%s", role);
        g_lazy.rank = rank;
        free(g_lazy.meta);
        g_lazy.meta = meta ? strdup(meta) : NULL;
        Py_RETURN_TRUE;
    }
    if (g_rec && g_rec_pid == me) {
        /* the header's rank in place (a ring keeps its header while it
         * overwrites old events), and the event for readers that classified
         * the file already (follow.c) or a header that could not be written */
        (void)tm_rec_set_rank(g_rec, rank);
        char js[64];
        snprintf(js, sizeof js, "{\"rank\":%d,\"world_size\":%d}", rank, world);
        tm_rec_event(g_rec, 0, "process.rank", js);
    }
    Py_RETURN_FALSE;
}

/* file_open(): this process has its record file open now (not pending). */
static PyObject *py_file_open(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return PyBool_FromLong(g_rec && g_rec_pid == getpid());
}

static PyObject *py_recording(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    if (g_lazy.pid == getpid() && !g_lazy.tried)
        Py_RETURN_TRUE; /* the file is made by the first record */
    return PyBool_FromLong(g_rec && g_rec_pid == getpid() && !tm_rec_full(g_rec));
}

static PyObject *py_event(PyObject *self, PyObject *args)
{
    (void)self;
    const char *name, *json;
    if (!PyArg_ParseTuple(args, "sz", &name, &json)) {
        swallow(R_INTERNAL, "event");
        Py_RETURN_NONE;
    }
    lazy_open();
    if (g_rec) {
        int rc = tm_rec_event(g_rec, 0, name, json);
        if (rc == -ENOSPC)
            report_once(R_FULL, "%s: disk full: recording stopped, the job goes on", g_run_dir);
    }
    Py_RETURN_NONE;
}

static PyObject *py_bind_torch(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *ms, *ii, *mi, *cd;
    if (!PyArg_ParseTuple(args, "OOOO", &ms, &ii, &mi, &cd))
        return NULL;
    PyObject **slots[] = {&g_memstats, &g_is_init, &g_meminfo, &g_curdev};
    PyObject *vals[] = {ms, ii, mi, cd};
    for (size_t i = 0; i < 4; i++) {
        Py_CLEAR(*slots[i]);
        if (vals[i] != Py_None) {
            Py_INCREF(vals[i]);
            *slots[i] = vals[i];
        }
    }
    g_cuda_ready = 0;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------ steps, thresholds */

/* Over the last `window` judged steps (warm-up left out, waits capped),
 * as the run.* alert inputs of `trainmon run` are; NAN before the first
 * step after warm-up. */
static double window_value(int metric, int window)
{
    double dur, wait;
    size_t n = tm_stepwin_sum(&g_win, (size_t)window, &dur, &wait);
    if (n == 0)
        return NAN;
    switch (metric) {
    case M_DATA_WAIT_FRACTION:
        return dur > 0 ? wait / dur : NAN;
    case M_DATA_WAIT_S:
        return wait / (double)n;
    case M_STEP_TIME_S:
        return dur / (double)n;
    default:
        return NAN;
    }
}

static double metric_value(const thresh *th, int64_t t)
{
    switch (th->metric) {
    case M_DATA_WAIT_FRACTION:
    case M_DATA_WAIT_S:
    case M_STEP_TIME_S:
        return window_value(th->metric, th->window);
    case M_ALLOC_FRACTION:
        return g_last[F_ALLOC] / g_total_dev;
    case M_RESERVED_FRACTION:
        return g_last[F_RESERVED] / g_total_dev;
    case M_ALLOCATED_BYTES:
        return g_last[F_ALLOC];
    case M_RESERVED_BYTES:
        return g_last[F_RESERVED];
    case M_RETRIES:
        return g_last[F_RETRIES];
    case M_HOST_RSS:
        return host_rss(t, 0);
    }
    return NAN;
}

/* Checks every threshold; a crossing from under to above marks it pending
 * (its callback runs at this step boundary), and it is re-armed only once
 * the value is back at or under the line.  Returns how many are pending. */
static int check_thresholds(int64_t t)
{
    int pending = 0;
    for (int i = 0; i < g_nth; i++) {
        thresh *th = &g_th[i];
        double v = metric_value(th, t);
        if (isnan(v))
            continue;
        if (th->armed && v > th->above) {
            th->armed = 0;
            th->pending = 1;
            th->value = v;
            th->step = g_steps;
            char json[256];
            snprintf(json, sizeof json,
                     "{\"index\":%d,\"value\":%.17g,\"above\":%.17g,\"step\":%llu}", i, v,
                     th->above, (unsigned long long)g_steps);
            if (lazy_open())
                tm_rec_event(g_rec, t, "threshold", json);
        } else if (!th->armed && v <= th->above) {
            th->armed = 1;
        }
        pending += th->pending;
    }
    return pending;
}

/* ------------------------------------------------------- the step model
 *
 * One step model (docs/DIAGNOSIS.md "The step model"), seen here where the
 * boundaries are, so that every consumer reads the same TM_REC_STEP
 * records.  A step is ended by the strongest boundary the loop has:
 *
 *   optimizer  the post-hook of optimizer.step() (of the lead optimizer:
 *              the first to step, or one that stepped twice in a row;
 *              a GAN's two optimizers make one step per iteration);
 *   backward   the return of torch.autograd.backward (Tensor.backward
 *              calls it) when the job never steps a torch.optim optimizer
 *              (manual SGD);
 *   loader     the entry into the next DataLoader __next__ (no backward
 *              seen yet: today's steps of inference-like loops).
 *
 * An optimizer step closes one open step per boundary kind (accumulated
 * from the previous boundary of that kind): micro_batches (backward passes
 * in it), batches (DataLoader batches fetched for training) and their data
 * wait.  Until the first optimizer step the backward steps are held back
 * (up to PEND_MAX): gradient accumulation shows its first optimizer step
 * only after its micro-batches, which must not be counted as steps.
 *
 * Eval: a batch fetched with grad disabled, or (once a backward pass was
 * seen) one that no backward pass followed before the next fetch, is an
 * eval batch, written as its own step record with phase eval and never
 * added to a training step; a training step that had done nothing before
 * an eval run starts where the run ended.
 *
 * No DataLoader: a step with no batch gets prep_ns, the host time from its
 * start to its first module forward (the batch preparation of a loop that
 * slices its batches itself), as its data wait, and prep_cpu_ns, the
 * training thread's CPU time in it (CPU-bound preparation vs waiting on
 * I/O).  The first forward is caught by the truth test of torch's global
 * forward pre-hook dict, which every hook-free module call makes: the glue
 * puts an ArmedHooks (an OrderedDict whose truth test is ours, below) in
 * its place, and arming at the boundary is a flag; module calls keep
 * torch's hook-free fast path.  Where the job had a global forward
 * pre-hook of its own before attach(), a hook of ours is put into that
 * dict at the boundary and taken out by its first call instead.
 */
#define PEND_MAX 64

typedef struct acc {
    int64_t start; /* 0: nothing begun since the last boundary of this kind */
    int64_t wait;
    int32_t batches, micro;
    int64_t bwd;    /* time in backward passes */
    int64_t coll;   /* time in blocking collectives */
    int64_t wcpu;   /* training-thread CPU in multi-process loader waits */
    int32_t wcpu_n; /* batches with wcpu measured */
    uint64_t off0;  /* g_off_batches when the step began */
    /* no DataLoader, with gradient accumulation: the preparation of the
     * micro-batches after the first (from a backward pass's end to the
     * next forward), their count, and the CPU time of those read */
    int64_t prep_more, prep_more_cpu;
    int32_t prep_more_n, prep_more_cpu_n;
    /* no DataLoader: the loop's work after a forward (gap: from the first
     * forward's return to the backward or the next module call, on the
     * steps measured) and after the last backward (tail: to the optimizer
     * step), their counts, and the CPU time of those read */
    int64_t gap, gap_cpu, tail, tail_cpu;
    int32_t gap_n, gap_cpu_n, tail_n, tail_cpu_n;
    int32_t newit; /* batches from an iterator made for them (TM_STEP_NEW_ITER) */
} acc;

/* zero_grad() in a training loop without a DataLoader: the glue's
 * installer of the zero_grad Hooks (HOOK_ZGRAD), called once a process at
 * the end of its first step without a DataLoader batch (close_acc). */
static PyObject *g_zg_reg;
static int g_zg_tried;
/* The optimizer's and the model's zero_grad() on the training thread, all
 * their time so far: the loop calls it between a step and the next forward
 * (nanoGPT after optimizer.step(), the tutorials before the forward),
 * 0.2 ms a call on torch 2.13's CPU even with set_to_none, and it is the
 * optimizer's work, not the batch's: taken out of the preparation spans
 * (its CPU time with it: it runs on the CPU).  With it the loop's waits
 * for the device: torch.cuda.synchronize() (build-nanogpt calls it after
 * every optimizer step, to time the step) and a stream's or an event's
 * synchronize, which return only once the GPU has run every kernel queued
 * before them: the step's forward, backward and optimizer kernels, that
 * the host ran ahead of.
 * That wait is compute, not the next batch's preparation (CUDA's default
 * sync spins on a CPU; a blocking one takes no CPU: g_hk_cpu_ns). */
static int64_t g_hk_ns;
static int g_hk_depth; /* in such a call (the outermost counts: hook_zgrad) */
static int64_t g_arm_hk, g_marm_hk, g_fwd_hk;
/* and their thread CPU time, read only in a span whose CPU is sampled: a
 * blocking wait (cudaDeviceScheduleBlockingSync, MPS) takes none, and its
 * wall time taken off the span's CPU time read CPU-bound batch work as
 * waiting */
static int64_t g_hk_cpu_ns;
static int64_t g_arm_hkc, g_marm_hkc, g_fwd_hkc;
/* optimizer steps begun (any optimizer): a micro-batch span that one began
 * in (a GAN's second optimizer, LBFGS's closure) is no preparation */
static uint64_t g_opt_began, g_marm_opt;

static int g_level;   /* strongest boundary seen: 0 or a TM_STEP_BY_* */
static int g_decided; /* the boundary whose steps are written (0: loader/undecided) */
static acc g_acc[4];  /* [TM_STEP_BY_BACKWARD], [TM_STEP_BY_OPTIMIZER] */
static tm_inproc_step g_pend[PEND_MAX]; /* backward steps held until decided */
static int g_npend;
static uint64_t g_written; /* training steps written */
static int g_bdepth;       /* backward nesting */
static long g_lead = -1, g_last_opt = -1;

/* the last batch fetched on the training thread, until the next fetch */
static struct {
    int have, added;
    int grad;       /* grad mode at the fetch: 1, 0, or -1 not asked yet (settle_batch) */
    uintptr_t iter; /* the iterator that returned it (identity only) */
    int64_t entry, exit;
    int32_t bwd;
    int64_t cpu; /* training-thread CPU inside the fetch; -1 not measured */
    int newit;   /* from an iterator made for it (TM_STEP_NEW_ITER) */
    int first;   /* the first batch the training thread fetched */
    int64_t run; /* the start of the run of iter() calls its fetch joined; 0 none */
} g_b;
static int g_fetched; /* a batch came back on the training thread (since attach) */
/* A batch came back on the training thread since the last StopIteration
 * there (an iterator made now over one that had not ended is a new
 * iterator for the batch: TM_STEP_NEW_ITER), and the open fetch's. */
static int g_since_stop, g_in_newit;
static int64_t g_in_run; /* the open fetch's run of iter() calls (its start), 0 none */

/* Handoff: the training thread's CPU is read around a fetch only for a
 * multi-process DataLoader (its wait is receiving batches from workers);
 * two clock reads per batch, none for other loaders. */
static PyTypeObject *g_mp_iter; /* torch's _MultiProcessingDataLoaderIter */
static int64_t g_in_cpu = -1;
/* Stragglers: backward and collectives timed on the training thread. */
static int64_t g_bwd_t0, g_coll_t0;
static int g_cdepth, g_coll_seen;
/* What the step model saw, for a loop it cannot segment (the
 * inproc.boundaries event at exit): batches fetched on the training
 * thread, backward passes, lead-optimizer steps, a forward seen. */
static uint64_t g_n_batches, g_n_bwd, g_n_opt;
/* optimizers constructed (Optimizer.__init__'s wrapper calls opt_made()):
 * a process that made one trains, even if it never stepped (the report's
 * inference test, docs/DIAGNOSIS.md "Inference") */
static uint64_t g_n_optmade;
/* optimizer steps of any optimizer (opt_post's calls), and the lead's
 * steps that AMP's GradScaler skipped (hook_ampstep) */
static uint64_t g_opt_calls, g_n_skipped;
static uint64_t g_opt_seen; /* bit no & 63: optimizer no's step was seen (opt_post) */
static int g_anatomy_again; /* anatomy rechecks asked by new optimizers (opt_post) */
static int g_ampdepth;      /* in GradScaler.step (hook_ampstep) */
static uint64_t g_n_fetch;  /* fetches in this process (num_workers=0), hook or not */
/* The main process's fetch Hooks are taken out (the glue's _fetch_unhook)
 * once a __next__ came back: from then on the step model has the batches,
 * the count of fetches is needed no more (it tells a __next__ hook that
 * never fires), and the Hook's call of torch's fetch from C cost ~320
 * instructions a batch (bench/agent_cost.py's Hook calls) over torch's own
 * Python-to-Python call.  A fork puts them back in the child (the glue's
 * at-fork handler): a forked DataLoader worker times its batches. */
static int g_fetch_off;
static PyObject *g_fetch_unhook;

static PyObject *py_fetched(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    g_n_fetch++;
    Py_RETURN_NONE;
}

/* a record made at a fetch entry, written at its exit (flags known then) */
static int g_have_closed;
static tm_inproc_step g_closed;

/* the first forward after a boundary */
static PyObject *g_fwd_hooks; /* torch.nn.modules.module._global_forward_pre_hooks */
static PyObject *g_fwd_key;   /* our key in it */
static PyObject *g_fwd_fn;    /* the hook */
static PyObject *g_grad_on;   /* torch.is_grad_enabled */
static int g_fwd_armed;
static int64_t g_fwd_t, g_arm_t, g_arm_cpu, g_fwd_cpu;
/* armed at a backward pass's end inside an optimizer step (the next
 * micro-batch's preparation), not at a step's start: armed then at
 * g_marm_t (CPU g_marm_cpu), while g_arm_t and g_arm_cpu keep the step
 * start's arm for close_acc */
static int g_arm_micro;
static int64_t g_marm_t, g_marm_cpu;
static int g_in_eval; /* in a module.eval() ... train() span (py_train_mode) */

static int64_t thread_cpu_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return -1;
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The calling thread, as PyThread_get_thread_ident says it (its
 * pthread_self on POSIX), without that function's call and check of the
 * thread module's state: asked 4 times a micro-batch. */
static inline unsigned long thread_ident(void)
{
    return (unsigned long)pthread_self();
}

static int on_thread(void)
{
    unsigned long th = thread_ident();
    if (!g_thread)
        g_thread = th;
    return th == g_thread;
}

/* Batches fetched by other threads than the training thread: a background
 * prefetcher's (prefetch_generator's BackgroundGenerator, or a hand-written
 * thread that iterates the DataLoader into a queue).  Counted at the
 * outermost __next__ of each thread (t_off_depth), under the GIL as all of
 * the agent's state. */
static uint64_t g_off_batches;
static _Thread_local int t_off_depth;
static uint64_t g_repins; /* times a fetching thread gave way (train_thread) */

/* Where torch's global forward pre-hook dict is the glue's ArmedHooks
 * (an OrderedDict whose truth test is ours, put in its place by attach()
 * while it was empty), arming is a flag: every hook-free module call tests
 * that dict's truth, and the first test after the boundary is the first
 * forward.  torch's hook-free fast path is kept, and no hook is inserted
 * and deleted per step.  Otherwise (the job had registered a global
 * forward pre-hook before attach) our hook goes into the dict. */
static int g_fwd_flag; /* g_fwd_hooks is an ArmedHooks */
static PyTypeObject ArmedHooksType;

/* While disarmed the ArmedHooks is an OrderedDict again (its type set
 * back, as `__class__` assignment does: the same layout, and neither type
 * is a heap type, so no reference to a type changes hands): the module
 * calls between the first forward and the next boundary make the dict's
 * own truth test, not a call of armed_bool (~25 instructions each, five a
 * step in bench/agent_loops.py's MLP). */
static void fwd_flag_type(int armed)
{
    if (g_fwd_flag && g_fwd_hooks)
        Py_SET_TYPE(g_fwd_hooks, armed ? &ArmedHooksType : ArmedHooksType.tp_base);
}

/* The training thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) is a real
 * system call, 0.7-2.3 us on a VM, so it is read on a systematic sample.
 * Around a step's preparation: on the steps tm_prep_cpu_due names (steps
 * 1, 17, 33, 49, then every 64th to step 1024, every 256th after; the
 * accounting weights each by the steps since the read before it, so the
 * share is the whole run's).  One in 8 cost 0.2-0.6 us a step, up to half the agent's
 * budget of 1 us (bench/agent_cost.py); one in 16 throughout, 45-250 ns;
 * the sparser tail costs 2 reads per 64 steps past step 64, while a
 * 40-step job keeps three read steps (a CPU share from two flipped the
 * cause of a short job under load, seen on a real loop at load 6).  Around
 * a multi-process loader's wait: one batch in TM_CPU_SAMPLE_EVERY (the
 * second first: the first step is warm-up), a plain systematic sample
 * (those loops pay for unpickling batches; the share is over the read
 * batches).  The other steps carry -1. */
#define TM_CPU_SAMPLE_EVERY 16
static unsigned g_recv_tick;

static int cpu_sample_due(unsigned *tick)
{
    return (*tick)++ % TM_CPU_SAMPLE_EVERY == 1;
}

/* The loop's work after its forward.  nanoGPT's train.py makes the next
 * batch between the forward and the backward (`logits, loss = model(X, Y);
 * X, Y = get_batch('train'); loss.backward()`: on a GPU the host runs it
 * while the forward's kernels do), nanochat's between the backward and the
 * optimizer step (`loss.backward(); x, y = next(train_loader)`).  The span
 * before the forward sees neither: both loops, 60% of their time making
 * batches on the training thread, read "input keeps up".  So, in a loop
 * without a DataLoader batch:
 *
 *   - gap: from the return of the step's first forward (of each
 *     micro-batch's) to its backward pass, or to the next module call
 *     before it (a loss module, a teacher, a discriminator: compute), less
 *     zero_grad(), clipping, the device's and the collectives' waits
 *     (g_hk_ns, g_coll_ns).  The return of a forward is a forward hook on
 *     the module called first (installed by the pre-hook, taken out when it
 *     fires), and a hooked module's call takes torch's slow path, ~1.5 us
 *     on torch 2.13: so it is measured on the steps gap_due names (1 to
 *     GAP_FIRST, then tm_prep_cpu_due's sample) until a gap of 1/GAP_ON
 *     of its step and GAP_ON_MIN_NS or more is seen, and on every step from
 *     then on (a loop that loses that much there pays the ~3 us of a
 *     measured step, ~7 us with torch's slow path, gladly:
 *     bench/agent_cost.py's gap loop; one that does
 *     not never pays more than the sample, and the steps not measured miss
 *     less than that: the backward call's own Python after the forward,
 *     30-90 us a step on torch 2.13, is no reason to measure every step).  The gap counts only
 * where the backward pass's loss is a tensor the forward returned, or that one scaled (gap_settle):
 * a loss computed after the forward (CrossEntropyLoss, an RL loop's surrogate) is compute, and that
 * gap none of the preparation. prep_fwd_ns, in prep_ns.
 *   - tail: from the last backward pass's end to the optimizer step (the
 *     micro-batch span armed there that met the step instead of a
 *     forward), with the same parts left out: every step, two clock reads
 *     the span had anyway.  prep_opt_ns, in prep_ns.
 */
#define GAP_ON 50              /* 2% of the step */
#define GAP_ON_MIN_NS 200000LL /* and 200 us */
#define AFTER_OVER 4           /* the gap and tail count beyond 4x the span before the forward */
#define GAP_FIRST 4u
/* The order is the loop's, not each step's: a step the machine preempts
 * for a millisecond before its forward (or a nanoGPT step that logs, saves
 * or evaluates there) has 4x the batch after the forward before it, and
 * judged alone it read that batch as compute (prep_fwd_ns 0); a loop that
 * makes its batch first and stalls once after the forward read the stall
 * as its batch.  So the steps whose gap was measured vote (order_vote),
 * the first decides, ORDER_FLIP of them in a row against turn it (a loop
 * that changes its order for good), and every step follows the loop's
 * order; before the first vote, the step's own test. */
#define ORDER_FLIP 3
static int g_order;         /* 1: the batch after the forward; -1: before; 0: no vote yet */
static int g_order_against; /* the votes in a row against g_order */
static int g_gap_on;        /* every step measured from now on */
static int g_gap_due;       /* the step being prepared is measured */
static int g_gap_want;      /* a due span met its forward: the post-hook goes onto its module */
static int g_gap_entry;     /* the pre-hook is in the ArmedHooks dict for that module call */
static int g_arm_gap;       /* armed from a forward's return to the next module call or backward */
static int64_t g_gap_t0, g_gap_cpu0, g_gap_hk, g_gap_hkc, g_gap_coll;
static PyObject *g_post_fn;      /* the forward hook */
static PyObject *g_post_key;     /* its key in the module's _forward_hooks */
static PyObject *g_post_dict;    /* the _forward_hooks it is in, until it fires */
static PyObject *g_post_always;  /* the module's _forward_hooks_always_called (torch >= 2.0) */
static int g_post_global;        /* g_post_dict is torch's global _forward_hooks (torch 1.x) */
static int g_post_fired;         /* it fired, and stays in the dict until post_clear */
static uintptr_t g_post_id;      /* that module (identity only) */
static PyObject *g_s_fwd_hooks;  /* "_forward_hooks" */
static PyObject *g_s_fwd_always; /* "_forward_hooks_always_called" */
static PyObject *g_s_grad_fn, *g_s_next_fns; /* "grad_fn", "next_functions" */
static PyObject *g_s_torch;                  /* "torch" */
static PyObject *g_s_metadata;               /* "metadata" */
static PyObject *g_tracing; /* torch._C._get_tracing_state: torch.jit.trace running */
/* The autograd nodes of the one-element tensors (a loss) the forward
 * returned, and the gap measured, until the backward pass says whether its
 * loss came out of that forward (gap_settle).  A node is known by its
 * metadata dict, which the node makes once and keeps (its Python object is
 * made anew at each access, and one held would keep the forward's graph,
 * its activations, alive past a forward the loop dropped); the dicts are
 * held (a dict freed with a dropped output would give its address to the
 * next one made: another node's, read as this one). */
#define GAP_OUTS 8
static uintptr_t g_out_id[GAP_OUTS];
static PyObject *g_out_md[GAP_OUTS];
static PyObject *g_s_numel; /* "numel" */
static int g_out_n;
static int64_t g_gap_span = -1, g_gap_cpu = -1;
/* blocking collectives' time on the training thread, all of it so far
 * (py_coll_exit): the gap and the tail leave it out (a loss all_reduce for
 * logging, build-nanogpt's, waits for the other ranks) */
static int64_t g_coll_ns, g_marm_coll;

static void post_clear(void);
static int post_install(PyObject *mod);
static int in_module_call(void);

/* One measured step's order test (after: its work after the forward
 * over AFTER_OVER times the span before); returns the loop's order. */
static int order_vote(int after)
{
    int v = after ? 1 : -1;
    if (!g_order || v == g_order || ++g_order_against >= ORDER_FLIP) {
        g_order = v; /* the same, the first, or ORDER_FLIP against in a row */
        g_order_against = 0;
    }
    return g_order > 0;
}

static int gap_due(uint64_t step)
{
    return g_gap_on || g_order_against || (step >= 1 && step <= GAP_FIRST) ||
           tm_prep_cpu_due(step); /* a vote against: the next steps say whether it holds */
}

/* The model run under no_grad before a step's training forward: an RL
 * rollout (the policy acting at each environment step, CleanRL's and
 * SB3's loops), sampling from the model.  Its first forward is the step's
 * first, which ends the preparation; the rest of the rollout, the
 * environment's steps included, read as the step's compute, and a loop
 * spending 65% of its time there read "input keeps up" and nothing more.
 * Where the step's first forward (first_forward) runs with grad disabled
 * and the model in train mode, the module calls are watched (the
 * ArmedHooks truth test stays ours) until one runs with grad enabled, the
 * step's training forward: nograd_ns is the span from the first to it,
 * less trainmon's own hooks, and nograd_calls the calls under no_grad made
 * from where the first was, at its call depth (the loop's own calls of its
 * model, not the modules inside them: a teacher's forward in distillation
 * is one, a rollout one or two per environment step).  The span ends where
 * the run does (ng_run_end): a rollout one longest interval between its
 * calls after the last, a lone call at the last module call inside it, so
 * that a batch made after a probe of the model is none of it.  The training forward's
 * post-hook (the gap) is put on there instead.  Calls deeper than the
 * first are not looked at (the modules inside the loop's calls: a few
 * loads each); a training forward made deeper than the rollout's calls is
 * then met by its backward pass (or optimizer step), which ends the span
 * at the last call counted, where there were two or more (ng_end).
 * model.eval() or the next step's arm that comes first ends the watch
 * unmeasured.  Where the first was made from is told by the
 * interpreter's recursion depth at the truth test (ng_where: a few loads;
 * the loop's calls of its model are at one depth, the modules inside them
 * deeper); on a Python whose thread state this does not know, by the code
 * of the caller's frame (module_caller: ~700 instructions a module call,
 * the frames made into objects).  Costs: one torch.is_grad_enabled() at
 * each step's first forward (~170 instructions); while watching, the
 * depth at each module call, and that at the loop's own calls
 * (bench/agent_loops.py rollout).  Where the
 * dict cannot be an ArmedHooks (a job with a global pre-hook of its own),
 * nothing. */
static PyObject *g_call_codes; /* below */
static int grad_enabled(void);
static int g_ng_watch;
static int64_t g_ng_t0, g_ng_hk;
static uintptr_t g_ng_code; /* the depth of the first call, or its caller's code (identity) */
static int32_t g_ng_n;
static int64_t g_ng_last, g_ng_last_hk; /* the last call counted, the hooks' time then */
static int64_t g_ng_inner;              /* the last module call inside a lone first call */
static int64_t g_ng_gap;                /* the longest from one call counted to the next */
static int64_t g_ng_begin;              /* where the span measured last began */
static int64_t g_ng_ns = -1, g_ng_end;  /* the span measured last, ended at g_ng_end */
static int32_t g_ng_calls;

static void ng_stop(void)
{
    if (!g_ng_watch)
        return;
    g_ng_watch = 0;
    if (!g_fwd_armed && !g_gap_want)
        fwd_flag_type(0);
}

/* Where the run under no_grad ends, the training forward (or a backward
 * pass) met at t: a run of two calls or more (a rollout) one longest
 * interval between its calls after the last (the last environment step),
 * at most t; a lone call (a teacher's forward) at the last module call
 * seen inside it.  What follows is no part of it: the next batch made
 * after a probe of the model read as 84% "a frozen model's forward". */
static int64_t ng_run_end(int64_t t)
{
    if (g_ng_n >= 2)
        return g_ng_last + g_ng_gap < t ? g_ng_last + g_ng_gap : t;
    return g_ng_inner > g_ng_last ? g_ng_inner : g_ng_last;
}

/* A backward pass or an optimizer step met the watch: the training forward
 * was made deeper than the loop's calls under no_grad (not looked at, as
 * the modules inside them are not); a run of two calls or more ends as
 * ng_run_end says, else none. */
static void ng_end(void)
{
    if (!g_ng_watch)
        return;
    if (g_ng_n >= 2 && g_ng_last > g_ng_t0) {
        int64_t end = ng_run_end(now_ns()), hk = g_ng_last_hk - g_ng_hk;
        g_ng_ns = end - g_ng_t0 > hk ? end - g_ng_t0 - hk : 0;
        g_ng_begin = g_ng_t0;
        g_ng_end = end;
        g_ng_calls = g_ng_n;
    }
    ng_stop();
}

/* The code of the frame that called the module whose call makes the truth
 * test now: the first one up from torch's module-call frames (g_call_codes).
 * 0: none found within a few frames.  (Compiled everywhere, called only
 * where ng_where does not know the thread state.) */
__attribute__((unused)) static uintptr_t module_caller(void)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    if (!f || !g_call_codes)
        return 0;
    Py_INCREF(f);
    uintptr_t id = 0;
    for (int depth = 0; f && depth < 6; depth++) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int torch_frame = 0;
        for (Py_ssize_t i = 0; !torch_frame && i < PyTuple_GET_SIZE(g_call_codes); i++)
            torch_frame = (PyObject *)co == PyTuple_GET_ITEM(g_call_codes, i);
        Py_DECREF(co);
        if (!torch_frame) {
            id = (uintptr_t)co; /* the frame holds it: alive while compared */
            break;
        }
        PyFrameObject *b = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = b;
    }
    Py_XDECREF(f);
    return id;
}

/* Where a module call under watch was made from: the thread's Python
 * recursion depth at its truth test (deeper: larger), from the thread
 * state's counter of the version (Include/cpython/pystate.h); on a version
 * this does not know, the code of the caller's frame. */
static uintptr_t ng_where(void)
{
#if PY_VERSION_HEX < 0x030F0000
    PyThreadState *ts = PyThreadState_Get();
    /* (the limit less what remains: sys.setrecursionlimit, which inductor
     * calls, moves both) */
#if PY_VERSION_HEX >= 0x030C0000
    return ((uintptr_t)1 << 30) + (uintptr_t)ts->py_recursion_limit -
           (uintptr_t)ts->py_recursion_remaining;
#elif PY_VERSION_HEX >= 0x030B0000
    return ((uintptr_t)1 << 30) + (uintptr_t)ts->recursion_limit -
           (uintptr_t)ts->recursion_remaining;
#else
    return ((uintptr_t)1 << 30) + (uintptr_t)ts->recursion_depth;
#endif
#else
    return module_caller();
#endif
}

/* Whether a call made at w is made from where the first was (g_ng_code).
 * By depth, within one frame: torch 2.x tests the dict one frame deeper,
 * in its `inner`, for a module with hooks of its own, while a module
 * inside another's forward is tested three frames or more below it (its
 * forward, the module call's frames). */
static int ng_same(uintptr_t w)
{
#if PY_VERSION_HEX < 0x030F0000
    return w + 1 >= g_ng_code && w <= g_ng_code + 1;
#else
    return w == g_ng_code;
#endif
}

/* Whether a call made at w is deeper than the first (a module inside one
 * of the loop's calls, or a call of a deeper helper): not looked at, so
 * that a module call inside a rollout's costs a few loads, no
 * torch.is_grad_enabled().  By the caller's code nothing is known deeper. */
static int ng_deeper(uintptr_t w)
{
#if PY_VERSION_HEX < 0x030F0000
    return g_ng_code && w > g_ng_code + 1;
#else
    (void)w;
    return 0;
#endif
}

static void fwd_arm(int64_t t)
{
    if (!g_fwd_hooks || !g_fwd_fn || g_fwd_armed)
        return;
    if (!g_fwd_flag && PyObject_SetItem(g_fwd_hooks, g_fwd_key, g_fwd_fn) < 0) {
        swallow(R_INTERNAL, "timing batch preparation");
        Py_CLEAR(g_fwd_hooks); /* never again */
        return;
    }
    if (g_gap_entry && g_fwd_flag && PyObject_DelItem(g_fwd_hooks, g_fwd_key) < 0)
        PyErr_Clear(); /* a module call that never ran its pre-hooks */
    g_gap_entry = 0;
    g_fwd_armed = 1;
    g_arm_micro = 0;
    g_gap_want = 0;
    g_ng_watch = 0; /* a watch no training forward ended: none */
    post_clear();   /* one a forward that raised left */
    fwd_flag_type(1);
    g_arm_t = t;
    g_arm_hk = g_hk_ns;
    g_arm_hkc = g_hk_cpu_ns;
    /* the step this span prepares: the next written (after any held
     * until the step model decides) */
    g_arm_cpu = tm_prep_cpu_due(g_written + (uint64_t)g_npend) ? thread_cpu_ns() : -1;
}

static void gc_unprep(void);
static int g_gc_micro_n; /* pauses in the micro-batch span (gc_unprep, below) */

static void fwd_disarm(void)
{
    if (!g_fwd_armed)
        return;
    if (g_arm_micro)
        gc_unprep(); /* a micro-batch span no forward ended: no preparation */
    g_fwd_armed = 0;
    g_arm_gap = 0;
    /* a due span that met its forward in a truth test made outside a
     * module call (OptimizedModule's test for global hooks) keeps the
     * truth test ours until the module call's (armed_bool) */
    if (!(g_gap_want && g_fwd_flag) && !g_ng_watch)
        fwd_flag_type(0);
    if (g_fwd_hooks && (!g_fwd_flag || g_gap_entry) && PyObject_DelItem(g_fwd_hooks, g_fwd_key) < 0)
        PyErr_Clear(); /* taken out by someone else */
    g_gap_entry = 0;
}

/* The forward hook out of the module it was put on (fired or not: a
 * forward that raised never returns to it). */
static void post_remove(void)
{
    if (!g_post_dict)
        return;
    if (PyObject_DelItem(g_post_dict, g_post_key) < 0) /* an OrderedDict: not PyDict_* */
        PyErr_Clear();
    if (g_post_always && PyObject_DelItem(g_post_always, g_post_key) < 0)
        PyErr_Clear();
    Py_CLEAR(g_post_dict);
    Py_CLEAR(g_post_always);
    g_post_id = 0;
    g_post_global = g_post_fired = 0;
}

/* Our key out of a module's _forward_hooks now, unless another key follows
 * it: torch iterates that dict itself, not a copy, when a forward raised
 * (its always_call hooks), and a key taken out before the last makes the
 * next step of that loop raise "OrderedDict mutated during iteration" in
 * place of the job's exception.  1: out (or not there); 0: left for
 * post_clear, at the next backward pass, optimizer step or arm. */
static int hook_out(PyObject *fh)
{
    if (!PyODict_CheckExact(fh))
        return 0; /* (a plain dict: no key may go while it is iterated) */
    PyObject *keys = PySequence_List(fh);
    if (!keys) {
        PyErr_Clear();
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(keys);
    int last = n > 0 && PyList_GET_ITEM(keys, n - 1) == g_post_key;
    int there = last;
    for (Py_ssize_t i = 0; !there && i < n; i++)
        there = PyList_GET_ITEM(keys, i) == g_post_key;
    Py_DECREF(keys);
    if (!there)
        return 1;
    if (!last)
        return 0;
    if (PyObject_DelItem(fh, g_post_key) < 0)
        PyErr_Clear();
    return 1;
}

/* The hook taken out, fired or not. */
static void post_clear(void)
{
    post_remove();
}

/* The pre-hook of a due span's forward: the forward hook onto its module
 * (torch looks at the module's _forward_hooks after its forward), called
 * even when the forward raises (torch >= 2.0's always_call), so that none
 * is left on the job's module: a module holding a C function as a hook
 * cannot be pickled by torch.save(model) (a crash handler's, after an OOM
 * in the forward) nor scripted.  Torch 1.x has no always_call: there the
 * hook goes into torch's global forward-hook dict instead, which no
 * model carries, fires for every module that returns during the forward
 * (the module calls of a measured step take torch's slow path, ~0.5 us
 * each on 1.13) and counts the one it was put there for; one a forward
 * that raised left goes at the next backward pass, optimizer step or arm. */
static PyObject *g_global_fwd_hooks; /* torch's _global_forward_hooks (torch 1.x) */

static int post_install(PyObject *mod)
{
    post_clear();
    if (!g_post_fn || !g_s_fwd_hooks)
        return 0;
    PyObject *al = PyObject_GetAttr(mod, g_s_fwd_always);
    if (!al || !PyDict_Check(al)) {
        PyErr_Clear();
        Py_XDECREF(al);
        if (!g_global_fwd_hooks ||
            PyObject_SetItem(g_global_fwd_hooks, g_post_key, g_post_fn) < 0) {
            PyErr_Clear();
            return 0;
        }
        Py_INCREF(g_global_fwd_hooks);
        g_post_dict = g_global_fwd_hooks;
        g_post_global = 1;
        g_post_id = (uintptr_t)mod;
        return 1;
    }
    PyObject *fh = PyObject_GetAttr(mod, g_s_fwd_hooks);
    if (!fh || !PyDict_Check(fh) || PyObject_SetItem(fh, g_post_key, g_post_fn) < 0) {
        PyErr_Clear(); /* a scripted module, a stand-in: not measured */
        Py_XDECREF(fh);
        Py_DECREF(al);
        return 0;
    }
    if (PyObject_SetItem(al, g_post_key, Py_True) < 0) { /* never one that might stay */
        PyErr_Clear();
        if (PyObject_DelItem(fh, g_post_key) < 0)
            PyErr_Clear();
        Py_DECREF(fh);
        Py_DECREF(al);
        return 0;
    }
    g_post_dict = fh;
    g_post_always = al;
    g_post_id = (uintptr_t)mod;
    return 1;
}

/* Whether the Python frame making this call runs torch's Module._call_impl
 * or the `inner` function of its hooked path (torch >= 2.0, where a module
 * with hooks of its own makes its first test of the global dict): the
 * truth test of a module call, not of OptimizedModule's test for global
 * hooks or of anything else that looks at the dict. */
static PyObject *g_call_codes; /* a tuple of those code objects */

static int in_module_call(void)
{
    if (!g_call_codes)
        return 0;
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    if (!f)
        return 0;
    PyCodeObject *co = PyFrame_GetCode(f);
    int ours = 0;
    for (Py_ssize_t i = 0; !ours && i < PyTuple_GET_SIZE(g_call_codes); i++)
        ours = (PyObject *)co == PyTuple_GET_ITEM(g_call_codes, i);
    Py_XDECREF(co);
    return ours;
}

/* Whether this module call is made inside an autograd Function's forward,
 * within 8 frames above torch's module-call frames (g_call_codes, not
 * counted): torch >= 2.0's Function.apply (g_fn_apply, a Python frame
 * above every Function's forward, the setup_context style's too), or a
 * code named `forward` whose first parameter is `ctx` (torch 1.x, whose
 * apply is C): torch.utils.checkpoint's CheckpointFunction, the reentrant
 * activation checkpointing that checkpoint_sequential and Hugging Face's
 * gradient checkpointing used by default; DeepSpeed's, Megatron's and
 * fairscale's; a user's own Function.  Autograd runs such a forward with
 * grad disabled, and the module calls in it are the training forward, not
 * the model run without gradients: checkpoint_sequential called by the
 * loop read as an RL rollout of 6 calls, 28% of the loop.  Walked once a
 * step, and only where the step's first module call runs with grad
 * disabled. */
static PyObject *g_fn_apply; /* torch.autograd.Function.apply's code, or NULL */

static int in_function_forward(void)
{
    PyFrameObject *f = PyEval_GetFrame(); /* borrowed */
    if (!f)
        return 0;
    Py_INCREF(f);
    int found = 0;
    for (int depth = 0; f && !found && depth < 8;) {
        PyCodeObject *co = PyFrame_GetCode(f);
        int torch_frame = 0;
        for (Py_ssize_t i = 0; g_call_codes && !torch_frame && i < PyTuple_GET_SIZE(g_call_codes);
             i++)
            torch_frame = (PyObject *)co == PyTuple_GET_ITEM(g_call_codes, i);
        if (!torch_frame)
            depth++;
        if (g_fn_apply && (PyObject *)co == g_fn_apply)
            found = 1;
        else if (!torch_frame && co->co_argcount >= 1 &&
                 PyUnicode_CompareWithASCIIString(co->co_name, "forward") == 0) {
#if PY_VERSION_HEX >= 0x030B0000
            PyObject *names = PyCode_GetVarnames(co);
#else
            PyObject *names = co->co_varnames;
            Py_XINCREF(names);
#endif
            if (!names)
                PyErr_Clear();
            else if (PyTuple_Check(names) && PyTuple_GET_SIZE(names) >= 1)
                found = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(names, 0), "ctx") == 0;
            Py_XDECREF(names);
        }
        Py_DECREF(co);
        PyFrameObject *b = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = b;
    }
    Py_XDECREF(f);
    return found;
}

/* Armed at the forward's return (the hook): the next module call's truth
 * test or the backward pass ends the gap.  The step's own arm (g_arm_t,
 * g_arm_cpu) is left as it is. */
static void gap_arm(int64_t t)
{
    if (g_fwd_armed || !g_fwd_hooks)
        return;
    if (!g_fwd_flag && PyObject_SetItem(g_fwd_hooks, g_fwd_key, g_fwd_fn) < 0) {
        swallow(R_INTERNAL, "timing the work after the forward");
        return;
    }
    g_fwd_armed = 1;
    g_arm_gap = 1;
    g_arm_micro = 0;
    g_gap_want = 0;
    fwd_flag_type(1);
    g_gap_t0 = t;
    g_gap_hk = g_hk_ns;
    g_gap_hkc = g_hk_cpu_ns;
    g_gap_coll = g_coll_ns;
    g_gap_cpu0 = g_arm_cpu >= 0 ? thread_cpu_ns() : -1;
}

/* The gap ends at t (a module call or the backward pass): held until the
 * backward pass (gap_settle). */
static void gap_take(int64_t t)
{
    int64_t span = t - g_gap_t0 - (g_hk_ns - g_gap_hk) - (g_coll_ns - g_gap_coll);
    g_gap_span = span > 0 ? span : 0;
    g_gap_cpu = -1;
    if (g_gap_cpu0 >= 0) {
        int64_t c = thread_cpu_ns();
        if (c >= g_gap_cpu0) {
            int64_t d = c - g_gap_cpu0 - (g_hk_cpu_ns - g_gap_hkc);
            g_gap_cpu = d > 0 ? d : 0;
        }
    }
    fwd_disarm();
}

/* The forward's tensors forgotten, and a gap no backward pass took. */
static void gap_drop(void)
{
    for (int i = 0; i < g_out_n; i++)
        Py_CLEAR(g_out_md[i]);
    g_out_n = 0;
    g_gap_span = g_gap_cpu = -1;
}

/* The forward's returned tensors' autograd nodes: a Tensor, or those of
 * a tuple, list or dict (a ModelOutput) it returned, the first GAP_OUTS. */
static PyTypeObject *g_tensor_type; /* torch.Tensor, once torch is imported */

/* An autograd node's identity (its metadata dict's address; 0 none). */
static uintptr_t node_id(PyObject *fn)
{
    PyObject *md = PyObject_GetAttr(fn, g_s_metadata);
    if (!md) {
        PyErr_Clear();
        return 0;
    }
    uintptr_t id = (uintptr_t)md;
    Py_DECREF(md); /* the node keeps it */
    return id;
}

/* Whether torch.jit.trace is tracing: a tensor method the hook called
 * then (numel) went into the traced graph, and the trace's check, which
 * runs without the hook, found "Graphs differed across invocations". */
static int tracing(void)
{
    if (!g_tracing)
        return 0;
    PyObject *r = PyObject_CallNoArgs(g_tracing);
    int on = r && r != Py_None;
    if (!r)
        PyErr_Clear();
    Py_XDECREF(r);
    return on;
}

/* The number of elements of tensor t (-1: not known). */
static long numel_of(PyObject *t)
{
    if (!g_tensor_type || !PyObject_TypeCheck(t, g_tensor_type))
        return -1;
    PyObject *n = PyObject_CallMethodNoArgs(t, g_s_numel);
    long v = n && PyLong_Check(n) ? PyLong_AsLong(n) : -1;
    Py_XDECREF(n);
    if (PyErr_Occurred())
        PyErr_Clear();
    return v;
}

static void out_note(PyObject *o)
{
    long n = g_out_n < GAP_OUTS ? numel_of(o) : -1;
    if (n < 1 || n > 64) /* a loss, not logits or log-probs (or the replicas' losses below) */
        return;
    PyObject *fn = PyObject_GetAttr(o, g_s_grad_fn);
    if (!fn) {
        PyErr_Clear();
        return;
    }
    /* nn.DataParallel gathers its replicas' losses into a vector (the loop
     * takes its .mean()): a loss too */
    if (n != 1 && (fn == Py_None || strcmp(Py_TYPE(fn)->tp_name, "GatherBackward"))) {
        Py_DECREF(fn);
        return;
    }
    PyObject *md = fn != Py_None ? PyObject_GetAttr(fn, g_s_metadata) : NULL;
    if (!md && PyErr_Occurred())
        PyErr_Clear();
    Py_DECREF(fn);
    if (md) {
        g_out_md[g_out_n] = md;
        g_out_id[g_out_n++] = (uintptr_t)md;
    }
}

static void outs_note(PyObject *out)
{
    gap_drop();
    if (!g_tensor_type) {
        PyObject *torch = PyImport_GetModule(g_s_torch);
        PyObject *t = torch ? PyObject_GetAttrString(torch, "Tensor") : NULL;
        Py_XDECREF(torch);
        if (t && PyType_Check(t))
            g_tensor_type = (PyTypeObject *)t;
        else
            Py_XDECREF(t);
        PyErr_Clear();
    }
    if (PyTuple_Check(out) || PyList_Check(out)) {
        PyObject *seq = PySequence_Fast(out, "");
        if (!seq) {
            PyErr_Clear();
            return;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < n && i < GAP_OUTS; i++)
            out_note(PySequence_Fast_GET_ITEM(seq, i));
        Py_DECREF(seq);
    } else if (PyDict_Check(out)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *k, *v;
        while (i++ < GAP_OUTS && PyDict_Next(out, &pos, &k, &v))
            out_note(v);
    } else {
        out_note(out);
    }
}

/* Whether autograd node fn scales one input (loss / accumulation steps,
 * GradScaler's loss * scale, .mean() of a DataParallel loss), by its type's
 * name: torch's generated node types. */
static PyObject *g_s_input_md, *g_s_shape; /* "_input_metadata", "shape" */

static int scales_one(PyObject *fn)
{
    static const char *const names[] = {
        "DivBackward0",  "DivBackward1", "MulBackward0", "MulBackward1", "MeanBackward0",
        "MeanBackward1", "SumBackward0", "SumBackward1", "NegBackward0", "ToCopyBackward0"};
    const char *tn = Py_TYPE(fn)->tp_name;
    size_t i = 0;
    while (i < sizeof names / sizeof names[0] && strcmp(tn, names[i]))
        i++;
    if (i == sizeof names / sizeof names[0])
        return 0;
    if (strcmp(tn, "MulBackward0") && strcmp(tn, "DivBackward0"))
        return 1;
    /* a product or quotient of two tensors scales the loss only when it is
     * one element itself (loss / n_tokens, the GradScaler's loss * scale),
     * not an RL loop's log-probs times advantages: the node's own result,
     * from the metadata of its input (torch 2.x; no saved tensor unpacked,
     * which runs the job's saved-tensor hooks: an offloading one's unpack
     * is single-use); torch 1.x tells none and takes the name */
    PyObject *im = PyObject_GetAttr(fn, g_s_input_md);
    if (!im) {
        PyErr_Clear();
        return 1;
    }
    long n = -1;
    PyObject *m0 = PyTuple_Check(im) && PyTuple_GET_SIZE(im) >= 1 ? PyTuple_GET_ITEM(im, 0) : NULL;
    PyObject *shape = m0 ? PyObject_GetAttr(m0, g_s_shape) : NULL;
    if (shape && (PyTuple_Check(shape) || PyList_Check(shape))) { /* (a list on 2.13) */
        n = 1;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(shape); i++) {
            long d = PyLong_AsLong(PySequence_Fast_GET_ITEM(shape, i));
            n = d >= 0 && n >= 0 ? n * d : -1;
        }
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(shape);
    Py_DECREF(im);
    return n == 1;
}

/* Whether tensor t is one the forward returned, or that one scaled (at
 * most 3 such nodes between): the loss came out of the model (nanoGPT's,
 * a Hugging Face model's with labels), so the work between the forward
 * and this backward pass was no loss computation. */
static int from_forward(PyObject *t)
{
    if (!g_tensor_type || !PyObject_TypeCheck(t, g_tensor_type))
        return 0;
    PyObject *fn = PyObject_GetAttr(t, g_s_grad_fn);
    for (int hop = 0; fn && fn != Py_None && hop <= 3; hop++) {
        uintptr_t id = node_id(fn);
        for (int i = 0; id && i < g_out_n; i++)
            if (id == g_out_id[i]) {
                Py_DECREF(fn);
                return 1;
            }
        if (!scales_one(fn))
            break;
        PyObject *nf = PyObject_GetAttr(fn, g_s_next_fns), *next = NULL;
        Py_DECREF(fn);
        fn = NULL;
        if (nf && PyTuple_Check(nf))
            for (Py_ssize_t i = 0; !next && i < PyTuple_GET_SIZE(nf) && i < 2; i++) {
                PyObject *p = PyTuple_GET_ITEM(nf, i);
                if (PyTuple_Check(p) && PyTuple_GET_SIZE(p) >= 1 &&
                    PyTuple_GET_ITEM(p, 0) != Py_None)
                    next = PyTuple_GET_ITEM(p, 0);
            }
        Py_XINCREF(next);
        Py_XDECREF(nf);
        fn = next;
    }
    if (!fn)
        PyErr_Clear();
    Py_XDECREF(fn);
    return 0;
}

/* The backward pass (its root tensors, a Tensor or a sequence; NULL
 * unknown) takes a measured gap: the loop's own work when its loss came
 * out of the forward, else the loss computed after it (CrossEntropyLoss,
 * an RL loop's surrogate: compute) and none of it preparation. */
static void gap_settle(PyObject *roots)
{
    if (g_gap_span < 0) {
        gap_drop();
        return;
    }
    int from = 0;
    if (roots && g_out_n) {
        if (PyTuple_Check(roots) || PyList_Check(roots)) {
            Py_ssize_t n = PySequence_Size(roots);
            for (Py_ssize_t i = 0; !from && i < n && i < 4; i++) {
                PyObject *r = PySequence_GetItem(roots, i);
                from = r && from_forward(r);
                Py_XDECREF(r);
            }
            PyErr_Clear();
        } else {
            from = from_forward(roots);
        }
    }
    for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++) {
        acc *a = &g_acc[L];
        a->gap += from ? g_gap_span : 0;
        a->gap_n++;
        if (g_gap_cpu >= 0) {
            a->gap_cpu += from ? g_gap_cpu : 0;
            a->gap_cpu_n++;
        }
    }
    gap_drop();
}

/* An optimizer step (or GradScaler.step) begins at t on the training
 * thread: a micro-batch span open since the last backward pass is the
 * tail, the loop's work before the step (nanochat's next batch); an open
 * gap (a forward, then a step without a backward pass) is none. */
static void opt_began(int64_t t)
{
    if (!g_thread || thread_ident() != g_thread)
        return;
    if (g_post_dict)
        post_clear();
    if (g_ng_watch)
        ng_end(); /* an optimizer step before a forward with grad seen */
    if (!g_fwd_armed)
        return;
    if (g_arm_gap) {
        fwd_disarm();
        gap_drop();
        return;
    }
    if (!g_arm_micro || t < g_marm_t || g_opt_began != g_marm_opt)
        return;
    acc *a = &g_acc[TM_STEP_BY_OPTIMIZER];
    int64_t span = t - g_marm_t - (g_hk_ns - g_marm_hk) - (g_coll_ns - g_marm_coll);
    a->tail += span > 0 ? span : 0;
    a->tail_n++;
    if (g_marm_cpu >= 0) {
        int64_t c = thread_cpu_ns();
        if (c >= g_marm_cpu) {
            int64_t d = c - g_marm_cpu - (g_hk_cpu_ns - g_marm_hkc);
            a->tail_cpu += d > 0 ? d : 0;
            a->tail_cpu_n++;
        }
    }
    g_gc_micro_n = 0; /* its pauses were in a preparation */
    fwd_disarm();
}

/* The first forward on the training thread after the boundary (or, armed
 * at a backward pass's end inside an optimizer step, the next
 * micro-batch's: its preparation is added to the step's). */
static void first_forward(void)
{
    if (!g_fwd_armed || !on_thread()) /* the first forward may come first of all */
        return;
    if (g_arm_gap) { /* a module called after the forward: the gap ends */
        gap_take(now_ns());
        return;
    }
    int64_t t = now_ns(), cpu = (g_arm_micro ? g_marm_cpu : g_arm_cpu) >= 0 ? thread_cpu_ns() : -1;
    if (g_arm_micro) {
        acc *a = &g_acc[TM_STEP_BY_OPTIMIZER];
        if (t >= g_marm_t && g_opt_began == g_marm_opt) {
            g_gc_micro_n = 0; /* its pauses were in a preparation */
            int64_t hk = g_hk_ns - g_marm_hk, span = t - g_marm_t - hk;
            a->prep_more += span > 0 ? span : 0;
            a->prep_more_n++;
            if (cpu >= 0 && g_marm_cpu >= 0 && cpu >= g_marm_cpu) {
                int64_t c = cpu - g_marm_cpu - (g_hk_cpu_ns - g_marm_hkc);
                a->prep_more_cpu += c > 0 ? c : 0;
                a->prep_more_cpu_n++;
            }
        }
    } else {
        g_fwd_t = t;
        g_fwd_cpu = cpu;
        g_fwd_hk = g_hk_ns;
        g_fwd_hkc = g_hk_cpu_ns;
        if (g_fwd_flag && !g_in_eval && !g_opt_t0 && !g_off_batches && !grad_enabled() &&
            !in_function_forward()) {
            /* the model run under no_grad: watched to the training forward */
            g_ng_watch = 1;
            g_ng_t0 = t;
            g_ng_hk = g_hk_ns;
            g_ng_n = in_module_call(); /* (not OptimizedModule's look) */
            g_ng_last = g_ng_inner = t;
            g_ng_gap = 0;
            g_ng_last_hk = g_hk_ns;
            g_ng_code = ng_where();
            g_gap_want = 0;
            fwd_disarm();
            return;
        }
    }
    /* (not inside an optimizer step: LBFGS's closure is its own) */
    g_gap_want = g_gap_due && g_post_fn && !g_in_eval && !g_opt_t0 && !g_off_batches;
    fwd_disarm();
}

/* A module call while the model runs under no_grad (g_ng_watch): counted
 * when made from where the first was; the first with grad enabled is the
 * step's training forward, which ends the span (and gets the gap's
 * post-hook where the step is measured). */
static void ng_call(void)
{
    if (!on_thread())
        return;
    uintptr_t w = ng_where();
    if (ng_deeper(w)) { /* a module inside one of the loop's calls */
        if (g_ng_n <= 1)
            g_ng_inner = now_ns(); /* inside the first: where a lone call ends */
        return;
    }
    if (!grad_enabled()) {
        /* a module call's test, not torch.compile's OptimizedModule's own
         * look at the hooks before its module call (one call, two tests) */
        if (g_ng_code && ng_same(w) && g_ng_n < INT32_MAX && in_module_call()) {
            int64_t t = now_ns();
            if (g_ng_n && t - g_ng_last > g_ng_gap)
                g_ng_gap = t - g_ng_last;
            g_ng_n++;
            g_ng_last = t;
            g_ng_last_hk = g_hk_ns;
        }
        return;
    }
    int64_t t = now_ns(), hk = g_hk_ns - g_ng_hk, end = ng_run_end(t);
    g_ng_ns = end - g_ng_t0 > hk ? end - g_ng_t0 - hk : 0;
    g_ng_begin = g_ng_t0;
    g_ng_end = end;
    g_ng_calls = g_ng_n;
    g_gap_want = g_gap_due && g_post_fn && !g_in_eval && !g_opt_t0 && !g_off_batches;
    ng_stop();
}

/* Armed at a backward pass's end inside an optimizer step of a loop that
 * fetched no DataLoader batch in it: the next micro-batch's preparation
 * (gradient accumulation: nanochat's and build-nanogpt's loops prepare
 * each micro-batch before its forward; without this only the first was
 * timed, a quarter of the wait of 4 micro-batches). */
static void fwd_arm_micro(int64_t t)
{
    int64_t at = g_arm_t, acpu = g_arm_cpu, ahk = g_arm_hk, ahkc = g_arm_hkc;
    fwd_arm(t);
    if (!g_fwd_armed)
        return;
    g_arm_micro = 1;
    g_marm_t = g_arm_t;
    g_marm_cpu = g_arm_cpu;
    g_marm_hk = g_arm_hk;
    g_marm_hkc = g_arm_hkc;
    g_marm_opt = g_opt_began;
    g_marm_coll = g_coll_ns;
    g_arm_t = at;
    g_arm_cpu = acpu;
    g_arm_hk = ahk;
    g_arm_hkc = ahkc;
}

/* The forward pre-hook: (module, input) -> None.  Notes the first forward
 * on the training thread after the boundary and takes itself out. */
static PyObject *py_fwd_pre(PyObject *self, PyObject *args)
{
    (void)self;
    first_forward();
    if (g_gap_entry) { /* put in by armed_bool for this call: out again */
        g_gap_entry = 0;
        if (g_fwd_hooks && PyObject_DelItem(g_fwd_hooks, g_fwd_key) < 0)
            PyErr_Clear();
    }
    if (g_gap_want && g_thread && thread_ident() == g_thread) {
        g_gap_want = 0;
        if (PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 1)
            post_install(PyTuple_GET_ITEM(args, 0));
    }
    Py_RETURN_NONE;
}

/* The forward hook: (module, input, output) -> None.  The forward of a
 * due span returned: the gap begins.  Taken out of the module's hooks
 * here (torch iterates a copy of them); one left behind by a forward that
 * raised is taken out when its module is called again. */
static PyObject *py_fwd_post(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *mod =
        PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 1 ? PyTuple_GET_ITEM(args, 0) : NULL;
    if (!mod)
        Py_RETURN_NONE;
    if (g_post_global && (uintptr_t)mod != g_post_id)
        Py_RETURN_NONE; /* a module inside the forward (torch 1.x's global hook) */
    if (g_post_fired && (uintptr_t)mod == g_post_id)
        Py_RETURN_NONE; /* fired already, left in the dict (hook_out) */
    if (g_post_dict && (uintptr_t)mod == g_post_id && g_thread && thread_ident() == g_thread) {
        int64_t t = now_ns();
        if (g_post_global || hook_out(g_post_dict)) {
            post_remove();
        } else { /* the always_call mark out; the hook itself at post_clear */
            if (g_post_always && PyObject_DelItem(g_post_always, g_post_key) < 0)
                PyErr_Clear();
            Py_CLEAR(g_post_always);
            g_post_fired = 1;
        }
        if (PyTuple_GET_SIZE(args) >= 3 && !tracing())
            outs_note(PyTuple_GET_ITEM(args, 2));
        gap_arm(t);
        Py_RETURN_NONE;
    }
    /* one left on a module by a forward interrupted before it fired */
    PyObject *fh = g_s_fwd_hooks ? PyObject_GetAttr(mod, g_s_fwd_hooks) : NULL;
    if (!fh)
        PyErr_Clear();
    else if (PyDict_Check(fh))
        hook_out(fh);
    Py_XDECREF(fh);
    Py_RETURN_NONE;
}

/* The forward hook as an object: called as py_fwd_post, and pickled
 * (torch.save(model), copy.deepcopy of a module it is on: a forward
 * interrupted by Ctrl-C leaves it there until the next backward pass,
 * optimizer step or arm, since torch's always_call catches an Exception
 * only, not a KeyboardInterrupt) as the debug method of the logger
 * "trainmon.left_hook", a hook that does nothing (nothing is logged below
 * DEBUG) wherever the module is loaded, trainmon there or not. */
typedef struct {
    PyObject_HEAD
} ForwardEnd;

static PyObject *fwdend_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)kwargs;
    return py_fwd_post(self, args);
}

static PyObject *fwdend_reduce(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger =
        logging ? PyObject_CallMethod(logging, "getLogger", "s", "trainmon.left_hook") : NULL;
    PyObject *getattr_fn = PyDict_GetItemString(PyEval_GetBuiltins(), "getattr"); /* borrowed */
    PyObject *r =
        logger && getattr_fn ? Py_BuildValue("(O(Os))", getattr_fn, logger, "debug") : NULL;
    if (!r && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "trainmon: the forward hook cannot be pickled here");
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    return r;
}

static PyMethodDef fwdend_methods[] = {
    {"__reduce__", fwdend_reduce, METH_NOARGS, "as a no-op hook: a logger's debug method"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ForwardEndType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainmon._trainmon.ForwardEnd",
    .tp_basicsize = sizeof(ForwardEnd),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "trainmon: notes the return of a step's first forward (a forward hook)",
    .tp_call = fwdend_call,
    .tp_methods = fwdend_methods,
};

/* ArmedHooks' truth test: the dict's (torch runs the hooks in it when
 * true), and the first forward when armed.  Never raises. */
static int armed_bool(PyObject *d)
{
    if (g_ng_watch && g_fwd_flag)
        ng_call();
    if (g_fwd_armed && g_fwd_flag)
        first_forward();
    if (g_gap_want && g_fwd_flag && !g_gap_entry && g_fwd_hooks == d && in_module_call()) {
        /* a measured span's forward: the pre-hook into the dict now, and
         * true, so that torch runs it with the module (which puts the
         * forward hook on it) a few bytecodes on, in this module call.
         * Nothing is in the dict at any other time: code dynamo traces
         * never finds it (dynamo reads the dict, never calls this), nor
         * does torch.compile's OptimizedModule's test for global hooks
         * (not a module call: the next test is). */
        fwd_flag_type(0);
        if (PyObject_SetItem(d, g_fwd_key, g_fwd_fn) == 0) {
            g_gap_entry = 1;
            return 1;
        }
        PyErr_Clear();
        g_gap_want = 0;
    }
    return PyDict_GET_SIZE(d) != 0;
}

static PyNumberMethods armed_number = {.nb_bool = armed_bool};

/* tp_base (OrderedDict) is set at module init: a static initializer cannot
 * take the address of a type in another module on every platform. */
static PyTypeObject ArmedHooksType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainmon._trainmon.ArmedHooks",
    .tp_doc = "trainmon: torch's global forward pre-hook dict, whose truth test notes the first "
              "forward after a step boundary",
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_number = &armed_number,
};

static PyMethodDef fwd_def = {"_trainmon_first_forward", py_fwd_pre, METH_VARARGS,
                              "trainmon: notes the first forward after a step boundary"};

/* torch.is_grad_enabled is a builtin taking no arguments: its C function
 * is called directly (asked on every batch; the generic call was ~40% of
 * next_exit's instructions).  Anything else is called as an object. */
static PyCFunction g_grad_cfn;
static PyObject *g_grad_cself;

static int grad_enabled(void)
{
    if (!g_grad_on)
        return 1;
    PyObject *r = g_grad_cfn ? g_grad_cfn(g_grad_cself, NULL) : PyObject_CallNoArgs(g_grad_on);
    if (!r) {
        swallow(R_INTERNAL, "torch.is_grad_enabled()");
        return 1;
    }
    int on = r != Py_False;
    Py_DECREF(r);
    return on;
}

static int g_pending_flags; /* threshold callbacks due, for the hook that returns next */
/* The glue's _learn_rank, called once, at the first training step, in a
 * process without a rank: a process group made by an init_process_group
 * bound by name before attach (the wrapper never ran) is up by then */
static PyObject *g_rank_cb;

/* Writes a training step: numbered, into the window, thresholds checked,
 * the allocator sampled (once CUDA is up). */
static void emit_train(tm_inproc_step *s)
{
    s->step = g_written++;
    g_steps = g_written;
    char buf[sizeof(tm_inproc_step)];
    rec_put(TM_REC_STEP, s->end_ns, buf, tm_inproc_encode_step(s, buf, sizeof buf));
    if (s->flags & TM_STEP_ENDED_AT_EXIT)
        return;
    if (g_written == 1 && g_rank < 0 && g_rank_cb) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb); /* (none expected: kept whatever it is) */
        PyObject *r = PyObject_CallNoArgs(g_rank_cb);
        if (r)
            Py_DECREF(r);
        else
            swallow(R_INTERNAL, "learning the rank");
        PyErr_Restore(et, ev, tb);
    }
    tm_follow_step(&g_tally, &g_win, s); /* the one step accounting */
    auto_sample(TM_CAPTURE_STEP, "step", 4, s->end_ns);
    if (g_nth)
        g_pending_flags |= check_thresholds(s->end_ns);
}

static void emit_eval(int64_t start, int64_t end, int64_t wait, uint32_t flags, int32_t batches,
                      int64_t wait_cpu)
{
    if (g_ng_watch) /* a run under no_grad that met eval batches: theirs */
        ng_stop();
    tm_inproc_step s = {.step = g_written,
                        .start_ns = start,
                        .end_ns = end,
                        .data_wait_ns = wait,
                        .flags = flags,
                        .boundary = TM_STEP_BY_LOADER,
                        .phase = TM_STEP_EVAL,
                        .micro_batches = 0,
                        .batches = batches,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = -1,
                        .wait_cpu_ns = wait_cpu,
                        .collective_ns = -1,
                        .prep_fwd_ns = -1,
                        .prep_opt_ns = -1,
                        .nograd_ns = -1,
                        .nograd_calls = -1};
    char buf[sizeof(tm_inproc_step)];
    rec_put(TM_REC_STEP, end, buf, tm_inproc_encode_step(&s, buf, sizeof buf));
    tm_follow_step(&g_tally, &g_win, &s); /* counted apart: eval_steps */
    /* a training step that had done nothing yet starts after the eval run */
    for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++)
        if (g_acc[L].start && !g_acc[L].batches && !g_acc[L].micro)
            g_acc[L].start = end;
}

static void decide(int level)
{
    g_decided = level;
    if (level == TM_STEP_BY_BACKWARD)
        for (int i = 0; i < g_npend; i++)
            emit_train(&g_pend[i]);
    g_npend = 0;
}

static void deliver(int level, tm_inproc_step *s)
{
    if (level == TM_STEP_BY_OPTIMIZER && g_decided != level)
        decide(level);
    if (g_decided == level) {
        emit_train(s);
        if (level == TM_STEP_BY_BACKWARD) /* an optimizer found later starts here */
            g_acc[TM_STEP_BY_OPTIMIZER] = (acc){.start = s->end_ns, .off0 = g_off_batches};
        return;
    }
    if (g_decided > level)
        return;
    g_pend[g_npend++] = *s;
    if (g_npend == PEND_MAX)
        decide(level);
}

static void agent_time(int64_t t0, int64_t d, int64_t cpu);

/* Closes the open step of boundary kind level at t; opt_t0 > 0: the lead
 * optimizer's step (number opt_no) that ends it began then, and is written
 * in the step record (one record a step). */
static void close_acc(int level, int64_t t, uint32_t flags, int64_t opt_t0, long opt_no)
{
    acc *a = &g_acc[level];
    int64_t start = a->start ? a->start : t;
    tm_inproc_step s = {.start_ns = start,
                        .end_ns = t,
                        .data_wait_ns = a->wait,
                        .flags = flags,
                        .boundary = (uint32_t)level,
                        .phase = TM_STEP_TRAIN,
                        .micro_batches = a->micro,
                        .batches = a->batches,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = a->micro ? a->bwd : -1,
                        .wait_cpu_ns = a->wcpu_n ? a->wcpu : -1,
                        .collective_ns = g_coll_seen ? a->coll : -1,
                        .opt_start_ns = opt_t0 > 0 ? opt_t0 : -1,
                        .optimizer = opt_t0 > 0 ? (int32_t)opt_no : -1,
                        .prep_fwd_ns = -1,
                        .prep_opt_ns = -1,
                        .nograd_ns = -1,
                        .nograd_calls = -1};
    if (!a->batches && g_fwd_t >= start && g_fwd_t <= t && g_arm_t <= start &&
        (!g_fwd_armed || g_arm_micro)) {
        /* no DataLoader: the loop prepares its batches, and that is its
         * data wait (the first step's start is its first forward) */
        /* less the zero_grad() calls and the device waits in it (g_hk_ns,
         * their CPU time g_hk_cpu_ns) */
        int64_t hk = g_fwd_hk > g_arm_hk ? g_fwd_hk - g_arm_hk : 0;
        int64_t hkc = g_fwd_hkc > g_arm_hkc ? g_fwd_hkc - g_arm_hkc : 0;
        s.prep_ns = s.data_wait_ns = g_fwd_t - start > hk ? g_fwd_t - start - hk : 0;
        int64_t before = s.prep_ns;
        if (g_arm_t == start && g_arm_cpu >= 0 && g_fwd_cpu >= g_arm_cpu)
            s.prep_cpu_ns = g_fwd_cpu - g_arm_cpu > hkc ? g_fwd_cpu - g_arm_cpu - hkc : 0;
        if (a->prep_more_n) { /* the other micro-batches' preparation */
            s.prep_ns = s.data_wait_ns = s.prep_ns + a->prep_more;
            if (s.prep_cpu_ns >= 0)
                s.prep_cpu_ns =
                    a->prep_more_cpu_n == a->prep_more_n ? s.prep_cpu_ns + a->prep_more_cpu : -1;
        }
        /* The work after the forward is the loop's batch only where the
         * loop does not make it before the forward: more than AFTER_OVER
         * times the span before it (nanoGPT's and nanochat's orders have
         * next to nothing there); a loop that makes its batch there has
         * other work after (a model's own host work, metrics), not a
         * second batch. */
        int64_t gt = (a->gap_n ? a->gap : 0) + (a->tail_n ? a->tail : 0);
        int raw = !g_off_batches && gt > AFTER_OVER * before, after = raw;
        if (!g_off_batches && a->gap_n) /* a measured step: the gap and the tail seen */
            after = order_vote(raw);
        else if (!g_off_batches && g_order) /* the loop's order */
            after = g_order > 0;
        if (a->gap_n && !g_off_batches) /* after the forwards (a measured step) */
            s.prep_fwd_ns = after ? a->gap : 0;
        if (a->gap_n && after) {
            s.prep_ns = s.data_wait_ns = s.prep_ns + a->gap;
            if (s.prep_cpu_ns >= 0)
                s.prep_cpu_ns = a->gap_cpu_n == a->gap_n ? s.prep_cpu_ns + a->gap_cpu : -1;
        }
        if (a->tail_n && after) { /* after the last backward pass */
            s.prep_opt_ns = a->tail;
            s.prep_ns = s.data_wait_ns = s.prep_ns + a->tail;
            if (s.prep_cpu_ns >= 0)
                s.prep_cpu_ns = a->tail_cpu_n == a->tail_n ? s.prep_cpu_ns + a->tail_cpu : -1;
        }
        /* every step measured from now on (on the step's own test: a loop
         * that turns to the order goes on voting) */
        if (!g_gap_on && raw && a->gap * GAP_ON >= t - start && a->gap >= GAP_ON_MIN_NS)
            g_gap_on = 1;
    }
    if (g_ng_ns >= 0 && g_ng_calls > 0 && g_ng_begin >= start && g_ng_end <= t &&
        !(flags & TM_STEP_ENDED_AT_EXIT)) {
        s.nograd_ns = g_ng_ns;
        s.nograd_calls = g_ng_calls;
    }
    g_ng_ns = -1;
    if (g_ng_watch)
        ng_stop(); /* one the step's end met: no span */
    if (g_out_n || g_gap_span >= 0)
        gap_drop(); /* a forward no backward pass followed in the step */
    int own = a->batches;
    if (a->newit > 0)
        s.flags |= TM_STEP_NEW_ITER;
    if (!own && g_off_batches) {
        /* fed by a background thread (train_thread): the batches it
         * fetched meanwhile, and the wait above is the loop's wait for
         * them, not batch preparation of its own */
        s.flags |= TM_STEP_FED_BY_THREAD;
        s.batches = (int32_t)(g_off_batches - a->off0);
        s.prep_ns = s.prep_cpu_ns = -1;
    }
    *a = (acc){.start = t, .off0 = g_off_batches};
    /* The agent's own work of a loop's first steps, after their end: the
     * first record opens the file, the first step learns the rank, and a
     * loop without a DataLoader gets its zero_grad() timed.  0.5 ms on
     * torch 2.13, 1-2.7 ms on 1.13, read as step 1's preparation (and
     * there, 4x a batch made after the forward, none of it: nanoGPT's
     * order read 0 at step 1); agent_time takes it out, as the glue's work
     * at a boundary.  The later steps pay a test. */
    int64_t own0 = 0, own_c0 = -1;
    int fresh = 0; /* the arm below is a new one: its CPU read after that work */
    int next_arm = level == g_level && !own && !(flags & TM_STEP_ENDED_AT_EXIT);
    int zg_due =
        next_arm && !g_zg_tried && g_zg_reg && level >= TM_STEP_BY_BACKWARD && !g_off_batches;
    if (!g_written || zg_due) {
        own0 = now_ns();
        if (g_fwd_armed && (g_arm_micro ? g_marm_cpu : g_arm_cpu) >= 0)
            own_c0 = thread_cpu_ns(); /* an arm read before: its CPU moves too */
    }
    deliver(level, &s);
    if (g_arm_micro) /* a micro-batch span that met no forward: none */
        fwd_disarm();
    if (next_arm) {
        if (zg_due) {
            /* a training loop without a DataLoader: its zero_grad() timed
             * from now on (g_hk_ns), before the next step's span begins */
            g_zg_tried = 1;
            PyObject *r = PyObject_CallNoArgs(g_zg_reg);
            if (r)
                Py_DECREF(r);
            else
                swallow(R_INTERNAL, "zero_grad timing");
        }
        g_gap_due = gap_due(g_written + (uint64_t)g_npend);
        fresh = !g_fwd_armed;
        fwd_arm(t);
    }
    if (own0)
        agent_time(own0, now_ns() - own0,
                   own_c0 >= 0 && !fresh && g_fwd_armed ? thread_cpu_ns() - own_c0 : 0);
}

/* The batch fetched last becomes part of the training steps (a backward
 * pass followed it). */
static void confirm_batch(void)
{
    if (!g_b.have || g_b.added)
        return;
    g_b.added = 1;
    trained_note(g_b.iter);
    for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++) {
        acc *a = &g_acc[L];
        if (!a->start)
            a->start = g_b.entry;
        a->batches++;
        a->newit += g_b.newit;
        a->wait += g_b.exit - g_b.entry;
        if (g_b.cpu >= 0) {
            a->wcpu += g_b.cpu;
            a->wcpu_n++;
        }
    }
}

/* Prefetched batches (issue #14, the framework loops).  accelerate's
 * DataLoaderShard (under the HF Trainer) fetches batch k+1 before it
 * yields batch k, and the HF Trainer with gradient accumulation fetches all
 * the batches of a step before it runs any of them.  So a grad-enabled
 * batch that no backward pass followed before the next fetch is not yet an
 * eval batch: it is held, and the next backward pass makes the held
 * batches of the iterator it trains on (the one that returned a batch
 * last) part of the training step, data wait and all.  A step may take
 * one batch from each of several loaders (`zip(labeled, unlabeled)`, a
 * second loader's `next()` inside the loop: semi-supervised training,
 * domain adaptation, Lightning's CombinedLoader): the one batch held of
 * another iterator is part of the step too.  Two or more held batches of
 * another iterator are an eval loop run with grad enabled: eval batches,
 * written when a batch of another iterator comes back or a backward pass
 * runs, or at their iterator's end (held_stop: there even one batch of an
 * iterator that never trained; an eval loop of one batch with grad enabled
 * that does not run to its end reads as a second loader: its batch joins
 * the next step); so is the oldest when more than
 * HELD_MAX are held (accumulation over more batches: the rest counted as
 * before, as eval).  Before the
 * first backward pass a batch is held only while no module forward has run
 * (a loop that prefetches has run none yet); a loop that fills the hold
 * without one is a data-only loop: its batches are loader steps, written
 * then, and its later ones are never held.  Only a backward pass takes held
 * batches into a step: an optimizer step, the end of a loader loop's epoch
 * (before any backward pass), a dropped iterator and the exit write them
 * as they were before (loader steps, or eval batches). */
#define HELD_MAX 16

typedef struct held {
    uintptr_t iter;
    int64_t entry, exit, end; /* end: the next fetch's entry */
    int64_t cpu;              /* as g_b.cpu */
} held;

static held g_held[HELD_MAX];
static int g_nheld;
static int g_no_hold0; /* a data-only loop: no batch held before a backward pass */

/* A held batch no backward pass took: eval once a backward pass was seen,
 * else a loader step (as settle_batch would have made it). */
static void held_write(const held *h)
{
    if (g_level >= TM_STEP_BY_BACKWARD) {
        emit_eval(h->entry, h->end, h->exit - h->entry, 0, 1, h->cpu);
        return;
    }
    tm_inproc_step s = {.start_ns = h->entry,
                        .end_ns = h->end,
                        .data_wait_ns = h->exit - h->entry,
                        .boundary = TM_STEP_BY_LOADER,
                        .phase = TM_STEP_TRAIN,
                        .micro_batches = 0,
                        .batches = 1,
                        .prep_ns = -1,
                        .prep_cpu_ns = -1,
                        .backward_ns = -1,
                        .wait_cpu_ns = h->cpu,
                        .collective_ns = -1,
                        .prep_fwd_ns = -1,
                        .prep_opt_ns = -1,
                        .nograd_ns = -1,
                        .nograd_calls = -1};
    emit_train(&s);
}

/* Writes the held batches of iterators other than keep that hold two or
 * more (eval runs), and all of them when keep is 0. */
static void held_flush_some(uintptr_t keep)
{
    int n = 0;
    for (int i = 0; i < g_nheld; i++) {
        int runs = 0; /* batches held of this one's iterator */
        for (int j = 0; keep && g_held[i].iter != keep && j < g_nheld; j++)
            runs += g_held[j].iter == g_held[i].iter;
        if (keep && runs < 2)
            g_held[n++] = g_held[i];
        else
            held_write(&g_held[i]);
    }
    g_nheld = n;
}

/* Writes the held batches of iterator it: an eval batch of it came back
 * (a framework's eval loop whose first fetch ran with grad enabled, the
 * rest under no_grad), so they are no batches of a step fed by two loaders. */
static void held_flush_iter(uintptr_t it)
{
    int n = 0;
    for (int i = 0; i < g_nheld; i++) {
        if (g_held[i].iter == it)
            held_write(&g_held[i]);
        else
            g_held[n++] = g_held[i];
    }
    g_nheld = n;
}

/* ...called on every fetch and backward pass, where nothing is held */
static inline void held_flush(uintptr_t keep)
{
    if (g_nheld)
        held_flush_some(keep);
}

/* An iterator ended (StopIteration) after a backward pass was seen: its
 * held batches are eval batches when none of its batches ever trained (an
 * eval loop fetched with grad enabled, as the HF Trainer's, even of one
 * batch), or when a batch of another iterator is held too (the step's
 * batch, fetched before an eval loop with grad enabled ran); else they are
 * the prefetched batches of a last step (the HF Trainer's accumulation
 * over accelerate's prefetching loader), kept. */
static void held_stop(uintptr_t ended)
{
    if (!trained(ended)) {
        held_flush_iter(ended);
        return;
    }
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].iter != ended) {
            held_flush_some(g_held[i].iter);
            return;
        }
}

/* A backward pass on the batches of iterator iter: its held batches and
 * the one held batch of another iterator join the open training steps, the
 * eval runs of others are written.  At the first backward pass, a batch
 * fetched before the iter() that made the batch trained on (since: that
 * run's start; 0 none) trains nothing: a batch looked at before the loop
 * (`next(iter(loader))` for its shape, the tutorial's `dataiter`), left
 * out, else the first step ran from it over the job's set-up (3 s of
 * imports and model building, and the collections in them read as the
 * loop's gc.pauses: 24% of a CIFAR tutorial's loop). */
static void held_confirm(uintptr_t iter, int64_t since)
{
    held_flush(iter);
    for (int i = 0; i < g_nheld; i++) {
        if (since && g_held[i].entry < since)
            continue;
        trained_note(g_held[i].iter);
        for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++) {
            acc *a = &g_acc[L];
            if (!a->start)
                a->start = g_held[i].entry;
            a->batches++;
            a->wait += g_held[i].exit - g_held[i].entry;
            if (g_held[i].cpu >= 0) {
                a->wcpu += g_held[i].cpu;
                a->wcpu_n++;
            }
        }
    }
    g_nheld = 0;
}

/* Holds the batch fetched last, ended at t; 0 when it is not to be held. */
static int held_push(int64_t t)
{
    if (g_level < TM_STEP_BY_BACKWARD && (g_no_hold0 || g_fwd_t))
        return 0;
    if (g_nheld == HELD_MAX) {
        if (g_level < TM_STEP_BY_BACKWARD) { /* a data-only loop */
            g_no_hold0 = 1;
            held_flush(0);
            return 0;
        }
        /* the oldest of the iterator held now (an eval run's, or a long
         * accumulation's), not another's batch that a step may take */
        int old = 0;
        while (old < HELD_MAX - 1 && g_held[old].iter != g_b.iter)
            old++;
        if (g_held[old].iter != g_b.iter)
            old = 0;
        held_write(&g_held[old]);
        memmove(g_held + old, g_held + old + 1, (size_t)(HELD_MAX - 1 - old) * sizeof *g_held);
        g_nheld--;
    }
    g_held[g_nheld++] =
        (held){.iter = g_b.iter, .entry = g_b.entry, .exit = g_b.exit, .end = t, .cpu = g_b.cpu};
    return 1;
}

/* The batch fetched last, at the next fetch (t) or at exit: an eval batch,
 * a loader step (no backward pass seen yet), held (may_hold: a prefetched
 * one, above) or already a training batch. */
static void settle_batch(int64_t t, uint32_t flags, int may_hold)
{
    if (!g_b.have)
        return;
    g_b.have = 0;
    if (g_b.added)
        return;
    int64_t wait = g_b.exit - g_b.entry;
    /* Grad mode not asked at the fetch (a backward pass had been seen):
     * asked now, at the next fetch's entry or at the end.  A loop's fetches
     * run in the same grad mode as the one before (`with torch.no_grad():
     * for x in loader`, or the fetch outside it as the frameworks' eval
     * loops do); torch.is_grad_enabled() is ~170 instructions, and a
     * training batch (one a backward pass took) never needs it. */
    if (g_b.grad < 0)
        g_b.grad = g_b.bwd || grad_enabled();
    if (may_hold && g_b.grad && !g_b.bwd && held_push(t))
        return;
    if (!g_b.grad || (g_level >= TM_STEP_BY_BACKWARD && !g_b.bwd)) {
        if (g_nheld) /* its iterator's held batches: an eval run too */
            held_flush_iter(g_b.iter);
        g_closed = (tm_inproc_step){.start_ns = g_b.entry,
                                    .end_ns = t,
                                    .data_wait_ns = wait,
                                    .phase = TM_STEP_EVAL,
                                    .wait_cpu_ns = g_b.cpu,
                                    .prep_fwd_ns = -1,
                                    .prep_opt_ns = -1,
                                    .nograd_ns = -1,
                                    .nograd_calls = -1};
    } else if (g_level == 0) {
        g_closed = (tm_inproc_step){.start_ns = g_b.entry,
                                    .end_ns = t,
                                    .data_wait_ns = wait,
                                    .boundary = TM_STEP_BY_LOADER,
                                    .phase = TM_STEP_TRAIN,
                                    .micro_batches = 0,
                                    .batches = 1,
                                    .prep_ns = -1,
                                    .prep_cpu_ns = -1,
                                    .backward_ns = -1,
                                    .wait_cpu_ns = g_b.cpu,
                                    .collective_ns = -1,
                                    .prep_fwd_ns = -1,
                                    .prep_opt_ns = -1,
                                    .nograd_ns = -1,
                                    .nograd_calls = -1};
    } else {
        return;
    }
    g_closed.flags = flags | (g_b.newit ? TM_STEP_NEW_ITER : 0);
    g_have_closed = 1;
}

static void write_closed(uint32_t flags)
{
    if (!g_have_closed)
        return;
    g_have_closed = 0;
    g_closed.flags |= flags;
    if (g_closed.phase == TM_STEP_EVAL)
        emit_eval(g_closed.start_ns, g_closed.end_ns, g_closed.data_wait_ns, g_closed.flags, 1,
                  g_closed.wait_cpu_ns);
    else
        emit_train(&g_closed);
}

/* The flags of threshold callbacks due (and bit 16: CUDA came up), taken:
 * the hooks hand them to boundary(), the Python entry points return them. */
static long take_flags(void)
{
    long pending = g_pending_flags;
    g_pending_flags = 0;
    if (g_cuda_news) {
        /* bit 16: CUDA came up; the glue attaches its OOM observer now */
        g_cuda_news = 0;
        pending |= 1 << 16;
    }
    return pending;
}

/* The training thread is the one that runs the backward passes and the
 * optimizer steps.  The first thread to make a tracked call is taken for
 * it (on_thread), but a thread that has only fetched batches so far, a
 * background prefetcher that started first, gives way to the first other
 * thread that trains: what it fetched and held is dropped, not written
 * (its fetch time is no wait of the loop: the loop's wait is its time
 * from a step's start to its first forward, as in a loop without a
 * DataLoader), and its open __next__ is forgotten.  Steps it wrote before
 * (loader steps, only where the loop ran a forward before that first
 * backward pass) stay. */
static void repin(unsigned long th)
{
    /* what it fetched (held, the last one, one being fetched) is batches
     * of another thread, in the prefetcher's queue for the loop */
    g_off_batches += (uint64_t)g_nheld + (g_b.have && !g_b.added) + (g_depth > 0);
    g_thread = th;
    g_depth = 0;
    g_have_closed = 0;
    g_nheld = g_no_hold0 = 0;
    memset(g_trained, 0, sizeof g_trained);
    memset(&g_b, 0, sizeof g_b);
    for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++)
        g_acc[L] = (acc){.off0 = g_off_batches};
    g_repins++;
}

static int train_thread_slow(unsigned long th)
{
    if (th != g_thread) {
        if (g_thread && g_thread_trains)
            return 0;
        if (g_thread)
            repin(th);
        g_thread = th;
    }
    g_thread_trains = 1;
    return 1;
}

/* ...asked at every backward pass and optimizer step: the test inline */
static inline int train_thread(void)
{
    unsigned long th = thread_ident();
    if (__builtin_expect(th == g_thread && g_thread_trains, 1))
        return 1;
    return train_thread_slow(th);
}

/* Entry into DataLoader __next__: the batch fetched before it is settled
 * here (written at the exit, when it is known whether this call raised).
 * Returns the flags of threshold callbacks due (the caller runs them). */
static long next_enter(PyObject *it)
{
    if (__builtin_expect(!on_thread(), 0)) {
        t_off_depth++;
        return 0;
    }
    if (g_depth++ > 0)
        return 0;
    int64_t t = now_ns();
    int joined = 0;
    if (__builtin_expect(g_iter_n > 0, 0)) {
        /* the first batch of an iterator made just before: the step waited
         * for iter() too (new worker processes, the Dataset sent to each,
         * persistent workers resumed), and this call counts from there */
        if (iter_run_open(thread_ident(), t) && g_iter_t0 <= t)
            for (int i = 0; i < g_iter_n && !joined; i++)
                joined = g_iter_its[i] == (uintptr_t)it;
        if (joined)
            t = g_iter_t0;
        g_iter_n = 0;
    }
    g_in_t = t;
    g_in_iter = (uintptr_t)it;
    g_in_newit = joined && g_since_stop;
    g_in_run = joined ? t : 0;
    /* (the wait's CPU is not sampled on a joined call: iter() ran before) */
    g_in_cpu = !joined && g_mp_iter && Py_TYPE(it) == g_mp_iter && cpu_sample_due(&g_recv_tick)
                   ? thread_cpu_ns()
                   : -1;
    settle_batch(t, 0, 1);
    if (g_memstats && !g_cuda_ready)
        cuda_ready();
    return take_flags();
}

static PyObject *py_next_enter(PyObject *self, PyObject *it)
{
    (void)self;
    return PyLong_FromLong(next_enter(it));
}

/* Return from __next__: got is true when a batch came back, false when it
 * raised (StopIteration: the loader is done). */
static void next_exit(PyObject *arg)
{
    int got = arg != Py_False && arg != Py_None; /* the iterator, or False */
    if (__builtin_expect(thread_ident() != g_thread, 0)) {
        if (t_off_depth > 0 && --t_off_depth == 0 && got)
            g_off_batches++;
        return;
    }
    if (g_depth <= 0 || --g_depth > 0)
        return;
    int64_t t = now_ns();
    if (got)
        held_flush((uintptr_t)arg); /* an eval run with grad enabled ended, or began */
    else if (g_level < TM_STEP_BY_BACKWARD)
        held_flush(0); /* a loader loop's epoch ended: its held steps */
    else if (g_nheld)
        held_stop(g_in_iter);
    write_closed(got ? 0 : TM_STEP_ENDED_BY_STOP);
    g_since_stop = got;
    if (got) {
        g_b.newit = g_in_newit;
        g_b.first = !g_fetched;
        g_b.run = g_in_run;
        g_fetched = 1;
        g_b.have = 1;
        g_b.added = 0;
        g_b.bwd = 0;
        g_b.entry = g_in_t;
        g_b.iter = (uintptr_t)arg;
        g_b.exit = t;
        g_b.cpu = -1;
        if (g_in_cpu >= 0) {
            int64_t c = thread_cpu_ns();
            g_b.cpu = c >= g_in_cpu ? c - g_in_cpu : -1;
        }
        /* Grad mode at the fetch: asked here before the first backward
         * pass (a loader loop's steps, the first batches held) and for an
         * iterator none of whose batches trained yet (an eval loop's, a
         * `next(val_it)` under no_grad between training fetches: asked at
         * the next fetch, a training one, its grad mode would be
         * training's); after it, of the iterators that train only a batch
         * that no backward pass took needs it, and settle_batch asks then
         * (see there) */
        g_b.grad =
            g_level < TM_STEP_BY_BACKWARD || !is_trained((uintptr_t)arg) ? grad_enabled() : -1;
        g_steps = g_written + 1;
        g_n_batches++;
    }
}

static PyObject *py_next_exit(PyObject *self, PyObject *arg)
{
    (void)self;
    next_exit(arg);
    Py_RETURN_NONE;
}

/* torch.autograd.backward entered / returned on the training thread. */
static void backward_enter(PyObject *roots)
{
    if (!train_thread() || g_bdepth++ > 0)
        return;
    int64_t t = now_ns();
    /* prefetched batches of the iterator it trains on */
    held_confirm(g_b.iter, g_level < TM_STEP_BY_BACKWARD && g_b.have ? g_b.run : 0);
    if (g_level < TM_STEP_BY_BACKWARD)
        g_level = TM_STEP_BY_BACKWARD;
    confirm_batch();
    if (g_b.have)
        g_b.bwd++;
    for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++) {
        acc *a = &g_acc[L];
        if (!a->start) /* the first step: from its first forward when seen */
            a->start = g_fwd_t && g_fwd_t <= t ? g_fwd_t : t;
        a->micro++;
    }
    g_bwd_t0 = t;
    g_steps = g_written + 1;
    /* (each looked at here first: a DataLoader loop's backward pass, 4 a
     * step with gradient accumulation, has none of them, and calls none) */
    if (g_ng_watch)
        ng_end();  /* a backward pass before a forward with grad seen */
    if (g_arm_gap) /* the work after the forward ends */
        gap_take(t);
    if (g_gap_span >= 0 || g_out_n)
        gap_settle(roots);
    if (g_post_dict)
        post_clear(); /* a forward hook that never fired */
    if (g_arm_micro)  /* a second backward pass without a forward: no preparation */
        fwd_disarm();
}

static PyObject *py_backward_enter(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    backward_enter(NULL);
    Py_RETURN_NONE;
}

static long backward_exit(void)
{
    if (thread_ident() != g_thread || g_bdepth <= 0 || --g_bdepth > 0)
        return 0;
    int64_t t = g_decided <= TM_STEP_BY_BACKWARD ? step_end_ns() : now_ns();
    g_n_bwd++;
    if (g_bwd_t0 && t > g_bwd_t0)
        for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++)
            g_acc[L].bwd += t - g_bwd_t0;
    g_bwd_t0 = 0;
    if (g_decided <= TM_STEP_BY_BACKWARD)
        close_acc(TM_STEP_BY_BACKWARD, t, 0, 0, 0);
    else if (g_level == TM_STEP_BY_OPTIMIZER && !g_acc[TM_STEP_BY_OPTIMIZER].batches &&
             !g_off_batches && !g_in_eval && !g_opt_t0)
        fwd_arm_micro(t); /* the next micro-batch's preparation, if one comes (not
                           * inside an optimizer step: LBFGS's closure) */
    return take_flags();
}

static PyObject *py_backward_exit(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return PyLong_FromLong(backward_exit());
}

/* A blocking torch.distributed collective (all_reduce, barrier, ...)
 * called on the training thread: its wall time is the step's
 * collective_ns (the time this rank waited for the others, mostly). */
static PyObject *py_coll_enter(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    if (g_thread && thread_ident() == g_thread && g_cdepth++ == 0) {
        g_coll_t0 = now_ns();
        g_coll_seen = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *py_coll_exit(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    if (!g_thread || thread_ident() != g_thread || g_cdepth <= 0 || --g_cdepth > 0)
        Py_RETURN_NONE;
    int64_t t = now_ns();
    if (g_coll_t0 && t > g_coll_t0) {
        for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++)
            g_acc[L].coll += t - g_coll_t0;
        g_coll_ns += t - g_coll_t0;
    }
    g_coll_t0 = 0;
    Py_RETURN_NONE;
}

/* Eval without a DataLoader: module.eval() ... module.train() (the
 * outermost calls, on the training thread; the glue wraps Module.train).
 * A span in which a module forward ran and no DataLoader batch was fetched
 * is one eval record (batches 0); a training step that had done nothing
 * yet starts where it ended (emit_eval), and the first-forward hook is
 * armed again there to time the next step's batch preparation. */
static int g_shut; /* shutdown ran: nothing more is closed */
static int64_t g_eval_t0;
static int64_t g_eval_skip; /* the agent's and saves' time inside the span (agent_time) */
static uint64_t g_eval_nb;  /* g_n_batches at the span's start */

static PyObject *py_train_mode(PyObject *self, PyObject *arg)
{
    (void)self;
    int mode = PyObject_IsTrue(arg);
    if (mode < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!g_thread || thread_ident() != g_thread || g_shut)
        Py_RETURN_NONE;
    if (!mode) {
        if (g_in_eval)
            Py_RETURN_NONE;
        g_in_eval = 1;
        g_eval_t0 = now_ns();
        g_eval_skip = 0;
        g_eval_nb = g_n_batches;
        ng_stop(); /* a rollout under model.eval() is an eval span */
        fwd_disarm();
        fwd_arm(g_eval_t0); /* to see whether a forward runs in the span */
        Py_RETURN_NONE;
    }
    if (!g_in_eval)
        Py_RETURN_NONE; /* model.train() at every step (HF Trainer): nothing to do */
    g_in_eval = 0;
    int64_t t = now_ns();
    int ran = !g_fwd_armed && g_fwd_t >= g_eval_t0;
    if (g_level < TM_STEP_BY_BACKWARD)
        Py_RETURN_NONE; /* before training, or a loader-ended loop: its eval batches tell */
    if (ran && g_n_batches == g_eval_nb) /* without the saves in it: no eval time */
        emit_eval(g_eval_t0 + g_eval_skip < t ? g_eval_t0 + g_eval_skip : t, t, 0, 0, 0, -1);
    /* the hook again for the next step's preparation (timed only from a
     * start the span moved to t: a step with work before it keeps its) */
    fwd_disarm();
    if (!g_acc[g_level].batches) {
        fwd_arm(t);
    }
    Py_RETURN_NONE;
}

/* loader_dropped(iterator): a DataLoader iterator is being deleted (its
 * __del__).  A loop that `break`s drops its iterator right there: in a
 * loop ended by the loader (no backward pass seen), the step of the batch
 * that iterator returned last ends now instead of being lost at exit. */
static int g_iter_hold; /* a run of iter() calls was open when a __del__ began */
/* `next(iter(loader))`: the iterator dropped as its first batch comes back
 * (within DEL_JOIN_NS of the fetch's end, on the training thread, before
 * any step took the batch).  Its __del__ stops the workers its iter()
 * started (15 ms for 2 here), and that is the loop's time on its loader:
 * the batch's fetch ends when the iterator is gone (py_loader_gone), not
 * at the __next__'s return, where that time read as compute (66% of the
 * step for a job that timed 94%). */
#define DEL_JOIN_NS 1000000LL
static int64_t g_del_t0;
static uintptr_t g_del_it;

static PyObject *py_loader_dropped(PyObject *self, PyObject *it)
{
    (void)self;
    g_del_t0 = 0;
    if (!g_shut && g_b.have && !g_b.added && g_b.iter == (uintptr_t)it &&
        thread_ident() == g_thread) {
        int64_t t = now_ns();
        if (t - g_b.exit <= DEL_JOIN_NS) {
            g_del_t0 = t;
            g_del_it = (uintptr_t)it;
        }
    }
    g_iter_hold = !g_shut && iter_run_open(thread_ident(), now_ns());
    if (g_shut || !g_thread || thread_ident() != g_thread || g_depth > 0)
        Py_RETURN_NONE;
    trained_forget((uintptr_t)it);
    if (!g_b.have || g_b.added || g_b.iter != (uintptr_t)it)
        Py_RETURN_NONE;
    if (g_b.grad < 0) {
        /* Its grad mode, not asked at the fetch (settle_batch), is asked
         * now: an eval loop under torch.no_grad() that breaks drops its
         * iterator inside the no_grad block, while the next fetch (of a new
         * iterator that may reuse this one's address) runs outside it. */
        g_b.grad = g_b.bwd || grad_enabled();
    }
    if (g_level != 0)
        Py_RETURN_NONE;
    /* `next(iter(loader))` in a loop without a backward pass, after the
     * first, or the first batch of any loop: the batch dropped with its
     * iterator at once is in use, not broken off by a `break` (which ends
     * an iterator that made batches before); the next fetch ends its step,
     * or a backward pass takes it, its wait to the end of this __del__
     * (py_loader_gone).  (The first batch of a `next(iter(loader))` loop
     * was written as a loader step of its fetch alone, and its forward,
     * backward and optimizer step as the next: 41 steps for 40.  A batch
     * peeked at before the loop, `next(iter(loader))` for its shapes, is
     * held, and the loop's first backward pass leaves it out
     * (held_confirm): no step of its own before the loop's.) */
    if (g_del_t0 && (g_b.newit || g_b.first))
        Py_RETURN_NONE;
    int64_t t = now_ns();
    /* `it = iter(loader)` over a broken-off epoch: the new iterator was
     * made before this one went, and the next step counts from its iter()
     * (next_enter): this one ended there */
    if (iter_run_open(g_thread, t) && g_iter_t0 >= g_b.exit && g_iter_t0 <= t)
        t = g_iter_t0;
    held_flush(0);
    settle_batch(t, 0, 0);
    write_closed(0);
    g_pending_flags = 0; /* no callbacks from a finalizer */
    Py_RETURN_NONE;
}

/* loader_gone(): a DataLoader iterator's __del__ finished (a
 * multi-process one stops its workers there, 20-30 ms for 4 here).
 * Dropped while a run of iter() calls was open (`it = iter(loader)` over a
 * broken-off epoch), that is time the loop spends on its loader before the
 * first batch: the run stays open from here. */
static PyObject *py_loader_gone(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    if (g_iter_hold && !g_shut && g_iter_n > 0 && g_iter_th == thread_ident())
        g_iter_t1 = now_ns();
    g_iter_hold = 0;
    if (g_del_t0 && !g_shut && g_b.have && !g_b.added && g_b.iter == g_del_it &&
        thread_ident() == g_thread)
        g_b.exit = now_ns(); /* the fetch lasted until its iterator was gone */
    g_del_t0 = 0;
    Py_RETURN_NONE;
}

static void gc_totals(void);

/* At exit: what is still open ends now (and counts for nothing). */
static PyObject *py_shutdown(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    pid_t me = getpid();
    if (g_rec_pid != me && !(g_lazy.pid == me && !g_rec)) /* opened, or to open lazily here */
        Py_RETURN_NONE;
    g_shut = 1;
    int64_t t = now_ns();
    write_closed(0);
    held_flush(0);
    settle_batch(t, 0, 0);
    write_closed(TM_STEP_ENDED_AT_EXIT);
    if (!g_decided && g_level == TM_STEP_BY_BACKWARD)
        decide(TM_STEP_BY_BACKWARD);
    if (g_decided >= TM_STEP_BY_BACKWARD) {
        acc *a = &g_acc[g_decided];
        if (a->batches || a->micro)
            close_acc(g_decided, t, TM_STEP_ENDED_AT_EXIT, 0, 0);
    }
    ng_stop();
    fwd_disarm();
    post_clear();
    gap_drop();
    g_pending_flags = 0;
    /* A process that ran the model tells what boundaries it saw, so that
     * a report with no steps can say why (docs/DIAGNOSIS.md,
     * steps.unsegmented); one that did nothing (torchrun's agent) writes
     * nothing, and gets no file. */
    if (g_fwd_t || g_n_batches || g_n_bwd || g_n_opt || g_n_fetch || g_n_optmade) {
        char js[320];
        snprintf(js, sizeof js,
                 "{\"loader_batches\":%llu,\"backward_passes\":%llu,\"optimizer_steps\":%llu,"
                 "\"forward_seen\":%s,\"steps\":%llu,\"fetches\":%llu,\"optimizers_made\":%llu}",
                 (unsigned long long)g_n_batches, (unsigned long long)g_n_bwd,
                 (unsigned long long)g_n_opt, g_fwd_t ? "true" : "false",
                 (unsigned long long)g_written, (unsigned long long)g_n_fetch,
                 (unsigned long long)g_n_optmade);
        lazy_open();
        if (g_rec)
            tm_rec_event(g_rec, 0, "inproc.boundaries", js);
    }
    if (g_fwd_armed && g_arm_micro)
        gc_unprep(); /* a micro-batch span open at the end: no step's */
    gc_totals();
    Py_RETURN_NONE;
}

static PyObject *py_reset_steps(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    ng_stop();
    g_ng_ns = -1;
    fwd_disarm();
    post_clear();
    gap_drop();
    g_gap_on = g_gap_due = g_gap_want = 0;
    g_order = g_order_against = 0;
    g_coll_ns = 0;
    g_thread = 0;
    g_thread_trains = 0;
    g_off_batches = g_repins = 0;
    g_depth = g_bdepth = g_cdepth = 0;
    g_bwd_t0 = g_coll_t0 = 0;
    g_coll_seen = 0;
    g_n_batches = g_n_bwd = g_n_opt = g_n_fetch = g_n_optmade = 0;
    g_opt_calls = g_n_skipped = g_opt_seen = 0;
    g_anatomy_again = 0;
    g_ampdepth = 0;
    g_fetch_off = 0;
    g_in_eval = 0;
    g_in_cpu = -1;
    g_iter_n = 0;
    g_since_stop = g_in_newit = 0;
    g_in_run = 0;
    g_fetched = 0;
    g_del_t0 = 0;
    g_have_closed = 0;
    memset(&g_b, 0, sizeof g_b);
    memset(g_acc, 0, sizeof g_acc);
    g_level = g_decided = g_npend = 0;
    g_nheld = g_no_hold0 = 0;
    memset(g_trained, 0, sizeof g_trained);
    g_lead = g_last_opt = -1;
    g_fwd_t = 0;
    g_written = 0;
    g_shut = 0;
    tm_steptally_init(&g_tally);
    g_win.n = 0;
    Py_RETURN_NONE;
}

/* bind_steps(global_forward_pre_hooks, is_grad_enabled[, mp_iter_type[,
 * global_forward_hooks[, module_call_codes[, get_tracing_state]]]]): what
 * the step model needs of torch (None: not there); arms the first-forward
 * hook.
 * module_call_codes: a tuple of the code objects of Module._call_impl and
 * of the `inner` function it defines (torch >= 2.0). */
static PyObject *py_bind_steps(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *hooks, *grad, *mp = Py_None, *fwdh = Py_None, *code = Py_None, *trc = Py_None,
                            *apply = Py_None;
    if (!PyArg_ParseTuple(args, "OO|OOOOO", &hooks, &grad, &mp, &fwdh, &code, &trc, &apply))
        return NULL;
    Py_CLEAR(g_fn_apply);
    if (PyCode_Check(apply)) {
        Py_INCREF(apply);
        g_fn_apply = apply;
    }
    Py_CLEAR(g_tracing);
    if (trc != Py_None && PyCallable_Check(trc)) {
        Py_INCREF(trc);
        g_tracing = trc;
    }
    Py_CLEAR(g_mp_iter);
    if (PyType_Check(mp)) {
        Py_INCREF(mp);
        g_mp_iter = (PyTypeObject *)mp;
    }
    ng_stop();
    fwd_disarm();
    post_clear();
    gap_drop();
    g_gap_due = 0;
    Py_CLEAR(g_global_fwd_hooks);
    if (fwdh != Py_None && PyDict_Check(fwdh)) {
        Py_INCREF(fwdh);
        g_global_fwd_hooks = fwdh;
    }
    Py_CLEAR(g_call_codes);
    if (PyTuple_Check(code)) {
        Py_INCREF(code);
        g_call_codes = code;
    }
    Py_CLEAR(g_fwd_hooks);
    Py_CLEAR(g_grad_on);
    g_grad_cfn = NULL;
    g_grad_cself = NULL;
    if (!g_fwd_key)
        g_fwd_key = PyUnicode_InternFromString("trainmon.first_forward");
    if (!g_fwd_fn)
        g_fwd_fn = PyCFunction_New(&fwd_def, NULL);
    if (!g_post_key)
        g_post_key = PyUnicode_InternFromString("trainmon.forward_end");
    if (!g_post_fn)
        g_post_fn = PyType_GenericNew(&ForwardEndType, NULL, NULL);
    if (!g_s_fwd_hooks)
        g_s_fwd_hooks = PyUnicode_InternFromString("_forward_hooks");
    if (!g_s_fwd_always)
        g_s_fwd_always = PyUnicode_InternFromString("_forward_hooks_always_called");
    if (!g_s_grad_fn)
        g_s_grad_fn = PyUnicode_InternFromString("grad_fn");
    if (!g_s_next_fns)
        g_s_next_fns = PyUnicode_InternFromString("next_functions");
    if (!g_s_torch)
        g_s_torch = PyUnicode_InternFromString("torch");
    if (!g_s_metadata)
        g_s_metadata = PyUnicode_InternFromString("metadata");
    if (!g_s_numel)
        g_s_numel = PyUnicode_InternFromString("numel");
    if (!g_s_input_md)
        g_s_input_md = PyUnicode_InternFromString("_input_metadata");
    if (!g_s_shape)
        g_s_shape = PyUnicode_InternFromString("shape");
    if (!g_fwd_key || !g_fwd_fn || !g_post_key || !g_post_fn || !g_s_fwd_hooks || !g_s_grad_fn ||
        !g_s_next_fns || !g_s_torch || !g_s_metadata || !g_s_fwd_always || !g_s_numel ||
        !g_s_input_md || !g_s_shape)
        return NULL;
    if (hooks != Py_None && PyMapping_Check(hooks)) {
        Py_INCREF(hooks);
        g_fwd_hooks = hooks;
    }
    g_fwd_flag = g_fwd_hooks && Py_IS_TYPE(g_fwd_hooks, &ArmedHooksType);
    fwd_flag_type(0); /* an OrderedDict until armed */
    if (grad != Py_None && PyCallable_Check(grad)) {
        Py_INCREF(grad);
        g_grad_on = grad;
        if (PyCFunction_Check(grad) &&
            (PyCFunction_GET_FLAGS(grad) & (METH_VARARGS | METH_FASTCALL | METH_NOARGS | METH_O |
                                            METH_KEYWORDS | METH_METHOD)) == METH_NOARGS) {
            g_grad_cfn = PyCFunction_GET_FUNCTION(grad);
            g_grad_cself = PyCFunction_GET_SELF(grad); /* borrowed: grad holds it */
        }
    }
    fwd_arm(now_ns());
    Py_RETURN_NONE;
}

/* steps: begun; steps_closed: closed by the loop; steps_counted: complete
 * steps as the report counts them; data_wait_fraction: the whole run's, as
 * the report's (None before a complete step); recent_*: sums over the last
 * WINDOW_MAX judged steps. */
static PyObject *py_stats(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    double dur, wait;
    tm_stepwin_sum(&g_win, WINDOW_MAX, &dur, &wait);
    double frac = tm_steptally_wait_fraction(&g_tally);
    /* the agent's clock: "tsc" (counter reads converted), "tsc (calibrating)",
     * or "clock_gettime: " and why the counter is not used */
    char clk[160];
    if (g_clk.state == TM_FASTCLOCK_ON)
        snprintf(clk, sizeof clk, "tsc");
    else if (g_clk.state == TM_FASTCLOCK_CALIB)
        snprintf(clk, sizeof clk, "tsc (calibrating)");
    else
        snprintf(clk, sizeof clk, "clock_gettime: %s", g_clk.off_why ? g_clk.off_why : "off");
    PyObject *d = Py_BuildValue(
        "{s:K,s:K,s:K,s:d,s:d,s:s,s:s,s:K,s:K,s:I,s:K,s:K,s:K,s:O}", "steps",
        (unsigned long long)g_steps, "steps_closed", (unsigned long long)g_tally.steps,
        "steps_counted", (unsigned long long)tm_steptally_total(&g_tally, false),
        "recent_data_wait_s", wait, "recent_step_time_s", dur, "run_dir", g_run_dir, "clock", clk,
        "clock_tsc_reads", (unsigned long long)g_clk.tsc_reads, "clock_anchors",
        (unsigned long long)g_clk.anchors, "clock_recalibrations", (unsigned int)g_clk.recalibs,
        "thread_fed_batches", (unsigned long long)g_off_batches, "thread_repins",
        (unsigned long long)g_repins, "optimizer_steps_skipped", (unsigned long long)g_n_skipped,
        "after_forward_every_step", g_gap_on ? Py_True : Py_False);
    PyObject *f = isnan(frac) ? (Py_INCREF(Py_None), Py_None) : PyFloat_FromDouble(frac);
    if (!d || !f || PyDict_SetItemString(d, "data_wait_fraction", f) < 0) {
        Py_XDECREF(d);
        d = NULL;
    }
    Py_XDECREF(f);
    return d;
}

static PyObject *py_add_threshold(PyObject *self, PyObject *args)
{
    (void)self;
    const char *name;
    double above;
    int window;
    if (!PyArg_ParseTuple(args, "sdi", &name, &above, &window))
        return NULL;
    if (strncmp(name, "trainmon_", 9) == 0)
        name += 9;
    int metric = -1;
    for (size_t i = 0; i < sizeof metric_names / sizeof metric_names[0]; i++)
        if (strcmp(name, metric_names[i].name) == 0)
            metric = metric_names[i].metric;
    if (metric < 0) {
        PyErr_Format(PyExc_ValueError, "trainmon: unknown metric %s", name);
        return NULL;
    }
    if (g_nth >= THRESH_MAX) {
        PyErr_SetString(PyExc_ValueError, "trainmon: too many thresholds (32)");
        return NULL;
    }
    if (window < 1)
        window = 1;
    if (window > WINDOW_MAX)
        window = WINDOW_MAX;
    g_th[g_nth] = (thresh){.metric = metric, .above = above, .window = window, .armed = 1};
    if (metric == M_HOST_RSS)
        g_need_rss = 1;
    return PyLong_FromLong(g_nth++);
}

static PyObject *py_clear_thresholds(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    g_nth = 0;
    g_need_rss = 0;
    Py_RETURN_NONE;
}

/* [(index, value, step)] of the thresholds that fired; clears them. */
static PyObject *py_take_pending(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    PyObject *l = PyList_New(0);
    if (!l)
        return NULL;
    for (int i = 0; i < g_nth; i++) {
        if (!g_th[i].pending)
            continue;
        g_th[i].pending = 0;
        PyObject *t = Py_BuildValue("(idK)", i, g_th[i].value, (unsigned long long)g_th[i].step);
        if (!t || PyList_Append(l, t) < 0) {
            Py_XDECREF(t);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(t);
    }
    return l;
}

/* ------------------------------------------------------------- phases */

static void phase_rec(uint32_t kind, PyObject *name, int depth, int64_t t)
{
    Py_ssize_t n;
    const char *s = utf8(name, &n);
    char buf[64 + TM_INPROC_NAME_MAX];
    tm_inproc_phase p = {.kind = kind,
                         .depth = (uint32_t)depth,
                         .step = g_steps,
                         .name = s,
                         .name_len = (uint16_t)(n > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : n)};
    rec_put(TM_REC_PHASE, t, buf, tm_inproc_encode_phase(&p, buf, sizeof buf));
    auto_sample(TM_CAPTURE_PHASE, s, n, t);
}

static PyObject *py_phase_enter(PyObject *self, PyObject *name)
{
    (void)self;
    if (!PyUnicode_Check(name))
        Py_RETURN_NONE;
    int64_t t = now_ns();
    if (g_nphase < PHASE_MAX) {
        Py_INCREF(name);
        g_phase[g_nphase] = name;
    }
    g_nphase++;
    phase_rec(TM_PHASE_ENTER, name, g_nphase, t);
    Py_RETURN_NONE;
}

static PyObject *py_phase_exit(PyObject *self, PyObject *name)
{
    (void)self;
    if (g_nphase <= 0 || !PyUnicode_Check(name))
        Py_RETURN_NONE;
    phase_rec(TM_PHASE_EXIT, name, g_nphase, now_ns());
    g_nphase--;
    if (g_nphase < PHASE_MAX)
        Py_CLEAR(g_phase[g_nphase]);
    Py_RETURN_NONE;
}

static PyObject *current_phase(void)
{
    int k = g_nphase < PHASE_MAX ? g_nphase : PHASE_MAX;
    return k > 0 ? g_phase[k - 1] : NULL;
}

static PyObject *py_current_phase(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    PyObject *p = current_phase();
    if (!p)
        Py_RETURN_NONE;
    Py_INCREF(p);
    return p;
}

/* ------------------------------------------------------------ optimizer */

static PyObject *py_opt_pre(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    g_opt_t0 = now_ns();
    opt_began(g_opt_t0);
    g_opt_began++;
    Py_RETURN_NONE;
}

/* Memory anatomy (issue #16): whether the glue's anatomy is due at the
 * lead optimizer's n-th step, as bit 17 of the boundary flags: at the first
 * (the optimizer's state exists from then on) and every 4096th after, when
 * the glue walks the optimizer's tensors (a cost of its own,
 * docs/DIAGNOSIS.md "Memory anatomy") and writes records only if the bytes
 * changed.  The other steps cost this test: the agent's budget per step
 * (bench/agent_cost.py, 1 us) has no room for a walk, and a 256-step block
 * measured after a warm-up sees none. */
#define ANATOMY_DUE_FLAG (1 << 17)
#define ANATOMY_EVERY 4096u
static int anatomy_due(uint64_t n)
{
    return n == 1 || (n && n % ANATOMY_EVERY == 0) ? ANATOMY_DUE_FLAG : 0;
}

/* opt_post(optimizer number): the optimizer step that began at g_opt_t0
 * ended now.  The lead optimizer's on the training thread ends the step,
 * and is written in its step record (opt_start_ns, optimizer: one record
 * a step, where there were two); any other is written as an
 * optimizer-step record of its own.  Returns the flags of threshold
 * callbacks due. */
static long opt_end(long no, uint32_t flags)
{
    int64_t t = step_end_ns();
    int64_t t0 = g_opt_t0 ? g_opt_t0 : t;
    g_opt_t0 = 0;
    /* The lead optimizer ends steps: the first to step, or one that steps
     * twice in a row (the lead was replaced by a new optimizer). */
    int mine = train_thread();
    int lead = mine && (g_lead < 0 || no == g_lead || no == g_last_opt);
    if (mine)
        g_last_opt = no;
    if (!lead && (flags & TM_STEP_SKIPPED))
        return 0; /* another optimizer's skipped step: no step of its own to write */
    if (!lead) {
        tm_inproc_optstep o = {
            .step = g_steps, .start_ns = t0, .end_ns = t, .optimizer = (uint32_t)no};
        char buf[64];
        rec_put(TM_REC_OPTSTEP, t, buf, tm_inproc_encode_optstep(&o, buf, sizeof buf));
        return 0;
    }
    g_lead = no;
    held_flush(0); /* no backward pass took them: as they were before */
    g_level = TM_STEP_BY_OPTIMIZER;
    confirm_batch();
    close_acc(TM_STEP_BY_OPTIMIZER, t, flags, t0, no);
    if (flags & TM_STEP_SKIPPED) {
        g_n_skipped++;
        return take_flags();
    }
    g_n_opt++;
    g_pending_flags |= anatomy_due(g_n_opt); /* memory anatomy (#16): the one line here */
    return take_flags();
}

/* An optimizer's first (not skipped) step after the lead's first: its
 * state exists from now on, and the memory anatomy is due again at the
 * next boundary so that its tensors are counted (a GAN's generator, a
 * second optimizer made later), at most ANATOMY_AGAIN_MAX times a process
 * (a loop that makes a new optimizer every step walks no more than that). */
#define ANATOMY_AGAIN_MAX 8

static long opt_post(long no)
{
    g_opt_calls++;
    uint64_t bit = 1ull << (no & 63);
    if (!(g_opt_seen & bit) && g_n_opt && g_anatomy_again < ANATOMY_AGAIN_MAX) {
        g_anatomy_again++;
        g_pending_flags |= ANATOMY_DUE_FLAG;
    }
    g_opt_seen |= bit;
    return opt_end(no, 0);
}

static PyObject *py_opt_post(PyObject *self, PyObject *arg)
{
    (void)self;
    long no = PyLong_Check(arg) ? PyLong_AsLong(arg) : 0;
    if (no < 0) {
        PyErr_Clear();
        no = 0;
    }
    return PyLong_FromLong(opt_post(no));
}

/* ------------------------------------------------ hooks that torch calls
 *
 * The agent's cost per step (bench/agent_loops.py, docs/BENCHMARKS.md) was
 * mostly the Python frames between torch and the functions above: a Python
 * wrapper costs more instructions per call than the step model's own work.
 * torch calls these directly instead: the optimizer step hooks are
 * builtins, the wrappers of an optimizer's step and of DataLoader __next__
 * are Hook objects that call the step model and the original from C, and
 * backward passes are timed inside torch's autograd engine ("the autograd
 * engine" below; a Hook around torch.autograd.backward where that engine
 * is not as expected).  They do what the glue's Python wrappers did: an error of trainmon's
 * is said once and never raised into the job, the original's own result
 * or exception passes through unchanged, and threshold callbacks run at
 * the boundary through the glue's _boundary(flags).
 */

static PyObject *g_boundary; /* the glue's _boundary(flags); raises only a BaseException */
static int g_agent_busy;     /* in the glue's own work at a boundary (no step's time) */
static PyObject *g_opt_no;   /* the glue's _opt_no(optimizer) -> the optimizer's number */

/* The glue's work at a step boundary, when the step model asks for it
 * (flags from take_flags: nonzero only then, so that a step without work
 * for the glue makes no Python object).  An error of trainmon's (an
 * Exception) is said once and dropped; what is not an Exception
 * (KeyboardInterrupt from the job's Ctrl-C arriving while the glue runs,
 * SystemExit from a threshold callback that stops the job) is the job's:
 * left set, and -1, so that the hook raises it into the job once torch's
 * call has returned (pass_through). */
/* The glue's own work at a boundary (the memory anatomy's walk and its
 * one pass over the live objects, attaching the OOM observer) is the
 * agent's time, not the job's: the steps open then begin that much later,
 * as does a fetch in progress and the preparation span, so that no step,
 * data wait or batch preparation holds it (a 20-90 ms pass at the lead's
 * first step read as the next step's preparation or compute: the job's own
 * clock, which starts after optimizer.step() returns, never sees it;
 * tests/e2e/real_loops.sh).  Threshold callbacks are the job's code, and
 * their time stays where it fell. */
static void agent_time(int64_t t0, int64_t d, int64_t cpu)
{
    /* Work that came after the step's first forward (a save mid-step, in
     * a loop without a DataLoader): the forward moves with the start, so
     * that the step keeps its preparation (g_fwd_t - start) and the CPU
     * sample taken at its start (g_arm_t == start) */
    int fwd_in = 0, arm_at = 0;
    for (int L = TM_STEP_BY_BACKWARD; L <= TM_STEP_BY_OPTIMIZER; L++) {
        if (!g_acc[L].start || g_acc[L].start > t0)
            continue;
        int fwd_done = !g_fwd_armed || g_arm_micro; /* the step's first forward ran */
        if (fwd_done && g_fwd_t && g_acc[L].start <= g_fwd_t && g_fwd_t <= t0)
            fwd_in = 1;
        if (fwd_done && g_arm_t == g_acc[L].start)
            arm_at = 1;
        g_acc[L].start += d;
    }
    if (fwd_in)
        g_fwd_t += d;
    if (arm_at)
        g_arm_t += d;
    if (g_fwd_armed && !g_arm_micro && g_arm_t <= t0) {
        g_arm_t += d;
        if (g_arm_cpu >= 0 && cpu > 0)
            g_arm_cpu += cpu;
    }
    if (g_fwd_armed && g_arm_micro && g_marm_t <= t0) {
        g_marm_t += d;
        if (g_marm_cpu >= 0 && cpu > 0)
            g_marm_cpu += cpu;
    }
    if (g_depth > 0 && g_in_t && g_in_t <= t0) /* taken at a fetch's entry */
        g_in_t += d;
    if (g_in_eval && g_eval_t0 <= t0) /* no eval time either (py_train_mode) */
        g_eval_skip += d;
}

static int boundary_work(long flags)
{
    if (!g_boundary)
        return 0;
    int own = !(flags & 0xFFFF); /* no threshold callback due: all of it the agent's */
    int64_t t0 = own ? now_ns() : 0;
    int64_t c0 =
        own && g_fwd_armed && (g_arm_micro ? g_marm_cpu : g_arm_cpu) >= 0 ? thread_cpu_ns() : -1;
    PyObject *f = PyLong_FromLong(flags);
    g_agent_busy += own;
    PyObject *r = f ? PyObject_CallOneArg(g_boundary, f) : NULL;
    g_agent_busy -= own;
    Py_XDECREF(f);
    if (own)
        agent_time(t0, now_ns() - t0, c0 >= 0 ? thread_cpu_ns() - c0 : 0);
    if (r) {
        Py_DECREF(r);
        return 0;
    }
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    swallow(R_INTERNAL, "step boundary");
    return 0;
}

/* Checkpoint saves (the glue wraps torch.save, Lightning's
 * Trainer.save_checkpoint, the Hugging Face Trainer's _save_checkpoint,
 * safetensors' save_file and torch.distributed.checkpoint's save,
 * _save_state_dict (behind save and save_state_dict) and async_save; a
 * save inside another is part of it,
 * as the torch.save of each tensor inside a torch.distributed.checkpoint
 * save is): a save on the training
 * thread blocks the loop, and its time is no step's: agent_time takes it
 * out of the steps open then, their preparation and a fetch in progress,
 * as an eval run's is (a save between optimizer.step() and the next
 * forward read as the next step's batch preparation: input.main_prep for a
 * loop that only saved, tests/e2e/real_loops.sh llm_memmap_ckpt).  Each
 * save is one checkpoint.save event at its end: its wall and CPU time, the
 * bytes written (-1 unknown), the steps begun so far, and whether it
 * blocked the loop (the training thread, or the main thread before one is
 * known) or ran beside it (a background thread: async checkpointing),
 * and the saver (via).  docs/DIAGNOSIS.md, checkpoint.blocking. */
static _Thread_local int t_save_depth;
static _Thread_local int64_t t_save_t0, t_save_cpu0;
static _Thread_local int t_save_blocking;

/* save_enter(is_main_thread): a save began; True when it is the outermost
 * on this thread (the one its save_exit records: only it needs its bytes) */
static void post_clear(void);

static PyObject *py_save_enter(PyObject *self, PyObject *arg)
{
    (void)self;
    /* a forward hook a Ctrl-C left on a module: off before it is pickled */
    if (g_thread && thread_ident() == g_thread)
        post_clear();
    if (t_save_depth++ > 0)
        Py_RETURN_FALSE;
    unsigned long th = thread_ident();
    t_save_blocking = g_thread ? th == g_thread : PyObject_IsTrue(arg) == 1;
    t_save_t0 = now_ns();
    t_save_cpu0 = thread_cpu_ns();
    Py_RETURN_TRUE;
}

/* The savers the glue wraps (its _SAVERS), by number: the event's "via" */
static const char *const save_via[] = {"torch.save",
                                       "lightning",
                                       "transformers",
                                       "safetensors",
                                       "torch.distributed.checkpoint",
                                       "torch.distributed.checkpoint.async_save"};

/* save_exit(nbytes, ok[, kind[, where]]): it returned (ok true) or
 * raised; nbytes -1 unknown; kind the saver's number in save_via; where 1
 * a file, 0 memory, -1 unknown.  Arguments that do not parse are unknown,
 * each on its own (a failed parse must not make a save that returned look
 * failed). */
static PyObject *py_save_exit(PyObject *self, PyObject *args)
{
    (void)self;
    long long nbytes = -1;
    int ok = 0, kind = 0, where = -1;
    PyObject *nb = NULL, *okp = NULL;
    if (!PyArg_ParseTuple(args, "OO|ii", &nb, &okp, &kind, &where)) {
        PyErr_Clear();
        kind = 0;
        where = -1;
    }
    if (nb && PyLong_Check(nb)) {
        nbytes = PyLong_AsLongLong(nb);
        if (nbytes < 0 || PyErr_Occurred())
            nbytes = -1;
        PyErr_Clear();
    }
    if (okp) {
        ok = PyObject_IsTrue(okp) == 1;
        PyErr_Clear();
    }
    if (kind < 0 || (size_t)kind >= sizeof save_via / sizeof *save_via)
        kind = 0;
    if (t_save_depth <= 0 || --t_save_depth > 0 || g_shut) /* g_shut: detached */
        Py_RETURN_NONE;
    int64_t t = now_ns(), d = t > t_save_t0 ? t - t_save_t0 : 0;
    int64_t c1 = t_save_cpu0 >= 0 ? thread_cpu_ns() : -1;
    int64_t cpu = c1 >= t_save_cpu0 && t_save_cpu0 >= 0 ? c1 - t_save_cpu0 : -1;
    if (t_save_blocking && g_thread && thread_ident() == g_thread && d > 0)
        agent_time(t_save_t0, d, cpu > 0 ? cpu : 0);
    char js[256];
    char nbuf[32] = "null", cs[32] = "null";
    if (nbytes >= 0)
        snprintf(nbuf, sizeof nbuf, "%lld", nbytes);
    if (cpu >= 0)
        snprintf(cs, sizeof cs, "%.6f", (double)cpu / 1e9);
    snprintf(js, sizeof js,
             "{\"dur_s\":%.6f,\"cpu_s\":%s,\"bytes\":%s,\"step\":%llu,\"blocking\":%s,"
             "\"ok\":%s,\"via\":\"%s\",\"to\":%s}",
             (double)d / 1e9, cs, nbuf, (unsigned long long)g_steps,
             t_save_blocking ? "true" : "false", ok ? "true" : "false", save_via[kind],
             where == 1   ? "\"file\""
             : where == 0 ? "\"memory\""
                          : "null");
    lazy_open();
    if (g_rec) {
        int rc = tm_rec_event(g_rec, t, "checkpoint.save", js);
        if (rc == -ENOSPC)
            report_once(R_FULL, "%s: disk full: recording stopped, the job goes on", g_run_dir);
    }
    Py_RETURN_NONE;
}

/* torch.compile (docs/DIAGNOSIS.md, steps.compile).  torch._dynamo calls
 * its compile callbacks (torch._dynamo.callback_handler, torch 2.4 and
 * later) at the start and the end of each compilation: dynamo tracing a
 * frame (and AOTAutograd and the backend under it), a backward graph
 * compiled lazily at its first run.  The glue registers compile_enter and
 * compile_exit there; nested compilations are one (the handler runs the
 * callbacks only for the outermost).  Each ends in one compile event: its
 * wall and thread CPU time, the steps begun so far, whether the training
 * thread compiled (its steps took the time), the trigger and torch's
 * compile id ("F/N": frame F's N-th compilation, 0 the first; "!A/F/N"
 * under compiled autograd).  The strings are torch's: only [A-Za-z0-9_!/.-]
 * is kept, 31 bytes at most. */
static _Thread_local int t_compile_depth;
static _Thread_local int64_t t_compile_t0, t_compile_cpu0;
static _Thread_local int t_compile_training;

/* compile_enter(is_main_thread): the training thread is the one the step
 * model found, or before it found one, the main thread */
static PyObject *py_compile_enter(PyObject *self, PyObject *is_main)
{
    (void)self;
    /* The handler's count of compilations in progress is the process's,
     * not the thread's: where two threads compiled at once, one thread's
     * start may never see its end.  A start always begins afresh here, so
     * a lost end costs that one event, not this thread's later ones. */
    t_compile_depth = 1;
    t_compile_t0 = now_ns();
    t_compile_cpu0 = thread_cpu_ns();
    t_compile_training = g_thread ? thread_ident() == g_thread : PyObject_IsTrue(is_main) == 1;
    PyErr_Clear();
    Py_RETURN_NONE;
}

static void compile_token(char *out, size_t cap, const char *in)
{
    size_t k = 0;
    for (; in && *in && k + 1 < cap; in++) {
        char c = *in;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '_' || c == '!' || c == '/' || c == '.' || c == '-')
            out[k++] = c;
    }
    out[k] = '\0';
}

/* compile_exit(trigger, compile_id): strings, or anything else (unknown) */
static PyObject *py_compile_exit(PyObject *self, PyObject *args)
{
    (void)self;
    const char *trig = NULL, *id = NULL;
    if (!PyArg_ParseTuple(args, "zz", &trig, &id)) {
        PyErr_Clear();
        trig = id = NULL;
    }
    if (t_compile_depth <= 0 || g_shut)
        Py_RETURN_NONE;
    t_compile_depth = 0;
    int64_t t = now_ns(), d = t > t_compile_t0 ? t - t_compile_t0 : 0;
    int64_t c1 = t_compile_cpu0 >= 0 ? thread_cpu_ns() : -1;
    char cs[32] = "null", tr[32], ci[32], js[256];
    if (c1 >= t_compile_cpu0 && t_compile_cpu0 >= 0)
        snprintf(cs, sizeof cs, "%.6f", (double)(c1 - t_compile_cpu0) / 1e9);
    compile_token(tr, sizeof tr, trig);
    compile_token(ci, sizeof ci, id);
    /* A backward graph compiles at its first run, in the thread that runs
     * the backward pass: on a GPU the autograd engine's device thread,
     * while the training thread waits in backward() for it.  The loop's
     * time all the same. */
    if (strcmp(tr, "LAZY_BACKWARD") == 0)
        t_compile_training = 1;
    snprintf(js, sizeof js,
             "{\"dur_s\":%.6f,\"cpu_s\":%s,\"step\":%llu,\"training\":%s,\"trigger\":\"%s\","
             "\"id\":\"%s\"}",
             (double)d / 1e9, cs, (unsigned long long)g_steps,
             t_compile_training ? "true" : "false", tr, ci);
    lazy_open();
    if (g_rec) {
        int rc = tm_rec_event(g_rec, t, "compile", js);
        if (rc == -ENOSPC)
            report_once(R_FULL, "%s: disk full: recording stopped, the job goes on", g_run_dir);
    }
    Py_RETURN_NONE;
}

/* Python's cyclic garbage collector (docs/DIAGNOSIS.md, gc.pauses).  A
 * collection holds the GIL for its whole time: the training thread stops
 * wherever it was (the batch preparation, a forward, the loop's own
 * Python between kernels), and a full collection (generation 2) walks
 * every container object the process holds: a second or more for a heap
 * of millions (a dataset kept as Python lists and dicts, a tokenizer's
 * caches).  In a DDP job one rank's pause holds every other rank at the
 * next all-reduce, and the ranks pause at different steps.
 *
 * gc.callbacks gets gc_callback (the glue appends it at attach, detach
 * takes it out): a builtin, so a collection costs one C call at its start
 * and one at its end (CPython builds the info dict for any callback).
 * Every collection is counted and timed per generation (the gc.totals
 * event at exit); a full one, or any that took GC_EVENT_MIN_NS or more,
 * is one gc.pause event at its end, into the process's record file once
 * it is open (a process that records nothing, as torchrun's agent or a
 * spawned DataLoader worker, gets no file for them; a forked worker's
 * are in its batches' times): generation, duration, objects collected,
 * the steps written so far, whether the training thread triggered it,
 * whether it was automatic (auto false: the job's own gc.collect(), which
 * the glue wraps, or any collection while automatic collection was off),
 * whether it fell in a checkpoint save or the agent's own work at a
 * boundary (in_save: that time is in no step already), whether it fell
 * in a torch.compile compilation of this thread (in_compile: the compile
 * event's time holds it, and steps.compile says it), and whether the
 * training thread was in a batch preparation span when it began (prep:
 * armed for the next forward, outside a zero_grad() or a device wait,
 * gc_in_prep; the accounting takes the pause out of that span's
 * preparation, which is not contiguous from the step's start once the
 * waits are out of it).
 * At most GC_EVENTS_PER_S events a second for full collections and as
 * many for the others; the rest are counted (dropped).  Their time stays
 * in the steps: it is the job's. */
#define GC_EVENT_MIN_NS 1000000LL
#define GC_EVENTS_PER_S 50
static int64_t g_gc_t0;
static uint64_t g_gc_n[3], g_gc_events, g_gc_dropped;
static int64_t g_gc_ns[3], g_gc_max_ns;
static int64_t g_gc_win_t[2]; /* the second the events are counted in: [0] young, [1] full */
static int g_gc_win_n[2];
static int g_gc_explicit; /* in the job's gc.collect() (the glue's wrapper) */
static int g_gc_prep;     /* the collection began in a preparation span (gc_in_prep) */

/* gc_explicit(on): the job's gc.collect() called (1) or returned (0) */
static PyObject *py_gc_explicit(PyObject *self, PyObject *arg)
{
    (void)self;
    int on = PyObject_IsTrue(arg) == 1;
    PyErr_Clear();
    g_gc_explicit += on ? 1 : g_gc_explicit > 0 ? -1 : 0;
    Py_RETURN_NONE;
}

/* Pauses begun in a micro-batch span are written at once (a process
 * killed in the span keeps them) as in a preparation, and counted here:
 * the next micro-batch's forward ends a span of preparation
 * (first_forward), while the span armed after the last backward
 * (clipping, logging, the optimizer step) ends without one and is none:
 * then a gc.unprep event (its pauses and the span's length) takes them
 * back (runsum_gc.c reads it). */

static void gc_unprep(void)
{
    if (!g_gc_micro_n)
        return;
    int64_t t = tm_now_mono_ns(); /* the pauses' clock */
    if (g_rec && g_rec_pid == getpid()) {
        char js[96];
        snprintf(js, sizeof js, "{\"pauses\":%d,\"span_s\":%.6f}", g_gc_micro_n,
                 t > g_marm_t ? (double)(t - g_marm_t) / 1e9 : 0.0);
        tm_rec_event(g_rec, t, "gc.unprep", js);
    }
    g_gc_micro_n = 0;
}

/* A forked child counts its own collections (a DataLoader worker's file
 * may write gc.totals) */
static void gc_forked(void)
{
    memset(g_gc_n, 0, sizeof g_gc_n);
    memset(g_gc_ns, 0, sizeof g_gc_ns);
    g_gc_events = g_gc_dropped = 0;
    g_gc_max_ns = g_gc_t0 = 0;
    g_gc_micro_n = 0;
}
static PyObject *g_gc_key_gen, *g_gc_key_coll; /* "generation", "collected" */

static long gc_info_long(PyObject *info, PyObject *key)
{
    PyObject *v = info && key && PyDict_Check(info) ? PyDict_GetItemWithError(info, key) : NULL;
    long r = v && PyLong_Check(v) ? PyLong_AsLong(v) : -1;
    PyErr_Clear();
    return r;
}

/* The training thread is in a batch preparation span of its own (a loop
 * without a DataLoader, armed for its next forward), and not in a
 * zero_grad() or a device wait that the span leaves out (g_hk_depth), an
 * eval span (g_in_eval), nor in a micro-batch span an optimizer step began
 * in (no preparation: it is dropped).  Read when a collection begins, by
 * whichever thread runs it: the training thread's state, under the GIL as
 * all of the agent's.  1: the step's span; 2: a micro-batch span, which is
 * preparation only if a forward ends it (g_gc_micro_n). */
static int gc_in_prep(void)
{
    if (!g_fwd_armed || g_hk_depth || g_in_eval)
        return 0;
    if (!g_arm_micro)
        return 1;
    return g_opt_began == g_marm_opt ? 2 : 0;
}

/* gc_callback(phase, info): "start" or "stop" of a collection */
static PyObject *py_gc_callback(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs < 2 || !PyUnicode_Check(args[0]))
        Py_RETURN_NONE;
    /* the kernel's clock (a vDSO read, ~25 ns against the ~400 ns CPython
     * spends building the info dict): the agent's counter clock anchors on
     * every read in its first 200 ms (src/lib/fastclock.h), and the
     * collections of an import would be hundreds of anchors */
    int64_t t = tm_now_mono_ns();
    if (PyUnicode_GET_LENGTH(args[0]) == 5) { /* "start" */
        g_gc_t0 = t;
        g_gc_prep = gc_in_prep();
        Py_RETURN_NONE;
    }
    if (!g_gc_t0)
        Py_RETURN_NONE; /* registered during a collection */
    int64_t d = t > g_gc_t0 ? t - g_gc_t0 : 0;
    g_gc_t0 = 0;
    long gen = gc_info_long(args[1], g_gc_key_gen);
    if (gen < 0 || gen > 2) /* no collector's call */
        Py_RETURN_NONE;
    g_gc_n[gen]++;
    g_gc_ns[gen] += d;
    if (d > g_gc_max_ns)
        g_gc_max_ns = d;
    if ((gen < 2 && d < GC_EVENT_MIN_NS) || g_shut)
        Py_RETURN_NONE;
    int full = gen == 2; /* a budget each: young ones never crowd out the full */
    if (t - g_gc_win_t[full] >= 1000000000LL) {
        g_gc_win_t[full] = t;
        g_gc_win_n[full] = 0;
    }
    if (g_gc_win_n[full] >= GC_EVENTS_PER_S) {
        g_gc_dropped++;
        Py_RETURN_NONE;
    }
    /* only into a file this process has open: a process that recorded
     * nothing yet (torchrun's agent, a spawned DataLoader worker) gets no
     * file for its collections, and a forked worker's are its batches' */
    if (!g_rec || g_rec_pid != getpid())
        Py_RETURN_NONE;
    g_gc_win_n[full]++;
    long coll = gc_info_long(args[1], g_gc_key_coll);
    char js[256];
    int n = snprintf(js, sizeof js,
                     "{\"gen\":%ld,\"dur_s\":%.6f,\"collected\":%ld,\"step\":%llu,\"train\":%s,"
                     "\"auto\":%s,\"in_save\":%s,\"in_compile\":%s,\"prep\":",
                     gen, (double)d / 1e9, coll, (unsigned long long)g_steps,
                     g_thread && thread_ident() == g_thread ? "true" : "false",
                     g_gc_explicit ? "false"
#if PY_VERSION_HEX >= 0x030A0000
                     : PyGC_IsEnabled() ? "true"
                                        : "false",
#else
                                   : "null",
#endif
                     (t_save_depth > 0 && t_save_blocking) || g_agent_busy ? "true" : "false",
                     t_compile_depth > 0 ? "true" : "false");
    if (n < 0 || (size_t)n >= sizeof js - 8)
        Py_RETURN_NONE;
    snprintf(js + n, sizeof js - (size_t)n, "%s}", g_gc_prep ? "true" : "false");
    if (tm_rec_event(g_rec, t, "gc.pause", js) == 0) {
        g_gc_events++;
        g_gc_micro_n += g_gc_prep == 2; /* decided with its span */
    }
    Py_RETURN_NONE;
}

/* The gc.totals event (at exit): every collection of this process, per
 * generation, and the collector's settings then (gc.freeze()'s permanent
 * generation, the thresholds). */
static void gc_totals(void)
{
    static uint64_t told = 0; /* collections in the last gc.totals (shutdown may run again) */
    uint64_t n = g_gc_n[0] + g_gc_n[1] + g_gc_n[2];
    if (n == told || !g_rec || g_rec_pid != getpid()) /* as for the pauses */
        return;
    told = n;
    long frozen = -1, th[3] = {-1, -1, -1};
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *fc = gc ? PyObject_CallMethod(gc, "get_freeze_count", NULL) : NULL;
    PyObject *tr = gc ? PyObject_CallMethod(gc, "get_threshold", NULL) : NULL;
    if (fc && PyLong_Check(fc))
        frozen = PyLong_AsLong(fc);
    for (int i = 0; tr && PyTuple_Check(tr) && i < 3 && i < PyTuple_GET_SIZE(tr); i++)
        if (PyLong_Check(PyTuple_GET_ITEM(tr, i)))
            th[i] = PyLong_AsLong(PyTuple_GET_ITEM(tr, i));
    Py_XDECREF(fc);
    Py_XDECREF(tr);
    Py_XDECREF(gc);
    PyErr_Clear();
    char js[512];
    snprintf(js, sizeof js,
             "{\"collections\":[%llu,%llu,%llu],\"time_s\":[%.6f,%.6f,%.6f],\"max_s\":%.6f,"
             "\"events\":%llu,\"dropped\":%llu,\"frozen\":%ld,\"threshold\":[%ld,%ld,%ld]}",
             (unsigned long long)g_gc_n[0], (unsigned long long)g_gc_n[1],
             (unsigned long long)g_gc_n[2], (double)g_gc_ns[0] / 1e9, (double)g_gc_ns[1] / 1e9,
             (double)g_gc_ns[2] / 1e9, (double)g_gc_max_ns / 1e9, (unsigned long long)g_gc_events,
             (unsigned long long)g_gc_dropped, frozen, th[0], th[1], th[2]);
    tm_rec_event(g_rec, 0, "gc.totals", js);
}

/* ...asked at every hook's return: most have no work (flags 0) */
static inline int boundary(long flags)
{
    return flags ? boundary_work(flags) : 0;
}

/* What a hook returns after torch's call returned r (NULL: it raised, its
 * error fetched into et, ev, tb) and the boundary's work said b: r and
 * torch's own error as they were, unless b < 0 (the job's interrupt, set:
 * it wins). */
static inline PyObject *pass_through(PyObject *r, PyObject *et, PyObject *ev, PyObject *tb, int b)
{
    if (b < 0) {
        Py_XDECREF(r);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        return NULL;
    }
    if (!r)
        PyErr_Restore(et, ev, tb);
    return r;
}

/* The optimizers' numbers, as the glue's _opt_no gives them (a weak-keyed
 * dict, numbered in order of first step), cached for the last few
 * optimizers seen: a live weak reference to the very object is the same
 * optimizer and keeps its number, so the cache answers as _opt_no would. */
#define OPT_CACHE 4
static struct {
    PyObject *ref;
    long no;
} g_optc[OPT_CACHE];
static int g_optc_next;

static int weak_is(PyObject *ref, PyObject *obj)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    int same = PyWeakref_GetRef(ref, &o) > 0 && o == obj;
    Py_XDECREF(o);
    return same;
#else
    return PyWeakref_GET_OBJECT(ref) == obj; /* the inline read: asked every step */
#endif
}

static long opt_number(PyObject *opt)
{
    for (int i = 0; i < OPT_CACHE; i++)
        if (g_optc[i].ref && weak_is(g_optc[i].ref, opt))
            return g_optc[i].no;
    if (!g_opt_no)
        return 0;
    PyObject *r = PyObject_CallOneArg(g_opt_no, opt);
    long no = r ? PyLong_AsLong(r) : -1;
    Py_XDECREF(r);
    if (no < 0) {
        swallow(R_INTERNAL, "numbering the optimizer");
        return 0;
    }
    PyObject *ref = PyWeakref_NewRef(opt, NULL);
    if (!ref) { /* not weak-referenceable: _opt_no said 0, asked again next time */
        PyErr_Clear();
        return no;
    }
    Py_XDECREF(g_optc[g_optc_next].ref);
    g_optc[g_optc_next].ref = ref;
    g_optc[g_optc_next].no = no;
    g_optc_next = (g_optc_next + 1) % OPT_CACHE;
    return no;
}

/* opt_pre_hook(optimizer, args, kwargs), opt_post_hook(...): torch's
 * global optimizer step hooks (torch >= 2.0), registered as they are. */
static PyObject *py_opt_pre_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args, (void)nargs;
    return py_opt_pre(self, NULL);
}

static PyObject *py_opt_post_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (boundary(opt_post(nargs > 0 ? opt_number(args[0]) : 0)) < 0)
        return NULL; /* the job's interrupt */
    Py_RETURN_NONE;
}

/* A Hook wraps torch's function orig: HOOK_BACKWARD torch.autograd.backward,
 * HOOK_NEXT _BaseDataLoaderIter.__next__, HOOK_ITER DataLoader.__iter__,
 * HOOK_OPTSTEP an optimizer class's
 * step (torch's profiling wrapper, which calls the global step hooks),
 * HOOK_FETCH a dataset fetcher's fetch (aux: torch's get_worker_info),
 * HOOK_AMPSTEP AMP's GradScaler.step, HOOK_ZGRAD
 * Optimizer.zero_grad and Module.zero_grad, and the device synchronizations
 * (kind "sync": torch.cuda.synchronize, ...; put on only in a training loop
 * without a DataLoader, called from the glue's Python wrappers: g_hk_ns);
 * the methods
 * bind to the instance as a function does. */
enum { HOOK_BACKWARD, HOOK_NEXT, HOOK_OPTSTEP, HOOK_FETCH, HOOK_AMPSTEP, HOOK_ITER, HOOK_ZGRAD };

typedef struct {
    PyObject_HEAD PyObject *orig;
    PyObject *aux;  /* HOOK_FETCH: get_worker_info; else NULL */
    PyObject *dict; /* __wrapped__, __name__, _trainmon, ... */
    vectorcallfunc vectorcall;
    int kind;
} Hook;

/* A backward pass (backward_enter before it) returned r, or raised (r
 * NULL): its end, and the boundary's work, with its own error kept. */
static inline PyObject *backward_done(PyObject *r)
{
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (!r)
        PyErr_Fetch(&et, &ev, &tb); /* the backward pass's own error */
    return pass_through(r, et, ev, tb, boundary(backward_exit()));
}

static PyObject *hook_backward(PyObject *callable, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    backward_enter(PyVectorcall_NARGS(nargsf) >= 1 ? args[0] : NULL);
    return backward_done(PyObject_Vectorcall(h->orig, args, nargsf, kwnames));
}

/* zero_grad(...) of an optimizer or a module, or a wait for the device
 * (HOOK_ZGRAD, kinds "zero_grad" and "sync"): its time on the training
 * thread (g_hk_ns), which the preparation spans leave out.  The outermost
 * such call only (a zero_grad of the job's that synchronizes is counted
 * once). */
static PyObject *hook_zgrad(PyObject *callable, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    /* only a call inside a preparation span counts (the spans take
     * differences of g_hk_ns): one between a forward and the step's end
     * (Adam's, an eval's) passes straight through */
    if (!g_fwd_armed || !g_thread || thread_ident() != g_thread || g_hk_depth)
        return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    int64_t t0 = now_ns();
    int64_t c0 = (g_arm_micro ? g_marm_cpu : g_arm_cpu) >= 0 ? thread_cpu_ns() : -1;
    g_hk_depth = 1;
    PyObject *r = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    g_hk_depth = 0;
    g_hk_ns += now_ns() - t0;
    if (c0 >= 0) {
        int64_t c1 = thread_cpu_ns();
        g_hk_cpu_ns += c1 > c0 ? c1 - c0 : 0;
    }
    return r;
}

/* With persistent_workers, iter() resets the loader's one iterator and
 * returns it again: a batch it fetched before (held, or the last one,
 * not yet settled) is the last epoch's, an iterator of its own (it | 1:
 * objects are aligned).  `zip(labeled, unlabeled)` fetches a labeled
 * batch before the shorter unlabeled loader ends the epoch; with the
 * iterator the same, that batch and the next epoch's first read as two
 * held batches of one iterator, an eval run: a training batch and its
 * wait written as eval (tests/e2e/real_loops.sh two_loaders_workers). */
static void iter_reset(uintptr_t it)
{
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].iter == it)
            g_held[i].iter = it | 1;
    if (g_b.have && !g_b.added && g_b.iter == it)
        g_b.iter = it | 1;
}

/* DataLoader.__iter__(loader): a new iterator (its worker processes
 * started, the Dataset sent to each under spawn or forkserver), or with
 * persistent_workers the loader's one, its workers told to start an epoch
 * again.  That is a wait for data the loop's first fetch from it does not
 * see (the first __next__ waits only for the first batch): iter() with 4
 * forked workers took 20-100 ms here, as long as the first batch.  The
 * iterator made and when are noted; next_enter joins them. */
static PyObject *hook_iter(PyObject *callable, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames)
        return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    int64_t t0 = now_ns();
    PyObject *r = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    if (r) {
        unsigned long th = thread_ident();
        if (th == g_thread)
            iter_reset((uintptr_t)r);
        if (!iter_run_open(th, t0)) { /* a new run begins */
            g_iter_n = 0;
            g_iter_t0 = t0;
            g_iter_th = th;
        }
        if (g_iter_n < ITER_RUN_MAX)
            g_iter_its[g_iter_n++] = (uintptr_t)r;
        g_iter_t1 = now_ns();
    }
    return r;
}

static PyObject *hook_next(PyObject *callable, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames) /* not a __next__ call: orig says why */
        return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    PyObject *it = args[0];
    if (boundary(next_enter(it)) < 0) { /* the job's interrupt, before the fetch */
        if (g_depth > 0)
            g_depth--; /* no exit to match this entry */
        return NULL;
    }
    PyObject *batch = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (!batch)
        PyErr_Fetch(&et, &ev, &tb); /* StopIteration at a loader's end, or the job's error */
    /* the iterator (a batch came back: loader_dropped knows it) or False */
    next_exit(batch ? it : Py_False);
    if (!batch)
        PyErr_Restore(et, ev, tb);
    return batch;
}

/* optimizer.step(...): the pre and post hooks' work around the call, from
 * C.  torch's global optimizer step hooks cost about 3,000 instructions a
 * step in torch's Python loops that call them (bench/agent_cost.py), more
 * than the 1 us the agent may take; this wrapper costs the call through it.
 * Only the outermost step counts (a subclass's step calling its parent's,
 * both wrapped).  A step that raises ends the step too; its exception
 * passes through unchanged. */
static int g_optdepth;

static PyObject *hook_optstep(PyObject *callable, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    if (PyVectorcall_NARGS(nargsf) < 1 || g_optdepth)
        return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    g_optdepth = 1;
    g_opt_t0 = now_ns();
    opt_began(g_opt_t0);
    g_opt_began++;
    PyObject *out = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    g_optdepth = 0;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    if (!out)
        PyErr_Fetch(&et, &ev, &tb);
    return pass_through(out, et, ev, tb, boundary(opt_post(opt_number(args[0]))));
}

/* GradScaler.step(optimizer, ...) (AMP): it calls optimizer.step() unless
 * the gradients hold inf/NaN at the loss scale, when it skips the update
 * (and its update() halves the scale).  A skipped step still ends the
 * job's iteration: without this it ran on into the next one (two
 * iterations one step, their batches and micro-batches together, and the
 * job's own step count off by the skips).  So when scaler.step returns and
 * no optimizer step ran inside it, the step ends here, flagged
 * TM_STEP_SKIPPED (rules_amp.c).  Judged only for an optimizer whose steps
 * the agent has seen (opt_post): one whose step it cannot see (an LR
 * scheduler made before attach() wrapped the instance's step with the
 * unhooked one; the optimizer timing off) would read as skipping every
 * step.  Not seen: an optimizer that takes the inf check into its own
 * kernel (fused=True, `_step_supports_amp_scaling`): the scaler calls its
 * step always and the kernel skips the update on the device, which only a
 * device sync a step could read.  A disabled scaler calls the step: seen,
 * nothing to do.  Only the outermost call counts (a subclass's step
 * calling its parent's), and none inside an optimizer's step; an exception
 * passes through, and ends nothing (an optimizer step that raised ended
 * the step already). */

/* The optimizer of a GradScaler.step call: the first argument after the
 * scaler, or the keyword `optimizer`; NULL when there is none. */
static PyObject *amp_optimizer(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs >= 2)
        return args[1];
    if (nargs != 1 || !kwnames)
        return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
        PyObject *k = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "optimizer") == 0)
            return args[nargs + i];
    }
    return NULL;
}

static PyObject *hook_ampstep(PyObject *callable, PyObject *const *args, size_t nargsf,
                              PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    PyObject *opt = amp_optimizer(args, PyVectorcall_NARGS(nargsf), kwnames);
    if (!opt || g_ampdepth || g_optdepth)
        return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    g_ampdepth = 1;
    uint64_t n0 = g_opt_calls;
    int64_t t0 = now_ns();
    opt_began(t0);  /* its inf check waits for the device: the optimizer's */
    Py_INCREF(opt); /* the call's arguments stay the caller's; kept for after */
    PyObject *out = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    g_ampdepth = 0;
    if (!out || g_opt_calls != n0) {
        Py_DECREF(opt);
        return out;
    }
    long no = opt_number(opt);
    Py_DECREF(opt);
    if (!(g_opt_seen & (1ull << (no & 63))))
        return out; /* its steps are not seen: no skip judged */
    g_opt_t0 = t0;
    return pass_through(out, NULL, NULL, NULL, boundary(opt_end(no, TM_STEP_SKIPPED)));
}

static PyObject *py_worker_batch(PyObject *self, PyObject *args);

/* fetch(self, index): the dataset fetcher's, called for every batch.  In a
 * DataLoader worker (get_worker_info() is not None) the batch is timed and
 * written to the worker's file (worker_batch); in the main process
 * (num_workers=0) it is counted (g_n_fetch: a __next__ hook that never
 * fires is seen against it) and passed through.  The main process's None
 * is kept (a fork clears it, fetch_forked): get_worker_info() is a Python
 * call, and this hook runs on every batch of the loops the agent's budget
 * is measured on (a Python wrapper here cost ~1,500 instructions a batch).
 * An error of get_worker_info() is said once and the batch passes through
 * uncounted as a worker's; orig's own result or exception passes through
 * unchanged. */
static int g_fetch_main; /* get_worker_info() said None in this process */
/* The worker set of this worker process (tm_inproc_worker.set): read from
 * its get_worker_info() at its first batch (a fork forgets it:
 * fetch_forked); 0 unknown. */
static int g_wset_known;
static uint64_t g_wset;

static void worker_set_of(PyObject *info, PyObject *id)
{
    if (g_wset_known)
        return;
    g_wset_known = 1;
    g_wset = 0;
    PyObject *seed = PyObject_GetAttrString(info, "seed");
    if (seed && PyLong_Check(seed) && id && PyLong_Check(id)) {
        /* seed = base_seed + id (torch's _worker_loop, 1.x and 2.x) */
        uint64_t s = PyLong_AsUnsignedLongLongMask(seed), i = PyLong_AsUnsignedLongLongMask(id);
        if (!PyErr_Occurred())
            g_wset = s - i;
    }
    Py_XDECREF(seed);
    PyErr_Clear(); /* an unknown set: the worker is counted as before */
}

static void fetch_forked(void)
{
    g_fetch_main = 0;
    g_fetch_off = 0;
    g_wset_known = 0;
}

static PyObject *hook_fetch(PyObject *callable, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames)
{
    Hook *h = (Hook *)callable;
    PyObject *info = NULL;
    if (!g_fetch_main && h->aux) {
        info = PyObject_CallNoArgs(h->aux);
        if (!info)
            swallow(R_WORKER, "get_worker_info()");
        else if (info == Py_None) {
            Py_CLEAR(info);
            g_fetch_main = 1;
        }
    }
    if (!info) {
        g_n_fetch++;
        if (g_fetch_main && g_n_batches && !g_fetch_off && g_fetch_unhook) {
            g_fetch_off = 1; /* once: an error of the glue's is said once, the Hooks stay */
            PyObject *r = PyObject_CallNoArgs(g_fetch_unhook);
            if (!r)
                swallow(R_INTERNAL, "taking out the main process's fetch hooks");
            Py_XDECREF(r);
        }
        return PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    }
    double c0 = NAN; /* the worker's CPU time at the fetch's start */
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
        c0 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    int64_t t0 = now_ns();
    PyObject *data = PyObject_Vectorcall(h->orig, args, nargsf, kwnames);
    if (data) {
        PyObject *id = PyObject_GetAttrString(info, "id");
        if (id)
            worker_set_of(info, id);
        PyObject *a = id ? Py_BuildValue("(OLd)", id, (long long)t0, c0) : NULL;
        PyObject *r = a ? py_worker_batch(NULL, a) : NULL;
        if (!r)
            swallow(R_WORKER, "worker batch timing");
        Py_XDECREF(r);
        Py_XDECREF(a);
        Py_XDECREF(id);
    }
    Py_DECREF(info);
    return data;
}

static PyObject *hook_get(PyObject *self, PyObject *obj, PyObject *type)
{
    (void)type;
    if (!obj || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static int hook_traverse(Hook *h, visitproc visit, void *arg)
{
    Py_VISIT(h->orig);
    Py_VISIT(h->aux);
    Py_VISIT(h->dict);
    return 0;
}

static int hook_clear(Hook *h)
{
    Py_CLEAR(h->orig);
    Py_CLEAR(h->aux);
    Py_CLEAR(h->dict);
    return 0;
}

static void hook_dealloc(Hook *h)
{
    PyObject_GC_UnTrack(h);
    hook_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyGetSetDef hook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainmon._trainmon.Hook",
    .tp_doc = "trainmon: a function of torch's, timed for the step model",
    .tp_basicsize = sizeof(Hook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Hook, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = hook_get,
    .tp_dictoffset = offsetof(Hook, dict),
    .tp_getset = hook_getset,
    .tp_traverse = (traverseproc)hook_traverse,
    .tp_clear = (inquiry)hook_clear,
    .tp_dealloc = (destructor)hook_dealloc,
};

/* hook(kind, orig[, aux]): a Hook ("backward", "next", "iter", "optstep",
 * "ampstep", "zero_grad", "sync" or "fetch", whose aux is get_worker_info)
 * around orig. */
static PyObject *py_hook(PyObject *self, PyObject *args)
{
    (void)self;
    const char *kind;
    PyObject *orig, *aux = NULL;
    if (!PyArg_ParseTuple(args, "sO|O", &kind, &orig, &aux))
        return NULL;
    int k = strcmp(kind, "backward") == 0    ? HOOK_BACKWARD
            : strcmp(kind, "next") == 0      ? HOOK_NEXT
            : strcmp(kind, "optstep") == 0   ? HOOK_OPTSTEP
            : strcmp(kind, "fetch") == 0     ? HOOK_FETCH
            : strcmp(kind, "ampstep") == 0   ? HOOK_AMPSTEP
            : strcmp(kind, "iter") == 0      ? HOOK_ITER
            : strcmp(kind, "zero_grad") == 0 ? HOOK_ZGRAD
            : strcmp(kind, "sync") == 0      ? HOOK_ZGRAD
            : strcmp(kind, "clip") == 0      ? HOOK_ZGRAD
                                             : -1;
    if (k < 0 || !PyCallable_Check(orig) || (k == HOOK_FETCH) != (aux != NULL)) {
        PyErr_Format(PyExc_ValueError, "trainmon: hook(%s, ...): no such hook", kind);
        return NULL;
    }
    Hook *h = PyObject_GC_New(Hook, &HookType);
    if (!h)
        return NULL;
    Py_INCREF(orig);
    h->orig = orig;
    Py_XINCREF(aux);
    h->aux = aux;
    h->dict = NULL;
    h->kind = k;
    h->vectorcall = k == HOOK_BACKWARD  ? hook_backward
                    : k == HOOK_NEXT    ? hook_next
                    : k == HOOK_FETCH   ? hook_fetch
                    : k == HOOK_AMPSTEP ? hook_ampstep
                    : k == HOOK_ITER    ? hook_iter
                    : k == HOOK_ZGRAD   ? hook_zgrad
                                        : hook_optstep;
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

/* method(hook): hook as a class attribute, an instancemethod around it.
 * A Hook binds to the instance by itself (hook_get), but torch.compile's
 * dynamo does not run a C type's __get__: it takes such a class attribute
 * for a plain value and, when it hands the call back to the interpreter,
 * calls it without the instance (a compiled function calling opt.step()
 * or scaler.step(opt) raised "missing 1 required positional argument").
 * An instancemethod is a binding dynamo knows: it calls the attribute as
 * the interpreter would (the instance first), so the Hook runs (the step
 * is timed in compiled code too) and torch's method, called from it, is
 * compiled as its own frame.  Its cost: a bound method made per call
 * (~370 instructions, docs/BENCHMARKS.md). */
static PyObject *py_method(PyObject *self, PyObject *hook)
{
    (void)self;
    if (!PyCallable_Check(hook)) {
        PyErr_SetString(PyExc_TypeError, "trainmon: method(hook): not callable");
        return NULL;
    }
    return PyInstanceMethod_New(hook);
}

/* ------------------------------------------------- the autograd engine
 *
 * Backward passes are timed where torch hands them to its C++ engine, not
 * by wrapping torch.autograd.backward.  A Hook around that Python function
 * costs the call through it (~230 instructions: the interpreter re-entered
 * from C, where its own call would have stayed in the running frame loop)
 * plus its own C, every micro-batch (bench/agent_cost.py).  The engine is
 * the object torch.autograd.variable.Variable._execution_engine, of torch's
 * C type _EngineBase, whose run_backward both torch.autograd.backward and
 * torch.autograd.grad call (through graph._engine_run_backward in torch
 * 2.x, directly in 1.13).  The glue puts in its place an instance of a
 * subtype made here, whose run_backward is engine_run_backward below: it
 * calls the base type's C function itself (found in the base type's method
 * table, with the calling convention checked), so the job's call costs
 * what it did plus the step model's own work; every other method
 * (queue_callback, is_checkpoint_valid, ...) is the base type's, and
 * isinstance against torch's type holds.  A pass that accumulates
 * gradients (accumulate_grad true: backward(), Tensor.backward) is a
 * backward pass of the step model; torch.autograd.grad (accumulate_grad
 * false) is not, as before.  Where the type or its method is not as
 * expected, engine_hook raises and the glue wraps torch.autograd.backward
 * with a Hook instead (the glue's _install_backward). */

static PyCFunctionWithKeywords g_rb_base; /* the base type's run_backward */
static PyTypeObject *g_engine_base;       /* torch's engine type */
static PyTypeObject *g_engine_type;       /* its subtype, made once */
static PyObject *g_s_accum;               /* "accumulate_grad" */

/* Whether a run_backward call accumulates gradients: its accumulate_grad,
 * a keyword or the 7th argument, true when absent (the engine's default).
 * torch.autograd.backward's own call (1.13 to 2.13) has 5 arguments and 2
 * keywords (allow_unreachable=True, accumulate_grad=True), and is taken
 * as one by its shape: a dict lookup is ~110 instructions, a third of what
 * this engine saves a backward pass.  torch.autograd.grad's has 6
 * arguments (allow_unused) and accumulate_grad=False, and any call of
 * another shape is looked at. */
static int accumulates(PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) == 5 && kwargs && PyDict_GET_SIZE(kwargs) == 2)
        return 1;
    PyObject *v = kwargs ? PyDict_GetItemWithError(kwargs, g_s_accum) : NULL;
    if (!v) {
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 1;
        }
        if (PyTuple_GET_SIZE(args) < 7)
            return 1;
        v = PyTuple_GET_ITEM(args, 6);
    }
    if (v == Py_True)
        return 1;
    if (v == Py_False)
        return 0;
    int t = PyObject_IsTrue(v); /* the engine's own parse says what is wrong */
    if (t < 0)
        PyErr_Clear();
    return t != 0;
}

static PyObject *engine_run_backward(PyObject *self, PyObject *args, PyObject *kwargs)
{
    if (!accumulates(args, kwargs))
        return g_rb_base(self, args, kwargs);
    backward_enter(PyTuple_Check(args) && PyTuple_GET_SIZE(args) >= 1 ? PyTuple_GET_ITEM(args, 0)
                                                                      : NULL);
    return backward_done(g_rb_base(self, args, kwargs));
}

static PyMethodDef engine_methods[] = {
    {"run_backward", (PyCFunction)(void (*)(void))engine_run_backward, METH_VARARGS | METH_KEYWORDS,
     "torch's run_backward, a backward pass of trainmon's step model when it accumulates "
     "gradients"},
    {NULL, NULL, 0, NULL},
};

/* engine_hook(engine) -> an engine of trainmon's subtype of engine's type
 * (engine itself when it is one already); raises TypeError when the type
 * is not as expected. */
static PyObject *py_engine_hook(PyObject *self, PyObject *engine)
{
    (void)self;
    PyTypeObject *base = Py_TYPE(engine);
    if (g_engine_type && base == g_engine_type) {
        Py_INCREF(engine);
        return engine;
    }
    if (!g_engine_type) {
        PyMethodDef *m = base->tp_methods;
        while (m && m->ml_name && strcmp(m->ml_name, "run_backward") != 0)
            m++;
        if (!m || !m->ml_name || m->ml_flags != (METH_VARARGS | METH_KEYWORDS) ||
            !(base->tp_flags & Py_TPFLAGS_BASETYPE) || (base->tp_flags & Py_TPFLAGS_HAVE_GC) ||
            base->tp_itemsize) {
            PyErr_Format(PyExc_TypeError,
                         "trainmon: torch's autograd engine (%s) has no run_backward(*args, "
                         "**kwargs) of its own type to time",
                         base->tp_name);
            return NULL;
        }
        if (!g_s_accum && !(g_s_accum = PyUnicode_InternFromString("accumulate_grad")))
            return NULL;
        PyType_Slot slots[] = {
            {Py_tp_methods, engine_methods},
            {Py_tp_doc, "trainmon: torch's autograd engine, its backward passes timed"},
            {0, NULL},
        };
        PyType_Spec spec = {"trainmon._trainmon.Engine", 0, 0, Py_TPFLAGS_DEFAULT, slots};
        PyObject *bases = PyTuple_Pack(1, (PyObject *)base);
        if (!bases)
            return NULL;
        PyObject *t = PyType_FromSpecWithBases(&spec, bases);
        Py_DECREF(bases);
        if (!t)
            return NULL;
        g_rb_base = (PyCFunctionWithKeywords)(void (*)(void))m->ml_meth;
        g_engine_base = base;
        g_engine_type = (PyTypeObject *)t;
    } else if (base != g_engine_base) {
        PyErr_Format(PyExc_TypeError, "trainmon: torch's autograd engine changed type (%s, was %s)",
                     base->tp_name, g_engine_base->tp_name);
        return NULL;
    }
    return PyObject_CallNoArgs((PyObject *)g_engine_type);
}

/* bind_hooks(boundary, opt_no[, fetch_unhook]): the glue's functions the
 * hooks call. */
static PyObject *py_bind_hooks(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *b, *n, *u = NULL;
    if (!PyArg_ParseTuple(args, "OO|O", &b, &n, &u))
        return NULL;
    Py_INCREF(b);
    Py_INCREF(n);
    Py_XINCREF(u);
    Py_XSETREF(g_boundary, b);
    Py_XSETREF(g_opt_no, n);
    Py_XSETREF(g_fetch_unhook, u);
    Py_RETURN_NONE;
}

/* -------------------------------------------------------------- workers */

static PyObject *py_now(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return PyLong_FromLongLong(now_ns());
}

/* worker_cpu(): this process's CPU time (s), taken at a worker's fetch start. */
static PyObject *py_worker_cpu(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return PyFloat_FromDouble(NAN);
    return PyFloat_FromDouble((double)ts.tv_sec + (double)ts.tv_nsec / 1e9);
}

/* redact_args(list of str) -> list of str: what the record file's meta may
 * store of a command line (tm_arg_redact: the values of secret-looking
 * options), the one rule `trainmon run` applies to meta.json too. */
static PyObject *py_redact_args(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "redact_args: a list of str");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char **argv = PyMem_Calloc((size_t)(n ? n : 1), sizeof *argv);
    PyObject *out = argv ? PyList_New(n) : PyErr_NoMemory();
    for (Py_ssize_t i = 0; out && i < n; i++) {
        argv[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
        if (!argv[i])
            Py_CLEAR(out);
    }
    for (Py_ssize_t i = 0; out && i < n; i++) {
        char buf[512];
        const char *v = tm_arg_redact(argv, (int)n, (int)i, buf, sizeof buf);
        PyObject *o = PyUnicode_DecodeUTF8(v, (Py_ssize_t)strlen(v), "replace");
        if (!o)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, o);
    }
    PyMem_Free(argv);
    Py_DECREF(seq);
    return out;
}

/* The largest ring of a worker's file under --max-size (see below). */
#define TM_WORKER_RING_MAX (1ull << 20)

/* In a DataLoader worker, after one fetch: worker_batch(worker_id, t0_ns).
 * The worker's own file is opened on its first batch (after the fork, so
 * that it belongs to the worker). */
static PyObject *py_worker_batch(PyObject *self, PyObject *args)
{
    (void)self;
    int wid;
    long long t0;
    double cpu0 = NAN; /* the worker's CPU time at the fetch's start (worker_cpu()) */
    if (!PyArg_ParseTuple(args, "iL|d", &wid, &t0, &cpu0)) {
        swallow(R_WORKER, "worker_batch");
        Py_RETURN_NONE;
    }
    int64_t t = now_ns();
    pid_t me = getpid();
    if (g_wrec_pid != me) {
        g_wrec = NULL; /* the parent's (or a grandparent's): not ours to close */
        g_wrec_pid = me;
        g_wbatch = 0;
        if (!g_run_dir[0])
            Py_RETURN_NONE;
        char path[4200], role[32];
        snprintf(path, sizeof path, "%s/worker-r%d-%d.tmr", g_run_dir, g_rank < 0 ? 0 : g_rank,
                 (int)me);
        snprintf(role, sizeof role, "worker%d", wid);
        /* Unbounded: small blocks, as a worker writes little.  With
         * --max-size the file is a ring like the rank's, sized by the
         * writer (at least four blocks, so that wrapping drops a quarter at
         * most; the file within max_size).  A ring is allocated in full at
         * open and a DataLoader starts new workers every epoch (unless
         * persistent_workers), so a worker's ring is capped: the cap keeps
         * about 13,000 batches (80-byte records) of each worker. */
        tm_rec_opts o = {.role = role, .rank = g_rank, .block_size = 16384};
        if (g_max_size) {
            o.max_size = g_max_size < TM_WORKER_RING_MAX ? g_max_size : TM_WORKER_RING_MAX;
            o.block_size = 0;
        }
        if (tm_rec_open(&g_wrec, path, &o)) {
            report_once(R_WORKER, "worker %d cannot record: %s", wid, tm_last_error());
            g_wrec = NULL;
        }
    }
    if (!g_wrec)
        Py_RETURN_NONE;
    struct timespec ts;
    double cpu = NAN;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0)
        cpu = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    if (!(cpu0 >= 0 && cpu0 <= cpu))
        cpu0 = NAN;
    tm_inproc_worker w = {.worker_id = wid,
                          .pid = (uint32_t)me,
                          .batch = g_wbatch++,
                          .start_ns = t0,
                          .end_ns = t,
                          .cpu_s = cpu,
                          .rss_bytes = host_rss(t, 1),
                          .layout = 3,
                          .cpu_start_s = cpu0,
                          .set = g_wset_known ? g_wset : 0};
    char buf[80];
    int len = tm_inproc_encode_worker(&w, buf, sizeof buf);
    int rc = tm_rec_append(g_wrec, TM_REC_WORKER, t, buf, (uint32_t)len);
    if (rc == -ENOSPC)
        report_once(R_FULL, "%s: disk full: recording stopped, the job goes on", g_run_dir);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ OOM */

/* oom(source, device, requested, free, total, snapshot_name) */
static PyObject *py_oom(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned source;
    int dev;
    double req, fr, tot;
    const char *snap;
    Py_ssize_t snap_len;
    if (!PyArg_ParseTuple(args, "Iiddds#", &source, &dev, &req, &fr, &tot, &snap, &snap_len)) {
        swallow(R_INTERNAL, "recording an OOM");
        Py_RETURN_NONE;
    }
    int64_t t = now_ns();
    double f[F_N];
    read_alloc(dev, 0, f);
    f[F_RSS] = host_rss(t, 0);
    f[F_FREE] = fr;
    f[F_TOTAL] = tot;
    PyObject *ph = current_phase();
    Py_ssize_t pl = 0;
    const char *ps = ph ? utf8(ph, &pl) : "";
    char buf[128 + 2 * TM_INPROC_NAME_MAX];
    tm_inproc_oom o = {
        .device = dev,
        .seq = ++g_ooms,
        .step = g_steps,
        .source = source,
        .requested = req,
        .free_device = fr,
        .total_device = tot,
        .allocated = f[F_ALLOC],
        .reserved = f[F_RESERVED],
        .phase = ps,
        .phase_len = (uint16_t)(pl > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : pl),
        .snapshot = snap,
        .snapshot_len = (uint16_t)(snap_len > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : snap_len)};
    rec_put(TM_REC_OOM, t, buf, tm_inproc_encode_oom(&o, buf, sizeof buf));
    put_capture(TM_CAPTURE_OOM, dev, f, "oom", 3, t);
    return PyLong_FromUnsignedLong(g_ooms);
}

/* anatomy(device, optimizer, params, grads, optim_state, activations,
 * unknown, allocated, reserved, free, total, batch_size, reason, kind):
 * one memory anatomy record (TM_REC_ANATOMY) for one device, measured by
 * the glue (trainmon._anatomy).  Never raises: bad arguments are said
 * once. */
static PyObject *py_anatomy(PyObject *self, PyObject *args)
{
    (void)self;
    int dev;
    unsigned opt, reason;
    double v[9];
    long long batch;
    const char *kind;
    Py_ssize_t kind_len;
    if (!PyArg_ParseTuple(args, "iIdddddddddLIs#", &dev, &opt, &v[0], &v[1], &v[2], &v[3], &v[4],
                          &v[5], &v[6], &v[7], &v[8], &batch, &reason, &kind, &kind_len)) {
        swallow(R_INTERNAL, "recording the memory anatomy");
        Py_RETURN_NONE;
    }
    int64_t t = now_ns();
    char buf[128 + TM_INPROC_NAME_MAX];
    tm_inproc_anatomy a = {
        .step = g_steps,
        .device = dev,
        .optimizer = opt,
        .params = v[0],
        .grads = v[1],
        .optim_state = v[2],
        .activations = v[3],
        .unknown = v[4],
        .allocated = v[5],
        .reserved = v[6],
        .free_device = v[7],
        .total_device = v[8],
        .batch_size = batch < 0 ? -1 : (int64_t)batch,
        .reason = reason,
        .kind = kind,
        .kind_len = (uint16_t)(kind_len > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : kind_len)};
    rec_put(TM_REC_ANATOMY, t, buf, tm_inproc_encode_anatomy(&a, buf, sizeof buf));
    Py_RETURN_NONE;
}

/* oom_summary(seq, device, status, pool, requested, free_device,
 * largest_free, free_cached, fragments, expandable, reserved, live,
 * live_params, live_grads, live_optim_state, live_other, live_unknown,
 * blocks, why, sites): the OOM summary record (TM_REC_OOMSUM) the glue
 * read from the allocator snapshot at OOM seq (trainmon._oom_analyze).
 * sites: up to TM_OOMSUM_SITES (text, bytes) pairs.  Never raises: bad
 * arguments are said once. */
static PyObject *py_oom_summary(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned seq, status, pool;
    int dev;
    double v[14];
    const char *why;
    Py_ssize_t why_len;
    PyObject *sites;
    if (!PyArg_ParseTuple(args, "IiIIddddddddddddddz#O", &seq, &dev, &status, &pool, &v[0], &v[1],
                          &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11],
                          &v[12], &v[13], &why, &why_len, &sites)) {
        swallow(R_INTERNAL, "recording the OOM summary");
        Py_RETURN_NONE;
    }
    const char *st[TM_OOMSUM_SITES] = {"", "", "", "", ""};
    Py_ssize_t sl[TM_OOMSUM_SITES] = {0};
    double sb[TM_OOMSUM_SITES] = {NAN, NAN, NAN, NAN, NAN};
    PyObject *seqo = PySequence_Fast(sites, "sites");
    if (!seqo) {
        swallow(R_INTERNAL, "recording the OOM summary");
        Py_RETURN_NONE;
    }
    Py_ssize_t ns = PySequence_Fast_GET_SIZE(seqo);
    for (Py_ssize_t i = 0; i < ns && i < TM_OOMSUM_SITES; i++) {
        const char *txt;
        Py_ssize_t tl;
        double b;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seqo, i), "s#d", &txt, &tl, &b)) {
            PyErr_Clear();
            break;
        }
        st[i] = txt;
        sl[i] = tl > 256 ? 256 : tl; /* a path's tail is cut; the record stays small */
        sb[i] = b;
    }
#define CUT(n) (uint16_t)((n) > TM_INPROC_NAME_MAX ? TM_INPROC_NAME_MAX : (n))
    tm_inproc_oomsum o = {.seq = seq,
                          .device = dev,
                          .step = g_steps,
                          .status = status,
                          .pool = pool,
                          .requested = v[0],
                          .free_device = v[1],
                          .largest_free = v[2],
                          .free_cached = v[3],
                          .fragments = v[4],
                          .expandable = v[5],
                          .reserved = v[6],
                          .live = v[7],
                          .live_params = v[8],
                          .live_grads = v[9],
                          .live_optim_state = v[10],
                          .live_other = v[11],
                          .live_unknown = v[12],
                          .blocks = v[13],
                          .site1_bytes = sb[0],
                          .site2_bytes = sb[1],
                          .site3_bytes = sb[2],
                          .site4_bytes = sb[3],
                          .site5_bytes = sb[4],
                          .why = why ? why : "",
                          .why_len = why ? CUT(why_len) : 0,
                          .site1 = st[0],
                          .site1_len = CUT(sl[0]),
                          .site2 = st[1],
                          .site2_len = CUT(sl[1]),
                          .site3 = st[2],
                          .site3_len = CUT(sl[2]),
                          .site4 = st[3],
                          .site4_len = CUT(sl[3]),
                          .site5 = st[4],
                          .site5_len = CUT(sl[4])};
#undef CUT
    char buf[256 + TM_INPROC_NAME_MAX + TM_OOMSUM_SITES * 260];
    rec_put(TM_REC_OOMSUM, now_ns(), buf, tm_inproc_encode_oomsum(&o, buf, sizeof buf));
    Py_DECREF(seqo);
    Py_RETURN_NONE;
}

/* zgrad_bind(install): the glue's installer of the zero_grad Hooks
 * (called once, with no arguments, in a training loop without a
 * DataLoader); None: off. */
static PyObject *py_zgrad_bind(PyObject *self, PyObject *reg)
{
    (void)self;
    Py_CLEAR(g_zg_reg);
    g_zg_tried = 0;
    if (reg != Py_None && PyCallable_Check(reg)) {
        Py_INCREF(reg);
        g_zg_reg = reg;
    }
    Py_RETURN_NONE;
}

/* rank_bind(learn): the glue's _learn_rank, for the first training step;
 * None: off. */
static PyObject *py_rank_bind(PyObject *self, PyObject *cb)
{
    (void)self;
    Py_CLEAR(g_rank_cb);
    if (cb != Py_None && PyCallable_Check(cb)) {
        Py_INCREF(cb);
        g_rank_cb = cb;
    }
    Py_RETURN_NONE;
}

/* opt_made(): an optimizer was constructed (its __init__'s wrapper). */
static PyObject *py_opt_made(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    g_n_optmade++;
    Py_RETURN_NONE;
}

/* lead_optimizer(): the number of the optimizer whose steps end steps (-1:
 * none yet), for the glue's anatomy. */
static PyObject *py_lead_optimizer(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return PyLong_FromLong(g_lead);
}

/* anatomy_again(): the glue was asked for the anatomy while one was
 * still pending (CUDA: written at the next backward pass): due again at
 * the next boundary (the glue writes only if the bytes moved). */
static PyObject *py_anatomy_again(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    if (g_n_opt)
        g_pending_flags |= ANATOMY_DUE_FLAG;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------- Monitor */

/* One capture of the history: its record as written (tag unset: the tag
 * object is kept whole) and its wall-clock time. */
typedef struct row {
    double t_real;
    PyObject *tag;
    tm_inproc_capture c;
} row;

typedef struct {
    PyObject_HEAD int device; /* -1: the current device */
    row *rows;
    size_t n, cap;
    int full; /* history could not grow */
} Monitor;

static int Monitor_init(Monitor *m, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"device", NULL};
    PyObject *dev = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &dev))
        return -1;
    m->device = -1;
    if (dev != Py_None) {
        /* an int, or a torch.device / "cuda:1" whose index is taken */
        if (PyUnicode_Check(dev)) {
            const char *s = PyUnicode_AsUTF8(dev);
            const char *c = s ? strchr(s, ':') : NULL;
            m->device = c ? atoi(c + 1) : -1;
            PyErr_Clear();
            return 0;
        }
        PyObject *idx =
            PyLong_Check(dev) ? (Py_INCREF(dev), dev) : PyObject_GetAttrString(dev, "index");
        if (!idx) {
            PyErr_Clear();
        } else {
            if (PyLong_Check(idx))
                m->device = (int)PyLong_AsLong(idx);
            Py_DECREF(idx);
            PyErr_Clear();
        }
    }
    return 0;
}

static void Monitor_dealloc(Monitor *m)
{
    for (size_t i = 0; i < m->n; i++)
        Py_XDECREF(m->rows[i].tag);
    PyMem_Free(m->rows);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* capture(tag): one sample, recorded and kept in history.  Never raises. */
static PyObject *Monitor_capture(Monitor *m, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *tag = nargs > 0 ? args[0] : NULL;
    PyObject *owned = NULL;
    if (!tag || !PyUnicode_Check(tag)) {
        owned = tag ? PyObject_Str(tag) : PyUnicode_FromString("");
        if (!owned) {
            swallow(R_INTERNAL, "capture tag");
            Py_RETURN_NONE;
        }
        tag = owned;
    }
    int64_t t = now_ns();
    double f[F_N];
    int dev = g_memstats ? read_alloc(m->device, 1, f) : -1;
    if (!g_memstats)
        for (int i = 0; i < F_N; i++)
            f[i] = NAN;
    f[F_RSS] = host_rss(t, 0);
    Py_ssize_t tl;
    const char *ts = utf8(tag, &tl);
    put_capture(TM_CAPTURE_USER, dev, f, ts, tl, t);
    if (m->n == m->cap && !m->full) {
        size_t nc = m->cap ? m->cap * 2 : 256;
        row *nr = PyMem_Realloc(m->rows, nc * sizeof *nr);
        if (!nr) {
            m->full = 1;
            report_once(R_INTERNAL, "Monitor history: out of memory, history stops growing");
        } else {
            m->rows = nr;
            m->cap = nc;
        }
    }
    if (m->n < m->cap) {
        row *r = &m->rows[m->n++];
        r->t_real = (double)tm_now_real_ns() / 1e9;
        Py_INCREF(tag);
        r->tag = tag;
        r->c = capture_of(TM_CAPTURE_USER, dev, f, NULL, 0);
    }
    Py_XDECREF(owned);
    Py_RETURN_NONE;
}

static PyObject *num_or_none(double v)
{
    if (isnan(v))
        Py_RETURN_NONE;
    return PyFloat_FromDouble(v);
}

/* A schema value as Python: int, float (None when unavailable) or str
 * (bytes that are not UTF-8, a tag cut mid-character, are replaced). */
static PyObject *value_to_py(tm_inproc_value v)
{
    if (v.absent) {
        /* a newer field in a record of an older layout: -1 for numbers
         * (as unavailable counts are), None for f64, "" for strings */
        if (v.type == TM_INPROC_F64)
            Py_RETURN_NONE;
        if (v.type == TM_INPROC_STR)
            return PyUnicode_FromString("");
        return PyLong_FromLong(-1);
    }
    switch (v.type) {
    case TM_INPROC_U32:
    case TM_INPROC_U64:
        return PyLong_FromUnsignedLongLong(v.u);
    case TM_INPROC_I32:
    case TM_INPROC_I64:
        return PyLong_FromLongLong(v.i);
    case TM_INPROC_F64:
        return num_or_none(v.f);
    case TM_INPROC_STR:
        return PyUnicode_DecodeUTF8(v.s, (Py_ssize_t)v.len, "replace");
    }
    Py_RETURN_NONE;
}

/* {key: value} of a decoded in-process record, every stored field under
 * its schema key (docs/FORMAT.md "In-process records"); with str_override,
 * string fields are that object instead (the Monitor's whole tag). */
static PyObject *fields_dict(uint16_t type, const tm_inproc_any *a, PyObject *str_override)
{
    const tm_inproc_field *f;
    size_t n = tm_inproc_fields(type, &f);
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < n; i++) {
        PyObject *v;
        if (str_override && f[i].type == TM_INPROC_STR) {
            Py_INCREF(str_override);
            v = str_override;
        } else {
            v = value_to_py(tm_inproc_get(&f[i], a));
        }
        if (!v || PyDict_SetItemString(d, f[i].key, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* _rows(): [(time, {capture field: value})], the fields keyed as the
 * capture record's schema names them (bytes; None when unavailable). */
static PyObject *Monitor_rows(Monitor *m, PyObject *noargs)
{
    (void)noargs;
    PyObject *l = PyList_New((Py_ssize_t)m->n);
    if (!l)
        return NULL;
    for (size_t i = 0; i < m->n; i++) {
        const row *r = &m->rows[i];
        tm_inproc_any a = {.capture = r->c};
        PyObject *t = Py_BuildValue("(dN)", r->t_real, fields_dict(TM_REC_CAPTURE, &a, r->tag));
        if (!t) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

static PyObject *Monitor_clear(Monitor *m, PyObject *noargs)
{
    (void)noargs;
    for (size_t i = 0; i < m->n; i++)
        Py_CLEAR(m->rows[i].tag);
    m->n = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t Monitor_len(Monitor *m)
{
    return (Py_ssize_t)m->n;
}

static PyObject *Monitor_get_device(Monitor *m, void *closure)
{
    (void)closure;
    if (m->device < 0)
        Py_RETURN_NONE;
    return PyLong_FromLong(m->device);
}

static PyMethodDef Monitor_methods[] = {
    {"capture", (PyCFunction)(void (*)(void))Monitor_capture, METH_FASTCALL,
     "capture(tag): record allocator and host memory now, tagged."},
    {"_rows", (PyCFunction)Monitor_rows, METH_NOARGS, "the history as a list of tuples"},
    {"clear", (PyCFunction)Monitor_clear, METH_NOARGS, "forget the history (not the records)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Monitor_getset[] = {
    {"device", (getter)Monitor_get_device, NULL, "CUDA device index, None = current", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Monitor_seq = {.sq_length = (lenfunc)Monitor_len};

static PyTypeObject MonitorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "trainmon._trainmon.MonitorCore",
    .tp_basicsize = sizeof(Monitor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The C core of trainmon.Monitor.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Monitor_init,
    .tp_dealloc = (destructor)Monitor_dealloc,
    .tp_methods = Monitor_methods,
    .tp_getset = Monitor_getset,
    .tp_as_sequence = &Monitor_seq,
};

/* -------------------------------------------------------------- reading */

static PyObject *rec_to_tuple(const tm_record *rec)
{
    PyObject *d = NULL;
    const char *kind = NULL;
    tm_inproc_any a;
    tm_rec_event_def ev;
    if (tm_inproc_is(rec->type)) {
        /* every in-process type, its fields by the schema's keys */
        if (tm_inproc_decode(rec, &a) == 0) {
            kind = tm_inproc_type_name(rec->type);
            d = fields_dict(rec->type, &a, NULL);
        }
    } else if (rec->type == TM_REC_EVENT && tm_rec_decode_event(rec, &ev) == 0) {
        kind = "event";
        d = Py_BuildValue("{s:s#,s:s#}", "name", ev.name, (Py_ssize_t)ev.name_len, "json",
                          ev.json ? ev.json : "", (Py_ssize_t)(ev.json ? ev.json_len : 0));
    }
    if (!kind) {
        if (PyErr_Occurred())
            return NULL;
        kind = "other";
        d = Py_BuildValue("{s:H,s:I}", "type_id", rec->type, "len", rec->len);
    }
    if (!d)
        return NULL;
    return Py_BuildValue("(sLN)", kind, (long long)rec->t_ns, d);
}

/* read_records(path) -> (header dict, [(kind, t_ns, fields)], damage count,
 * torn tail).  For tests and post-mortem scripts; raises OSError. */
static PyObject *py_read_records(PyObject *self, PyObject *args)
{
    (void)self;
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path))
        return NULL;
    tm_reader *r = NULL;
    int rc = tm_reader_open(&r, path);
    if (rc) {
        errno = -rc;
        return PyErr_Format(PyExc_OSError, "%s", tm_last_error());
    }
    const tm_rec_header *h = tm_reader_header(r);
    PyObject *hd =
        Py_BuildValue("{s:i,s:i,s:s,s:s,s:L,s:L}", "pid", h->pid, "rank", h->rank, "host", h->host,
                      "role", h->role, "start_real_ns", (long long)h->start_real_ns,
                      "start_mono_ns", (long long)h->start_mono_ns);
    PyObject *l = PyList_New(0);
    PyObject *res = NULL;
    if (!hd || !l)
        goto out;
    tm_record rec;
    while ((rc = tm_reader_next(r, &rec)) > 0) {
        PyObject *t = rec_to_tuple(&rec);
        if (!t || PyList_Append(l, t) < 0) {
            Py_XDECREF(t);
            goto out;
        }
        Py_DECREF(t);
    }
    if (rc < 0) {
        PyErr_Format(PyExc_OSError, "%s", tm_last_error());
        goto out;
    }
    const tm_damage *dm;
    size_t nd = tm_reader_damage(r, &dm);
    res =
        Py_BuildValue("(OOnO)", hd, l, (Py_ssize_t)nd, tm_reader_torn_tail(r) ? Py_True : Py_False);
out:
    Py_XDECREF(hd);
    Py_XDECREF(l);
    tm_reader_close(&r);
    return res;
}

/* schema() -> {kind: ((key, type, unit), ...)}: the in-process record
 * fields, as read_records and the Monitor key them. */
static PyObject *py_schema(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    static const char *const ctype[] = {"", "u32", "i32", "u64", "i64", "f64", "str"};
    PyObject *res = PyDict_New();
    for (unsigned type = 0; res && type < 64; type++) {
        const tm_inproc_field *f;
        size_t n = tm_inproc_fields((uint16_t)type, &f);
        if (!n)
            continue;
        PyObject *t = PyTuple_New((Py_ssize_t)n);
        for (size_t i = 0; t && i < n; i++) {
            PyObject *e = Py_BuildValue("(sss)", f[i].key, ctype[f[i].type], f[i].unit);
            if (!e)
                Py_CLEAR(t);
            else
                PyTuple_SET_ITEM(t, (Py_ssize_t)i, e);
        }
        if (!t || PyDict_SetItemString(res, tm_inproc_type_name((uint16_t)type), t) < 0)
            Py_CLEAR(res);
        Py_XDECREF(t);
    }
    return res;
}

/* format_record: not needed in Python; the dump formatter is tested in C. */

/* --------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"open", py_open, METH_VARARGS, "open(path, run_dir, rank, role, meta_json[, max_size])"},
    {"recording", py_recording, METH_NOARGS, "whether records are being written"},
    {"file_open", py_file_open, METH_NOARGS, "whether this process's record file is open"},
    {"event", py_event, METH_VARARGS, "event(name, json)"},
    {"rank_bind", py_rank_bind, METH_O, "rank_bind(learn): called at the first step"},
    {"set_rank", py_set_rank, METH_VARARGS,
     "set_rank(rank, world_size, path, role, meta_json) -> file still to be made"},
    {"bind_torch", py_bind_torch, METH_VARARGS, "bind_torch(memstats, is_init, meminfo, curdev)"},
    {"next_enter", py_next_enter, METH_O, "DataLoader __next__ entered (the iterator)"},
    {"fetched", py_fetched, METH_NOARGS, "a DataLoader fetch in the main process"},
    {"worker_cpu", py_worker_cpu, METH_NOARGS, "this process's CPU time (s)"},
    {"train_mode", py_train_mode, METH_O, "Module.train(mode) called (outermost)"},
    {"coll_enter", py_coll_enter, METH_NOARGS, "a blocking torch.distributed collective entered"},
    {"coll_exit", py_coll_exit, METH_NOARGS, "a blocking torch.distributed collective returned"},
    {"save_enter", py_save_enter, METH_O, "torch.save entered (is_main_thread)"},
    {"save_exit", py_save_exit, METH_VARARGS, "a saver returned or raised (nbytes, ok[, kind])"},
    {"compile_enter", py_compile_enter, METH_O, "torch.compile began compiling (is_main_thread)"},
    {"compile_exit", py_compile_exit, METH_VARARGS, "it ended (trigger, compile_id)"},
    {"gc_callback", (PyCFunction)(void (*)(void))py_gc_callback, METH_FASTCALL,
     "gc.callbacks' entry: times the collections (phase, info)"},
    {"gc_explicit", py_gc_explicit, METH_O, "the job's gc.collect() called (True) or returned"},
    {"next_exit", py_next_exit, METH_O, "DataLoader __next__ returned (True) or raised"},
    {"shutdown", py_shutdown, METH_NOARGS, "close the open step"},
    {"reset_steps", py_reset_steps, METH_NOARGS, "forget step state (detach)"},
    {"stats", py_stats, METH_NOARGS, "step counters"},
    {"add_threshold", py_add_threshold, METH_VARARGS, "add_threshold(metric, above, window)"},
    {"clear_thresholds", py_clear_thresholds, METH_NOARGS, ""},
    {"take_pending", py_take_pending, METH_NOARGS, "thresholds that fired"},
    {"phase_enter", py_phase_enter, METH_O, ""},
    {"phase_exit", py_phase_exit, METH_O, ""},
    {"current_phase", py_current_phase, METH_NOARGS, ""},
    {"opt_pre", py_opt_pre, METH_NOARGS, ""},
    {"opt_post", py_opt_post, METH_O, "the step's end when the lead optimizer steps"},
    {"loader_dropped", py_loader_dropped, METH_O, "a DataLoader iterator is deleted"},
    {"loader_gone", py_loader_gone, METH_NOARGS, "a DataLoader iterator's __del__ ended"},
    {"backward_enter", py_backward_enter, METH_NOARGS, "torch.autograd.backward entered"},
    {"backward_exit", py_backward_exit, METH_NOARGS, "torch.autograd.backward returned"},
    {"opt_pre_hook", (PyCFunction)(void (*)(void))py_opt_pre_hook, METH_FASTCALL,
     "torch's global optimizer step pre-hook"},
    {"opt_post_hook", (PyCFunction)(void (*)(void))py_opt_post_hook, METH_FASTCALL,
     "torch's global optimizer step post-hook: the step's end"},
    {"hook", py_hook, METH_VARARGS,
     "hook(kind, orig[, aux]): torch's backward, __next__, optimizer step or fetch, timed"},
    {"method", py_method, METH_O, "method(hook): hook as a class attribute torch.compile binds"},
    {"engine_hook", py_engine_hook, METH_O,
     "engine_hook(engine): torch's autograd engine, its backward passes timed"},
    {"bind_hooks", py_bind_hooks, METH_VARARGS, "bind_hooks(boundary, opt_no)"},
    {"bind_steps", py_bind_steps, METH_VARARGS,
     "bind_steps(global_forward_pre_hooks, is_grad_enabled)"},
    {"now", py_now, METH_NOARGS, "CLOCK_MONOTONIC in ns"},
    {"redact_args", py_redact_args, METH_O, "redact_args(argv): secret-looking values redacted"},
    {"worker_batch", py_worker_batch, METH_VARARGS, "worker_batch(worker_id, t0_ns)"},
    {"oom", py_oom, METH_VARARGS, "oom(source, device, requested, free, total, snapshot)"},
    {"anatomy", py_anatomy, METH_VARARGS,
     "anatomy(device, optimizer, params, grads, optim_state, activations, unknown, allocated, "
     "reserved, free, total, batch_size, reason, kind)"},
    {"oom_summary", py_oom_summary, METH_VARARGS, "oom_summary(seq, device, status, pool, ...)"},
    {"opt_made", py_opt_made, METH_NOARGS, "an optimizer was constructed"},
    {"zgrad_bind", py_zgrad_bind, METH_O,
     "zgrad_bind(install): zero_grad timed in training loops without a DataLoader"},
    {"lead_optimizer", py_lead_optimizer, METH_NOARGS, "the lead optimizer's number, -1 if none"},
    {"anatomy_again", py_anatomy_again, METH_NOARGS,
     "the memory anatomy due again at the next boundary"},
    {"read_records", py_read_records, METH_VARARGS, "read_records(path)"},
    {"schema", py_schema, METH_NOARGS, "the in-process record fields: {kind: ((key, type, unit))}"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "trainmon._trainmon",
    "trainmon's in-process recorder (C).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__trainmon(void)
{
    for (int i = 0; i < F_N; i++)
        g_last[i] = NAN;
    ArmedHooksType.tp_base = &PyODict_Type;
    if (PyType_Ready(&ForwardEndType) < 0)
        return NULL;
    tm_fastclock_init(&g_clk);                /* calibrated 200 ms after the import */
    pthread_atfork(NULL, NULL, fetch_forked); /* a DataLoader worker asks get_worker_info() */
    pthread_atfork(NULL, NULL, gc_forked);
    if (PyType_Ready(&MonitorType) < 0 || PyType_Ready(&HookType) < 0 ||
        PyType_Ready(&ArmedHooksType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&MonitorType);
    if (PyModule_AddObject(m, "MonitorCore", (PyObject *)&MonitorType) < 0) {
        Py_DECREF(&MonitorType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ArmedHooksType);
    if (PyModule_AddObject(m, "ArmedHooks", (PyObject *)&ArmedHooksType) < 0) {
        Py_DECREF(&ArmedHooksType);
        Py_DECREF(m);
        return NULL;
    }
    g_gc_key_gen = PyUnicode_InternFromString("generation");
    g_gc_key_coll = PyUnicode_InternFromString("collected");
    if (!g_gc_key_gen || !g_gc_key_coll) {
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddStringConstant(m, "VERSION", TM_VERSION);
    return m;
}
