"""A minimal reproducer of one canary record: what to attach to an engine's issue tracker.

``loadgen repro RUN_DIR --canary ID [--record N]`` (``loadgen/cli/repro.py``) writes a folder with the
exact request body of one canary record, the endpoint and server it was sent to, the load in flight
while it ran, the run's reference completion beside this one (token by token, first divergence
marked), a README in plain words and a scenario plus script that replay it with ``loadgen run``.

Numbering (``--record N``): the records of one canary, every phase (warm-up, baseline, sweep) and
failures included, in the report's canonical order (send time, then request id), counted from 1.
The reference and the first divergence are the report's own (``reports.analysis``: the modal
baseline completion, else the modal sweep completion; ``reports.identity``: ids, else token
strings, else text), never recomputed another way.

Pure: a loaded run, raw records and background rows in (the CLI reads them), file contents out. No
I/O, no printing. Never writes a header or an API key: only the body recorded as sent, and the
*name* of the key's environment variable.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from collectors.runfolder import RunData, top_gap
from loadgen.core.errors import UsageError
from loadgen.core.identity import first_divergence, identities
from loadgen.core.stats import num
from loadgen.core.wire.server_config import describe
from loadgen.core.wire.urls import api_path, origin
from reports import coresidency, mdtext
from reports import identity as ident
from reports.analysis import CanaryView, canonical_order
from reports.build import with_engine_join

EMBEDDED_PREFIX = ["-P", "-m", "loadgen.engine", "--host", "127.0.0.1", "--port", "0"]
CONTEXT = 5  # positions shown on each side of the first divergence in the README
FILES = (
    "README.md",
    "request.json",
    "endpoint.json",
    "in_flight.json",
    "completion.json",
    "side_by_side.md",
    "replay.toml",
    "replay.sh",
)


@dataclass(frozen=True)
class Choice:
    """One canary record picked out of a run, with the report's reference and divergence for it."""

    canary_id: str
    number: int  # 1-based among the canary's records, canonical order, every phase and status
    total: int  # records of this canary
    row: int  # row in the run's canary columns
    request_id: str
    file: str  # the canaries*.jsonl file it was read from
    ref_row: int | None
    ref_request_id: str | None
    ref_file: str | None
    reference: dict[str, Any]  # kind, identity, unit, completions, unique_completions, self_consistent
    first_divergence: int | None  # from the report's analysis (completions of baseline and sweep)
    compared: bool  # the record is one of the completions the report compares with the reference
    counts: dict[str, int]  # records, completions, diverged, errors, warmup
    co_residency: dict[str, Any]  # measured for this record (reports.coresidency)


def select(run: RunData, canary_id: str, record: int | None) -> Choice:
    """The ``record``-th record of ``canary_id`` (1-based), or by default its first divergent one.

    Raises ``UsageError`` naming the run folder, the option and what was expected."""
    where = str(run.run_dir)
    cols = with_engine_join(run)
    ids = cols.frame["canary_id"].astype(str).to_numpy()
    known = sorted(set(ids.tolist()))
    if canary_id not in known:
        listed = ", ".join(known) if known else "none: the run holds no canary record"
        raise UsageError(f"{where}: --canary {canary_id!r}: no such canary in this run (expected one of: {listed})")
    rows = canonical_order(cols, np.flatnonzero(ids == canary_id).astype(np.int64))
    c = CanaryView(cols, rows)
    total = len(rows)
    diverged = c.comp & (c.fd >= 0)
    counts = {
        "records": total,
        "completions": int(c.comp.sum()),
        "diverged": int(diverged.sum()) if c.ref is not None else 0,
        "errors": int((~c.ok).sum()),
        "warmup": int((c.phase == "warmup").sum()),
    }
    if record is None:
        hits = np.flatnonzero(diverged)
        if c.ref is None or len(hits) == 0:
            why = "no completion to take a reference from" if c.ref is None else "none diverged from the reference"
            raise UsageError(
                f"{where}: --canary {canary_id!r}: {why} ({counts['records']} records: {counts['completions']} "
                f"completions compared, {counts['diverged']} diverged, {counts['errors']} errors, "
                f"{counts['warmup']} warm-up); expected a divergent record, or pick one with --record N (1..{total})"
            )
        i = int(hits[0])
    else:
        if not 1 <= record <= total:
            raise UsageError(
                f"{where}: --record {record}: canary {canary_id!r} has {total} record(s) (expected 1..{total}, "
                "counted in send order, every phase and failure included)"
            )
        i = record - 1
    frame = cols.frame
    row = int(rows[i])
    ref_row = None if c.ref is None else int(rows[c.ref])
    ref = _reference_summary(c)
    return Choice(
        canary_id=canary_id,
        number=i + 1,
        total=total,
        row=row,
        request_id=str(frame["request_id"].iloc[row]),
        file=str(frame["file"].iloc[row]),
        ref_row=ref_row,
        ref_request_id=None if ref_row is None else str(frame["request_id"].iloc[ref_row]),
        ref_file=None if ref_row is None else str(frame["file"].iloc[ref_row]),
        reference=ref,
        first_divergence=int(c.fd[i]) if bool(c.comp[i]) and c.fd[i] >= 0 else None,
        compared=bool(c.comp[i]) and c.ref is not None,
        counts=counts,
        co_residency=_co_residency(c.co, i, frame, row),
    )


