"""The cold-boot reading over hand-made records: first request versus the rest, per boot and across boots."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from loadgen.core.identity import first_divergence
from loadgen.core.record import CanaryRecord
from reports.analysis.coldboot import compared, matrix_table, render_markdown, summarise
from reports.render.compare_cells import run_label

COLD = [5, 9, 9, 1]
WARM = [5, 9, 4, 2]


def rec(boot: int, index: int, ids: list[int] | None, canary: str = "short", **kw: object) -> CanaryRecord:
    ok = ids is not None
    return CanaryRecord(
        run_id="r",
        canary_id=canary,
        request_id=f"{canary}-{boot}-{index}",
        phase="sweep",
        level=0,
        inflight_at_send=0,
        sent_at=1e9 + boot * 100 + index,
        status="ok" if ok else "error",
        error_kind=None if ok else "timeout",
        token_ids=ids,
        text=None if ids is None else " ".join(map(str, ids)),
        boot=boot,
        boot_index=index,
        **kw,  # type: ignore[arg-type]
    )


def study(pattern: list[list[list[int] | None]], canary: str = "short") -> list[CanaryRecord]:
    return [rec(b, i, ids, canary) for b, boot in enumerate(pattern, 1) for i, ids in enumerate(boot, 1)]


def test_first_differs_and_rest_agree_on_every_boot() -> None:
    s = summarise(study([[COLD, WARM, WARM]] * 3), boots=3, requests=3)
    (c,) = s["canaries"]
    assert (c["first_differs_rest_agree"], c["boots_counted"], c["distinct_first"], c["distinct_warm"]) == (3, 3, 1, 1)
    assert [b["completions"] for b in c["boots"]] == [["c1", "c2", "c2"]] * 3
    assert {b["first_divergence"] for b in c["boots"]} == {2}  # COLD and WARM share [5, 9]
    assert c["identity"] == "token_ids" and c["completions"] == {"c1": "5 9 9 1", "c2": "5 9 4 2"}


def test_stable_boots_unstable_rest_and_errors_are_told_apart() -> None:
    other = [7, 7, 7, 7]
    s = summarise(study([[WARM, WARM, WARM], [COLD, WARM, other], [COLD, None, WARM]]), boots=3, requests=3)
    (c,) = s["canaries"]
    b1, b2, b3 = c["boots"]
    assert (b1["first_differs"], b1["rest_agree"], b1["first_differs_rest_agree"]) == (False, True, False)
    assert (b2["first_differs"], b2["rest_agree"], b2["first_differs_rest_agree"]) == (True, False, False)
    assert b3["first_differs_rest_agree"] is None and b3["errors"] == 1 and b3["completions"][1] is None
    assert c["boots_counted"] == 2 and c["boots_with_errors"] == 1 and c["rest_disagree"] == 1
    assert c["first_differs_rest_agree"] == 0 and c["distinct_first"] == 2  # WARM on boot 1, COLD on boot 2


def test_canaries_are_read_separately_and_records_without_a_boot_are_ignored() -> None:
    records = study([[COLD, WARM]] * 2) + study([[WARM, WARM]] * 2, canary="long")
    records.append(
        CanaryRecord(
            run_id="r",
            canary_id="short",
            request_id="x",
            phase="warmup",
            level=0,
            inflight_at_send=0,
            sent_at=1.0,
            status="ok",
            token_ids=[1],
        )
    )
    s = summarise(records, boots=2, requests=2)
    assert [(c["id"], c["first_differs_rest_agree"]) for c in s["canaries"]] == [("short", 2), ("long", 0)]
    assert s["canaries"][0]["distinct_all"] == 2


def test_identity_falls_back_to_text_when_any_completion_lacks_ids() -> None:
    records = study([[COLD, WARM]])
    records[1].token_ids = None
    (c,) = summarise(records, boots=1, requests=2)["canaries"]
    assert c["identity"] == "text" and c["boots"][0]["first_divergence"] == 4  # characters: "5 9 9" vs "5 9 4"


def test_markdown_and_matrix_table_show_the_counts() -> None:
    on = summarise(study([[COLD, WARM, WARM]] * 2), boots=2, requests=3)
    off = summarise(study([[WARM, WARM, WARM]] * 2), boots=2, requests=3)
    md = render_markdown(on)
    assert "| `short` | 2 / 2 | 1 | 1 | 0 |" in md and "| 1 | c1 c2 c2 | yes | yes | 2 | ? ? ? |" in md
    table = matrix_table([("apc-on", on), ("apc-off", off)])
    assert "| apc-on | 2 / 2 | 1 / 1 |" in table and "| apc-off | 0 / 2 | 1 / 1 |" in table


def test_a_summary_written_with_letters_is_compared_with_labels() -> None:
    """A ``coldboot.json`` from before completions were labelled c1, c2, ... (they were A, B, ...) reads the same
    in a comparison as a new one: its sequences never show a letter, which names a run there."""
    new = summarise(study([[COLD, WARM, WARM], [WARM, None, WARM]]), boots=2, requests=3)
    old = summarise(study([[COLD, WARM, WARM], [WARM, None, WARM]]), boots=2, requests=3)
    for b in old["canaries"][0]["boots"]:
        b["completions"] = [None if x is None else {"c1": "A", "c2": "B"}[x] for x in b["completions"]]
    assert compared("r", old) == compared("r", new)
    assert compared("r", new)["canaries"][0]["sequences"] == ["c1 c2 c2", "c2 x c2"]


def test_cached_tokens_are_shown_per_request() -> None:
    records = [
        rec(1, 1, COLD, usage={"prompt_tokens_details": {"cached_tokens": 0}}),
        rec(1, 2, WARM, usage={"prompt_tokens_details": {"cached_tokens": 16}}),
    ]
    (c,) = summarise(records, boots=1, requests=2)["canaries"]
    assert c["boots"][0]["cached_prompt_tokens"] == [0, 16]


ids = st.lists(st.integers(0, 3), min_size=1, max_size=4)


@given(st.lists(st.lists(ids, min_size=2, max_size=4), min_size=1, max_size=4), st.randoms())
def test_record_order_changes_nothing(pattern: list[list[list[int]]], rnd: random.Random) -> None:
    records = study(pattern)  # type: ignore[arg-type]
    shuffled = list(records)
    rnd.shuffle(shuffled)
    before = summarise(records, boots=len(pattern), requests=4)
    after = summarise(shuffled, boots=len(pattern), requests=4)
    # labels follow first appearance in boot order, so they match whatever the file order
    assert before == after


@given(ids)
def test_a_completion_never_diverges_from_itself(seq: list[int]) -> None:
    assert first_divergence(tuple(seq), tuple(seq)) is None
    assert first_divergence(tuple(seq), (*seq, 9)) == len(seq)


@given(st.lists(st.lists(st.one_of(st.none(), ids), min_size=2, max_size=4), min_size=1, max_size=4))
def test_no_completion_label_is_a_run_label(pattern: list[list[list[int] | None]]) -> None:
    """A comparison's cold-boot table names runs A, B, ... and shows each boot's completions beside them: no
    completion may be named as any run could be."""
    summary = summarise(study(pattern), boots=len(pattern), requests=4)
    shown = {word for seq in compared("r", summary)["canaries"][0]["sequences"] for word in seq.split()}
    assert shown and not shown & {run_label(i) for i in range(len(shown) + 30)}
    assert shown <= {"x"} | {f"c{i}" for i in range(1, len(shown) + 1)}
