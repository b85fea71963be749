"""Usage counts an answer states that no engine could: the one rule, for the report's notice.

Why: a hostile or broken endpoint may answer a completion whose tokens are fine but whose ``usage`` is
impossible (a negative count, 1e15 tokens, a string, more cached prompt tokens than the prompt has), or
more token ids than token strings. Neither is a reason to drop the completion: its tokens are compared as
sent, and the tokens are what the comparison is about (fewer ids than tokens, which loses a position, is;
``loadgen.load.answer_checks``). But the report must not pass over them, since cache and cost figures read
``usage``. ``usage_problem`` says what is impossible about one answer's usage; the run-folder reader keeps
it per record and ``reports.analysis.health`` counts it. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

MAX_USAGE_TOKENS = 10**9  # tokens in one request and answer: no context window comes near
COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _count_problem(name: str, value: Any) -> str | None:
    if type(value) is not int:
        return f"{name} {value!r:.40} is not an integer"  # a server's string: only its start
    if not 0 <= value <= MAX_USAGE_TOKENS:
        return f"{name} {value} is outside 0..{MAX_USAGE_TOKENS:.0e}"
    return None


def usage_problem(usage: Any) -> str | None:
    """What no engine could report in this ``usage`` (absent counts are fine: servers differ), or None."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return "usage is not an object"
    for name in COUNTS:
        if usage.get(name) is not None and (why := _count_problem(name, usage[name])):
            return why
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is not None:
        if why := _count_problem("cached_tokens", cached):
            return why
        prompt = usage.get("prompt_tokens")
        if type(prompt) is int and cached > prompt:
            return f"cached_tokens {cached} above prompt_tokens {prompt}"
    return None
