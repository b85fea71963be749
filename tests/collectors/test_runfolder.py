"""The run-folder reader: torn tails, unknown fields and schemas, several files, padded columns."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.canary import BackgroundCollector
from collectors.read.runfolder import load_run, top_gap
from loadgen.core.background_row import FIELDS, NUMERIC, BackgroundRow
from loadgen.core.errors import RunFolderError
from loadgen.core.record import ERROR_KINDS, CanaryRecord

MANIFEST = {"schema": 1, "run_id": "r", "levels": [1, 2], "status": "finished"}


def record(i: int, ids: list[int] | None, **over: Any) -> dict[str, Any]:
    r = CanaryRecord(
        run_id="r",
        canary_id="c",
        request_id=f"q{i}",
        phase="sweep",
        level=1,
        inflight_at_send=i,
        sent_at=100.0 + i,
        status="ok" if ids is not None else "error",
        token_ids=ids,
        tokens=None if ids is None else [f"<{x}>" for x in ids],
        logprobs=None if ids is None else [-0.5] * len(ids),
        top_logprobs=None if ids is None else [[("a", -0.5), ("b", -1.5), ("c", -0.75)] for _ in ids],
    ).to_dict()
    r.update(over)
    return r


def write(run_dir: Path, files: dict[str, bytes], manifest: dict[str, Any] | None = None) -> Path:
    run_dir.mkdir(exist_ok=True)
    (run_dir / "manifest.json").write_bytes(orjson.dumps(MANIFEST if manifest is None else manifest))
    for name, body in files.items():
        (run_dir / name).write_bytes(body)
    return run_dir


def lines(*rows: dict[str, Any]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


def test_reads_columns_from_several_files(tmp_path: Path) -> None:
    run = load_run(
        write(
            tmp_path,
            {
                "canaries.jsonl": lines(record(0, [5, 6, 7]), record(1, None, error_kind="timeout")),
                "canaries-worker-1.jsonl": lines(record(2, [5])),
            },
        )
    )
    cols = run.canaries
    assert cols.n == 3 and [f.name for f in run.files] == ["canaries-worker-1.jsonl", "canaries.jsonl"]
    f = cols.frame.set_index("request_id")
    assert f.loc["q0", "n_ids"] == 3 and f.loc["q1", "n_ids"] == -1 and f.loc["q2", "n_ids"] == 1
    row = int(np.flatnonzero(cols.frame["request_id"] == "q0")[0])
    assert cols.token_ids[row].tolist() == [5, 6, 7]
    assert [cols.vocab[c] for c in cols.token_codes[row]] == ["<5>", "<6>", "<7>"]
    assert cols.top_gap[row].tolist() == [0.25, 0.25, 0.25]
    short = int(np.flatnonzero(cols.frame["request_id"] == "q2")[0])
    assert cols.token_ids[short].tolist() == [5, -1, -1] and math.isnan(cols.logprobs[short, 1])
    assert f.loc["q1", "error_kind"] == "timeout" and f.loc["q1", "status"] == "error"


def test_torn_last_line_is_skipped_and_counted(tmp_path: Path) -> None:
    body = lines(record(0, [1]), record(1, [2]))[:-1] + b"\n" + b'{"schema": 1, "run_id": "r", "tok'
    run = load_run(write(tmp_path, {"canaries.jsonl": body}))
    assert run.canaries.n == 2
    assert (run.files[0].skipped, run.files[0].skipped_lines, run.skipped_lines) == (1, [3], 1)


def test_unknown_extra_fields_are_ignored(tmp_path: Path) -> None:
    run = load_run(write(tmp_path, {"canaries.jsonl": lines(record(0, [1], brand_new_field={"x": 1}))}))
    assert run.canaries.n == 1 and "brand_new_field" not in run.canaries.frame.columns


def test_unknown_schema_is_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path, {"canaries.jsonl": lines(record(0, [1], schema=99))})
    with pytest.raises(RunFolderError, match=r"canaries.jsonl line 1: canary record schema 99 is not supported"):
        load_run(tmp_path)


def test_unknown_manifest_schema_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(RunFolderError, match="not a directory"):
        load_run(tmp_path / "nope")
    with pytest.raises(RunFolderError, match=r"manifest\.json: missing"):
        load_run(tmp_path)
    write(tmp_path, {}, {"schema": 2})
    with pytest.raises(RunFolderError, match="manifest schema 2"):
        load_run(tmp_path)
    write(tmp_path, {}, MANIFEST)
    with pytest.raises(RunFolderError, match=r"no canaries\*.jsonl"):
        load_run(tmp_path)


def test_missing_required_field_names_it(tmp_path: Path) -> None:
    bad = record(0, [1])
    del bad["level"]
    write(tmp_path, {"canaries.jsonl": lines(bad)})
    with pytest.raises(RunFolderError, match=r"\['level'\]"):
        load_run(tmp_path)


def test_background_and_engine_metrics(tmp_path: Path) -> None:
    bg = [{"level": 2, "sent_at": 1.0, "latency_s": 0.3, "status": "ok", "error_kind": None}]
    eng = [{"t": 20.0, "running": 3}, {"t": 10.0, "running": None}, "junk"]
    run = load_run(
        write(
            tmp_path,
            {
                "canaries.jsonl": lines(record(0, [1])),
                "background.jsonl": lines(*bg) + b"{torn",
                "engine_metrics.jsonl": b"".join(orjson.dumps(r) + b"\n" for r in eng),
            },
        )
    )
    assert run.background is not None and run.background["level"].tolist() == [2.0]
    assert run.background_files[0].skipped == 1
    assert run.engine_t is not None and run.engine_t.tolist() == [10.0, 20.0]
    assert run.engine_running is not None and math.isnan(run.engine_running[0]) and run.engine_running[1] == 3


def test_chunking_keeps_rows_aligned(tmp_path: Path) -> None:
    rows = [record(i, list(range(i % 7))) for i in range(9000)]  # crosses the 8192-row chunk
    run = load_run(write(tmp_path, {"canaries.jsonl": lines(*rows)}))
    cols = run.canaries
    assert cols.token_ids.shape == (9000, 6)
    lengths = cols.frame["n_ids"].to_numpy()
    assert lengths.tolist() == [i % 7 for i in range(9000)]
    assert ((cols.token_ids >= 0).sum(axis=1) == lengths).all()


def test_top_gap() -> None:
    assert top_gap([["a", -1.0], ["b", -0.25], ["c", -3.0]]) == 0.75
    assert math.isnan(top_gap([["a", -1.0]])) and math.isnan(top_gap(None))


def test_batch_sizes_become_others_min_median_max_while_reading(tmp_path: Path) -> None:
    rows = [
        record(0, [1], engine_batch_sizes=[5, 7, 6, 9], burst=True, held_at_send=None),
        record(1, [1], engine_batch_sizes=[], held_at_send=False, background_held_at_send=3),
        record(2, [1], engine_batch_sizes=None, held_at_send=True, background_held_at_send=4),
        record(3, [1], engine_batch_sizes=[1, None, 3]),  # a null inside: that value is dropped
    ]
    f = load_run(write(tmp_path, {"canaries.jsonl": lines(*rows)})).canaries.frame
    assert f["batch_others_min"].tolist()[0::3] == [4.0, 0.0]
    assert f["batch_others_median"].tolist()[0::3] == [5.5, 1.0]
    assert f["batch_others_max"].tolist()[0::3] == [8.0, 2.0]
    assert np.isnan(f["batch_others_min"].to_numpy()[1:3]).all()  # empty or null: not measured, never 0
    assert f["burst"].tolist() == [True, False, False, False]
    assert f["held_at_send"].tolist()[1:3] == [False, True] and f["held_at_send"].isna().tolist() == [
        True,
        False,
        False,
        True,
    ]
    assert f["background_held_at_send"].tolist()[1:3] == [3.0, 4.0]


def test_batch_sizes_stay_aligned_across_chunks(tmp_path: Path) -> None:
    rows = [record(i, [1], engine_batch_sizes=list(range(1, i % 5 + 1)) or None) for i in range(9000)]
    f = load_run(write(tmp_path, {"canaries.jsonl": lines(*rows)})).canaries.frame
    k = np.arange(9000) % 5
    expected_max = np.where(k == 0, np.nan, k - 1.0)
    assert np.array_equal(f["batch_others_max"].to_numpy(), expected_max, equal_nan=True)
    assert np.array_equal(f["batch_others_min"].to_numpy(), np.where(k == 0, np.nan, 0.0), equal_nan=True)


def test_records_older_than_the_new_fields_read_as_missing(tmp_path: Path) -> None:
    old = record(0, [1])
    for key in ("burst", "held_at_send", "background_held_at_send", "engine_batch_sizes"):
        del old[key]
    f = load_run(write(tmp_path, {"canaries.jsonl": lines(old)})).canaries.frame
    assert f["burst"].tolist() == [False]
    assert f["held_at_send"].isna().all() and np.isnan(f["background_held_at_send"].to_numpy()).all()
    assert np.isnan(f[["batch_others_min", "batch_others_median", "batch_others_max"]].to_numpy()).all()


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.builds(
            BackgroundRow,
            level=st.none() | st.integers(min_value=0, max_value=512),
            phase=st.sampled_from(["warmup", "baseline", "sweep", "drain"]),
            sent_at=st.floats(min_value=1e9, max_value=2e9),
            latency_s=st.none() | st.floats(min_value=0, max_value=600),
            ttft_s=st.none() | st.floats(min_value=0, max_value=600),
            status=st.sampled_from(["ok", "error"]),
            error_kind=st.none() | st.sampled_from(ERROR_KINDS),
            error_message=st.none() | st.text(max_size=20),
            http_status=st.none() | st.integers(min_value=100, max_value=599),
            shared_prefix=st.booleans(),
            prompt_tokens=st.none() | st.integers(min_value=0, max_value=10_000),
            completion_tokens=st.none() | st.integers(min_value=0, max_value=10_000),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_background_rows_read_back_as_the_collector_wrote_them(rows: list[BackgroundRow]) -> None:
    """The writer (``collectors.canary.BackgroundCollector``) and the reader share ``BackgroundRow``: every field
    comes back, numbers as float64 (NaN where None), the rest as written."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = write(Path(tmp), {"canaries.jsonl": lines(record(0, [5]))})
        col = BackgroundCollector(run_dir / "background.jsonl")
        for row in rows:
            col.on_request(row)
        col.close()
        frame = load_run(run_dir).background
    assert frame is not None and tuple(frame.columns) == FIELDS
    for i, row in enumerate(rows):
        for name in FIELDS:
            want, got = getattr(row, name), frame[name].iloc[i]
            if name in NUMERIC:
                assert (math.isnan(got) and want is None) or got == want
            else:
                assert got == want
