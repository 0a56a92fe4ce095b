"""Shared set-up for trainmon's Python tests (Debian's /usr/bin/python3, torch 1.13 CPU).

The package is imported from python/ in the source tree (built in place by
`setup.py build_ext --inplace`).  Tests that attach() run their training
loop in a subprocess: attach patches torch globally, once per process.
"""
import json
import os
import random
import socket
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYDIR = os.path.join(ROOT, "python")
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

# In-process tests (Monitor) record into one run directory for the session.
os.environ.setdefault("TRAINMON_RUN_DIR", os.path.join(
    os.environ.get("TMPDIR", "/tmp"), "trainmon-pytest-%d" % os.getpid()))


def run_script(code, run_dir, env=None, timeout=120, check=True):
    """Runs code in a fresh interpreter with trainmon importable and
    TRAINMON_RUN_DIR=run_dir; returns the CompletedProcess."""
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + os.pathsep + e.get("PYTHONPATH", "")
    e["TRAINMON_RUN_DIR"] = str(run_dir)
    e.pop("TRAINMON_ATTACH", None)
    if env:
        e.update(env)
    p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("script failed (%d):\nstdout:\n%s\nstderr:\n%s"
                             % (p.returncode, p.stdout, p.stderr))
    return p


def last_json(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("no JSON line in output:\n" + stdout)


def main_file(run_dir):
    """The training process's record file in run_dir (not a worker's)."""
    files = [f for f in os.listdir(run_dir) if f.endswith(".tmr") and not f.startswith("worker-")]
    assert len(files) == 1, files
    return os.path.join(run_dir, files[0])


def records(path, kind=None):
    import trainmon
    hdr, recs, damage, torn = trainmon.read_records(path)
    assert damage == 0, "damage in %s" % path
    return [r for r in recs if kind is None or r[0] == kind]


@pytest.fixture
def trainmon_bin():
    p = os.path.join(ROOT, os.environ.get("BUILD", "build"), "trainmon")
    if not os.path.exists(p):
        pytest.skip("build/trainmon not built (run make)")
    return p


def free_port():
    """A port for the group's store that nothing holds now, below Linux's
    ephemeral range (32768-60999: a random port there was once another
    connection's, and the store failed to bind it, "Address already in
    use"), free on both the IPv4 and the IPv6 wildcard (c10d binds both)."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        try:
            for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                with socket.socket(fam, socket.SOCK_STREAM) as s:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind((addr, port))
            return port
        except OSError:
            continue
    raise AssertionError("no free port in 20000-32000")
