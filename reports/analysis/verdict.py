"""The run's verdict in one place: the status it ends with, whether the endpoint failed it, what a completed run is.

Why: the status the run's owner settles (``loadgen.runs.lifecycle``), the report's "endpoint failed" headline
(``reports.analysis.health``) and the CI gate's "run finished" and error-rate checks (``reports.analysis.check``)
are one judgement, and were made in each of the three. The level quota it uses is the prepared run's
(``loadgen.core.prepared.PreparedRun.level_quota``). Pure, and no numpy or pandas: the run's owner imports this
module in Locust's processes.
"""

from __future__ import annotations

from loadgen.core.manifest import Manifest, RunStatus

MIN_TRAILING = 3  # failures in a row at the end that say "the endpoint died", whatever the level size
DEAD_LEVELS = 2  # ... and at least this many levels' worth: one level lost to bad luck is not a death
NEARLY_ALL = 0.9  # or this share of every canary failed


def endpoint_failed(errors: int, canaries: int, trailing: int, level_quota: int | None) -> bool:
    """The endpoint failed the run: it ended with ``DEAD_LEVELS`` levels' worth of failures in a row
    (``level_quota`` canaries each; at least ``MIN_TRAILING``), or nearly all its canaries failed, or every
    one did (a run of one or two canaries: nothing was measured, however few). Chance alone (a fault rate
    of 0.4 over levels of 4) almost never gets there; an endpoint that died always does."""
    if errors <= 0 or canaries <= 0:
        return False
    dead_run = trailing >= max(MIN_TRAILING, DEAD_LEVELS * (level_quota or 0))
    return dead_run or errors >= canaries or (errors >= MIN_TRAILING and errors >= NEARLY_ALL * canaries)


def run_status(m: Manifest, level_quota: int | None, *, lost: bool) -> RunStatus:
    """The final status from the load side's facts in the manifest (``stages_finished``, the canary counts) and
    whether records were lost: ``interrupted`` unless every stage met its quota, then ``endpoint_failed``, then
    ``finished_with_losses``, else ``finished``."""
    if not m.stages_finished:
        return RunStatus.INTERRUPTED
    errors, sent = m.canary_errors or 0, m.canaries_reported or 0
    if endpoint_failed(errors, sent, m.canary_errors_trailing or 0, level_quota):
        return RunStatus.ENDPOINT_FAILED
    return RunStatus.FINISHED_WITH_LOSSES if lost else RunStatus.FINISHED


def completed(status: str | None) -> bool:
    """Every stage met its quota (``finished``, ``finished_with_losses``, ``endpoint_failed``); a status this
    version does not know did not."""
    try:
        return status is not None and RunStatus(status).completed
    except ValueError:
        return False


def said_failed(status: str | None, by_rule: bool) -> bool:
    """The endpoint failed the run: its status says so (settled at its end), or the rule says so of its records
    (a report written again, a run whose owner died before it could settle)."""
    return status == RunStatus.ENDPOINT_FAILED or by_rule
