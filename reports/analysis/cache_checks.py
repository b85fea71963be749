"""Did canaries meant to hit (or miss) the prefix cache really do so, and by which mechanism? Pure.

Why: a cold-versus-warm comparison is only meaningful if the warm canary really hit the cache and
the cold one really missed. Two kinds of evidence, in this order (docs/design.md, "Cache actions"):

- the answer's ``usage.prompt_tokens_details.cached_tokens`` (vLLM sends it only when served with
  ``--enable-prompt-tokens-details``);
- the engine's own prefix-cache counters (``prefix_cache_queries``/``_hits`` in ``engine_metrics.jsonl``):
  no hit between the last sample before the canary was sent and the first after it ended is a miss
  whatever else ran; the first move of the query counter after it was sent, when it is exactly the
  canary's prompt tokens, is the canary's own lookup, and its hits say hit or miss; else "shared".

Where neither decides, the check says "unknown" rather than passing, so a scenario cannot pass
vacuously. Frames and arrays in, figures and sentences out; no I/O.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.core.manifest import ResolvedScenario
from reports.model.report import CacheExpectation

Floats = npt.NDArray[np.float64]


def own_windows(t: Floats, total: Floats, sent_at: Floats, ended_at: Floats) -> list[tuple[int, int, int] | None]:
    """Per canary, over one engine's samples ``t`` (sorted, finite) of a cumulative counter ``total``: the last
    sample before it was sent (b), the first after it ended (e) and the first sample from b on where ``total`` had
    risen (its own lookup, where nothing else moved the counter); None with no sample on either side, an end not
    known, or a counter that did not rise from b to e. The one window rule of the prefix-cache counters here and of
    the by-source counters (``reports.analysis.provenance.counter_split``)."""
    before = np.searchsorted(t, sent_at, side="right") - 1
    after = np.searchsorted(t, ended_at, side="left")
    out: list[tuple[int, int, int] | None] = []
    for i, (b, e) in enumerate(zip(before.tolist(), after.tolist(), strict=True)):
        if b < 0 or e >= t.size or not np.isfinite(ended_at[i]) or total[e] <= total[b]:
            out.append(None)
            continue
        out.append((b, e, b + int(np.flatnonzero(total[b : e + 1] > total[b])[0])))
    return out


def counter_evidence(
    sent_at: Floats,
    ended_at: Floats,
    prompt_tokens: Floats,
    t: Floats | None,
    queries: Floats | None,
    hits: Floats | None,
) -> list[str | None]:
    """Per canary, what the engine's prefix-cache counters say: "hit", "miss", "shared" (hits in a window
    where other lookups ran too) or None (no samples around it, or the counters did not move).

    Two windows, both opening at the last sample before the canary was sent: its whole life (to the
    first sample after it ended), where no hit at all is a certain miss; and the first move of the
    query counter after it was sent, where a move of exactly the canary's prompt tokens is its own
    lookup alone (a canary looks the cache up once, before its first token), so its hits are the
    canary's. The whole-life window alone would take in the next canary's lookup, sent as this one ends.
    """
    out: list[str | None] = [None] * len(sent_at)
    if t is None or queries is None or hits is None:
        return out
    keep = np.isfinite(t) & np.isfinite(queries) & np.isfinite(hits)
    t, queries, hits = t[keep], queries[keep], hits[keep]
    if t.size < 2:
        return out
    for i, window in enumerate(own_windows(t, queries, sent_at, ended_at)):
        if window is None:
            continue
        b, e, moved = window
        if (np.diff(hits[b : e + 1]) < 0).any():
            continue
        if hits[e] == hits[b]:
            out[i] = "miss"
            continue
        if (np.diff(queries[b : e + 1]) < 0).any():  # the counters went down: the engine restarted, nothing to read
            continue
        own = np.isfinite(prompt_tokens[i]) and queries[moved] - queries[b] == prompt_tokens[i]
        out[i] = ("hit" if hits[moved] > hits[b] else "miss") if own else "shared"
    return out


def cache_expectations(
    frame: Any,
    scenario: ResolvedScenario,
    *,
    engine_t: Floats | None = None,
    engine_queries: Floats | None = None,
    engine_hits: Floats | None = None,
) -> dict[str, CacheExpectation]:
    """Per canary that expects a cache outcome or acts on the cache: how many answered, the mechanism each
    used, the evidence, and how many met or broke the expectation (``expect`` None: nothing to meet)."""
    wanted = {
        str(c.get("id", "canary")): c
        for c in scenario.get("canaries") or []
        if c.get("expect_cache") or c.get("cache", "keep") != "keep"
    }
    out: dict[str, CacheExpectation] = {}
    for cid, spec in sorted(wanted.items()):
        want = spec.get("expect_cache")
        rows = frame[(frame["canary_id"] == cid) & (frame["status"] == "ok") & (frame["phase"] != "warmup")]
        sent = rows["sent_at"].to_numpy(dtype=float)
        counters = counter_evidence(
            sent,
            sent + rows["latency_s"].to_numpy(dtype=float),
            rows["prompt_tokens"].to_numpy(dtype=float),
            engine_t,
            engine_queries,
            engine_hits,
        )
        cached = rows["cached_tokens"].to_numpy(dtype=float)
        hit: list[bool | None] = [
            bool(c > 0) if np.isfinite(c) else {"hit": True, "miss": False}.get(str(e))
            for c, e in zip(cached, counters, strict=True)
        ]
        known = [h is not None for h in hit]
        met = [h is not None and want is not None and h == (want == "hit") for h in hit]
        action = rows["cache_action"].fillna("kept").astype(str)
        reset = action == "reset"
        refused = rows["cache_reset_ok"].to_numpy(dtype=object) != True  # noqa: E712 (None: no answer)
        out[cid] = {
            "expect": want,
            "cache": spec.get("cache", "keep"),
            "canaries": len(rows),
            "mechanisms": {str(k): int(v) for k, v in action.value_counts().sort_index().items()},
            "resets_refused": int((reset.to_numpy() & refused).sum()),
            "hits": sum(h is True for h in hit),
            "misses": sum(h is False for h in hit),
            "evidence": {
                "cached_tokens": int(np.isfinite(cached).sum()),
                "counters": sum(1 for c, e in zip(cached, counters, strict=True) if not np.isfinite(c) and e),
            },
            "counters_shared": sum(
                1 for c, e in zip(cached, counters, strict=True) if not np.isfinite(c) and e == "shared"
            ),
            "reported": sum(known),
            "met": sum(met) if want else 0,
            "violated": sum(k and not m for k, m in zip(known, met, strict=True)) if want else 0,
            "unknown": len(rows) - sum(known),
        }
    return out


def cache_notices(
    expectations: dict[str, CacheExpectation], *, engine: str | None = None, cached_tokens_reported: bool | None = None
) -> list[str]:
    """Plain sentences for the report's notices. ``engine``: the ``/metrics`` family seen ("vllm", ...)."""
    notices = []
    for cid, e in expectations.items():
        if e["violated"]:
            text = (
                f"Canary {cid} was meant to {e['expect']} the prefix cache, but {e['violated']} of "
                f"{e['canaries']} did not: its comparison is not the one the scenario claims."
            )
            if e["expect"] == "miss" and e["mechanisms"].get("reset"):
                salted = (
                    " (and its cache salts under load did not reach that store)" if e["mechanisms"].get("salt") else ""
                )
                text += (
                    " It reset the cache while other requests ran, and an engine keeps blocks in use (vLLM "
                    'refuses the reset): cache = "miss" salts the request under load instead.'
                    if e["resets_refused"]
                    else " Its resets were accepted and the prompt was found all the same: a KV store the reset does "
                    f"not empty served it{salted} (vLLM 0.26's reset leaves LMCache's store as it was); \"Where the "
                    'KV came from" names the source.'
                )
            notices.append(text)
        if e["unknown"] and e["expect"]:
            text = (
                f"Canary {cid}: {e['unknown']} of {e['canaries']} answers did not say whether they hit the "
                f"prefix cache, so the expected cache {e['expect']} is unverified"
            )
            if e["counters_shared"]:
                text += f" ({e['counters_shared']} ran while other requests looked the cache up too)"
            if engine == "vllm" and cached_tokens_reported is not True:
                text += (
                    "; vLLM reports usage.prompt_tokens_details.cached_tokens only when served with "
                    "--enable-prompt-tokens-details"
                )
            notices.append(text + ".")
    return notices
