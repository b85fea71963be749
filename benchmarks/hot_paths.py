"""Per-call cost of the load path's own steps, and of each proposed fix beside the code it replaces.

Why: the profile (``profile_tool.py``) names the functions; this script gives each a price in
microseconds on one core, today's version and the patched one (``patches.py``) in the same
process, so a fix's before/after is a measured ratio, not a guess. It also checks that F2 writes
byte-identical lines. No network, no gevent.

Run: ``python benchmarks/hot_paths.py [--quick]``.
"""

from __future__ import annotations

import argparse
import timeit
import uuid
from collections.abc import Callable

import orjson
import patches
from canned import completion_body
from harness import canary_record, command_line, median, table

from loadgen.background import BackgroundPrompts
from loadgen.dialects import Features, build_body, parse_body
from loadgen.scenario import Background


def per_call_us(fn: Callable[[], object], repeat: int, number: int) -> float:
    return median([t / number * 1e6 for t in timeit.repeat(fn, repeat=repeat, number=number)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    repeat, number = (3, 500) if args.quick else (7, 2000)
    print(f"command: {command_line()}\nmedian of {repeat} x {number} calls, microseconds per call, one core\n")
    spec = Background(seed=7, prompt_words=(8, 120), max_tokens=(16, 96), shared_prefix_share=0.25)
    rich = completion_body(64, 2)
    plain = completion_body(64, 0)
    feats = Features(return_token_ids=True, logprobs=True, top_logprobs=2, tokens_as_ids=False, include_usage=True)
    record = canary_record(parse_body("completions", rich))
    if orjson.dumps(record.to_dict()) != orjson.dumps(record):
        raise SystemExit("F2 would change the bytes written: orjson.dumps(record) != orjson.dumps(record.to_dict())")
    rows = []

    patches.restore()
    before = BackgroundPrompts(spec, 0)
    patches.apply("F1")
    after = BackgroundPrompts(spec, 0)
    patches.restore()
    b = per_call_us(before.next, repeat, number)
    patches.apply("F1")
    a = per_call_us(after.next, repeat, number)
    patches.restore()
    rows.append(("F1 background prompt (8..120 words)", f"{b:.1f}", f"{a:.1f}", f"{b / a:.1f}x"))

    b = per_call_us(lambda: orjson.dumps(record.to_dict()), repeat, number)
    a = per_call_us(lambda: orjson.dumps(record), repeat, number)
    rows.append(("F2 canary record -> JSON (64 tok, top-2)", f"{b:.1f}", f"{a:.1f}", f"{b / a:.1f}x"))

    for name, fn in (
        ("parse_body 64 tok + ids + top-2", lambda: parse_body("completions", rich)),
        ("parse_body 64 tok text only", lambda: parse_body("completions", plain)),
        ("build_body canary + orjson.dumps", lambda: orjson.dumps(_canary_body(feats))),
        ("uuid4().hex", lambda: uuid.uuid4().hex),
    ):
        t = per_call_us(fn, repeat, number)
        rows.append((name, f"{t:.1f}", "", ""))
    print(table(["step", "today us", "patched us", "speed-up"], rows, [44, 12, 12, 10]))


def _canary_body(feats: Features) -> dict[str, object]:
    return build_body("completions", model="bench/fixed", prompt="The history of the old harbour town",
                      messages=None, max_tokens=64, seed=0, stream=False, features=feats)  # fmt: skip


if __name__ == "__main__":
    main()
