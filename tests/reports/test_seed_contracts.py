"""The seed contracts (``reports.analysis.seed_contracts``) and their gates (``reports.analysis.seed_check``) on
records and reports built by hand: each count against a brute-force count of the same rule, the scopes adding
up, every rate inside its own 95% interval, and a gate passing exactly when the rate is within its limit."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.runfolder import ColumnBuilder
from loadgen.core.thresholds import Threshold
from reports.analysis.canary import analyse
from reports.analysis.seed_check import seed_outcomes
from reports.analysis.seed_contracts import section
from reports.model.seeds import Rate, SeedContracts
from tests.reports.runkit import partial_report, rec

LEVELS = [1, 4]
SCOPES = [("baseline", 0), ("sweep", 1), ("sweep", 4)]
ANSWERS = [[1, 2], [1, 3], [2, 2]]  # few, so that completions meet often


def canary(cid: str, **over: Any) -> dict[str, Any]:
    return {"id": cid, "temperature": 1.0, "seed": 1} | over


def contracts(records: list[dict[str, Any]], canaries: list[dict[str, Any]]) -> SeedContracts:
    b = ColumnBuilder()
    for r in records:
        b.add(r)
    cols = b.finish()
    found = section(cols, {"endpoint": {"kind": "completions"}, "canaries": canaries}, analyse(cols, LEVELS))
    assert found is not None
    return found


def scopes_of(block: Any) -> list[Rate]:
    return [block["baseline"], *block["levels"]]


def by_scope(block: Any, sent: list[tuple[str, int]]) -> list[tuple[Rate, tuple[str, int]]]:
    """Each figure of ``block`` with its scope; a level is there exactly when some completion was sent at it."""
    assert [lv["concurrency"] for lv in block["levels"]] == sorted({lv for phase, lv in sent if phase == "sweep"})
    return [(block["baseline"], SCOPES[0]), *((lv, ("sweep", lv["concurrency"])) for lv in block["levels"])]


def well_formed(block: Any) -> None:
    """Every scope: k of n, the rate k / n inside its interval; the levels add up to the sweep."""
    for r in [*scopes_of(block), block["overall"]]:
        assert 0 <= r["k"] <= r["n"]
        if r["n"]:
            assert r["rate"] == r["k"] / r["n"] and r["ci95"][0] <= r["rate"] <= r["ci95"][1]
    assert sum(lv["n"] for lv in block["levels"]) == block["overall"]["n"]
    assert sum(lv["k"] for lv in block["levels"]) <= block["overall"]["k"]  # the sweep also meets across levels


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SCOPES), st.sampled_from([1, 2]), st.sampled_from(range(3))), min_size=1))
def test_seed_collisions_are_completions_equal_to_another_seeds_in_the_scope(
    sent: list[tuple[tuple[str, int], int, int]],
) -> None:
    records = [rec(ANSWERS[a], phase=phase, level=level, canary=f"roll.seed{s}") for (phase, level), s, a in sent]
    found = contracts(records, [canary(f"roll.seed{s}", family="roll", seed=s) for s in (1, 2)])
    (block,) = found["seeds"]
    well_formed(block)

    def brute(picked: list[tuple[int, int]]) -> tuple[int, int]:
        return sum(any(a == b and s != t for t, b in picked) for s, a in picked), len(picked)

    for r, scope in by_scope(block, [sc for sc, _, _ in sent]):
        assert (r["k"], r["n"]) == brute([(s, a) for sc, s, a in sent if sc == scope])
    assert (block["overall"]["k"], block["overall"]["n"]) == brute([(s, a) for sc, s, a in sent if sc[0] == "sweep"])
    seen = [
        r for r in (block["baseline"], block["overall"]) if r["n"]
    ]  # "ignored": every completion met another seed's
    ignored = bool(seen) and all(r["k"] == r["n"] for r in seen)
    assert block["verdict"].startswith("seed ignored on completions") == ignored, block


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SCOPES), st.lists(st.sampled_from(range(3)), min_size=3, max_size=3))))
def test_duplicate_choices_are_choices_repeating_an_earlier_one_of_their_request(
    requests: list[tuple[tuple[str, int], list[int]]],
) -> None:
    records = []
    for i, ((phase, level), answers) in enumerate(requests):
        for j, a in enumerate(answers):
            records.append(rec(ANSWERS[a], phase=phase, level=level, canary=f"g.choice{j}", request_id=f"q{i}"))
    if not records:
        return
    (block,) = contracts(records, [canary("g", n=3)])["choices"]
    well_formed(block)
    for r, scope in by_scope(block, [sc for sc, _ in requests]):
        mine = [answers for sc, answers in requests if sc == scope]
        assert (r["k"], r["n"]) == (sum(3 - len(set(a)) for a in mine), 3 * len(mine))
    assert block["verdict"].startswith("duplicate choices") == any(r["k"] for r in scopes_of(block))


def test_a_route_that_differs_is_named_and_chat_is_compared_with_none() -> None:
    routes = [canary(f"r.{route}", family="r", seed=3, kind=route) for route in ("completions", "generate", "chat")]
    records = [rec([1, 2], phase="baseline", canary=f"r.{route}") for route in ("completions", "generate")]
    records += [rec([9, 9], phase="baseline", canary="r.chat")]  # another template: never compared
    records += [rec([1, 2], level=1, canary="r.generate"), rec([1, 2], level=4, canary="r.generate")]
    records += [rec([1, 3], level=4, canary="r.generate")]
    (block,) = contracts(records, routes)["routes"]
    well_formed(block)
    assert block["compared"] == ["generate"] and block["differing"] == ["generate"]
    assert [(r["k"], r["n"]) for r in scopes_of(block)] == [(0, 1), (0, 1), (1, 2)]
    assert "chat renders the prompt" in block["note"]


def test_a_same_seed_mismatch_is_classed_by_whether_the_logits_moved_before_its_fork() -> None:
    records = [rec([1, 2, 3], phase="baseline", canary="s", logprobs=[-0.5, -0.5, -0.5])]
    records += [rec([1, 2, 3], level=1, canary="s", logprobs=[-0.5, -0.5, -0.5])]  # the same: no mismatch
    records += [rec([1, 2, 4], level=1, canary="s", logprobs=[-0.5, -0.5, -0.9])]  # only the draw at the fork
    records += [rec([1, 2, 5], level=4, canary="s", logprobs=[-0.5, -0.6, -0.9])]  # moved at 1, forked at 2
    records += [rec([1, 2, 6], level=4, canary="s", logprobs=[float("nan")] * 3)]  # nothing to tell by
    (block,) = contracts(records, [canary("s", seed=7)])["same_seed"]
    assert [(r["concurrency"], r["k"], r["n"]) for r in block["levels"]] == [(1, 1, 2), (4, 2, 2)]
    assert (block["logits_moved"], block["draw_only"], block["unclassified"]) == (1, 1, 1)
    assert block["seed"] == 7


def test_a_greedy_run_has_no_seed_contracts() -> None:
    b = ColumnBuilder()
    b.add(rec([1, 2], phase="baseline"))
    cols = b.finish()
    assert section(cols, {"canaries": [{"id": "c0", "temperature": 0, "seed": 0}]}, analyse(cols)) is None


# the gates


def block_of(levels: list[tuple[int, int, int]], overall: tuple[int, int]) -> dict[str, Any]:
    def r(k: int, n: int, level: int | None) -> Rate:
        return {"concurrency": level, "n": n, "k": k, "rate": k / n if n else None, "ci95": [0.0, 1.0] if n else None}

    return {
        "family": "roll",
        "route": "chat",
        "levels": [r(k, n, lv) for lv, k, n in levels],
        "overall": r(*overall, None),
    }


def gate(blocks: list[dict[str, Any]], metric: str, spec: str) -> list[tuple[str, bool]]:
    report = partial_report(seed_contracts={"same_seed": [], "seeds": blocks, "choices": [], "routes": []})
    return [(o.scope, o.passed) for o in seed_outcomes(report, [Threshold.parse(metric, spec)])]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 20), st.integers(1, 20), st.sampled_from([0.0, 0.1, 0.25, 0.5, 1.0]))
def test_a_seed_gate_passes_exactly_when_the_rate_is_within_its_limit(k: int, n: int, limit: float) -> None:
    k = min(k, n)
    blocks = [block_of([(2, k, n)], (k, n))]
    assert gate(blocks, "max_seed_collision", f"{limit}") == [("overall", k / n <= limit)]
    assert gate(blocks, "max_seed_collision", f"{limit}@each") == [("concurrency 2", k / n <= limit)]


def test_a_seed_gate_fails_what_it_cannot_compute() -> None:
    blocks = [block_of([(2, 0, 4), (8, 0, 0)], (0, 4))]
    assert gate(blocks, "max_seed_collision", "0@each") == [("concurrency 2", True), ("concurrency 8", False)]
    assert gate(blocks, "max_seed_collision", "0@16") == [("concurrency 16", False)]  # a level never reached
    assert gate(blocks, "max_duplicate_choices", "0") == [("overall", False)]  # no choices contract in the report
