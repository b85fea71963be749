"""Per-side co-residency: each canary's life split at its first token, each side's gauge joined over its part."""

from __future__ import annotations

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from hypothesis import assume, given
from hypothesis import strategies as st

from collectors.read.coresidency import window_running
from collectors.read.runfolder import ServerSeries
from reports.analysis import sides
from reports.analysis.coresidency import ENGINE_OTHERS, measure

times = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@given(
    st.lists(
        st.tuples(times, st.floats(0.0, 5.0), st.one_of(st.none(), st.floats(-1.0, 6.0))), min_size=1, max_size=30
    ),
    st.lists(times, max_size=60),
)
def test_a_streamed_canarys_two_windows_partition_its_life(
    canaries: list[tuple[float, float, float | None]], t: list[float]
) -> None:
    sent = np.array([c[0] for c in canaries])
    latency = np.array([c[1] for c in canaries])
    ttft = np.array([np.nan if c[2] is None else c[2] for c in canaries])
    w = sides.side_windows(sent, ttft, latency)
    known = ~np.isnan(ttft)
    assert (w.known == known).all()
    # streamed: [sent, split] then [split, end], the split inside the life; not streamed: both the whole life
    assert (w.prefill_start == sent).all() and (w.decode_end == sent + latency).all()
    assert (w.prefill_end[known] == w.decode_start[known]).all()
    assert (sent[known] <= w.prefill_end[known]).all() and (w.prefill_end[known] <= w.decode_end[known]).all()
    assert (w.prefill_end[~known] == w.decode_end[~known]).all() and (w.decode_start[~known] == sent[~known]).all()
    # every sample of a streamed canary's life falls in one window, or in both where it sits on the split
    samples = np.array(t)
    running = np.ones(len(samples))
    life = window_running(sent, sent + latency, samples, running)[3]
    pre = window_running(w.prefill_start, w.prefill_end, samples, running)[3]
    dec = window_running(w.decode_start, w.decode_end, samples, running)[3]
    on_split = np.array([int((samples == x).sum()) for x in w.prefill_end])
    assume(known.any())
    assert (pre[known] + dec[known] - on_split[known] == life[known]).all()


def frame(rows: list[tuple[float, float | None, float]]) -> pd.DataFrame:
    """Canary rows (sent_at, ttft_s, latency_s), one sweep level 2 each."""
    n = len(rows)
    return pd.DataFrame(
        {
            "sent_at": [r[0] for r in rows],
            "ttft_s": [np.nan if r[1] is None else r[1] for r in rows],
            "latency_s": [r[2] for r in rows],
            "engine_running": np.full(n, np.nan),
            "batch_others_min": np.full(n, 7.0),
            "batch_others_median": np.full(n, 7.0),
            "batch_others_max": np.full(n, 7.0),
            "level": np.full(n, 2),
            "phase": ["sweep"] * n,
        }
    )


def series(name: str, role: str, t: list[float], running: list[float]) -> ServerSeries:
    return ServerSeries(name, role, np.array(t), np.array(running))


def test_each_side_reads_its_servers_over_its_window_and_the_loaded_side_is_the_canarys() -> None:
    # canary 0: sent at 10, first token at 10.5, last byte at 12; canary 1: not streamed, 20 .. 22
    f = frame([(10.0, 0.5, 2.0), (20.0, None, 2.0)])
    p = series("p", "prefill", [10.2, 10.4, 11.0, 20.5, 21.5], [5, 6, 9, 3, 4])
    d = series("d", "decode", [10.2, 10.8, 11.5, 21.0], [8, 2, 3, 1])
    out = sides.join_sides(f, [p, d], "prefill", edge_s=0.05)
    # the prefill window [10, 10.5] holds p's 10.2 and 10.4; the decode window [10.5, 11.95] d's 10.8 and 11.5
    assert out["prefill_others_min"].tolist()[0] == 4 and out["prefill_others_max"].tolist()[0] == 5
    assert out["decode_others_min"].tolist()[0] == 1 and out["decode_others_max"].tolist()[0] == 2
    assert out["prefill_samples"].tolist() == [2, 2] and out["decode_samples"].tolist() == [2, 1]
    # not streamed: both windows are the whole life (less an edge), and it is told apart
    assert out["prefill_window_known"].tolist() == [True, False]
    assert out["prefill_others_median"].tolist()[1] == 2.5 and out["decode_others_median"].tolist()[1] == 0
    # the loaded side is the canary's co-residency; batch sizes through a router mix both sides: set aside
    assert out[list(ENGINE_OTHERS)].equals(out[list(sides.OTHERS["prefill"])].set_axis(list(ENGINE_OTHERS), axis=1))
    assert out["batch_others_min"].isna().all()
    m = measure(out)
    assert m.expected.tolist() == [2, 2] and m.held.tolist() == [1.0, 1.0]  # prefill min 4 and 2 >= level 2
    quiet = measure(out, scraped_columns=sides.OTHERS["decode"], promised=False)
    assert quiet.expected.tolist() == [0, 0] and quiet.lo.tolist() == [1.0, 0.0]


def test_a_side_of_several_servers_sums_them_and_a_side_without_servers_is_unmeasured() -> None:
    a = series("a", "decode", [1.0, 2.0, 3.0], [1, 2, 3])
    b = series("b", "both", [1.5, 2.5], [10, 20])
    summed = sides.side_series([a, b], "decode")
    assert summed is not None
    t, running = summed
    assert t.tolist() == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert np.isnan(running[0]) and running[1:].tolist() == [11, 12, 22, 23]  # b had no sample before 1.5
    assert sides.side_series([a], "prefill") is None
    alone = sides.side_series([b], "prefill")  # a both server alone on a side: its own series
    assert alone is not None and alone[0] is b.t and alone[1] is b.running
    out = sides.join_sides(frame([(1.0, 0.1, 2.5)]), [a], "decode")
    assert out["prefill_samples"].tolist() == [0] and out["prefill_others_median"].isna().all()
    assert out["engine_others_median"].tolist() == [1.5]  # decode: samples 2 and 3 in [1.1, 3.45], less itself


def test_the_heatmap_counts_completions_by_both_sides_load() -> None:
    prefill = np.array([0, 0, 3, 3, 3, -1])
    decode = np.array([1, 1, 1, 0, 1, 1])
    diverged = np.array([False, True, True, False, True, True])
    h = sides.heatmap(prefill, decode, diverged)
    assert h == {
        "prefill_others": [0, 3],
        "decode_others": [0, 1],
        "completions": [[0, 2], [1, 2]],
        "diverged": [[0, 1], [0, 2]],
        "rate": [[None, 0.5], [0.0, 1.0]],
    }
    assert sides.heatmap(np.array([-1]), np.array([0]), np.array([True])) is None
