"""The seed contracts as a person reads them (``reports.render.seeds``): report.md's and report.html's table and
the end-of-run summary, on contracts built by hand, with hostile text in them."""

from __future__ import annotations

from typing import Any

from loadgen.cli.progress.summary import summary_lines
from reports.model.seeds import Rate, SeedContracts
from reports.render.html import render_html
from reports.render.md import canary_section, render_markdown
from reports.render.seeds import rows, sampled_forks, seeds_html, seeds_md, seeds_summary
from tests.reports.runkit import partial_report

HOSTILE = "chat<script>alert(1)</script>\x1b]0;title\x07|x"


def rate(k: int, n: int, level: int | None = None) -> Rate:
    return {"concurrency": level, "n": n, "k": k, "rate": k / n if n else None, "ci95": [0.0, 0.5] if n else None}


def contracts(*, broken: bool) -> SeedContracts:
    k = 3 if broken else 0
    return {
        "same_seed": [
            {
                "canary": "roll.seed1",
                "seed": 1,
                "levels": [rate(0, 4, 0), rate(0, 4, 8)],
                "overall": rate(0, 8),
                "logits_moved": 0,
                "draw_only": 0,
                "unclassified": 0,
            }
        ],
        "seeds": [
            {
                "family": "roll",
                "route": HOSTILE,
                "seeds": [1, 2],
                "baseline": rate(0, 2),
                "levels": [rate(0, 4, 0), rate(k, 4, 8)],
                "overall": rate(k, 8),
                "verdict": f"seeds collided on {HOSTILE}" if broken else "seeds honoured",
            }
        ],
        "choices": [],
        "routes": [],
    }


def test_a_row_is_broken_when_any_scope_counts_a_completion() -> None:
    assert [r.broken for r in rows(contracts(broken=True))] == [False, True]
    assert not any(r.broken for r in rows(contracts(broken=False)))
    only_baseline = contracts(broken=False)
    only_baseline["seeds"][0]["baseline"] = rate(1, 2)
    assert [r.broken for r in rows(only_baseline)] == [False, True]


def test_summary_names_each_broken_contract_or_says_they_held() -> None:
    assert seeds_summary(None) == []
    assert seeds_summary(contracts(broken=False)) == ["Seed contracts held: none of 2 broken at any level."]
    (line,) = seeds_summary(contracts(broken=True))
    assert line.startswith(f"Seed contract broken: different seeds, same completion: roll on {HOSTILE}: 3/8")
    report: Any = {"canaries": [], "run": {}, "seed_contracts": contracts(broken=True)}
    (shown,) = [s for s in summary_lines(report) if s.startswith("Seed contract")]
    assert "\x1b" not in shown and "\x07" not in shown and "\\x1b]0;title" in shown


def test_markdown_and_html_escape_what_the_report_carries() -> None:
    md = "\n".join(seeds_md(contracts(broken=True)))
    assert "<script>" not in md and "\x1b" not in md
    (row,) = [line for line in md.splitlines() if line.startswith("| different seeds")]
    assert row.count(" | ") == 5  # the route's "|" cannot open a seventh cell
    html = seeds_html(contracts(broken=True))
    assert "<script>" not in html and "&lt;script&gt;" in html and "\x1b" not in html
    assert html.count('<tr class="warn">') == 1
    assert seeds_md(None) == [] and seeds_html(None) == ""


def test_the_pages_carry_the_table() -> None:
    base: Any = {
        "run": {"id": "r", "labels": {}},
        "canaries": [],
        "input": {"skipped_lines": 0},
        "seed_contracts": contracts(broken=True),
    }
    page = render_html(partial_report(**base))
    assert "<h2>Seed contracts</h2>" in page and page.count('<tr class="warn">') == 1
    assert "### Seed contracts" in render_markdown(partial_report(**base))


def test_a_sampled_canarys_forks_are_classed_by_its_seed_contract_not_the_near_tie_test() -> None:
    found = contracts(broken=False)
    same = found["same_seed"][0]
    assert sampled_forks(found, "roll.seed1") is None  # nothing forked
    same["overall"], same["logits_moved"], same["draw_only"] = rate(3, 8), 2, 1
    line = sampled_forks(found, "roll.seed1")
    assert line is not None and "of 3 over the sweep, 2 after a chosen-token logprob moved" in line
    assert "1 with every logprob before the fork unchanged" in line and sampled_forks(found, "greedy") is None
    entry: Any = {"id": "roll.seed1", "forks": [], "overall": {"diverged": 3}, "levels": [], "verdict": "v"}
    entry["reference"] = {"kind": "baseline", "identity": "token_ids", "length": 3, "unit": "token"}
    md = "\n".join(canary_section(entry, "###", line))
    assert line in md and "near-tie" not in md.replace(line, "")
    assert "near-tie" in "\n".join(canary_section(entry, "###"))  # a greedy canary keeps its near-tie table
