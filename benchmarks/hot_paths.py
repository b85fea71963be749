"""Per-call cost of the load path's own steps, each beside the simpler code it replaced.

Why: the profile (``profile_tool.py``) names the functions; this script gives each a price in
microseconds on one core, with the replaced way of doing the same step measured in the same
process, so a fix's before/after is a measured ratio. It also checks that the fast forms give
the same result (same bytes written, same body, same usage). No network, no gevent.

Run: ``python benchmarks/hot_paths.py [--quick]``.
"""

from __future__ import annotations

import argparse
import random
import timeit
import uuid
from collections.abc import Callable

import orjson
from canned import completion_body
from harness import canary_record, command_line, median, table

from loadgen.core.scenario import Background
from loadgen.core.wire import Features, build_body, parse_body, parse_usage
from loadgen.load.background import WORDS, BackgroundBodies, prompt_of

NO_FEATURES = Features()


def per_call_us(fn: Callable[[], object], repeat: int, number: int) -> float:
    return median([t / number * 1e6 for t in timeit.repeat(fn, repeat=repeat, number=number)])


def replaced_background_body(spec: Background, rng: random.Random) -> Callable[[], bytes]:
    """The first version: words drawn one ``choice`` at a time, ``build_body``, ``orjson.dumps``."""

    def body() -> bytes:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(*spec.prompt_words)))
        return orjson.dumps(
            build_body(
                "completions",
                model="bench/fixed",
                prompt=words,
                messages=None,
                max_tokens=rng.randint(*spec.max_tokens),
                seed=None,
                stream=False,
                features=NO_FEATURES,
            )
        )

    return body


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    repeat, number = (3, 500) if args.quick else (7, 2000)
    print(f"command: {command_line()}\nmedian of {repeat} x {number} calls, microseconds per call, one core\n")
    spec = Background(seed=7, prompt_words=(8, 120), max_tokens=(16, 96), shared_prefix_share=0.25, stream=False)
    rich = completion_body(64, 2)
    plain = completion_body(64, 0)
    record = canary_record(parse_body("completions", rich))
    if orjson.dumps(record.to_dict()) != orjson.dumps(record):
        raise SystemExit("orjson.dumps(record) != orjson.dumps(record.to_dict()): the record writer would change bytes")
    if parse_usage(plain) != parse_body("completions", plain).usage:
        raise SystemExit("parse_usage and parse_body disagree on the usage of the canned body")
    gen = BackgroundBodies(spec, 0, kind="completions", model="bench/fixed", stream=False)
    sample = gen.next()
    rebuilt = build_body(
        "completions",
        model="bench/fixed",
        prompt=prompt_of(sample),
        messages=None,
        max_tokens=sample.max_tokens,
        seed=None,
        stream=False,
        features=NO_FEATURES,
    )
    if orjson.loads(sample.payload) != rebuilt:
        raise SystemExit("a background body is not what build_body makes of its prompt")

    rows = []
    old = replaced_background_body(spec, random.Random(7))
    b, a = per_call_us(old, repeat, number), per_call_us(gen.next, repeat, number)
    rows.append(("background body (8..120 words)", "choice/build/dumps", f"{b:.1f}", f"{a:.1f}", f"{b / a:.1f}x"))
    b = per_call_us(lambda: orjson.dumps(record.to_dict()), repeat, number)
    a = per_call_us(lambda: orjson.dumps(record), repeat, number)
    rows.append(("canary record -> JSON (64 tok, top-2)", "asdict + dumps", f"{b:.1f}", f"{a:.1f}", f"{b / a:.1f}x"))
    b = per_call_us(lambda: parse_body("completions", plain).usage, repeat, number)
    a = per_call_us(lambda: parse_usage(plain), repeat, number)
    rows.append(("background body -> usage (64 tok)", "parse_body", f"{b:.1f}", f"{a:.1f}", f"{b / a:.1f}x"))
    for name, fn in (
        ("parse_body 64 tok + ids + top-2 (canary)", lambda: parse_body("completions", rich)),
        ("uuid4().hex", lambda: uuid.uuid4().hex),
    ):
        rows.append((name, "", "", f"{per_call_us(fn, repeat, number):.1f}", ""))
    print(table(["step", "replaced", "before us", "today us", "speed-up"], rows, [42, 20, 11, 10, 10]))


if __name__ == "__main__":
    main()
