"""The cold-boot reading: per boot, does request 1 differ from requests 2..N, and do 2..N agree?

Why: the D3 question ("is the first request after boot different, and is that the cache?") is
answered per boot, not per concurrency level, so it gets its own summary beside ``report.json``:
``summarise`` turns cold-boot canary records into ``coldboot.json``'s object, ``render_markdown``
into ``coldboot.md``, ``matrix_table`` puts several cells' summaries in one D3-style table and
``compared`` gives the part of a summary a comparison keeps (``comparison.json``'s ``coldboot``).

Completions are compared by one identity per canary (token ids, else token strings, else text,
as docs/design.md says), never mixed. Failed requests are counted, never compared; a boot with a failed
request is not counted in "first differs, rest agree". Pure: records in, ``ColdBootSummary`` (the
shape of ``coldboot.json``, typed here) and text out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TypedDict

from collectors.read.runfolder import cached_tokens
from loadgen.core.identity import Completion, IdentityKind, choose_kind, first_divergence, identities
from loadgen.core.record import CanaryRecord
from reports.model.comparison import ComparedColdBoot

SUMMARY_SCHEMA = 1


class BootReading(TypedDict):
    """One boot of one canary: each request's completion by its label (``c1``, ``c2``...; None: failed), in
    order."""

    boot: int
    requests: int
    errors: int
    completions: list[str | None]
    cached_prompt_tokens: list[int | None]
    first_differs: bool | None  # None: fewer than two answers, or a failed request
    rest_agree: bool | None
    first_differs_rest_agree: bool | None
    first_divergence: int | None


class ColdBootCanary(TypedDict):
    id: str
    identity: IdentityKind
    boots_counted: int
    boots_with_errors: int
    first_differs_rest_agree: int
    first_differs: int
    rest_disagree: int
    distinct_first: int
    distinct_warm: int
    distinct_all: int
    completions: dict[str, str | None]  # label (c1, c2...) -> text of that completion
    boots: list[BootReading]


class ColdBootSummary(TypedDict):
    """``coldboot.json``, schema 1."""

    schema: int
    boots: int
    requests_per_boot: int
    canaries: list[ColdBootCanary]


def choose_identity(records: Sequence[CanaryRecord]) -> IdentityKind:
    ok = [r for r in records if r.status == "ok"]
    return choose_kind(len(ok), sum(r.token_ids is not None for r in ok), sum(r.tokens is not None for r in ok))


def identity_of(record: CanaryRecord, kind: IdentityKind) -> Completion:
    return identities(record.token_ids, record.tokens, record.text).get(kind, ())


def completion_label(index: int) -> str:
    """c1, c2, ...: short names for distinct completions in tables; never a letter, since a comparison names its
    runs A, B, ... and shows both in one table."""
    return f"c{index + 1}"


def _boot_entry(boot: int, rows: list[CanaryRecord], ids: dict[Completion, str], kind: IdentityKind) -> BootReading:
    rows = sorted(rows, key=lambda r: (r.boot_index or 0, r.sent_at))
    idents = [identity_of(r, kind) if r.status == "ok" else None for r in rows]
    for ident in idents:
        if ident is not None and ident not in ids:
            ids[ident] = completion_label(len(ids))
    entry: BootReading = {
        "boot": boot,
        "requests": len(rows),
        "errors": sum(r.status != "ok" for r in rows),
        "completions": [None if i is None else ids[i] for i in idents],
        "cached_prompt_tokens": [cached_tokens(r.usage) for r in rows],
        "first_differs": None,
        "rest_agree": None,
        "first_differs_rest_agree": None,
        "first_divergence": None,
    }
    if len(idents) >= 2 and all(i is not None for i in idents):
        first, rest = idents[0], idents[1:]
        assert first is not None
        entry["first_differs"] = first not in rest
        entry["rest_agree"] = len(set(rest)) == 1
        entry["first_differs_rest_agree"] = entry["first_differs"] and entry["rest_agree"]
        if entry["first_differs"]:
            warm = Counter(rest).most_common(1)[0][0]
            assert warm is not None
            entry["first_divergence"] = first_divergence(first, warm)
    return entry


def summarise_canary(canary_id: str, records: Sequence[CanaryRecord]) -> ColdBootCanary:
    kind = choose_identity(records)
    ids: dict[Completion, str] = {}
    by_boot: dict[int, list[CanaryRecord]] = {}
    for r in records:
        by_boot.setdefault(r.boot or 0, []).append(r)
    boots = [_boot_entry(b, by_boot[b], ids, kind) for b in sorted(by_boot)]
    counted = [b for b in boots if b["first_differs_rest_agree"] is not None]
    firsts = {b["completions"][0] for b in counted}
    warm = {c for b in counted for c in b["completions"][1:]}
    texts = {
        name: next((r.text for r in records if r.status == "ok" and identity_of(r, kind) == ident), None)
        for ident, name in ids.items()
    }
    return {
        "id": canary_id,
        "identity": kind,
        "boots_counted": len(counted),
        "boots_with_errors": sum(b["errors"] > 0 for b in boots),
        "first_differs_rest_agree": sum(bool(b["first_differs_rest_agree"]) for b in counted),
        "first_differs": sum(bool(b["first_differs"]) for b in counted),
        "rest_disagree": sum(not b["rest_agree"] for b in counted),
        "distinct_first": len(firsts),
        "distinct_warm": len(warm),
        "distinct_all": len(ids),
        "completions": texts,  # label -> text of that completion
        "boots": boots,
    }


def summarise(records: Sequence[CanaryRecord], *, boots: int, requests: int) -> ColdBootSummary:
    """The cold-boot summary of a run's records (those without a ``boot`` number are ignored)."""
    studied = [r for r in records if r.boot is not None]
    order = list(dict.fromkeys(r.canary_id for r in studied))
    return {
        "schema": SUMMARY_SCHEMA,
        "boots": boots,
        "requests_per_boot": requests,
        "canaries": [summarise_canary(cid, [r for r in studied if r.canary_id == cid]) for cid in order],
    }


