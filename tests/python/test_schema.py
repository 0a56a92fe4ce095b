"""One schema: read_records and the Monitor key the in-process records as the
library's table does (the keys of `trainmon dump --json`)."""
import json
import os
import subprocess

import pytest

from conftest import ROOT, run_script

DUMP_FRAME = {"t", "t_ns", "type"}
# Stored fields dump --json shows through a derived value instead
# (duration_s, data_wait_s, batch_time_s, the flag booleans).
SHOWN_DERIVED = {"end_ns", "data_wait_ns", "flags"}


@pytest.fixture
def every_type(tmp_path, trainmon_bin):
    helper = os.path.join(ROOT, os.environ.get("BUILD", "build"), "tests", "helpers",
                          "inproc_writer")
    if not os.path.exists(helper):
        pytest.skip("tests/helpers/inproc_writer not built (make e2e)")
    path = str(tmp_path / "rank0.tmr")
    subprocess.run([helper, path], check=True, capture_output=True)
    return path


def test_read_records_keys_every_stored_field_by_its_schema_key(every_type):
    import trainmon
    schema = trainmon.schema()
    assert {"step", "capture", "phase", "oom", "worker", "optimizer_step"} <= set(schema)
    _, recs, damage, _ = trainmon.read_records(every_type)
    assert damage == 0
    seen = set()
    for kind, _, fields in recs:
        assert kind in schema, kind
        assert list(fields) == [key for key, _, _ in schema[kind]], (kind, fields)
        for key, ctype, _ in schema[kind]:
            v = fields[key]
            if ctype == "str":
                assert isinstance(v, str)
            elif ctype == "f64":
                assert v is None or isinstance(v, float)
            else:
                assert isinstance(v, int) and not isinstance(v, bool)
        seen.add(kind)
    assert seen == set(schema)


def test_dump_json_names_fields_as_read_records_does(every_type, trainmon_bin):
    """A field dump --json shows under a key is the read_records field of
    that key; what it shows under another key is derived, not renamed."""
    import trainmon
    schema = trainmon.schema()
    out = subprocess.run([trainmon_bin, "dump", "--json", every_type], capture_output=True,
                         text=True, check=True).stdout
    _, recs, _, _ = trainmon.read_records(every_type)
    dumped = [json.loads(line) for line in out.splitlines()[1:]]
    dumped = [o for o in dumped if o["type"] in schema]
    assert len(dumped) == len(recs)
    derived = {"duration_s", "data_wait_s", "batch_time_s", "end_of_epoch", "at_exit",
               "fed_by_thread", "skipped"}
    for o, (kind, _, fields) in zip(dumped, recs):
        assert o["type"] == kind
        keys = set(o) - DUMP_FRAME
        assert keys - derived <= set(fields), (kind, sorted(keys - derived - set(fields)))
        # every stored field is shown, itself or through a derived value,
        # unless it is unavailable (NAN, empty snapshot, no device)
        hidden = set(fields) - keys - SHOWN_DERIVED
        for k in hidden:
            assert fields[k] in (None, "", -1), (kind, k, fields[k])


def test_monitor_columns_show_capture_fields_of_the_schema():
    import trainmon
    capture = {key: unit for key, _, unit in trainmon.schema()["capture"]}
    for col, key in trainmon._COLUMNS:
        assert key in capture, (col, key)
        assert capture[key] in ("bytes", "count"), (key, capture[key])
        assert col.endswith("_gb") == (capture[key] == "bytes"), col
    assert trainmon._FIELDS[:2] == ("time", "tag")


def test_monitor_history_keeps_its_historic_columns(tmp_path):
    p = run_script("""
import json, trainmon
m = trainmon.Monitor()
m.capture("one")
h = m.history
print(json.dumps({"keys": list(h), "tag": h["tag"], "rss": h["host_rss_gb"]}))
""", tmp_path)
    out = json.loads(p.stdout.splitlines()[-1])
    assert out["keys"] == ["time", "tag", "allocated_gb", "reserved_gb", "peak_gb", "free_mem_gb",
                           "num_retries", "active_gb", "inactive_split_gb", "requested_gb",
                           "num_ooms", "host_rss_gb", "total_mem_gb"]
    assert out["tag"] == ["one"] and 0 < out["rss"][0] < 64
