#!/usr/bin/python3
"""Checks for tests/dashboard_test.sh, standard library only.

  dashboard_check.py page HTML_FILE           the page is self-contained: no external
                                              scripts, styles, images or fonts
  dashboard_check.py dom DOM_FILE             the DOM after the page's script ran (Chromium's
                                              --dump-dom): status line filled, worker rows
  dashboard_check.py png PNG_FILE             the screenshot shows curves: pixels of the
                                              train curve's colour (#37c) on the charts
"""
import re
import struct
import sys
import zlib


def page(path):
    html = open(path).read()
    assert html.lstrip().startswith("<!DOCTYPE html>"), "not an HTML page"
    # Anything fetched from elsewhere: src/href attributes, CSS url(), @import, or any
    # absolute URL at all.
    bad = re.findall(r'(?:src|href)\s*=|url\(|@import|https?://|//[a-z0-9.-]+\.[a-z]{2,}/', html, re.I)
    assert not bad, f"external references: {bad}"
    assert "<canvas" in html and "status.json" in html
    print(f"the page is {len(html)} bytes and self-contained")


def dom(path):
    d = open(path).read()
    assert re.search(r"version \d+ · 2/2 workers", d), "the status line was not filled in"
    rows = re.findall(r"<tr><td>(\d+)</td>", d)
    assert rows == ["0", "1"], f"worker rows: {rows}"
    assert "samples/s" in d
    print("the page's script filled in the status line and 2 worker rows")


def png_pixels(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    i, idat, w = 8, b"", 0
    while i < len(data):
        (n,) = struct.unpack(">I", data[i:i + 4])
        kind, body = data[i + 4:i + 8], data[i + 8:i + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        i += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def png(path):
    w, h, bpp, rows = png_pixels(path)
    def count(rgb):
        n = 0
        for line in rows:
            for x in range(0, len(line), bpp):
                if all(abs(line[x + k] - rgb[k]) < 40 for k in range(3)):
                    n += 1
        return n
    blue = count((0x33, 0x77, 0xcc))
    # The legend's two squares alone are about 2 x 100 pixels; a drawn curve is far more.
    assert blue > 600, f"only {blue} pixels of the train curve's colour in a {w}x{h} screenshot"
    print(f"the {w}x{h} screenshot has {blue} pixels of the train curves")


if __name__ == "__main__":
    {"page": page, "dom": dom, "png": png}[sys.argv[1]](sys.argv[2])