def fraction(entry: ColdBootCanary) -> str:
    return f"{entry['first_differs_rest_agree']} / {entry['boots_counted']}"


def render_markdown(summary: ColdBootSummary, *, title: str = "Cold boot: the first request versus the rest") -> str:
    lines = [
        f"## {title}",
        "",
        f"{summary['boots']} boots (a fresh engine process each) x {summary['requests_per_boot']} one-at-a-time "
        "requests per canary per boot. c1, c2, ... name distinct completions in order of first appearance; "
        "`x` is a failed request.",
        "",
        "| canary | boots where the first request differs and the rest agree | distinct first | distinct warm "
        "| boots with errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in summary["canaries"]:
        lines.append(
            f"| `{c['id']}` | {fraction(c)} | {c['distinct_first']} | {c['distinct_warm']} | {c['boots_with_errors']} |"
        )
    for c in summary["canaries"]:
        lines += [
            "",
            f"### Canary `{c['id']}` (compared by {c['identity']})",
            "",
            "| boot | completions in order | first differs | rest agree | first divergence | cached prompt tokens |",
            "|---:|---|---|---|---:|---|",
        ]
        for b, seq in zip(c["boots"], sequences(c), strict=True):
            cached = " ".join("?" if t is None else str(t) for t in b["cached_prompt_tokens"])
            lines.append(
                f"| {b['boot']} | {seq} | {_yes(b['first_differs'])} | {_yes(b['rest_agree'])} "
                f"| {_num(b['first_divergence'])} | {cached} |"
            )
    return "\n".join(lines) + "\n"


def matrix_table(cells: Sequence[tuple[str, ColdBootSummary]]) -> str:
    """Cell x canary: boots where the first request differs and the rest agree (the D3 table)."""
    ids = list(dict.fromkeys(c["id"] for _, s in cells for c in s["canaries"]))
    head = " | ".join(f"`{i}`: first differs, rest agree | `{i}`: distinct first / warm" for i in ids)
    lines = [f"| cell | {head} |", "|---|" + "---:|---:|" * len(ids)]
    for name, summary in cells:
        entries = {c["id"]: c for c in summary["canaries"]}
        row = []
        for i in ids:
            c = entries.get(i)
            row += ["—", "—"] if c is None else [fraction(c), f"{c['distinct_first']} / {c['distinct_warm']}"]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def sequences(canary: ColdBootCanary) -> list[str]:
    """Each boot's completions in order, ``x`` for a failed request: ``c1 c2 c2 c2``. Named again by first
    appearance (what ``summarise`` stores), so that a summary written when completions were named A, B, ... reads
    the same as a new one beside a comparison's run letters."""
    names: dict[str, str] = {}
    for b in canary["boots"]:
        for x in b["completions"]:
            if x is not None:
                names.setdefault(x, completion_label(len(names)))
    return [" ".join("x" if x is None else names[x] for x in b["completions"]) for b in canary["boots"]]


def compared(run: str, summary: ColdBootSummary) -> ComparedColdBoot:
    """What a comparison keeps of a run's cold-boot summary: the counts and each boot's sequence."""
    return {
        "run": run,
        "boots": summary["boots"],
        "requests_per_boot": summary["requests_per_boot"],
        "canaries": [
            {
                "id": c["id"],
                "boots_counted": c["boots_counted"],
                "first_differs_rest_agree": c["first_differs_rest_agree"],
                "distinct_first": c["distinct_first"],
                "distinct_warm": c["distinct_warm"],
                "boots_with_errors": c["boots_with_errors"],
                "sequences": sequences(c),
            }
            for c in summary["canaries"]
        ],
    }


def _yes(v: bool | None) -> str:
    return "—" if v is None else ("yes" if v else "no")


def _num(v: int | None) -> str:
    return "—" if v is None else str(v)
