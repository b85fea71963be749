"""The GPU model step: a transformers causal LM in bf16 over a slot KV cache, one call per step.

Why this module exists: continuous batching needs every running sequence's decode row in one
forward pass although the sequences have different lengths. Each sequence owns a slot of a
preallocated per-layer K/V buffer; ``SlotCache`` plugs into the model's attention layers (they
call ``past_key_values.update(k, v, layer_idx)``) and writes each row's new K/V at its own
position, and the 4-D mask written here hides every key beyond a row's length. A call's rows are
whatever the scheduler passes: all running sequences at once (the default, kernels sized to the
batch, so a row's logits depend on what else is in it), or one sequence alone (batch-invariant).

It samples nothing and knows nothing of requests; it must not import the HTTP layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, Qwen3Config, Qwen3ForCausalLM

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class GpuModelConfig:
    """Shape of the default seeded model (a Qwen3 architecture) and of the KV buffers."""

    vocab_size: int
    max_num_seqs: int = 128
    max_model_len: int = 512
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    seed: int = 0


def build_model(cfg: GpuModelConfig, checkpoint: Path | None, device: torch.device) -> PreTrainedModel:
    """A bf16 causal LM on ``device``: the checkpoint when given, else a seeded random Qwen3 (no download)."""
    if checkpoint is not None:
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16, attn_implementation="sdpa")
        return model.to(device).eval()
    hf = Qwen3Config(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim,
        max_position_embeddings=cfg.max_model_len,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=0,
        pad_token_id=0,
    )
    hf._attn_implementation = "sdpa"
    torch.manual_seed(cfg.seed)
    model = Qwen3ForCausalLM(hf)  # initialised on the CPU from the seed: the same weights on every run
    return model.to(device=device, dtype=torch.bfloat16).eval()


class SlotCache:
    """Per-layer K/V buffers ``[slots, kv_heads, max_len, head_dim]``; the rows of one call are set by ``bind``."""

    def __init__(self, layers: int, slots: int, kv_heads: int, max_len: int, head_dim: int, device: torch.device):
        shape = (slots, kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=torch.bfloat16, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=torch.bfloat16, device=device) for _ in range(layers)]
        self.slots = slots
        self.max_len = max_len
        self._rows = torch.zeros(0, dtype=torch.long, device=device)
        self._start = torch.zeros(0, dtype=torch.long, device=device)
        self._kv_len = 0

    def bind(self, rows: torch.Tensor, start: torch.Tensor, kv_len: int) -> None:
        """Rows (slot ids) of the next forward, each row's first new position, and the key length to return."""
        self._rows, self._start, self._kv_len = rows, start, kv_len

    def update(
        self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store the new ``[rows, heads, q, dim]`` K/V at each row's positions; return keys ``[:kv_len]``."""
        q = key.shape[2]
        pos = self._start[:, None] + torch.arange(q, device=key.device)[None, :]  # [rows, q]
        pos = pos.clamp(max=self.max_len - 1)
        rows = self._rows[:, None].expand_as(pos)
        kb, vb = self.k[layer_idx], self.v[layer_idx]
        kb[rows, :, pos] = key.transpose(1, 2)
        vb[rows, :, pos] = value.transpose(1, 2)
        return kb[self._rows, :, : self._kv_len], vb[self._rows, :, : self._kv_len]


class GpuModel:
    """Runs prefill and decode steps; returns fp32 logits rows on the host."""

    def __init__(self, model: PreTrainedModel, cfg: GpuModelConfig, vocab_size: int, device: torch.device) -> None:
        hf = model.config
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        self.model = model
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.device = device
        self.cache = SlotCache(
            hf.num_hidden_layers, cfg.max_num_seqs, hf.num_key_value_heads, cfg.max_model_len, head_dim, device
        )

    def forward(self, slots: list[int], tokens: list[list[int]], starts: list[int], kv_len: int) -> torch.Tensor:
        """Logits ``[rows, vocab]`` (fp32, on the device) for the last real token of each row.

        Rows are right-padded to the longest; ``starts`` is each row's first new position; keys
        run to ``kv_len``.
        """
        with torch.inference_mode():
            return self._forward(slots, tokens, starts, kv_len)

    def _forward(self, slots: list[int], tokens: list[list[int]], starts: list[int], kv_len: int) -> torch.Tensor:
        dev = self.device
        q = max(len(t) for t in tokens)
        ids = torch.tensor([t + [0] * (q - len(t)) for t in tokens], dtype=torch.long, device=dev)
        start = torch.tensor(starts, dtype=torch.long, device=dev)
        lengths = torch.tensor([len(t) for t in tokens], dtype=torch.long, device=dev)
        pos = start[:, None] + torch.arange(q, device=dev)[None, :]
        keys = torch.arange(kv_len, device=dev)
        # a query at position p sees keys 0..p; padded queries see their row's keys up to p, harmlessly
        mask = (keys[None, None, :] <= pos[:, :, None])[:, None, :, :]
        self.cache.bind(torch.tensor(slots, dtype=torch.long, device=dev), start, kv_len)
        out = self.model.model(
            input_ids=ids,
            position_ids=pos.clamp(max=self.cfg.max_model_len - 1),
            attention_mask={"full_attention": mask, "sliding_attention": mask},
            past_key_values=self.cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state[torch.arange(len(tokens), device=dev), lengths - 1]
        logits: torch.Tensor = self.model.lm_head(hidden)
        return logits[:, : self.vocab_size].float()


def to_host(logits: torch.Tensor) -> F32:
    """fp32 logits rows as a host array (the sampler works on numpy rows, as on the CPU engine)."""
    arr: F32 = logits.cpu().numpy()
    return arr
