"""cache_checks: did a canary hit or miss the prefix cache, by cached_tokens first and by the engine's counters
second; "unknown" where neither says, never a vacuous pass."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.manifest import ResolvedScenario
from reports.analysis.cache_checks import cache_expectations, cache_notices, counter_evidence
from reports.model.report import CacheExpectation

NAN = math.nan


def arr(*values: float) -> np.ndarray[Any, np.dtype[np.float64]]:
    return np.array(values, dtype=float)


# engine samples every 10 s; the counters as a vLLM /metrics scrape gives them (cumulative)
T = arr(0, 10, 20, 30, 40, 50, 60)
QUERIES = arr(0, 50, 100, 220, 280, 330, 330)
HITS = arr(0, 0, 32, 48, 48, 48, 48)


def one(sent: float, ended: float, prompt: float, t: Any = T, q: Any = QUERIES, h: Any = HITS) -> str | None:
    got = counter_evidence(arr(sent), arr(ended), arr(prompt), t, q, h)
    assert len(got) == 1
    return got[0]


# --- counter_evidence ---------------------------------------------------------------------------


def test_a_canary_alone_whose_window_looked_up_exactly_its_prompt_and_hit_is_a_hit() -> None:
    assert one(11, 13, 50) == "hit"  # window 10..20: 50 queried (its prompt), 32 hit


def test_no_hit_in_the_window_is_a_miss_even_with_other_lookups() -> None:
    assert one(1, 3, 50) == "miss"  # window 0..10: 50 queried, nothing hit
    assert one(31, 33, 10) == "miss"  # window 30..40: 60 queried, more than its 10-token prompt, nothing hit


def test_hits_in_a_window_where_others_looked_up_too_are_shared() -> None:
    assert one(21, 23, 50) == "shared"  # window 20..30: 120 queried for a 50-token prompt, 16 hit
    assert one(11, 13, 49) == "shared"  # one token off its prompt: not provably its own hit
    assert one(11, 13, NAN) == "shared"  # its prompt size unknown


def test_the_window_runs_from_the_last_sample_before_to_the_first_after() -> None:
    assert one(10, 20, 50) == "hit"  # samples at the send and end times bound the window themselves
    assert one(9, 21, 40) == "shared"  # 0..30: 220 queried, 48 hit, and the first move (50) is not its prompt


def test_its_own_lookup_is_the_first_move_of_the_query_counter_after_it_was_sent() -> None:
    """A canary looks the cache up once, before its first token: the next canary's lookup, sent as this one
    ends, falls in its whole-life window but not in its own first move."""
    t, q, h = arr(0, 10, 20), arr(0, 50, 120), arr(0, 32, 40)
    assert one(1, 15, 50, t, q, h) == "hit"  # 0..20: 120 queried, but 0..10 moved by exactly its 50, and hit
    assert one(1, 15, 50, t, q, arr(0, 0, 40)) == "miss"  # its own 50 hit nothing; the later 8 hits were not its
    assert one(9, 21, 50) == "miss"  # the fixture: its first move (0..10) is its 50 tokens, with no hit


@pytest.mark.parametrize(
    ("sent", "ended"),
    [
        (-1, 3),  # no sample before it was sent
        (55, 65),  # no sample after it ended
        (51, NAN),  # no end (no latency)
        (51, 59),  # 50..60: the counters did not move
    ],
)
def test_no_samples_around_it_or_counters_not_moving_say_nothing(sent: float, ended: float) -> None:
    assert one(sent, ended, 50) is None


def test_nan_counters_say_nothing() -> None:
    nans = arr(*[NAN] * 7)
    assert one(11, 13, 50, q=nans) is None
    assert one(11, 13, 50, h=nans) is None
    assert one(11, 13, 50, t=nans) is None
    assert one(11, 13, 50, q=arr(NAN, NAN, NAN, NAN, NAN, NAN, 330)) is None  # one usable sample: no window


def test_a_sample_with_a_nan_counter_is_skipped_and_the_window_widens() -> None:
    # sample 20 unreadable: the canary sent at 11 is bounded by 10..30, where 170 were queried
    assert one(11, 13, 50, q=arr(0, 50, NAN, 220, 280, 330, 330)) == "shared"
    assert one(11, 13, 50, h=arr(0, 0, NAN, 48, 48, 48, 48)) == "shared"
    assert one(31, 33, 10, q=arr(0, 50, NAN, 220, 280, 330, 330)) == "miss"  # a window without it is unaffected


def test_counters_going_backwards_say_nothing() -> None:
    """An engine restart resets its counters: a negative query delta is no evidence."""
    assert one(11, 13, 50, q=arr(0, 50, 10, 220, 280, 330, 330)) is None


def test_counters_that_reset_after_the_window_do_not_crash() -> None:
    """An endpoint restarted later in the run: its counters start again from 0 after this canary's window.
    Inside the window they moved by exactly the prompt, with a hit: the canary's own lookup."""
    assert one(1, 5, 4, t=arr(0, 10, 20, 30), q=arr(5, 9, 0, 0), h=arr(1, 2, 0, 0)) == "hit"


