"""reports.analysis.client_load: per-level client CPU from samples written and read back through
collectors.client_cpu."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.client_cpu import ClientCpuSample, ClientCpuWriter, client_cpu_path, read_client_cpu
from reports.analysis.client_load import BOUND_SHARE, notices, per_level, section
from reports.render.md import render_markdown
from tests.reports.runkit import partial_report


def write(run_dir: Path, worker: str, rows: list[tuple[float, float, float | None, int | None, str | None]]) -> None:
    writer = ClientCpuWriter(client_cpu_path(run_dir, worker))
    t = 1000.0
    for wall, cpu, wait, level, phase in rows:
        writer.write(ClientCpuSample(worker or "pid1", 1 if not worker else 2, t, t + wall, cpu, level, phase, wait))
        t += wall
    writer.close()


def test_two_processes_the_busiest_decides_and_waiting_counts(tmp_path: Path) -> None:
    write(tmp_path, "", [(1.0, 0.2, 0.0, 0, "baseline"), (1.0, 0.5, 0.1, 8, "sweep"), (1.0, 0.9, 0.0, None, None)])
    write(tmp_path, "w1", [(1.0, 0.1, 0.0, 0, "sweep"), (2.0, 1.2, 0.6, 8, "sweep"), (1.0, 0.0, None, 8, "warmup")])
    (tmp_path / "client_cpu-w2.jsonl").write_text('{"worker": "w2", "pid": 3, "t0": 5}\nnot json\n')
    rows = {r["concurrency"]: r for r in per_level(read_client_cpu(tmp_path))}
    assert rows[0]["processes"] == 2 and rows[0]["busiest_share"] == 0.2 and not rows[0]["generator_bound"]
    # level 8: pid1 0.5 cpu + 0.1 wait over 1 s; w1 1.2 cpu + 0.6 wait over 2 s (its warm-up sample left out)
    assert rows[8]["busiest_share"] == 0.6 and rows[8]["busiest_demand"] == 0.9 and rows[8]["generator_bound"]
    [notice] = notices(list(rows.values()))
    assert notice.startswith("Generator-bound at level 8: a load process needed up to 90% of a core")
    assert "add --processes" in notice


def test_the_report_shows_the_levels_in_its_context_lines(tmp_path: Path) -> None:
    write(tmp_path, "", [(1.0, 0.97, 0.0, 4, "sweep")])
    client = section(read_client_cpu(tmp_path))
    report = {
        "run": {"id": "r", "notices": notices(client["levels"]), "labels": {}},
        "input": {"skipped_lines": 0},
        "canaries": [],
        "client_load": client,
    }
    md = render_markdown(partial_report(**report))
    assert "share of one core used" in md and "4: 97% (97%) bound" in md
    assert "> **Notice:** Generator-bound at level 4" in md


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0.01, 5), st.floats(0, 1), st.floats(0, 1), st.sampled_from([0, 1, 16]), st.just("sweep")),
        min_size=1,
        max_size=20,
    )
)
def test_a_level_is_bound_exactly_when_its_demand_passes_the_threshold(rows: list[tuple]) -> None:  # type: ignore[type-arg]
    samples = [
        ClientCpuSample("w", 1, i * 10.0, i * 10.0 + wall, cpu * wall, lv, ph, wait * wall)
        for i, (wall, cpu, wait, lv, ph) in enumerate(rows)
    ]
    for row in per_level(samples):
        mine = [s for s in samples if s.level == row["concurrency"]]
        wall = sum(s.t1 - s.t0 for s in mine)
        demand = sum(s.cpu_s + (s.wait_s or 0) for s in mine) / wall
        assert row["generator_bound"] == (demand > BOUND_SHARE)
        assert row["busiest_share"] <= row["busiest_demand"] + 1e-3
