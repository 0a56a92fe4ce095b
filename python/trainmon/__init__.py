"""trainmon: an in-process flight recorder for PyTorch training jobs.

    import trainmon
    mon = trainmon.Monitor()          # the familiar hand-written GPU memory monitor
    mon.capture("after forward")      # allocator + host memory, tagged, recorded
    trainmon.attach()                 # steps, data wait, workers, optimizer, OOM
    with trainmon.phase("eval"): ...
    trainmon.on_threshold("data_wait_fraction", above=0.3, callback=fn)

Records go to <run dir>/rank<R>.tmr (pid<P>.tmr outside distributed jobs);
the run directory is TRAINMON_RUN_DIR, an argument, or a new directory under
./trainmon-runs.  `trainmon dump FILE` prints them; read_records(FILE) reads
them back in Python.

The recording is done in C (trainmon._trainmon); this module only installs
hooks.  Nothing here may raise into the training job: every hook body
catches what goes wrong, says it once on stderr and goes on.

Hooks installed by attach() (docs/ARCHITECTURE.md):
  - torch.utils.data.dataloader._BaseDataLoaderIter.__next__ (every loader,
    single- and multi-process): a step runs from one call's entry to the
    next's; the time inside the call is the data wait.  Only the thread that
    first iterates a loader (the training thread) counts steps.
  - the dataset fetchers (_MapDatasetFetcher/_IterableDatasetFetcher.fetch):
    in a DataLoader worker each batch's fetch time, the worker's CPU time and
    RSS go to the worker's own file worker-r<R>-<pid>.tmr, opened in the
    worker after the fork.  Forked workers inherit the patch; spawned ones
    get it only when TRAINMON_ATTACH=1 makes them import trainmon.
  - optimizer steps: each optimizer class's step wrapped by a C Hook around
    torch's own wrapper (when the class's first instance is made, or at
    attach for classes already in use); torch's global step hooks only
    where Optimizer has no __init__ to wrap.
  - AMP's GradScaler.step: a C Hook that ends the step where the scaler
    skipped the optimizer's step (inf/NaN gradients), flagged skipped.
  - torch's autograd engine (its run_backward, which torch.autograd.backward
    and Tensor.backward call): backward passes, timed by an engine of a
    subtype of torch's put in its place (where the engine is not as
    expected, torch.autograd.backward wrapped by a C Hook instead).
    __next__ is wrapped by a C Hook object: no Python frame of ours per
    call (the agent's cost per step: docs/BENCHMARKS.md).
  - DataLoader.__iter__ (a C Hook): iter() of a loader without persistent
    workers starts its worker processes, and the loop waits for that too;
    the first __next__ on the iterator right after counts from iter().
  - the DataLoader iterators' __del__: a loop that breaks drops its
    iterator, which ends a loader-ended step there.
  - the first module forward after a step boundary, in loops without a
    DataLoader: torch's global forward pre-hook dict is replaced, while
    empty, by an ArmedHooks whose truth test (made by every hook-free
    module call) notes it; else a hook put into that dict at the boundary
    and taken out by its first call.
  The step model (docs/DIAGNOSIS.md) is the C core's: a step ends at the
  lead optimizer's step, else at the end of a backward pass (no optimizer),
  else at the next DataLoader batch; eval batches are recorded apart.
  - OOM: the allocator's OOM observer (torch >= 2.0, attached once CUDA is
    up, as it is per device); sys.excepthook for an OutOfMemoryError that
    ends the job (any torch).
"""
import atexit
import json
import math
import os
import sys
import threading
import time
import weakref

from . import _trainmon as _c

__version__ = _c.VERSION
__all__ = ["Monitor", "attach", "detach", "phase", "on_threshold", "clear_thresholds",
           "run_dir", "stats", "read_records", "schema", "ThresholdEvent", "anatomy"]

GB = float(1 << 30)

# ------------------------------------------------------------------ safety

_reported = set()
_lock = threading.Lock()