def _reference_summary(c: CanaryView) -> dict[str, Any]:
    pool = c.ref_pool
    return {
        "kind": c.ref_kind if c.ref is not None else None,
        "identity": c.identity.kind,
        "unit": c.identity.unit,
        "identity_note": ident.note(c.identity),
        "completions": int(pool.sum()),
        "unique_completions": len(np.unique(c.label[pool])) if pool.any() else 0,
        "self_consistent": (len(np.unique(c.label[pool])) == 1)
        if c.ref is not None and c.ref_kind == "baseline"
        else None,
    }


def _co_residency(m: coresidency.Measured, i: int, frame: Any, row: int) -> dict[str, Any]:
    samples = frame["engine_samples"].iloc[row] if "engine_samples" in frame else 0
    held = m.held[i]
    return {
        "source": coresidency.SOURCE_NAMES.get(int(m.source[i])),
        "min": coresidency.whole(m.lo[i]),
        "median": num(m.med[i]),
        "max": coresidency.whole(m.hi[i]),
        "expected": int(m.expected[i]),
        "held": None if np.isnan(held) else bool(held == 1.0),
        "metrics_samples": int(samples),
    }


def resolved_divergence(choice: Choice, record: dict[str, Any], reference: dict[str, Any] | None) -> int | None:
    """The first divergence of ``record`` from the reference: the report's where it compares the record
    (baseline and sweep completions), else (a warm-up record) by the same identity, per completion."""
    if choice.compared or reference is None or record.get("status") != "ok":
        return choice.first_divergence
    kind = choice.reference["identity"]
    mine = identities(record.get("token_ids"), record.get("tokens"), record.get("text"))
    theirs = identities(reference.get("token_ids"), reference.get("tokens"), reference.get("text"))
    if kind not in mine or kind not in theirs:
        return None
    return first_divergence(mine[kind], theirs[kind])


# ---- the load in flight -------------------------------------------------------------------------------


def lifetime(record: dict[str, Any]) -> tuple[float, float]:
    """Send time and end (send + own-clock latency; the send time itself where no latency was recorded)."""
    start = _f(record.get("sent_at"))
    lat = _f(record.get("latency_s"))
    return start, start + (lat if np.isfinite(lat) and lat > 0 else 0.0)


def overlaps(row: dict[str, Any], start: float, end: float) -> bool:
    """A background row whose send..end window overlaps ``[start, end)`` (no latency: a point at its send)."""
    b0, b1 = lifetime(row)
    if not np.isfinite(b0):
        return False
    return b0 < end and (b1 > start or (b1 == b0 and b0 >= start))


