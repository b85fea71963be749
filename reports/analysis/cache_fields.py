"""Does an answer's ``usage.prompt_tokens_details.cached_tokens`` say what the engine did? Pure.

Why: cache checks and cost figures read ``cached_tokens``, and servers have reported the wrong thing there (more
cached tokens than the prompt has; through a prefill/decode router, the decode server's handed-over tokens as if they
were a prefix hit). Against each record's tokens by source (``reports.analysis.provenance``: the engine step trace,
else the engine's by-source counters over the canary's own window), four cases, each a notice naming the field, the
canary and how many of its answers (docs/design.md, "Where the KV came from"):

- ``cached_tokens`` above ``prompt_tokens``;
- on P/D, ``cached_tokens`` equal to the decode server's external (handed-over) tokens while the prefill server's
  own hit was smaller: the number is the hand-over, not a prefix hit;
- a hit the engine denies: ``cached_tokens`` > 0, local + external = 0;
- a hit the answer hides: ``cached_tokens`` 0, local or external > 0 (on P/D: the decode server's own hit or the
  prefill server's > 0; the decoder's external tokens are the hand-over, which is no hit).

Frames and arrays in, sentences out; no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reports.analysis.provenance import ProvenanceRows

FIELD = "usage.prompt_tokens_details.cached_tokens"


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def cache_field_notices(frame: Any, rows: ProvenanceRows) -> list[str]:
    """Per canary id (sorted), a notice per case that any of its answers (ok, not warm-up) shows."""
    if not len(frame):
        return []
    live = (frame["status"].to_numpy() == "ok") & (frame["phase"].to_numpy() != "warmup")
    cached = frame["cached_tokens"].to_numpy(dtype=float)
    prompt = frame["prompt_tokens"].to_numpy(dtype=float)
    s, p = rows.split, rows.prefill
    hit = s.local + s.external  # NaN where unknown
    source = np.where(
        s.evidence == "engine_trace", "the engine step trace shows", "the engine's by-source counters show"
    )
    out: list[str] = []
    ids = frame["canary_id"].astype(str).to_numpy()
    with np.errstate(invalid="ignore"):
        above = np.isfinite(cached) & np.isfinite(prompt) & (cached > prompt)
        handed = (
            np.isfinite(cached)
            & (cached > 0)
            & (cached == s.external)
            & np.isfinite(p.local)
            & (p.local + p.external < cached)
            if rows.pd_run
            else np.zeros(len(frame), bool)
        )
        denied = np.isfinite(cached) & (cached > 0) & np.isfinite(hit) & (hit == 0)
        # on P/D the decode server's external tokens are the hand-over, not a hit: the hits are its own and the
        # prefill server's (vLLM 0.26 behind vllm-router counts only the decoder's own in cached_tokens)
        own = s.local + np.where(np.isfinite(p.local), p.local + p.external, 0) if rows.pd_run else hit
        hidden = np.isfinite(cached) & (cached == 0) & np.isfinite(own) & (own > 0)
    for cid in sorted(set(ids[live].tolist())):
        mine = live & (ids == cid)
        n = int(mine.sum())
        answers = _n(n, "answer", "answers")
        if (m := mine & above).any():
            i = int(np.flatnonzero(m)[0])
            out.append(
                f"Canary {cid}: {FIELD} above usage.prompt_tokens in {int(m.sum())} of {answers} (e.g. "
                f"{cached[i]:.0f} cached of {prompt[i]:.0f} prompt tokens): no engine serves more cached prompt tokens "
                "than the prompt has."
            )
        if (m := mine & handed).any():
            i = int(np.flatnonzero(m)[0])
            out.append(
                f"Canary {cid}: {FIELD} is the decode server's handed-over KV, not a prefix hit, in {int(m.sum())} of "
                f"{answers} (e.g. {cached[i]:.0f} = the decode server's external tokens, while the prefill server's "
                f"own hit was {p.local[i] + p.external[i]:.0f}): the router reports the decode side's number."
            )
        if (m := mine & denied).any():
            i = int(np.flatnonzero(m)[0])
            out.append(
                f"Canary {cid}: {FIELD} claims a prefix hit the engine denies in {int(m.sum())} of {answers} (e.g. "
                f"{cached[i]:.0f} cached, while {source[i]} 0 local and 0 external tokens)."
            )
        if (m := mine & hidden).any():
            i = int(np.flatnonzero(m)[0])
            shows = (
                f"the decode server's own hit of {s.local[i]:.0f} and the prefill server's of "
                f"{own[i] - s.local[i]:.0f} tokens"
                if rows.pd_run
                else f"{s.local[i]:.0f} local and {s.external[i]:.0f} external tokens"
            )
            out.append(
                f"Canary {cid}: {FIELD} hides a hit in {int(m.sum())} of {answers} (e.g. 0 cached, while {source[i]} "
                f"{shows})."
            )
    return out
