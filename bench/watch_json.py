"""The cost of a `trainmon watch --json` line against the sample it
describes (issue #11, item 7): at most 1.3x the sample alone, on a tree of 9
processes.

    python3 watch_json.py ROOT BUILD

Instructions, under callgrind: `trainmon watch --pid TREE -i 0.05 -n 40
--json` runs once; the inclusive instructions of tm_sampler_tick (the
sample: every disk, the process tree, pressure, the page-cache counters)
and of watch_print_json (the line, built and written) are read with
callgrind_annotate, per call.  The ratio is (sample + line) / sample.
Instructions, not time: a shared 2-core machine only adds noise to time,
and the line's cost is all user-space CPU work.  Prints a markdown table
and one PASS/FAIL line.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

TARGET = 1.3
root, build = sys.argv[1], sys.argv[2]
tm = os.path.join(root, build, "trainmon")


def skip(why):
    print("watch --json cost: not measured: " + why)
    sys.exit(0)


if subprocess.run(["sh", "-c", "command -v valgrind callgrind_annotate"],
                  capture_output=True).returncode != 0:
    skip("valgrind is not installed (make deps installs it)")

# root bash + 8 sleeping children = 9 processes, as bench/run.py's tree
tree = subprocess.Popen(["bash", "-c", "for i in 1 2 3 4 5 6 7 8; do sleep 600 & done; wait"])
time.sleep(0.3)
try:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cg.out")
        with open(os.path.join(d, "lines.json"), "w") as lines:
            r = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                tm, "watch", "--pid", str(tree.pid), "-i", "0.05", "-n", "40",
                                "--json"], stdout=lines, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            skip("trainmon watch under callgrind failed: " + r.stderr.strip()[-300:])
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--tree=caller", out],
                             capture_output=True, text=True).stdout
        nlines = sum(1 for _ in open(os.path.join(d, "lines.json")))
finally:
    subprocess.run(["pkill", "-P", str(tree.pid)])
    tree.kill()
    tree.wait()

# "  4,900,560 (78.11%)  =>  /path/sampler.c:tm_sampler_tick (40x)": each
# caller's share; summed per function.
cost = {}
for m in re.finditer(r"^\s*([\d,]+)\s+\([^)]*\)\s+=>\s+\S*:(tm_sampler_tick|watch_print_json)"
                     r"(?:\.[\w.]+)?\s+\(([\d,]+)x\)", ann, re.M):
    ir, calls = int(m.group(1).replace(",", "")), int(m.group(3).replace(",", ""))
    c = cost.setdefault(m.group(2), [0, 0])
    c[0] += ir
    c[1] += calls
if "tm_sampler_tick" not in cost or "watch_print_json" not in cost:
    skip("callgrind_annotate named neither tm_sampler_tick nor watch_print_json "
         "(a build without symbols, or the function inlined?)")
sample = cost["tm_sampler_tick"][0] / cost["tm_sampler_tick"][1]
line = cost["watch_print_json"][0] / cost["watch_print_json"][1]
ratio = (sample + line) / sample
print("| `watch --json` on a 9-process tree (callgrind, per sample, %d lines) | instructions | "
      "vs the sample | target |" % nlines)
print("|---|---|---|---|")
print("| the sample alone (tm_sampler_tick) | %.0f | 1.00x | |" % sample)
print("| the JSON line (watch_print_json: built and written) | %.0f | %.2fx | |"
      % (line, line / sample))
print("| sample + line | %.0f | %.2fx | at most %.1fx |" % (sample + line, ratio, TARGET))
print("watch --json cost: %s (%.2fx the sample alone, target at most %.1fx)"
      % ("PASS" if ratio <= TARGET else "FAIL", ratio, TARGET))