def test_no_counters_or_fewer_than_two_samples_say_nothing_for_every_canary() -> None:
    sent, ended, prompt = arr(1, 11, 21), arr(3, 13, 23), arr(50, 50, 50)
    assert counter_evidence(sent, ended, prompt, None, QUERIES, HITS) == [None] * 3
    assert counter_evidence(sent, ended, prompt, T, None, HITS) == [None] * 3
    assert counter_evidence(sent, ended, prompt, T, QUERIES, None) == [None] * 3
    assert counter_evidence(sent, ended, prompt, arr(0), arr(0), arr(0)) == [None] * 3
    assert counter_evidence(arr(), arr(), arr(), T, QUERIES, HITS) == []


def test_several_canaries_each_get_their_own_window() -> None:
    got = counter_evidence(arr(1, 11, 21, 51, 100), arr(3, 13, 23, 59, 101), arr(50, 50, 50, 50, 50), T, QUERIES, HITS)
    assert got == ["miss", "hit", "shared", None, None]


sample_steps = st.lists(st.floats(min_value=0.01, max_value=10), min_size=2, max_size=20)
canaries = st.lists(
    st.tuples(
        st.floats(min_value=-20, max_value=220),  # sent_at
        st.floats(min_value=0.001, max_value=30),  # latency
        st.integers(min_value=1, max_value=500),  # prompt tokens
    ),
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(
    steps=sample_steps,
    lookups=st.lists(st.integers(min_value=1, max_value=1000), min_size=20, max_size=20),
    flat_hits=st.integers(min_value=0, max_value=10**6),
    cans=canaries,
)
def test_counters_that_never_hit_make_every_bounded_canary_a_miss(
    steps: list[float], lookups: list[int], flat_hits: int, cans: list[tuple[float, float, int]]
) -> None:
    t = np.cumsum(arr(*steps))
    queries = np.cumsum(arr(*lookups[: len(steps)]))  # the cache is looked up between every two samples
    hits = np.full(len(steps), float(flat_hits))
    sent = arr(*(c[0] for c in cans))
    ended = sent + arr(*(c[1] for c in cans))
    got = counter_evidence(sent, ended, arr(*(c[2] for c in cans)), t, queries, hits)
    assert len(got) == len(cans)
    for s, e, g in zip(sent, ended, got, strict=True):
        bounded = bool((t <= s).any() and (t >= e).any())
        assert g == ("miss" if bounded else None), (s, e, t)


maybe_nan = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 500).map(float))


@st.composite
def counter(draw: st.DrawFn, n: int) -> list[float]:
    """A cumulative counter as scraped: never going down, some samples unreadable (NaN)."""
    values = np.cumsum(arr(*draw(st.lists(st.integers(0, 100), min_size=n, max_size=n))))
    gaps = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    return [NAN if gap else float(v) for v, gap in zip(values, gaps, strict=True)]


@settings(max_examples=200, deadline=None)
@given(
    t=st.lists(st.floats(min_value=-100, max_value=100), max_size=12).map(sorted),
    data=st.data(),
    cans=st.lists(st.tuples(maybe_nan, maybe_nan, maybe_nan), max_size=12),
)
def test_one_answer_per_canary_whatever_the_samples(
    t: list[float], data: st.DataObject, cans: list[tuple[float, float, float]]
) -> None:
    got = counter_evidence(
        arr(*(c[0] for c in cans)),
        arr(*(c[1] for c in cans)),
        arr(*(c[2] for c in cans)),
        arr(*t),
        arr(*data.draw(counter(len(t)))),
        arr(*data.draw(counter(len(t)))),
    )
    assert len(got) == len(cans)
    assert set(got) <= {"hit", "miss", "shared", None}


