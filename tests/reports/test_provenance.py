"""Where each canary's KV came from (reports.analysis.provenance): the counter window, the trace rule, the labels,
the asked path's proof, divergence by provenance, and the offload tier check (reports.analysis.offload_check)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pandas as pd  # type: ignore[import-untyped]
from hypothesis import given
from hypothesis import strategies as st

from collectors.read.runfolder import KvSeries
from collectors.read.steps import read_traces
from reports.analysis import offload_check
from reports.analysis.provenance import (
    ProvenanceRows,
    Split,
    asked_path,
    counter_split,
    group,
    labels,
    provenance_rows,
    reason,
    section,
    side_counters,
    trace_split,
)

NAN = float("nan")


def series(t: list[float], computed: list[float], local: list[float], external: list[float]) -> KvSeries:
    n = len(t)
    return KvSeries(*(np.asarray(v, np.float64) for v in (t, computed, local, external, [NAN] * n, [NAN] * n)))


def one(sent: float, ended: float, prompt: float, kv: KvSeries | None) -> tuple[str, float, float, float]:
    s = counter_split(np.array([sent]), np.array([ended]), np.array([prompt]), kv)
    return str(s.evidence[0]), float(s.computed[0]), float(s.local[0]), float(s.external[0])


splits = st.tuples(st.integers(0, 500), st.integers(0, 500), st.integers(0, 500)).filter(lambda p: sum(p) > 0)


@given(own=splits, before=splits, after=splits, idle=st.integers(0, 3))
def test_the_first_move_totalling_the_prompt_is_the_canarys_own_split(
    own: tuple[int, int, int], before: tuple[int, int, int], after: tuple[int, int, int], idle: int
) -> None:
    """Others' tokens before it was sent and after its own move change nothing: its own move is read exactly."""
    steps = [before] + [(0, 0, 0)] * idle + [own, after]
    cum = np.cumsum(np.asarray([(0, 0, 0), *steps], np.float64), axis=0)
    t = np.arange(len(cum), dtype=np.float64)
    kv = series(t.tolist(), *(cum[:, k].tolist() for k in range(3)))
    sent, ended = 1.5, len(cum) - 1.5  # after the others' first move; it ends before the last sample
    assert one(sent, ended, float(sum(own)), kv) == ("counters", *map(float, own))


@given(own=splits, other=splits)
def test_a_first_move_shared_with_another_request_is_shared(
    own: tuple[int, int, int], other: tuple[int, int, int]
) -> None:
    both = np.add(own, other)
    kv = series([0.0, 1.0, 2.0], [0, both[0], both[0]], [0, both[1], both[1]], [0, both[2], both[2]])
    evidence, *tokens = one(0.5, 1.5, float(sum(own)), kv)
    assert evidence == "shared" and all(np.isnan(tokens))


def test_no_sample_around_it_or_counters_that_went_down_say_nothing() -> None:
    kv = series([0.0, 1.0, 2.0], [0, 10, 10], [0, 0, 0], [0, 0, 0])
    assert one(-1.0, 0.5, 10, kv)[0] == "none"  # no sample before it was sent
    assert one(0.5, 2.5, 10, kv)[0] == "none"  # none after it ended
    assert one(0.5, 1.5, 10, None)[0] == "none"  # no counters at all
    restarted = series([0.0, 1.0, 2.0], [50, 0, 10], [0, 0, 0], [0, 0, 0])
    assert one(0.5, 1.5, 10, restarted)[0] == "none"


def test_a_side_of_two_servers_takes_the_one_whose_window_holds_the_canary() -> None:
    moved = series([0.0, 1.0, 2.0], [0, 1, 1], [0, 0, 0], [0, 39, 39])
    still = series([0.0, 1.0, 2.0], [5, 5, 5], [0, 0, 0], [0, 0, 0])
    s = side_counters(np.array([0.5]), np.array([1.5]), np.array([40.0]), [still, moved])
    assert s.evidence[0] == "counters" and (s.computed[0], s.local[0], s.external[0]) == (1, 0, 39)
    twice = side_counters(np.array([0.5]), np.array([1.5]), np.array([40.0]), [moved, moved])
    assert twice.evidence[0] == "shared"


def test_labels_follow_the_sources() -> None:
    s = Split(
        np.array([40.0, 8, 1, 1, NAN, 0, 0]),
        np.array([0.0, 32, 0, 20, NAN, 736, 368]),
        np.array([0.0, 0, 39, 19, NAN, 1, 369]),
        np.array(["counters"] * 4 + ["none"] + ["engine_trace"] * 2, dtype=object),
    )
    assert labels(s, transfer_side=False).tolist() == [
        *("computed", "gpu_prefix", "offload", "offload", "unknown", "offload", "offload")
    ]
    # a decoder takes the tail past its own hit from the prefiller: the larger part names the row
    assert labels(s, transfer_side=True).tolist() == [
        *("computed", "gpu_prefix", "transfer", "gpu_prefix", "unknown", "gpu_prefix", "transfer")
    ]


