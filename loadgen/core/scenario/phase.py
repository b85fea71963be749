"""``background.phase``: which phase of each sweep canary the background loads the engine in, read once and typed.

Why apart: the scenario checks the text, the load side's gate (``loadgen.load.phase``) acts on it and the record
and report name it; one parser keeps the three from reading ``"from:8"`` three ways (docs/design.md, "Background
aimed at one phase"). Pure: no I/O, no pydantic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

PhaseKind = Literal["all", "prefill", "decode"]
_FROM = re.compile(r"from:([1-9][0-9]{0,5})")
_KINDS: dict[str, PhaseKind] = {"all": "all", "prefill": "prefill", "decode": "decode"}
PHASE_FORMS = '"all", "prefill", "decode" or "from:<p>" (p a whole number of tokens, 1 or more)'


@dataclass(frozen=True, slots=True)
class BackgroundPhase:
    """``all``: the background is held at the level throughout (the default). ``decode``: it sends only while the
    canary runs and has shown ``from_token`` tokens (``from:<p>``; plain ``decode`` is ``from:1``, its first
    token). ``prefill``: each slot sends one request before the canary, which goes once those are prefilled, and
    none while it runs."""

    kind: PhaseKind = "all"
    from_token: int = 1

    @property
    def aimed(self) -> bool:
        """The background is timed by the canary: any mode but ``all``."""
        return self.kind != "all"

    def __str__(self) -> str:
        """The scenario's spelling, normalised: ``from:1`` is ``decode``."""
        if self.kind == "decode" and self.from_token > 1:
            return f"from:{self.from_token}"
        return self.kind


def parse_phase(text: str) -> BackgroundPhase:
    """The typed mode of ``text``; ``ValueError`` naming the forms it may take."""
    if (kind := _KINDS.get(text)) is not None:
        return BackgroundPhase(kind)
    if match := _FROM.fullmatch(text):
        return BackgroundPhase("decode", int(match.group(1)))
    raise ValueError(f"expected {PHASE_FORMS}")
