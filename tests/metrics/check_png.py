#!/usr/bin/python3
"""check_png.py PNG WIDTH HEIGHT [--no-val]: the loss plot decodes (Debian's
python3-pil) as a WIDTH x HEIGHT image a person can read: a white page, black
axes and text, and each series in its colour with enough pixels to be a line
(train loss blue, validation loss red, learning rate green; validation left
out with --no-val), most of them inside the plot box, not only in the
legend. Exit 77 (skip) without python3-pil unless CI=true (then 1)."""
import os
import sys

try:
    from PIL import Image
except ImportError:
    print("check_png: python3-pil is missing (apt-get install python3-pil)")
    sys.exit(1 if os.environ.get("CI") == "true" else 77)

path, w, h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
im = Image.open(path)
im.load()
if im.format != "PNG" or im.size != (w, h):
    sys.exit(f"FAIL: {path} is {im.format} {im.size}, want PNG {(w, h)}")
rgb = im.convert("RGB")
colours = rgb.getcolors(maxcolors=1 << 20)
if colours is None or len(colours) < 8:
    sys.exit(f"FAIL: {path} has {0 if colours is None else len(colours)} colours: blank or nearly so")
count, top = max(colours)
if top != (255, 255, 255) or count < w * h // 2:
    sys.exit(f"FAIL: the background is not mostly white (most common colour {top}, {count} pixels)")


def near(c, ref, tol=40):
    return all(abs(a - b) <= tol for a, b in zip(c, ref))


# Series colours (src/metrics/plot.c) and where they must appear: inside the
# plot box (the legend is a row above it).
series = {"train loss": (31, 119, 180), "learning rate": (44, 160, 44)}
if "--no-val" not in sys.argv:
    series["validation loss"] = (214, 39, 40)
x0, x1, y0, y1 = int(0.12 * w), int(0.86 * w), int(0.18 * h), int(0.87 * h)
data = list(rgb.getdata())  # row-major
dark = sum(1 for c in data if sum(c) < 150)
if dark < 2000:
    sys.exit(f"FAIL: only {dark} dark pixels: no axes, ticks or labels")
report = []
for name, ref in series.items():
    hits = [i for i, c in enumerate(data) if near(c, ref)]
    inside = sum(1 for i in hits if x0 <= i % w < x1 and y0 <= i // w < y1)
    if len(hits) < 300 or inside < 100:
        sys.exit(f"FAIL: {name} {ref}: {len(hits)} pixels, {inside} in the plot box: not drawn")
    report.append(f"{name} {len(hits)} px")
print(f"{path}: PNG {w}x{h}, {len(colours)} colours, {dark} dark (axes, text), " + ", ".join(report))
