"""``README.md`` of a reproducer: the record, how it came out, what was sent, the endpoint, the load in
flight, the reference and the replay, in plain words.

It words what the other ``reports.repro`` modules found (the choice, the load, the side by side, the
replay's notes) and never re-derives a reference, a divergence or an overlap. Every server-provided
string goes through ``mdtext``: a model id or a completion may be hostile Markdown. No command it shows sends
anything where the run folder says: the curl line and the replay take the URL and the key from whoever runs
them (the run's own URL is often gone: the curl goes to ``$BASE_URL``, after the line that starts the run's
embedded engine where the run had one, its arguments quoted one by one), and the engine a replay would start is
shown as its approval shows it (an indented code block: the
line as it is, byte for byte, which ``loadgen.launchers.approval`` keeps to one line of plain characters).
"""

from __future__ import annotations

import shlex
from typing import Any

from collectors.read.runfolder import RunData, top_gap
from loadgen.core.errors import visible
from loadgen.core.scenario import APPROVE_ENV
from loadgen.core.stats import num
from reports.render import mdtext
from reports.repro.choice import Choice
from reports.repro.replay import engine_args
from reports.repro.side_by_side import side_by_side_md, token_text

CONTEXT = 5  # positions shown on each side of the first divergence in the README


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
    engine: str | None = None,
) -> str:
    """``README.md``: the reproducer in plain words. Every server-provided string goes through ``mdtext``;
    ``engine``: the command of the engine the replay starts without a URL, as its approval shows it."""
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
        *_sent_section(run, endpoint),
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
        "sh replay.sh http://HOST:PORT                       # the endpoint to replay against",
        "sh replay.sh http://HOST:PORT --api-key-env MY_KEY  # one that wants a key: name the variable holding yours",
        "```",
        "",
        "It runs `loadgen run replay.toml`: this canary, unchanged, among background traffic drawn from the run's "
        f"own `[background]` settings, at level {t(replay_level)}, with the run's warm-up and baseline (so the "
        "replay has its own reference), and writes a new run folder with its report. Whether a given replay "
        "diverges depends on what the engine happens to batch together: read its report's `diverged` column.",
        "",
        "Requests go only to the URL you give: `replay.toml` holds no URL, no server address and no key variable "
        "of the run's, and no key is read unless you name its variable.",
    ]
    if engine is not None:
        out += [
            "",
            "Without a URL it starts the engine the run started, this command, chosen by whoever made the run "
            "folder (read it first):",
            "",
            f"    {engine}",
            "",
            f"It starts only with your approval of exactly that command: `sh replay.sh` shows it with the value "
            f"that approves it, its SHA-256; run again with `{APPROVE_ENV}` set to that value to start it.",
        ]
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
        f"{first_div} on: the reference has {mdtext.code(token_text(pos['reference_token']))}, this one "
        f"{mdtext.code(token_text(pos['token']))}.{gap_s}"
    )


SERVE_PORT = 8000  # where the README's ``loadgen serve`` listens (the embedded engine's own default)


def _sent_section(run: RunData, endpoint: dict[str, Any]) -> list[str]:
    """What was sent and a curl line that sends it again. The run's endpoint may be gone (an engine loadgen
    started is stopped with its run), so the curl goes to ``$BASE_URL``, a live endpoint: the embedded engine
    started first by the line above it (the run's arguments), an engine the reader starts, or the run's own
    if it still answers; never the recorded URL by itself (a run folder can name any host)."""
    t = mdtext.text
    route = str(endpoint["route"] or "/v1/completions")
    base = str(endpoint["base_url"] or "http://127.0.0.1:8000")
    started = run.manifest.engine
    args = engine_args(run)
    if args is not None:
        gone = (
            "an engine loadgen started for the run and stopped after it: that address is gone. Start the same "
            "engine first (the embedded engine with the run's arguments, read from its manifest: read them "
            "first), in another terminal, and send the request to it once it prints its `READY` line"
        )
        first = [
            # one line whatever the manifest holds: each argument quoted and its control characters escaped
            " ".join(["loadgen", "serve", "--port", str(SERVE_PORT), *(shlex.quote(visible(a, keep="")) for a in args)])
            + "  # in another terminal: the run's engine",
            f"BASE_URL=http://127.0.0.1:{SERVE_PORT}",
        ]
    elif started:
        gone = (
            f"an engine loadgen started for the run ({t(started.get('kind'))}) and stopped after it: that address "
            'is gone. Start that engine first (its command is under "The endpoint" below and in `replay.toml`\'s '
            "`[launcher]`) and send the request to where it listens"
        )
        first = ["BASE_URL=http://HOST:PORT  # where the engine you started listens"]
    else:
        gone = (
            "the run's endpoint, which loadgen did not start: it may be gone. Send the request to a live endpoint, "
            "that one if it still answers or an engine you start first"
        )
        first = ["BASE_URL=http://HOST:PORT  # a live endpoint: the run's, above, only if it still answers"]
    return [
        "## What was sent",
        "",
        "`request.json` is the exact JSON body of this request as sent (headers are never recorded). It went to "
        f"`POST {t(route)}` on `{t(base)}`, model `{t(endpoint['model'])}`: {gone} (where it wants a key, add "
        '`-H "Authorization: Bearer $MY_KEY"`, the variable holding yours):',
        "",
        "```sh",
        *first,
        # one line whatever the recorded route holds: a line feed could close the code block
        f"curl -s \"$BASE_URL\"{shlex.quote(visible(route, keep=''))} -H 'Content-Type: application/json' "
        "-d @request.json",
        "```",
        "",
        "Sent alone, as the baseline was, it is expected to return the reference (below): the difference comes "
        "from what the engine batched beside it. On a freshly started engine send it twice and read the second "
        "answer: the run's baseline came after its warm-up, and a first request after a start can differ.",
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
