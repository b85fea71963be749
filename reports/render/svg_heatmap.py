"""An inline SVG heatmap (rows × columns of numbers) for the HTML reports: no script, nothing to load.

Pure: labels and numbers in, an SVG string out; every label is escaped here. A cell that is ``None``
was not measured and is left blank (the grey ground shows). Any other value that is not a finite
number (NaN, ±infinity, a string) is left blank too, counted and named under the chart ("2 values
not plotted"). Colour is on a log scale between the smallest and largest positive finite values (a
range of at most ``DECADES`` decades, so one absurd value cannot wash out the rest); zero and
negative values get the "exactly equal" colour. Huge values (``1.7e308``) scale without overflow.
"""

from __future__ import annotations

import math
from typing import Any

from reports.model.finite import finite
from reports.render.svg import fmt, lbl, not_plotted

W, L, R, T, B, CELL_H = 560, 64, 12, 28, 64, 18
DECADES = 6.0
ZERO = "#ecfdf5"
STOPS = ((254, 240, 217), (252, 141, 89), (153, 0, 13))


def colour(t: float) -> str:
    """A colour on the three-stop scale for ``t`` in [0, 1] (clamped; NaN as 0)."""
    t = 0.0 if not math.isfinite(t) else min(1.0, max(0.0, t))
    i = 0 if t <= 0.5 else 1
    f = t * 2 - i
    a, b = STOPS[i], STOPS[i + 1]
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b, strict=True))


def heatmap(
    title: str,
    rows: list[tuple[str, list[Any]]],
    x_ticks: list[tuple[int, str]],
    x_label: str,
    y_label: str,
    value_label: str,
) -> str:
    """``rows``: (row label, one value per column); ``x_ticks``: (column index, label)."""
    ncol = max([len(v) for _, v in rows] + [1])
    nrow = max(1, len(rows))
    h = T + nrow * CELL_H + B
    cw = (W - L - R) / ncol
    values = [v for _, vs in rows for v in vs]
    dropped = sum(1 for v in values if v is not None and not finite(v))
    pos = [float(v) for v in values if finite(v) and v > 0]
    hi = max(pos) if pos else 1.0
    lo = max(min(pos), hi * 10.0**-DECADES) if pos else 1.0
    span = math.log10(hi) - math.log10(lo)

    def t_of(v: float) -> float:
        return 1.0 if span <= 0 else (math.log10(max(v, lo)) - math.log10(lo)) / span

    out = [
        f'<svg class="chart" viewBox="0 0 {W} {h}" width="{W}" height="{h}" role="img" aria-label="{lbl(title)}">',
        f'<text x="{L}" y="16" class="title">{lbl(title)}</text>',
        f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{nrow * CELL_H}" fill="#f3f4f6"/>',
    ]
    for r, (name, vs) in enumerate(rows):
        y = T + r * CELL_H
        out.append(f'<text x="{L - 4}" y="{y + CELL_H / 2 + 4:.1f}" class="tick" text-anchor="end">{lbl(name)}</text>')
        for c, v in enumerate(vs):
            if not finite(v):
                continue
            fill = ZERO if v <= 0 else colour(t_of(float(v)))
            out.append(
                f'<rect x="{L + c * cw:.2f}" y="{y}" width="{cw:.2f}" height="{CELL_H}" fill="{fill}">'
                f"<title>{lbl(name)}, column {c}: {fmt(float(v))}</title></rect>"
            )
    base = T + nrow * CELL_H
    for c, label in x_ticks:
        if not finite(c) or not 0 <= c < ncol:
            continue
        x = L + (c + 0.5) * cw
        out.append(f'<text x="{x:.1f}" y="{base + 14}" class="tick" text-anchor="middle">{lbl(label)}</text>')
    out.append(f'<text x="{(L + W) / 2:.0f}" y="{base + 28}" class="tick" text-anchor="middle">{lbl(x_label)}</text>')
    out.append(
        f'<text x="12" y="{T + nrow * CELL_H / 2:.0f}" class="tick" '
        f'transform="rotate(-90 12 {T + nrow * CELL_H / 2:.0f})" text-anchor="middle">{lbl(y_label)}</text>'
    )
    ly = base + 38
    out.append(f'<rect x="{L}" y="{ly}" width="12" height="12" fill="{ZERO}" stroke="#999"/>')
    out.append(f'<text x="{L + 16}" y="{ly + 10}" class="tick">0 (equal)</text>')
    for i in range(5):
        out.append(f'<rect x="{L + 90 + i * 14}" y="{ly}" width="14" height="12" fill="{colour(i / 4)}"/>')
    scale = f"{lbl(value_label)} {fmt(lo)} … {fmt(hi)} (log scale)" if pos else f"{lbl(value_label)}: none > 0"
    out.append(f'<text x="{L + 164}" y="{ly + 10}" class="tick">{scale}</text>')
    if dropped:
        out.append(not_plotted(dropped))
    out.append("</svg>")
    return "\n".join(out)