def test_the_asked_path_and_why_it_was_not_proven() -> None:
    assert asked_path("offload", "hit", pd_run=True) == "offload"
    assert asked_path("keep", None, pd_run=True) == "transfer"
    assert asked_path("keep", "hit", pd_run=False) == "gpu_prefix or offload"
    assert asked_path("keep", "miss", pd_run=False) is None
    assert reason("offload", "computed") == "computed instead"
    assert reason("offload", "gpu_prefix") == "GPU hit instead of offload"
    assert reason("transfer", "computed") == "decoder re-prefilled"


def write_trace(path: Path, rows: list[tuple[float, str, int, int, int, int | None, int | None]]) -> None:
    """One step per row: (t, request id, computed, scheduled, prompt, local, external); local None: the keys absent."""
    with path.open("wb") as fh:
        for i, (t, rid, comp, sched, prompt, local, external) in enumerate(rows):
            line: dict[str, object] = {
                "schema": 1,
                "step": i,
                "t": t,
                "ids": [f"cmpl-{rid}-0"],
                "scheduled": [sched],
                "computed": [comp],
                "prompt": [prompt],
                "source": "embedded",
            }
            if local is not None:
                line |= {"local": [local], "external": [external]}
            fh.write(orjson.dumps(line) + b"\n")


A, B, C = "a" * 32, "b" * 32, "c" * 32


def test_the_trace_reads_each_records_first_row_and_on_pd_each_server_apart(tmp_path: Path) -> None:
    one_engine = tmp_path / "engine_steps-one.jsonl"
    # a: 16 found locally, then decoded (its later rows say 0); b: an older trace without the keys
    write_trace(one_engine, [(1, A, 16, 24, 40, 16, 0), (2, A, 40, 1, 40, 0, 0), (3, B, 0, 40, 40, None, None)])
    table = read_traces([one_engine])
    ids = np.array([A, B, C], dtype=object)
    answer, prefill = trace_split(table, ids, pd_run=False)
    assert answer.evidence.tolist() == ["engine_trace", "none", "none"]
    assert (answer.computed[0], answer.local[0], answer.external[0]) == (24, 16, 0)
    assert prefill.evidence.tolist() == ["none"] * 3
    p, d = tmp_path / "engine_steps-p.jsonl", tmp_path / "engine_steps-d.jsonl"
    write_trace(p, [(1, A, 8, 32, 40, 8, 0)])  # the prefill leg (its first token only): its own hit of 8
    write_trace(d, [(3, A, 39, 1, 40, 0, 39), (4, A, 40, 1, 40, 0, 0)])  # decoded past the first token here
    answer, prefill = trace_split(read_traces([d, p]), ids, pd_run=True)
    assert (answer.local[0], answer.external[0], prefill.local[0], prefill.external[0]) == (0, 39, 8, 0)
    answer, prefill = trace_split(read_traces([p]), ids, pd_run=True)  # only the prefill server traced
    assert answer.evidence[0] == "none" and (prefill.local[0], prefill.external[0]) == (8, 0)


def test_the_trace_comes_first_then_the_counters(tmp_path: Path) -> None:
    path = tmp_path / "engine_steps-x.jsonl"
    write_trace(path, [(1, A, 0, 40, 40, 0, 0)])
    frame = pd.DataFrame(
        {
            "canary_id": ["c", "c"],
            "request_id": [A, B],
            "sent_at": [0.5, 2.5],
            "latency_s": [1.0, 1.0],
            "prompt_tokens": [40.0, 40.0],
            "answer_id": [f"cmpl-{A}-0", None],
        }
    )
    kv = series([0.0, 1.0, 2.0, 3.0, 4.0], [0, 8, 8, 16, 16], [0, 32, 32, 64, 64], [0, 0, 0, 0, 0])
    scenario = {"canaries": [{"id": "c", "expect_cache": "hit"}]}
    rows = provenance_rows(frame, scenario, trace=read_traces([path]), engine_kv=kv)
    assert rows.split.evidence.tolist() == ["engine_trace", "counters"]
    assert rows.label.tolist() == ["computed", "gpu_prefix"]  # the trace's word over the counters' for the first
    assert rows.asked.tolist() == ["gpu_prefix or offload"] * 2


