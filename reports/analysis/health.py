"""Is the run's evidence whole? Errors, levels without completions, lost records, unusable numbers.

Why: a report's figures are only as good as the records under them. An endpoint that died mid-run
leaves levels with no completions and a sweep of errors; a full disk leaves records unwritten and a
torn last line; a hostile endpoint sends ``NaN`` logprobs. None of that may pass silently: this
module says it first (``headline``, shown above every figure), in plain words with counts
(``notices``), and as facts the CI gate reads (``reports.analysis.check.integrity``). Pure: ``RunData`` and
the per-canary analysis in, a JSON-ready dict out. Whether the endpoint failed is the verdict's rule
(``reports.analysis.verdict``), which the run's owner settles the status by too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from collectors.losses import lost_records
from reports.analysis import level_load
from reports.analysis.level_load import kinds_text
from reports.analysis.verdict import endpoint_failed, said_failed
from reports.model.report import CanaryAnalysis, Health, HealthFacts

if TYPE_CHECKING:  # a type only: the run's owner imports this module in Locust's processes, which load no pandas
    from collectors.read.runfolder import FileRead, RunData


def missing_choices(frame: Any, scenario: Any) -> int:
    """Choices absent from the ``n > 1`` requests read: each such request is ``n`` records, ``<id>.choice<j>``
    (``loadgen.load.canary_request.choice_records``), ``n`` the scenario's."""
    n_of = {str(c.get("id")): int(c.get("n") or 1) for c in (scenario or {}).get("canaries") or []}
    ids = frame["canary_id"].to_numpy().astype(str) if len(frame) else np.zeros(0, str)
    chosen = np.char.find(ids, ".choice") >= 0
    if not chosen.any():
        return 0
    counts = frame[chosen].groupby("request_id")["canary_id"].agg(["first", "size"])
    expected = [n_of.get(str(first).rsplit(".choice", 1)[0], int(size)) for first, size in counts.to_numpy()]
    return int(sum(max(0, e - int(size)) for e, size in zip(expected, counts["size"], strict=True)))


def _trailing(failed: np.ndarray[Any, Any]) -> int:
    ok = np.flatnonzero(~failed)
    return int(len(failed) - (ok[-1] + 1)) if ok.size else len(failed)


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else (many or one + 's')}"


def run_health(run: RunData, canaries: Sequence[CanaryAnalysis]) -> Health:
    """``report.json``'s ``health``: the facts, a ``headline`` (read first) and ``notices`` (with counts)."""
    m = run.manifest
    f = run.canaries.frame
    order = np.argsort(f["sent_at"].to_numpy(), kind="stable") if len(f) else np.zeros(0, np.int64)
    failed = (f["status"].to_numpy() != "ok")[order]
    kinds = {str(k): int(n) for k, n in f[f["status"] != "ok"]["error_kind"].fillna("unknown").value_counts().items()}
    errors, sent = int(failed.sum()), len(failed)
    dead = said_failed(m.status, endpoint_failed(errors, sent, _trailing(failed), run.prepared.level_quota))
    planned = set(m.levels)
    empty = {
        str(e["id"]): [
            lv["concurrency"] for lv in e["levels"] if lv["concurrency"] in planned and not lv["completions"]
        ]
        for e in canaries
    }
    empty = {k: v for k, v in empty.items() if v}
    failures = dict(run.write_failures)
    lost = lost_records(failures, m.engine_metrics, *(s.get("engine_metrics") for s in m.servers))
    torn = [r.name for r in run.files + run.background_files if r.torn_tail]
    reported = m.canaries_reported
    # canaries the coordinator counted that neither reached the records nor are counted as write failures: it
    # counts requests, so the records are counted as requests (an n > 1 request is one, its choices n records),
    # and a request read with fewer than its n choices has lost the rest
    unwritten = 0
    if isinstance(reported, int):
        requests = int(f["request_id"].nunique()) if len(f) else 0
        unwritten = max(0, reported - requests + missing_choices(f, m.scenario) - failures.get("canaries", 0))
    unusable = f["unusable_numbers"].to_numpy() if "unusable_numbers" in f else np.zeros(0, np.int64)
    background = level_load.background_errors(run.background)
    unmeasured = {str(e["id"]): got for e in canaries if (got := level_load.unmeasured_levels(e["levels"]))}
    facts: HealthFacts = {
        "status": None if m.status is None else str(m.status),
        "completed": bool(m.run_status and m.run_status.completed),
        "canaries": sent,
        "errors": errors,
        "error_kinds": dict(sorted(kinds.items())),
        "first_error": level_load.first_error(f) if errors else None,
        "error_rate": errors / sent if sent else None,
        "endpoint_failed": bool(dead),
        "levels_without_completions": empty,
        "write_failures": failures,
        "records_lost": lost,
        "canaries_reported_not_read": unwritten,
        "torn_files": torn,
        "unusable_numbers": int(unusable.sum()),
        "records_with_unusable_numbers": int((unusable > 0).sum()),
        "non_finite_figures": 0,  # set by ``reports.analysis.build`` once the report is scrubbed
        "background": background,
        "levels_not_measured": unmeasured,
    }
    headline, notices = _words(facts)
    all_unmeasured = sorted({lv for lvs in unmeasured.values() for lv in lvs})
    load_headline = level_load.headline(background, all_unmeasured)
    # no load, no verdict: said first, after only an endpoint that failed outright (which the background shares)
    cut = 1 if facts["endpoint_failed"] else 0
    headline = headline[:cut] + load_headline + headline[cut:]
    notices += [] if load_headline else level_load.notice(background)
    columns = [r.columns_notice for r in run.files if r.columns_notice]  # a columns file its JSONL contradicts
    notices += implausible_notices(f) + malformed_notices(run.files) + columns
    return {**facts, "headline": headline, "notices": notices}


