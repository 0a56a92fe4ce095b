"""The OOM analysis's cost (docs/DIAGNOSIS.md "The OOM analysis"): one read
of an allocator snapshot at its bound, 1,000,000 blocks (10,000 large
segments of 100 blocks of 2 MiB, every other one live with a two-frame
stack, 3,334 parameters and as many state tensors to place), as the agent
reads it at an OOM.  CPU time of the one call.

    PYTHONPATH=python python3 bench/oom_analyze.py
"""
import time

import trainmon

MiB = 1 << 20
segs = []
for s in range(10000):
    base = (1 << 40) + s * 200 * MiB
    blocks = []
    for k in range(100):
        live = k % 2 == 0
        fr = [{"filename": "/opt/torch/nn/modules/linear.py", "line": 125, "name": "forward"},
              {"filename": "/job/train.py", "line": k % 50, "name": "step"}] if live else []
        blocks.append({"address": base + k * 2 * MiB, "size": 2 * MiB,
                       "requested_size": 2 * MiB if live else 0,
                       "state": "active_allocated" if live else "inactive", "frames": fr})
    segs.append({"device": 0, "address": base, "total_size": 200 * MiB, "stream": 0,
                 "segment_type": "large", "blocks": blocks})
snap = {"segments": segs}
ptrs = ([segs[i]["address"] for i in range(0, 10000, 3)], [],
        [segs[i]["address"] + 4 * MiB for i in range(0, 10000, 3)])
t = time.process_time()
s = trainmon._oom_analyze(snap, 0, 30 * MiB, 10 * MiB, ptrs, ("/opt/torch/",))
dt = time.process_time() - t
print("%d blocks (%d live), %d sites: %.2f s of CPU (%.1f us per block)"
      % (s["blocks"], s["live"] // (2 * MiB), len(s["sites"]), dt, dt * 1e6 / s["blocks"]))
