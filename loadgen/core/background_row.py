"""The background row: one line of ``background[-<worker>].jsonl`` per background request, written and read through
one type.

Why: the background user wrote each row as a dict of its own making and the run-folder reader named the keys it
reads in a tuple of its own; a key renamed on one side would have read as absent on the other, silently.
``BackgroundRow`` is the row for both: the Locust side builds it (``loadgen.load.background_user``), the
collector writes it as it is (``collectors.canary.BackgroundCollector``: orjson writes the dataclass in field
order), and the reader takes its columns from it (``collectors.read.runfolder``). The keys are a contract
(docs/design.md, "background[-<worker>].jsonl"): add fields freely, rename none. Pure data; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from loadgen.core.record import ErrorKind, Status

BackgroundPhase = Literal["warmup", "baseline", "sweep", "drain"]  # "drain": sent once the last stage was done


@dataclass
class BackgroundRow:
    """One background request as it ended. ``level``: the stage's level (None once the last stage is done);
    ``error_message``: None on success, else as a canary record's (cut, the API key redacted); ``prompt_tokens``
    and ``completion_tokens``: the server's ``usage`` (None where it reported none).

    A plain dataclass, neither frozen nor slotted: one is built and written per background request, thousands a
    second per core. Built by keyword and dumped by orjson it costs about 1.7 us, against 0.9 us for the dict it
    replaced (0.3% of a core at 4,000 requests a second); frozen (``object.__setattr__`` per field) or slotted
    (orjson reads slots the slow way) it cost 3.5-4.9 us."""

    level: int | None
    phase: BackgroundPhase
    sent_at: float  # epoch seconds
    latency_s: float | None
    ttft_s: float | None
    status: Status
    error_kind: ErrorKind | None
    error_message: str | None
    http_status: int | None
    shared_prefix: bool
    prompt_tokens: int | None
    completion_tokens: int | None


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(BackgroundRow))
# the fields a reader holds as numbers (float64, NaN where absent); the others are text or flags
NUMERIC: tuple[str, ...] = (
    "level",
    "sent_at",
    "latency_s",
    "ttft_s",
    "http_status",
    "prompt_tokens",
    "completion_tokens",
)
