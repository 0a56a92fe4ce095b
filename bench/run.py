"""Benchmarks of trainmon against named baselines, one run, ratios.

1. CPU time per sample (every physical disk + a tree of 9 processes +
   pressure): trainmon vs the floor (the same /proc files read by pread on
   kept-open descriptors), vs psutil doing the same job, vs `iostat -x`.
2. Peak RSS of `trainmon watch --pid` recording to a run directory.
3. The in-process recorder, the report, `trainmon serve`.
4. The in-process agent's cost per training step (bench/agent_cost.py).
5. A `watch --json` line against the sample alone (bench/watch_json.py).
6. The garbage collector's timing per collection and per step (bench/gc_callback.py).
"""
import os, resource, subprocess, sys, tempfile, time

root, build = sys.argv[1], sys.argv[2]
bdir = os.path.join(root, build)
tm = os.path.join(bdir, "trainmon")
rows = []

def tree():
    # root bash + 8 sleeping children = 9 processes
    p = subprocess.Popen(["bash", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 600 & done; wait"])
    time.sleep(0.3)
    return p

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def kv(line):
    return dict(x.split("=") for x in line.split())

t = tree()
try:
    out = subprocess.run([os.path.join(bdir, "bench", "bench_sample"), str(t.pid), "4000"],
                         check=True, capture_output=True, text=True).stdout
    s = kv(out)
    tm_us, floor_us = float(s["trainmon_us"]), float(s["floor_us"])
    try:
        ps = subprocess.run(["/usr/bin/python3", os.path.join(root, "bench", "psutil_sample.py"),
                             str(t.pid), "600"], check=True, capture_output=True, text=True).stdout
        psutil_us = float(kv(ps)["psutil_us"])
    except Exception as e:  # psutil missing: say so, do not invent a number
        print("psutil baseline unavailable:", e)
        psutil_us = float("nan")
    gpu_out = subprocess.run([os.path.join(bdir, "bench", "bench_gpu"),
                              os.path.join(bdir, "tests", "fakes", "fake_nvml.so")],
                             check=True, capture_output=True, text=True).stdout
    g = kv(gpu_out)
    # iostat -x: CPU per sample from the difference of a 6-report and a
    # 1-report run (start-up cost cancels).
    c0 = child_cpu(); subprocess.run(["iostat", "-x", "1", "1"], capture_output=True); c1 = child_cpu()
    subprocess.run(["iostat", "-x", "1", "6"], capture_output=True); c2 = child_cpu()
    iostat_us = max(((c2 - c1) - (c1 - c0)) / 5 * 1e6, 0.0)
    # RSS of trainmon watch with a process tree, recording.
    with tempfile.TemporaryDirectory() as d:
        # VmHWM of the running process: ru_maxrss would also count the
        # pages of the forking Python before exec.
        p = subprocess.Popen([tm, "watch", "--pid", str(t.pid), "-i", "0.05", "-n", "60", "--json",
                              "-o", os.path.join(d, "run")], stdout=subprocess.DEVNULL)
        rss_kb = 0
        while p.poll() is None:
            try:
                for line in open(f"/proc/{p.pid}/status"):
                    if line.startswith("VmHWM:"):
                        rss_kb = max(rss_kb, int(line.split()[1]))
            except OSError:
                pass
            time.sleep(0.05)
finally:
    subprocess.run(["pkill", "-P", str(t.pid)])
    t.kill(); t.wait()

def run_kv(cmd, env=None):
    """Runs a benchmark that prints key=value lines; {} (and a note) if it
    cannot run here."""
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True,
                             env=dict(os.environ, **(env or {}))).stdout
    except subprocess.CalledProcessError as e:
        print(f"{os.path.basename(cmd[-1] if cmd[0].endswith('python3') else cmd[0])}: "
              f"did not run (exit {e.returncode}): {e.stdout.strip()[-200:]} {e.stderr.strip()[-300:]}")
        return {}
    res = {}
    for line in out.split():
        if "=" in line:
            k, v = line.split("=", 1)
            res[k] = v
    return res

py = run_kv(["/usr/bin/python3", os.path.join(root, "bench", "bench_python.py")])
rep = run_kv([os.path.join(bdir, "bench", "bench_report")])
srv = run_kv(["bash", os.path.join(root, "bench", "bench_serve.sh")], {"BUILD": build})
prb = run_kv(["bash", os.path.join(root, "bench", "bench_probe.sh")], {"BUILD": build})

# The dataset's page-cache readings (collect_dscache.c): one at the job's
# start, one at its end; a scenario-sized dataset and a many-small-files one.
dsc = []
for nfiles, size in ((1000, 49152), (20000, 4096)):
    with tempfile.TemporaryDirectory(dir=bdir) as d:
        dsc.append(run_kv([os.path.join(bdir, "bench", "bench_dscache"), os.path.join(d, "ds"),
                           str(nfiles), str(size), "11"]))

def f(d, k, fmt="{:.2f}"):
    return fmt.format(float(d[k])) if k in d else "n/a"

def ratio(a, b):
    return f"{a / b:.2f}x" if b == b and b > 0 else "n/a"

lines = []
lines.append(f"Machine: {os.cpu_count()} cores, {os.uname().release}; one sample = "
             f"{s['disks']} disk(s) + a tree of {s['procs']} processes + pressure "
             f"({s['files']} /proc files).")
lines.append("")
lines.append("| what (CPU time per sample, median) | us | trainmon vs it | target |")
lines.append("|---|---|---|---|")
lines.append(f"| trainmon (tm_disk + tm_ptree + tm_pressure) | {tm_us:.1f} | 1.00x | |")
lines.append(f"| floor: pread of the same files on kept-open fds | {floor_us:.1f} | {ratio(tm_us, floor_us)} | within 2x |")
lines.append(f"| psutil: disk_io_counters(perdisk) + children(recursive) io+cpu | {psutil_us:.1f} | {ratio(psutil_us, tm_us)} less | at least 15x less |")
lines.append(f"| iostat -x (one report, start-up excluded) | {iostat_us:.1f} | {ratio(iostat_us, tm_us)} less | |")
lines.append(f"| GPU sample through NVML (fake library, {g['devices']} GPUs x {g['procs_per_device']} processes), per GPU | {float(g['gpu_us_per_device']):.2f} | | at most 50 us |")
for d, what in zip(dsc, ("1000 files of 48 KiB", "20000 files of 4 KiB in 200 directories")):
    lines.append(f"| dataset page-cache reading ({what}; {d.get('measured', '?')} files measured by {d.get('method', '?')}), once at the job's start and once at its end, none per sample | {f(d, 'reading_us', '{:.0f}')} (wall {f(d, 'reading_wall_us', '{:.0f}')}) | | 0 per sample |")
lines.append("")
lines.append(f"| peak RSS of `trainmon watch --pid --json -o DIR` | {rss_kb / 1024:.2f} MB | | at most 4 MB |")
lines.append("")
lines.append("| in-process recorder (/usr/bin/python3, torch CPU) | value | target |")
lines.append("|---|---|---|")
lines.append(f"| Monitor.capture(tag), no allocator read, growing file | {f(py, 'capture_us', '{:.3f}')} us | at most 1 us |")
lines.append(f"| Monitor.capture(tag) into a 64 MiB ring (steady state of a long job) | {f(py, 'capture_ring_us', '{:.3f}')} us | |")
lines.append(f"| the C core alone (no record file) | {f(py, 'capture_nofile_us', '{:.3f}')} us | |")
lines.append(f"| hand-written monitor's capture without torch calls (time.time + 7 appends) | {f(py, 'handwritten_capture_us', '{:.3f}')} us | |")
lines.append(f"| CPU training loop step, without / with attach() (medians, alternating blocks) | {f(py, 'baseline_step_ms', '{:.3f}')} / {f(py, 'attached_step_ms', '{:.3f}')} ms | |")
lines.append(f"| slowdown of that loop with attach() | {f(py, 'attach_overhead_pct')} % | at most 1 % |")
lines.append("")
lines.append("| report | value | target |")
lines.append("|---|---|---|")
lines.append(f"| trainmon report on a generated {rep.get('hours', '?')} h recording at 1 s, {rep.get('ranks', '?')} ranks ({f(rep, 'data_mb', '{:.0f}')} MB, {rep.get('records', '?')} records) | {f(rep, 'report_s')} s (load {f(rep, 'load_s')}, analyze {f(rep, 'analyze_s')}, json {f(rep, 'json_s')}); peak RSS {f(rep, 'peak_rss_mb', '{:.0f}')} MB | under 2 s |")
lines.append("")
lines.append("| trainmon serve under wrk -t2 -c16 (loopback) | trainmon | node_exporter (diskstats+pressure) | target |")
lines.append("|---|---|---|---|")
lines.append(f"| scrapes/s | {f(srv, 'trainmon_scrapes_per_s', '{:.0f}')} | {f(srv, 'node_exporter_scrapes_per_s', '{:.0f}')} | at least 2,000 |")
lines.append(f"| p99 latency | {f(srv, 'trainmon_p99_ms')} ms | {f(srv, 'node_exporter_p99_ms')} ms | |")
lines.append(f"| RSS after the load | {f(srv, 'trainmon_rss_kb', '{:.0f}')} kB | {f(srv, 'node_exporter_rss_kb', '{:.0f}')} kB | at most 8 MB |")
lines.append(f"| CPU per scrape (served from the last collection) | {f(srv, 'trainmon_cpu_us_per_scrape', '{:.1f}')} us | {f(srv, 'node_exporter_cpu_us_per_scrape', '{:.1f}')} us | at most 5% of node_exporter's |")
lines.append(f"| ratio | {f(srv, 'cpu_ratio', '{:.3f}')} | | |")
lines.append(f"| CPU of one collection (every -i seconds, 1 s default) | {f(srv, 'trainmon_collect_cpu_us', '{:.1f}')} us | | |")
lines.append("")
lines.append("| trainmon probe (400 files of 64 KiB on the disk of /var/tmp, default 4 s budget) | value | target |")
lines.append("|---|---|---|")
lines.append(f"| wall time of `trainmon probe DIR` | {f(prb, 'probe_wall_s')} s (CPU {f(prb, 'probe_cpu_s')} s) | under 10 s |")
lines.append(f"| what it measured on {prb.get('probe_device', '?')}: best / best random | {f(prb, 'probe_best_mbs', '{:.0f}')} / {f(prb, 'probe_random_mbs', '{:.0f}')} MB/s | |")
lines.append("")
# A `watch --json` line against the sample it describes, in callgrind
# instructions (bench/watch_json.py): its own table and a PASS/FAIL line.
wj = subprocess.run([sys.executable, os.path.join(root, "bench", "watch_json.py"), root, build],
                    capture_output=True, text=True)
lines += (wj.stdout.strip() or "watch --json cost: did not run: " + wj.stderr.strip()[-300:]).splitlines()
lines.append("")
# The agent's cost per training step under callgrind (bench/agent_cost.py):
# prints its own table and a PASS/FAIL line; minutes, most of it valgrind.
ac = subprocess.run([sys.executable, os.path.join(root, "bench", "agent_cost.py"), root, build],
                    capture_output=True, text=True)
lines += (ac.stdout.strip() or "agent cost per step: did not run: " + ac.stderr.strip()[-300:]).splitlines()
lines.append("")
# The garbage collector's timing: ns the agent's gc callback adds to a
# collection, and collections per step (bench/gc_callback.py).
gcb = subprocess.run([sys.executable, os.path.join(root, "bench", "gc_callback.py")],
                     capture_output=True, text=True,
                     env=dict(os.environ, PYTHONPATH=os.path.join(root, "python")))
lines += (gcb.stdout.strip() or "gc callback: did not run: " + gcb.stderr.strip()[-300:]).splitlines()
text = "\n".join(lines)
print(text)
with open(os.path.join(bdir, "bench.md"), "w") as f:
    f.write(text + "\n")
