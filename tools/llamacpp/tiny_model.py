"""Write a small seeded random-weight llama GGUF around a real tokenizer.

Why: a real engine needs a real model file, and CI may download none. llama.cpp's source ships
vocab-only GGUFs (``models/ggml-vocab-*.gguf``: a tokenizer and no tensors); this module copies the
``tokenizer.*`` metadata from one of them and adds random F16 weights for a tiny llama (default 4
layers, 128 wide), drawn from a fixed seed, so the same spec always writes the same bytes. The model
says nothing sensible, but the engine runs its full path (batching, KV cache, sampling, logprobs)
on it. Writing goes through a temporary file and a rename: a cut write never leaves a bad model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
import numpy.typing as npt

from loadgen.core.errors import EngineError

ARCH = "llama"
DEFAULT_VOCAB = "llama-spm"  # 32,000 tokens: the smallest llama tokenizer llama.cpp ships


@dataclass(frozen=True)
class TinyModelSpec:
    layers: int = 4
    width: int = 128
    heads: int = 4
    ffn: int = 256
    context: int = 4096
    seed: int = 0

    def file_name(self, vocab: str) -> str:
        return f"tiny-llama-{vocab}-L{self.layers}-W{self.width}-F{self.ffn}-s{self.seed}.gguf"


def vocab_name(vocab_path: Path) -> str:
    """``ggml-vocab-llama-spm.gguf`` -> ``llama-spm``."""
    return vocab_path.name.removeprefix("ggml-vocab-").removesuffix(".gguf")


def tensors(spec: TinyModelSpec, n_vocab: int) -> dict[str, npt.NDArray[np.float16] | npt.NDArray[np.float32]]:
    """The model's tensors by GGUF name, numpy shape (out, in); projections scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(spec.seed)

    def f16(rows: int, cols: int, scale: float) -> npt.NDArray[np.float16]:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * scale).astype(np.float16)

    w, ff = spec.width, spec.ffn
    out: dict[str, npt.NDArray[np.float16] | npt.NDArray[np.float32]] = {
        "token_embd.weight": f16(n_vocab, w, 1.0),
        "output_norm.weight": np.ones(w, dtype=np.float32),
        "output.weight": f16(n_vocab, w, w**-0.5),
    }
    for i in range(spec.layers):
        out |= {
            f"blk.{i}.attn_norm.weight": np.ones(w, dtype=np.float32),
            f"blk.{i}.attn_q.weight": f16(w, w, w**-0.5),
            f"blk.{i}.attn_k.weight": f16(w, w, w**-0.5),
            f"blk.{i}.attn_v.weight": f16(w, w, w**-0.5),
            f"blk.{i}.attn_output.weight": f16(w, w, w**-0.5),
            f"blk.{i}.ffn_norm.weight": np.ones(w, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": f16(ff, w, w**-0.5),
            f"blk.{i}.ffn_up.weight": f16(ff, w, w**-0.5),
            f"blk.{i}.ffn_down.weight": f16(w, ff, ff**-0.5),
        }
    return out


def write_tiny_model(vocab_path: Path, out_dir: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    """The model file for ``spec`` in ``out_dir``: reused when present, else written now."""
    if spec.width % spec.heads:
        raise EngineError(f"tiny model: width {spec.width} is not a multiple of heads {spec.heads}")
    path = out_dir / spec.file_name(vocab_name(vocab_path))
    if path.is_file():
        return path
    reader = gguf.GGUFReader(vocab_path)
    fields = {name: f for name, f in reader.fields.items() if name.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in fields:
        raise EngineError(f"{vocab_path}: no tokenizer.ggml.tokens field (not a vocab GGUF)")
    n_vocab = len(fields["tokenizer.ggml.tokens"].data)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, ARCH)
    try:
        writer.add_name(path.stem)
        writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        writer.add_vocab_size(n_vocab)
        writer.add_context_length(spec.context)
        writer.add_embedding_length(spec.width)
        writer.add_block_count(spec.layers)
        writer.add_feed_forward_length(spec.ffn)
        writer.add_head_count(spec.heads)
        writer.add_head_count_kv(spec.heads)
        writer.add_rope_dimension_count(spec.width // spec.heads)
        writer.add_layer_norm_rms_eps(1e-5)
        for name, field in fields.items():
            sub_type = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(name, field.contents(), field.types[0], sub_type)
        for name, array in tensors(spec, n_vocab).items():
            writer.add_tensor(name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        tmp.rename(path)
    finally:
        writer.close()
        tmp.unlink(missing_ok=True)
    return path
