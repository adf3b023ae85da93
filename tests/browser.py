"""Headless Chromium for the report.html self-tests: the DOM after rendering, the charts' laid-out text boxes, and
a screenshot read back as pixels.

Chromium is Debian's `chromium` package (scripts/self-tests.sh installs it when missing); every call gets a
fresh profile folder, no network, no GPU. The PNG reader handles what Chromium writes (8-bit RGB or RGBA,
non-interlaced), with the stdlib only.
Environment: none.
"""
from __future__ import annotations

import json
from html import unescape
import re
import shutil
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-quic", "--enable-logging=stderr", "--v=0")


def chromium(html: Path, mode: str, *, window: str = "1100,1600") -> subprocess.CompletedProcess:
    """`--dump-dom` (the DOM on stdout) or `--screenshot=PATH` of a local page, in a fresh profile; logs on stderr."""
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--window-size={window}", mode,
                               html.as_uri()], capture_output=True, text=True, timeout=120)


# Run in a copy of the page (report.html itself has no script): every chart's box and the boxes of its title,
# y-tick labels, legend entries and every other text, as [left, top, right, bottom] in page pixels.
MEASURE = """<script>
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const charts = [...document.querySelectorAll('figure.chart')].map(figure => {
  const svg = figure.querySelector('svg');
  const texts = selector => [...svg.querySelectorAll(selector)].filter(t => t.textContent.trim())
      .map(t => ({text: t.textContent.trim(), box: box(t)}));
  return {id: figure.id, kind: figure.dataset.kind, svg: box(svg), title: texts('[id$="-chart-title"] text'),
          yticks: texts('[id*="-ytick_"] text'), legend: texts('[id*="-legend_"] text'), texts: texts('text')};
});
const out = document.createElement('pre');
out.id = 'measured';
out.textContent = JSON.stringify(charts);
document.body.appendChild(out);
</script>"""


def chart_layout(html: Path) -> list[dict]:
    """The laid-out charts of a report.html (MEASURE's fields), measured by Chromium in a scripted copy."""
    page = html.with_name(html.stem + ".measured.html")
    page.write_text(html.read_text().replace("</body>", MEASURE + "</body>"))
    dom = chromium(page, "--dump-dom")
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S)
    assert found, dom.stderr[-2000:]
    return json.loads(unescape(found.group(1)))


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit, non-interlaced RGB or RGBA PNG."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, chunks = 8, {}
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunks.setdefault(kind, []).append(data[pos + 8:pos + 8 + length])
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"][0])
    if depth != 8 or colour not in (2, 6) or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, colour type {colour}, interlace {interlace}")
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks[b"IDAT"])), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        previous = line
        rows.append(bytes(b for i in range(0, stride, channels) for b in line[i:i + 3]))
    return width, height, rows


def colour_share(rows: list[bytes], rgb: tuple[int, int, int]) -> float:
    """The share of pixels of exactly this colour."""
    needle, total, found = bytes(rgb), 0, 0
    for row in rows:
        for i in range(0, len(row), 3):
            total += 1
            found += row[i:i + 3] == needle
    return found / total if total else 0.0
