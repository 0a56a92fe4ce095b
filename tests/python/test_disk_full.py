"""The job runs on when the run directory's disk fills up."""
import subprocess

import pytest

from conftest import run_script

SCRIPT = r"""
import trainmon
m = trainmon.Monitor()
for i in range(20000):
    m.capture("t%05d" % i + "x" * 1000)
print("done", len(m.history["tag"]))
"""


@pytest.fixture
def small_fs(tmp_path):
    d = tmp_path / "small"
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1200k", "tmpfs", str(d)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs (needs root)")
    yield d
    subprocess.run(["umount", str(d)])


def test_a_full_disk_stops_recording_once_and_the_job_goes_on(small_fs):
    p = run_script(SCRIPT, small_fs)
    assert "done 20000" in p.stdout
    assert p.stderr.count("disk full") == 1, p.stderr