def in_flight(
    run: RunData, choice: Choice, record: dict[str, Any], background: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """What shared the endpoint with this record: the level and checks at send, the engine's own figures,
    and the background requests (and other canaries) whose lifetimes overlapped its own."""
    start, end = lifetime(record)
    rows = [r for r in background if overlaps(r, start, end)]
    rows.sort(key=lambda r: _f(r.get("sent_at")))
    shapes = []
    for r in rows:
        b0, b1 = lifetime(r)
        shapes.append(
            {
                "start_s": _round(b0 - start),  # relative to the canary's send
                "end_s": _round(b1 - start) if r.get("latency_s") is not None else None,
                "whole_lifetime": b0 <= start and b1 >= end,
                "level": r.get("level"),
                "phase": r.get("phase"),
                "status": r.get("status"),
                "error_kind": r.get("error_kind"),
                "prompt_tokens": r.get("prompt_tokens"),
                "completion_tokens": r.get("completion_tokens"),
                "shared_prefix": r.get("shared_prefix"),
                "ttft_s": r.get("ttft_s"),
            }
        )
    scenario_bg = run.manifest.scenario.get("background") if isinstance(run.manifest.scenario, dict) else None
    scenario_bg = scenario_bg if isinstance(scenario_bg, dict) else {}
    sizes = record.get("engine_batch_sizes")
    concurrent = _concurrent(rows, start, end)
    return {
        "window": {"sent_at": start, "ended_at": end, "latency_s": record.get("latency_s")},
        "level": record.get("level"),
        "phase": record.get("phase"),
        "burst": bool(record.get("burst")),
        "held_at_send": record.get("held_at_send"),
        "background_held_at_send": record.get("background_held_at_send"),
        "inflight_at_send": record.get("inflight_at_send"),
        "engine_batch_sizes": sizes if isinstance(sizes, list) else None,
        "co_residency": choice.co_residency,
        "engine_running_samples": _running_samples(run, start, end),
        "background": {
            "overlapping": len(shapes),
            "whole_lifetime": sum(1 for s in shapes if s["whole_lifetime"]),
            "concurrent_min": concurrent[0],
            "concurrent_max": concurrent[1],
            "prompt_tokens": _spread(s["prompt_tokens"] for s in shapes),
            "completion_tokens": _spread(s["completion_tokens"] for s in shapes),
            "shared_prefix": sum(1 for s in shapes if s["shared_prefix"] is True),
            # not recorded per request: the run's [background] settings every one of them was drawn from
            "stream": scenario_bg.get("stream"),
            "max_tokens_range": scenario_bg.get("max_tokens"),
            "prompt_words_range": scenario_bg.get("prompt_words"),
            "requests": shapes,
        },
        "other_canaries": _other_canaries(run, choice, start, end),
    }


def _concurrent(rows: list[dict[str, Any]], start: float, end: float) -> tuple[int, int]:
    """Fewest and most background requests in flight at any instant of ``[start, end)`` (a request
    without a recorded latency holds no slot)."""
    spans = [(b0, b1) for b0, b1 in map(lifetime, rows) if b1 > b0]
    level = sum(1 for b0, b1 in spans if b0 <= start < b1)
    events = sorted(
        [(b0, 1) for b0, _ in spans if start < b0 < end] + [(b1, -1) for _, b1 in spans if start < b1 < end]
    )
    lo = hi = level
    for _, step in events:
        level += step
        lo, hi = min(lo, level), max(hi, level)
    return lo, hi


def _other_canaries(run: RunData, choice: Choice, start: float, end: float) -> list[dict[str, Any]]:
    f = run.canaries.frame
    sent = f["sent_at"].to_numpy(dtype=np.float64)
    lat = np.nan_to_num(f["latency_s"].to_numpy(dtype=np.float64), nan=0.0)
    hit = (sent < end) & (sent + lat > start)
    hit[choice.row] = False
    return [
        {
            "canary_id": str(f["canary_id"].iloc[r]),
            "request_id": str(f["request_id"].iloc[r]),
            "phase": str(f["phase"].iloc[r]),
            "level": int(f["level"].iloc[r]),
            "start_s": _round(float(sent[r]) - start),
        }
        for r in np.flatnonzero(hit).tolist()
    ]


def _running_samples(run: RunData, start: float, end: float) -> list[list[float | None]]:
    """``[seconds after send, running]`` for each ``/metrics`` sample taken while the record was in flight."""
    if run.engine_t is None or run.engine_running is None:
        return []
    t = run.engine_t
    sel = (t >= start) & (t <= end)
    return [[_round(float(a) - start), num(b)] for a, b in zip(t[sel], run.engine_running[sel], strict=True)]


# ---- the reference beside this record -------------------------------------------------------------------


def side_by_side(
    record: dict[str, Any], reference: dict[str, Any] | None, first_div: int | None
) -> list[dict[str, Any]]:
    """Position by position: the reference's and this record's token id, token, logprob and top two
    alternatives, and ``mark`` ("first divergence" at the report's position, "after" past it)."""
    a = _seqs(reference or {})
    b = _seqs(record)
    width = max(a["n"], b["n"])
    out = []
    for p in range(width):
        ref_lp, lp = _at(a["logprobs"], p), _at(b["logprobs"], p)
        delta = lp - ref_lp if isinstance(lp, float) and isinstance(ref_lp, float) else None
        out.append(
            {
                "position": p,
                "reference_id": _at(a["ids"], p),
                "reference_token": _at(a["tokens"], p),
                "reference_logprob": ref_lp,
                "reference_top": _at(a["top"], p),
                "id": _at(b["ids"], p),
                "token": _at(b["tokens"], p),
                "logprob": lp,
                "top": _at(b["top"], p),
                "logprob_delta": delta,
                "mark": None
                if first_div is None
                else "first divergence"
                if p == first_div
                else "after"
                if p > first_div
                else None,
            }
        )
    return out


def _seqs(r: dict[str, Any]) -> dict[str, Any]:
    ids, tokens, lps, top = (r.get(k) for k in ("token_ids", "tokens", "logprobs", "top_logprobs"))
    seqs = [s for s in (ids, tokens, lps, top) if isinstance(s, list)]
    return {
        "ids": ids if isinstance(ids, list) else None,
        "tokens": tokens if isinstance(tokens, list) else None,
        "logprobs": lps if isinstance(lps, list) else None,
        "top": top if isinstance(top, list) else None,
        "n": max((len(s) for s in seqs), default=0),
    }


def _at(seq: list[Any] | None, p: int) -> Any:
    if seq is None or p >= len(seq):
        return None
    v = seq[p]
    return None if isinstance(v, float) and not np.isfinite(v) else v


# ---- the replay ---------------------------------------------------------------------------------------


def replay_scenario(run: RunData, choice: Choice, record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A scenario that sends this canary again with background shaped like the run's, at this record's
    level; and plain sentences on what it cannot carry over."""
    m = run.manifest
    sc = m.scenario if isinstance(m.scenario, dict) else {}
    notes: list[str] = []
    endpoint = {k: v for k, v in _dict(sc.get("endpoint")).items() if v is not None and k != "base_url"}
    if not endpoint:
        endpoint = {k: v for k, v in (("kind", m.endpoint.kind), ("model", m.endpoint.model)) if v is not None}
        if m.endpoint.api_key_env:
            endpoint["api_key_env"] = m.endpoint.api_key_env
    started = m.engine is not None  # loadgen started the engine: the replay starts it the same way
    if not started and m.endpoint.base_url:
        endpoint["base_url"] = m.endpoint.base_url
    canary = next(
        (dict(c) for c in sc.get("canaries") or [] if isinstance(c, dict) and c.get("id") == choice.canary_id), None
    )
    if canary is None:
        canary = canary_from_body(choice.canary_id, record)
        notes.append(
            "The run's manifest does not hold this canary's scenario entry: it was rebuilt from the request body."
        )
    if "seed" in canary and canary["seed"] is None:
        notes.append("The canary was sent without a seed; a scenario cannot say so, so the replay sends seed 0.")
    canary = {k: v for k, v in canary.items() if v is not None}
    sweep_in = _dict(sc.get("sweep"))
    level = int(record.get("level") or 0)
    burst = bool(record.get("burst"))
    sweep: dict[str, Any] = {
        k: sweep_in[k]
        for k in ("canaries_per_level", "warmup", "baseline", "canary_pace_s", "spawn_rate", "settle_timeout_s")
        if k in sweep_in and sweep_in[k] is not None
    }
    sweep["levels"] = [0] if burst or record.get("phase") != "sweep" else [level]
    if burst and level:
        sweep["burst"] = level
    labels = {k: v for k, v in m.labels.items() if k not in ("engine", "engine_args")}
    labels.update({"repro_of": str(m.run_id), "repro_record": f"{choice.canary_id}#{choice.number}"})
    scenario: dict[str, Any] = {
        "name": f"repro-{choice.canary_id}-{choice.number}",
        "description": f"Replay of canary {choice.canary_id} record {choice.number} of run {m.run_id}",
        "endpoint": endpoint,
        "canaries": [canary],
        "background": {k: v for k, v in _dict(sc.get("background")).items() if v is not None},
        "sweep": sweep,
        "labels": labels,
    }
    launcher = sc.get("launcher")
    if isinstance(launcher, dict) and started:
        scenario["launcher"] = {k: v for k, v in launcher.items() if v is not None}
    return scenario, notes


def canary_from_body(canary_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """A scenario canary entry from a recorded request body (runs whose manifest lacks the scenario)."""
    body = _dict(record.get("request"))
    spec: dict[str, Any] = {"id": canary_id, "kind": record.get("endpoint") or None}
    if isinstance(body.get("messages"), list):
        spec["messages"] = [
            {"role": str(x.get("role")), "content": str(x.get("content"))}
            for x in body["messages"]
            if isinstance(x, dict)
        ]
    else:
        spec["prompt"] = str(body.get("prompt", body.get("text", "")))  # "text": SGLang /generate
    sampling = _dict(body.get("sampling_params"))
    tokens = body.get("max_tokens", body.get("max_completion_tokens", sampling.get("max_new_tokens")))
    if isinstance(tokens, int):
        spec["max_tokens"] = tokens
    spec["seed"] = body.get("seed", sampling.get("sampling_seed"))
    spec["stream"] = bool(body.get("stream", False))
    return spec


def engine_args(run: RunData) -> list[str] | None:
    """The arguments the run's embedded engine was started with; None where loadgen did not start one."""
    engine = run.manifest.engine or {}
    cmd = engine.get("command")
    if engine.get("kind") != "embedded" or not isinstance(cmd, list) or cmd[: len(EMBEDDED_PREFIX)] != EMBEDDED_PREFIX:
        return None
    return [str(a) for a in cmd[len(EMBEDDED_PREFIX) :]]


def replay_script(run: RunData, choice: Choice, default_host: str | None, key_env: str | None = None) -> str:
    """``replay.sh``: ``loadgen run replay.toml`` against the URL given, else the run's own endpoint
    (or the engine loadgen started for it, with the same arguments)."""
    args = engine_args(run)
    lines = [
        "#!/bin/sh",
        f"# Replays canary {choice.canary_id!r}, record {choice.number} of run {run.manifest.run_id}, with loadgen:",
        "# the same request among background traffic shaped like the run's, at the record's level (replay.toml).",
        "# Usage: sh replay.sh [BASE_URL] [more `loadgen run` options, e.g. --out runs --canaries-per-level 4]",
        "#   LOADGEN: the command to run (default: loadgen)",
    ]
    if key_env:
        lines.append(
            f"#   the API key is read from ${key_env} (the scenario names the variable; no key is stored here)"
        )
    lines += [
        "set -eu",
        'here=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)',
        f"host={shlex.quote(default_host or '')}",
        'case "${1-}" in http://*|https://*) host=$1; shift ;; esac',
        'if [ -n "$host" ]; then',
        '  exec ${LOADGEN:-loadgen} run "$here/replay.toml" --host "$host" "$@"',
        "fi",
    ]
    extra = "".join(f" --engine-arg={shlex.quote(a)}" for a in args or [])
    if args is not None:
        lines.append("# no URL: start the embedded engine as the run did")
    lines.append(f'exec ${{LOADGEN:-loadgen}} run "$here/replay.toml"{extra} "$@"')
    return "\n".join(lines) + "\n"


def toml_text(data: dict[str, Any]) -> str:
    """``data`` as TOML (the subset a scenario uses: scalars, lists, tables, arrays of tables)."""
    out: list[str] = []
    _table(out, data, [])
    return "\n".join(out).strip() + "\n"


def _table(out: list[str], data: dict[str, Any], path: list[str]) -> None:
    subs: list[tuple[str, Any, bool]] = []
    for k, v in data.items():
        if isinstance(v, dict):
            subs.append((k, v, False))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v) and not path:
            subs.append((k, v, True))
        else:
            out.append(f"{_key(k)} = {_value(v)}")
    for k, v, many in subs:
        here = [*path, _key(k)]
        for item in v if many else [v]:
            out.append("")
            out.append(f"[[{'.'.join(here)}]]" if many else f"[{'.'.join(here)}]")
            _table(out, item, here)


def _key(k: str) -> str:
    return k if k and all((c.isalnum() and c.isascii()) or c in "_-" for c in k) else _string(k)


def _string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if np.isfinite(v) else ("nan" if np.isnan(v) else "inf" if v > 0 else "-inf")
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items() if x is not None) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


