"""The user side's messages to the coordinator (``lg_done``, ``lg_inflight``), one definition for sender and receiver.

Why: Locust carries a message's data as a plain msgpack-safe dict; read on the other side by key, a field renamed
on one side only would fail at run time, in another process. Each message is a frozen dataclass here, with the
dict Locust sends (``to_msg``) and back (``from_msg``). No Locust imports, no sending: ``loadgen.load.users`` and
``loadgen.load.user_side`` send, ``loadgen.load.coordinator`` and ``loadgen.load.live`` read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.core.record import Phase, Status
from loadgen.load.stages import FailedBackground


@dataclass(frozen=True)
class CanaryDone:
    """``lg_done``: one canary completed (``loadgen.load.live.summarise``), small and msgpack-safe. ``hashes``:
    one per identity kind the completion carries (none when it failed); ``identity``: the completion itself, for
    baseline canaries only; ``first_div``: per kind, once the reference is known; ``held_at_send``: the record's
    ``background_held_at_send`` (None for a burst copy)."""

    stage: int
    canary: str
    phase: Phase
    level: int | None
    status: Status
    hashes: dict[str, str]
    identity: dict[str, list[Any]] | None
    first_div: dict[str, int | None] | None
    held_at_send: int | None = None

    def to_msg(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_msg(cls, data: dict[str, Any]) -> CanaryDone:
        return cls(**data)


@dataclass(frozen=True)
class Inflight:
    """``lg_inflight``: a user-side process's busy background ``users``, ``held`` (slots holding a started
    request) and ``failing``: while a sweep stage's background has failed for good in that process, which."""

    worker: str
    users: int
    held: int
    failing: FailedBackground | None = None

    def to_msg(self) -> dict[str, Any]:
        failing = None if self.failing is None else self.failing.to_msg()
        return {"worker": self.worker, "users": self.users, "held": self.held, "failing": failing}

    @classmethod
    def from_msg(cls, data: dict[str, Any]) -> Inflight:
        return cls(data["worker"], data["users"], data["held"], FailedBackground.from_msg(data["failing"]))
