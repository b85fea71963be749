"""The web UI's live charts from live-table rows: one point per canary and level with a figure, the
baseline left out, hostile canary ids escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.record import Phase
from loadgen.load.live import LiveTable
from loadgen.load.live_chart import points, render
from loadgen.load.messages import CanaryDone


def _svgs(fragment: str) -> list[ET.Element]:
    return [ET.fromstring("<svg" + part.split("</svg>")[0] + "</svg>") for part in fragment.split("<svg")[1:]]


def _row(
    canary: str, level: str, canaries: int, errors: int, unique: int, diverged: Any, earliest: Any
) -> dict[str, Any]:
    return {
        "canary": canary,
        "level": level,
        "canaries": canaries,
        "errors": errors,
        "unique": unique,
        "diverged": diverged,
        "earliest": earliest,
        "identity": "token_ids",
    }


def test_figures_per_level_from_the_table_rows() -> None:
    rows = [
        _row("story", "baseline", 4, 0, 1, "—", "—"),
        _row("story", "0", 5, 1, 1, 0, "—"),
        _row("story", "16", 5, 0, 3, 4, 7),
        _row("story", "32", 2, 2, 0, 0, "—"),  # every canary failed: nothing to plot
        _row("other", "16", 3, 0, 2, "—", "—"),  # no reference yet
    ]
    got = points(rows)
    assert sorted(got["story"]) == [0, 16, 32]  # the baseline has no concurrency
    assert (got["story"][0].unique, got["story"][0].rate, got["story"][0].earliest) == (1, 0.0, None)
    assert (got["story"][16].unique, got["story"][16].rate, got["story"][16].earliest) == (3, 0.8, 7)
    assert (got["story"][32].unique, got["story"][32].rate) == (None, None)
    assert (got["other"][16].unique, got["other"][16].rate) == (2, None)
    unique, rate, earliest = _svgs(render(rows))
    hover = sorted(t.text or "" for t in unique.iter("title"))
    assert hover == [
        "other, concurrency 16: 2",
        "story, concurrency 0: 1",
        "story, concurrency 16: 3",
    ]
    assert sorted(t.text or "" for t in rate.iter("title")) == ["story, concurrency 0: 0", "story, concurrency 16: 0.8"]
    assert [t.text for t in earliest.iter("title")] == ["story, concurrency 16: 7"]


def test_no_level_yet_is_a_note_not_an_empty_chart() -> None:
    fragment = render([_row("story", "baseline", 2, 0, 1, "—", "—")])
    assert "<svg" not in fragment and 'data-levels=""' in fragment and "fill as sweep levels" in fragment


def test_a_hostile_canary_id_is_escaped() -> None:
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    fragment = render([_row(evil, "4", 3, 0, 2, 1, 5)])
    assert "<script" not in fragment and "<img" not in fragment
    (first, *_) = _svgs(fragment)
    assert [t.text for t in first.iter("title")] == [f"{evil}, concurrency 4: 2"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(["warmup", "baseline", "sweep"]),
            st.sampled_from([0, 2, 8]),
            st.booleans(),
            st.integers(0, 3),
        ),
        max_size=40,
    )
)
def test_a_point_for_every_level_the_live_table_has_completions_at(
    msgs: list[tuple[str, Phase, int, bool, int]],
) -> None:
    """Fed real completion summaries through ``LiveTable``: the unique-completions chart has exactly one
    point per canary and sweep level with an ok completion, at the table's value."""
    table = LiveTable()
    for canary, phase, level, ok, h in msgs:
        table.add(
            CanaryDone(
                stage=0,
                canary=canary,
                phase=phase,
                level=level,
                status="ok" if ok else "error",
                hashes={"token_ids": f"h{h}"} if ok else {},
                identity={"token_ids": [h]} if ok and phase == "baseline" else None,
                first_div=None,
            )
        )
    rows = table.rows()
    fragment = render(rows)
    with_figures = {
        (r["canary"], r["level"]): r["unique"] for r in rows if r["level"] != "baseline" and r["canaries"] > r["errors"]
    }
    charts = _svgs(fragment)
    hover = [t.text or "" for t in charts[0].iter("title")] if charts else []
    assert sorted(hover) == sorted(f"{c}, concurrency {lv}: {u}" for (c, lv), u in with_figures.items())


def test_counting_axes_have_whole_number_ticks_and_the_legend_sits_below_the_plot() -> None:
    unique, _, earliest = _svgs(render([_row("story", "0", 3, 0, 1, 0, "—"), _row("story", "4", 3, 0, 3, 2, 3)]))
    for svg in (unique, earliest):
        ticks = [t.text or "" for t in svg.iter("text") if t.get("class") == "tick" and t.get("text-anchor") == "end"]
        assert ticks and all(t.isdigit() for t in ticks), ticks  # 0 / 2 / 4, never 2.5
        axis = max(float(line.get("y1", 0)) for line in svg.iter("line") if line.get("class") == "axis")
        assert all(float(t.get("y", 0)) > axis for t in svg.iter("text") if t.get("class") == "legend")
