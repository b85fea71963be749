"""Reduction plans: fewer rows -> more splits; invariant mode -> one order for every shape."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loadgen.engine.plan import InvariantPaths, kv_split_count, plan_step, rmsnorm_split, split_k_count


@given(st.integers(1, 512), st.sampled_from([128, 384, 512, 3298]), st.sampled_from([128, 256]))
def test_split_k_never_grows_with_rows_and_divides_k(rows: int, n: int, k: int) -> None:
    s = split_k_count(rows, n, k, invariant=False)
    assert k % s == 0 and k // s >= 32
    assert split_k_count(rows + 16, n, k, invariant=False) <= s


@given(st.integers(1, 512), st.integers(1, 4096), st.integers(1, 4096))
def test_invariant_mode_has_one_plan_for_every_shape(rows: int, n: int, tiles: int) -> None:
    assert split_k_count(rows, n, 128, invariant=True) == 1
    assert kv_split_count(rows, 4, tiles, invariant=True) == 1
    assert not rmsnorm_split(rows, invariant=True)
    plan = plan_step(rows, InvariantPaths.all(True))
    assert plan.k_splits(n, 128) == 1 and not plan.norm_split


def test_default_mode_shapes_pick_different_orders() -> None:
    assert split_k_count(1, 128, 256, invariant=False) == 8
    assert split_k_count(1, 512, 128, invariant=False) == 4
    assert split_k_count(32, 512, 128, invariant=False) == 2
    assert split_k_count(64, 512, 128, invariant=False) == 1
    assert kv_split_count(1, 4, 3, invariant=False) == 3
    assert kv_split_count(1, 4, 20, invariant=False) == 8
    assert kv_split_count(16, 4, 20, invariant=False) == 1
    assert rmsnorm_split(9, invariant=False) and not rmsnorm_split(25, invariant=False)
