from loadgen.background import BackgroundPrompts
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
