"""The sweep's bounds: the most background users in one level and the most levels in one sweep.

Why apart: the schema refuses a scenario beyond them, its messages name them, and ``loadgen onset`` bounds its
search by them; all three read them here. Constants only.
"""

# A level is that many background users, each a greenlet with two connections: far beyond any engine's
# batch (vLLM and SGLang run at most a few thousand requests at once; the rest only queue) and near what
# a generator host can hold open. More than this is a typo (--levels 1000000000), refused before any traffic.
MAX_LEVEL = 10_000
MAX_LEVELS = 100  # levels in one sweep: each is a stage of its own
