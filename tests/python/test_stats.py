"""stats() inside the job counts steps and data wait as the report does
(one step accounting: complete steps, each wait capped at its step, the
first step, warm-up, left out of the fraction), from the very step records
the job writes; its old keys stay."""
import json

from conftest import last_json, main_file, records, run_script

NBATCH = 12

LOOP = r"""
import json, time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
trainmon.attach()
before = trainmon.stats()
class D(Dataset):
    def __len__(self): return %(n)d
    def __getitem__(self, i):
        time.sleep(0.03 if i %% 3 == 0 else 0.002)
        return torch.zeros(2)
for x in DataLoader(D(), batch_size=1, num_workers=0):
    time.sleep(0.01)
print(json.dumps({"before": before, "after": trainmon.stats()}))
""" % dict(n=NBATCH)


def test_stats_count_steps_and_data_wait_as_the_report(tmp_path):
    out = last_json(run_script(LOOP, tmp_path).stdout)
    before, after = out["before"], out["after"]
    assert before["data_wait_fraction"] is None  # no step yet: unavailable, not 0
    assert before["steps_counted"] == 0
    for k in ("steps", "steps_closed", "recent_data_wait_s", "recent_step_time_s", "run_dir"):
        assert k in after, after
    assert after["steps"] == after["steps_closed"] == after["steps_counted"] == NBATCH

    # The same numbers from the records, by the rules of docs/DIAGNOSIS.md:
    # complete steps, waits capped at the step, step 0 (warm-up) left out.
    steps = [r[2] for r in records(main_file(tmp_path), "step")]
    done = [s for s in steps if not s["flags"] & 2 and s["end_ns"] > s["start_ns"]]
    assert len(done) == NBATCH
    dur = [(s["end_ns"] - s["start_ns"]) / 1e9 for s in done[1:]]
    wait = [min(s["data_wait_ns"] / 1e9, d) for s, d in zip(done[1:], dur)]
    assert abs(after["data_wait_fraction"] - sum(wait) / sum(dur)) < 1e-12
    # recent_*: the judged steps (all of them here: fewer than 256).
    assert abs(after["recent_step_time_s"] - sum(dur)) < 1e-9
    assert abs(after["recent_data_wait_s"] - sum(wait)) < 1e-9
    json.dumps(after)  # plain JSON: no NaN
