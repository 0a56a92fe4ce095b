"""A training process SIGKILLed mid-run leaves a readable record file."""
import json
import os
import signal
import subprocess
import sys
import time

from conftest import PYDIR, main_file, records

SCRIPT = r"""
import sys, trainmon
m = trainmon.Monitor()
i = 0
while True:
    m.capture("c%d" % i)
    if i % 50 == 0:
        sys.stdout.write("%d\n" % i)
        sys.stdout.flush()
    i += 1
"""


def test_sigkill_mid_run_keeps_every_capture_made_before_it(tmp_path, trainmon_bin):
    env = dict(os.environ, PYTHONPATH=PYDIR, TRAINMON_RUN_DIR=str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], env=env, stdout=subprocess.PIPE,
                         text=True)
    last = -1
    deadline = time.time() + 30
    while last < 5000 and time.time() < deadline:
        last = int(p.stdout.readline())
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    path = main_file(tmp_path)
    tags = [r[2]["tag"] for r in records(path, "capture")]
    # every capture up to the last one announced, in order, none missing
    assert tags[:last + 1] == ["c%d" % i for i in range(last + 1)]
    # and `trainmon dump` reads them: the in-process records by name once
    # dump knows them, by type number (17) before
    out = subprocess.run([trainmon_bin, "dump", "--json", path], capture_output=True,
                         text=True).stdout
    n = 0
    for line in out.splitlines():
        o = json.loads(line)
        if o.get("type") == "capture" or o.get("type_id") == 17:
            n += 1
    assert n >= last + 1
