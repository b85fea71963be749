"""Scenarios that several end-to-end tests run: the tables they share, built once.

``embedded_scenario``: tests of the embedded engine's known truths run ``loadgen run`` on a completions endpoint
served by an embedded engine the run starts itself (``[launcher] kind = "embedded"`` with the engine flags under
test), a seeded background, and a sweep that waits at most 2 s for a level to be held; their canaries stay TOML
in the test. ``tiny_scenario``: tests of a hand-written local server (a trickling answer, a full disk, JSON the
manifest cannot keep) need the least a run sends, one unstreamed three-token canary per level. Only what a test
varies is an argument. This module writes text only: it neither runs anything nor checks what a run gives.
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


def tiny_scenario(
    name: str, url: str, *, levels: list[int], background: bool, endpoint: str = "", settle_timeout_s: float = 10
) -> str:
    """Canary ``c`` (prompt ``ok``, 3 tokens, unstreamed) against ``url``, no baseline or warm-up; with
    ``background``, unstreamed background requests of 3 tokens that start at once. ``endpoint``: more of
    ``[endpoint]``'s lines (timeouts)."""
    more = "[background]\nstream = false\nmax_tokens = [3, 3]\nspawn_jitter_s = 0\n" if background else ""
    return f"""
name = "{name}"
[endpoint]
base_url = "{url}"
{endpoint}
[[canaries]]
id = "c"
prompt = "ok"
max_tokens = 3
stream = false
{more}
[sweep]
levels = {levels}
canaries_per_level = 1
warmup = 0
baseline = 0
settle_timeout_s = {settle_timeout_s}
"""
