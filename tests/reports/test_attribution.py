"""Engine steps joined to canary records, and the attribution of drift to what the steps held.

The traces here are built as an engine would write them (``loadgen.core.steptrace.StepWriter``) and read
back through ``collectors.read.steps``: the reader, the join and the attribution together.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.steps import read_traces
from reports.analysis.attribution import Compared, attribute
from reports.analysis.steps import (
    DECODE_ONLY,
    MIXED,
    PREFILL_ONLY,
    join,
    others_per_record,
    step_shapes,
    trace_join,
)
from tests.reports.tracekit import Engine, ids_of


def test_each_output_position_is_joined_to_the_step_that_computed_it(tmp_path: Path) -> None:
    a, b, bg = ids_of(3)
    eng = Engine(tmp_path / "engine_steps-embedded-h-1.jsonl")
    eng.step([(a, 0, 8, 8)])  # a's prefill: position 0 (prefill-only)
    eng.step([(a, 8, 1, 8), (bg, 0, 20, 20)])  # a's position 1, beside a prefill: mixed
    eng.step([(a, 9, 1, 8), (bg, 20, 1, 20), (b, 16, 4, 20)])  # b's prompt hit 16 cached tokens: mixed
    eng.step([(a, 10, 1, 8), (b, 20, 1, 20)])  # decode-only
    eng.writer.close()
    table = read_traces([eng.writer.path])
    shapes = step_shapes(table)
    assert shapes.kind.tolist() == [PREFILL_ONLY, MIXED, MIXED, DECODE_ONLY]
    assert shapes.requests.tolist() == [1, 2, 3, 2] and shapes.tokens.tolist() == [8, 21, 6, 2]
    rs = join(table, np.asarray([a, b, "f" * 32], dtype=object), width=5)
    assert rs.records.tolist() == [0, 1]
    assert rs.step.tolist() == [[0, 1, 2, 3, -1], [2, 3, -1, -1, -1]]
    assert rs.prefill.tolist() == [[True, False, False, False, False], [True, False, False, False, False]]
    assert rs.cache_hit.tolist() == [False, True] and rs.chunks.tolist() == [1, 1]
    lo, med, hi = others_per_record(rs, shapes)
    assert lo.tolist() == [0, 1] and hi.tolist() == [2, 2] and med.tolist() == [1.0, 1.5]


def test_an_n_choice_request_counts_the_load_around_it_not_its_own_choices(tmp_path: Path) -> None:
    """vLLM schedules each of an n > 1 request's choices as a row of its own, all under the request's id: the
    co-residency of its record is the others beside it, so alone it measures 0, whatever n is."""
    a, bg = ids_of(2)
    eng = Engine(tmp_path / "engine_steps-vllm-h-1.jsonl", source="vllm")
    eng.step([(a, 0, 8, 8)] * 3)  # three choices' prefills, alone: position 0
    eng.step([(a, 8, 1, 8)] * 3)  # alone: position 1
    eng.step([(a, 9, 1, 8)] * 3 + [(bg, 0, 20, 20)])  # beside one background prefill: position 2
    eng.writer.close()
    table = read_traces([eng.writer.path])
    shapes = step_shapes(table)
    assert shapes.requests.tolist() == [3, 3, 4]
    rs = join(table, np.asarray([a, a, a], dtype=object), width=3)  # one record per choice, one request id
    assert rs.records.tolist() == [0] and rs.rows.tolist() == [0, 0, 0]
    assert rs.own.tolist() == [[3, 3, 3]]
    lo, med, hi = others_per_record(rs, shapes)
    assert lo.tolist() == [0] and hi.tolist() == [1] and med.tolist() == [0.0]
    trace = trace_join(table, np.asarray([a, a, a], dtype=object), width=3)
    assert [v.tolist() for v in trace.others(3)] == [[0.0] * 3, [0.0] * 3, [1.0] * 3]


def test_a_chunked_and_preempted_prompt_counts_its_chunks_and_the_last_computation_wins(tmp_path: Path) -> None:
    (a,) = ids_of(1)
    eng = Engine(tmp_path / "t.jsonl")
    eng.step([(a, 0, 10, 24)])  # chunk 1 of 2
    eng.step([(a, 10, 14, 24)])  # chunk 2: position 0
    eng.step([(a, 24, 1, 24)], preempted=(a,))  # position 1, then preempted
    eng.step([(a, 0, 26, 24)])  # recomputed with its outputs: computes position 2
    eng.writer.close()
    table = read_traces([eng.writer.path])
    rs = join(table, np.asarray([a], dtype=object), width=4)
    assert rs.step.tolist() == [[1, 2, 3, -1]]
    assert rs.chunks.tolist() == [3] and rs.preempted.tolist() == [True]


def test_malformed_and_torn_lines_are_skipped_and_described(tmp_path: Path) -> None:
    path = tmp_path / "engine_steps-vllm-h-2.jsonl"
    good = b'{"step":0,"t":1.0,"ids":["x"],"scheduled":[1],"computed":[0],"prompt":[1],"schema":1,"source":"vllm"}\n'
    path.write_bytes(
        good
        + b'{"step":1,"t":2.0,"ids":["x","y"],"scheduled":[1],"computed":[0,0],"prompt":[1,1],"schema":1}\n'
        + b'{"step":2,"t":"soon","ids":[],"scheduled":[],"computed":[],"prompt":[],"schema":1}\n'
        + b'{"step":3,"t":3.0,"ids":["x"],"scheduled":[-1],"computed":[0],"prompt":[1],"schema":1}\n'
        + b'{"step":4,"t":4.0,"ids":[],"scheduled":[],"computed":[],"prompt":[],"schema":9}\n'
        + b'{"step":5,"t":5.0,"ids":["x"],"sched'
    )
    table = read_traces([path])
    (f,) = table.files
    assert f.steps == 1 and f.skipped == 5 and f.source == "vllm"
    assert f.malformed == {
        2: "'scheduled' is not a list of 2 entries",
        3: "'t' is not a finite number",
        4: "'scheduled' holds something other than non-negative integers",
        5: "schema 9 (expected 1)",
    }


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[str], list[list[tuple[str, int, int, int]]]]:
    """Requests with random prompts, scheduled in random steps with chunked prefills and decodes; some
    background requests whose ids are not records."""
    n = draw(st.integers(1, 6))
    keys = ids_of(n + 3)
    state = {k: [draw(st.integers(1, 40)), 0, draw(st.integers(1, 6))] for k in keys}  # prompt, computed, outputs
    steps: list[list[tuple[str, int, int, int]]] = []
    while any(c < p + o - 1 for p, c, o in state.values()) and len(steps) < 60:
        live = [k for k, (p, c, o) in state.items() if c < p + o - 1]
        chosen = draw(st.lists(st.sampled_from(live), min_size=1, unique=True))
        rows = []
        for k in chosen:
            p, c, _ = state[k]
            s = draw(st.integers(1, p - c)) if c < p else 1
            rows.append((k, c, s, p))
            state[k][1] = c + s
        steps.append(rows)
    return keys[:n], steps


@settings(max_examples=60, deadline=None)
@given(traces())
def test_the_join_never_gives_a_position_a_step_that_did_not_compute_it_for_that_request(
    case: tuple[list[str], list[list[tuple[str, int, int, int]]]],
) -> None:
    records, steps = case
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        eng = Engine(Path(tmp) / "t.jsonl")
        for rows in steps:
            eng.step(rows)
        eng.writer.close()
        table = read_traces([eng.writer.path])
    width = 8
    rs = join(table, np.asarray(records, dtype=object), width)
    for local, rec in enumerate(rs.records.tolist()):
        for j in range(width):
            got = int(rs.step[local, j])
            truth = [i for i, rows in enumerate(steps) for k, c, s, p in rows if k == records[rec] and c + s == p + j]
            assert got == (truth[-1] if truth else -1)


def test_attribution_names_the_step_kind_when_only_mixed_steps_moved_the_logprobs(tmp_path: Path) -> None:
    """Known truth: 8 records decode 6 positions each; records 0-3 meet a background prefill in the step of
    position 3 (a mixed step) and drift there; records 4-7 decode beside other decodes only and never drift."""
    ids = ids_of(9)
    records, bg = ids[:8], ids[8]
    eng = Engine(tmp_path / "t.jsonl")
    for r, key in enumerate(records):
        eng.step([(key, 0, 10, 10)])
        for j in range(1, 6):
            rows = [(key, 9 + j, 1, 10)]
            if r < 4 and j == 3:
                rows.append((bg, 0, 30, 30))
            else:
                rows.append((bg, 30 + j, 1, 30))
            eng.step(rows)
    eng.writer.close()
    table = read_traces([eng.writer.path])
    shapes = step_shapes(table)
    rid = np.asarray(records, dtype=object)
    rs = join(table, rid, width=6)
    c = Compared(
        rows=np.arange(8),
        request_id=rid,
        level=np.full(8, 4),
        first_drift=np.asarray([3, 3, 3, 3, -1, -1, -1, -1]),
        first_flip=np.asarray([5, -1, -1, -1, -1, -1, -1, -1]),
        compared=np.asarray([5, 6, 6, 6, 6, 6, 6, 6]),
    )
    block = attribute(c, rs, shapes, n_rows=8, source="embedded")
    assert block["joined"] == 8 and block["drifted"] == 4
    kind = next(f for f in block["factors"] if f["factor"] == "step kind")
    by_value = {r["value"]: (r["positions"], r["drifts"]) for r in kind["rows"]}
    assert by_value == {"decode beside prefills": (4, 4), "decode-only": (4 * 2 + 4 * 5, 0), "prefill-only": (8, 0)}
    assert kind["separates"]
    assert block["sentence"].startswith(
        "Drift followed the step kind: all 4 first drifts were at positions computed in steps that mixed its decode "
        "with others' prefills"
    )
    first = block["drifts"][0]
    assert first["first_drift"] == 3 and first["first_flip"] == 5
    assert first["drift_step"] == {"row": "decode", "kind": "mixed", "requests": 2, "tokens": 31}
    assert first["flip_step"] == {"row": "decode", "kind": "decode-only", "requests": 2, "tokens": 2}


def test_attribution_says_when_no_factor_separates(tmp_path: Path) -> None:
    ids = ids_of(5)
    records, bg = ids[:4], ids[4]
    eng = Engine(tmp_path / "t.jsonl")
    for key in records:
        eng.step([(key, 0, 4, 4)])
        for j in range(1, 4):
            eng.step([(key, 3 + j, 1, 4), (bg, 0 if j == 1 else 99, 1, 1)])  # mixed at position 1 only
    eng.writer.close()
    table = read_traces([eng.writer.path])
    rid = np.asarray(records, dtype=object)
    c = Compared(np.arange(4), rid, np.full(4, 1), np.asarray([1, 2, -1, 2]), np.full(4, -1), np.full(4, 4))
    block = attribute(c, join(table, rid, 4), step_shapes(table), n_rows=4, source="embedded")
    assert block["drifted"] == 3
    assert block["sentence"].startswith("No single factor separates drifted from undrifted positions; by step kind:")
    assert not any(f["separates"] for f in block["factors"])
