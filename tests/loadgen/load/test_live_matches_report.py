"""The live table and the report agree: for the same records, the same reference, unique and diverged counts.

Why: the web UI's table (``loadgen.load.live``, fed the summaries the users send) and the report
(``reports.analysis.build`` over the run folder) are two computations of the same figures; both take the
reference by ``loadgen.core.identity.reference_index``. Hypothesis draws small runs with many ties
(three token ids, short completions, some without ids or tokens, some errors): the table is fed as
the coordinator is (baseline, then the references, then the sweep), the records are written in a
shuffled order by the real ``CanaryCollector``, and the report is built from that folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.canary import CanaryCollector
from collectors.read.runfolder import load_run
from loadgen.core.identity import identities
from loadgen.core.record import CanaryRecord
from loadgen.load.live import LiveTable, summarise
from loadgen.load.messages import CanaryDone
from reports.analysis.build import build_report
from reports.model.report import Report
from tests.loadgen.load.test_messages import travelled
from tests.reports.runkit import manifest

LEVELS = (0, 2, 4)
# an answer: ok with token ids (carrying ids, tokens and text, or only tokens and text, or only text), or an error
answers: st.SearchStrategy[tuple[str, list[int], str]] = st.one_of(
    st.tuples(
        st.just("ok"),
        st.lists(st.integers(0, 2), max_size=3),
        st.sampled_from(["ids", "ids", "ids", "ids", "tokens", "text"]),
    ),
    st.tuples(st.just("error"), st.just([]), st.just("ids")),
)
canary_plan = st.fixed_dictionaries(
    {
        "warmup": st.lists(answers, max_size=1),
        "baseline": st.lists(answers, max_size=5),
        "sweep": st.dictionaries(st.sampled_from(LEVELS), st.lists(answers, min_size=1, max_size=5), min_size=1),
    }
)
runs = st.dictionaries(st.sampled_from(["a", "b"]), canary_plan, min_size=1)


def record(n: int, canary: str, phase: str, level: int, answer: tuple[str, list[int], str]) -> CanaryRecord:
    status, ids, carries = answer
    ok = status == "ok"
    return CanaryRecord(
        run_id="run-test",
        canary_id=canary,
        request_id=f"r{n:04d}",
        phase=phase,  # type: ignore[arg-type]
        level=level,
        inflight_at_send=level,
        sent_at=1_700_000_000.0 + n,
        status=status,  # type: ignore[arg-type]
        latency_s=0.1 if ok else None,
        error_kind=None if ok else "http_status",
        request={"prompt": "p", "temperature": 0, "max_tokens": 8},
        token_ids=ids if ok and carries == "ids" else None,
        tokens=[f"t{i}" for i in ids] if ok and carries != "text" else None,
        text=" ".join(f"t{i}" for i in ids) if ok else None,
        finish_reason="length" if ok else None,
    )


def in_send_order(plan: dict[str, dict[str, Any]]) -> list[CanaryRecord]:
    """Warm-up, baseline, then each level, canaries round-robin, as a run sends them."""
    steps: list[tuple[str, str, int, tuple[str, list[int], str]]] = []
    for phase in ("warmup", "baseline"):
        for canary, p in plan.items():
            steps += [(canary, phase, 0, a) for a in p[phase]]
    for level in LEVELS:
        for canary, p in plan.items():
            steps += [(canary, "sweep", level, a) for a in p["sweep"].get(level, [])]
    return [record(n, *step) for n, step in enumerate(steps)]


def live_table(records: list[CanaryRecord]) -> LiveTable:
    """The table as the coordinator builds it: summaries carry first divergences once the references are known."""
    table = LiveTable()
    refs = None
    for r in records:
        if r.phase == "sweep" and refs is None:
            refs = table.choose_references()
        reference = refs.get(r.canary_id) if refs is not None else None
        msg = summarise(
            canary=r.canary_id,
            stage=0,
            phase=r.phase,
            level=r.level,
            status=r.status,
            token_ids=r.token_ids,
            tokens=r.tokens,
            text=r.text,
            reference=reference,
        )
        table.add(CanaryDone.from_msg(travelled("lg_done", msg.to_msg())))  # as it travels: Locust's encoding
    return table


def report_of(records: list[CanaryRecord], order: list[int]) -> Report:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        levels = sorted({r.level for r in records if r.phase == "sweep"})
        (run_dir / "manifest.json").write_bytes(orjson.dumps(manifest(levels)))
        collector = CanaryCollector(run_dir / "canaries.jsonl")
        for i in order:
            collector.on_record(records[i])
        collector.close()
        return build_report(load_run(run_dir))


@settings(max_examples=60, deadline=None)
@given(plan=runs, data=st.data())
def test_the_live_table_and_the_report_agree(plan: dict[str, dict[str, Any]], data: st.DataObject) -> None:
    records = in_send_order(plan)
    order = data.draw(st.permutations(range(len(records))))
    table = live_table(records)
    report = {str(e["id"]): e for e in report_of(records, order)["canaries"]}
    rows = {(str(r["canary"]), str(r["level"])): r for r in table.rows()}
    for canary in plan:
        entry, ref = report[canary], report[canary]["reference"]
        if canary not in table.references:  # no ok baseline completion: the table has no reference
            assert ref["kind"] == "modal"
            assert all(r["diverged"] == "—" for (c, _), r in rows.items() if c == canary)
        else:
            kind = ref["identity"]
            assert ref["kind"] == "baseline"
            assert rows[canary, "baseline"]["identity"] == kind
            assert rows[canary, "baseline"]["unique"] == ref["unique_completions"]
            (chosen,) = [r for r in records if r.request_id == ref["request_id"]]
            assert identities(chosen.token_ids, chosen.tokens, chosen.text)[kind] == tuple(
                table.references[canary][kind]
            )
        for level in entry["levels"]:
            row = rows.get((canary, str(level["concurrency"])))
            if row is None:  # a level the run had, with no canary of this id: the table has no row for it
                assert level["canaries"] == 0
                continue
            assert row["identity"] == ref["identity"]
            assert row["unique"] == level["unique_completions"]
            if canary in table.references:
                assert row["diverged"] == level["diverged"]
