"""The embedded engine's fault plan: which generation request misbehaves, and how.

Why this module exists: the load tool must show that an endpoint's faults become recorded data
(an ``error_kind`` per failed canary) and never crash or silently shrink a run. The engine injects
those faults on request (``loadgen serve --fault-...``). The decision is a pure function of the seed
and the request's arrival index (``decide(index)``), so a run with the same flags faults the same
request numbers; the refusal window is a clock window starting at the first faultable request.

Faults, one per request at most (their rates are shares of the index space, so they must sum to <= 1):
``status`` (an error answer, with ``Retry-After`` on 429/503), ``reset`` (the connection is aborted after
the first bytes of the body), ``no_done`` (a stream that ends cleanly without ``data: [DONE]``),
``malformed`` (a chunk or body that is not JSON), ``missing_ids`` (no ``token_ids``), ``missing_logprobs``
(neither logprobs nor ids: only text), ``slow_first_token`` (the first byte waits ``slow_first_token_s``).
Pure: no I/O, no clocks of its own (callers pass the time), no HTTP; the server applies the fault.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from loadgen.core.errors import UsageError

# Order matters: it fixes which slice of [0, 1) each rate owns, so results stay stable as flags are added.
FAULT_KINDS = ("status", "reset", "no_done", "malformed", "missing_ids", "missing_logprobs", "slow_first_token")
REFUSED = "refused"  # the window fault, counted beside the per-request kinds
RETRY_AFTER_STATUSES = (429, 503)


@dataclass(frozen=True)
class Fault:
    kind: str  # one of FAULT_KINDS, or REFUSED (the refusal window)
    status: int | None = None  # for "status"
    retry_after_s: int | None = None  # for "status" 429/503: the Retry-After header, whole seconds
    delay_s: float | None = None  # for "slow_first_token"


def unit_draw(seed: int, index: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, index): the same in every process and Python version."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class FaultPlan:
    rates: dict[str, float] = field(default_factory=dict)  # kind -> share of requests
    status: int = 503
    retry_after_s: int = 1
    slow_first_token_s: float = 0.0
    refuse_window_s: tuple[float, float] | None = None  # (start, duration) after the first faultable request
    seed: int = 0
    skip: int = 0  # the first ``skip`` generation requests are never faulted (the tool's probe)

    def __post_init__(self) -> None:
        for kind, rate in self.rates.items():
            if kind not in FAULT_KINDS:
                raise UsageError(f"fault plan: unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
            if not 0.0 <= rate <= 1.0:
                raise UsageError(f"fault plan: the {kind} rate is {rate}; expected a share in [0, 1]")
        if sum(self.rates.values()) > 1.0 + 1e-9:
            raise UsageError(f"fault plan: fault rates sum to {sum(self.rates.values()):g}; at most 1 fits")
        if self.rates.get("status") and not 400 <= self.status <= 599:
            raise UsageError(f"fault plan: --fault-status {self.status}; expected an HTTP error status 400..599")
        if self.rates.get("slow_first_token") and self.slow_first_token_s <= 0:
            raise UsageError("fault plan: --fault-slow-rate needs --fault-slow-first-token-s > 0")
        if self.retry_after_s < 0 or self.skip < 0:
            raise UsageError("fault plan: --fault-retry-after and --fault-skip must be >= 0")
        if self.refuse_window_s is not None and (self.refuse_window_s[0] < 0 or self.refuse_window_s[1] <= 0):
            raise UsageError(f"fault plan: refuse window {self.refuse_window_s}; expected START >= 0, DURATION > 0")

    @property
    def active(self) -> bool:
        return any(r > 0 for r in self.rates.values()) or self.refuse_window_s is not None

    def decide(self, index: int) -> Fault | None:
        """The fault of the ``index``-th generation request (0-based, arrival order), or None."""
        if index < self.skip:
            return None
        u = unit_draw(self.seed, index)
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += self.rates.get(kind, 0.0)
            if u < edge:
                return self._fault(kind)
        return None

    def _fault(self, kind: str) -> Fault:
        if kind == "status":
            retry = self.retry_after_s if self.status in RETRY_AFTER_STATUSES else None
            return Fault(kind, status=self.status, retry_after_s=retry)
        if kind == "slow_first_token":
            return Fault(kind, delay_s=self.slow_first_token_s)
        return Fault(kind)

    def refused(self, since_first_s: float | None) -> bool:
        """Whether a request arriving ``since_first_s`` after the first faultable request is refused."""
        if self.refuse_window_s is None or since_first_s is None:
            return False
        start, duration = self.refuse_window_s
        return start <= since_first_s < start + duration

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FaultPlan:
        rates = {
            "status": args.fault_rate,
            "reset": args.fault_reset_rate,
            "no_done": args.fault_no_done_rate,
            "malformed": args.fault_malformed_rate,
            "missing_ids": args.fault_missing_ids_rate,
            "missing_logprobs": args.fault_missing_logprobs_rate,
            "slow_first_token": args.fault_slow_rate,
        }
        return cls(
            rates={k: float(v) for k, v in rates.items() if v},
            status=args.fault_status,
            retry_after_s=args.fault_retry_after,
            slow_first_token_s=args.fault_slow_first_token_s,
            refuse_window_s=parse_window(args.fault_refuse_window_s),
            seed=args.fault_seed,
            skip=args.fault_skip,
        )


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``"START:DURATION"`` in seconds -> (start, duration); None for None."""
    if text is None:
        return None
    start, sep, duration = text.partition(":")
    try:
        if not sep:
            raise ValueError(text)
        return float(start), float(duration)
    except ValueError:
        raise UsageError(f"--fault-refuse-window-s {text!r}: expected START:DURATION in seconds, e.g. 2:1.5") from None


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("fault injection", "off by default; rates are shares of generation requests")
    g.add_argument("--fault-status", type=int, default=503, help="HTTP status of the status fault (e.g. 500, 503, 429)")
    g.add_argument("--fault-rate", type=float, default=0.0, help="share of requests answered with --fault-status")
    g.add_argument("--fault-retry-after", type=int, default=1, help="Retry-After seconds sent with 429 and 503")
    g.add_argument(
        "--fault-refuse-window-s",
        default=None,
        metavar="START:DURATION",
        help="close every generation connection, before any byte, for DURATION s starting START s after "
        "the first faultable request",
    )
    g.add_argument("--fault-reset-rate", type=float, default=0.0, help="share of connections aborted mid-body")
    g.add_argument("--fault-no-done-rate", type=float, default=0.0, help="share of streams ending without [DONE]")
    g.add_argument("--fault-malformed-rate", type=float, default=0.0, help="share with a non-JSON chunk or body")
    g.add_argument("--fault-missing-ids-rate", type=float, default=0.0, help="share answered without token_ids")
    g.add_argument(
        "--fault-missing-logprobs-rate",
        type=float,
        default=0.0,
        help="share answered without logprobs and token ids (text only)",
    )
    g.add_argument("--fault-slow-first-token-s", type=float, default=0.0, help="delay before the first byte")
    g.add_argument("--fault-slow-rate", type=float, default=0.0, help="share delayed by --fault-slow-first-token-s")
    g.add_argument("--fault-seed", type=int, default=0, help="seed of the per-request fault draw")
    g.add_argument(
        "--fault-skip",
        type=int,
        default=0,
        help="the first N generation requests are never faulted (spare the load tool's probe)",
    )


