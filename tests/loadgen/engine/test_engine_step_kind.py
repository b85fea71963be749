"""The step-kind path: a decode row's logits against the kind of step that computes it, through the model itself.

With matmul, attention and norm fixed (vLLM with ``VLLM_BATCH_INVARIANT=1``, as measured), a decode row is bitwise
the same whatever the number of other decode rows, and moves when another request's prefill shares the step:
the varlen kernel attends it in 16-key tiles walked back from the diagonal, where the decode kernel walks 32-key
tiles forward. A context of one varlen tile (16 keys or fewer) reduces the same either way, so the canary's
prompt here is at least 16 tokens. ``--batch-invariant`` fixes the step kind too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.engine.cli import build_parser, options_from_args
from loadgen.engine.kernels import F32
from loadgen.engine.model import Segment, TinyModel
from loadgen.engine.plan import InvariantPaths
from loadgen.engine.runner import EngineOptions, build_scheduler

VLLM_INVARIANT = InvariantPaths.named("matmul,attention,norm")
_MODELS: dict[InvariantPaths, TinyModel] = {}


def _model(paths: InvariantPaths) -> TinyModel:
    if paths not in _MODELS:
        _MODELS[paths] = build_scheduler(EngineOptions(paths=paths, enable_prefix_caching=False)).model
    return _MODELS[paths]


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return [int(t) for t in rng.integers(300, 4000, n)]


def _canary_logits(
    paths: InvariantPaths, canary: int, others: list[int], intruder: int | None, seed: int
) -> tuple[F32, F32, F32 | None]:
    """The canary's decode-step logits alone, beside the others' decode rows, and (``intruder``) beside those and
    a prefill of that many tokens. Everyone is prefilled first, together: a prefill row does not depend on its
    batch once matmul, attention and norm are fixed, so the canary's KV is the same in every case."""
    model = _model(paths)
    rng = np.random.default_rng(seed)
    prompts = [_tokens(rng, canary), *(_tokens(rng, n) for n in others)]
    model.forward([Segment(slot, p, 0, True) for slot, p in enumerate(prompts)])
    decodes = [Segment(slot, _tokens(rng, 1), len(p), True) for slot, p in enumerate(prompts)]
    alone = model.forward(decodes[:1])[0]
    beside = model.forward(decodes)[0]
    if intruder is None:
        return alone, beside, None
    mixed = model.forward([*decodes, Segment(len(prompts), _tokens(rng, intruder), 0, True)])[0]
    return alone, beside, mixed


shapes = {
    "canary": st.integers(16, 80),
    "others": st.lists(st.integers(1, 48), max_size=6),
    "intruder": st.integers(2, 48),
    "seed": st.integers(0, 2**16),
}


@settings(max_examples=25, deadline=None)
@given(**shapes)
def test_with_only_the_step_kind_free_a_prefill_in_the_step_moves_a_decode_row(
    canary: int, others: list[int], intruder: int, seed: int
) -> None:
    alone, beside, mixed = _canary_logits(VLLM_INVARIANT, canary, others, intruder, seed)
    assert alone.tobytes() == beside.tobytes()  # any number of other decode rows: bitwise equal
    assert mixed is not None and mixed.tobytes() != alone.tobytes()  # a prefill shares the step: moved


@settings(max_examples=10, deadline=None)
@given(**shapes)
def test_batch_invariant_mode_fixes_the_step_kind_too(canary: int, others: list[int], intruder: int, seed: int) -> None:
    alone, beside, mixed = _canary_logits(InvariantPaths.all(True), canary, others, intruder, seed)
    assert mixed is not None and alone.tobytes() == beside.tobytes() == mixed.tobytes()


def test_fixing_the_step_kind_alone_keeps_the_decode_kernel_in_a_mixed_step() -> None:
    """Everything else fixed but the step kind's fixed too: the mixed step equals the decode-only one; with the
    step kind free (the same other paths) it does not. The step kind is what moved it."""
    fixed = _canary_logits(InvariantPaths.named("matmul,attention,norm,step_kind"), 40, [5, 30], 12, 7)
    free = _canary_logits(VLLM_INVARIANT, 40, [5, 30], 12, 7)
    assert fixed[2] is not None and fixed[0].tobytes() == fixed[2].tobytes()
    assert free[2] is not None and free[0].tobytes() != free[2].tobytes()


def test_the_flag_fixes_the_named_paths() -> None:
    args = build_parser().parse_args(["--invariant-paths", "matmul, attention,norm"])
    assert options_from_args(args).invariant_paths == InvariantPaths(True, True, True, False)
    assert options_from_args(build_parser().parse_args(["--batch-invariant"])).invariant_paths == InvariantPaths.all(
        True
    )
    assert options_from_args(build_parser().parse_args([])).invariant_paths == InvariantPaths()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--invariant-paths", "matmul,atention"],
            "unknown path 'atention'; the paths are matmul, attention, norm, step_kind",
        ),
        (["--invariant-paths", "matmul", "--batch-invariant"], "give it or --invariant-paths, not both"),
        (["--invariant-paths", "norm", "--backend", "gpu"], "--invariant-paths needs --backend cpu"),
    ],
)
def test_a_bad_path_list_is_refused_by_name(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        options_from_args(build_parser().parse_args(argv))
    assert message in str(exc.value)
