"""The beginning and the end of a run, owned in one place: status, the engine-metrics scraper, the reports.

Why: a run is begun by whoever prepared its folder (``loadgen run`` headless, or the Locust process
itself for each start in the web UI) and must be ended by that same code, once: the scraper stopped
and summarised, the final status settled, the reports written. The load side (Locust's
coordinator) never sets a final status; it records facts (``stages_finished``, counts, workers) and
this module decides the status from them (``settle``): ``interrupted`` when the stages did not all
complete, ``endpoint_failed`` when the run ended with two levels' worth of failures or nearly every
canary failed, ``finished_with_losses`` when records could not be written (the ``process-*.json`` counts, the
scraper's), else ``finished``: the verdict's rule (``reports.analysis.verdict.run_status``). The scraper
lives in the process that owns the run but never in a user process: parsing must not steal time from the
load. When the prepared
scenario names the servers behind the endpoint (``endpoint.servers``: a prefill/decode router), each server
is scraped instead of the endpoint (``collectors.server_metrics``), and their summaries go to the
manifest's ``servers``.

The report writer (``reports.render.writer``: the run-folder reader, pandas, pyarrow, every renderer) is
imported in ``end``, where the reports are written, not at the top: the Locust side imports this module
in every process and worker (a web UI start owns its run), and a process that sends load must not
carry the report stack (a quarter of a second to import, and pandas' memory); only the process that
owns a run loads it, once the run is over. Handing the writer in from each owner instead would only
move that same late import into the Locust side. An engine the run started is its starter's to stop (``loadgen run``
stops it on the way out, after the reports); this module never touches one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.engine_metrics import DEFAULT_INTERVAL_S, MetricsScraper
from collectors.losses import lost_records, read_processes
from collectors.server_metrics import ServerScrapers
from loadgen.core.errors import RunFolderError
from loadgen.core.manifest import (
    MANIFEST,
    EngineMetricsSummary,
    Manifest,
    RunStatus,
    now_iso,
    read_manifest,
    write_changes,
)
from loadgen.core.prepared import PreparedRun
from reports.analysis.verdict import run_status


def settle(manifest: Manifest, failures: dict[str, int], *engine_metrics: EngineMetricsSummary | None) -> RunStatus:
    """The final status from the facts: the load side's (``stages_finished``, canary counts) and the
    write failures counted by every process (``collectors.losses``) and every scraper."""
    lost = bool(lost_records(failures, *engine_metrics) or failures.get("unreadable"))
    return run_status(manifest, PreparedRun.of(manifest).level_quota, lost=lost)


@dataclass
class OwnedRun:
    """A run folder this process began and will end; ``end`` is safe to call once, from any path out."""

    run_dir: Path
    scraper: MetricsScraper | None = None
    status: RunStatus | None = None  # set by ``end``
    headline: list[str] = field(default_factory=list)  # set by ``end``: what to say before any figure
    servers: ServerScrapers | None = None  # the servers behind the endpoint, scraped instead of it
    # sent once the load has ended, before the reports (the alone re-scores: loadgen.load.rescore_alone); its notices
    before_reports: Callable[[Path], list[str]] | None = None

    @classmethod
    def begin(cls, run_dir: Path, manifest: Manifest, *, base_url: str | None, api_key: str | None) -> OwnedRun:
        """Mark the run running and, when there is an endpoint to watch, start scraping its ``/metrics``: the
        endpoint's own, or, when the prepared scenario names the servers behind it (``endpoint.servers``,
        whoever started them), every server's instead (a router does not expose its engines' gauges).
        ``manifest``: the one ``loadgen.runs.prepare.prepare_run`` wrote, handed on, not read back."""
        scraper, servers = None, None
        if base_url is not None:
            prepared = PreparedRun.of(manifest)
            every = prepared.metrics_interval_s or DEFAULT_INTERVAL_S
            if prepared.servers:
                servers = ServerScrapers(prepared.servers, run_dir, api_key=api_key, interval_s=every)
                servers.start()
            else:
                scraper = MetricsScraper(base_url, run_dir, interval_s=every, api_key=api_key)
                scraper.start()
        write_changes(run_dir, manifest, status=RunStatus.RUNNING)
        return cls(run_dir, scraper, servers=servers)

    def end(
        self, outcome: RunStatus | None = None, *, report: bool = True, notices_from_caller: Sequence[str] = ()
    ) -> RunStatus:
        """Stop the scraper, settle the status, write the reports.

        ``outcome`` forces a status (a study that failed); otherwise ``settle`` decides: the run finished
        only if the load side recorded ``stages_finished`` (anything else, a signal, a dead Locust, is
        ``interrupted``), and cleanly only if the endpoint did not fail and nothing was lost.
        ``notices_from_caller`` (a part of the endpoint that died during the run) go into the manifest
        with the end's own, by the same write, before the reports are written."""
        if self.status is not None:
            return self.status
        notices = [*notices_from_caller, *(self.before_reports(self.run_dir) if self.before_reports else [])]
        metrics = None
        if self.scraper is not None:
            self.scraper.close()
            metrics = self.scraper.summary()
            if self.scraper.notice:
                notices.append(self.scraper.notice)
        servers = {}
        if self.servers is not None:
            self.servers.close()
            servers = {"servers": self.servers.facts()}
            notices += self.servers.notices()
        processes = read_processes(self.run_dir)
        notices += processes.notices  # the Locust processes' (the held-level gate's)
        manifest = read_manifest(self.run_dir)
        scraped = [metrics, *(s.get("engine_metrics") for s in servers.get("servers", []))]
        status = outcome or settle(manifest, processes.failures, *scraped)
        unwritten: list[str] = []  # one line per file the end could not write, naming it
        final = {
            "finished": now_iso(),
            "notices": [*manifest.notices, *notices],
            **({"engine_metrics": metrics} if metrics is not None else {}),
            **servers,
        }
        ended = _written(
            unwritten,
            self.run_dir / MANIFEST,
            "the run's end (its manifest still says 'running')",
            write_changes,
            self.run_dir,
            manifest,
            status=status,
            **final,
        )
        if ended is None:
            status = _with_losses(status)
        self.status = status
        if report:
            from reports.render.writer import write_reports  # here, not at the top: the module docstring says why

            try:  # the manifest as this end wrote it; read again only where that write failed
                self.headline = list(write_reports(self.run_dir, ended)["health"]["headline"])
            except (OSError, RunFolderError) as exc:  # reports.render.writer names the file it could not write
                unwritten.append(_unwritten(exc, self.run_dir / "report.json", "the reports"))
                self.status = status = _with_losses(status)
                # what could be written stays: say so in the manifest too, if it still takes a write
                said = [*final["notices"], unwritten[-1]]
                _written(
                    unwritten,
                    self.run_dir / MANIFEST,
                    "the status",
                    write_changes,
                    self.run_dir,
                    ended or manifest,
                    status=status,
                    notices=said,
                )
        elif status == RunStatus.ENDPOINT_FAILED:
            failed = f"{manifest.canary_errors} of {manifest.canaries_reported} canaries failed"
            self.headline = [f"Endpoint failed: {failed} (loadgen report gives the error kinds)."]
        self.headline = [*dict.fromkeys(unwritten), *self.headline]
        return status


def _with_losses(status: RunStatus) -> RunStatus:
    """A clean end whose files could not all be written is not clean: ``finished_with_losses``."""
    return RunStatus.FINISHED_WITH_LOSSES if status == RunStatus.FINISHED else status


def _unwritten(exc: OSError | RunFolderError, path: Path, what: str) -> str:
    why = str(exc) if isinstance(exc, RunFolderError) else f"{path}: cannot write ({exc.strerror or exc})"
    return f"Could not write {what}: {why}; what was written before stays."


def _written(
    unwritten: list[str], path: Path, what: str, write: Callable[..., Manifest], *args: Any, **kwargs: Any
) -> Manifest | None:
    """``write(*args, **kwargs)``, the manifest it wrote; a disk that refuses it (full, a file-size limit,
    read-only) is a line in ``unwritten`` naming ``path``, and None."""
    try:
        return write(*args, **kwargs)
    except OSError as exc:
        unwritten.append(_unwritten(exc, path, what))
        return None