class FaultCounters(Collector):
    """Generation requests seen and faults applied, as ``loadgen:*`` counters on ``/metrics``.

    One asyncio loop owns the server, so plain integers are safe; the index is the arrival order."""

    def __init__(self) -> None:
        self.requests = 0
        self.injected: dict[str, int] = dict.fromkeys((*FAULT_KINDS, REFUSED), 0)
        self.first_at: float | None = None  # clock of the first faultable request (starts the refusal window)

    def next_index(self) -> int:
        index = self.requests
        self.requests += 1
        return index

    def collect(self) -> Iterator[Metric]:
        seen = CounterMetricFamily("loadgen:generation_requests", "Generation requests received, faulted or not.")
        seen.add_metric([], float(self.requests))
        yield seen
        faults = CounterMetricFamily("loadgen:faults_injected", "Faults applied, by kind.", labels=["kind"])
        for kind, n in self.injected.items():
            faults.add_metric([kind], float(n))
        yield faults


def strip_identity(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """A response body or stream chunk without token ids (``missing_ids``), and without logprobs too
    (``missing_logprobs``), as servers that do not support them answer. Other kinds: unchanged."""
    if kind not in ("missing_ids", "missing_logprobs"):
        return body
    out = {k: v for k, v in body.items() if k != "prompt_token_ids"}
    choices = body.get("choices")
    if isinstance(choices, list):
        drop = {"token_ids", "prompt_token_ids"} | ({"logprobs"} if kind == "missing_logprobs" else set())
        out["choices"] = [{k: v for k, v in c.items() if k not in drop} if isinstance(c, dict) else c for c in choices]
    return out


def malformed(payload: bytes) -> bytes:
    """JSON cut short: what a broken proxy or a server bug delivers as a 200 body or an SSE chunk."""
    return payload[: max(1, len(payload) // 2)]
