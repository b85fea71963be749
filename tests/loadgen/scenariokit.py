"""The scenario that end-to-end tests of the embedded engine's known truths run: the tables they share, built once.

Each such test runs ``loadgen run`` on a completions endpoint served by an embedded engine the run starts itself
(``[launcher] kind = "embedded"`` with the engine flags under test), a seeded background, and a sweep that waits
at most 2 s for a level to be held. Only what a test varies is an argument; its canaries stay TOML in the test.
This module writes text only: it neither runs anything nor checks what a run gives.
"""

from __future__ import annotations

import json

STORY_PROMPT = "The history of the old harbour town begins with a small group of fishermen who"


def story(max_tokens: int) -> str:
    """The greedy canary ``story``: seeded, with logprobs, so that a step trace and drift can be joined to it."""
    return f"""
[[canaries]]
id = "story"
prompt = "{STORY_PROMPT}"
max_tokens = {max_tokens}
seed = 0
logprobs = true
"""


def embedded_scenario(
    name: str,
    canaries: str,
    *,
    engine_args: list[str],
    levels: list[int],
    canaries_per_level: int,
    baseline: int = 2,
    prompt_words: tuple[int, int] = (20, 60),
    max_tokens: tuple[int, int] = (2, 6),
) -> str:
    """The scenario's TOML: ``canaries`` (their tables, as written) on an embedded engine started with
    ``engine_args``, background prompts of ``prompt_words`` words asking for ``max_tokens`` tokens (by default
    long prompts and short answers: many prefills beside the canaries' decodes)."""
    return f"""
name = "{name}"
[endpoint]
kind = "completions"
{canaries}
[background]
seed = 7
prompt_words = {list(prompt_words)}
max_tokens = {list(max_tokens)}
[sweep]
levels = {levels}
canaries_per_level = {canaries_per_level}
warmup = 0
baseline = {baseline}
settle_timeout_s = 2
[launcher]
kind = "embedded"
args = {json.dumps(engine_args)}
ready_timeout_s = 60
"""
