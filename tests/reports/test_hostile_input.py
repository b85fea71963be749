"""``loadgen report``, ``check`` and ``compare`` on records and ``report.json`` files of the wrong shape.

A run folder or a report travels as an attachment and may be hand-edited: one canary record with token
ids that are a string, a level that is not a count or a canary id that is a list is skipped, and the
report names the file, the line and the field (``collectors.read.recordcheck.record_problem``); a ``report.json``
with ``levels: "x"``, a level without ``concurrency`` or a canary entry that is a list is refused with
one line naming the file and the place (``reports.model.conform``), exit 2. Each case drives the CLI in this
process on a folder made by hand (``tests/reports/runkit``); the property tests put any JSON value in any field
and ask for a report or a one-line error, never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.loadgen.cli.clikit import Ran, loadgen
from tests.reports.runkit import rec, write_run


def records() -> list[dict[str, Any]]:
    return [rec([1, 2], phase="baseline")] + [rec([1, 2], level=1) for _ in range(6)] + [rec([1, 3], level=1)]


def one_line_error(out: Ran, *says: str) -> None:
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    for s in says:
        assert s in out.stderr, out.stderr


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("token_ids", "abc", 'token_ids is "abc", expected null or a list of token ids'),
        ("token_ids", [1, "a"], "token_ids is [1,"),
        ("token_ids", 7, "token_ids is 7"),
        ("tokens", [["a"]], 'tokens is [["a"]], expected null or a list of strings'),
        ("canary_id", ["c0"], 'canary_id is ["c0"], expected a string'),
        ("level", "x", 'level is "x", expected null or an integer 0 or more'),
        ("text", {"a": 1}, "text is {"),
    ],
)
def test_one_odd_record_is_skipped_and_named(tmp_path: Path, field: str, value: Any, says: str) -> None:
    good = records()
    good[3][field] = value  # line 4 of canaries.jsonl
    run = write_run(tmp_path / "run", good, levels=[1])
    out = loadgen("report", str(run))
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    report = orjson.loads((run / "report.json").read_bytes())
    assert report["input"]["records"] == 7 and report["input"]["skipped_lines"] == 1
    assert list(report["input"]["files"][0]["malformed_lines"]) == ["4"]
    notice = next(n for n in report["run"]["notices"] if n.startswith("canaries.jsonl: 1 record skipped"))
    assert f"line 4: {says}" in notice
    check = loadgen("check", str(run), "--max-unique", "5")
    assert check.returncode == 1 and "1 unreadable line(s) skipped" in check.stdout, check.stdout + check.stderr


def test_many_odd_records_are_counted_and_the_first_named(tmp_path: Path) -> None:
    good = records() + [rec("abc", level=1) for _ in range(5)]  # type: ignore[arg-type]
    run = write_run(tmp_path / "run", good, levels=[1])
    out = loadgen("report", "--quiet", str(run))
    assert out.returncode == 0, out.stderr
    report = orjson.loads((run / "report.json").read_bytes())
    notice = next(n for n in report["run"]["notices"] if n.startswith("canaries.jsonl: 5 records skipped"))
    assert "line 9: token_ids is" in notice and "and 2 more lines (report.json: input.files)" in notice
    assert sorted(report["input"]["files"][0]["malformed_lines"], key=int) == ["9", "10", "11", "12", "13"]


def good_report(tmp_path: Path) -> Path:
    run = write_run(tmp_path / "run", records(), levels=[1])
    assert loadgen("report", "--quiet", str(run)).returncode == 0
    return run / "report.json"


def edited(path: Path, change: Any, name: str = "edited") -> Path:
    report = orjson.loads(path.read_bytes())
    change(report)
    out = path.parent.parent / name / "report.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(report))
    return out


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda r: r["run"].update(levels="x"), "run.levels: 'x', expected a list"),
        (lambda r: r["canaries"][0]["levels"][0].pop("concurrency"), "canaries[0].levels[0].concurrency: required"),
        (lambda r: r["canaries"].__setitem__(0, ["c0"]), "canaries[0]: a list, expected an object (Canary)"),
        (
            lambda r: r["canaries"][0]["overall"].update(
                logprob_drift={**r["canaries"][0]["overall"]["logprob_drift"], "max": "-0.5"}
            ),
            "canaries[0].overall.logprob_drift.max: '-0.5', expected a number",
        ),
        (
            lambda r: r["canaries"][0]["reference"].update(tokens="abc"),
            "canaries[0].reference.tokens: 'abc', expected a list",
        ),
        # the integers 1 and 0 are shown as they are, not as JSON's true and false (1 == True in Python)
        (lambda r: r["canaries"][0].update(verdict=1), "canaries[0].verdict: 1, expected a string"),
        (lambda r: r["canaries"][0].update(verdict=0), "canaries[0].verdict: 0, expected a string"),
        (lambda r: r["canaries"][0].update(verdict=True), "canaries[0].verdict: true, expected a string"),
    ],
)
def test_a_report_json_of_the_wrong_shape_is_one_line(tmp_path: Path, change: Any, says: str) -> None:
    bad = edited(good_report(tmp_path), change)
    one_line_error(
        loadgen("check", str(bad), "--max-unique", "5"), f"{bad}: not the report.json this version reads", says
    )
    one_line_error(loadgen("compare", str(bad), str(tmp_path / "run"), "--out", str(tmp_path / "cmp")), str(bad), says)


json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def places(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a decoded JSON value."""
    out = [at]
    if isinstance(value, dict):
        out += [p for k, v in value.items() for p in places(v, (*at, k))]
    elif isinstance(value, list):
        out += [p for i, v in enumerate(value) for p in places(v, (*at, i))]
    return out


def put(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    *head, last = path
    target = doc
    for k in head:
        target = target[k]
    target[last] = value
    return doc


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return good_report(tmp_path_factory.mktemp("base"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_anywhere_in_a_report_gives_a_result_or_one_line(
    base: Path, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    doc = orjson.loads(base.read_bytes())
    path = data.draw(st.sampled_from(places(doc)[1:]))
    doc = put(doc, path, data.draw(json_value))
    where = tmp_path_factory.mktemp("r") / "report.json"
    where.write_bytes(orjson.dumps(doc))
    done = loadgen("check", str(where), "--max-unique", "5", "--claim-max-rate", "0.5")
    assert done.returncode in (0, 1) or (done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1), done
    done = loadgen("compare", str(base), str(where), "--out", str(where.parent / "cmp"))
    assert done.returncode == 0 or (done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1), done


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(rec([1]))), value=json_value, row=st.integers(0, 7))
def test_any_value_in_any_field_of_a_record_gives_a_report_or_one_line(
    tmp_path_factory: pytest.TempPathFactory, field: str, value: Any, row: int
) -> None:
    good = records()
    good[row][field] = value
    run = write_run(tmp_path_factory.mktemp("run"), good, levels=[1])
    done = loadgen("report", "--quiet", str(run))
    assert done.returncode == 0 or (done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1), done