def _report(msg):
    """Says msg on stderr, once per process."""
    if msg in _reported:
        return
    _reported.add(msg)
    try:
        sys.stderr.write("trainmon: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


def _torch_version():
    return getattr(sys.modules.get("torch"), "__version__", None)


def _report_exc(what, exc):
    """One line: the measure that is off, the torch it is off on and why;
    the job runs unchanged.  The same goes into the record file (event
    inproc.measure_off, once per measure) for the report."""
    tv = _torch_version()
    why = "%s: %s" % (type(exc).__name__, exc)
    _report("%s off%s (%s); the job runs unchanged" % (what, " on torch %s" % tv if tv else "", why))
    if what in _off_said:
        return
    _off_said.add(what)
    try:
        _c.event("inproc.measure_off", json.dumps({"measure": what, "torch": tv, "why": why[:300]}))
    except Exception:
        pass


_off_said = set()


def _moved(what, missing):
    """A torch internal the agent needs is not where it was: one line."""
    _report_exc(what, LookupError("%s not found" % missing))


# --------------------------------------------------------------- recorder

_state = {
    "pid": None,        # the process that opened the record file
    "run_dir": None,
    "role": None,
    "rank": -1,
    "torch_bound": False,
    "attached": False,
    "patches": [],      # (owner, name, original) to undo
    "hook_handles": [],
    "memory_history": None,
    "oom_observer": False,
    "ooms": 0,
    "oom_recorded": False,
    "snapshots": 0,
    "oom_snaps": 0,
}


def _env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v is not None:
            try:
                return int(v)
            except ValueError:
                pass
    return None


def _rank():
    r = _env_int("RANK")
    if r is None and "--multiprocessing-fork" in sys.argv:
        # a process multiprocessing spawned (a DataLoader worker of a rank
        # whose launcher set no RANK): the rank its parent learned from its
        # process group (_learn_rank).  Not a helper script the rank runs.
        r = _env_int("TRAINMON_RANK")
    if r is None:
        r = _env_int("SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
    return r


def _world_size():
    return _env_int("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")


def _default_run_dir():
    # Ranks of one job must agree on the directory without talking: use the
    # launcher's run id when there is one.
    rid = os.environ.get("TORCHELASTIC_RUN_ID")
    if rid and rid != "none":
        return os.path.join("trainmon-runs", "run-" + rid)
    return os.path.join("trainmon-runs", "%s-%d" % (time.strftime("%Y%m%d-%H%M%S"), os.getpid()))


def _argv_for_meta():
    """sys.argv as the record file stores it: the values of secret-looking
    options redacted (--api-key=..., --password X, HF_TOKEN=...), the rule
    of `trainmon run`'s meta.json, unless TRAINMON_KEEP_ARGS=1 (run
    --keep-args sets it)."""
    argv = [str(a) for a in sys.argv]
    if os.environ.get("TRAINMON_KEEP_ARGS") == "1":
        return argv
    try:
        return _c.redact_args(argv)
    except Exception:
        return ["<argv not recorded>"]


def _ensure_recorder(run_dir=None):
    """Opens this process's record file once (per process: a forked child
    opens its own under another name).  Never raises."""
    pid = os.getpid()
    if _state["pid"] == pid:
        return
    try:
        with _lock:
            if _state["pid"] == pid:
                return
            _state["pid"] = pid
            d = run_dir or os.environ.get("TRAINMON_RUN_DIR")
            if not d:
                d = _default_run_dir()
                # Only ./trainmon-runs is made here: the run directory itself
                # (its last component, 0700, refused when another user's) is
                # made by _c.open, as is a TRAINMON_RUN_DIR that is missing.
                os.makedirs(os.path.dirname(os.path.abspath(d)), exist_ok=True)
            d = os.path.abspath(d)
            # Children (spawned workers, helper scripts) write to the same run.
            os.environ.setdefault("TRAINMON_RUN_DIR", d)
            rank = _rank()
            role = "rank%d" % rank if rank is not None else "pid%d" % pid
            path = os.path.join(d, role + ".tmr")
            if os.path.exists(path):
                # Another process of this run (a spawned DataLoader worker with
                # TRAINMON_ATTACH=1, a second script) must not truncate it.
                role = "%s-pid%d" % (role, pid)
                path = os.path.join(d, role + ".tmr")
            torch = sys.modules.get("torch")
            meta = {
                "pid": pid, "rank": rank, "world_size": _world_size(),
                "local_rank": _env_int("LOCAL_RANK"), "argv": _argv_for_meta(),
                "python": sys.version.split()[0], "trainmon": __version__,
                "torch": getattr(torch, "__version__", None) if torch else None,
            }
            meta.update(_thread_counts(torch))
            _state.update(run_dir=d, role=role, rank=-1 if rank is None else rank, meta=meta)
            # TRAINMON_MAX_SIZE (bytes): flight-recorder mode, newest data kept.
            max_size = _env_int("TRAINMON_MAX_SIZE") or 0
            _c.open(path, d, _state["rank"], role[:31], json.dumps(meta), max(max_size, 0))
            atexit.register(_at_exit)
    except Exception as e:
        _report_exc("opening the run directory", e)


def run_dir():
    """The run directory this process records into (None before the first
    Monitor, attach or phase)."""
    return _state["run_dir"]


def stats():
    """Step counters seen so far: steps (begun), steps_closed, steps_counted
    (complete steps, as the report counts them), data_wait_fraction (the
    whole run's, warm-up left out, as the report's; None before a complete
    step), and data wait and step time summed over the last 256 steps.
    The agent's own clock: clock ("tsc": counter reads converted, "tsc
    (calibrating)", or "clock_gettime: " and why the counter is not used;
    src/lib/fastclock.h), clock_tsc_reads, clock_anchors (counter and clock
    read together), clock_recalibrations (anchors that disagreed with the
    clock).  after_forward_every_step: the loop's work between a forward
    and its backward pass is measured on every step (a measured step had 2%
    of its time there; before that, on a sample of the steps)."""
    return _c.stats()


def read_records(path):
    """Reads a record file: (header dict, [(kind, t_ns, fields)], number of
    damaged places, whether the last record was torn).  Raises OSError.

    An in-process record's fields are every stored field under the key the
    library's schema gives it (the keys of `trainmon dump --json` and
    `trainmon export --format jsonl`), with its stored value: clocks in
    monotonic ns, enums as numbers, unavailable numbers None.  schema()
    lists them."""
    return _c.read_records(path)


def schema():
    """The in-process record fields: {kind: ((key, type, unit), ...)}, kind
    as in read_records ("step", "capture", ...), type "u32", "i64", "f64",
    "str", ..., unit "ns", "bytes", "count", "s" or ""."""
    return _c.schema()


def _bind_torch():
    """Hands torch's allocator entry points to the C core, once.  CUDA is
    never initialised by trainmon: the core asks is_initialized() first."""
    if _state["torch_bound"]:
        return
    _state["torch_bound"] = True
    try:
        torch = sys.modules.get("torch")
        if torch is None:
            import torch  # noqa: F401  (a Monitor is used with torch)
        cuda = getattr(torch, "cuda", None)
        ms = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
        if cuda is None or ms is None:
            _c.bind_torch(None, None, None, None)
            return
        _c.bind_torch(ms, getattr(cuda, "is_initialized", None),
                      getattr(cuda, "mem_get_info", None), getattr(cuda, "current_device", None))
    except Exception as e:
        _report_exc("reading torch's allocator", e)


# ---------------------------------------------------------------- Monitor

def _gb(v):
    return None if v is None else v / GB


def _count(v):
    return None if v is None else int(v)


def _same(v):
    return v


# The Monitor's columns: their historic, user-facing names, each showing one
# field of the capture record by its schema key; the unit the schema gives
# that field says how it is shown (bytes as GB, counts as int).
_COLUMNS = (("allocated_gb", "allocated"), ("reserved_gb", "reserved"),
            ("peak_gb", "peak_allocated"), ("free_mem_gb", "free_device"),
            ("num_retries", "num_alloc_retries"), ("active_gb", "active"),
            ("inactive_split_gb", "inactive_split"), ("requested_gb", "requested"),
            ("num_ooms", "num_ooms"), ("host_rss_gb", "host_rss"),
            ("total_mem_gb", "total_device"))
_CONVERT = {"bytes": _gb, "count": _count}
_CAPTURE_UNITS = {key: unit for key, _, unit in _c.schema().get("capture", ())}
_FIELDS = ("time", "tag") + tuple(col for col, _ in _COLUMNS)


class Monitor(_c.MonitorCore):
    """The interface of the typical hand-written GPU memory monitor.

    capture(tag) records allocated, reserved, peak allocated, free device
    memory and allocation retries (plus active, inactive-split, requested,
    OOM count and host RSS) from one torch._C._cuda_memoryStats call read
    in C.  Unavailable values (no CUDA, CUDA not initialised yet, an older
    torch without the key) are None in history, empty in CSV, null in JSON.
    It never calls reset_peak_memory_stats: peak_gb is torch's peak since
    the job's own last reset.
    """

    def __init__(self, device=None, run_dir=None):
        try:
            super().__init__(device)
        except Exception as e:
            _report_exc("Monitor(device=%r)" % (device,), e)
            super().__init__(None)
        _bind_torch()
        _ensure_recorder(run_dir)

    def __reduce__(self):
        # A Monitor sent to another process (a spawned DataLoader worker
        # holding a dataset that owns one) arrives empty and records there.
        return (type(self), (self.device,))

    @property
    def history(self):
        """A dict of lists, one entry per capture: time (seconds since the
        epoch), tag, allocated_gb, reserved_gb, peak_gb, free_mem_gb,
        num_retries, active_gb, inactive_split_gb, requested_gb, num_ooms,
        host_rss_gb, total_mem_gb."""
        h = {k: [] for k in _FIELDS}
        convert = [(col, key, _CONVERT.get(_CAPTURE_UNITS.get(key), _same))
                   for col, key in _COLUMNS]
        for t, fields in self._rows():
            h["time"].append(t)
            h["tag"].append(fields.get("tag"))
            for col, key, conv in convert:
                h[col].append(conv(fields.get(key)))
        return h

    def summary(self, file=None):
        """Prints max allocated, max retries and the number of samples, and
        returns them as a dict (None: never measured); with attach(), also
        the memory anatomy per device (key "anatomy", trainmon.anatomy())."""
        h = self.history
        alloc = [v for v in h["allocated_gb"] if v is not None]
        retries = [v for v in h["num_retries"] if v is not None]
        s = {"max_allocated_gb": max(alloc) if alloc else None,
             "max_retries": max(retries) if retries else None,
             "samples": len(h["tag"])}
        out = file or sys.stdout
        fmt = lambda v, f: "n/a" if v is None else f % v  # noqa: E731
        print("trainmon: max allocated %s, max retries %s, %d samples"
              % (fmt(s["max_allocated_gb"], "%.3f GB"), fmt(s["max_retries"], "%d"),
                 s["samples"]), file=out)
        # the memory anatomy, when the lead optimizer has stepped (attach)
        s["anatomy"] = anatomy()
        gb = lambda v: "n/a" if v != v else "%.3f GB" % (v / GB)  # noqa: E731
        for r in s["anatomy"]:
            print("trainmon: %s: params %s, grads %s, optimizer state %s, activations %s"
                  % (r["device"], gb(r["params"]), gb(r["grads"]), gb(r["optim_state"]),
                     gb(r["activations"])), file=out)
        return s

    def to_csv(self, path):
        """Writes the history as CSV (header row; unavailable = empty)."""
        import csv
        h = self.history
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(_FIELDS)
            for i in range(len(h["tag"])):
                w.writerow(["" if h[k][i] is None else h[k][i] for k in _FIELDS])

    def to_json(self, path):
        """Writes the history as a JSON object of lists (unavailable = null)."""
        with open(path, "w") as f:
            json.dump(self.history, f)


# ----------------------------------------------------------------- phases

class phase:
    """with trainmon.phase("eval"): ... -- marks a phase (nestable); the
    allocator is sampled on entry and exit once CUDA is up."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = str(name)

    def __enter__(self):
        if _state["pid"] != os.getpid():
            _ensure_recorder()
        _c.phase_enter(self.name)
        return self

    def __exit__(self, *exc):
        _c.phase_exit(self.name)
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*a, **kw):
            with phase(self.name):
                return fn(*a, **kw)
        return wrapped


# ------------------------------------------------------------- thresholds

class ThresholdEvent:
    """What a threshold callback receives."""
    __slots__ = ("metric", "value", "above", "step")

    def __init__(self, metric, value, above, step):
        self.metric, self.value, self.above, self.step = metric, value, above, step

    def __repr__(self):
        return "ThresholdEvent(metric=%r, value=%.4g, above=%r, step=%d)" % (
            self.metric, self.value, self.above, self.step)


_thresholds = []  # index -> (metric, above, callback)


def on_threshold(metric, above, callback, window=10):
    """Runs callback(ThresholdEvent) on the training thread, at the step
    boundary after metric crosses above `above` -- once per crossing: it
    fires again only after the value went back to or under the line.

    Metrics (the exporter's names; a "trainmon_" prefix is accepted):
      data_wait_fraction   share of step time spent waiting for data, over
                           the last `window` steps (alias data_wait_share)
      data_wait_seconds, step_time_seconds   means over the last `window` steps
                           (steps as the report counts them: complete ones,
                           each wait capped at its step; the first step of
                           the process, warm-up, is left out)
      gpu_memory_allocated_fraction, gpu_memory_reserved_fraction
                           of the device's memory (aliases allocated_share,
                           reserved_share)
      gpu_memory_allocated_bytes, gpu_memory_reserved_bytes,
      gpu_memory_alloc_retries_total, host_rss_bytes
    Step boundaries come from attach(), which this calls if needed.  A
    callback that raises an Exception is reported on stderr, never
    propagated; SystemExit (sys.exit() to stop a job that went wrong) and
    KeyboardInterrupt reach the job, raised from the call that ended the
    step (optimizer.step(), the backward pass, the DataLoader's next batch)
    once that call has returned.  Raises
    ValueError for an unknown metric (a programming error, at set-up)."""
    if not callable(callback):
        raise TypeError("trainmon.on_threshold: callback must be callable")
    idx = _c.add_threshold(str(metric), float(above), int(window))
    _thresholds.append((str(metric), float(above), callback))
    assert idx == len(_thresholds) - 1
    if not _state["attached"]:
        attach()
    return idx


def clear_thresholds():
    _c.clear_thresholds()
    del _thresholds[:]


def _on_boundary(flags):
    """Runs at a step boundary when the C core asks: due callbacks, and the
    OOM observer once CUDA is up."""
    if flags & _CUDA_NEWS:
        _on_cuda_ready()
    if flags & _ANATOMY_DUE:
        _anatomy_due()
    if flags & 0xFFFF:
        for idx, value, step in _c.take_pending():
            try:
                metric, above, cb = _thresholds[idx]
            except IndexError:
                continue
            try:
                cb(ThresholdEvent(metric, value, above, step))
            except Exception as e:
                _report("threshold callback for %s raised %s: %s" % (metric, type(e).__name__, e))
                try:
                    _c.event("threshold.callback_error", json.dumps(
                        {"metric": metric, "error": "%s: %s" % (type(e).__name__, e)}))
                except Exception:
                    pass


# --------------------------------------------------------- memory anatomy
#
# What the memory of each device is made of (issue #16, docs/DIAGNOSIS.md
# "Memory anatomy"): the bytes of the parameters, their gradients and the
# state of every optimizer that has stepped (the lead's and any other: a
# GAN's generator and discriminator), each storage counted once, and on
# CUDA the rest of what is allocated at the start of the next backward pass
# (the activations).  The C core asks for it (flag _ANATOMY_DUE) at the
# lead optimizer's first step and every 4096th after, and at the boundary
# after another optimizer's first step; a record per device is written the
# first time and when a later check finds the parameter or state bytes
# changed by more than _ANATOMY_CHANGE.  Cost: one walk over the
# optimizers' tensors per check (docs/DIAGNOSIS.md "Memory anatomy").

_CUDA_NEWS = 1 << 16
_ANATOMY_DUE = 1 << 17
_ANATOMY_CHANGE = 0.05  # a share of the bytes: a re-check finding less writes nothing
_ANATOMY_FIRST, _ANATOMY_CHANGED = 1, 2
_NAN = float("nan")
_anat = {"last": None, "pending": None, "rows": [], "again": False, "mods": None}


def _storage_of(t):
    """(data_ptr, bytes) of t's whole storage: torch >= 2.0 untyped_storage,
    torch 1.13 storage() (a TypedStorage with the same two methods).  Raises
    for a tensor without one (sparse, some subclasses)."""
    us = getattr(t, "untyped_storage", None)
    s = us() if us is not None else t.storage()
    return s.data_ptr(), float(s.nbytes())


def _live_objects(torch):
    """(optimizers, modules): every torch.optim.Optimizer and nn.Module
    alive in the process, found by one pass over the garbage collector's
    objects (gc.get_objects: tens of ms in a process of a million objects,
    docs/BENCHMARKS.md; asked at the anatomy's first walk and at an OOM,
    never per step).  Types are tested by type(o), so no object's own
    __class__ code runs."""
    import gc
    import itertools
    optim = getattr(torch, "optim", None)
    Optimizer = getattr(getattr(optim, "optimizer", None), "Optimizer", None) or \
        getattr(optim, "Optimizer", None)
    Module = getattr(getattr(torch, "nn", None), "Module", None)
    # classes whose metaclass is type itself: issubclass is then the C
    # MRO test, with no __subclasscheck__ of anyone's
    bases = tuple(c for c in (Module, Optimizer) if type(c) is type)
    if not bases:
        return [], []
    objs = gc.get_objects()
    # each object's type tested in C (map, issubclass, compress): no Python
    # frame per object, under half the time of a loop; nothing is hashed,
    # so no metaclass's own __hash__ / __eq__ runs (nor can it refuse).
    found = list(itertools.compress(
        objs, map(issubclass, map(type, objs), itertools.repeat(bases))))
    del objs
    mods = [o for o in found if isinstance(Module, type) and issubclass(type(o), Module)]
    opts = [o for o in found if isinstance(Optimizer, type) and issubclass(type(o), Optimizer)]
    return opts, mods


def _module_params(torch, mods):
    """The parameters modules hold themselves (each module is listed, its
    children too): the `_parameters` dict, as nn.Module keeps them."""
    Tensor = torch.Tensor
    out = []
    for m in mods:
        d = getattr(m, "__dict__", {}).get("_parameters")
        if isinstance(d, dict):
            out.extend(p for p in list(d.values()) if isinstance(p, Tensor))
    return out


def _anatomy_walk(torch, opts, frozen=()):
    """{(device type, index): [params, grads, optim_state, unknown]} bytes of
    the tensors of opts (an optimizer, or a list of them), each storage
    counted once across all four and all the optimizers (tied weights,
    views, foreach/fused state, a parameter two optimizers hold).  frozen:
    more parameters (the live modules' ones no optimizer holds: a LoRA
    job's base model, a distillation teacher, an EMA copy), counted as
    parameters.  A tensor whose storage cannot be read is counted in
    unknown by its own size, once: never a storage twice, never a tensor
    lost."""
    Tensor = torch.Tensor
    seen = set()
    dev = {}

    def add(t, cat):
        d = t.device
        if d.type == "meta":
            return  # holds no memory
        key = (d.type, -1 if d.index is None else d.index)
        row = dev.get(key)
        if row is None:
            row = dev[key] = [0.0, 0.0, 0.0, 0.0]
        try:
            ptr, n = _storage_of(t)
        except Exception:
            if ("id", id(t)) in seen:
                return
            seen.add(("id", id(t)))
            try:
                row[3] += float(t.numel() * t.element_size())
            except Exception:
                pass
            return
        if (key, ptr) in seen:
            return
        seen.add((key, ptr))
        row[cat] += n

    if not isinstance(opts, (list, tuple)):
        opts = [opts]
    params = [p for opt in opts for g in opt.param_groups for p in g["params"]
              if isinstance(p, Tensor)]
    for p in params:
        add(p, 0)
    for p in frozen:
        add(p, 0)
    for p in params + list(frozen):
        g = p.grad
        if g is not None:
            add(g, 1)
    for st in [st for opt in opts for st in list(opt.state.values())]:
        vals = st.values() if isinstance(st, dict) else (st,)
        for v in list(vals):
            if isinstance(v, Tensor):
                add(v, 2)
            elif isinstance(v, (list, tuple)):
                for x in v:
                    if isinstance(x, Tensor):
                        add(x, 2)
    return dev


def _leading_dim(batch):
    """The batch size: the leading dimension of the batch's first tensor
    (itself, or the first of a tuple, list or dict), -1 when there is none."""
    torch = sys.modules.get("torch")
    Tensor = getattr(torch, "Tensor", ())
    items = [batch]
    for _ in range(3):  # nested at most a few levels
        nxt = []
        for b in items:
            if isinstance(b, Tensor):
                return int(b.shape[0]) if b.dim() > 0 else -1
            if isinstance(b, dict):
                nxt.extend(b.values())
            elif isinstance(b, (list, tuple)):
                nxt.extend(b)
        items = nxt
    return -1


def _anatomy_changed(dev, last):
    if last is None or set(dev) != set(last):
        return True
    for k, row in dev.items():
        old = last[k]
        for i in (0, 2):  # parameters and state (gradients come and go)
            base = max(old[i], 1.0)
            if abs(row[i] - old[i]) > _ANATOMY_CHANGE * base:
                return True
    return False


def _lead_optimizer():
    """(number, optimizer) of the lead optimizer (the C core's), the
    optimizer None when it is not known here."""
    no = _c.lead_optimizer()
    for o, n in list(_opt_numbers.items()):
        if n == no:
            return no, o
    return no, None


def _walkable(opt):
    """Whether opt is an optimizer of torch's kind (param_groups, state):
    a duck-typed optimizer or a stand-in has nothing to count."""
    return isinstance(getattr(opt, "param_groups", None), list) and \
        hasattr(getattr(opt, "state", None), "values")


def _all_walkable(lead):
    """Whether the lead and every other optimizer that stepped can be
    walked: one that cannot (duck-typed) would have its state taken for
    activations, so nothing is split then."""
    return _walkable(lead) and all(_walkable(o) for o in list(_opt_numbers.keys()))


def _anatomy_opts(lead):
    """The optimizers to count: the lead first, then every other optimizer
    that has stepped and is still alive, in the order they first stepped."""
    rest = sorted(((n, o) for o, n in list(_opt_numbers.items()) if o is not lead),
                  key=lambda x: x[0])
    return [lead] + [o for _, o in rest if _walkable(o)]


def _anatomy_frozen(torch):
    """The live modules' parameters (frozen ones among them): the modules
    found by one garbage-collector pass at the first walk, kept by weak
    reference (a module made later is not seen)."""
    refs = _anat.get("mods")
    if refs is None:
        refs = []
        try:
            for m in _live_objects(torch)[1]:
                try:
                    refs.append(weakref.ref(m))
                except TypeError:
                    pass
        except Exception as e:
            _report_exc("memory anatomy: finding the modules", e)
        _anat["mods"] = refs
    return _module_params(torch, [m for m in (r() for r in refs) if m is not None])


def _anatomy_due():
    """At a due lead optimizer step (or the boundary after another
    optimizer's first step): walks the optimizers' tensors, and writes the
    anatomy now (CPU) or at the start of the next backward pass (CUDA, for
    the activations).  Never raises."""
    try:
        torch = sys.modules.get("torch")
        no, opt = _lead_optimizer()
        if _anat["pending"] is not None:
            _anat["again"] = True  # asked again after the pending one is written
            return
        if torch is None or opt is None:
            return
        # not torch's tensors and optimizers (a stand-in, a duck-typed
        # optimizer): nothing to count, and nothing to say
        if getattr(torch, "Tensor", None) is None or not _all_walkable(opt):
            return
        opts = _anatomy_opts(opt)
        dev = _anatomy_walk(torch, opts, _anatomy_frozen(torch))
        last = _anat["last"]
        if not _anatomy_changed(dev, last):
            return
        _anat["last"] = {k: list(v) for k, v in dev.items()}
        pend = {"opts": opts, "no": no, "dev": dev, "batch": -1,
                "reason": _ANATOMY_FIRST if last is None else _ANATOMY_CHANGED}
        if any(k[0] == "cuda" for k in dev) and _c_cuda_up(torch):
            _anat["pending"] = pend
            _anatomy_arm(torch)
        else:
            _anatomy_write(torch, pend, None)
    except Exception as e:
        _anat["pending"] = None
        _report_exc("memory anatomy", e)


def _anatomy_arm(torch):
    """One-shot wrappers: the next torch.autograd.backward call measures the
    activations, the next DataLoader batch gives the batch size; each puts
    back what it replaced on its first call (no cost on other steps)."""
    ag = torch.autograd
    cur_bw = ag.__dict__.get("backward")
    if cur_bw is not None and not getattr(cur_bw, "_trainmon_anatomy", False):
        def backward(*args, **kwargs):
            if ag.__dict__.get("backward") is backward:
                ag.backward = cur_bw
            pend, _anat["pending"] = _anat["pending"], None
            if pend is not None:
                try:
                    _anatomy_write(torch, pend, _anatomy_backward_start(torch, pend))
                except Exception as e:
                    _report_exc("memory anatomy", e)
            return cur_bw(*args, **kwargs)
        backward._trainmon = backward._trainmon_anatomy = True
        backward.__wrapped__ = cur_bw  # what detach() puts back if it is still here
        ag.backward = backward
    dlm = sys.modules.get("torch.utils.data.dataloader")
    it = getattr(dlm, "_BaseDataLoaderIter", None)
    cur_nx = it.__dict__.get("__next__") if it is not None else None
    if cur_nx is not None and not getattr(cur_nx, "_trainmon_anatomy", False):
        def __next__(self):
            if it.__dict__.get("__next__") is __next__:
                setattr(it, "__next__", cur_nx)
            batch = cur_nx(self)
            pend = _anat["pending"]
            if pend is not None:
                try:
                    pend["batch"] = _leading_dim(batch)
                except Exception:
                    pass
            return batch
        __next__._trainmon = __next__._trainmon_anatomy = True
        setattr(it, "__next__", __next__)


def _anatomy_backward_start(torch, pend):
    """{device key: (activations, allocated, reserved, free, total)} at the
    start of a backward pass: what is allocated beyond the parameters, the
    gradients present now and the optimizer's state."""
    now = _anatomy_walk(torch, pend["opts"], _anatomy_frozen(torch))
    out = {}
    for key, row in pend["dev"].items():
        if key[0] != "cuda":
            continue
        d = key[1]
        alloc = float(torch.cuda.memory_allocated(d))
        reserved = float(torch.cuda.memory_reserved(d))
        try:
            free, total = (float(x) for x in torch.cuda.mem_get_info(d))
        except Exception:
            free = total = _NAN
        cur = now.get(key, row)
        act = alloc - (cur[0] + cur[1] + cur[2] + cur[3])
        out[key] = (act if act >= 0 else _NAN, alloc, reserved, free, total)
    return out


def _anatomy_write(torch, pend, at_bwd):
    rows = []
    for key, (par, grad, state, unk) in sorted(pend["dev"].items()):
        act, alloc, reserved, free, total = (at_bwd or {}).get(key, (_NAN,) * 5)
        batch = pend["batch"] if key[0] == "cuda" else -1
        _c.anatomy(key[1], pend["no"], par, grad, state, act, unk, alloc, reserved, free, total,
                   batch, pend["reason"], key[0])
        rows.append({"device": "%s:%d" % key if key[1] >= 0 else key[0], "params": par,
                     "grads": grad, "optim_state": state, "activations": act, "unknown": unk,
                     "batch_size": batch})
    _anat["rows"] = rows
    if _anat["again"]:  # asked while this one was pending: at the next boundary
        _anat["again"] = False
        _c.anatomy_again()


def _anatomy_flush():
    """At exit: a pending anatomy whose backward pass never came is written
    without its activations."""
    pend, _anat["pending"] = _anat["pending"], None
    if pend is not None:
        _anatomy_write(sys.modules.get("torch"), pend, None)


def anatomy():
    """The last memory anatomy this process recorded: a list of dicts, one
    per device (device, params, grads, optim_state, activations, unknown:
    bytes, NaN unknown; batch_size, -1 unknown); [] before the lead
    optimizer's first step."""
    return [dict(r) for r in _anat["rows"]]


# ----------------------------------------------------------------- attach

def _patch(owner, name, new):
    orig = owner.__dict__[name]
    setattr(owner, name, new)
    _state["patches"].append((owner, name, orig))


def _make_next(orig):
    """The DataLoader iterators' __next__: a Hook (C) that tells the step
    model of the call's entry (the step boundary; due callbacks run there)
    and of its return (a batch, or an exception: StopIteration at the
    loader's end), and returns orig's batch or raises its exception."""
    h = _c.hook("next", orig)
    h.__wrapped__ = orig
    h.__name__ = "__next__"
    h._trainmon = True
    return h


def _make_iter(orig):
    """DataLoader.__iter__: a Hook (C) that notes the iterator it made and
    when; the loop's first __next__ on it, right after, counts its wait from
    the iter() call (starting worker processes is a wait for data)."""
    h = _c.hook("iter", orig)
    h.__wrapped__ = orig
    h.__name__ = "__iter__"
    h._trainmon = True
    return h


_MISSING = object()  # an attribute a patch added (detach deletes it)


def _make_del(orig):
    """__del__ of the DataLoader iterators: a loop that breaks drops its
    iterator, which ends the last loader-ended step (not lost at exit)."""
    dropped, gone = _c.loader_dropped, _c.loader_gone

    def __del__(self):
        try:
            dropped(self)
        except Exception:
            pass
        try:
            if orig is not _MISSING:
                orig(self)
        finally:
            try:
                gone()  # its workers stopped: a new iter()'s join waits for that too
            except Exception:
                pass
    __del__._trainmon = True
    return __del__


_fetch_hooks = []  # [(fetcher class, its fetch Hook, torch's fetch)] while attached


def _fetch_unhook():
    """The main process's fetch Hooks out (the C Hook asks once a __next__
    came back there: the step model has the batches, and torch's own fetch
    is ~320 instructions a batch cheaper than the call through the Hook)."""
    for cls, h, orig in _fetch_hooks:
        if cls.__dict__.get("fetch") is h:
            setattr(cls, "fetch", orig)


def _fetch_rehook():
    """After a fork, in the child (a DataLoader worker, most often): the
    fetch Hooks back in, to time the worker's batches; never raises."""
    try:
        if _state["attached"]:
            for cls, h, orig in _fetch_hooks:
                if cls.__dict__.get("fetch") is orig:
                    setattr(cls, "fetch", h)
    except Exception:
        pass


def _make_fetch(orig, get_worker_info):
    """A dataset fetcher's fetch: a Hook (C) that times the batch in a
    DataLoader worker (get_worker_info() not None: a worker record per
    batch) and, in the main process (num_workers=0), counts it (a __next__
    hook that never fires is seen against this count) and passes it
    through; no Python frame of ours per batch."""
    h = _c.hook("fetch", orig, get_worker_info)
    h.__wrapped__ = orig
    h.__name__ = "fetch"
    h._trainmon = True
    return h


_opt_numbers = weakref.WeakKeyDictionary()


def _opt_no(opt):
    try:
        n = _opt_numbers.get(opt)
        if n is None:
            n = _opt_numbers[opt] = len(_opt_numbers)
        return n
    except TypeError:
        return 0


def _boundary(flags):
    """What the C hooks call at a step boundary that has work for the glue
    (threshold callbacks due, CUDA up); raises only what is not an
    Exception (the job's KeyboardInterrupt, a callback's SystemExit), which
    the hook raises into the job."""
    try:
        _on_boundary(flags)
    except Exception as e:
        _report_exc("step boundary", e)


def _install_backward(torch):
    """Backward passes: torch's autograd engine
    (torch.autograd.variable.Variable._execution_engine) replaced by one of
    a subtype whose run_backward is timed, at no cost of a call through a
    wrapper (python/trainmon/_trainmon.c "the autograd engine"); where the
    engine is not as expected, torch.autograd.backward wrapped by a Hook.
    (A torch without autograd, a stand-in in tests: nothing to time.)"""
    var = sys.modules.get("torch.autograd.variable")
    V = getattr(var, "Variable", None)
    eng = getattr(V, "__dict__", {}).get("_execution_engine")
    if eng is not None:
        try:
            new = _c.engine_hook(eng)
        except Exception:
            new = None  # another engine (or none made): the Hook below times the passes
        if new is not None:
            if new is not eng:
                _patch(V, "_execution_engine", new)
            return
    ag = getattr(torch, "autograd", None)
    bw = getattr(ag, "__dict__", {}).get("backward")
    if bw is not None and not getattr(bw, "_trainmon", False):
        _patch(ag, "backward", _make_backward(bw))


def _make_backward(orig):
    """torch.autograd.backward (Tensor.backward calls it): a backward pass,
    a micro-batch of the step model, and the step's end where the job
    steps no torch.optim optimizer (manual SGD).  A Hook (C): no Python
    frame of ours per backward pass."""
    import functools
    h = _c.hook("backward", orig)
    functools.update_wrapper(h, orig)
    h._trainmon = True
    return h


def _make_optstep(step):
    """An optimizer class's step (torch's profiling wrapper around it, which
    calls the global step hooks), wrapped by a Hook (C) that does the step
    hooks' work: no Python frame, and none of the ~3,000 instructions a step
    that torch's Python loops spend calling global hooks.  update_wrapper
    carries torch's `hooked` mark, so torch does not wrap it again."""
    import functools
    h = _c.hook("optstep", step)
    functools.update_wrapper(h, step)
    h._trainmon = True
    return _c.method(h)  # bound as torch.compile expects (the extension's py_method)


def _install_amp(torch):
    """AMP's GradScaler.step (torch.amp.GradScaler on 2.x,
    torch.cuda.amp.GradScaler on 1.x): a Hook (C) that ends the step where
    the scaler skipped the optimizer's step (inf/NaN gradients), flagged
    skipped (rules_amp.c).  Subclasses that do not define step run the
    wrapped one."""
    for name in ("torch.amp.grad_scaler", "torch.cuda.amp.grad_scaler"):
        cls = getattr(sys.modules.get(name), "GradScaler", None)
        step = getattr(cls, "__dict__", {}).get("step")
        if step is not None and callable(step) and not getattr(step, "_trainmon", False):
            import functools
            h = _c.hook("ampstep", step)
            functools.update_wrapper(h, step)
            h._trainmon = True
            _patch(cls, "step", _c.method(h))


def _module_call_codes(nnm):
    """The code objects in which torch tests its global forward pre-hook
    dict on a module call: Module._call_impl and, torch >= 2.0, the `inner`
    function it defines (the path of a module with hooks of its own); then
    Module._wrapped_call_impl (torch >= 2.1), which calls _call_impl: the
    frames above the caller of a module (no test is made in it)."""
    module = getattr(nnm, "Module", None)
    code = getattr(getattr(module, "_call_impl", None), "__code__", None)
    if code is None:
        return None
    inner = [c for c in code.co_consts if getattr(c, "co_name", None) == "inner"]
    wrapped = getattr(getattr(module, "_wrapped_call_impl", None), "__code__", None)
    return (code,) + tuple(inner) + ((wrapped,) if wrapped is not None else ())


def _function_apply_code(torch):
    """The code of torch.autograd.Function.apply where it is Python (torch
    >= 2.0: a frame above every Function's forward, reentrant activation
    checkpointing's included), else None (torch 1.x: C)."""
    apply = getattr(getattr(getattr(torch, "autograd", None), "Function", None), "apply", None)
    return getattr(getattr(apply, "__func__", apply), "__code__", None)


def _forward_hooks(nnm):
    """torch's global forward pre-hook dict, as the step model sees the
    first forward after a step boundary (loops without a DataLoader): while
    the job has no global forward pre-hook, an ArmedHooks (C) is put in
    its place, an OrderedDict whose truth test, made by every hook-free
    module call, notes that forward; module calls keep torch's hook-free
    path.  Else the dict itself, into which a hook is put at each
    boundary."""
    import collections
    hooks = getattr(nnm, "_global_forward_pre_hooks", None)
    if type(hooks) is not collections.OrderedDict or len(hooks):
        return hooks
    armed = _c.ArmedHooks()  # an OrderedDict again while disarmed (the C side)
    _state["armed_hooks"] = armed
    nnm._global_forward_pre_hooks = armed
    _state["patches"].append((nnm, "_global_forward_pre_hooks", hooks))
    return armed


# Blocking collectives a loop calls itself (dist.all_reduce(loss), a
# barrier): their wall time is the rank's wait for the others.  The DDP
# reducer's gradient all-reduce is not among them (C++): its wait shows in
# the backward pass, timed per step (docs/DIAGNOSIS.md, ranks.straggler).
_COLLECTIVES = ("all_reduce", "barrier", "all_gather", "broadcast", "reduce_scatter",
                "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all", "reduce",
                "gather", "scatter", "all_gather_object", "broadcast_object_list",
                "monitored_barrier")


def _compiling_test():
    """torch.compiler.is_compiling (torch >= 2.3), else, on 2.0-2.2,
    torch._dynamo.external_utils.is_compiling where dynamo is loaded when
    the wrapper is made (not tried on those versions), else a function
    that says no.  A Python wrapper of the agent's that calls the extension (a
    collective, Module.train, Optimizer.__init__, a synchronize) calls the
    function it wraps straight away while dynamo traces it: dynamo cannot
    trace the extension's C functions and broke the graph there, an error
    under fullgraph=True (a compiled function calling dist.all_reduce raised
    "Attempted to call function marked as skipped" under trainmon, and ran
    without it), and it constant-folds this test to true, so the traced
    code is torch's own.  (_torchdynamo_inline on a method tripped dynamo's
    guards.)  Inside compiled code the agent does not time these calls."""
    f = getattr(getattr(sys.modules.get("torch"), "compiler", None), "is_compiling", None)
    if not callable(f):
        f = getattr(sys.modules.get("torch._dynamo.external_utils"), "is_compiling", None)
    return f if callable(f) else (lambda: False)


def _make_collective(orig):
    import functools
    enter, leave = _c.coll_enter, _c.coll_exit
    compiling = _compiling_test()

    @functools.wraps(orig)
    def collective(*args, **kwargs):
        if kwargs.get("async_op") or compiling():  # async: its wait is in Work.wait()
            return orig(*args, **kwargs)
        enter()
        try:
            return orig(*args, **kwargs)
        finally:
            leave()
    collective._trainmon = True
    return collective


def _make_train(orig):
    """Module.train(mode) (eval() calls it): the outermost call tells the
    step model that an eval span begins or ends (recursive calls on the
    children pass straight through)."""
    import functools
    mode_changed = _c.train_mode
    depth = [0]
    compiling = _compiling_test()

    @functools.wraps(orig)
    def train(self, *args, **kwargs):  # (mode=True): any signature passes
        if depth[0] or compiling():
            return orig(self, *args, **kwargs)
        depth[0] = 1
        try:
            try:
                mode_changed(args[0] if args else kwargs.get("mode", True))
            except Exception as e:
                _report_exc("eval timing (loops without a DataLoader)", e)
            return orig(self, *args, **kwargs)
        finally:
            depth[0] = 0
    train._trainmon = True
    return train


# Checkpoint savers (docs/DIAGNOSIS.md, checkpoint.blocking): torch.save,
# and the frameworks' own save of a whole checkpoint, which holds the writes
# torch.save does not (Lightning writes its serialized buffer to the file
# after torch.save returns; the Hugging Face Trainer saves the weights with
# safetensors).  Each: (module, class or None, function, kind, position
# and keyword of the path argument among the call's arguments (self
# included), or -1).  kind is the saver's number in the C extension's
# table (py_save_exit); a save inside another (torch.save inside
# Trainer.save_checkpoint) is part of the outer one.
_SAVERS = (
    ("torch", None, "save", 0, 1, "f"),
    ("lightning.pytorch.trainer.trainer", "Trainer", "save_checkpoint", 1, 1, "filepath"),
    ("pytorch_lightning.trainer.trainer", "Trainer", "save_checkpoint", 1, 1, "filepath"),
    ("transformers.trainer", "Trainer", "_save_checkpoint", 2, -1, None),
    ("safetensors.torch", None, "save_file", 3, 1, "filename"),
    # torch.distributed.checkpoint (FSDP's and torchtitan's checkpoints): a
    # directory of shards, one torch.save per tensor inside.  Its save (set-up
    # included) and save_state_dict both call the module's _save_state_dict,
    # looked up at each call (so a `from ... import save` made before
    # attach() is seen too): it blocks the loop, or runs in async_save's
    # thread; async_save blocks the loop while it stages the state
    ("torch.distributed.checkpoint.state_dict_saver", None, "save", 4, -1, "checkpoint_id"),
    ("torch.distributed.checkpoint.state_dict_saver", None, "_save_state_dict", 4, 1,
     "storage_writer"),
    ("torch.distributed.checkpoint.state_dict_saver", None, "async_save", 5, -1, "checkpoint_id"),
)
_DCP = (4, 5)  # the kinds of torch.distributed.checkpoint's savers
# _save_state_dict(state_dict, storage_writer, process_group, coordinator_rank, no_dist, ...)
_DCP_ARGS = ("state_dict", "storage_writer", "process_group", "coordinator_rank", "no_dist")


def _dcp_target(args, kwargs):
    """(the directory a torch.distributed.checkpoint save or
    _save_state_dict writes, this process's index in its plan, the
    coordinator's index): the directory is its storage writer's path
    (FileSystemWriter's), else its checkpoint_id (None when neither is a
    local path: an fsspec URL, another writer); the index is the rank in
    its process group, 0 without one (no_dist, or no group)."""
    a = dict(zip(_DCP_ARGS, args))
    a.update(kwargs)
    f = getattr(a.get("storage_writer"), "path", None) or a.get("checkpoint_id")
    me = 0
    dist = sys.modules.get("torch.distributed")
    if (not a.get("no_dist") and dist is not None and dist.is_available() and
            dist.is_initialized()):
        me = dist.get_rank(a.get("process_group"))
    return (f if isinstance(f, (str, os.PathLike)) else None, me,
            int(a.get("coordinator_rank") or 0))


_DIR_SCAN_MAX = 4096  # entries of a checkpoint directory looked at, at most


def _dcp_bytes(d, me, coord):
    """The bytes this process wrote into a torch.distributed.checkpoint
    directory d: its shards __R_N.distcp (R = me, its index in the save's
    plan: its rank in the process group) and the metadata it writes
    (.metadata on the coordinator, __R.metadata without collectives); -1
    when unknown: no shard of its own (another storage writer's names), no
    such directory, more than _DIR_SCAN_MAX entries (every rank of a large
    job writes into it, and this runs on the saving thread).  Never
    follows a symbolic link."""
    try:
        mine, meta = "__%d_" % me, "__%d.metadata" % me
        total = n = shards = 0
        with os.scandir(d) as it:
            for e in it:
                n += 1
                if n > _DIR_SCAN_MAX:
                    return -1
                name = e.name
                shard = name.startswith(mine) and name.endswith(".distcp")
                if not (shard or name == meta or (me == coord and name == ".metadata")):
                    continue
                if e.is_file(follow_symlinks=False):
                    total += e.stat(follow_symlinks=False).st_size
                    shards += shard
        return total if shards else -1
    except Exception:
        return -1


def _tree_bytes(d, depth=3):
    """The bytes of the regular files under directory d, depth levels down
    at most (a Hugging Face checkpoint folder: the model, optimizer,
    scheduler, RNG and trainer state files; an FSDP model's folder in it);
    -1 when unknown: no such directory, or more than _DIR_SCAN_MAX entries
    in all (this runs on the saving thread).  Never follows a symbolic
    link."""
    total = n = 0
    dirs = [(d, 0)]  # (folder, its depth) still to read
    try:
        while dirs:
            path, level = dirs.pop()
            with os.scandir(path) as it:
                for e in it:
                    n += 1
                    if n > _DIR_SCAN_MAX:
                        return -1
                    if e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                    elif level + 1 < depth and e.is_dir(follow_symlinks=False):
                        dirs.append((e.path, level + 1))
        return total
    except Exception:
        return -1


def _hf_checkpoint_bytes(args, kwargs):
    """The bytes of the checkpoint folder the Hugging Face Trainer's
    _save_checkpoint(model, trial) just wrote (its output_dir's
    checkpoint-<global step>, as it names it); -1 on a process that does
    not save the model (should_save false: another rank's) or when the
    Trainer is not as expected."""
    try:
        tr = args[0]
        if not tr.args.should_save:
            return -1
        trial = args[2] if len(args) > 2 else kwargs.get("trial")
        d = os.path.join(tr._get_output_dir(trial=trial), "checkpoint-%d" % tr.state.global_step)
        return _tree_bytes(d)
    except Exception:
        return -1


def _dcp_item_codes():
    """The code of the functions of torch.distributed.checkpoint that
    torch.save a piece of its checkpoint (a tensor into its shard, another
    object into bytes; () before it is imported): part of the DCP save, also
    on the writer's own threads (FileSystemWriter(thread_count > 1)), where
    no save of ours is open."""
    fs = sys.modules.get("torch.distributed.checkpoint.filesystem")
    if fs is None:
        return ()
    dp = sys.modules.get("torch.distributed.checkpoint.default_planner")
    planner = getattr(dp, "DefaultSavePlanner", None)
    return tuple(c for c in (
        getattr(getattr(fs, "_write_item", None), "__code__", None),
        getattr(getattr(planner, "transform_object", None), "__code__", None)) if c is not None)


def _save_target(args, kwargs, pos, kw):
    """Where a save writes, asked before it runs: (the path or file object,
    its position then: a file object's tell(), None for a path or when it
    has none)."""
    if pos < 0:
        return None, None
    f = args[pos] if len(args) > pos else kwargs.get(kw)
    if f is None or isinstance(f, (str, bytes, os.PathLike)):
        return f, None
    try:
        return f, int(f.tell())
    except Exception:
        return f, None


def _saved(f, pos0):
    """(bytes written, where): a path's size after the save, or how far a
    file object's position moved (a stream torch.distributed.checkpoint
    appends to, a reused buffer); -1 unknown.  where: 1 a file (a path, or
    a file object with a descriptor), 0 memory (io.BytesIO: Lightning
    serializes into one and writes it out afterwards), -1 unknown."""
    try:
        if isinstance(f, (str, bytes, os.PathLike)):
            return os.stat(f).st_size, 1
        try:
            f.fileno()
            where = 1
        except Exception:
            where = 0
        n = int(f.tell()) - pos0 if pos0 is not None else -1
        return (n if n >= 0 else -1), where
    except Exception:
        return -1, -1


def _make_save(orig, kind=0, pos=1, kw="f"):
    """A checkpoint saver (torch.save, a framework's).  Timed on every
    thread; a save on the training thread (or the main thread before
    training begins) blocks the loop, and the step model takes its time
    out of the steps (docs/DIAGNOSIS.md, checkpoint.blocking).  The
    original's result or exception passes through unchanged; leave() runs
    only after enter() did (an interrupt between them leaves no count
    behind)."""
    import functools
    import threading
    enter, leave, ident = _c.save_enter, _c.save_exit, threading.get_ident
    main = threading.main_thread().ident
    top = 1 << 62

    dcp = kind in _DCP
    getframe = sys._getframe

    @functools.wraps(orig)
    def save(*args, **kwargs):
        if kind == 0:
            items = _dcp_item_codes()
            if items and getframe(1).f_code in items:
                return orig(*args, **kwargs)  # a piece of a DCP save, maybe on its thread
        entered = ok = False
        nbytes, where = -1, (1 if kind else -1)  # a framework's saver writes files
        try:
            try:
                if kind == 4:
                    f, me, coord = _dcp_target(args, kwargs)
                    pos0 = None
                elif dcp:
                    f = pos0 = None
                else:
                    f, pos0 = _save_target(args, kwargs, pos, kw)
            except Exception:
                f, pos0 = None, None
            outer = enter(ident() == main)
            entered = True
            r = orig(*args, **kwargs)
            ok = True
            if outer is False:  # inside another save: its bytes are the outer one's
                pass
            elif kind == 4:  # (async_save's files are written by its thread's save)
                if f is not None:
                    nbytes = _dcp_bytes(f, me, coord)
            elif kind == 2:
                nbytes = _hf_checkpoint_bytes(args, kwargs)
            elif pos >= 0 and not dcp:
                nbytes, where = _saved(f, pos0)
            return r
        finally:
            if entered:
                leave(min(nbytes, top), ok, kind, where)
    save._trainmon = True
    return save


def _install_saver(mod, spec):
    """Wraps one saver of _SAVERS in the loaded module mod (once)."""
    _, cls, fname, kind, pos, kw = spec
    owner = mod.__dict__.get(cls) if cls else mod
    fn = getattr(owner, "__dict__", {}).get(fname) if owner is not None else None
    if fn is None or not callable(fn) or getattr(fn, "_trainmon", False):
        return
    wrapped = _make_save(fn, kind, pos, kw)
    _patch(owner, fname, wrapped)
    # the same function under another name: torch.save is
    # torch.serialization.save; torch.distributed.checkpoint.save is its
    # state_dict_saver's (where the package imported it before attach())
    alias = (mod.__dict__.get("serialization") if mod.__name__ == "torch" else
             sys.modules.get(mod.__name__.rpartition(".")[0]) if kind in _DCP else None)
    if alias is not None and getattr(alias, "__dict__", {}).get(fname) is fn:
        _patch(alias, fname, wrapped)


def _unalias_savers():
    """At detach: a package that imported a wrapped saver from its module
    while attached (torch.distributed.checkpoint's `from .state_dict_saver
    import save`, run after the finder wrapped it) gets torch's back."""
    try:
        for sv in _SAVERS:
            if sv[3] not in _DCP:
                continue
            pkg = sys.modules.get(sv[0].rpartition(".")[0])
            cur = getattr(pkg, "__dict__", {}).get(sv[2])
            if getattr(cur, "_trainmon", False) and getattr(cur, "__wrapped__", None) is not None:
                setattr(pkg, sv[2], cur.__wrapped__)
    except Exception as e:
        _report_exc("checkpoint timing", e)


class _OnImport:
    """A meta-path finder that calls hook(module) right after one of the
    modules named is imported (after attach(): lightning, transformers
    and safetensors import torch first; torch imports torch._dynamo only
    when the job compiles).  Only those modules are looked at; attach()
    puts it first on sys.meta_path, detach() takes it off.  what names
    the hook in a report of its exception."""

    def __init__(self, names, hook, what):
        self.names = set(names)
        self.busy = set()
        self.hook = hook
        self.what = what

    def find_spec(self, name, path=None, target=None):
        if name not in self.names or name in self.busy:
            return None
        self.busy.add(name)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module"):
                return None
            orig_exec = loader.exec_module
            hook, what = self.hook, self.what

            def exec_module(module):
                orig_exec(module)
                try:
                    hook(module)
                except Exception as e:
                    _report_exc(what, e)
            loader.exec_module = exec_module
            self.names.discard(name)
            return spec
        except Exception as e:
            _report_exc(self.what, e)
            return None
        finally:
            self.busy.discard(name)


def _savers_of(module):
    for sv in _SAVERS:
        if sv[0] == module.__name__:
            _install_saver(module, sv)


def _install_gc():
    """Python's garbage collector: every collection timed by the agent's C
    callback in gc.callbacks (long and full ones as gc.pause events,
    docs/DIAGNOSIS.md gc.pauses).  Appended last, so that a callback of
    the job's runs first at a collection's start.  gc.collect() is wrapped
    so that the job's own collections are told from automatic ones (a
    collect() imported by name before attach() is not seen: its
    collections read as automatic ones)."""
    import gc
    if _c.gc_callback not in gc.callbacks:
        gc.callbacks.append(_c.gc_callback)
    orig = gc.__dict__.get("collect")
    if orig is not None and not getattr(orig, "_trainmon", False):
        _patch(gc, "collect", _make_collect(orig))


def _make_collect(orig):
    """gc.collect(generation=2) -> the objects freed, as orig; the agent is
    told the call's collection is the job's own."""
    explicit = _c.gc_explicit

    def collect(generation=2):
        explicit(True)
        try:
            return orig(generation)
        finally:
            explicit(False)
    collect.__doc__ = orig.__doc__
    collect.__wrapped__ = orig
    collect._trainmon = True
    return collect


_COMPILE_CALLBACKS = "torch._dynamo.callback"


def _compile_start(args):
    """torch._dynamo's start-of-compilation callback."""
    try:
        _c.compile_enter(threading.current_thread() is threading.main_thread())
    except Exception as e:
        _report_exc("torch.compile timing", e)


def _compile_end(args):
    """torch._dynamo's end-of-compilation callback: the trigger's name and
    the compile id ("0/1": frame 0's second compilation)."""
    try:
        trig = getattr(getattr(args, "callback_trigger", None), "name", None)
        cid = getattr(args, "compile_id", None)
        _c.compile_exit(trig if isinstance(trig, str) else None,
                        cid if isinstance(cid, str) else None)
    except Exception as e:
        _report_exc("torch.compile timing", e)


def _compile_hooks(module):
    """Registers the callbacks on torch._dynamo.callback's handler (torch
    2.4 and later; an older torch has no handler: nothing is timed)."""
    h = getattr(module, "callback_handler", None)
    if h is None or not hasattr(h, "register_start_callback"):
        return
    if _compile_start not in getattr(h, "start_callbacks", ()):
        h.register_start_callback(_compile_start)
        h.register_end_callback(_compile_end)


def _install_compile():
    """torch.compile's compilations (docs/DIAGNOSIS.md steps.compile): now
    if torch._dynamo is loaded, else when the job first compiles (importing
    it here would cost every job a second)."""
    mod = sys.modules.get(_COMPILE_CALLBACKS)
    if mod is not None:
        _compile_hooks(mod)
        return
    finder = _OnImport([_COMPILE_CALLBACKS], _compile_hooks, "torch.compile timing")
    sys.meta_path.insert(0, finder)
    _state["compile_finder"] = finder


def _uninstall_compile():
    finder = _state.pop("compile_finder", None)
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)
    h = getattr(sys.modules.get(_COMPILE_CALLBACKS), "callback_handler", None)
    for lst, fn in ((getattr(h, "start_callbacks", None), _compile_start),
                    (getattr(h, "end_callbacks", None), _compile_end)):
        while isinstance(lst, list) and fn in lst:
            lst.remove(fn)


_DYNAMO = "torch._dynamo"


def _bind_step_calls(module=None):
    """The Python functions the extension calls at a training step's end
    (_zgrad_install, _learn_rank), bound to it.  Inside a compiled region
    dynamo would trace them as frames of their own: they are bound through
    torch.compiler.disable once torch._dynamo is loaded, now or when the job
    first compiles (calling disable here would import it: 1.1-1.9 s more at
    the start of every torch 2.x job, docs/BENCHMARKS.md).  Without dynamo
    nothing is compiled, and the plain functions are bound."""
    dis = None
    if module is not None or _DYNAMO in sys.modules:
        dis = getattr(getattr(sys.modules.get("torch"), "compiler", None), "disable", None)
    zg, rk = (dis(_zgrad_install), dis(_learn_rank)) if dis is not None else \
        (_zgrad_install, _learn_rank)
    _c.zgrad_bind(zg)
    _c.rank_bind(rk)
    _state["step_calls"] = (zg, rk)
    if dis is not None:
        return
    if module is None and "dynamo_finder" not in _state:
        finder = _OnImport([_DYNAMO], _bind_step_calls, "batch preparation timing (zero_grad)")
        sys.meta_path.insert(0, finder)
        _state["dynamo_finder"] = finder


def _install_savers():
    pending = []
    for sv in _SAVERS:
        mod = sys.modules.get(sv[0])
        if mod is not None:
            _install_saver(mod, sv)
        elif sv[0] not in pending:
            pending.append(sv[0])
    if pending:
        finder = _OnImport(pending, _savers_of, "checkpoint timing")
        sys.meta_path.insert(0, finder)
        _state["savers_finder"] = finder


def _install_collectives(torch):
    dist = getattr(torch, "distributed", None)
    if dist is None or not getattr(dist, "is_available", lambda: False)():
        return
    for name in _COLLECTIVES:
        fn = _orig_of(dist, name)
        if fn is not None:
            _patch(dist, name, _make_collective(fn))
    fn = _orig_of(dist, "init_process_group")
    if fn is not None:
        _patch(dist, "init_process_group", _make_rank_learner(fn, after=True))
    fn = _orig_of(dist, "destroy_process_group")
    if fn is not None:  # (a group made by a function bound before attach)
        _patch(dist, "destroy_process_group", _make_rank_learner(fn, after=False))


def _make_rank_learner(orig, after):
    """torch.distributed.init_process_group(...), then the process's rank
    from its group (after), or destroy_process_group(...), the rank taken
    before the group goes (_learn_rank)."""
    import functools

    @functools.wraps(orig)
    def learner(*args, **kwargs):
        if not after:
            _learn_rank()
        r = orig(*args, **kwargs)
        if after:
            _learn_rank()
        return r
    learner._trainmon = True
    return learner


def _learn_rank():
    """The rank of a process whose launcher set no RANK (Lightning's own
    DDP launcher, torch.multiprocessing.spawn: the rank is an argument of
    init_process_group), from its default process group once it is up:
    the record file, if not yet made, is made as rank<N>.tmr with the rank
    in its header; if made, a process.rank event says it (the reader
    applies it to the file's records).  DataLoader workers forked after
    record it as their rank.  Never raises."""
    try:
        if _state["pid"] != os.getpid() or os.environ.get("RANK") is not None:
            return  # torchrun's, and the launchers that set RANK, are right
        dist = sys.modules.get("torch.distributed")
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return
        rank, world = int(dist.get_rank()), int(dist.get_world_size())
        if rank < 0:
            return
        # spawned DataLoader workers (mp.spawn's children spawn theirs) read it
        os.environ["TRAINMON_RANK"] = str(rank)
        if rank == _state["rank"]:
            return  # (SLURM_PROCID of a batch step's one task is 0 in every
            # process that mp.spawn or Lightning starts in it: the group's wins)
        role = "rank%d" % rank
        path = os.path.join(_state["run_dir"], role + ".tmr")
        if os.path.exists(path):
            role = "%s-pid%d" % (role, os.getpid())
            path = os.path.join(_state["run_dir"], role + ".tmr")
        meta = dict(_state.get("meta") or {}, rank=rank, world_size=world)
        if _c.set_rank(rank, world, path, role[:31], json.dumps(meta)):
            _state.update(role=role)  # the file is made under this name
        _state.update(rank=rank, meta=meta)
    except Exception as e:
        _report_exc("learning the process's rank", e)


def _orig_of(owner, name):
    """owner.name as owner itself holds it (not inherited), if callable and
    not already ours (a second attach): else None."""
    orig = owner.__dict__.get(name) if owner is not None else None
    if orig is None or not callable(orig) or getattr(orig, "_trainmon", False):
        return None
    return orig


def _hook_method(owner, name, kind):
    """owner.name, a class's own method, wrapped by a Hook of kind in an
    instancemethod, the binding torch.compile knows (the extension's
    py_method): the cheapest (~370 instructions a call), for
    Optimizer.zero_grad, which dynamo does not trace with fullgraph=True
    with or without trainmon.  detach restores it."""
    orig = _orig_of(owner, name)
    if orig is None:
        return
    hk = _c.hook(kind, orig)
    hk.__wrapped__ = orig
    hk.__name__ = name
    hk._trainmon = True
    _patch(owner, name, _c.method(hk))


def _hook_py(owner, name, kind):
    """owner.name (a module's function or a class's own method) in a Python
    function that calls a Hook of kind, and torch's own while dynamo traces
    it (_compiling_test): Module.zero_grad and the synchronizes, whose time
    matters only outside compiled code.  A Hook itself is a value dynamo
    cannot trace (a module's dict) or call with its instance (a class's): a
    compiled function calling model.zero_grad() with fullgraph=True, or
    torch.cuda.synchronize(), broke there under trainmon.  A Python frame
    and torch's is_compiling() a call, ~2,600 instructions (Optimizer's
    zero_grad, called every step by most loops, takes _hook_method's
    instancemethod instead).  detach restores owner.name."""
    orig = _orig_of(owner, name)
    if orig is None:
        return
    import functools
    hk = _c.hook(kind, orig)
    compiling = _compiling_test()

    @functools.wraps(orig)
    def hooked(*args, **kwargs):
        if compiling():
            return orig(*args, **kwargs)
        return hk(*args, **kwargs)
    hooked._trainmon = True
    _patch(owner, name, hooked)


# The loop's waits for the device, left out of its batch preparation spans
# (the extension's g_hk_ns): the modules' synchronize() and the streams'
# and events'.  Not Tensor.item or .tolist: a Hook on torch.Tensor is what
# a __torch_function__ subclass's table keyed by torch.Tensor.item no
# longer finds, optimizers call .item() hundreds of times a step (Adam's
# step counters), and CPU work in .tolist() is batch preparation.
_SYNC_MODULES = ("torch.cuda", "torch.accelerator", "torch.xpu", "torch.mps")
_SYNC_CLASSES = (("torch.cuda.streams", "Stream"), ("torch.cuda.streams", "Event"))
# The optimizer's work a loop does between its last backward pass and the
# optimizer step (nanoGPT's unscale_ and clip_grad_norm_ there): left out
# of the work it does there for its next batch (nanochat's), as zero_grad
# is.  By the module's name as the loops call them (a name imported from
# torch before the first step keeps torch's own).
_CLIP_FUNCS = (("torch.nn.utils", "clip_grad_norm_"), ("torch.nn.utils", "clip_grad_value_"),
               ("torch.nn.utils", "clip_grad_norm"),
               ("torch.nn.utils.clip_grad", "clip_grad_norm_"),
               ("torch.nn.utils.clip_grad", "clip_grad_value_"))
_SCALER_CLASSES = (("torch.amp.grad_scaler", "GradScaler"),
                   ("torch.cuda.amp.grad_scaler", "GradScaler"))


def _zgrad_install():
    """Called once by the extension at the end of the first step of a
    training loop without a DataLoader: zero_grad() of optimizers and
    modules timed, so that the preparation spans leave it out (it is the
    optimizer's work, not the batch's), and the waits for the device
    (torch.cuda.synchronize(): the GPU finishing the step the host ran
    ahead of, which is compute); other loops never pay the Hook."""
    try:
        _hook_method(getattr(sys.modules.get("torch.optim.optimizer"), "Optimizer", None),
                     "zero_grad", "zero_grad")
        _hook_py(getattr(sys.modules.get("torch.nn.modules.module"), "Module", None),
                 "zero_grad", "zero_grad")
    except Exception as e:
        _report_exc("batch preparation timing (zero_grad)", e)
    try:
        for mod in _SYNC_MODULES:
            _hook_py(sys.modules.get(mod), "synchronize", "sync")
        for mod, cls in _SYNC_CLASSES:
            _hook_py(getattr(sys.modules.get(mod), cls, None), "synchronize", "sync")
    except Exception as e:
        _report_exc("batch preparation timing (device synchronizations)", e)
    try:
        for mod, name in _CLIP_FUNCS:
            _hook_py(sys.modules.get(mod), name, "clip")
        for mod, cls in _SCALER_CLASSES:
            _hook_py(getattr(sys.modules.get(mod), cls, None), "unscale_", "clip")
    except Exception as e:
        _report_exc("batch preparation timing (gradient clipping)", e)


def _wrap_optimizer_class(cls):
    """Wraps cls's own step (once torch has put its profiling wrapper on
    it); a class without one of its own runs its parent's, wrapped there."""
    step = cls.__dict__.get("step")
    if step is not None and callable(step) and not getattr(step, "_trainmon", False):
        _patch(cls, "step", _make_optstep(step))


def _install_optimizer(torch):
    """Optimizer steps: each optimizer class's step is wrapped by a C Hook
    when its first instance is made (Optimizer.__init__ puts torch's
    profiling wrapper on the class's step, marked `hooked`; ours goes
    around it), and the classes torch has already wrapped are wrapped now.
    Where Optimizer has no __init__ of its own to wrap (a stand-in), torch's
    global step hooks (torch >= 2.0) take the C hooks themselves."""
    optim = sys.modules.get("torch.optim.optimizer")
    if optim is None:
        import torch.optim.optimizer as optim
    Optimizer = optim.Optimizer
    orig_init = Optimizer.__dict__.get("__init__")
    if orig_init is None:
        reg_pre = getattr(optim, "register_optimizer_step_pre_hook", None)
        reg_post = getattr(optim, "register_optimizer_step_post_hook", None)
        if reg_pre and reg_post:
            _state["hook_handles"] += [reg_pre(_c.opt_pre_hook), reg_post(_c.opt_post_hook)]
            return
        raise RuntimeError("torch.optim.Optimizer has no __init__ to time steps from")

    compiling = _compiling_test()

    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if compiling():
            return
        try:
            _c.opt_made()  # a process that makes an optimizer trains (not inference)
            _wrap_optimizer_class(type(self))
        except Exception as e:
            _report_exc("optimizer step timing", e)
    __init__.__wrapped__ = orig_init
    _patch(Optimizer, "__init__", __init__)
    # optimizers made before attach(): their classes carry torch's wrapper
    queue, seen = list(Optimizer.__subclasses__()), set()
    while queue:
        cls = queue.pop()
        if cls in seen:
            continue
        seen.add(cls)
        queue.extend(cls.__subclasses__())
        if getattr(cls.__dict__.get("step"), "hooked", False):
            _c.opt_made()  # one made before attach() at least
            _wrap_optimizer_class(cls)


def _snapshot_path():
    n = _state["snapshots"] + 1
    return os.path.join(_state["run_dir"] or ".", "oom-%s-%d.pickle" % (_state["role"] or "pid%d" % os.getpid(), n))


def _dump_snapshot(snap):
    """Writes the allocator snapshot snap (taken once at the OOM, also
    analysed) for memory_viz.  Returns the file name or ""."""
    if snap is None or not _state["run_dir"]:
        return ""
    path = _snapshot_path()
    # Written by us, not by torch's _dump_snapshot (a plain open(), which
    # follows a symlink planted in the run directory): a fresh temporary
    # name (O_EXCL|O_NOFOLLOW, 0600) renamed over the final one, which
    # replaces a planted link instead of writing through it.
    tmp = "%s.%d.%s.tmp" % (path, os.getpid(), os.urandom(4).hex())
    try:
        import pickle
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
            getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(tmp, flags, 0o600), "wb") as f:
            pickle.dump(snap, f)
        os.replace(tmp, path)
        _state["snapshots"] += 1
        return os.path.basename(path)
    except Exception as e:
        _report_exc("writing the OOM snapshot", e)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return ""


# ------------------------------------------------------------ OOM analysis
#
# At an OOM (issue #16, docs/DIAGNOSIS.md "gpu_mem.oom"): the allocator
# snapshot is taken once, pickled for memory_viz and read here into the OOM
# summary record: the failed request against the largest free block of its
# pool, the free bytes scattered in cached pieces, what
# expandable_segments:True would have made usable, the live bytes by
# anatomy category and, with memory history, the top allocation sites.

_OOM_SNAPSHOTS_MAX = 3        # per process: the observer fires several times per OOM
_OOM_BLOCKS_MAX = 1000000     # blocks walked at most (a bounded pause at the OOM)
_OOM_SMALL_REQUEST = 1 << 20  # CUDACachingAllocator kSmallSize: <= 1 MiB from small segments
_OOM_SMALL_SEGMENT = 2 << 20  # kSmallBuffer: a small segment's size (when segment_type is absent)
# Expandable segments map physical memory into a large-pool segment in
# kLargeBuffer pieces (CUDACachingAllocator.cpp: segment_size =
# pool->is_small ? kSmallBuffer : kLargeBuffer), so what they could have
# given back is the whole 20 MiB pages inside the free pieces.
_OOM_PAGE = 20 << 20
_OOM_SITES = 5
_OOM_SITE_CHARS = 200         # a site's text is cut to its last 200 characters
_OOMSUM_OK, _OOMSUM_CUT, _OOMSUM_NO_SNAPSHOT = 1, 2, 3
_POOL_SMALL, _POOL_LARGE = 1, 2


def _oom_pool(requested):
    if not (requested >= 0):
        return 0
    return _POOL_SMALL if requested <= _OOM_SMALL_REQUEST else _POOL_LARGE


def _take_snapshot(torch):
    """The allocator snapshot: torch 2.x memory._snapshot() (a dict with
    "segments"), 1.13 memory._snapshot() / memory_snapshot() (the list of
    segments).  Raises what torch raises."""
    mem = torch.cuda.memory
    f = getattr(mem, "_snapshot", None) or getattr(torch.cuda, "memory_snapshot")
    return f()


def _oom_frame_site(frames, skip, cache):
    """file:line:function of the innermost frame (frames[0] is the
    innermost, as torch's _memory_viz reads them) that is the user's code:
    not "<...>", a Python file, outside torch's and trainmon's packages."""
    for f in frames or ():
        try:
            fn = f["filename"]
        except Exception:
            continue
        ok = cache.get(fn)
        if ok is None:
            ok = bool(fn) and not fn.startswith("<") and fn.endswith(".py")
            if ok and skip:
                rp = os.path.realpath(fn) if os.path.isabs(fn) else fn
                ok = not any(rp.startswith(d) for d in skip)
            cache[fn] = ok
        if ok:
            txt = "%s:%s:%s" % (fn, f.get("line", "?"), f.get("name", "?"))
            return txt if len(txt) <= _OOM_SITE_CHARS else "..." + txt[3 - _OOM_SITE_CHARS:]
    return None


def _oom_analyze(snap, device, requested, device_free, ptrs=None, skip=()):
    """What the snapshot says about an OOM on device (-1: every device).
    ptrs: the storages on that device of the optimizers and the live
    modules' parameters (_oom_ptrs) as three lists of data pointers
    (parameters, gradients, state), or None when none is known (the live
    bytes are then all "unknown").  skip: directories
    whose frames are not the user's.  Returns a dict of the summary's
    fields (docs/FORMAT.md "oom_summary").  Pure: testable on any snapshot
    in torch's layout (2.x dict, 1.13 list of segments)."""
    import bisect
    segs = snap.get("segments", []) if isinstance(snap, dict) else snap
    pool = _oom_pool(requested)
    want = "small" if pool == _POOL_SMALL else "large"
    largest = free_cached = 0.0
    frags = 0
    pages = reserved = live = 0.0
    walked = 0
    cut = False
    active = []  # (address, size, frames) of live blocks
    for seg in segs or ():
        if device >= 0 and seg.get("device", device) != device:
            continue
        total = seg.get("total_size", 0)
        reserved += total
        stype = seg.get("segment_type") or ("small" if total <= _OOM_SMALL_SEGMENT else "large")
        base = seg.get("address", 0)
        addr = base
        for b in seg.get("blocks", ()):
            if walked >= _OOM_BLOCKS_MAX:
                cut = True
                break
            walked += 1
            size = b.get("size", 0)
            a = b.get("address", addr)  # 1.13's blocks follow each other from the segment's
            addr = a + size
            state = b.get("state")
            if state == "inactive":
                if stype == "large":
                    lo = -(-(a - base) // _OOM_PAGE) * _OOM_PAGE
                    hi = ((a + size - base) // _OOM_PAGE) * _OOM_PAGE
                    pages += max(0, hi - lo)
                if stype == want:
                    free_cached += size
                    frags += 1
                    largest = max(largest, size)
            elif state == "active_allocated":
                live += size
                if "frames" in b:
                    fr = b["frames"]
                else:
                    h = b.get("history") or ()
                    fr = h[0].get("frames") if h else None  # as _memory_viz's legacy reader
                active.append((a, size, fr))
        if cut:
            break
    nan = _NAN
    out = {"status": _OOMSUM_CUT if cut else _OOMSUM_OK,
           "why": "the walk stopped at %d blocks: totals are lower bounds" % _OOM_BLOCKS_MAX
           if cut else "",
           "pool": pool, "requested": requested, "free_device": device_free,
           "largest_free": largest, "free_cached": free_cached, "fragments": float(frags),
           "expandable": device_free + pages if device_free >= 0 else nan,
           "reserved": reserved, "live": live, "blocks": float(walked)}
    active.sort(key=lambda x: x[0])
    if ptrs is None:
        out.update(live_params=nan, live_grads=nan, live_optim_state=nan, live_other=nan,
                   live_unknown=live)
    else:
        starts = [x[0] for x in active]
        owner = {}
        for cat, lst in enumerate(ptrs):
            for p in lst:
                i = bisect.bisect_right(starts, p) - 1
                if i >= 0 and p < starts[i] + active[i][1] and i not in owner:
                    owner[i] = cat
        by = [0.0, 0.0, 0.0]
        for i, cat in owner.items():
            by[cat] += active[i][1]
        out.update(live_params=by[0], live_grads=by[1], live_optim_state=by[2],
                   live_other=live - sum(by), live_unknown=0.0)
    sites, cache = {}, {}
    for a, size, fr in active:
        site = _oom_frame_site(fr, skip, cache) if fr else None
        if site is not None:
            sites[site] = sites.get(site, 0.0) + size
    top = sorted(sites.items(), key=lambda kv: (-kv[1], kv[0]))[:_OOM_SITES]
    out["sites"] = [(k, float(v)) for k, v in top]
    return out


def _oom_ptrs(torch, device):
    """The storages on cuda:device as (params, grads, state) data pointer
    lists: of every optimizer that has stepped (before the first step, as in
    an OOM in the first forward pass: every optimizer alive) and the
    parameters of every live module (frozen weights are weights, not
    activations); None when neither an optimizer nor a module is found."""
    Tensor = getattr(torch, "Tensor", None)
    if not isinstance(Tensor, type):
        return None
    _, lead = _lead_optimizer()
    if lead is not None and not _all_walkable(lead):
        return None  # an optimizer whose state cannot be read: no split, never a wrong one
    try:
        alive, mods = _live_objects(torch)
    except Exception as e:
        _oom_said("finding the optimizers and modules", e)
        return None
    if lead is not None:
        opts = _anatomy_opts(lead)
    else:
        opts = [o for o in alive if _walkable(o)]
    if not opts:
        return None  # no optimizer (inference): the live bytes are not split
    out = ([], [], [])

    def add(t, cat):
        if not isinstance(t, Tensor):
            return
        d = t.device
        if d.type != "cuda" or (device >= 0 and (d.index or 0) != device):
            return
        try:
            out[cat].append(_storage_of(t)[0])
        except Exception:
            out[cat].append(t.data_ptr())
    params = [p for opt in opts for g in opt.param_groups for p in g["params"]]
    try:
        params += _module_params(torch, mods)
    except Exception as e:
        _oom_said("reading the modules' parameters", e)
    for p in params:
        add(p, 0)
        add(getattr(p, "grad", None), 1)
    for opt in opts:
        for st in list(getattr(opt, "state", {}).values()):
            for v in list(st.values() if isinstance(st, dict) else (st,)):
                for x in (v if isinstance(v, (list, tuple)) else (v,)):
                    add(x, 2)
    return out


def _oom_skip_dirs(torch):
    out = []
    for mod in (torch, sys.modules.get(__name__)):
        f = getattr(mod, "__file__", None)
        if f:
            out.append(os.path.realpath(os.path.dirname(f)) + os.sep)
    return tuple(out)


def _oom_said(what, e):
    if what not in _oom_off:
        _oom_off.add(what)
        _report_exc(what, e)


_oom_off = set()


def _record_oom(torch, source, dev, req, free, total):
    """An OOM: the snapshot taken once (at most _OOM_SNAPSHOTS_MAX per
    process), pickled and analysed; the OOM record and its summary.  Never
    raises."""
    snap, why = None, ""
    if torch is None or not _c_cuda_up(torch):
        why = "CUDA is not initialised: no allocator to read"
    elif _state["oom_snaps"] >= _OOM_SNAPSHOTS_MAX:
        why = "not taken: a process takes at most %d snapshots" % _OOM_SNAPSHOTS_MAX
    else:
        _state["oom_snaps"] += 1  # a failing allocator is not asked again and again
        try:
            snap = _take_snapshot(torch)
        except Exception as e:
            why = "the allocator snapshot failed: %s: %s" % (type(e).__name__, e)
            _oom_said("the OOM snapshot", e)
    seq = _c.oom(source, dev, req, free, total, _dump_snapshot(snap))
    s = None
    if snap is not None:
        try:
            s = _oom_analyze(snap, dev, req, free, _oom_ptrs(torch, dev), _oom_skip_dirs(torch))
        except Exception as e:
            why = "the snapshot could not be read: %s: %s" % (type(e).__name__, e)
            _oom_said("the OOM analysis", e)
    nan = _NAN
    if s is None:
        s = {"status": _OOMSUM_NO_SNAPSHOT, "why": why, "pool": _oom_pool(req), "requested": req,
             "free_device": free, "sites": []}
    try:
        g = s.get
        _c.oom_summary(int(seq or 0), int(dev), s["status"], s["pool"], float(req), float(free),
                       g("largest_free", nan), g("free_cached", nan), g("fragments", nan),
                       g("expandable", nan), g("reserved", nan), g("live", nan),
                       g("live_params", nan), g("live_grads", nan), g("live_optim_state", nan),
                       g("live_other", nan), g("live_unknown", nan), g("blocks", nan),
                       s["why"][:1000], s["sites"])
    except Exception as e:
        _oom_said("the OOM summary record", e)


def _oom_observer(device, alloc, device_total, device_free):
    # Called by the allocator (torch >= 2.0) with its lock released; a raise
    # here would propagate into the allocator, so nothing may escape.
    try:
        if not _state["attached"]:
            return
        torch = sys.modules["torch"]
        _record_oom(torch, 1, int(device), float(alloc), float(device_free), float(device_total))
        _state["oom_recorded"] = True
    except BaseException as e:  # noqa: B902
        try:
            _report_exc("recording an OOM", e)
        except BaseException:
            pass


def _on_cuda_ready():
    torch = sys.modules.get("torch")
    if torch is None or not _state["attached"]:
        return
    try:
        if not _state["oom_observer"]:
            attach_obs = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
            if attach_obs is not None:
                attach_obs(_oom_observer)
                _state["oom_observer"] = True
        n = _state["memory_history"]
        if n:
            _state["memory_history"] = None
            rec = torch.cuda.memory._record_memory_history
            try:
                rec(enabled="all", max_entries=int(n))          # torch >= 2.1
            except TypeError:
                try:
                    rec(True, trace_alloc_max_entries=int(n))  # torch 2.0
                except TypeError:
                    rec(True)                                  # torch 1.13: a history per block
    except Exception as e:
        _report_exc("OOM instrumentation", e)


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _parse_oom(msg):
    """(device, requested, free, total) from torch's OOM message; NAN when
    absent.  1.13: "Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total
    capacity; ...; 1.02 GiB free; ..."; 2.x: "... GPU 0 has a total capacity
    of 79.15 GiB of which 3.69 MiB is free"."""
    import re
    num = r"([\d.]+) (B|KiB|MiB|GiB|TiB)"

    def val(m, i=1):
        return float(m.group(i)) * _UNITS[m.group(i + 1)] if m else math.nan
    req = val(re.search(r"Tried to allocate " + num, msg))
    dev = re.search(r"GPU (\d+)", msg)
    free = re.search(num + r" free", msg) or re.search(r"of which " + num + r" is free", msg)
    total = re.search(num + r" total capacity", msg) or re.search(r"total capacity of " + num, msg)
    return (int(dev.group(1)) if dev else -1, req, val(free), val(total))


def _is_oom(exc):
    torch = sys.modules.get("torch")
    cls = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    if cls is not None and isinstance(exc, cls):
        return True
    return isinstance(exc, RuntimeError) and "CUDA out of memory" in str(exc)


_orig_excepthook = None


def _excepthook(tp, val, tb):
    try:
        if _state["attached"] and not _state["oom_recorded"] and _is_oom(val):
            dev, req, free, total = _parse_oom(str(val))
            _record_oom(sys.modules.get("torch"), 2, dev, req, free, total)
            _state["oom_recorded"] = True
    except Exception:
        pass
    (_orig_excepthook or sys.__excepthook__)(tp, val, tb)


def _c_cuda_up(torch):
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _at_exit():
    try:
        if _state["pid"] == os.getpid():
            _learn_rank()  # a process group made by a function bound before attach
            try:
                _anatomy_flush()
            except Exception:
                pass
            _c.shutdown()
    except Exception:
        pass


def _thread_counts(torch):
    """torch's thread counts and the CPUs this process may run on: the
    report counts the intra-op threads of every rank against the cores the
    job may use (host.cpu_oversubscribed).  {} when unknown (no torch, a
    stand-in torch in tests)."""
    d = {}
    try:
        get = getattr(torch, "get_num_threads", None)
        get_interop = getattr(torch, "get_num_interop_threads", None)
        if get is not None:
            d["intra_op"] = int(get())
        if get_interop is not None:
            d["inter_op"] = int(get_interop())
        if d:
            d["affinity_cpus"] = len(os.sched_getaffinity(0))
    except Exception:
        pass
    return d


def _record_threads(torch):
    """After set_num_threads / set_num_interop_threads: the new counts as a
    torch_threads event (the ones at attach are in the file's meta, which
    makes no file by itself).  Only in the process that opened the record
    file: a forked DataLoader worker (torch sets 1 thread in each) is not a
    rank."""
    if _state["pid"] != os.getpid():
        return
    # A worker started by spawn or forkserver is a process of its own (its
    # pid opened the recorder) whose worker loop sets 1 thread before the
    # worker info exists: a multiprocessing child with no record file open
    # yet is not made one for this (a torch.multiprocessing.spawn rank that
    # sets its threads before its first step keeps the counts of its meta).
    try:
        import multiprocessing
        me = multiprocessing.current_process()
        # (while a spawned child imports the main module, parent_process()
        # is still None: its name and _inheriting tell it already)
        child = (multiprocessing.parent_process() is not None or me.name != "MainProcess"
                 or getattr(me, "_inheriting", False))
        if child and not _c.file_open():
            return
    except Exception:
        pass
    d = _thread_counts(torch)
    if d:
        _c.event("torch_threads", json.dumps(d))


def _make_set_threads(orig, torch):
    def set_threads(*args, **kwargs):
        r = orig(*args, **kwargs)
        try:
            _record_threads(torch)
        except Exception:
            pass
        return r
    set_threads._trainmon = True
    set_threads.__name__ = getattr(orig, "__name__", "set_threads")
    set_threads.__doc__ = getattr(orig, "__doc__", None)
    return set_threads


def _env_memory_history():
    """TRAINMON_MEMORY_HISTORY=N (trainmon run --memory-history): N, or
    None when unset or not a positive number."""
    try:
        n = int(os.environ.get("TRAINMON_MEMORY_HISTORY", ""))
        return n if n > 0 else None
    except ValueError:
        return None


def attach(run_dir=None, memory_history=None):
    """Instruments the job with no other code change: steps and data wait
    (every DataLoader), per-batch worker time, CPU and RSS, optimizer steps,
    an allocator sample at every step and phase change (once CUDA is up),
    OOM records and snapshots, thresholds.  memory_history=N keeps the
    allocator's last N events for the OOM snapshot (torch >= 2.0; started
    when the job initialises CUDA).  Idempotent; never raises."""
    global _orig_excepthook
    try:
        _ensure_recorder(run_dir)
        if _state["attached"]:
            return
        _state["attached"] = True
        if memory_history is None:  # `trainmon run --memory-history[=N]`
            memory_history = _env_memory_history()
        _state["memory_history"] = memory_history
        _bind_torch()
        torch = sys.modules.get("torch")
        if torch is None:
            return
        _c.bind_hooks(_boundary, _opt_no, _fetch_unhook)
        try:
            for name in ("set_num_threads", "set_num_interop_threads"):
                f = torch.__dict__.get(name)
                if f is not None and not getattr(f, "_trainmon", False):
                    _patch(torch, name, _make_set_threads(f, torch))
        except Exception as e:
            _report_exc("torch thread counts", e)
        try:
            import torch.utils.data.dataloader as dl
            it = dl._BaseDataLoaderIter
            if not getattr(it.__dict__.get("__next__"), "_trainmon", False):
                _patch(it, "__next__", _make_next(it.__dict__["__next__"]))
            for cls in (it, getattr(dl, "_MultiProcessingDataLoaderIter", None)):
                if cls is None or getattr(cls.__dict__.get("__del__"), "_trainmon", False):
                    continue
                orig = cls.__dict__.get("__del__", _MISSING)
                setattr(cls, "__del__", _make_del(orig))
                _state["patches"].append((cls, "__del__", orig))
        except Exception as e:
            _report_exc("DataLoader step timing", e)
        try:
            import torch.utils.data.dataloader as dl
            loader = getattr(dl, "DataLoader", None)  # (a stand-in torch may have none)
            orig = loader.__dict__.get("__iter__") if loader is not None else None
            if orig is not None and not getattr(orig, "_trainmon", False):
                _patch(loader, "__iter__", _make_iter(orig))
        except Exception as e:
            _report_exc("DataLoader iter() timing", e)
        try:
            import torch.utils.data._utils.fetch as fetch
            from torch.utils.data import get_worker_info
            del _fetch_hooks[:]
            for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
                cls = getattr(fetch, name, None)
                if cls is not None and "fetch" in cls.__dict__:
                    orig = cls.__dict__["fetch"]
                    if getattr(orig, "_trainmon", False):
                        continue
                    h = _make_fetch(orig, get_worker_info)
                    _patch(cls, "fetch", h)
                    _fetch_hooks.append((cls, h, orig))
            if _fetch_hooks and not _state.get("fetch_atfork"):
                os.register_at_fork(after_in_child=_fetch_rehook)
                _state["fetch_atfork"] = True
        except Exception as e:
            _report_exc("DataLoader worker timing", e)
        try:
            _install_optimizer(torch)
        except Exception as e:
            _report_exc("optimizer step timing", e)
        # (a torch without autograd or nn, a stand-in in tests: nothing to hook)
        try:
            _install_backward(torch)
        except Exception as e:
            _report_exc("backward timing", e)
        try:
            nnm = sys.modules.get("torch.nn.modules.module")
            dlm = sys.modules.get("torch.utils.data.dataloader")
            # (no torch.nn at all: a stand-in torch in tests, nothing to time)
            if nnm is not None and not isinstance(getattr(nnm, "_global_forward_pre_hooks", None),
                                                  dict):
                _moved("batch preparation timing (loops without a DataLoader)",
                       "torch.nn.modules.module._global_forward_pre_hooks")
            if dlm is not None and getattr(dlm, "_MultiProcessingDataLoaderIter", None) is None:
                _moved("worker handoff timing",
                       "torch.utils.data.dataloader._MultiProcessingDataLoaderIter")
            _c.bind_steps(_forward_hooks(nnm), getattr(torch, "is_grad_enabled", None),
                          getattr(dlm, "_MultiProcessingDataLoaderIter", None),
                          getattr(nnm, "_global_forward_hooks", None),
                          _module_call_codes(nnm),
                          getattr(getattr(torch, "_C", None), "_get_tracing_state", None),
                          _function_apply_code(torch))
        except Exception as e:
            _report_exc("batch preparation timing", e)
        try:
            _install_collectives(torch)
        except Exception as e:
            _report_exc("collective timing", e)
        try:
            _bind_step_calls()
        except Exception as e:
            _report_exc("batch preparation timing (zero_grad)", e)
        try:
            _install_savers()
        except Exception as e:
            _report_exc("checkpoint timing", e)
        try:
            _install_gc()
        except Exception as e:
            _report_exc("garbage collector timing", e)
        try:
            _install_compile()
        except Exception as e:
            _report_exc("torch.compile timing", e)
        try:
            _install_amp(torch)
        except Exception as e:
            _report_exc("AMP skipped-step timing", e)
        try:
            nnm = sys.modules.get("torch.nn.modules.module")
            Module = getattr(nnm, "Module", None)
            tr = Module.__dict__.get("train") if Module is not None else None
            if nnm is not None and tr is None:
                _moved("eval timing (loops without a DataLoader)", "torch.nn.Module.train")
            elif tr is not None and not getattr(tr, "_trainmon", False):
                _patch(Module, "train", _make_train(tr))
        except Exception as e:
            _report_exc("eval timing (loops without a DataLoader)", e)
        if sys.excepthook is not _excepthook:
            _orig_excepthook = sys.excepthook
            sys.excepthook = _excepthook
        if _c_cuda_up(torch):
            _on_cuda_ready()
    except Exception as e:
        _report_exc("trainmon.attach()", e)


def detach():
    """Undoes attach()'s patches (the OOM observer cannot be removed: it is
    disarmed).  The record file stays open."""
    global _orig_excepthook
    try:
        _c.shutdown()
        for owner, name, orig in reversed(_state["patches"]):
            cur = getattr(owner, name, None)
            if cur is not None and cur is _state.get("armed_hooks") and len(cur):
                continue  # holds the job's own hooks now (their handles point at it)
            if orig is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, orig)
        del _state["patches"][:]
        _unalias_savers()
        try:
            import gc
            while _c.gc_callback in gc.callbacks:
                gc.callbacks.remove(_c.gc_callback)
        except Exception as e:
            _report_exc("garbage collector timing", e)
        for key in ("savers_finder", "dynamo_finder"):  # (_install_savers, _bind_step_calls)
            finder = _state.pop(key, None)
            if finder is not None and finder in sys.meta_path:
                sys.meta_path.remove(finder)
        _uninstall_compile()
        # an anatomy one-shot wrapper of torch.autograd.backward not called
        # yet (the engine, not backward, is patched where it can be)
        ag = sys.modules.get("torch.autograd")
        bw = getattr(ag, "__dict__", {}).get("backward")
        while getattr(bw, "_trainmon_anatomy", False) and getattr(bw, "__wrapped__", None):
            bw = bw.__wrapped__
            ag.backward = bw
        del _fetch_hooks[:]
        for h in _state["hook_handles"]:
            h.remove()
        del _state["hook_handles"][:]
        if sys.excepthook is _excepthook:
            sys.excepthook = _orig_excepthook or sys.__excepthook__
        _state["attached"] = False
        _anat.update(last=None, pending=None)  # a new attach() measures afresh
        _c.reset_steps()
    except Exception as e:
        _report_exc("trainmon.detach()", e)


# ------------------------------------------------- TRAINMON_ATTACH=1 (env)

class _AttachWhenTorchImported:
    """A meta-path finder that attaches right after `import torch`
    finishes, so that a process with TRAINMON_ATTACH=1 that never imports
    torch does not pay for it."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            import importlib.util
            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return None
            orig_exec = spec.loader.exec_module

            def exec_module(module):
                orig_exec(module)
                attach()
            spec.loader.exec_module = exec_module
            return spec
        except Exception as e:
            _report_exc("TRAINMON_ATTACH", e)
            return None


if os.environ.get("TRAINMON_ATTACH") == "1":
    if "torch" in sys.modules:
        attach()
    else:
        sys.meta_path.insert(0, _AttachWhenTorchImported())
