"""Hand-made token sequences with known answers for every figure, plus Hypothesis invariants."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.runfolder import CanaryColumns, ColumnBuilder
from reports.analysis.canary import analyse
from reports.model.report import CanaryAnalysis
from tests.reports.runkit import rec

REF = [1, 2, 3, 4, 5]
REF_LP = [-0.1, -0.2, -0.3, -0.4, -0.5]
TOP = [[["t1", -0.1], ["x", -3.0]], [["t2", -0.2], ["x", -2.0]], [["t3", -0.3], ["t7", -0.9]], [["t4", -0.4]], []]


def columns(records: list[dict[str, Any]]) -> CanaryColumns:
    b = ColumnBuilder()
    for r in records:
        b.add(r)
    return b.finish()


def known_records() -> list[dict[str, Any]]:
    return [
        rec([9, 9, 9], phase="warmup"),  # counted nowhere
        *[rec(REF, phase="baseline", logprobs=REF_LP, top=TOP) for _ in range(3)],
        *[rec(REF, level=1, logprobs=REF_LP) for _ in range(3)],
        rec(REF, level=1, logprobs=[-0.1, -0.25, -0.3, -0.4, -0.5]),  # same tokens, drifted logprob
        rec(REF, level=2, logprobs=REF_LP, engine_running=3.0),
        rec([1, 2, 7, 8, 9], level=2, logprobs=[-0.1, -0.2, -0.9, -1, -1], engine_running=5.0),
        rec([1, 2, 7, 8, 9], level=2, logprobs=[-0.1, -0.2, -0.9, -1, -1]),
        rec([1, 2, 3, 4], level=2, logprobs=REF_LP[:4]),  # strict prefix: diverges at its length
        rec(None, level=4, status="error", error_kind="timeout"),
        rec([1, 9, 3, 4, 5], level=4, logprobs=REF_LP),
    ]


@pytest.fixture(scope="module")
def known() -> CanaryAnalysis:
    [entry] = analyse(columns(known_records()))
    return entry


def test_reference_is_the_self_consistent_baseline(known: dict[str, Any]) -> None:
    ref = known["reference"]
    assert (ref["kind"], ref["identity"], ref["unit"]) == ("baseline", "token_ids", "token")
    assert (ref["canaries"], ref["completions"], ref["unique_completions"]) == (3, 3, 1)
    assert ref["self_consistent"] is True
    assert ref["tokens"] == ["t1", "t2", "t3", "t4", "t5"]
    assert ref["length"] == 5


def test_level_without_divergence(known: dict[str, Any]) -> None:
    lv1 = known["levels"][0]
    assert lv1["concurrency"] == 1
    assert (lv1["canaries"], lv1["errors"], lv1["unique_completions"], lv1["diverged"]) == (4, 0, 1, 0)
    assert lv1["divergence_rate"] == 0.0
    lo, hi = lv1["divergence_rate_ci95"]
    assert lo == 0.0 and hi == pytest.approx(0.4899, abs=1e-4)  # zero events still bounded
    assert lv1["first_divergence"] is None and lv1["earliest_divergence"] is None
    assert lv1["modal_share"] == 1.0
    drift = lv1["logprob_drift"]
    assert drift["max"] == pytest.approx(0.05)
    assert drift["mean"] == pytest.approx(0.05 / 5 / 4)
    assert drift["bitwise_equal_share"] == 0.75


def test_level_with_forks_and_prefix(known: dict[str, Any]) -> None:
    lv2 = known["levels"][1]
    assert (lv2["canaries"], lv2["completions"], lv2["unique_completions"], lv2["diverged"]) == (4, 4, 3, 3)
    assert lv2["divergence_rate"] == 0.75
    assert lv2["first_divergence"] == {"min": 2, "median": 2.0, "max": 4, "histogram": [[2, 2], [4, 1]]}
    assert lv2["modal_share"] == 0.5 and lv2["reference_share"] == 0.25
    assert lv2["engine_running"] == {"median": 4.0}
    assert lv2["observed_inflight"] == {"median": 2.0}
    assert lv2["logprob_drift"]["max"] == 0.0  # drift counts only positions before the divergence


def test_errors_are_counted_not_compared(known: dict[str, Any]) -> None:
    lv4 = known["levels"][2]
    assert (lv4["canaries"], lv4["errors"], lv4["completions"], lv4["diverged"]) == (2, 1, 1, 1)
    assert lv4["error_kinds"] == {"timeout": 1}
    assert lv4["earliest_divergence"] == 1
    assert lv4["engine_running"] is None


def test_overall(known: dict[str, Any]) -> None:
    o = known["overall"]
    assert (o["canaries"], o["errors"], o["completions"], o["unique_completions"], o["diverged"]) == (10, 1, 9, 4, 4)
    assert o["earliest_divergence"] == 1
    assert o["first_divergent_concurrency"] == 2
    assert o["modal_share"] == pytest.approx(5 / 9)


def test_forks(known: dict[str, Any]) -> None:
    forks = [(f["position"], f["reference_token"], f["other_token"], f["count"]) for f in known["forks"]]
    assert forks == [(1, "t2", "t9", 1), (2, "t3", "t7", 2), (4, "t5", None, 1)]
    gaps = [f["top1_top2_gap"] for f in known["forks"]]
    assert gaps[0] == pytest.approx(1.8) and gaps[1] == pytest.approx(0.6) and gaps[2] is None
    assert known["forks"][1]["levels"] == {"2": 2}
    assert (known["forks"][1]["reference_token_id"], known["forks"][1]["other_token_id"]) == (3, 7)


def test_modal_reference_without_baseline_takes_earliest_on_tie() -> None:
    records = [rec([5, 6], level=1, sent_at=20.0), rec([1, 2], level=1, sent_at=10.0)]
    records += [rec([5, 6], level=2, sent_at=30.0), rec([1, 2], level=2, sent_at=40.0)]
    [entry] = analyse(columns(records))
    assert entry["reference"]["kind"] == "modal"
    assert entry["reference"]["self_consistent"] is None
    assert entry["reference"]["tokens"] == ["t1", "t2"]  # sent first among the tied modes
    assert entry["overall"]["diverged"] == 2


def test_baseline_that_disagrees_with_itself_is_flagged() -> None:
    records = [rec([1, 2, 3], phase="baseline"), rec([1, 2, 4], phase="baseline"), rec([1, 2, 4], phase="baseline")]
    records.append(rec([1, 2, 4], level=1))
    [entry] = analyse(columns(records))
    ref = entry["reference"]
    assert ref["self_consistent"] is False and ref["unique_completions"] == 2
    assert ref["tokens"] == ["t1", "t2", "t4"]  # the modal baseline completion
    assert ref["earliest_divergence"] == 2
    assert entry["overall"]["diverged"] == 0


def test_identity_falls_back_and_says_so() -> None:
    records = [rec([1, 2], level=1), rec(None, level=1, tokens=["a", "b"], text="ab", logprobs=[-1.0, -1.0])]
    [entry] = analyse(columns(records))
    assert entry["reference"]["identity"] == "tokens"
    assert "1 of 2" in (entry["reference"]["identity_note"] or "")


def test_text_identity_counts_characters() -> None:
    records = [rec(None, level=1, text="hello world", tokens=None, logprobs=None) for _ in range(2)]
    records.append(rec(None, level=2, text="hello there", tokens=None, logprobs=None))
    [entry] = analyse(columns(records))
    assert (entry["reference"]["identity"], entry["reference"]["unit"]) == ("text", "character")
    assert entry["overall"]["earliest_divergence"] == 6
    assert entry["forks"][0]["reference_token"] == "w" and entry["forks"][0]["other_token"] == "t"
    assert entry["overall"]["logprob_drift"] is None


def test_several_canaries_are_analysed_apart() -> None:
    records = [rec([1, 2], level=1, canary="b"), rec([1, 3], level=1, canary="b"), rec([7], level=1, canary="a")]
    entries = analyse(columns(records))
    assert [e["id"] for e in entries] == ["a", "b"]
    assert entries[0]["overall"]["unique_completions"] == 1
    assert entries[1]["overall"]["unique_completions"] == 2


def test_no_completions_gives_nulls_not_zeros() -> None:
    [entry] = analyse(columns([rec(None, level=1, status="error", error_kind="connection")]), levels=[1, 2])
    lv = entry["levels"][1]
    assert lv["concurrency"] == 2 and lv["canaries"] == 0
    assert lv["divergence_rate"] is None and lv["divergence_rate_ci95"] is None and lv["modal_share"] is None
    assert entry["reference"]["length"] is None


# --- properties -------------------------------------------------------------------------------------

seqs = st.lists(st.integers(0, 3), min_size=0, max_size=6)
runs = st.lists(st.tuples(seqs, st.sampled_from([0, 1, 2]), st.booleans()), min_size=1, max_size=25)


def _records(spec: list[tuple[list[int], int, bool]]) -> list[dict[str, Any]]:
    out = []
    for i, (ids, level, base) in enumerate(spec):
        lps = [-0.25 * ((t + i) % 3) for t in ids]
        out.append(rec(ids, level=level, phase="baseline" if base and i % 3 == 0 else "sweep", logprobs=lps))
    return out


@settings(max_examples=60, deadline=None)
@given(runs, st.randoms(use_true_random=False))
def test_shuffling_records_changes_no_figure(spec: list[tuple[list[int], int, bool]], rnd: random.Random) -> None:
    records = _records(spec)
    shuffled = records[:]
    rnd.shuffle(shuffled)
    for r in shuffled[: len(shuffled) // 2]:
        r["sent_at"] = 5.0  # ties are broken by request id, not by file order
    assert analyse(columns(records)) == analyse(columns(shuffled))


@settings(max_examples=60, deadline=None)
@given(runs)
def test_counts_are_bounded(spec: list[tuple[list[int], int, bool]]) -> None:
    records = _records(spec)
    [entry] = analyse(columns(records))
    for block in [entry["overall"], *entry["levels"]]:
        assert block["unique_completions"] <= block["canaries"]
        if block["diverged"] is not None:
            assert block["diverged"] <= block["completions"]
        if block["divergence_rate_ci95"] is not None:
            lo, hi = block["divergence_rate_ci95"]
            assert block["divergence_rate"] is not None and 0.0 <= lo <= block["divergence_rate"] <= hi <= 1.0
    ref_len = entry["reference"]["length"]
    for fork in entry["forks"]:
        assert ref_len is not None and fork["position"] <= ref_len


@settings(max_examples=40, deadline=None)
@given(seqs, st.integers(1, 5))
def test_a_completion_never_diverges_from_itself(ids: list[int], n: int) -> None:
    [entry] = analyse(columns([rec(ids, level=1) for _ in range(n)]))
    assert entry["overall"]["diverged"] == 0 and entry["overall"]["unique_completions"] == 1
    assert entry["overall"]["logprob_drift"] is None or entry["overall"]["logprob_drift"]["bitwise_equal_share"] == 1


def test_matrix_is_not_copied_per_record() -> None:
    cols = columns([rec(REF, level=lv) for lv in (1, 2)])
    assert isinstance(cols.token_ids, np.ndarray) and cols.token_ids.shape == (2, 5)
