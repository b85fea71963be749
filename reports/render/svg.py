"""Inline SVG line charts for the HTML reports: no JavaScript, no network, nothing to load.

Pure: numbers and labels in, an SVG string out. Every label is escaped here, so callers may pass
model-produced or user-produced strings. Missing points (``None``) break the line, never plot as 0;
so do NaN and infinite values, which are counted and named under the chart ("2 values not plotted"),
and the y axis scales to the largest finite value however large (``1.7e308`` included) without
overflowing.

Every chart follows one legend rule, owned here (``legend``): the legend is laid out in rows below
the plot area, never over the plotted data; the bar charts (``reports.render.svg_bars``) use it too. Axis
labels are written by ``tick`` (``1,000``, never ``1e+03``), and an x tick at the frame's edge is
anchored so its text stays inside the picture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loadgen.core.errors import visible
from reports.model.finite import finite
from reports.render.htmltext import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
W, H, L, R, T, B = 560, 260, 56, 12, 28, 40
CHAR_W = 6.2  # a generous width of one character of the 11px legend and tick text, for layout
ROW = 14  # one legend row
SWATCH = 18  # a legend entry's mark, before its name


@dataclass
class Series:
    name: str
    points: list[tuple[float, float | None]]
    band: list[tuple[float, float, float]] = field(default_factory=list)  # (x, lo, hi) error bars
    step: bool = False
    dashed: bool = False
    tags: list[str] = field(default_factory=list)  # a label beside each point ("" for none), aligned with points
    notes: list[str] = field(default_factory=list)  # each point's hover text after its value ("" for none), aligned
    color: int | None = None  # its PALETTE index: one per run in a comparison, whatever the series; None: its position


def fmt(v: float) -> str:
    return f"{v:.3g}"


def tick(v: float) -> str:
    """An axis label: digits a reader expects (``1,000``, ``2.5``, ``0.025``), never an exponent between
    1e-4 and 1e15, at most three significant digits."""
    a = abs(v)
    if not math.isfinite(v) or a >= 1e15 or (a < 1e-4 and a != 0):
        return fmt(v)
    if a == 0:
        return "0"
    text = f"{v:,.{max(0, 2 - math.floor(math.log10(a)))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True)
class Key:
    """One legend entry: a name and its mark (``line``, ``dash`` or ``box``) in its colour."""

    name: str
    color: str
    mark: str = "line"


def text_width(s: str) -> float:
    return len(s) * CHAR_W


def legend(keys: list[Key], top: float, left: float = L, right: float = W - R) -> tuple[str, float]:
    """The legend rule of every chart: entries in rows from ``top`` (below the plot area and its axis
    labels), left to right, wrapping at ``right``; returns the SVG and the height it takes (0 for no
    keys). Each entry is a ``<g class="key">`` holding its mark and a ``<text class="legend">``."""
    if not keys:
        return "", 0.0
    out, x, row = ['<g class="legend-box">'], left, 0
    for k in keys:
        width = SWATCH + text_width(k.name)
        if x > left and x + width > right:
            x, row = left, row + 1
        y = top + ROW * row + ROW / 2
        if k.mark == "box":
            mark = f'<rect x="{x:.1f}" y="{y - 5:.1f}" width="12" height="10" fill="{k.color}"/>'
        else:
            dash = ' stroke-dasharray="5 3"' if k.mark == "dash" else ""
            mark = (
                f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 14:.1f}" y2="{y:.1f}" stroke="{k.color}" '
                f'stroke-width="2"{dash}/>'
            )
        out.append(
            f'<g class="key">{mark}<text x="{x + SWATCH:.1f}" y="{y + 4:.1f}" class="legend" fill="{k.color}">'
            f"{lbl(k.name)}</text></g>"
        )
        x += width + 12
    out.append("</g>")
    return "".join(out), ROW * (row + 1) + 4


def x_tick(x: float, y: float, label: str) -> str:
    """An x-axis label centred on ``x``, or anchored at the picture's edge where centred text would leave it."""
    half = text_width(label) / 2
    anchor, at = ("end", W - 2.0) if x + half > W - 2 else ("start", 2.0) if x - half < 2 else ("middle", x)
    return f'<text x="{at:.1f}" y="{y}" class="tick" text-anchor="{anchor}">{lbl(label)}</text>'


def lbl(s: object) -> str:
    """A label safe in SVG text and attributes: markup escaped, control characters written as escapes
    (XML cannot hold most of them)."""
    return escape(visible(str(s), keep=""), quote=True)


def not_plotted(dropped: int, y: int = 16) -> str:
    """The top-right note every chart carries when it left values out; "" when it left none."""
    if not dropped:
        return ""
    return (
        f'<text x="{W - R}" y="{y}" class="tick" text-anchor="end">'
        f"{dropped} value{'s' if dropped != 1 else ''} not plotted (NaN or infinite)</text>"
    )


def nice_ceiling(v: float) -> float:
    """The smallest of 1, 2, 2.5, 5 (times a power of ten) at or above ``v``: axis tops that read well.
    ``v`` itself where that would overflow, or underflow (a subnormal ``v``, whose power of ten is 0.0);
    1 for zero, a negative or a non-finite ``v``."""
    if not math.isfinite(v) or v <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(v))
    top = next((m * scale for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * scale >= v * (1 - 1e-12)), v)
    return top if math.isfinite(top) else v


