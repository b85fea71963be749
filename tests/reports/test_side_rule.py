"""Which side's load the divergence follows: the rule on constructed sweeps, every outcome."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.servers import Side
from reports.analysis.side_rule import MIN_GROUP, contrast, follows

NAN = float("nan")


def sweep(groups: list[tuple[float, float, int, int]]) -> tuple[dict[Side, npt.ArrayLike], list[bool]]:
    """Completions from (prefill others, decode others, completions, diverged) groups."""
    p: list[float] = []
    d: list[float] = []
    div: list[bool] = []
    for po, do, n, k in groups:
        p += [po] * n
        d += [do] * n
        div += [True] * k + [False] * (n - k)
    return {"prefill": p, "decode": d}, div


def test_a_prefill_sweep_with_a_quiet_decoder_follows_the_prefill_side() -> None:
    others, div = sweep([(0, 0, 4, 0), (2, 0, 4, 1), (5, 0, 4, 4)])
    out = follows(others, div)
    assert out["outcome"] == "prefill"
    assert out["prefill"] == {
        "verdict": "follows",
        "low": {"others": 0, "completions": 4, "diverged": 0},
        "high": {"others": 5, "completions": 4, "diverged": 4},
    }
    assert out["decode"]["verdict"] == "flat"
    assert out["sentence"].startswith("The divergence follows the prefill side's load (prefill side 0/4 diverged at 0")


def test_a_decode_sweep_follows_the_decode_side_and_medians_are_rounded_into_groups() -> None:
    others, div = sweep([(0.4, 0.2, 5, 0), (0.0, 6.4, 5, 5), (0.2, 5.6, 1, 1)])  # 6.4 and 5.6 both round to 6
    out = follows(others, div)
    assert out["outcome"] == "decode"
    assert out["decode"]["high"] == {"others": 6, "completions": 6, "diverged": 6}
    assert out["prefill"]["verdict"] == "flat"


def test_both_neither_and_too_few() -> None:
    together, div = sweep([(0, 0, 5, 0), (4, 4, 5, 5)])  # both sides rose together: no way to tell them apart
    assert follows(together, div)["outcome"] == "both"
    flat_rate, div = sweep([(0, 0, 6, 2), (4, 4, 6, 3)])  # the rate hardly moves: intervals overlap
    out = follows(flat_rate, div)
    assert out["outcome"] == "neither" and out["sentence"].startswith("The divergence follows neither")
    few, div = sweep([(0, 0, 5, 0), (4, 0, MIN_GROUP - 1, MIN_GROUP - 1)])
    out = follows(few, div)
    assert out["outcome"] == "too few canaries" and out["prefill"]["verdict"] == "too_few"
    assert f"at least {MIN_GROUP} measured completions" in out["sentence"]
    unmeasured, div = sweep([(NAN, 0, 4, 0), (NAN, 3, 4, 2)])
    out = follows(unmeasured, div)
    assert out["outcome"] == "too few canaries" and out["prefill"] == {
        "verdict": "unmeasured",
        "low": None,
        "high": None,
    }
    assert "prefill side unmeasured" in out["sentence"]


def test_no_divergence_follows_neither_side_whatever_the_load() -> None:
    others, div = sweep([(0, 0, 4, 0), (5, 5, 4, 0)])
    out = follows(others, div)
    assert out["outcome"] == "neither" and out["sentence"].startswith("No canary diverged")


def test_a_rate_that_falls_with_load_is_not_followed() -> None:
    others, div = sweep([(0, 0, 5, 5), (4, 0, 5, 0)])
    assert contrast(others["prefill"], div)["verdict"] == "no"
    assert follows(others, div)["outcome"] == "neither"


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.booleans()), min_size=1, max_size=40))
def test_the_outcome_is_what_the_per_side_verdicts_say(rows: list[tuple[int, int, bool]]) -> None:
    others: dict[Side, npt.ArrayLike] = {"prefill": [float(r[0]) for r in rows], "decode": [float(r[1]) for r in rows]}
    div = np.array([r[2] for r in rows])
    out = follows(others, div)
    hit = {s for s, c in (("prefill", out["prefill"]), ("decode", out["decode"])) if c["verdict"] == "follows"}
    if not div.any():
        assert out["outcome"] == "neither"
    elif hit:
        assert out["outcome"] == ("both" if len(hit) == 2 else hit.pop())
    else:
        assert out["outcome"] in ("neither", "too few canaries")
    # swapping the sides swaps the verdicts
    swapped = follows({"prefill": others["decode"], "decode": others["prefill"]}, div)
    assert (swapped["prefill"], swapped["decode"]) == (out["decode"], out["prefill"])


@pytest.mark.parametrize(("n", "follows_it"), [(3, False), (4, True)])
def test_interval_separation_needs_four_at_each_end_for_all_against_none(n: int, follows_it: bool) -> None:
    others, div = sweep([(0, 0, n, 0), (3, 0, n, n)])
    assert (contrast(others["prefill"], div)["verdict"] == "follows") is follows_it