# --- cache_expectations -------------------------------------------------------------------------

SCENARIO: ResolvedScenario = {
    "canaries": [
        {"id": "warm", "expect_cache": "hit"},
        {"id": "cold", "cache": "reset", "expect_cache": "miss"},
        {"id": "salted", "cache": "salt"},
        {"id": "plain"},  # keeps the cache and expects nothing: not checked
        {"id": "ghost", "expect_cache": "hit"},  # expected, never answered
    ]
}

COLUMNS = [
    "canary_id",
    "status",
    "phase",
    "sent_at",
    "latency_s",
    "prompt_tokens",
    "cached_tokens",
    "cache_action",
    "cache_reset_ok",
]
ROWS = [
    # warm: cached_tokens decides first (40 > 0: a hit, whatever the counters say of 0..10)
    ("warm", "ok", "sweep", 1.0, 2.0, 50, 40, None, None),
    ("warm", "ok", "sweep", 11.0, 2.0, 50, None, None, None),  # counters 10..20: its own 50 queried, 32 hit
    ("warm", "ok", "sweep", 21.0, 2.0, 50, None, None, None),  # counters 20..30: shared, so unknown
    ("warm", "ok", "sweep", 31.0, 2.0, 60, None, None, None),  # counters 30..40: no hit, a violation
    ("warm", "error", "sweep", 11.0, 2.0, 50, 50, None, None),  # failed: not counted
    ("warm", "ok", "warmup", 11.0, 2.0, 50, 50, None, None),  # warm-up: not counted
    ("warm", "ok", "baseline", 70.0, 1.0, 50, 0, None, None),  # cached 0: a miss, a violation
    # cold: reset before each; the engine may refuse (False) or not answer (None)
    ("cold", "ok", "sweep", 41.0, 2.0, 50, None, "reset", True),  # counters 40..50: no hit, met
    ("cold", "ok", "sweep", 70.0, 1.0, 50, 0, "salt", False),  # refused reset, salted instead: met
    ("cold", "ok", "sweep", 70.0, 1.0, 50, 50, "reset", False),  # refused and it hit: violated
    ("cold", "ok", "sweep", 51.0, 2.0, 50, None, "reset", None),  # no answer; counters still: unknown
    # salted: acts on the cache, expects nothing
    ("salted", "ok", "sweep", 70.0, 1.0, 50, 0, "salt", None),
    ("salted", "ok", "sweep", 70.0, 1.0, 50, None, None, None),
    ("plain", "ok", "sweep", 11.0, 2.0, 50, 50, None, None),
]


def frame(rows: list[tuple[Any, ...]] = ROWS) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["cached_tokens"] = df["cached_tokens"].astype(object).where(df["cached_tokens"].notna(), None)
    return df


def expectations(**kwargs: Any) -> dict[str, CacheExpectation]:
    return cache_expectations(frame(), SCENARIO, engine_t=T, engine_queries=QUERIES, engine_hits=HITS, **kwargs)


def test_only_canaries_that_expect_or_act_on_the_cache_are_checked() -> None:
    assert list(expectations()) == ["cold", "ghost", "salted", "warm"]


def test_expected_hits_by_cached_tokens_first_and_counters_second() -> None:
    warm = expectations()["warm"]
    assert warm == {
        "expect": "hit",
        "cache": "keep",
        "canaries": 5,
        "mechanisms": {"kept": 5},
        "resets_refused": 0,
        "hits": 2,
        "misses": 2,
        "evidence": {"cached_tokens": 2, "counters": 3},
        "counters_shared": 1,
        "reported": 4,
        "met": 2,
        "violated": 2,
        "unknown": 1,
    }


def test_expected_misses_count_mechanisms_and_refused_resets() -> None:
    cold = expectations()["cold"]
    assert cold["expect"] == "miss" and cold["cache"] == "reset" and cold["canaries"] == 4
    assert cold["mechanisms"] == {"reset": 3, "salt": 1}
    assert cold["resets_refused"] == 2  # a reset answered False and one not answered (None); the salt is no reset
    assert (cold["hits"], cold["misses"]) == (1, 2)
    assert cold["evidence"] == {"cached_tokens": 2, "counters": 1}
    assert (cold["met"], cold["violated"], cold["unknown"]) == (2, 1, 1)


