"""Test helpers: a real run folder, and a canary columns file forged beside its JSONL.

``real_run`` runs ``loadgen run`` on the embedded engine (a story canary with logprobs and two alternatives a
position, a share of its requests answered 503 by the engine's fault plan: ok records and failed ones side by
side). ``forge`` writes a columns file as whoever crafts a run folder would: every row consistent in itself (made
by the real writer, whose own check that a row gives back its line is skipped), its index pointing at the JSONL's
real lines, its values those of the records it is given. ``peak_cli`` runs the ``loadgen`` CLI in a child with its
address space capped and says how much memory it held at most.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from collectors.sidecar import SidecarWriter, columns_dir
from loadgen.core.record import CanaryRecord
from tests.loadgen.cli.clikit import loadgen_run
from tests.loadgen.scenariokit import embedded_scenario, story

AS_LIMIT = 3 << 30  # bytes of address space for a CLI child: a report takes about 1.5 GiB of it, 140 MiB resident


def real_run(out: Path) -> Path:
    """A finished run folder of 8 canary records, some of them failed (HTTP 503) and the rest with tokens."""
    scenario = embedded_scenario(
        "forged",
        story(12),
        engine_args=["--fault-status", "503", "--fault-rate", "0.4", "--fault-skip", "1", "--fault-seed", "3"],
        levels=[0],
        canaries_per_level=6,
    )
    done = loadgen_run(scenario, out, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.run_dir


def records(jsonl: Path) -> tuple[list[CanaryRecord], list[bytes]]:
    lines = jsonl.read_bytes().splitlines(keepends=True)
    return [CanaryRecord.from_dict(orjson.loads(line)) for line in lines], lines


def forge(jsonl: Path, rows: list[CanaryRecord], lines: list[bytes]) -> None:
    """Replace ``jsonl``'s columns file with one whose row ``i`` holds ``rows[i]`` and points at ``lines[i]``."""
    with tempfile.TemporaryDirectory() as tmp:
        fake = Path(tmp) / jsonl.name
        writer = SidecarWriter(fake)
        for row, line in zip(rows, lines, strict=True):
            writer._line_of = lambda *_, line=line: line  # type: ignore[method-assign]  # no self-check
            writer.append(row, line)
        assert writer.live, "the forger stopped: a row the layout cannot hold"
        writer.close()
        shutil.rmtree(columns_dir(jsonl), ignore_errors=True)
        shutil.copytree(columns_dir(fake), columns_dir(jsonl))


def copy_of(run_dir: Path, to: Path, *, columns: bool = True) -> Path:
    shutil.copytree(run_dir, to, ignore=None if columns else shutil.ignore_patterns("*.columns"))
    for name in ("report.json", "report.md", "report.html"):
        (to / name).unlink(missing_ok=True)
    return to


def peak_cli(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """``python -m loadgen ARGS`` under ``AS_LIMIT`` of address space, and its peak resident memory in MiB (read by a
    parent of its own, whose only child it is)."""
    parent = (
        "import resource, subprocess, sys\n"
        f"limit = {AS_LIMIT}\n"
        "done = subprocess.run([sys.executable, '-m', 'loadgen', *sys.argv[1:]], capture_output=True, text=True,\n"
        "    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)), timeout=300)\n"
        "sys.stderr.write(done.stderr)\n"
        "sys.stdout.write(done.stdout + '\\nPEAK %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.exit(done.returncode)\n"
    )
    done = subprocess.run([sys.executable, "-c", parent, *args], capture_output=True, text=True, timeout=400)
    peak = int(done.stdout.rsplit("PEAK ", 1)[1].split()[0]) / 1024
    return done, peak