# ---- the folder --------------------------------------------------------------------------------------


def endpoint_info(run: RunData, record: dict[str, Any]) -> dict[str, Any]:
    """The endpoint and server as the manifest recorded them (never the key: only its variable's name)."""
    m = run.manifest
    settings = _dict(_dict(m.server.get("config")).get("settings"))
    kind = str(record.get("endpoint") or m.endpoint.kind or "completions")
    return {
        "run_id": m.run_id,
        "run_status": None if m.status is None else str(m.status),
        "tool": m.tool,
        "base_url": m.endpoint.base_url,
        "route": api_path(m.endpoint.base_url, kind) if m.endpoint.base_url else None,
        "endpoint_kind": kind,
        "model": m.endpoint.model,
        "api_key_env": m.endpoint.api_key_env,
        "server_version": m.server.get("version"),
        "server_settings": settings,
        "server_settings_summary": describe(settings),
        "features": m.features.get(kind, m.features),
        "engine": m.engine,
        "labels": dict(m.labels),
        "host": m.host,
    }


def completion_info(
    choice: Choice, record: dict[str, Any], reference: dict[str, Any] | None, first_div: int | None
) -> dict[str, Any]:
    keep = (
        "request_id", "phase", "level", "status", "error_kind", "error_message", "http_status", "sent_at",
        "latency_s", "ttft_s", "finish_reason", "text", "token_ids", "tokens", "logprobs", "top_logprobs",
        "usage", "cache_action", "worker",
    )  # fmt: skip
    return {
        "canary_id": choice.canary_id,
        "record": choice.number,
        "records": choice.total,
        "numbering": "1-based: this canary's records in send order (ties by request id), every phase and failure",
        "first_divergence": first_div,
        "unit": choice.reference["unit"],
        "identity": choice.reference["identity"],
        "reference": {**choice.reference, "record": None if reference is None else {k: reference.get(k) for k in keep}},
        "this": {k: record.get(k) for k in keep},
    }


