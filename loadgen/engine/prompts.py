"""The engine's documented prompts: the D3 short prompt, the long control, and the prompt set.

Why this module exists: the README and the tests both name these prompts, so they live in one
place. ``D3_SHORT_PROMPT`` (22 tokens) was found by searching 422 candidate sentences of 17-31
tokens (default options, seed 0, greedy, 32 tokens) for one whose cache-miss prefill and
cache-hit prefill give different completions (1 of 422 did); the hit prefills 6 rows instead
of 22, so its GEMMs split K differently. ``D3_LONG_PROMPT`` is a four-sentence control that does not diverge. Data only.
"""

from __future__ import annotations

from typing import Final

D3_SHORT_PROMPT: Final = "The old man climbed the green hill after the long winter and then began to"
D3_LONG_PROMPT: Final = (
    "The old man walked to the river in the early morning. He found a small boat near the water. "
    "The sun was warm and the birds began to sing. He sat down and thought about his long life."
)
D3_MAX_TOKENS: Final = 32

# Prompts whose completion differs between a cache-miss and a cache-hit prefill in default mode
# (same search as D3_SHORT_PROMPT); the tests attribute each difference to a reduction path.
CACHE_SENSITIVE_PROMPTS: Final = (
    D3_SHORT_PROMPT,
    "A tired soldier opened the heavy door with his brother while the children played near the",
    "The farmer built a small boat in the early morning while the children played near the",
)

# The canary the rate curve in the README uses.
CURVE_CANARY: Final = (
    "Write a short story about a lighthouse keeper who finds a strange stone on the shore near the old town"
)
