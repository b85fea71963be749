"""Write ``report.json``, ``report.md`` and ``report.html`` into a run folder; read reports back.

The edge of the reports package: file I/O only, analysis lives in ``reports.analysis.build``. Prints nothing
(``loadgen run`` calls ``write_reports`` at the end of a run). Files are written to a temporary name
and renamed, so a reader never sees half a report, and never through a link a crafted run folder holds
(``loadgen.core.runfiles``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson

from collectors.read.runfolder import load_run
from loadgen.core.errors import RunFolderError
from loadgen.core.manifest import Manifest
from loadgen.core.runfiles import read_regular, write_file
from reports.analysis.build import build_report
from reports.model.conform import problems
from reports.model.report import REPORT_SCHEMA, Report, is_report
from reports.render.html import render_html
from reports.render.md import render_markdown


def write_text(path: Path, text: str | bytes) -> None:
    """Write a file atomically, never through a link a crafted folder holds (``loadgen.core.runfiles``)."""
    try:
        write_file(path, text)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot write ({exc.strerror or exc})") from exc


def report_json(document: Mapping[str, object]) -> bytes:
    """A report, comparison or study summary as the indented JSON its file holds."""
    return orjson.dumps(document, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def write_report_files(report: Report, out_dir: Path, stem: str = "report") -> list[Path]:
    paths = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.html"]
    write_text(paths[0], report_json(report))
    write_text(paths[1], render_markdown(report))
    write_text(paths[2], render_html(report))
    return paths


def write_reports(run_dir: Path, manifest: Manifest | None = None) -> Report:
    """Analyse a run folder and write its three report files into it; returns the report object. ``manifest``:
    the folder's, where the caller has just written it (the run's end), so that it is not read again."""
    report = build_report(load_run(Path(run_dir), manifest=manifest))
    write_report_files(report, Path(run_dir))
    return report


def load_report(source: Path) -> Report:
    """The report for a run folder (rebuilt from its records when it has any) or a ``report.json`` file.

    A file is checked for its schema, then against the typed report (``reports.model.conform``): a value of another
    type or a required key missing is refused naming its place (keys a report from before them lacks are
    ``NotRequired`` in ``reports.model.report``; keys the model does not know are ignored)."""
    source = Path(source)
    if source.is_dir() and any(source.glob("canaries*.jsonl")):
        return build_report(load_run(source))
    path = source / "report.json" if source.is_dir() else source
    try:
        raw = orjson.loads(read_regular(path))
    except FileNotFoundError as exc:
        raise RunFolderError(f"{path}: missing (expected a run folder or a report.json)") from exc
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RunFolderError(f"{path}: cannot read a report ({exc})") from exc
    if not is_report(raw):
        raise RunFolderError(f"{path}: not a report.json of schema {REPORT_SCHEMA} with a 'canaries' list")
    found = problems(raw, Report)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise RunFolderError(f"{path}: not the report.json this version reads: {found[0]}{more}")
    return raw
