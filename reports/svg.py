"""Inline SVG line charts for the HTML reports: no JavaScript, no network, nothing to load.

Pure: numbers and labels in, an SVG string out. Every label is escaped here, so callers may pass
model-produced or user-produced strings. Missing points (``None``) break the line, never plot as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04")
W, H, L, R, T, B = 560, 260, 56, 12, 28, 40


@dataclass
class Series:
    name: str
    points: list[tuple[float, float | None]]
    band: list[tuple[float, float, float]] = field(default_factory=list)  # (x, lo, hi) error bars
    step: bool = False
    dashed: bool = False


def _fmt(v: float) -> str:
    return f"{v:.3g}"


def nice_ceiling(v: float) -> float:
    """The smallest of 1, 2, 2.5, 5 (times a power of ten) at or above ``v``: axis tops that read well."""
    if v <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(v))
    return next(m * scale for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * scale >= v * (1 - 1e-12))


def chart(
    title: str,
    series: list[Series],
    x_ticks: list[tuple[float, str]],
    y_label: str,
    y_max: float | None = None,
    x_label: str = "",
) -> str:
    xs = [x for s in series for x, _ in s.points] + [x for x, _ in x_ticks]
    ys = [y for s in series for _, y in s.points if y is not None] + [hi for s in series for _, _, hi in s.band]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    x1 = x1 if x1 > x0 else x0 + 1
    top = y_max if y_max is not None else nice_ceiling(max([*ys, 0.0]))

    def px(x: float) -> float:
        return L + (x - x0) / (x1 - x0) * (W - L - R)

    def py(y: float) -> float:
        return H - B - (y / top) * (H - T - B)

    out = [
        f'<svg class="chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{escape(title)}">',
        f'<text x="{L}" y="16" class="title">{escape(title)}</text>',
        f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" class="axis"/>',
        f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" class="axis"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = top * frac
        out.append(f'<text x="{L - 4}" y="{py(y) + 4:.1f}" class="tick" text-anchor="end">{_fmt(y)}</text>')
        out.append(f'<line x1="{L}" y1="{py(y):.1f}" x2="{W - R}" y2="{py(y):.1f}" class="grid"/>')
    for x, label in x_ticks:
        out.append(f'<text x="{px(x):.1f}" y="{H - B + 14}" class="tick" text-anchor="middle">{escape(label)}</text>')
    out.append(f'<text x="{(L + W) / 2:.0f}" y="{H - 6}" class="tick" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="12" y="{(T + H - B) / 2:.0f}" class="tick" transform="rotate(-90 12 {(T + H - B) / 2:.0f})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, s in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        for x, lo, hi in s.band:
            out.append(
                f'<line x1="{px(x):.1f}" y1="{py(lo):.1f}" x2="{px(x):.1f}" y2="{py(hi):.1f}" '
                f'stroke="{color}" class="bar"/>'
            )
        for run in _runs(s.points):
            pts: list[str] = []
            for j, (x, y) in enumerate(run):
                if s.step and j:
                    pts.append(f"{px(x):.1f},{py(run[j - 1][1]):.1f}")
                pts.append(f"{px(x):.1f},{py(y):.1f}")
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            out.append(f'<polyline points="{" ".join(pts)}" stroke="{color}" class="line"{dash}/>')
            out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>' for x, y in run if not s.step]
        out.append(
            f'<text x="{W - R - 4}" y="{T + 14 * i + 4}" class="legend" text-anchor="end" fill="{color}">'
            f"{escape(s.name)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out)


def _runs(points: list[tuple[float, float | None]]) -> list[list[tuple[float, float]]]:
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in points:
        if y is None:
            runs.append([])
        else:
            runs[-1].append((x, y))
    return [r for r in runs if r]
