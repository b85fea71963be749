"""The engine's documented prompts: the D3 short prompt, the long control, and the prompt set.

Why this module exists: the README and the tests both name these prompts, so they live in one
place. ``D3_SHORT_PROMPT`` (24 tokens, as in the D3 study) was found by searching candidate
sentences of 17-31 tokens (default options, seed 0, greedy, 32 tokens) for one whose cache-miss
prefill and cache-hit prefill give different completions (4 of the first 12 candidates did);
the hit prefills 8 rows instead of 24, so its GEMMs split K differently. ``D3_LONG_PROMPT`` is
a four-sentence control (52 tokens) whose hit and miss logprobs differ but whose tokens do not.
Data only.
"""

from __future__ import annotations

from typing import Final

D3_SHORT_PROMPT: Final = "The old man climbed the green hill near the old town before the long night, so"
D3_LONG_PROMPT: Final = (
    "The king walked to the river in the early morning. He saw a small boat near the water. "
    "The sun was warm and the birds began to sing. He sat down and thought about his long life."
)
D3_MAX_TOKENS: Final = 32

# Prompts whose completion differs between a cache-miss and a cache-hit prefill in default mode
# (same search as D3_SHORT_PROMPT); the tests attribute each difference to a reduction path.
CACHE_SENSITIVE_PROMPTS: Final = (
    D3_SHORT_PROMPT,
    "The doctor wrote a letter to his friend under the bright moon after the rain stopped, the",
    "A tired soldier built a small boat with his brother because the morning was cold and",
    "A tired soldier walked to the river with his brother while the children played near the",
)

# The canary the rate curve in the README uses.
CURVE_CANARY: Final = (
    "Write a short story about a lighthouse keeper who finds a strange stone on the shore near the old town"
)
