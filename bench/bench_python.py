"""Cost of trainmon's in-process recorder (run with /usr/bin/python3).

Prints key=value lines:
  capture_us             Monitor.capture(tag) on CPU (no allocator read), best of 5,
                         recording into a growing (unbounded) record file
  capture_ring_us        the same into a 64 MiB flight-recorder ring (TRAINMON_MAX_SIZE):
                         no new file pages to allocate, the steady state of a long job
  capture_nofile_us      the C core alone (no record file): history + clocks
  handwritten_capture_us the typical hand-written monitor's capture without its
                         torch calls (time.time() + 7 list appends): the floor
                         a Python-level monitor cannot go under
  baseline_step_ms, attached_step_ms   medians of a real CPU training loop
                         (MLP, real DataLoader), blocks without and with
                         attach() alternating in one process
  attach_overhead_pct    (attached / baseline - 1) * 100
"""
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
os.environ.setdefault("TRAINMON_RUN_DIR", tempfile.mkdtemp(prefix="trainmon-bench-"))

import torch  # noqa: E402
import trainmon  # noqa: E402

N = 200000


def bench_capture():
    m = trainmon.Monitor()
    cap = m.capture
    best = float("inf")
    for _ in range(5):
        m.clear()
        t0 = time.perf_counter()
        for _ in range(N):
            cap("step")
        best = min(best, (time.perf_counter() - t0) / N)
    return best * 1e6


def bench_handwritten():
    h = {k: [] for k in ("time", "tag", "a", "r", "p", "f", "n")}
    best = float("inf")
    for _ in range(5):
        for v in h.values():
            v.clear()
        t0 = time.perf_counter()
        for _ in range(N):
            h["time"].append(time.time())
            h["tag"].append("step")
            h["a"].append(0.0)
            h["r"].append(0.0)
            h["p"].append(0.0)
            h["f"].append(0.0)
            h["n"].append(0)
        best = min(best, (time.perf_counter() - t0) / N)
    return best * 1e6


def bench_loop(rounds=8, steps=150):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True, num_workers=0)
    lossf = torch.nn.CrossEntropyLoss()

    def block():
        times = []
        it = iter(loader)
        t0 = time.perf_counter()
        for _ in range(steps):
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(loader)
                x, y = next(it)
            opt.zero_grad()
            with trainmon.phase("fwd") if attached else _null:
                loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            times.append(t1 - t0)
            t0 = t1
        return times

    base, att = [], []
    global attached
    attached = False
    block()  # warm-up
    for _ in range(rounds):
        attached = False
        base += block()
        trainmon.attach()
        attached = True
        att += block()
        trainmon.detach()
    return statistics.median(base) * 1e3, statistics.median(att) * 1e3


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


_null = _Null()
attached = False

def sub_capture(env):
    import subprocess
    e = dict(os.environ, **env)
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--capture-only"], env=e,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("capture_us="):
            return float(line.split("=")[1])
    return float("nan")


if __name__ == "__main__" and "--capture-only" in sys.argv:
    print("capture_us=%.3f" % bench_capture())
elif __name__ == "__main__":
    ring = sub_capture({"TRAINMON_MAX_SIZE": str(64 << 20),
                        "TRAINMON_RUN_DIR": tempfile.mkdtemp(prefix="trainmon-bench-")})
    nofile = sub_capture({"TRAINMON_RUN_DIR": "/proc/trainmon-bench-no-such-dir"})
    cu = bench_capture()
    hw = bench_handwritten()
    b, a = bench_loop()
    print("capture_us=%.3f" % cu)
    print("capture_ring_us=%.3f" % ring)
    print("capture_nofile_us=%.3f" % nofile)
    print("handwritten_capture_us=%.3f" % hw)
    print("baseline_step_ms=%.4f attached_step_ms=%.4f" % (b, a))
    print("attach_overhead_pct=%.2f" % ((a / b - 1) * 100))