def build_folder(
    run: RunData,
    choice: Choice,
    record: dict[str, Any],
    reference: dict[str, Any] | None,
    background: Iterable[dict[str, Any]],
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file of the reproducer (name -> bytes) and the replay scenario (for the CLI to validate)."""
    first_div = resolved_divergence(choice, record, reference)
    load = in_flight(run, choice, record, background)
    endpoint = endpoint_info(run, record)
    scenario, notes = replay_scenario(run, choice, record)
    default_host = scenario["endpoint"].get("base_url")
    table = side_by_side(record, reference, first_div if choice.reference["unit"] == "token" else None)
    files = {
        "request.json": _json(record.get("request") if isinstance(record.get("request"), dict) else {}),
        "endpoint.json": _json(endpoint),
        "in_flight.json": _json(load),
        "completion.json": _json(completion_info(choice, record, reference, first_div)),
        "side_by_side.md": side_by_side_md(choice, table, first_div).encode(),
        "replay.toml": (_toml_header(choice, run) + toml_text(scenario)).encode(),
        "replay.sh": replay_script(run, choice, default_host, scenario["endpoint"].get("api_key_env")).encode(),
    }
    files["README.md"] = readme(run, choice, record, reference, first_div, load, endpoint, table, notes).encode()
    return {name: files[name] for name in FILES}, scenario


def _toml_header(choice: Choice, run: RunData) -> str:
    return (
        f"# Replay of canary {choice.canary_id!r}, record {choice.number} of run {run.manifest.run_id}.\n"
        "# Run it with: sh replay.sh [BASE_URL]  (or: loadgen run replay.toml --host BASE_URL)\n\n"
    )


def _json(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def side_by_side_md(
    choice: Choice, table: list[dict[str, Any]], first_div: int | None, rows: range | None = None
) -> str:
    head = (
        "| position | reference id | reference token | reference logprob | id | token | logprob | Δ logprob | |\n"
        "|---:|---:|---|---:|---:|---|---:|---:|---|\n"
    )
    body = []
    for r in table if rows is None else [table[i] for i in rows if 0 <= i < len(table)]:
        mark = "**← first divergence**" if r["mark"] == "first divergence" else ""
        body.append(
            f"| {r['position']} | {_cell(r['reference_id'])} | {mdtext.code(_tok(r['reference_token']))} | "
            f"{_lp(r['reference_logprob'])} | {_cell(r['id'])} | {mdtext.code(_tok(r['token']))} | "
            f"{_lp(r['logprob'])} | "
            f"{_lp(r['logprob_delta'])} | {mark} |"
        )
    if rows is not None:
        return head + "\n".join(body) + "\n"
    unit = choice.reference["unit"]
    where = "none" if first_div is None else f"{unit} {first_div}"
    intro = (
        f"# Canary `{choice.canary_id}` record {choice.number}: beside the reference\n\n"
        f"Compared by {choice.reference['identity']}; first divergence: {where}. Δ logprob is this record's logprob "
        "minus the reference's at the same position (0 means bitwise equal).\n\n"
    )
    return intro + head + "\n".join(body) + "\n"


def _tok(v: Any) -> str | None:
    return None if v is None else str(v)


def _cell(v: Any) -> str:
    return "—" if v is None else mdtext.text(v)


def _lp(v: Any) -> str:
    if isinstance(v, float | int) and not isinstance(v, bool):
        return "0" if v == 0 else f"{v:.6g}"
    return "—"


_FILES_TABLE = """| file | what it holds |
|---|---|
| `request.json` | the request body as sent |
| `endpoint.json` | base URL, route, model, server version and stated settings, protocol features, labels \
(the API key's variable name only, never its value) |
| `in_flight.json` | level, held flags, engine batch sizes and running samples, measured co-residency, \
overlapping background requests and other canaries |
| `completion.json` | this record and the reference record: ids, tokens, logprobs, top alternatives, text, usage |
| `side_by_side.md` | both completions position by position, first divergence marked |
| `replay.toml`, `replay.sh` | the replay scenario and the command that runs it |"""


def readme(
    run: RunData,
    choice: Choice,
    record: dict[str, Any],
    reference: dict[str, Any] | None,
    first_div: int | None,
    load: dict[str, Any],
    endpoint: dict[str, Any],
    table: list[dict[str, Any]],
    notes: list[str],
) -> str:
    """``README.md``: the reproducer in plain words. Every server-provided string goes through ``mdtext``."""
    t = mdtext.text
    m = run.manifest
    level = record.get("level")
    out = [f"# Reproducer: canary `{choice.canary_id}`, record {choice.number} of {choice.total}", ""]
    out += [
        f"Run `{t(m.run_id)}` sent one fixed temperature-0 request (the canary `{choice.canary_id}`) again and "
        "again while background traffic kept the endpoint busy. This folder holds record "
        f"{choice.number} of the canary's {choice.total} (numbered in send order from 1, warm-up, baseline and "
        f"failed records included), sent in phase {t(record.get('phase'))} at level {t(level)}: "
        f"{_level_words(record)}",
        "",
        _outcome(choice, record, reference, first_div, table),
        "",
        *_sent_section(endpoint),
        *_endpoint_section(m, endpoint),
        *_load_section(record, load),
        "## The reference",
        "",
        _reference_words(choice, reference),
        "",
    ]
    if choice.reference["unit"] == "token" and first_div is not None and table:
        lo, hi = max(0, first_div - CONTEXT), min(len(table), first_div + CONTEXT + 1) - 1
        out += [
            f"## Where they part (positions {lo}..{hi})",
            "",
            side_by_side_md(choice, table, first_div, range(lo, hi + 1)),
            "Every position is in `side_by_side.md`; the full records (ids, tokens, logprobs, top alternatives, "
            "text) in `completion.json`.",
            "",
        ]
    else:
        out += ["Both completions, position by position: `side_by_side.md`; in full: `completion.json`.", ""]
    replay_level = load["level"] if load["phase"] == "sweep" else 0
    out += [
        "## Replay it",
        "",
        "```sh",
        "sh replay.sh http://HOST:PORT     # the endpoint to replay against",
        "```",
        "",
        "It runs `loadgen run replay.toml`: this canary, unchanged, among background traffic drawn from the run's "
        f"own `[background]` settings, at level {t(replay_level)}, with the run's warm-up and baseline (so the "
        "replay has its own reference), and writes a new run folder with its report. Whether a given replay "
        "diverges depends on what the engine happens to batch together: read its report's `diverged` column.",
    ]
    args = engine_args(run)
    if args is not None:
        out.append(f"Without a URL it starts the embedded engine with the run's arguments (`{t(' '.join(args))}`).")
    for n in notes:
        out += ["", f"Note: {t(n)}"]
    tool = f"{t(m.tool.get('name', 'loadgen'))} {t(m.tool.get('version'))}"
    out += ["", "## Files", "", _FILES_TABLE, "", f"Made by `loadgen repro` ({tool}) from run `{t(m.run_id)}`."]
    return "\n".join(out) + "\n"


def _outcome(
    choice: Choice,
    record: dict[str, Any],
    reference: dict[str, Any] | None,
    first_div: int | None,
    table: list[dict[str, Any]],
) -> str:
    t = mdtext.text
    unit = choice.reference["unit"]
    if record.get("status") != "ok":
        return f"This request failed ({t(record.get('error_kind'))}: {t(record.get('error_message'))})."
    if reference is None:
        return "No reference completion exists for this canary (no completion to take one from)."
    if first_div is None:
        return "This completion is identical to the run's reference completion."
    pos = table[first_div] if unit == "token" and first_div < len(table) else None
    if pos is None:
        return f"This completion differs from the run's reference completion from {unit} {first_div} on."
    gap = num(top_gap(pos["reference_top"]))
    gap_s = f" The reference's top two candidates there were {gap:.3g} nats apart." if gap is not None else ""
    return (
        "The same temperature-0 request came back different from the run's reference completion from token "
        f"{first_div} on: the reference has {mdtext.code(_tok(pos['reference_token']))}, this one "
        f"{mdtext.code(_tok(pos['token']))}.{gap_s}"
    )


def _sent_section(endpoint: dict[str, Any]) -> list[str]:
    t = mdtext.text
    route = str(endpoint["route"] or "/v1/completions")
    base = str(endpoint["base_url"] or "http://127.0.0.1:8000")
    auth = f' -H "Authorization: Bearer ${endpoint["api_key_env"]}"' if endpoint["api_key_env"] else ""
    return [
        "## What was sent",
        "",
        "`request.json` is the exact JSON body of this request as sent (headers are never recorded). It went to "
        f"`POST {t(route)}` on `{t(base)}`, model `{t(endpoint['model'])}`. To send it once by hand:",
        "",
        "```sh",
        f"curl -s {shlex.quote(origin(base) + route)} -H 'Content-Type: application/json' -d @request.json{auth}",
        "```",
        "",
        "Sent alone, as the baseline was, it is expected to return the reference (below): the difference comes "
        "from what the engine batched beside it.",
        "",
    ]


def _endpoint_section(m: Any, endpoint: dict[str, Any]) -> list[str]:
    t = mdtext.text
    out = [
        "## The endpoint",
        "",
        f"- server version: {t(endpoint['server_version'])}",
        f"- settings the server stated: {t(endpoint['server_settings_summary'] or 'none')} (all in `endpoint.json`)",
        f"- protocol features the probe settled on: {t(_features(endpoint['features']))}",
    ]
    if m.engine:
        cmd = m.engine.get("command")
        shown = " ".join(map(str, cmd)) if isinstance(cmd, list) else cmd
        out.append(f"- engine started by loadgen: {t(m.engine.get('kind'))}, command `{t(shown)}`")
    return [*out, ""]


def _load_section(record: dict[str, Any], load: dict[str, Any]) -> list[str]:
    t = mdtext.text
    bg, co = load["background"], load["co_residency"]
    held = record.get("held_at_send")
    held_s = (
        {
            True: " (held at send: every background slot had a request the server had started)",
            False: " (not held at send: some background slot had no started request)",
        }.get(held, "")
        if isinstance(held, bool)
        else ""
    )
    return [
        "## What was in flight",
        "",
        f"- level {t(record.get('level'))}{held_s}",
        f"- requests in flight from the sending process at send: {t(record.get('inflight_at_send'))}",
        "- measured co-residency (other requests the engine ran beside it over its life, from "
        f"{t(co['source'] or 'nothing: unmeasured')}): min {t(co['min'])}, median {t(co['median'])}, "
        f"max {t(co['max'])}; the level promised {co['expected']}",
        f"- engine batch sizes at its steps (this request included): {t(_short(load['engine_batch_sizes']))}",
        f"- background requests whose lifetime overlapped its own: {bg['overlapping']} ({bg['whole_lifetime']} for "
        f"the whole of it; {bg['concurrent_min']} to {bg['concurrent_max']} at once), prompt tokens "
        f"{t(_mmm(bg['prompt_tokens']))}, completion tokens {t(_mmm(bg['completion_tokens']))}, streamed: "
        f"{t(bg['stream'])}, max_tokens drawn from {t(bg['max_tokens_range'])}",
        f"- other canaries in flight with it: {len(load['other_canaries'])}",
        "",
        "Each overlapping request's shape and timing (relative to this one's send) is in `in_flight.json`.",
        "",
    ]


def _level_words(record: dict[str, Any]) -> str:
    level = record.get("level")
    if record.get("burst"):
        return f"one of {level} identical copies fired at once."
    if record.get("phase") == "warmup":
        return "a warm-up request, sent alone before the baseline."
    if record.get("phase") == "baseline":
        return "a baseline request, sent alone."
    return f"{level} background user(s) each kept one request in flight while it ran."


def _reference_words(choice: Choice, reference: dict[str, Any] | None) -> str:
    ref = choice.reference
    if reference is None:
        return "There is none: the canary has no completion to take one from."
    how = (
        "the most common completion of the baseline (the canaries sent alone before the load), earliest first on a tie"
        if ref["kind"] == "baseline"
        else "the most common completion of the sweep (the run had no baseline)"
    )
    agree = ""
    if ref["self_consistent"] is False:
        agree = f" The baseline disagreed with itself ({ref['unique_completions']} unique completions)."
    note = f" {mdtext.text(ref['identity_note'])}." if ref.get("identity_note") else ""
    return (
        f"The reference is {how}: request `{mdtext.text(choice.ref_request_id)}`, one of {ref['completions']} "
        f"completions it was chosen from. Completions are compared by {ref['identity']} "
        f"(the report's rule: token ids, else token strings, else text).{agree}{note}"
    )


def _features(features: Any) -> str:
    inner = features.get("features") if isinstance(features, dict) else None
    if not isinstance(inner, dict):
        return "not recorded"
    return ", ".join(f"{k}={v}" for k, v in inner.items() if v not in (False, None, 0)) or "none"


def _mmm(s: dict[str, Any] | None) -> str:
    return "—" if s is None else f"{s['min']}/{s['median']}/{s['max']} (min/median/max)"


def _short(sizes: list[Any] | None) -> str:
    if not sizes:
        return "not reported by the engine"
    shown = ", ".join(str(x) for x in sizes[:24])
    return f"{shown}{', …' if len(sizes) > 24 else ''} ({len(sizes)} steps)"


def _spread(values: Iterable[Any]) -> dict[str, Any] | None:
    vals = np.array(
        [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)], dtype=np.float64
    )
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return None
    return {
        "min": coresidency.whole(vals.min()),
        "median": float(np.median(vals)),
        "max": coresidency.whole(vals.max()),
    }


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _f(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else float("nan")


def _round(v: float) -> float:
    return round(v, 4)
