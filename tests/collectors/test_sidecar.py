"""The canary columns file (``collectors.sidecar``) gives exactly what its JSONL gives, torn, cut or wrong.

Records go through the real collector (``CanaryCollector``: the JSONL line, then the columns), then the run
folder is read with its columns file and by the reference builder from the JSONL alone: frame, matrices,
vocabulary and per-file counts must agree. Then the columns file is torn at random byte counts (a killed
writer), the JSONL gets lines the columns file lacks, a record the layout cannot hold stops the writer,
and a JSONL line changed after the fact makes the reader drop the columns file with a notice. Last, a
writer process killed mid-run leaves a folder whose report equals the report of its JSONL alone.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.canary import CanaryCollector
from collectors.read import sidecar as sidecar_read
from collectors.read.runfolder import load_run
from collectors.sidecar import FILES, INDEX, columns_dir
from loadgen.core.record import CanaryRecord
from tests.collectors.test_fastcolumns_property import MANIFEST, assert_same

ROOT = Path(__file__).resolve().parents[2]
logprob = st.one_of(
    st.floats(min_value=-30, max_value=0),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e7, -1e300, 0.0, -0.0]),
    st.integers(-5, 0),
    st.none(),
)
token = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=3)


@st.composite
def record(draw: Any, i: int) -> CanaryRecord:
    n = draw(st.integers(0, 5))
    k = draw(st.integers(0, 3))
    alternatives = st.lists(st.tuples(token, logprob), min_size=k, max_size=k)
    top = draw(st.one_of(st.none(), st.lists(alternatives, min_size=n, max_size=n)))
    if top and draw(st.integers(0, 9)) == 0:
        top[0] = top[0][:-1] if top[0] else [("x", -1.0)]  # positions of unequal width: the columns stop here
    return CanaryRecord(
        run_id="r",
        canary_id=draw(st.sampled_from(["c0", "c1"])),
        request_id=f"q{i}",
        phase=draw(st.sampled_from(["warmup", "sweep", "sweep"])),
        level=draw(st.sampled_from([0, 1, 4])),
        inflight_at_send=draw(st.integers(0, 8)),
        sent_at=1.7e9 + i,
        status=draw(st.sampled_from(["ok", "ok", "error"])),
        latency_s=draw(st.one_of(st.none(), st.floats(0, 5), st.just(math.inf))),
        token_ids=draw(st.one_of(st.none(), st.lists(st.integers(0, 2**40), min_size=n, max_size=n))),
        tokens=draw(st.one_of(st.none(), st.lists(token, min_size=n, max_size=n))),
        logprobs=draw(st.one_of(st.none(), st.lists(logprob, min_size=n, max_size=n))),
        top_logprobs=top,
        text=draw(st.one_of(st.none(), st.sampled_from(["one", "two"]))),
        request={"prompt": "p", "temperature": 0, "cache_salt": draw(st.sampled_from(["a", "b"]))},
        usage=draw(st.one_of(st.none(), st.just({"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}}))),
        engine_batch_sizes=draw(st.one_of(st.none(), st.lists(st.integers(1, 9), max_size=4))),
        held_at_send=draw(st.one_of(st.none(), st.booleans())),
        answer_id=draw(st.sampled_from([None, f"cmpl-q{i}", f"cmpl-___decode_addr_h:1_{i:032x}"])),
    )


def collect(run_dir: Path, records: list[CanaryRecord], name: str = "canaries.jsonl") -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "manifest.json").write_bytes(orjson.dumps(MANIFEST))
    collector = CanaryCollector(run_dir / name)
    for r in records:
        collector.on_record(r)
    collector.close()
    return run_dir


def covered(run_dir: Path, name: str = "canaries.jsonl") -> int:
    return (columns_dir(run_dir / name) / "index").stat().st_size // INDEX.itemsize


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(st.integers(0, 10**6), min_size=1, max_size=12).flatmap(
        lambda seeds: st.tuples(*(record(i) for i in range(len(seeds))))
    ),
    cuts=st.lists(st.tuples(st.sampled_from(FILES), st.integers(0, 200)), max_size=2),
    tail=st.integers(0, 3),
)
def test_the_columns_file_reads_as_its_jsonl(
    tmp_path_factory: pytest.TempPathFactory, records: Any, cuts: Any, tail: int
) -> None:
    run_dir = collect(tmp_path_factory.mktemp("run"), list(records))
    folder = columns_dir(run_dir / "canaries.jsonl")
    for name, drop in cuts:  # a killed writer: any file cut short by any number of bytes
        path = folder / name
        os.truncate(path, max(0, path.stat().st_size - drop))
    with open(run_dir / "canaries.jsonl", "ab") as fh:  # lines the columns file never saw, a torn one last
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in records[:tail]) + b'{"schema": 1, "ru')
    got, want = load_run(run_dir, workers=1), load_run(run_dir, reference=True)
    assert [f.columns_notice for f in got.files] == [None]
    assert_same(got, want)


def plain(i: int) -> CanaryRecord:
    return CanaryRecord(
        run_id="r",
        canary_id="c0",
        request_id=f"q{i}",
        phase="sweep",
        level=1,
        inflight_at_send=1,
        sent_at=1.7e9 + i,
        status="ok",
        token_ids=[i % 3, 7],
        tokens=[f"t{i % 3}", "x"],
        logprobs=[-0.5, -0.25 * i],
        top_logprobs=[[("a", -0.5), ("b", -1.0)], [("x", -0.25), ("y", -3.0)]],
        text="t x",
    )


def test_the_writer_covers_every_plain_record_and_stops_at_one_it_cannot_hold(tmp_path: Path) -> None:
    odd = plain(5)
    odd.top_logprobs = [[("a", -0.5)], [("x", -0.25), ("y", -3.0)]]
    run_dir = collect(tmp_path / "run", [plain(i) for i in range(5)] + [odd] + [plain(i) for i in range(6, 9)])
    assert covered(run_dir) == 5
    assert_same(load_run(run_dir, workers=1), load_run(run_dir, reference=True))


@pytest.mark.parametrize(
    "edit",
    [
        lambda body: body.replace(b'"q199"', b'"Q199"'),  # the last covered line, same length
        lambda body: body.replace(b'"q0"', b'"Q0"'),  # the first
        lambda body: b"".join(line for k, line in enumerate(body.splitlines(True)) if k != 100),  # one line gone
        lambda body: body.replace(b'"q100"', b'"q100","x":1'),  # one line longer: every later line moves
    ],
)
def test_a_jsonl_changed_after_the_fact_drops_the_columns_file_with_a_notice(tmp_path: Path, edit: Any) -> None:
    run_dir = collect(tmp_path / "run", [plain(i) for i in range(200)])
    path = run_dir / "canaries.jsonl"
    path.write_bytes(edit(path.read_bytes()))
    got, want = load_run(run_dir, workers=1), load_run(run_dir, reference=True)
    (notice,) = [f.columns_notice for f in got.files]
    assert notice is not None and "canaries.columns" in notice and "read from canaries.jsonl" in notice
    from reports.analysis.build import build_report

    assert notice in build_report(got)["run"]["notices"]
    got.files[0].columns_notice = None
    assert_same(got, want)


def test_the_frame_keeps_an_answers_id_only_where_the_engine_renamed_the_request(tmp_path: Path) -> None:
    """``cmpl-<request_id>`` is the engine's echo of the client's id (None in the frame); a router's own id is kept,
    the one way to meet its record in the engine step trace; the same through the columns file and the JSONL."""
    router = f"cmpl-___prefill_addr_h:1___decode_addr_h:2_{'c' * 32}"
    ids = ["cmpl-q0", router, None]
    run_dir = collect(tmp_path / "run", [dataclasses.replace(plain(i), answer_id=a) for i, a in enumerate(ids)])
    for run in (load_run(run_dir, workers=1), load_run(run_dir, reference=True)):
        assert run.canaries.frame["answer_id"].tolist() == [None, router, None]
    assert orjson.loads((run_dir / "canaries.jsonl").read_bytes().splitlines()[0])["answer_id"] == "cmpl-q0"


def test_an_old_folder_without_columns_reads_as_before(tmp_path: Path) -> None:
    run_dir = collect(tmp_path / "run", [plain(i) for i in range(20)])
    shutil.rmtree(columns_dir(run_dir / "canaries.jsonl"))
    assert_same(load_run(run_dir, workers=1), load_run(run_dir, reference=True))


WRITER = """
import sys, time
from pathlib import Path
from collectors.canary import CanaryCollector
from tests.collectors.test_sidecar import plain
collector = CanaryCollector(Path(sys.argv[1]))
i = 0
while True:
    collector.on_record(plain(i))
    i += 1
    if i == 50:
        print("ready", flush=True)
