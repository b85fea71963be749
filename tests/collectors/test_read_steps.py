"""The step-trace reader (collectors/read/steps.py) and the optional ``local``/``external`` lists: a trace from before
them still reads, with every row's sources unknown; a line whose lists are wrong is skipped and described."""

from __future__ import annotations

from pathlib import Path

import orjson

from collectors.read.steps import UNKNOWN, read_traces
from loadgen.core.steptrace import StepRecord, StepWriter

KEY_A, KEY_B = "a" * 32, "b" * 32


def test_sources_are_read_where_told_and_unknown_where_not(tmp_path: Path) -> None:
    path = tmp_path / "engine_steps-vllm-h-1.jsonl"
    writer = StepWriter(path)
    ids = [f"cmpl-{KEY_A}-0", f"cmpl-{KEY_B}-0"]
    writer.write(StepRecord(0, 1.0, ids, [1, 48], [64, 32], [64, 80], "vllm", local=[0, 16], external=[0, 16]))
    writer.write(StepRecord(1, 2.0, ids, [1, 1], [65, 80], [64, 80], "vllm"))  # a writer that tells none: null
    writer.close()
    old = {"step": 2, "t": 3.0, "ids": ids[:1], "scheduled": [1], "computed": [66], "prompt": [64], "schema": 1}
    bad = {**old, "step": 3, "local": [1, 2]}  # two entries for one row
    with path.open("ab") as fh:
        fh.write(orjson.dumps(old) + b"\n" + orjson.dumps(bad) + b"\n")
    table = read_traces([path])
    assert table.local.tolist() == [0, 16, UNKNOWN, UNKNOWN, UNKNOWN]
    assert table.external.tolist() == [0, 16, UNKNOWN, UNKNOWN, UNKNOWN]
    assert table.computed.tolist() == [64, 32, 65, 80, 66]
    (tf,) = table.files
    assert tf.skipped == 1 and tf.malformed == {4: "'local' is not a list of 1 entries"}