def plottable(series: list[Series]) -> tuple[list[Series], int]:
    """The series with every non-finite coordinate dropped (a y becomes a gap, a band or an x is left
    out), and how many values that was."""
    out, dropped = [], 0
    for s in series:
        points: list[tuple[float, float | None]] = []
        for x, y in s.points:
            if not finite(x):
                dropped += 1
                continue
            if y is not None and not finite(y):
                dropped += 1
                y = None
            points.append((x, y))
        band = [b for b in s.band if all(finite(v) for v in b)]
        dropped += len(s.band) - len(band)
        tags = [t for (x, _), t in zip(s.points, s.tags, strict=False) if finite(x)]
        notes = [t for (x, _), t in zip(s.points, s.notes, strict=False) if finite(x)]
        out.append(Series(s.name, points, band, s.step, s.dashed, tags, notes, s.color))
    return out, dropped


def chart(
    title: str,
    series: list[Series],
    x_ticks: list[tuple[float, str]],
    y_label: str,
    y_max: float | None = None,
    x_label: str = "",
    integer_y: bool = False,
) -> str:
    """A line chart: one polyline (and dots) per series over the frame, the legend below it (``legend``).
    ``integer_y``: the y axis counts things (completions, positions), so its ticks are whole numbers."""
    series, dropped = plottable(series)
    x_ticks = [(x, label) for x, label in x_ticks if finite(x)]
    xs = [x for s in series for x, _ in s.points] + [x for s in series for x, _, _ in s.band] + [x for x, _ in x_ticks]
    ys = [y for s in series for _, y in s.points if y is not None] + [hi for s in series for _, _, hi in s.band]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if not x1 > x0:  # one x: any span around it, away from overflow (a huge x absorbs a +1)
        d = max(1.0, abs(x0) * 1e-9)
        x0, x1 = (x0 - d, x0) if x0 > 0 else (x0, x0 + d)
    top = y_max if y_max is not None and finite(y_max) and y_max > 0 else nice_ceiling(max([*ys, 0.0]))
    if integer_y and top < 1e15:  # the middle tick a whole number too: 0 / 13 / 26, not 0 / 12.5 / 25
        top = max(2.0, 2 * math.ceil(top / 2))
    colors = [PALETTE[(i if s.color is None else s.color) % len(PALETTE)] for i, s in enumerate(series)]
    keys = [Key(s.name, c, "dash" if s.dashed else "line") for s, c in zip(series, colors, strict=True)]
    keys_svg, keys_h = legend(keys, H)
    height = H + keys_h

    def px(x: float) -> float:  # halves first: the span of two huge values must not overflow
        return L + (x / 2 - x0 / 2) / (x1 / 2 - x0 / 2) * (W - L - R)

    def py(y: float) -> float:  # inside the frame, whatever the value
        return H - B - min(1.0, max(0.0, y / top)) * (H - T - B)

    out = [
        f'<svg class="chart" viewBox="0 0 {W} {height:.0f}" width="{W}" height="{height:.0f}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="{L}" y="16" class="title">{escape(title)}</text>',
        f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" class="axis"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" class="axis"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = top * frac
        out.append(f'<text x="{L - 4}" y="{py(y) + 4:.1f}" class="tick" text-anchor="end">{tick(y)}</text>')
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" class="grid"/>')
    for x, label in x_ticks:
        out.append(x_tick(px(x), H - B + 14, label))
    out.append(f'<text x="{(L + W) / 2:.0f}" y="{H - 6}" class="tick" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="12" y="{(T + H - B) / 2:.0f}" class="tick" transform="rotate(-90 12 {(T + H - B) / 2:.0f})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    names = dict(x_ticks)  # a point's hover text names its x by the tick there
    for i, (s, color) in enumerate(zip(series, colors, strict=True)):
        for x, lo, hi in s.band:
            out.append(
                f'<line x1="{px(x):.1f}" y1="{py(lo):.1f}" x2="{px(x):.1f}" y2="{py(hi):.1f}" '
                f'stroke="{color}" class="bar"/>'
            )
        note = {x: f" ({lbl(n)})" for (x, _), n in zip(s.points, s.notes, strict=False) if n}
        for run in _runs(s.points):
            pts: list[str] = []
            for j, (x, y) in enumerate(run):
                if s.step and j:
                    pts.append(f"{px(x):.1f},{py(run[j - 1][1]):.1f}")
                pts.append(f"{px(x):.1f},{py(y):.1f}")
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            out.append(f'<polyline points="{" ".join(pts)}" stroke="{color}" class="line"{dash}/>')
            out += [
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"><title>{lbl(s.name)}, '
                f"{escape(f'{x_label} ' if x_label else '')}{escape(names.get(x, fmt(x)))}: {fmt(y)}{note.get(x, '')}"
                "</title></circle>"
                for x, y in run
                if not s.step
            ]
        tagged = zip(s.points, s.tags, strict=False)
        out += [_tag(px(x), py(y), t, color, i % 2) for (x, y), t in tagged if t and y is not None]
    out.append(keys_svg)
    if dropped:
        out.append(not_plotted(dropped))
    out.append("</svg>")
    return "\n".join(out)


def _tag(x: float, y: float, text: str, color: str, tier: int) -> str:
    """A point's own label (e.g. its concurrency level), right of it and above it, kept inside the frame;
    ``tier`` 1 one line higher, so two series' labels at one place (both runs at rate 0) do not overlap."""
    right = x + 5 + text_width(text) <= W - R
    at_x, anchor = (x + 5, "start") if right else (x - 5, "end")
    above = y - 5 - 11 * tier
    at_y = above if above - 10 >= T else y + 13 + 11 * tier
    return (
        f'<text x="{at_x:.1f}" y="{at_y:.1f}" class="point-label" text-anchor="{anchor}" fill="{color}">'
        f"{lbl(text)}</text>"
    )


def _runs(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            runs.append([])
        else:
            runs[-1].append((x, y))
    return [r for r in runs if r]
