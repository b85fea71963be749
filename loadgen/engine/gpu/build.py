"""Builds the GPU backend's scheduler from the engine options (the one entry point ``cli`` imports lazily).

Why this module exists: the CLI must not import torch unless ``--backend gpu`` is chosen; it
imports this module only then. It picks the device, builds the model and the slot cache, and
fails with a typed error when no CUDA device is present. Nothing here runs a step.
"""

from __future__ import annotations

from pathlib import Path

import torch

from loadgen.core.errors import EngineError
from loadgen.engine.gpu.model import GpuModel, GpuModelConfig, build_model
from loadgen.engine.gpu.scheduler import GpuScheduler
from loadgen.engine.runner import EngineOptions
from loadgen.engine.steplog import open_step_trace
from loadgen.engine.tokenizer import load_tokenizer


def build_gpu_scheduler(opts: EngineOptions, checkpoint: Path | None = None) -> GpuScheduler:
    """A ready GPU scheduler: bf16 model (seeded Qwen3, or ``checkpoint``), KV slots for ``max_num_seqs``."""
    if not torch.cuda.is_available():
        raise EngineError("loadgen serve --backend gpu: no CUDA device is visible to torch")
    device = torch.device("cuda")
    tok = load_tokenizer()
    cfg = GpuModelConfig(
        vocab_size=tok.vocab_size, max_num_seqs=opts.max_num_seqs, max_model_len=opts.max_model_len, seed=opts.seed
    )
    model = build_model(cfg, checkpoint, device)
    if model.config.vocab_size < tok.vocab_size:
        raise EngineError(
            f"checkpoint {checkpoint}: vocab_size {model.config.vocab_size} < the engine tokenizer's {tok.vocab_size}"
        )
    gpu = GpuModel(model, cfg, tok.vocab_size, device)
    return GpuScheduler(
        gpu=gpu,
        tokenizer=tok,
        max_num_seqs=opts.max_num_seqs,
        max_num_batched_tokens=opts.max_num_batched_tokens,
        invariant=opts.batch_invariant,
        trace=open_step_trace(opts.step_trace),
    )