def test_a_record_a_router_renamed_meets_the_trace_through_its_answers_id(tmp_path: Path) -> None:
    """vllm-router sends the engines an id of its own: no step names the record's request_id, its answer's id does;
    an answer id whose key no step names, or no answer id, leaves the record to the next source."""
    router = f"___prefill_addr_127.0.0.1:8100___decode_addr_127.0.0.1:8200_{C}"
    p, d = tmp_path / "engine_steps-p.jsonl", tmp_path / "engine_steps-d.jsonl"
    write_trace(p, [(1, f"cmpl-{router}-0-1a2b3c4d", 8, 32, 40, 8, 0)])
    write_trace(
        d, [(3, f"cmpl-{router}-0-5e6f7a8b", 39, 1, 40, 0, 39), (4, f"cmpl-{router}-0-5e6f7a8b", 40, 1, 40, 0, 0)]
    )
    frame = pd.DataFrame(
        {
            "canary_id": ["c"] * 3,
            "request_id": [A, B, "d" * 32],
            "sent_at": [0.5, 2.5, 4.5],
            "latency_s": [1.0] * 3,
            "prompt_tokens": [40.0] * 3,
            "answer_id": [f"cmpl-{router}", f"cmpl-{'e' * 32}", None],
        }
    )
    rows = provenance_rows(frame, {"canaries": [{"id": "c"}]}, trace=read_traces([p, d]), engine_kv=None, pd_run=True)
    assert rows.split.evidence.tolist() == ["engine_trace", "none", "none"]
    assert (rows.split.external[0], rows.prefill.local[0]) == (39, 8)  # the decoder's hand-over, the prefiller's hit
    assert rows.label.tolist() == ["transfer", "unknown", "unknown"]


@given(
    st.lists(
        st.tuples(st.sampled_from(["computed", "gpu_prefix", "offload", "unknown"]), st.integers(-1, 9)), max_size=30
    )
)
def test_groups_partition_the_completions(rows: list[tuple[str, int]]) -> None:
    label = np.array([r[0] for r in rows], dtype=object)
    fd = np.array([r[1] for r in rows], dtype=np.int64)
    groups = group(label, fd, np.full(len(rows), NAN), referred=True)
    assert sum(g["completions"] for g in groups) == len(rows)
    assert sum(g["diverged"] or 0 for g in groups) == int((fd >= 0).sum())
    for g in groups:
        mine = fd[label == g["provenance"]]
        first = g["first_divergence"]
        assert (first is None) == (not (mine >= 0).any())
        assert first is None or first["min"] == int(mine[mine >= 0].min())


def test_a_record_whose_path_did_not_run_is_flagged_and_left_out_of_that_paths_figures() -> None:
    frame = pd.DataFrame(
        {
            "canary_id": ["c"] * 4,
            "request_id": ["r0", "r1", "r2", "r3"],
            "phase": ["sweep"] * 4,
            "level": [0, 0, 0, 0],
        }
    )
    split = Split(
        np.array([1.0, 40, 8, NAN]),
        np.array([0.0, 0, 32, NAN]),
        np.array([39.0, 0, 0, NAN]),
        np.array(["counters", "counters", "engine_trace", "none"], dtype=object),
    )
    kv = ProvenanceRows(
        labels(split, transfer_side=False), split, Split.unknown(4), np.array(["offload"] * 4, dtype=object), False
    )
    at = np.arange(4, dtype=np.int64)
    block = section(
        kv, at, np.ones(4, bool), np.array([5, -1, -1, -1]), np.array([0.5, 0.0, 0.0, NAN]), referred=True, frame=frame
    )
    assert block is not None
    assert (block["proven"], block["not_proven"], block["unknown"]) == (1, 2, 1)
    assert block["reasons"] == {"GPU hit instead of offload": 1, "computed instead": 1}
    assert [r["request_id"] for r in block["not_proven_records"]] == ["r1", "r2"]
    offload = next(g for g in block["groups"] if g["provenance"] == "offload")
    assert (offload["completions"], offload["diverged"], offload["max_logprob_drift"]) == (1, 1, 0.5)
    assert block["evidence"] == {"counters": 2, "engine_trace": 1, "none": 1}


def test_an_offload_tier_whose_counters_never_moved_is_flagged() -> None:
    flat = KvSeries(*(np.array(v, np.float64) for v in ([0, 1], [0, 9], [0, 0], [0, 0], [7, 7], [0, 0])))
    moved = KvSeries(*(np.array(v, np.float64) for v in ([0, 1], [0, 9], [0, 0], [0, 0], [0, 64], [0, 32])))
    asked = {"kind": "embedded", "kv_offload": {"size_gib": 1.0}}
    check = offload_check.offload_check(asked, {}, [flat])
    assert check == {"asked_by": "manifest", "store_bytes": 0.0, "load_bytes": 0.0, "moved": False}
    assert "never stored anything in it nor loaded anything back" in offload_check.notices(check)[0]
    stated = {"vllm:cache_config_info": {"kv_offloading_size": "4.0"}}
    assert offload_check.offload_check(None, stated, [moved]) == {
        "asked_by": "server",
        "store_bytes": 64.0,
        "load_bytes": 32.0,
        "moved": True,
    }
    assert offload_check.notices(offload_check.offload_check(None, stated, [moved])) == []
    unstated = offload_check.offload_check(None, stated, [])
    assert unstated is not None and unstated["moved"] is None and "unproven" in offload_check.notices(unstated)[0]
    assert (
        offload_check.offload_check(
            {"kind": "embedded"}, {"vllm:cache_config_info": {"kv_offloading_size": "None"}}, [flat]
        )
        is None
    )
