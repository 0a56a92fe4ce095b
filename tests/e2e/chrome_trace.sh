#!/usr/bin/env bash
# A Chrome/Perfetto trace from the writer is valid JSON in the documented
# format (docs/FORMAT.md "Exports"): {"traceEvents":[...]}, metadata names, complete
# slices with ts/dur in microseconds, counters, instants; escaped strings
# come back as written; and the slices on every (pid, tid) nest, overrunning
# children having been clipped to their parent.
set -u
root=${TM_ROOT:-$(pwd)}
helper="$root/${BUILD:-build}/tests/helpers/chrome_write"
[ -x "$helper" ] || { echo "FAIL: $helper not built (make e2e builds it)"; exit 1; }
dir=$(mktemp -d /tmp/trainmon-chrome.XXXXXX)
trap 'rm -rf "$dir"' EXIT
clipped=$("$helper" "$dir/trace.json") || { echo "FAIL: chrome_write failed"; exit 1; }

/usr/bin/python3 - "$dir/trace.json" "$clipped" <<'PY'
import json, sys
from collections import defaultdict
doc = json.load(open(sys.argv[1], encoding="utf-8"))
clipped = int(sys.argv[2])
ev = doc["traceEvents"]
assert isinstance(ev, list) and ev, doc
by = defaultdict(list)
for e in ev:
    by[e["ph"]].append(e)
    assert e["ph"] in "MXCi", e
    assert isinstance(e["name"], str) and isinstance(e["pid"], int), e
names = {(e["pid"], e.get("tid"), e["name"]): e["args"]["name"] for e in by["M"]}
assert names[(1, None, "process_name")] == "rank 0", names
assert names[(2, 2, "thread_name")] == 'phases "train"\\eval', names
assert names[(100, None, "process_name")] == "system", names
assert len(by["X"]) == 2 * 20 * 5, len(by["X"])
assert any(e["name"] == "optimizer \u03b1" for e in by["X"])
step3 = next(e for e in by["X"] if e["name"] == "step 3" and e["pid"] == 1)
assert step3["ts"] == 301000.0 and step3["dur"] == 100000.0, step3
assert step3["args"] == {"step": 3, "data_wait_s": 0.01}, step3
c3 = [e for e in by["C"] if e["pid"] == 1 and e["ts"] == 301000.0]
assert c3 and c3[0]["args"] == {"allocated": 3 * 1048576}, c3
assert any(e["name"] == "disk loop0" and e["args"] == {"read_mb_s": 12.5} for e in by["C"])
assert [e["s"] for e in by["i"]] == ["p", "p"] and by["i"][0]["args"] == {"requested": 1024}
# Nesting: on one (pid, tid), sorted by start (longer first), every slice
# ends no later than the innermost slice still open when it starts.
# Integer nanoseconds avoid float rounding in the comparison.
ns = lambda x: round(x * 1000)
tracks = defaultdict(list)
for e in by["X"]:
    assert e["dur"] >= 0, e
    tracks[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["dur"]), e["name"]))
bad = 0
for key, sl in tracks.items():
    sl.sort(key=lambda s: (s[0], -s[1]))
    stack = []
    for ts, dur, name in sl:
        while stack and stack[-1][0] <= ts:
            stack.pop()
        if stack and ts + dur > stack[-1][0]:
            bad += 1
            print("does not nest:", key, name, ts, dur, "in", stack[-1][1])
        stack.append((ts + dur, name))
assert bad == 0
# Per rank, every optimizer phase (15 ms from 90 ms) overruns its train
# phase (100 ms) and is cut to 10 ms.
assert clipped == 2 * 20, clipped
opt = [e for e in by["X"] if e["name"].startswith("optimizer")]
assert all(e["dur"] == 10000.0 for e in opt), opt[:2]
print(f"{len(ev)} events, {len(tracks)} slice tracks nest, {clipped} slices clipped")
PY
