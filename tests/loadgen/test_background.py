from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.background import _WORDS, CORPUS_WORDS, BackgroundPrompts, corpus
from loadgen.scenario import Background


def test_same_seed_and_user_give_the_same_stream() -> None:
    spec = Background(seed=3, prompt_words=(4, 30), max_tokens=(8, 20), shared_prefix_share=0.5)
    a, b = BackgroundPrompts(spec, 2), BackgroundPrompts(spec, 2)
    assert [a.next() for _ in range(20)] == [b.next() for _ in range(20)]


def test_users_differ_and_lengths_stay_in_range() -> None:
    spec = Background(seed=3, prompt_words=(4, 30), max_tokens=(8, 20), shared_prefix_share=0.0)
    reqs = [BackgroundPrompts(spec, u).next() for u in range(10)]
    assert len({r.prompt for r in reqs}) == 10
    assert all(4 <= len(r.prompt.split()) <= 30 and 8 <= r.max_tokens <= 20 for r in reqs)


def test_shared_prefix_share_is_respected() -> None:
    spec = Background(seed=1, shared_prefix_share=0.3, shared_prefix_words=10)
    gen = BackgroundPrompts(spec, 0)
    reqs = [gen.next() for _ in range(2000)]
    shared = [r for r in reqs if r.shared_prefix]
    assert 0.25 < len(shared) / len(reqs) < 0.35
    prefixes = {" ".join(r.prompt.split()[:10]) for r in shared}
    assert len(prefixes) == 1


@settings(max_examples=60, deadline=None)
@given(lo=st.integers(1, 300), span=st.integers(0, 300), seed=st.integers(0, 2**31), user=st.integers(0, 1000))
def test_a_prompt_has_the_drawn_number_of_corpus_words(lo: int, span: int, seed: int, user: int) -> None:
    spec = Background(seed=seed, prompt_words=(lo, lo + span), shared_prefix_share=0.0)
    for req in (BackgroundPrompts(spec, user).next() for _ in range(5)):
        words = req.prompt.split(" ")
        assert lo <= len(words) <= lo + span
        assert all(w in _WORDS for w in words)  # no empty word, no word cut in two


def test_corpus_slices_are_whole_words() -> None:
    c = corpus(5)
    every = c.text.split(" ")[:-1]  # the text ends with a space
    assert len(every) == CORPUS_WORDS
    assert c.words(0, 3) == " ".join(every[:3])
    assert c.words(CORPUS_WORDS - 2, 2) == " ".join(every[-2:])


def test_prompts_share_no_prefix_by_accident() -> None:
    """Prefix-cache hits must come from ``shared_prefix_share`` alone: no two of 20,000 prompts start alike."""
    spec = Background(seed=2, prompt_words=(40, 40), shared_prefix_share=0.0)
    users = [BackgroundPrompts(spec, u) for u in range(64)]
    heads = [" ".join(users[i % 64].next().prompt.split()[:8]) for i in range(20_000)]
    assert len(set(heads)) == len(heads)
