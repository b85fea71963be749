"""Whether each level's load was there: the background's failures, and levels whose canaries were not at their level.

Why: a level's figures answer "does the answer change beside N other requests?" only if the canaries really ran
beside N others. A background the endpoint refused (prompts longer than its context, a wrong model name, a rate
limit) leaves every canary alone while it is reported at its level, and "no divergence" then reads as
"invariant". So a level is **not measured** when most of its background failed, when the load side ended it
because its background kept failing, or when most of its measured canaries were outside the level's band
(``loadgen.core.band``: an overshoot, empty slots, an engine that queues); such a level gives no verdict, and
``loadgen check`` fails the run as evidence incomplete unless told otherwise (docs/design.md, "The level's band").

Pure: the background rows' frame and report pieces in, JSON-ready values and sentences out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.core.errors import one_line
from loadgen.core.manifest import EndedByBackground
from reports.model.report import BackgroundErrors, BackgroundLevel, Level

MOSTLY = 0.5  # a level is not measured when more than this share of its background failed or its canaries were off


def describe_error(row: Mapping[str, Any]) -> str:
    """One failed request (a canary or a background row) in words: its kind, status and message, one line."""
    kind = str(row.get("error_kind") or "error")
    status = row.get("http_status")
    what = f"HTTP {int(status)}" if isinstance(status, int | float) and np.isfinite(status) else kind
    message = one_line(row.get("error_message"))
    if not message:
        return what
    message = message.rstrip(".")
    return message if message.startswith(what) else f"{what}: {message}"


def kinds_text(kinds: Mapping[str, int]) -> str:
    """Error kinds with their counts, in words that do not read as an HTTP status: ``http_status ×24``; the most
    frequent first."""
    return ", ".join(f"{k} ×{n}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))


def first_error(frame: Any) -> str | None:
    """The first failed request of ``frame`` (canary records or background rows) by send time, in words
    (``describe_error``); None where none failed."""
    failed = frame[frame["status"] != "ok"]
    if not len(failed):
        return None
    return describe_error(failed.iloc[int(np.argmin(failed["sent_at"].to_numpy(dtype=np.float64)))].to_dict())


def background_errors(bg: Any | None) -> BackgroundErrors | None:
    """The run's background failures: how many of how many, per kind, and the first one in words (by send time);
    None for a run without background rows."""
    if bg is None:
        return None
    failed = bg[bg["status"] != "ok"]
    kinds = {str(k): int(n) for k, n in failed["error_kind"].fillna("unknown").value_counts().items()}
    first = first_error(bg)
    requests = len(bg)
    return {
        "requests": requests,
        "errors": len(failed),
        "share": len(failed) / requests if requests else None,
        "error_kinds": dict(sorted(kinds.items())),
        "first_error": first,
    }


def not_measured(level: Level, background: BackgroundLevel | None, ended: EndedByBackground | None) -> str | None:
    """Why ``level`` (one canary's figures at one sweep level) gives no verdict, or None when its load was there
    (or cannot be judged: nothing recorded it). ``background``: the run's background at that level; ``ended``: the
    load side's record of ending the level because its background kept failing."""
    if not level["concurrency"]:
        return None
    reasons = []
    if ended is not None:
        first = str(ended.get("first_error") or "").rstrip(".")
        reasons.append("the load side ended it: its background kept failing" + (f" ({first})" if first else ""))
    if background is not None and background["requests"] and background["errors"] / background["requests"] > MOSTLY:
        reasons.append(f"{background['errors']} of {background['requests']} background requests failed")
    co = level.get("co_residency")
    if co is not None:
        judged = co["at_level"] + co["not_at_level"]
        if judged and co["not_at_level"] / judged > MOSTLY:
            low, high = co["band"]
            reasons.append(
                f"{co['not_at_level']} of {judged} canaries were measured ({co['source']}) outside the level's band "
                f"of {low}-{high} other requests (median {co['median']})"
            )
    return "; ".join(reasons) or None


def unmeasured_levels(levels: Sequence[Level]) -> list[int]:
    """The levels of one canary that give no verdict."""
    return [lv["concurrency"] for lv in levels if lv.get("not_measured")]


def headline(errors: BackgroundErrors | None, unmeasured: Sequence[int]) -> list[str]:
    """What a report says before any figure when the load was not there: the background's failures with the first
    one's reason, and the levels that give no verdict."""
    out = []
    if errors is not None and errors["errors"] and (unmeasured or (errors["share"] or 0) > MOSTLY):
        out.append(
            f"Background failed: {errors['errors']} of {errors['requests']} background requests failed "
            f"({kinds_text(errors['error_kinds'])}); the first: {errors['first_error']}."
        )
    if unmeasured:
        levels = ", ".join(map(str, unmeasured))
        out.append(
            f"Level{'s' if len(unmeasured) > 1 else ''} {levels} not measured: the load the level asked for was not "
            "there, so no verdict comes from it (why: report.json levels[].not_measured, and below each table)."
        )
    return out


def notice(errors: BackgroundErrors | None) -> list[str]:
    """Background failures too few to unmeasure a level: said once, with the first one's reason."""
    if errors is None or not errors["errors"]:
        return []
    return [
        f"{errors['errors']} of {errors['requests']} background requests failed; the first: {errors['first_error']}."
    ]
