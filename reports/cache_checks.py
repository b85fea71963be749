"""Did canaries meant to hit (or miss) the prefix cache really do so? Pure: frame in, figures out.

Why: a cold-versus-warm comparison is only meaningful if the warm canary really hit the cache. The
server's ``usage.prompt_tokens_details.cached_tokens`` is the evidence; where it is absent the check
says "unknown" rather than passing, so a scenario cannot pass vacuously.
"""

from __future__ import annotations

from typing import Any


def cache_expectations(frame: Any, scenario: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per canary with ``expect_cache``: how many answered, reported cached tokens, met or broke the expectation."""
    wanted = {str(c.get("id")): c["expect_cache"] for c in scenario.get("canaries") or [] if c.get("expect_cache")}
    out: dict[str, dict[str, Any]] = {}
    for cid, want in sorted(wanted.items()):
        rows = frame[(frame["canary_id"] == cid) & (frame["status"] == "ok") & (frame["phase"] != "warmup")]
        cached = rows["cached_tokens"]
        known = cached.notna()
        hit = cached.fillna(0) > 0
        met = known & (hit if want == "hit" else ~hit)
        out[cid] = {
            "expect": want,
            "canaries": len(rows),
            "reported": int(known.sum()),
            "met": int(met.sum()),
            "violated": int((known & ~met).sum()),
            "unknown": int((~known).sum()),
        }
    return out


def cache_notices(expectations: dict[str, dict[str, Any]]) -> list[str]:
    notices = []
    for cid, e in expectations.items():
        if e["violated"]:
            notices.append(
                f"Canary {cid} was meant to {e['expect']} the prefix cache, but {e['violated']} of "
                f"{e['canaries']} did not: its comparison is not the one the scenario claims."
            )
        if e["unknown"]:
            notices.append(
                f"Canary {cid}: {e['unknown']} of {e['canaries']} answers did not report cached tokens, "
                f"so the expected cache {e['expect']} is unverified."
            )
    return notices
