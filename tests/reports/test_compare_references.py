"""Reference completions run against run (``reports.compare.references``): where two references first differ."""

from __future__ import annotations

from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from reports.compare.references import broke, check, reference_checks
from reports.model.report import Canary, Report

WORDS = st.lists(st.sampled_from([" the", " old", " man", " sea", "\n"]), max_size=12)


def _canary(cid: str, tokens: list[str] | None, unit: str = "token") -> Canary:
    reference: dict[str, Any] = {
        "length": None if tokens is None else len(tokens),
        "tokens": tokens or [],
        "text": None if tokens is None else "".join(tokens),
        "unit": unit,
    }
    return cast(Canary, {"id": cid, "reference": reference})


def _report(**canaries: list[str] | None) -> Report:
    return cast(Report, {"canaries": [_canary(cid, t) for cid, t in canaries.items()]})


@given(a=WORDS, b=WORDS)
def test_the_first_divergence_is_the_first_position_the_two_references_differ(a: list[str], b: list[str]) -> None:
    row = check("c", "B", "A", _canary("c", a), _canary("c", b))
    at = row["first_divergence"]
    if a == b:
        assert (row["verdict"], at, row["token"], row["reference_token"]) == ("same", None, None, None)
        return
    assert row["verdict"] == "diverged" and at is not None
    assert a[:at] == b[:at] and (at == min(len(a), len(b)) or a[at] != b[at])
    assert row["token"] == (a[at] if at < len(a) else None) and row["reference_token"] == (
        b[at] if at < len(b) else None
    )


def test_text_identity_on_either_side_compares_characters() -> None:
    row = check("c", "B", "A", _canary("c", [" the", " man"], unit="character"), _canary("c", [" the", " sea"]))
    assert (row["verdict"], row["unit"], row["first_divergence"], row["token"], row["reference_token"]) == (
        "diverged",
        "character",
        5,
        "m",
        "s",
    )


def test_runs_are_checked_against_their_base_and_the_breaks_are_named() -> None:
    reports = [
        ("colocated", _report(short=[" a", " b"], long=[" x"])),
        ("pd", _report(short=[" a", " c"], long=[" x"])),
        ("failed", _report(short=None, long=[" x"])),
    ]
    rows = reference_checks(reports, {"colocated": "colocated", "pd": "colocated", "failed": "colocated"})
    assert [(r["run"], r["canary"], r["verdict"], r["first_divergence"]) for r in rows] == [
        ("pd", "long", "same", None),
        ("pd", "short", "diverged", 1),
        ("failed", "long", "same", None),
        ("failed", "short", "no reference", None),
    ]
    assert broke(rows) == ["pd's reference differs from colocated's: short at token 1"]
    assert reference_checks(reports, {"pd": "missing"}) == []  # a base that did not run: nothing to say
