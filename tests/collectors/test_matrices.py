"""Float matrices held as float32 where every value is one (``collectors.read.matrices.narrow``), read back as the
same float64 values, and the run folder readers' use of that rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from collectors.read.matrices import _widen, mapped_copy, narrow, place_floats, wide
from collectors.read.runfolder import load_run
from reports.analysis.build import build_report
from tests.reports.runkit import rec, write_run

F32 = [float(np.float32(v)) for v in (-0.1, -1.3, -2.7182817, -1e-8, -9.5)]
NOT_F32 = -0.1  # the nearest double to a tenth is no float32

floats = st.one_of(
    st.floats(width=32, allow_nan=True, allow_infinity=False).map(float),
    st.floats(min_value=-1e6, max_value=1e6),
    st.just(float("nan")),
)


@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, max_side=6), elements=floats))
def test_narrow_keeps_every_value_and_is_float32_only_when_each_value_is_one(mat: np.ndarray) -> None:
    held = narrow(mat)
    back = wide(held)
    assert back.dtype == np.float64
    assert np.array_equal(back, mat, equal_nan=True)
    exact = all(np.isnan(v) or float(np.float32(v)) == v for v in mat.ravel().tolist())
    assert held.dtype == (np.float32 if exact else np.float64)


def test_a_matrix_filled_chunk_by_chunk_widens_at_its_first_value_that_is_no_float32() -> None:
    out = {"lp": np.full((3, 2), np.nan, np.float32)}
    place_floats(out, "lp", np.array(F32[:2]))
    assert out["lp"].dtype == np.float32
    out["lp"][0] = F32[:2]
    place_floats(out, "lp", np.array([NOT_F32, np.nan]))
    assert out["lp"].dtype == np.float64
    assert out["lp"][0].tolist() == F32[:2]  # the rows already placed keep their values


def test_big_parts_joined_in_mapped_memory_keep_their_values_and_pad_the_rest() -> None:
    """Parts of a big run, moved out of the heap as they arrive, joined into memory that no fill touched first:
    every row is a part's row padded to the widest with the fill, as ``np.full`` and a copy would give."""
    rng = np.random.default_rng(0)
    parts = [rng.random((40_000, 64)).astype(np.float32), rng.random((30_000, 100)).astype(np.float32)]
    want = np.full((70_000, 100), np.nan, np.float32)
    want[:40_000, :64], want[40_000:] = parts
    moved = [mapped_copy(p) for p in parts]
    assert all(np.array_equal(m, p) and m.dtype == p.dtype for m, p in zip(moved, parts, strict=True))
    got = _widen(moved, np.nan)
    assert got.nbytes >= 16 << 20  # big enough to be mapped rather than allocated by numpy
    assert np.array_equal(got, want, equal_nan=True)
    assert moved[0].size == 0  # each part let go as it was copied


def _records(logprobs: list[list[float]]) -> list[dict[str, object]]:
    return [
        rec([1, 2, 3, 4, 5], phase="baseline", logprobs=logprobs[0]),
        *[rec([1, 2, 3, 4, 5], level=1, logprobs=lp) for lp in logprobs[1:]],
    ]


def test_engine_logprobs_are_held_as_float32_and_drift_is_computed_in_float64(tmp_path: Path) -> None:
    ref = [F32[0], F32[3], F32[2], F32[4], F32[1]]
    other = [F32[1], F32[3], F32[2], F32[4], F32[1]]  # differs at position 0 only
    run = load_run(write_run(tmp_path / "run", _records([ref, ref, other])))
    assert run.canaries.logprobs.dtype == np.float32
    [entry] = build_report(run)["canaries"]
    drift = entry["levels"][0]["logprob_drift"]
    assert drift is not None
    want = abs(F32[1] - F32[0])  # float64 arithmetic on the float32 values
    assert want != float(abs(np.float32(F32[1]) - np.float32(F32[0])))  # which float32 arithmetic would round
    assert drift["max"] == want


def test_one_value_that_is_no_float32_keeps_the_matrix_float64(tmp_path: Path) -> None:
    ref = [F32[0], F32[3], F32[2], F32[4], F32[1]]
    run = load_run(write_run(tmp_path / "run", _records([ref, ref, [NOT_F32, *ref[1:]]])))
    assert run.canaries.logprobs.dtype == np.float64
    assert run.canaries.logprobs[2, 0] == NOT_F32