def test_a_cache_action_without_an_expectation_meets_and_breaks_nothing() -> None:
    salted = expectations()["salted"]
    assert salted["expect"] is None and salted["cache"] == "salt"
    assert salted["mechanisms"] == {"kept": 1, "salt": 1}
    assert (salted["misses"], salted["met"], salted["violated"], salted["unknown"]) == (1, 0, 0, 1)


def test_an_expected_canary_that_never_answered_is_all_zeros() -> None:
    ghost = expectations()["ghost"]
    assert ghost["canaries"] == 0 and ghost["mechanisms"] == {}
    assert (ghost["met"], ghost["violated"], ghost["unknown"], ghost["reported"]) == (0, 0, 0, 0)


def test_without_engine_counters_only_cached_tokens_decide() -> None:
    got = cache_expectations(frame(), SCENARIO)
    warm = got["warm"]
    assert warm["evidence"] == {"cached_tokens": 2, "counters": 0}
    assert (warm["met"], warm["violated"], warm["unknown"]) == (1, 1, 3)
    assert got["cold"]["resets_refused"] == 2


def test_no_rows_and_no_checked_canaries() -> None:
    assert cache_expectations(frame(), {"canaries": [{"id": "plain"}]}) == {}
    assert cache_expectations(frame(), {}) == {}
    assert cache_expectations(frame([]), {"canaries": [{"id": "warm", "expect_cache": "hit"}]})["warm"]["canaries"] == 0


# --- cache_notices ------------------------------------------------------------------------------

FLAG = "--enable-prompt-tokens-details"


def test_notices_name_violations_and_unverified_expectations() -> None:
    notices = cache_notices(expectations(), engine="vllm", cached_tokens_reported=False)
    assert notices[0].startswith("Canary cold was meant to miss the prefix cache, but 1 of 4 did not")
    assert "vLLM refuses the reset" in notices[0]  # a reset under load explains an expected miss that hit
    assert notices[1].startswith("Canary cold: 1 of 4 answers did not say whether they hit the prefix cache")
    assert notices[2].startswith("Canary warm was meant to hit the prefix cache, but 2 of 5 did not")
    assert "refuses the reset" not in notices[2]
    assert "(1 ran while other requests looked the cache up too)" in notices[3]
    assert len(notices) == 4
    assert not any("ghost" in n for n in notices)  # never answered: nothing unknown, nothing violated
    assert not any("salted" in n for n in notices)  # no expectation: no notice


def test_a_miss_found_after_accepted_resets_names_a_store_the_reset_leaves() -> None:
    """As vLLM 0.26 with LMCache: every reset answered success, and the prompt was loaded from LMCache's store."""
    cold = expectations()["cold"]
    cold["resets_refused"], cold["mechanisms"] = 0, {"reset": 4}
    said = cache_notices({"cold": cold})[0]
    assert "refuses the reset" not in said and "Its resets were accepted" in said
    assert "a KV store the reset does not empty" in said and "salts" not in said
    cold["mechanisms"] = {"reset": 2, "salt": 2}
    assert "its cache salts under load did not reach that store" in cache_notices({"cold": cold})[0]


@pytest.mark.parametrize(
    ("engine", "reported", "named"),
    [
        ("vllm", False, True),
        ("vllm", None, True),
        ("vllm", True, False),
        ("sglang", False, False),
        ("unknown", None, False),
        (None, False, False),
    ],
)
def test_the_vllm_flag_is_named_only_for_vllm_without_cached_tokens(
    engine: str | None, reported: bool | None, named: bool
) -> None:
    notices = cache_notices(expectations(), engine=engine, cached_tokens_reported=reported)
    unverified = [n for n in notices if "unverified" in n]
    assert len(unverified) == 2
    assert all((FLAG in n) is named for n in unverified)
    assert not any(FLAG in n for n in notices if "unverified" not in n)


def test_nothing_to_say_when_every_expectation_was_met() -> None:
    rows = [("warm", "ok", "sweep", 70.0, 1.0, 50, 40, None, None)]
    got = cache_expectations(frame(rows), {"canaries": [{"id": "warm", "expect_cache": "hit"}]})
    assert got["warm"]["met"] == 1
    assert cache_notices(got, engine="vllm", cached_tokens_reported=False) == []
