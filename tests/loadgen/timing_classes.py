"""The timing classes of ``timing_server.py`` and the scenario that drives one: shared by the band tests and
``benchmarks/level_fidelity.py``, so what the benchmark measures is what the tests hold.

Each class is one way an endpoint lets the client see a request's progress (docs/design.md, "The level's band"):
answers in one piece after a fixed or a random delay whatever their length, token-by-token streams, and
non-streamed answers after a fixed delay. Data and one pure function; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.core.band import CEILING, FLOOR

SERVER = Path(__file__).with_name("timing_server.py")
PROMPT = "canary of the level band"  # the canary's prompt: the server's log tells canaries apart by it


@dataclass(frozen=True)
class Timing:
    """One timing class: the server's arguments and what the scenario sends it."""

    name: str
    server_args: tuple[str, ...]
    stream: bool  # background and canary streamed
    background_tokens: tuple[int, int]  # background max_tokens, lowest and highest
    canary_tokens: int
    bound: str  # the canary records' level_bound: which side of its level the background errs on
    # streamed answers that come in one piece are known as such only after a few of them (holding.Buffering):
    # canaries sent before that say "floor", truly (the load side held a floor then), and never after
    learnt: bool = False


# the whole classes take the same time whatever the length, so a wide spread of lengths is what misleads a pace
WHOLE_FIXED = Timing(
    "whole-fixed", ("--timing", "whole-fixed", "--delay-s", "0.3"), True, (4, 64), 16, CEILING, learnt=True
)
WHOLE_RANDOM = Timing(
    "whole-random",
    ("--timing", "whole-random", "--delay-s", "0.15", "--delay-max-s", "0.45"),
    True,
    (4, 64),
    16,
    CEILING,
    learnt=True,
)
TOKENS = Timing("tokens", ("--timing", "tokens", "--token-s", "0.01"), True, (100, 160), 48, FLOOR)
PLAIN = Timing("plain", ("--timing", "plain", "--delay-s", "0.3"), False, (4, 64), 16, CEILING)
CLASSES = (WHOLE_FIXED, WHOLE_RANDOM, TOKENS, PLAIN)


def scenario_text(timing: Timing, levels: list[int], canaries_per_level: int, baseline: int) -> str:
    """The scenario of one class: a short canary and short background prompts, both streamed as the class is."""
    stream = str(timing.stream).lower()
    return f"""
name = "band-{timing.name}"
[endpoint]
kind = "completions"
[[canaries]]
id = "c"
prompt = "{PROMPT}"
max_tokens = {timing.canary_tokens}
seed = 0
logprobs = true
top_logprobs = 2
stream = {stream}
[background]
seed = 3
prompt_words = [2, 6]
max_tokens = [{timing.background_tokens[0]}, {timing.background_tokens[1]}]
stream = {stream}
[sweep]
levels = {levels}
canaries_per_level = {canaries_per_level}
warmup = 0
baseline = {baseline}
"""
