from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loadgen.live import LiveTable, first_divergence, identity_hash, identity_of

seqs = st.lists(st.integers(0, 5), max_size=12)


@given(seqs)
def test_a_completion_never_diverges_from_itself(a: list[int]) -> None:
    assert first_divergence(a, list(a)) is None


@given(seqs, seqs)
def test_first_divergence_is_where_they_differ_or_the_shorter_length(a: list[int], b: list[int]) -> None:
    d = first_divergence(a, b)
    if d is None:
        assert a == b
    else:
        assert d <= min(len(a), len(b))
        assert a[:d] == b[:d]
        assert d == min(len(a), len(b)) or a[d] != b[d]


def test_identity_prefers_ids_then_tokens_then_text() -> None:
    assert identity_of([1, 2], ["a", "b"], "ab") == [1, 2]
    assert identity_of(None, ["a", "b"], "ab") == ["a", "b"]
    assert identity_of(None, None, "ab") == "ab"
    assert identity_hash([1, 2]) != identity_hash(["1", "2"])


def msg(
    phase: str, level: int, ident: list[int] | None, first: int | None = None, status: str = "ok"
) -> dict[str, Any]:
    return {"canary": "c", "phase": phase, "level": level, "status": status,
            "hash": None if ident is None else identity_hash(ident), "identity": ident if phase == "baseline" else None,
            "first_div": first}  # fmt: skip


def test_live_table_counts_and_reference() -> None:
    t = LiveTable()
    t.add(msg("warmup", 0, [9, 9]))
    for ident in ([1, 2, 3], [1, 2, 4], [1, 2, 4]):
        t.add(msg("baseline", 0, ident))
    assert t.choose_references() == {"c": [1, 2, 4]}  # modal
    t.add(msg("sweep", 4, [1, 2, 4]))
    t.add(msg("sweep", 4, [1, 5, 4], first=1))
    t.add(msg("sweep", 4, None, status="error"))
    rows = t.rows()
    assert rows[0] == {"canary": "c", "level": "baseline", "canaries": 3, "errors": 0, "unique": 2,
                       "diverged": "—", "earliest": "—"}  # fmt: skip
    assert rows[1] == {"canary": "c", "level": "4", "canaries": 3, "errors": 1, "unique": 2, "diverged": 1,
                       "earliest": 1}  # fmt: skip


def test_baseline_tie_takes_the_earliest() -> None:
    t = LiveTable()
    t.add(msg("baseline", 0, [7]))
    t.add(msg("baseline", 0, [8]))
    assert t.choose_references() == {"c": [7]}
