"""Incremental text: stop strings across token boundaries, held-back text, split UTF-8."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loadgen.engine.detok import TextState


def _run(pieces: list[bytes], stops: tuple[str, ...]) -> tuple[str, str | None]:
    state = TextState(stops)
    out = ""
    for p in pieces:
        out += state.push(p)
        if state.stopped_by is not None:
            return out, state.stopped_by
    return out + state.finish(), None


def test_stop_string_split_across_tokens_is_cut_and_never_shown() -> None:
    state = TextState(("END",))
    shown = [state.push(b" the E"), state.push(b"N"), state.push(b"D more")]
    assert "".join(shown) == " the " and state.stopped_by == "END"
    assert all("E" not in s for s in shown)


def test_utf8_split_over_tokens_decodes_whole() -> None:
    text, stop = _run([b"caf", b"\xc3", b"\xa9!"], ())
    assert text == "café!" and stop is None


@given(st.text(max_size=60), st.integers(1, 7))
def test_without_stops_the_deltas_rebuild_the_text(text: str, size: int) -> None:
    data = text.encode()
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    assert _run(pieces, ())[0] == text


@given(st.text(alphabet="abc ", max_size=40), st.text(alphabet="abc", min_size=1, max_size=3))
def test_output_is_the_text_before_the_first_stop(text: str, stop: str) -> None:
    got, stopped = _run([c.encode() for c in text], (stop,))
    cut = text.find(stop)
    assert got == (text if cut < 0 else text[:cut])
    assert stopped == (None if cut < 0 else stop)
