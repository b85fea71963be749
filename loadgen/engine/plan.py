"""Reduction plans: how many splits each kernel uses for a step of a given shape.

Why this module exists: on a GPU the shape of a launch picks the kernel's reduction order. A
split-K GEMM splits K more when there are too few output tiles to fill the SMs; flash-decoding
splits the KV sequence when batch x heads is too small; an RMSNorm kernel splits rows across
blocks when there are few rows; a mixed step (decodes beside a prefill) goes through the varlen
(prefill) attention kernel, a decode-only step through the decode kernel. These functions reproduce
those heuristics for a pretend GPU of ``NUM_SMS`` multiprocessors, so that the engine's numerics
depend on batch shape and step kind for the same reasons. In batch-invariant mode each returns one
fixed choice for every shape.

Pure functions; no numpy, no state.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Final

from loadgen.core.errors import UsageError

NUM_SMS: Final = 48
GEMM_TILE_M: Final = 16
GEMM_TILE_N: Final = 64
MIN_K_PER_SPLIT: Final = 32
MAX_K_SPLITS: Final = 8
MAX_KV_SPLITS: Final = 8
RMSNORM_SPLIT_BELOW_ROWS: Final = 16
VARLEN_KV_TILE: Final = 16  # the varlen (prefill) kernel's key tile; the decode kernel's is kernels.KV_TILE


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def split_k_count(rows: int, n: int, k: int, invariant: bool) -> int:
    """Number of K splits for an (rows x k) @ (k x n) GEMM.

    Output tiles = ceil(rows/16) * ceil(n/64); while tiles * splits leaves SMs idle the kernel
    doubles the split count, up to 8 and down to 32 values of K per split. Fewer rows -> more
    splits. Invariant mode: always 1 (one accumulation order for every shape).
    """
    if invariant:
        return 1
    tiles = -(-rows // GEMM_TILE_M) * -(-n // GEMM_TILE_N)
    splits = 1
    while (
        splits * 2 <= MAX_K_SPLITS
        and tiles * splits * 2 <= NUM_SMS
        and k % (splits * 2) == 0
        and k // (splits * 2) >= MIN_K_PER_SPLIT
    ):
        splits *= 2
    return splits


def kv_split_count(batch: int, heads: int, max_kv_tiles: int, invariant: bool) -> int:
    """Number of KV splits for a decode attention launch (flash-decoding heuristic).

    With batch x heads thread blocks below ~80% of the SMs, the KV sequence is split to fill
    them, capped by the number of KV tiles of the longest context and by 8. Invariant mode:
    always 1.
    """
    if invariant:
        return 1
    blocks = batch * heads
    if blocks * 5 >= NUM_SMS * 4:
        return 1
    return max(1, min(MAX_KV_SPLITS, max_kv_tiles, _pow2_floor(NUM_SMS // blocks)))


def rmsnorm_split(rows: int, invariant: bool) -> bool:
    """Whether RMSNorm uses the split reduction (few rows) or the one-block-per-row order."""
    return (not invariant) and rows < RMSNORM_SPLIT_BELOW_ROWS


@dataclass(frozen=True)
class StepPlan:
    """The reduction choices for one step; computed once per step and passed to the model."""

    invariant: bool
    rows: int
    norm_split: bool

    def k_splits(self, n: int, k: int, rows: int | None = None) -> int:
        return split_k_count(self.rows if rows is None else rows, n, k, self.invariant)


@dataclass(frozen=True)
class InvariantPaths:
    """Which reduction paths use their fixed order; batch-invariant mode fixes all four.

    ``step_kind``: fixed, a decode row is attended by the decode kernel in every step; free, a decode row
    of a mixed step (one that also runs a prefill of more than one token) goes through the varlen kernel,
    another order (``varlen_decodes``). Fixing one path at a time is how the tests attribute a divergence to a
    kernel; fixing all but ``step_kind`` is vLLM with ``VLLM_BATCH_INVARIANT=1`` as measured, where only the
    kind of step moved a canary's numbers.
    """

    matmul: bool = False
    attention: bool = False
    norm: bool = False
    step_kind: bool = False

    @classmethod
    def all(cls, on: bool) -> InvariantPaths:
        return cls(matmul=on, attention=on, norm=on, step_kind=on)

    @classmethod
    def named(cls, names: str) -> InvariantPaths:
        """The paths a comma-separated list fixes (``"matmul,attention,norm"``), the others free; an unknown
        name is a ``UsageError`` naming the known ones."""
        known = [f.name for f in fields(cls)]
        chosen = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in known]
        if unknown:
            raise UsageError(
                f"--invariant-paths: unknown path {', '.join(map(repr, unknown))}; the paths are {', '.join(known)}"
            )
        return cls(**dict.fromkeys(chosen, True))

    def names(self) -> list[str]:
        """The fixed paths, in declaration order."""
        return [f.name for f in fields(self) if getattr(self, f.name)]


def varlen_decodes(mixed: bool, paths: InvariantPaths) -> bool:
    """Whether a step's decode rows go through the varlen kernel: in a mixed step, unless ``step_kind`` is fixed.

    A step is mixed when it runs a prefill of more than one token: as vLLM's attention backends split a batch
    by query length, a one-token prefill (a prefix-cache hit leaving one token) is a decode row to the kernel."""
    return mixed and not paths.step_kind


def plan_step(rows: int, paths: InvariantPaths) -> StepPlan:
    """Plan for a step that pushes ``rows`` token rows through the linear layers."""
    return StepPlan(invariant=paths.matmul, rows=rows, norm_split=rmsnorm_split(rows, paths.norm))
