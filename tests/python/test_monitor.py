"""The Monitor API: capture / summary / history / to_csv / to_json, on a
CPU-only torch (allocator numbers unavailable, host memory measured)."""
import csv
import json
import math
import os

import trainmon
from conftest import records

KEYS = ["time", "tag", "allocated_gb", "reserved_gb", "peak_gb", "free_mem_gb", "num_retries"]


def make(tags):
    m = trainmon.Monitor()
    for t in tags:
        m.capture(t)
    return m


def test_history_has_one_entry_per_capture_with_its_tag():
    m = make(["init", "after forward", "after backward"])
    h = m.history
    for k in KEYS:
        assert len(h[k]) == 3, k
    assert h["tag"] == ["init", "after forward", "after backward"]
    assert h["time"] == sorted(h["time"])
    assert len(m) == 3


def test_without_cuda_allocator_values_are_unavailable_and_host_memory_is_measured():
    h = make(["x"]).history
    for k in ("allocated_gb", "reserved_gb", "peak_gb", "free_mem_gb", "num_retries"):
        assert h[k] == [None], k
    assert 0.001 < h["host_rss_gb"][0] < 64


def test_summary_prints_max_allocated_retries_and_sample_count(capsys):
    s = make(["a", "b"]).summary()
    out = capsys.readouterr().out
    assert "2 samples" in out and "max allocated n/a" in out and "max retries n/a" in out
    # (no optimizer stepped under attach() here: an empty memory anatomy)
    assert s == {"max_allocated_gb": None, "max_retries": None, "samples": 2, "anatomy": []}


def test_to_csv_writes_a_header_and_one_row_per_capture(tmp_path):
    m = make(["a", "b,with comma"])
    p = tmp_path / "h.csv"
    m.to_csv(str(p))
    rows = list(csv.reader(open(p)))
    assert rows[0][:7] == KEYS
    assert [r[1] for r in rows[1:]] == ["a", "b,with comma"]
    assert rows[1][2] == ""  # unavailable is empty, not 0


def test_to_json_writes_the_history_dict_with_null_for_unavailable(tmp_path):
    m = make(["a"])
    p = tmp_path / "h.json"
    m.to_json(str(p))
    h = json.load(open(p))
    assert h["tag"] == ["a"] and h["allocated_gb"] == [None]
    assert set(KEYS) <= set(h)


def test_captures_are_recorded_in_the_run_directory_in_order():
    tags = ["rec-%d" % i for i in range(5)]
    make(tags)
    path = os.path.join(trainmon.run_dir(), [f for f in os.listdir(trainmon.run_dir())
                                             if f.endswith(".tmr")][0])
    got = [r[2]["tag"] for r in records(path, "capture") if r[2]["tag"].startswith("rec-")]
    assert got == tags
    c = records(path, "capture")[-1][2]
    assert c["allocated"] is None and c["host_rss"] > 0


def test_capture_never_raises_on_odd_tags():
    m = trainmon.Monitor()
    m.capture(123)
    m.capture()
    m.capture("x" * 5000)
    assert m.history["tag"][0] == "123"
    assert len(m.history["tag"]) == 3


def test_monitor_accepts_device_forms():
    assert trainmon.Monitor(device=1).device == 1
    assert trainmon.Monitor(device="cuda:2").device == 2
    assert trainmon.Monitor().device is None


def test_oom_messages_of_both_torch_generations_are_parsed():
    from trainmon import _parse_oom
    old = ("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity; "
           "12.00 GiB already allocated; 1.50 GiB free; 13.00 GiB reserved in total by PyTorch)")
    new = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of "
           "79.15 GiB of which 3.50 MiB is free.")
    assert _parse_oom(old) == (0, 2.0 * 2**30, 1.5 * 2**30, 15.78 * 2**30)
    assert _parse_oom(new) == (1, 20.0 * 2**20, 3.5 * 2**20, 79.15 * 2**30)
    assert math.isnan(_parse_oom("nothing")[1])