"""


def test_a_writer_killed_mid_run_leaves_the_report_of_its_jsonl(tmp_path: Path) -> None:
    from reports.analysis.build import build_report

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "manifest.json").write_bytes(orjson.dumps(MANIFEST))
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(run_dir / "canaries.jsonl")], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    time.sleep(0.3)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    jsonl_only = tmp_path / "jsonl-only"
    shutil.copytree(run_dir, jsonl_only, ignore=shutil.ignore_patterns("*.columns"))
    assert covered(run_dir) >= 50
    got, want = load_run(run_dir, workers=1), load_run(jsonl_only, workers=1)
    assert_same(got, want)
    assert build_report(got) == build_report(want)


@pytest.mark.parametrize("rows_per_read", [sidecar_read._ROWS_PER_READ, 64, 7])
def test_a_head_the_columns_cannot_hold_ends_the_coverage_there(
    tmp_path: Path, rows_per_read: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record no column can hold (a canary id that is a number, in its JSONL line and its columns row alike):
    rows from there come from the JSONL, which skips that record, at the width of their own records (the later
    ones are longer); the same whether the rows are read in one chunk or in many (the change then falls inside
    one)."""
    monkeypatch.setattr(sidecar_read, "_ROWS_PER_READ", rows_per_read)
    longer = [plain(i) for i in range(150, 300)]
    for r in longer:
        assert r.token_ids is not None and r.tokens is not None and r.logprobs is not None
        r.token_ids, r.tokens, r.logprobs = [*r.token_ids, 9], [*r.tokens, "y"], [*r.logprobs, -1.0]
        r.top_logprobs = [*(r.top_logprobs or []), [("y", -1.0), ("z", -2.0)]]
    run_dir = collect(tmp_path / "run", [plain(i) for i in range(150)] + longer)
    for path in (columns_dir(run_dir / "canaries.jsonl") / "head", run_dir / "canaries.jsonl"):
        body = path.read_bytes()
        at = body.index(b'"request_id":"q100"')
        start = body.rindex(b'"canary_id":"c0"', 0, at)
        path.write_bytes(body[:start] + b'"canary_id":1234' + body[start + 16 :])  # as long: no line moves
    got, want = load_run(run_dir, workers=1), load_run(run_dir, reference=True)
    assert [f.columns_notice for f in got.files] == [None]
    assert_same(got, want)


def test_a_run_with_more_distinct_usages_than_the_reader_remembers_reads_as_its_jsonl(tmp_path: Path) -> None:
    """The reader remembers 4,096 distinct request and usage values; a run with 4,500 distinct usages, then
    earlier ones again, fills that memory in a chunk that holds both remembered and new values. Forgetting
    then must not lose the remembered ones the chunk still needs (it once raised KeyError there)."""
    records = [
        dataclasses.replace(plain(i), usage={"prompt_tokens": 8, "completion_tokens": 2, "total_tokens": i % 4500})
        for i in range(6000)
    ]
    run_dir = collect(tmp_path / "run", records)
    assert covered(run_dir) == 6000
    got, want = load_run(run_dir, workers=1), load_run(run_dir, reference=True)
    assert [f.columns_notice for f in got.files] == [None]
    assert_same(got, want)
