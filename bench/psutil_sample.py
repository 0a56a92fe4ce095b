"""psutil doing the job of one trainmon sample: per-disk counters plus the
process tree's I/O and CPU times.  usage: psutil_sample.py ROOT_PID [SAMPLES]
Prints "psutil_us=X" (median of per-batch means of process CPU time)."""
import sys, time
import psutil

root = psutil.Process(int(sys.argv[1]))
samples = int(sys.argv[2]) if len(sys.argv) > 2 else 500
BATCH = 25

def one():
    psutil.disk_io_counters(perdisk=True)
    procs = [root] + root.children(recursive=True)
    for p in procs:
        try:
            p.io_counters()
            p.cpu_times()
        except psutil.Error:
            pass

for _ in range(10):
    one()
per = []
for _ in range(max(3, samples // BATCH)):
    t0 = time.process_time()
    for _ in range(BATCH):
        one()
    per.append((time.process_time() - t0) / BATCH * 1e6)
per.sort()
print(f"psutil_us={per[len(per) // 2]:.2f}")
