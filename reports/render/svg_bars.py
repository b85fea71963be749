"""Inline SVG bar charts for the HTML reports: a histogram over labelled bins, and one strip of bars per
row over a shared numeric axis (small multiples). No script, nothing to load.

Pure: labels and numbers in, an SVG string out; every label is escaped here. A bar whose position or
count is not a finite number (NaN, ±infinity, None, a string), or whose count is negative, is left
out, counted and named under the chart ("2 values not plotted"). Heights scale to the largest finite
count, positions to the largest finite position, however large (``1.7e308``), without overflowing.
A legend goes below the bars (``reports.render.svg.legend``, the one rule of every chart); positions that are
all whole numbers (token positions) get whole-number ticks.
"""

from __future__ import annotations

from typing import Any

from reports.model.finite import finite
from reports.render.svg import Key, lbl, not_plotted, tick, x_tick
from reports.render.svg import legend as keys_below

W, L, R, T = 560, 64, 12, 28
BAR, MARK = "#2563eb", "#dc2626"


def _count(v: Any) -> float | None:
    return float(v) if finite(v) and v >= 0 else None


def histogram(title: str, bins: list[tuple[str, Any, bool]], x_label: str, y_label: str, legend: str = "") -> str:
    """``bins``: (label, count, marked); marked bars are drawn in the second colour (``legend`` says why)."""
    h, b = 220, 44
    good = [(label, _count(n), mark) for label, n, mark in bins]
    dropped = sum(1 for _, n, _ in good if n is None)
    top = max([n for _, n, _ in good if n is not None] + [0.0]) or 1.0
    bw = (W - L - R) / max(1, len(bins))
    keys_svg, keys_h = keys_below([Key(legend, MARK, "box")] if legend else [], h)
    out = [
        f'<svg class="chart" viewBox="0 0 {W} {h + keys_h:.0f}" width="{W}" height="{h + keys_h:.0f}" role="img" '
        f'aria-label="{lbl(title)}">',
        f'<text x="{L}" y="16" class="title">{lbl(title)}</text>',
        f'<line x1="{L}" y1="{h - b}" x2="{W - R}" y2="{h - b}" class="axis"/>',
        f'<text x="{L - 4}" y="{T + 4}" class="tick" text-anchor="end">{tick(top)}</text>',
    ]
    for i, (label, n, mark) in enumerate(good):
        x = L + i * bw
        if n is not None and n > 0:
            bh = n / top * (h - T - b)
            out.append(
                f'<rect x="{x + 1:.1f}" y="{h - b - bh:.1f}" width="{max(1.0, bw - 2):.1f}" height="{bh:.1f}" '
                f'fill="{MARK if mark else BAR}"><title>{lbl(label)}: {n:.0f}</title></rect>'
            )
            out.append(
                f'<text x="{x + bw / 2:.1f}" y="{h - b - bh - 3:.1f}" class="tick" text-anchor="middle">{n:.0f}</text>'
            )
        out.append(f'<text x="{x + bw / 2:.1f}" y="{h - b + 14}" class="tick" text-anchor="middle">{lbl(label)}</text>')
    out.append(f'<text x="{(L + W) / 2:.0f}" y="{h - 6}" class="tick" text-anchor="middle">{lbl(x_label)}</text>')
    out.append(
        f'<text x="12" y="{(T + h - b) / 2:.0f}" class="tick" transform="rotate(-90 12 {(T + h - b) / 2:.0f})" '
        f'text-anchor="middle">{lbl(y_label)}</text>'
    )
    out += [keys_svg, not_plotted(dropped), "</svg>"]
    return "\n".join(x for x in out if x)


def strips(title: str, rows: list[tuple[str, list[tuple[Any, Any]]]], x_label: str) -> str:
    """``rows``: (row label, [(position, count)]): one strip per row, bars at their positions on a shared
    axis from 0 to the largest finite position, heights relative to the strip's own largest count."""
    strip, b = 34, 40
    clean: list[tuple[str, list[tuple[float, float]]]] = []
    dropped = 0
    for name, pts in rows:
        kept = []
        for p, n in pts:
            c = _count(n)
            if not finite(p) or c is None:
                dropped += 1
                continue
            kept.append((float(p), c))
        clean.append((name, kept))
    x_max = max([p for _, pts in clean for p, _ in pts] + [1.0])
    x_min = min([p for _, pts in clean for p, _ in pts] + [0.0])  # x_min <= 0 < 1 <= x_max: a span always
    h = T + max(1, len(clean)) * strip + b
    span = W - L - R
    bw = max(1.0, min(12.0, span / max(1.0, min(span, x_max - x_min + 1))))

    def px(x: float) -> float:  # halves first: the span of two huge values must not overflow
        return L + (x / 2 - x_min / 2) / (x_max / 2 - x_min / 2) * (span - bw)

    out = [
        f'<svg class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{lbl(title)}">',
        f'<text x="{L}" y="16" class="title">{lbl(title)}</text>',
    ]
    for r, (name, pts) in enumerate(clean):
        base = T + (r + 1) * strip - 4
        top = max([n for _, n in pts] + [0.0]) or 1.0
        out.append(f'<line x1="{L}" y1="{base}" x2="{W - R}" y2="{base}" class="axis"/>')
        out.append(f'<text x="{L - 4}" y="{base - 4}" class="tick" text-anchor="end">{lbl(name)}</text>')
        for p, n in pts:
            bh = n / top * (strip - 8)
            out.append(
                f'<rect x="{px(p):.1f}" y="{base - bh:.1f}" width="{bw:.1f}" height="{bh:.1f}" fill="{BAR}">'
                f"<title>{lbl(name)}, {p:.6g}: {n:.0f}</title></rect>"
            )
    base = T + max(1, len(clean)) * strip
    whole = all(p == int(p) for _, pts in clean for p, _ in pts if abs(p) < 1e15)
    middle = x_min / 2 + x_max / 2
    for x in (x_min, float(round(middle)) if whole and abs(middle) < 1e15 else middle, x_max):
        out.append(x_tick(px(x) + bw / 2, base + 12, tick(x)))
    out.append(f'<text x="{(L + W) / 2:.0f}" y="{h - 6}" class="tick" text-anchor="middle">{lbl(x_label)}</text>')
    out += [not_plotted(dropped), "</svg>"]
    return "\n".join(x for x in out if x)
