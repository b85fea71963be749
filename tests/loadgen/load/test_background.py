"""Background bodies: seeded, in range, exactly the body build_body makes, no accidental shared prefixes."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.core.scenario import Background
from loadgen.core.wire import Features, Kind, build_body
from loadgen.load.background import CORPUS_MIN_WORDS, WORDS, BackgroundBodies, corpus, prompt_of


def bodies(spec: Background, user: int = 0, kind: Kind = "completions", model: str = "m") -> BackgroundBodies:
    return BackgroundBodies(spec, user, kind=kind, model=model, stream=spec.stream)


def test_same_seed_and_user_give_the_same_stream() -> None:
    spec = Background(seed=3, prompt_words=(4, 30), max_tokens=(8, 20), shared_prefix_share=0.5)
    a, b = bodies(spec, 2), bodies(spec, 2)
    assert [a.next()[:3] for _ in range(20)] == [b.next()[:3] for _ in range(20)]  # all but the request id


def test_every_body_has_its_own_request_id() -> None:
    """32 hex digits each, none repeated within a user or between two users of the same seed and index (two
    processes' users, or two runs': the ids are not seeded)."""
    spec = Background(seed=3, prompt_words=(4, 30), max_tokens=(8, 20))
    ids = [user.next().request_id for user in (bodies(spec, 0), bodies(spec, 0)) for _ in range(500)]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(rb"[0-9a-f]{32}", i) for i in ids)


def test_users_differ_and_lengths_stay_in_range() -> None:
    spec = Background(seed=3, prompt_words=(4, 30), max_tokens=(8, 20), shared_prefix_share=0.0)
    reqs = [bodies(spec, u).next() for u in range(10)]
    assert len({prompt_of(r) for r in reqs}) == 10
    assert all(4 <= len(prompt_of(r).split()) <= 30 and 8 <= r.max_tokens <= 20 for r in reqs)


def test_the_whole_ranges_are_drawn() -> None:
    gen = bodies(Background(seed=1, prompt_words=(1, 6), max_tokens=(2, 4)))
    drawn = [gen.next() for _ in range(600)]
    assert {len(prompt_of(b).split()) for b in drawn} == set(range(1, 7))
    assert {b.max_tokens for b in drawn} == {2, 3, 4}


def test_shared_prefix_share_is_respected() -> None:
    spec = Background(seed=1, shared_prefix_share=0.3, shared_prefix_words=10)
    gen = bodies(spec)
    reqs = [gen.next() for _ in range(2000)]
    shared = [r for r in reqs if r.shared_prefix]
    assert 0.25 < len(shared) / len(reqs) < 0.35
    prefixes = {" ".join(prompt_of(r).split()[:10]) for r in shared}
    assert len(prefixes) == 1
    assert all(" ".join(prompt_of(r).split()[:10]) not in prefixes for r in reqs if not r.shared_prefix)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_share_zero_and_one_are_exact(share: float) -> None:
    gen = bodies(Background(seed=4, shared_prefix_share=share, shared_prefix_words=6))
    assert {gen.next().shared_prefix for _ in range(300)} == {share == 1.0}


def test_no_prefix_words_means_nothing_is_shared() -> None:
    gen = bodies(Background(seed=4, shared_prefix_share=1.0, shared_prefix_words=0))
    assert not any(gen.next().shared_prefix for _ in range(50))


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(1, 300),
    span=st.integers(0, 300),
    seed=st.integers(-(2**40), 2**40),
    user=st.integers(0, 1000),
    kind=st.sampled_from(["completions", "chat", "generate"]),
    stream=st.booleans(),
    model=st.text(min_size=1, max_size=20),
)
def test_a_body_is_what_build_body_makes_of_its_prompt(
    lo: int, span: int, seed: int, user: int, kind: Kind, stream: bool, model: str
) -> None:
    spec = Background(seed=seed, prompt_words=(lo, lo + span), shared_prefix_share=0.5, stream=stream)
    gen = bodies(spec, user, kind, model)
    for body in (gen.next() for _ in range(5)):
        prompt = prompt_of(body)
        words = prompt.split(" ")
        assert lo <= len(words) - (spec.shared_prefix_words if body.shared_prefix else 0) <= lo + span
        assert all(w in WORDS for w in words)  # no empty word, no word cut in two
        messages = [{"role": "user", "content": prompt}] if kind == "chat" else None
        expected = build_body(
            kind,
            model=model,
            prompt=None if messages else prompt,
            messages=messages,
            max_tokens=body.max_tokens,
            seed=None,
            stream=stream,
            features=Features(),
        )
        if kind == "generate":  # SGLang's /generate takes the request id in the body too (client.send_canary)
            expected["rid"] = body.request_id.decode()
        assert orjson.loads(body.payload) == expected


def test_corpus_slices_are_whole_words() -> None:
    c = corpus(5, CORPUS_MIN_WORDS)
    every = c.text.split(b" ")[:-1]  # the text ends with a space
    assert len(every) == c.size == CORPUS_MIN_WORDS
    assert c.words(0, 3) == b" ".join(every[:3])
    assert c.words(c.size - 2, 2) == b" ".join(every[-2:])


def test_long_prompts_grow_the_corpus() -> None:
    gen = bodies(Background(seed=2, prompt_words=(90_000, 100_000)))
    assert 90_000 <= len(prompt_of(gen.next()).split()) <= 100_000


def test_prompts_share_no_prefix_by_accident() -> None:
    """Prefix-cache hits must come from ``shared_prefix_share`` alone: no two of 20,000 prompts start alike."""
    spec = Background(seed=2, prompt_words=(40, 40), shared_prefix_share=0.0)
    users = [bodies(spec, u) for u in range(64)]
    heads = [" ".join(prompt_of(users[i % 64].next()).split()[:8]) for i in range(20_000)]
    assert len(set(heads)) == len(heads)
