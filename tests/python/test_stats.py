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


NSTEPS = 200
CLOCK_LOOP = r"""
import json, time, torch, trainmon
NSTEPS = %d
trainmon.attach()
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
time.sleep(0.25)  # past the clock's 200 ms calibration
t0 = time.monotonic_ns()
before_opt = []
for i in range(NSTEPS):
    x = torch.randn(8, 4)
    if i == 20:
        time.sleep(0.7)  # step 20: its optimizer step 0.7 s after an anchor
    model(x).pow(2).mean().backward()
    before_opt.append(time.monotonic_ns())
    opt.step()
    before_opt[-1] = (before_opt[-1], time.monotonic_ns())
    opt.zero_grad()
t1 = time.monotonic_ns()
s = trainmon.stats()
print(json.dumps({"t0": t0, "t1": t1, "clock": s["clock"], "tsc_reads": s["clock_tsc_reads"],
                  "anchors": s["clock_anchors"], "opt": before_opt,
                  "recalibrations": s["clock_recalibrations"]}))
""" % NSTEPS


def kernel_clock_is_tsc():
    import platform
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            src = f.read().strip()
    except OSError:
        return False
    return src == "tsc" and platform.machine() == "x86_64"


def test_the_agents_clock_is_the_counter_where_the_kernels_is_and_agrees_with_it(tmp_path):
    """src/lib/fastclock.h: where the kernel keeps CLOCK_MONOTONIC from the
    time-stamp counter, the agent reads the counter between anchors (at a
    step's end 10 ms or more after the last), and its step records lie
    within the job's own CLOCK_MONOTONIC readings around the loop."""
    out = last_json(run_script(CLOCK_LOOP, tmp_path).stdout)
    steps = [r[2] for r in records(main_file(tmp_path), "step")]
    assert len(steps) == NSTEPS
    # what an anchor allows at most: 10 us + the pair's 1 us + 20 ppm of the
    # 0.7 s step (14 us) (src/lib/fastclock.h; typically ~0.1 us)
    slack = 25000
    for s in steps[1:]:  # the first starts at its first forward, before t0 is taken
        assert out["t0"] - slack <= s["start_ns"] <= s["end_ns"] <= out["t1"] + slack, (s, out)
    # each optimizer step began between the job's clock reads around its
    # opt.step() call; step 20's 0.7 s after the anchor that ended step 19,
    # the counter's rate error at its largest
    for s, (before, after) in zip(steps, out["opt"]):
        assert before - slack <= s["opt_start_ns"] <= after + slack, (s, before, after)
    # one step ends where the next begins, but after the lead optimizer's
    # first step: the agent's own work there (the memory anatomy's walk and
    # its pass over the live objects) is in no step, the next begins after it
    gaps = [i for i, (a, b) in enumerate(zip(steps, steps[1:])) if b["start_ns"] != a["end_ns"]]
    assert gaps in ([], [0]), [(steps[i]["end_ns"], steps[i + 1]["start_ns"]) for i in gaps]
    for a, b in zip(steps, steps[1:]):
        assert b["start_ns"] >= a["end_ns"]
        assert b["opt_start_ns"] <= b["end_ns"]
    if kernel_clock_is_tsc():
        assert out["clock"] == "tsc", out
        assert out["tsc_reads"] > 0, out
        # a step's end anchors only 10 ms or more after the last anchor: in
        # the loop at most one per 10 ms (and one per 1 s otherwise), and
        # a few before it (the first pairs, the 200 ms calibration)
        loop_ms = (out["t1"] - out["t0"]) / 1e6
        assert 2 <= out["anchors"] <= loop_ms / 10 + 8, (out["anchors"], loop_ms)
        assert out["anchors"] < NSTEPS / 2, out  # most steps of ~0.1 ms end on the counter
    else:
        assert out["clock"].startswith("clock_gettime: "), out
        assert out["tsc_reads"] == 0, out


def test_trainmon_fastclock_0_makes_every_read_the_clock(tmp_path):
    p = run_script(CLOCK_LOOP, tmp_path, env={"TRAINMON_FASTCLOCK": "0"})
    out = last_json(p.stdout)
    if kernel_clock_is_tsc():
        assert out["clock"] == "clock_gettime: TRAINMON_FASTCLOCK=0", out
    assert out["tsc_reads"] == 0 and out["anchors"] == 0, out
    assert len(records(main_file(tmp_path), "step")) == NSTEPS
