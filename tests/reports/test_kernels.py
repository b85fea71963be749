"""Kernels over the padded token matrix: first divergence, exact grouping, drift."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.read.runfolder import pad_int
from reports.analysis import kernels
from reports.analysis.identity import first_divergence_rows as first_divergence
from reports.analysis.identity import text_matrix
from reports.analysis.kernels import drift, group_rows

seqs = st.lists(st.integers(0, 4), max_size=8)


def matrix(rows: list[list[int]]) -> Any:
    return pad_int(list(rows))[0]


def test_first_divergence_known_cases() -> None:
    mat = matrix([[1, 2, 3], [1, 2, 4], [1, 2], [1, 2, 3, 4], [9], []])
    fd = first_divergence(mat, np.arange(6), mat[0])
    assert fd.tolist() == [-1, 2, 2, 3, 0, 0]  # identical, differ, strict prefixes both ways, at 0, empty


@settings(max_examples=80, deadline=None)
@given(seqs, seqs)
def test_first_divergence_is_at_most_the_shorter_length(a: list[int], b: list[int]) -> None:
    mat = matrix([a, b])
    [fd] = first_divergence(mat, np.array([1]), mat[0]).tolist()
    assert (fd == -1) == (a == b)
    if fd >= 0:
        assert fd <= min(len(a), len(b))
        assert a[:fd] == b[:fd]
    [self_fd] = first_divergence(mat, np.array([0]), mat[0]).tolist()
    assert self_fd == -1


@settings(max_examples=80, deadline=None)
@given(st.lists(seqs, min_size=1, max_size=20))
def test_group_rows_is_exact(rows: list[list[int]]) -> None:
    mat = matrix(rows)
    labels, firsts = group_rows(mat, np.arange(len(rows)))
    for i, j in [(i, j) for i in range(len(rows)) for j in range(len(rows))]:
        assert (labels[i] == labels[j]) == (rows[i] == rows[j])
    assert [rows[f] for f in firsts] == [rows[i] for i in sorted({rows.index(r) for r in rows})]
    assert labels.max() + 1 == len({tuple(r) for r in rows})


def test_group_rows_survives_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernels, "_row_hash", lambda sub: np.zeros(sub.shape[0], dtype=np.uint64))
    mat = matrix([[1, 2], [3], [1, 2], [3], [4]])
    labels, firsts = group_rows(mat, np.arange(5))
    assert labels.tolist() == [0, 1, 0, 1, 2] and firsts.tolist() == [0, 1, 4]


def test_drift_only_before_divergence() -> None:
    lp = np.array([[-1.0, -2.0, -3.0], [-1.0, -2.5, -9.0], [-1.0, np.nan, -3.0], [np.nan, np.nan, np.nan]])
    dmax, dmean, bitwise, positions = drift(lp, np.arange(4), lp[0], np.array([3, 2, 3, 3]))
    assert dmax[:3].tolist() == [0.0, 0.5, 0.0]  # row 1's -9.0 lies past its divergence
    assert dmean[1] == 0.25 and bitwise[:3].tolist() == [1.0, 0.0, 1.0]
    assert np.isnan(dmax[3]) and np.isnan(bitwise[3])  # nothing comparable is not "equal"
    assert positions.tolist() == [3, 2, 2, 0]  # before each divergence, where both logprobs exist


def test_text_matrix_uses_code_points() -> None:
    mat, lengths = text_matrix(["hé", "", "h€llo"])
    assert lengths.tolist() == [2, 0, 5] and mat[0, 1] == ord("é") and mat[1, 0] == -1
