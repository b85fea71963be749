"""The vLLM step-trace plugin, driven through ``register()`` on a scheduler of vLLM's shapes (``fake_vllm``).

Each test plans the steps the scheduler takes and reads back the lines the real plugin wrote, by the
contract's reader rules (docs/design.md, "The engine step trace")."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.steptrace import ENV
from loadgen.plugins import vllm_steps
from tests.loadgen.plugins.fake_vllm import CachedRequestData, Scheduler, SchedulerOutput, Step, installed


@contextmanager
def traced_vllm(folder: Path | None) -> Iterator[ModuleType]:
    """A fresh fake vLLM, ``LOADGEN_STEP_TRACE`` set to ``folder`` (unset for None), and the plugin registered."""
    env = {ENV: str(folder)} if folder is not None else {}
    with installed() as module, mock.patch.dict(os.environ, env, clear=False):
        if folder is None:
            os.environ.pop(ENV, None)
        vllm_steps.register()
        yield module


def run(
    module: ModuleType, plan: list[Step], requests: Mapping[str, tuple[int, ...]], *, cls: str = "Scheduler"
) -> Any:
    """A scheduler with ``requests`` (id -> prompt length, prefix-cache hit[, connector tokens]) taking ``plan``'s
    steps."""
    scheduler = getattr(module, cls)()
    for rid, spec in requests.items():
        scheduler.add_request(rid, *spec)
    scheduler.plan.extend(plan)
    for _ in plan:
        scheduler.schedule()
    return scheduler


def lines(folder: Path) -> list[dict[str, Any]]:
    files = sorted(folder.glob("engine_steps-vllm-*.jsonl"))
    assert len(files) == 1, files
    return [orjson.loads(line) for line in files[0].read_bytes().splitlines()]


def rows(line: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return list(zip(line["ids"], line["scheduled"], line["computed"], line["prompt"], strict=True))


def test_prefix_cache_hits_chunked_prefill_and_decode_one_line_a_step(tmp_path: Path) -> None:
    plan = [
        Step({"a": 2, "b": 40}),  # a: new, 8 of its 10 prompt tokens cached; b: first chunk of 100
        Step({"a": 1, "b": 40}),  # a decodes beside b's second chunk: a mixed step
        Step({}),  # nothing to schedule: no line
        Step({"a": 1, "b": 20}),  # b's last chunk produces its first output
        Step({"b": 1}),  # decode only
    ]
    with traced_vllm(tmp_path / "trace") as module:
        run(module, plan, {"a": (10, 8), "b": (100, 0)}, cls="AsyncScheduler")
    got = lines(tmp_path / "trace")
    assert [line["step"] for line in got] == [0, 1, 2, 3]
    assert [rows(line) for line in got] == [
        [("a", 2, 8, 10), ("b", 40, 0, 100)],
        [("a", 1, 10, 10), ("b", 40, 40, 100)],
        [("a", 1, 11, 10), ("b", 20, 80, 100)],
        [("b", 1, 100, 100)],
    ]
    assert {line["source"] for line in got} == {"vllm"} and {line["schema"] for line in got} == {1}
    assert all(line["preempted"] == [] for line in got)
    # the contract's rule: the row whose computed + scheduled is prompt + j produced output position j
    assert [line["step"] for line in got for rid, n, done, p in rows(line) if rid == "b" and done + n == p + 0] == [2]


def test_a_preempted_request_is_named_then_computed_again(tmp_path: Path) -> None:
    plan = [
        Step({"a": 6, "b": 4}),
        Step({"a": 1, "b": 1}),
        Step({"a": 1}, preempted={"b"}),  # b loses its 5 computed tokens while this step is scheduled
        Step({"b": 5, "a": 1}),  # b resumed: its prompt and its one output computed again
    ]
    with traced_vllm(tmp_path) as module:
        scheduler = run(module, plan, {"a": (6, 0), "b": (4, 0)})
    got = lines(tmp_path)
    assert [line["preempted"] for line in got] == [[], [], ["b"], []]
    assert rows(got[2]) == [("a", 1, 7, 6)]
    assert rows(got[3]) == [("b", 5, 0, 4), ("a", 1, 8, 6)]
    assert scheduler.requests["b"].num_computed_tokens == 5


def sources(line: dict[str, Any]) -> list[tuple[str, int, int]]:
    return list(zip(line["ids"], line["local"], line["external"], strict=True))


def test_a_requests_first_row_says_what_it_found_locally_and_what_it_loaded(tmp_path: Path) -> None:
    """``prefill_stats`` of a new row: ``a`` found 16 tokens in the prefix cache and loaded 32 more (an offload
    tier), ``b`` a P/D hand-over of 63; every later row, chunks and decodes, is 0."""
    plan = [Step({"a": 2, "c": 40}), Step({"a": 1, "b": 1, "c": 40}), Step({"a": 1, "b": 1, "c": 20})]
    with traced_vllm(tmp_path) as module:
        run(module, plan, {"a": (50, 16, 32), "b": (64, 0, 63), "c": (100, 0, 0)})
    got = lines(tmp_path)
    assert [sources(line) for line in got] == [
        [("a", 16, 32), ("c", 0, 0)],
        [("b", 0, 63), ("a", 0, 0), ("c", 0, 0)],
        [("a", 0, 0), ("b", 0, 0), ("c", 0, 0)],
    ]
    assert rows(got[1])[0] == ("b", 1, 63, 64)  # of its computed 63, all external


def test_a_resumed_request_after_preemption_tells_no_sources_again(tmp_path: Path) -> None:
    plan = [Step({"a": 2}), Step({}, preempted={"a"}), Step({"a": 10})]
    with traced_vllm(tmp_path) as module:
        run(module, plan, {"a": (10, 8)})
    assert [sources(line) for line in lines(tmp_path)] == [[("a", 8, 0)], [], [("a", 0, 0)]]


def test_a_vllm_without_prefill_stats_writes_no_sources(tmp_path: Path) -> None:
    """Unknown, not 0: the reader tells a missing key from a zero."""
    with traced_vllm(tmp_path) as module:
        run(module, [Step({"a": 2}), Step({"a": 1})], {"a": (10, 8)}, cls="OldScheduler")
    got = lines(tmp_path)
    assert [rows(line) for line in got] == [[("a", 2, 8, 10)], [("a", 1, 10, 10)]]
    assert all(line["local"] is None and line["external"] is None for line in got)


def test_a_step_that_only_preempts_is_a_line_without_rows(tmp_path: Path) -> None:
    with traced_vllm(tmp_path) as module:
        run(module, [Step({"a": 3}), Step({}, preempted={"a"}), Step({})], {"a": (3, 0)})
    assert [(rows(line), line["preempted"]) for line in lines(tmp_path)] == [([("a", 3, 0, 3)], []), ([], ["a"])]


def test_unset_it_wraps_nothing_and_writes_nothing(tmp_path: Path) -> None:
    with traced_vllm(None) as module:
        run(module, [Step({"a": 3})], {"a": (3, 0)})
        assert "schedule" not in module.Scheduler.__dict__  # the class still inherits the original, untouched
    assert list(tmp_path.iterdir()) == []


def test_a_vllm_it_cannot_wrap_starts_untraced_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with mock.patch.dict(os.environ, {ENV: str(tmp_path)}), caplog.at_level(logging.WARNING, "vllm.loadgen_steps"):
        vllm_steps.register()  # no vLLM here at all: the import fails inside register, which returns
    assert [r.levelname for r in caplog.records if r.name == "vllm.loadgen_steps"] == ["WARNING"]
    assert list(tmp_path.iterdir()) == []


def test_register_twice_wraps_once_and_a_process_that_never_schedules_writes_no_file(tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    with traced_vllm(folder) as module:
        wrapped = module.Scheduler.schedule
        vllm_steps.register()
        vllm_steps.register()
        assert module.Scheduler.schedule is wrapped
        assert not hasattr(wrapped.__wrapped__, "__wrapped__")
        assert not folder.exists()  # registered, never scheduled: no folder, no file
        run(module, [Step({"a": 2}), Step({"a": 1})], {"a": (2, 0)})
    assert [rows(line) for line in lines(folder)] == [[("a", 2, 0, 2)], [("a", 1, 2, 2)]]


def test_an_error_inside_the_plugin_turns_it_off_after_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    with traced_vllm(blocker) as module, caplog.at_level(logging.WARNING, logger="vllm.loadgen_steps"):
        scheduler = module.Scheduler()
        scheduler.add_request("a", 4, 0)
        scheduler.plan.extend([Step({"a": 4}), Step({"a": 1})])
        first = scheduler.schedule()
        second = scheduler.schedule()
        trace = getattr(module.Scheduler.schedule, vllm_steps.MARK)
    assert first.num_scheduled_tokens == {"a": 4} and second.num_scheduled_tokens == {"a": 1}  # steps ran
    assert scheduler.requests["a"].num_computed_tokens == 5
    assert not trace.on
    messages = [r.getMessage() for r in caplog.records if r.name == "vllm.loadgen_steps"]
    assert len(messages) == 1 and "off for the rest of this process" in messages[0], messages
    assert blocker.read_text() == ""


def test_an_output_of_another_shape_turns_it_off_and_is_returned_as_it_is(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    odd = SchedulerOutput([], CachedRequestData(["a"], set(), [], [], []), {"a": 1}, 1, set())  # no computed count
    trace = vllm_steps.StepTrace(tmp_path)
    schedule = vllm_steps.traced(lambda self: odd, trace)
    with caplog.at_level(logging.WARNING, logger="vllm.loadgen_steps"):
        assert schedule(Scheduler()) is odd
        assert schedule(Scheduler()) is odd
    assert not trace.on
    messages = [r.getMessage() for r in caplog.records if r.name == "vllm.loadgen_steps"]
    assert len(messages) == 1 and "ValueError" in messages[0], messages
    assert list(tmp_path.iterdir()) == []


def test_an_error_of_vllms_own_schedule_is_vllms(tmp_path: Path) -> None:
    with traced_vllm(tmp_path) as module:
        scheduler = module.Scheduler()  # "a" never added: vLLM's own schedule raises, as it would
        scheduler.plan.append(Step({"a": 1}))
        with pytest.raises(KeyError):
            scheduler.schedule()
        assert getattr(module.Scheduler.schedule, vllm_steps.MARK).on


@st.composite
def plans(draw: st.DrawFn) -> tuple[dict[str, tuple[int, int]], list[Step]]:
    """Requests (prompt, prefix-cache hit) and steps that schedule, skip and preempt them at random."""
    n = draw(st.integers(1, 6))
    reqs = {
        f"r{i}": (p, draw(st.integers(0, p - 1)))
        for i, p in enumerate(draw(st.lists(st.integers(1, 64), min_size=n, max_size=n)))
    }
    steps: list[Step] = []
    running: set[str] = set()
    for _ in range(draw(st.integers(1, 12))):
        chosen = draw(st.lists(st.sampled_from(sorted(reqs)), unique=True, max_size=n))
        preempt = draw(st.sets(st.sampled_from(sorted(running)), max_size=2)) if running else set()
        tokens = {rid: draw(st.integers(1, 32)) for rid in chosen if rid not in preempt}
        running = (running | set(tokens)) - preempt
        steps.append(Step(tokens, preempt))
    return reqs, steps


@settings(max_examples=60, deadline=None)
@given(plans())
def test_every_scheduled_request_is_one_row_with_its_tokens(
    plan: tuple[dict[str, tuple[int, int]], list[Step]],
) -> None:
    reqs, steps = plan
    kept = [s for s in steps if s.tokens or s.preempted]  # a step that did neither writes no line
    with tempfile.TemporaryDirectory() as tmp, traced_vllm(Path(tmp)) as module:
        run(module, steps, reqs)
        assert len(list(Path(tmp).iterdir())) == (1 if kept else 0)
        written = lines(Path(tmp)) if kept else []
    assert len(written) == len(kept)
    done = {rid: 0 for rid in reqs}
    started: set[str] = set()
    for step, line in zip(kept, written, strict=True):
        assert sorted(line["ids"]) == sorted(step.tokens) and len(set(line["ids"])) == len(line["ids"])
        assert dict(zip(line["ids"], line["scheduled"], strict=True)) == step.tokens
        assert sorted(line["preempted"]) == sorted(step.preempted)
        for rid in step.preempted:
            done[rid] = 0
        for (rid, n, computed, prompt), (_, local, external) in zip(rows(line), sources(line), strict=True):
            first = rid not in started
            if first:
                started.add(rid)
                done[rid] = reqs[rid][1]  # the prefix-cache hit counts as computed
            assert (computed, prompt) == (done[rid], reqs[rid][0])
            assert (local, external) == ((reqs[rid][1], 0) if first else (0, 0))  # the hit, on the first row only
            done[rid] += n


def test_vllms_loader_finds_the_entry_point_and_calling_it_enables_the_trace(tmp_path: Path) -> None:
    """As ``vllm.plugins.load_plugins_by_group`` does: the group's entry points, ``.load()``, then a call."""
    found = {ep.name: ep for ep in entry_points(group="vllm.general_plugins")}
    assert vllm_steps.ENTRY_POINT in found, "pip install -e . --no-deps after editing pyproject's entry points"
    func = found[vllm_steps.ENTRY_POINT].load()
    assert func is vllm_steps.register
    with installed() as module, mock.patch.dict(os.environ, {ENV: str(tmp_path)}):
        func()
        run(module, [Step({"x": 5})], {"x": (5, 1)})
    assert [rows(line) for line in lines(tmp_path)] == [[("x", 5, 1, 5)]]
