#!/usr/bin/env bash
# The TensorBoard writer's files, read by an independent reader
# (tests/e2e/tbread.py: TFRecord framing, masked CRC-32C and the Event
# protobuf decoded by hand): the name follows TensorFlow's pattern, the
# first event is file_version "brain.Event:2", then every scalar comes back
# with its tag, step, wall time and float value; a flipped byte is caught.
set -u
root=${TM_ROOT:-$(pwd)}
helper="$root/${BUILD:-build}/tests/helpers/tb_write"
[ -x "$helper" ] || { echo "FAIL: $helper not built (make e2e builds it)"; exit 1; }
dir=$(mktemp -d /tmp/trainmon-tb.XXXXXX)
trap 'rm -rf "$dir"' EXIT

path=$("$helper" "$dir" 50) || { echo "FAIL: tb_write failed"; exit 1; }
name=$(basename "$path")
case "$name" in
events.out.tfevents.1700000000.$(hostname).*.*) ;;
*) echo "FAIL: file name $name"; exit 1 ;;
esac
/usr/bin/python3 "$root/tests/e2e/tbread.py" "$path" > "$dir/events.jsonl" ||
    { echo "FAIL: the reader refused the file"; exit 1; }

/usr/bin/python3 - "$dir/events.jsonl" <<'PY' || exit 1
import json, struct, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
assert ev[0] == {"wall_time": 1700000000.0, "file_version": "brain.Event:2"}, ev[0]
assert len(ev) == 1 + 2 * 50, len(ev)
for s in range(50):
    for k, (tag, val) in enumerate((("loss", 1.0 / (s + 1)), ("gpu/allocated_bytes", s * 1048576.0))):
        e = ev[1 + 2 * s + k]
        want = {"wall_time": 1700000000.0 + s / 10.0, "step": s,
                "summary": [{"tag": tag, "simple_value": f32(val)}]}
        assert e == want, (e, want)
print("read", len(ev), "events: file_version and 100 scalars as written")
PY

# Damage must be caught by the CRCs, not decoded as data.
/usr/bin/python3 - "$path" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[60] ^= 0x01
open(p, "wb").write(bytes(b))
PY
if /usr/bin/python3 "$root/tests/e2e/tbread.py" "$path" > /dev/null 2> "$dir/err"; then
    echo "FAIL: a flipped byte went unnoticed"; exit 1
fi
grep -q "bad data CRC" "$dir/err" || { echo "FAIL: $(cat "$dir/err")"; exit 1; }
echo "a flipped byte: $(cat "$dir/err")"
