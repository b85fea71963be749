"""The read benchmark's folder is what a run writes: every record field, and the columns file the collector writes.

Why: the benchmark once wrote records that lacked the fields added since it was written, so every chunk of its
columns file took the reader's slow path (a record at a time) and it printed a third less than a real run
folder reads at. No timing is asserted.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import orjson
import pandas as pd  # type: ignore[import-untyped]
from read_speed import write_folder

from collectors.jsonl import LINE_LIMIT
from collectors.read import sidecar as sidecar_read
from collectors.read.runfolder import load_run
from collectors.sidecar import columns_dir
from loadgen.core.record import CanaryRecord


def test_every_record_has_exactly_the_fields_a_collector_writes(tmp_path: Path) -> None:
    write_folder(tmp_path, 30)
    lines = (tmp_path / "canaries.jsonl").read_bytes().splitlines()
    fields = {f.name for f in dataclasses.fields(CanaryRecord)}
    for line in lines:
        raw = orjson.loads(line)
        assert set(raw) == fields
        CanaryRecord.from_dict(raw)


def test_its_columns_file_takes_the_readers_chunk_path_and_reads_as_its_jsonl(tmp_path: Path) -> None:
    fast, slow = tmp_path / "fast", tmp_path / "jsonl"
    fast.mkdir()
    slow.mkdir()
    write_folder(fast, 300)
    write_folder(slow, 300, columns=False)
    path = fast / "canaries.jsonl"
    with ExitStack() as stack, open(path, "rb") as jsonl:
        mapped, why = sidecar_read._prove(stack, columns_dir(path), jsonl, path, LINE_LIMIT)
        assert mapped is not None and mapped.rows == 300 and why is None  # every line written again as it is
        cols = sidecar_read._columns(sidecar_read._heads(mapped, 0, 300))
    assert cols is not None and sidecar_read._all_fit(cols)  # no head sent a record at a time
    a, b = load_run(fast, workers=1).canaries, load_run(slow, workers=1).canaries
    assert a.n == b.n == 300
    pd.testing.assert_frame_equal(a.frame, b.frame)
    for name in ("token_ids", "logprobs", "top_gap"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert (a.vocab[a.token_codes[a.token_codes >= 0]] == b.vocab[b.token_codes[b.token_codes >= 0]]).all()
