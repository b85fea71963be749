"""The re-score check's analysis and gate on records built here (``reports.analysis.rescore``,
``reports.analysis.rescore_gate``): positions against a brute-force count, the total variation's bounds, alone
joined by ids, unmeasured never 0."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.rescore_record import RescoreRecord
from loadgen.core.thresholds import Threshold
from reports.analysis.rescore import positions, rescore_check, total_variation
from reports.analysis.rescore_gate import rescore_outcomes

LPS = st.lists(st.sampled_from([-0.25, -0.5, -1.0, -3.0]), min_size=1, max_size=8)
TOPS = st.lists(st.tuples(st.sampled_from("abcd"), st.floats(-10, 0)), min_size=1, max_size=4)


def record(
    mode: str, rescored: list[float] | None, *, decode: list[float], level: int = 2, **more: Any
) -> RescoreRecord:
    return RescoreRecord(
        run_id="r",
        canary_id="c",
        canary_request_id=more.pop("rid", "q1"),
        request_id="x",
        mode=mode,  # type: ignore[arg-type]
        phase="sweep",
        level=level,
        sent_at=more.pop("sent_at", 1.0),
        status="ok" if rescored is not None else "error",
        prompt_ids=[1, 2],
        output_ids=more.pop("ids", [3] * len(decode)),
        decode_logprobs=decode if mode == "at_level" else None,
        logprobs=rescored,
        **more,
    )


@given(LPS, st.data())
def test_first_mismatch_and_delta_match_a_brute_force_count(decode: list[float], data: st.DataObject) -> None:
    other = data.draw(st.lists(st.sampled_from([-0.25, -0.5, -1.0, -3.0]), min_size=len(decode), max_size=len(decode)))
    first, delta = positions(decode, other)
    unequal = [i for i in range(len(decode)) if decode[i] != other[i]]
    assert first == (unequal[0] if unequal else None)
    assert delta == max(abs(a - b) for a, b in zip(decode, other, strict=True))


@given(TOPS, TOPS)
def test_total_variation_is_a_distance_within_0_and_1(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    tv = total_variation(a, b)
    assert tv is not None and -1e-12 <= tv <= 1 + 1e-12
    assert total_variation(a, a) == 0.0
    assert abs(tv - (total_variation(b, a) or 0.0)) < 1e-12


def test_alone_is_joined_by_ids_and_a_fault_is_unmeasured_never_zero() -> None:
    decode = [-0.25, -0.5]
    at = record("at_level", [-0.25, -0.75], decode=decode)
    faulted = record("at_level", None, decode=decode, rid="q2", ids=[4, 4], error_kind="other_ids")
    alone = record("alone", [-0.25, -0.5], decode=decode)
    section = rescore_check([at, faulted, alone])
    assert section is not None
    (level,) = section["canaries"][0]["levels"]
    assert level["at_level"]["rescored"] == 1 and level["at_level"]["mismatch"]["k"] == 1
    assert level["at_level"]["first_mismatch"] == {"min": 1, "median": 1.0, "max": 1}
    assert level["at_level"]["max_abs_delta"] == 0.25 and level["at_level"]["unmeasured"] == {"other_ids": 1}
    assert level["alone"]["bitwise_equal"] == 1 and level["alone"]["unmeasured"] == {"not_rescored": 1}
    assert any("alone pass did not reach" in n for n in section["notices"])
    assert rescore_check([]) is None


def test_the_gate_fails_an_unmeasured_side_and_judges_the_rate() -> None:
    decode = [-0.25]
    only_faults = rescore_check([record("at_level", None, decode=decode, error_kind="no_prompt_logprobs")])
    gate = [Threshold.parse("max_rescore_mismatch", "0.5@each")]
    report: Any = {"rescore": only_faults}
    outs = rescore_outcomes(report, gate)
    assert [o.passed for o in outs] == [False, False] and "unmeasured" in outs[1].message
    equal = rescore_check([record("at_level", [-0.25], decode=decode), record("alone", [-0.25], decode=decode)])
    passing: Any = {"rescore": equal}
    assert all(o.passed for o in rescore_outcomes(passing, gate))
    nothing: Any = {}
    assert not rescore_outcomes(nothing, gate)[0].passed
