#!/usr/bin/env bash
# trainmon report --html on a real run (a `watch -o` recording plus a tiny
# training loop recorded by the Python package as rank 0): the page parses,
# fetches nothing (no http, no external src/href), escapes the run's name,
# holds the findings and SVG charts; headless Chromium renders it to a
# screenshot that is not blank.  Skips (77) without chromium.
set -u
tm=$TRAINMON
root=${TM_ROOT:-$(pwd)}
scratch=$(mktemp -d); trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# '&' and '<' in the run directory's name must come out escaped.
run="$scratch/run&<x>"
"$tm" watch --gpu none "$scratch" -o "$run" -n 3 -i 0.1 > /dev/null 2>&1 || fail "watch failed"
RANK=0 WORLD_SIZE=1 TRAINMON_RUN_DIR="$run" PYTHONPATH="$root/python" /usr/bin/python3 - <<'PY' ||
import time, torch, trainmon
from torch.utils.data import DataLoader, Dataset
class D(Dataset):
    def __len__(self): return 80
    def __getitem__(self, i):
        time.sleep(0.004)  # slow data: an input finding
        return torch.ones(8) * i
trainmon.attach()
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x in DataLoader(D(), batch_size=2):
    loss = model(x).sum()
    loss.backward(); opt.step(); opt.zero_grad()
PY
    fail "the training loop failed"
ls "$run"/rank0.tmr > /dev/null || fail "no rank0.tmr"

html="$scratch/report.html"
"$tm" report "$run" --json --html "$html" > "$scratch/report.json" 2> "$scratch/err" ||
    { cat "$scratch/err"; fail "report --html failed"; }
[ -s "$html" ] || fail "no HTML written"
/usr/bin/python3 - "$html" "$scratch/report.json" <<'PY' || fail "HTML content"
import json, sys
from html.parser import HTMLParser
page = open(sys.argv[1], encoding="utf-8").read()
rep = json.load(open(sys.argv[2]))   # --json still goes to stdout
ids = [f["id"] for f in rep["findings"]]
assert ids, "the run has no findings to show"

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.stack, self.text = {}, [], []
    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for k, v in attrs:
            if k in ("src", "href") or (v and "http" in v):
                raise AssertionError(f"external reference <{tag} {k}={v}>")
        if tag in ("script", "link", "img", "iframe"):
            raise AssertionError(f"<{tag}> in a self-contained page")
    def handle_data(self, d):
        self.text.append(d)
p = P()
p.feed(page); p.close()
text = "".join(p.text)
assert "http" not in page, "the page mentions http"
assert p.tags.get("svg", 0) >= 1, p.tags
assert p.tags.get("path", 0) + p.tags.get("polyline", 0) >= 1, p.tags
assert "Findings" in text
for i in ids:
    assert i in text, ("finding id missing", i)
assert "run&amp;&lt;x&gt;" in page and "run&<x>" not in page, "run name not escaped"
assert "run&<x>" in text   # and reads back as written
assert len(page) < 2 << 20, len(page)
# The page opens with the verdict (the most severe finding), then the
# charts, then the run table and the findings; evidence numbers are in
# units with the JSON's base-unit value as a tooltip.
import html as H
v = page.find('<div class="verdict')
assert v >= 0, "no verdict"
assert v < page.find("<h2>Timeline") < page.find('<table class="run">') < page.find("<h2>Findings"), \
    "the page does not open with the verdict"
t0 = rep["findings"][0]["title"]
assert t0[0].upper() + t0[1:] in H.unescape(page[v:page.find("</div>", v)]), ("verdict", t0)
import re
assert re.search(r'<td title="[-0-9.e+]+">[-0-9.]+ (us|ms|s|B|KiB|MiB|GiB|[kMG]?B/s)</td>|<td title="[-0-9.e+]+">[-0-9.]+%</td>', page), \
    "no evidence number in units"
print(f"html: {len(page)} bytes, {p.tags.get('svg')} charts, findings {ids}")
PY

chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$chrome" ] || { echo "SKIP: chromium not installed (apt-get install chromium)"; exit 77; }
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$scratch/profile")
timeout 120 "$chrome" "${flags[@]}" --dump-dom "file://$html" > "$scratch/dom.html" 2> "$scratch/chrome.err" ||
    { tail -5 "$scratch/chrome.err"; fail "chromium --dump-dom failed"; }
grep -q "Findings" "$scratch/dom.html" || fail "the rendered DOM has no Findings"
grep -q "<svg" "$scratch/dom.html" || fail "the rendered DOM has no svg"
grep -q 'class="verdict' "$scratch/dom.html" || fail "the rendered DOM has no verdict"
timeout 120 "$chrome" "${flags[@]}" --screenshot="$scratch/shot.png" --window-size=1200,1600 \
    "file://$html" > /dev/null 2>> "$scratch/chrome.err" ||
    { tail -5 "$scratch/chrome.err"; fail "chromium --screenshot failed"; }
[ -n "${REPORT_HTML_KEEP:-}" ] && cp "$scratch/shot.png" "$html" "$REPORT_HTML_KEEP"/
/usr/bin/python3 - "$scratch/shot.png" <<'PY' || fail "the screenshot"
# Decodes the PNG (8-bit RGB/RGBA, no interlace) with zlib alone and
# checks that it shows something: many colours, a fair share not white.
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(data):
    n, typ = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    if typ == b"IHDR":
        w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
    elif typ == b"IDAT":
        idat += body
    pos += 12 + n
assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, colours, inked = bytearray(stride), set(), 0
for y in range(h):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0
        b, c = prev[x], prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    if y % 4 == 0:
        for x in range(0, stride, bpp * 4):
            px = bytes(line[x:x + 3])
            colours.add(px)
            inked += px != b"\xff\xff\xff"
    prev = line
sampled = ((h + 3) // 4) * ((w + 3) // 4)
print(f"screenshot {w}x{h}: {len(colours)} colours, {100 * inked / sampled:.1f}% not white")
assert len(colours) > 8, "the screenshot is (nearly) uniform"
assert inked > sampled * 0.01, "the screenshot is blank"
PY
echo ok
