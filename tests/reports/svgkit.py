"""Geometry of the charts in a rendered page, for layout tests: each SVG's plotted marks (line points,
dots, error bars, bars) and its legend entries' boxes, read back from the markup the page holds.

Why: "the legend never covers the data" is a property of the drawn picture, so the tests parse the SVG the
CLI wrote rather than trust the renderer's own layout numbers. A legend entry's box is estimated from its
text (``CHAR_W`` per character, generous) and its anchor; the browser test measures the real boxes.
"""

from __future__ import annotations

import itertools
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

CHAR_W = 6.2  # at least the width of one 11px character of the charts' text
Box = tuple[float, float, float, float]  # x0, y0, x1, y1


@dataclass
class Chart:
    title: str
    root: ET.Element
    width: float
    height: float
    segments: list[tuple[tuple[float, float], tuple[float, float]]]  # polylines and error bars
    dots: list[tuple[float, float]]
    bars: list[Box]
    legend: list[tuple[str, Box]]


def svgs(page: str) -> list[Chart]:
    """Every chart of ``page`` (an HTML page or fragment), parsed."""
    out = []
    for part in page.split("<svg")[1:]:
        root = ET.fromstring("<svg" + part.split("</svg>")[0] + "</svg>")
        _, _, w, h = (float(v) for v in root.get("viewBox", "0 0 0 0").split())
        title = next((t.text or "" for t in root.iter("text") if t.get("class") == "title"), "")
        out.append(Chart(title, root, w, h, _segments(root), _dots(root), _bars(root), _legend(root)))
    return out


def text_box(t: ET.Element) -> Box:
    x, y = float(t.get("x", 0)), float(t.get("y", 0))
    w = len(t.text or "") * CHAR_W
    anchor = t.get("text-anchor", "start")
    x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
    return (x0, y - 11, x0 + w, y + 3)


def _segments(root: ET.Element) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    segs: list[tuple[tuple[float, float], tuple[float, float]]] = []
    for p in root.iter("polyline"):
        pts = [(float(x), float(y)) for x, y in (xy.split(",") for xy in (p.get("points") or "").split())]
        segs += itertools.pairwise(pts)
        segs += [(a, a) for a in pts[:1]]
    for line in root.iter("line"):
        if line.get("class") == "bar":
            a = (float(line.get("x1", 0)), float(line.get("y1", 0)))
            b = (float(line.get("x2", 0)), float(line.get("y2", 0)))
            segs.append((a, b))
    return segs


def _dots(root: ET.Element) -> list[tuple[float, float]]:
    return [(float(c.get("cx", 0)), float(c.get("cy", 0))) for c in root.iter("circle")]


def _bars(root: ET.Element) -> list[Box]:
    out = []
    for g in root.iter():
        for r in g.findall("rect"):
            if r.find("title") is not None:  # a data bar (hover text), not a legend swatch or a ground
                x, y = float(r.get("x", 0)), float(r.get("y", 0))
                out.append((x, y, x + float(r.get("width", 0)), y + float(r.get("height", 0))))
    return out


def _legend(root: ET.Element) -> list[tuple[str, Box]]:
    return [(t.text or "", text_box(t)) for t in root.iter("text") if t.get("class") == "legend"]


def hits(box: Box, chart: Chart, pad: float = 3.0) -> list[str]:
    """What of the chart's plotted marks falls inside ``box`` (grown by ``pad`` for the dots' radius)."""
    x0, y0, x1, y1 = box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad

    def inside(x: float, y: float) -> bool:
        return x0 <= x <= x1 and y0 <= y <= y1

    found = [f"dot {d}" for d in chart.dots if inside(*d)]
    for a, b in chart.segments:
        steps = max(1, int(max(abs(b[0] - a[0]), abs(b[1] - a[1]))))
        if any(inside(a[0] + (b[0] - a[0]) * i / steps, a[1] + (b[1] - a[1]) * i / steps) for i in range(steps + 1)):
            found.append(f"line {a}-{b}")
    found += [f"bar {r}" for r in chart.bars if r[0] <= x1 and x0 <= r[2] and r[1] <= y1 and y0 <= r[3]]
    return found


def tick_labels(chart: Chart) -> list[str]:
    return [t.text or "" for t in chart.root.iter("text") if t.get("class") == "tick"]


EXPONENT = re.compile(r"\de[+-]\d")
