"""JsonlWriter: each line handed over at once by default; with flush_s, by the next due write or at close."""

from __future__ import annotations

import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.jsonl import JsonlWriter, read_jsonl


def lines_in(path: Path) -> int:
    return len(read_jsonl(path).rows)


def test_default_writer_hands_each_line_over_at_once(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path / "a.jsonl")
    for i in range(3):
        assert w.write({"i": i})
        assert lines_in(w.path) == i + 1
    w.close()


def test_gathered_lines_reach_the_file_on_the_first_write_after_the_interval(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path / "b.jsonl", flush_s=0.2)
    w.write({"i": 0})  # the first write is due at once
    assert lines_in(w.path) == 1
    w.write({"i": 1})
    w.write({"i": 2})
    assert lines_in(w.path) == 1 and w.written == 1
    time.sleep(0.25)
    w.write({"i": 3})
    assert lines_in(w.path) == 4 and w.written == 4
    w.write({"i": 4})
    w.close()
    assert [r["i"] for r in read_jsonl(w.path).rows] == [0, 1, 2, 3, 4]


def test_failures_are_counted_not_raised_and_lose_no_other_line(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path / "c.jsonl", flush_s=10.0)
    assert w.write({"ok": 1})
    assert not w.write({"bad": object()})
    assert w.write({"ok": 2})
    w.close()
    assert w.failures == 1 and w.written == 2
    assert not w.write({"late": 1})  # after close: counted, not raised
    assert w.failures == 2


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8), max_size=4),
        max_size=40,
    ),
    flush_s=st.sampled_from([0.0, 0.001, 30.0]),
)
def test_every_row_written_is_read_back_in_order(
    tmp_path_factory: object, rows: list[dict[str, object]], flush_s: float
) -> None:
    path = Path(str(tmp_path_factory.mktemp("w"))) / "d.jsonl"  # type: ignore[attr-defined]
    w = JsonlWriter(path, flush_s=flush_s)
    for row in rows:
        assert w.write(row)
    w.close()
    assert read_jsonl(path).rows == rows and w.written == len(rows)