def implausible_notices(f: Any) -> list[str]:
    """Answers kept and compared that cannot be true: more token ids than tokens, impossible ``usage``
    (``loadgen.core.wire.plausible``); a notice each, with the count and the first record's reason."""
    if not len(f):
        return []
    notices = []
    ok = f["status"].to_numpy() == "ok"
    n_ids, n_tokens = f["n_ids"].to_numpy(), f["n_tokens"].to_numpy()
    more = ok & (n_tokens >= 0) & (n_ids > n_tokens)
    if more.any():
        first = int(np.flatnonzero(more)[0])
        notices.append(
            f"{_n(int(more.sum()), 'record')} answered more token ids than tokens (e.g. {int(n_ids[first])} ids for "
            f"{int(n_tokens[first])} tokens): kept and compared as the endpoint sent them."
        )
    if "usage_problem" in f:
        problems = f["usage_problem"].where(ok, None).dropna()
        if len(problems):
            notices.append(
                f"{_n(len(problems), 'record')} reported impossible usage (e.g. {problems.iloc[0]}): cache and "
                "token counts read from usage are not to be trusted for this endpoint."
            )
    return notices


SHOWN_MALFORMED = 3  # records named per file in a notice; report.json's input.files holds every one


def malformed_notices(files: Sequence[FileRead]) -> list[str]:
    """Per canary file with records no column can hold (``collectors.read.recordcheck.record_problem``), a notice naming
    the file, how many were skipped and the first lines with the field and what it should have been."""
    out = []
    for f in files:
        if not f.malformed:
            continue
        lines = sorted(f.malformed)
        named = "; ".join(f"line {n}: {f.malformed[n]}" for n in lines[:SHOWN_MALFORMED])
        more = len(lines) - SHOWN_MALFORMED
        rest = f"; and {_n(more, 'more line')} (report.json: input.files)" if more > 0 else ""
        out.append(
            f"{f.name}: {_n(len(lines), 'record')} skipped, each with a field no analysis can read "
            f"({named}{rest}); figures cover the other records."
        )
    return out


def _failed(h: HealthFacts) -> str:
    """``8 of 8 canaries failed (http_status ×8; the first: HTTP 400: ...)``: the server's reason, not only a count."""
    first = f"; the first: {h['first_error']}" if h["first_error"] else ""
    return f"{h['errors']} of {_n(h['canaries'], 'canary', 'canaries')} failed ({kinds_text(h['error_kinds'])}{first})"


def _lost(h: HealthFacts) -> list[str]:
    wf = h["write_failures"]
    parts = [
        f"{_n(wf.get(key, 0), what)} could not be written"
        for key, what in (("canaries", "canary record"), ("background", "background row"))
        if wf.get(key)
    ]
    metrics = h["records_lost"] - wf.get("canaries", 0) - wf.get("background", 0)
    if metrics:
        parts.append(f"{_n(metrics, '/metrics sample')} could not be written")
    if h["canaries_reported_not_read"]:
        parts.append(f"{_n(h['canaries_reported_not_read'], 'canary', 'canaries')} sent are not in the records")
    torn = h["torn_files"]
    if torn:
        parts.append(f"{', '.join(torn)} end{'s' if len(torn) == 1 else ''} in a torn line (a write cut short)")
    return parts


def _words(h: HealthFacts) -> tuple[list[str], list[str]]:
    headline: list[str] = []
    notices: list[str] = []
    levels = sorted({lv for lvs in h["levels_without_completions"].values() for lv in lvs})
    no_comp = f"no completions at concurrency {', '.join(map(str, levels))}" if levels else ""
    if h["endpoint_failed"]:
        headline.append(f"Endpoint failed: {_failed(h)}" + (f"; {no_comp}" if no_comp else "") + ".")
    elif no_comp:  # errors alone are in every verdict and table already
        notices.append(f"Planned levels with {no_comp}: their figures cannot be computed.")
    if lost := _lost(h):
        headline.append("Records lost: " + "; ".join(lost) + ".")
        notices.append(headline[-1] + " Figures cover the records that were written.")
    if unreadable := h["write_failures"].get("unreadable"):
        notices.append(f"{_n(unreadable, 'process file')} (process-*.json) unreadable: its write failures are unknown.")
    if h["unusable_numbers"]:
        notices.append(
            f"{_n(h['unusable_numbers'], 'number')} in {_n(h['records_with_unusable_numbers'], 'record')} "
            "(logprobs, alternatives' logprobs or times) were null, not a number, NaN, infinite or beyond "
            "±1e6 and were left out of every figure and chart."
        )
    return headline, notices


def figures_notice(count: int) -> list[str]:
    """The notice for figures that came out NaN or infinite and are shown as missing (``reports.model.finite``)."""
    if not count:
        return []
    return [f"{_n(count, 'figure')} came out NaN or infinite and {'is' if count == 1 else 'are'} shown as missing."]
