"""The fast reader (``collectors.read.fastcolumns``, ``collectors.read.parallel``) gives exactly the reference columns.

Random run folders, written as JSONL files: records with and without sequences, errors, logprobs and
alternatives that are null, NaN or infinite (written as null, as orjson writes them), beyond
``MAX_ABS_LOGPROB``, bools, strings, ints, alternatives that are not pairs, positions that are not
lists, plus torn, corrupt and non-object lines, lines with one byte changed, repeated lines, lines in
another key order or with spaces, requests that hold the sequence keys too, and records with a value no
column can hold (token ids that are a string, a canary id that is a list: skipped, with the same reason).
The fast reader, in one process and in two, must give the reference builder's frame, matrices,
vocabulary and per-file counts, or the same error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.read.fastcolumns import _TRIAL_RECORDS, FastColumnBuilder
from collectors.read.runfolder import RunData, load_run
from loadgen.core.errors import RunFolderError
from loadgen.core.record import CanaryRecord

MANIFEST = {"schema": 1, "run_id": "r", "levels": [0, 1, 4], "status": "finished"}

number = st.one_of(
    st.floats(min_value=-30, max_value=0),
    st.floats(allow_nan=True, allow_infinity=True),  # NaN and infinities reach the file as null
    st.sampled_from([1e7, -1e300, 0.0, -0.0, 2.5e-8]),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.booleans(),
    st.none(),
    st.just("-0.5"),
)
token = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4)
pair = st.tuples(token, st.floats(min_value=-20, max_value=0)).map(list)
alternative = st.one_of(
    pair,
    pair,
    st.tuples(token, number).map(list),
    st.tuples(token).map(list),  # too short
    st.tuples(token, number, number).map(list),  # three items: the second is still the logprob
    token,
    st.just({"token": "a", "logprob": -0.1}),
)
position = st.one_of(
    st.lists(pair, min_size=2, max_size=2),
    st.lists(pair, min_size=0, max_size=4),
    st.lists(alternative, max_size=3),
    st.none(),
    token,
)


@st.composite
def records(draw: Any, i: int) -> dict[str, Any]:
    n = draw(st.integers(min_value=0, max_value=6))
    ok = draw(st.booleans()) or n > 0
    ids = draw(st.one_of(st.none(), st.lists(st.integers(0, 2**31 + 5), min_size=n, max_size=n)))
    plain_lp = st.lists(st.floats(min_value=-20, max_value=0), min_size=n, max_size=n)
    rec = CanaryRecord(
        run_id="r",
        canary_id=draw(st.sampled_from(["c0", "c1"])),
        request_id=f"q{i}",
        phase=draw(st.sampled_from(["warmup", "baseline", "sweep", "sweep"])),
        level=draw(st.sampled_from([0, 1, 4])),
        inflight_at_send=draw(st.integers(0, 8)),
        sent_at=1.7e9 + draw(st.integers(0, 50)),
        status="ok" if ok else "error",
        latency_s=draw(st.one_of(st.none(), st.floats(0, 5))),
        error_kind=None if ok else draw(st.sampled_from(["timeout", "http_status"])),
        token_ids=ids,
        tokens=draw(st.one_of(st.none(), st.lists(token, min_size=n, max_size=n))),
        logprobs=draw(st.one_of(st.none(), plain_lp, st.lists(number, min_size=n, max_size=n))),
        top_logprobs=None,
        text=draw(st.one_of(st.none(), st.sampled_from(["one", "two", "one two"]))),
        request={"prompt": "p", "temperature": 0, "cache_salt": draw(st.sampled_from(["a", "b"]))},
        engine_batch_sizes=draw(st.one_of(st.none(), st.lists(st.integers(1, 9), max_size=4))),
    ).to_dict()
    plain = st.lists(st.lists(pair, min_size=2, max_size=2), min_size=n, max_size=n)
    rec["top_logprobs"] = draw(st.one_of(st.none(), plain, plain, st.lists(position, max_size=n + 1), token))
    if draw(st.integers(0, 9)) == 0:
        del rec[draw(st.sampled_from(["top_logprobs", "logprobs", "tokens", "text", "usage"]))]
    if draw(st.integers(0, 7)) == 0:  # a value no column can hold: the record is skipped, its line and reason kept
        odd = st.sampled_from(["abc", 7, -1, 2.5, True, None, [1, "a"], [["a"]], {"a": 1}, [-1], [2**63], ["x"]])
        rec[draw(st.sampled_from(["token_ids", "tokens", "canary_id", "level", "inflight_at_send", "text"]))] = draw(
            odd
        )
    if draw(st.integers(0, 9)) == 0:  # the sequence keys inside the request too, in the record's order
        rec["request"].update(token_ids=[1], tokens=["a"], logprobs=2, top_logprobs=[[["a", -1.0]]], text="x")
    return rec


@st.composite
def files(draw: Any) -> list[bytes]:
    lines: list[bytes] = []
    for i in range(draw(st.integers(1, 14))):
        rec = draw(records(i))
        line = orjson.dumps(rec)
        kind = draw(st.integers(0, 19))
        if kind == 0:
            line = line[: draw(st.integers(1, len(line) - 1))]  # corrupt: cut mid-line
        elif kind == 1:
            line = b"[1, 2]"  # JSON, not an object
        elif kind == 2:
            line = b""  # a blank line
        elif kind == 3 and lines:
            line = lines[-1].rstrip(b"\n")  # the same bytes again: a value parsed once, used twice
        elif kind in (4, 5):  # one byte changed, often one that matters to JSON
            at = draw(st.integers(0, len(line) - 1))
            byte = draw(st.sampled_from([b'"', b"\\", b"[", b"]", b",", b"0", b"n", b"{", b"\x01", b" ", b"\xff"]))
            line = line[:at] + byte + line[at + 1 :]
        elif kind == 6:  # hand-edited: other key order, or spaces between tokens
            line = orjson.dumps(dict(reversed(rec.items())))
        elif kind == 7:
            line = json.dumps(rec).encode()
        lines.append(line + b"\n")
    if draw(st.booleans()):
        lines[-1] = lines[-1][: max(1, len(lines[-1]) // 2)]  # a torn tail, without its newline
    return lines


def write(run_dir: Path, bodies: list[list[bytes]]) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_bytes(orjson.dumps(MANIFEST))
    for k, body in enumerate(bodies):
        (run_dir / f"canaries-w{k}.jsonl").write_bytes(b"".join(body))
    return run_dir


def read(run_dir: Path, **kw: Any) -> RunData | str:
    try:
        return load_run(run_dir, **kw)
    except RunFolderError as exc:
        return str(exc)


def assert_same(got: RunData | str, want: RunData | str) -> None:
    if isinstance(want, str) or isinstance(got, str):
        assert got == want
        return
    assert isinstance(got, RunData)
    assert got.files == want.files
    g, w = got.canaries, want.canaries
    pd.testing.assert_frame_equal(g.frame, w.frame, check_exact=True)
    assert g.vocab.tolist() == w.vocab.tolist()
    for name in ("token_ids", "token_codes", "logprobs", "top_gap"):
        a, b = getattr(g, name), getattr(w, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b, equal_nan=True), name


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(files(), min_size=1, max_size=2))
def test_fast_reader_agrees_with_the_reference(tmp_path_factory: pytest.TempPathFactory, bodies: Any) -> None:
    run_dir = write(tmp_path_factory.mktemp("run"), bodies)
    assert_same(read(run_dir, workers=1), read(run_dir, reference=True))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=st.lists(files(), min_size=1, max_size=2))
def test_two_processes_agree_with_the_reference(tmp_path_factory: pytest.TempPathFactory, bodies: Any) -> None:
    run_dir = write(tmp_path_factory.mktemp("run"), bodies)
    assert_same(read(run_dir, workers=2), read(run_dir, reference=True))


def sweep_record(i: int, **sequences: Any) -> dict[str, Any]:
    """The ``i``-th ok sweep record of canary c0 at level 1, with the given sequence fields."""
    return CanaryRecord(
        run_id="r",
        canary_id="c0",
        request_id=f"q{i}",
        phase="sweep",
        level=1,
        inflight_at_send=1,
        sent_at=1.7e9 + i,
        status="ok",
        **sequences,
    ).to_dict()


def test_parallel_read_keeps_line_numbers_and_order_across_ranges(tmp_path: Path) -> None:
    """Many ranges over one file: skipped line numbers stay file-wide, rows keep file order."""
    good = [
        orjson.dumps(
            sweep_record(
                i,
                token_ids=[i % 7, 3],
                tokens=[f"t{i % 5}", "x"],
                logprobs=[-0.5, -0.25],
                top_logprobs=[[("a", -0.5), ("b", -1.0)], [("x", -0.25), ("y", -3.0)]],
            )
        )
        for i in range(400)
    ]
    body = [line + b"\n" if i % 37 else b"{torn\n" for i, line in enumerate(good)]
    run_dir = write(tmp_path / "run", [body])
    many = read(run_dir, workers=3)
    want = read(run_dir, reference=True)
    assert_same(many, want)
    assert isinstance(many, RunData) and many.files[0].skipped_lines == [i + 1 for i in range(0, 400, 37)]


def test_values_that_stop_repeating_are_read_as_the_reference_reads_them(tmp_path: Path) -> None:
    """Past the reader's trial (``_TRIAL_RECORDS``), a field whose values rarely repeated is parsed as it
    comes, one that repeated is still remembered: both give the reference columns, and a value met again
    after the trial is read the same as before it."""
    rng = np.random.default_rng(3)
    lines = []
    for i in range(_TRIAL_RECORDS + 600):
        lp = (-rng.random(4)).tolist()  # never repeats
        rec = sweep_record(
            i,
            token_ids=[i % 3, 7, 8, 9],  # three completions, repeated
            tokens=[f"t{i % 3}", "a", "b", "c"],
            logprobs=lp if i % 500 else [-0.5, -0.25, -0.125, None],  # one value met again after the trial
            top_logprobs=[[("x", v), ("y", v - 1.0)] for v in lp],
        )
        lines.append(orjson.dumps(rec) + b"\n")
    run_dir = write(tmp_path / "run", [lines])
    assert_same(read(run_dir, workers=1), read(run_dir, reference=True))
    builder = FastColumnBuilder()
    builder.add_file(run_dir / "canaries-w0.jsonl")
    assert builder._parsed["logprobs"] is None and builder._parsed["top_logprobs"] is None  # the trial ran
    assert builder._parsed["token_ids"] and builder._parsed["tokens"]
