"""The tiny random-weight llama GGUF: a real tokenizer copied over, the right tensors, the same bytes per seed.

A small vocab-only GGUF is written here with the ``gguf`` package (the shipped ones come with the
llama.cpp source, which only the integration test needs); what llama.cpp makes of the model file is
tested by tests/integration/test_llamacpp.py.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from loadgen.core.errors import EngineError
from tools.llamacpp.tiny_model import TinyModelSpec, vocab_name, write_tiny_model

TOKENS = ["<unk>", "<s>", "</s>", *(f"tok{i}" for i in range(97))]


@pytest.fixture
def vocab(tmp_path: Path) -> Path:
    path = tmp_path / "ggml-vocab-test.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(TOKENS)
    w.add_token_scores([float(-i) for i in range(len(TOKENS))])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_model_has_the_vocab_tokenizer_and_a_full_llama_layer_stack(vocab: Path, tmp_path: Path) -> None:
    spec = TinyModelSpec(layers=2, width=16, heads=2, ffn=24, seed=3)
    path = write_tiny_model(vocab, tmp_path / "out", spec)
    assert path.name == "tiny-llama-test-L2-W16-F24-s3.gguf" and vocab_name(vocab) == "test"
    r = gguf.GGUFReader(path)
    assert r.fields["general.architecture"].contents() == "llama"
    assert r.fields["tokenizer.ggml.tokens"].contents() == TOKENS
    assert r.fields["tokenizer.ggml.bos_token_id"].contents() == 1
    assert r.fields["llama.vocab_size"].contents() == len(TOKENS)
    assert r.fields["llama.rope.dimension_count"].contents() == 8
    shapes = {t.name: (t.tensor_type, [int(n) for n in t.shape]) for t in r.tensors}
    f16, f32 = gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32
    assert shapes["token_embd.weight"] == (f16, [16, len(TOKENS)])  # ggml order: (in, out)
    assert shapes["output.weight"] == (f16, [16, len(TOKENS)])
    assert shapes["blk.1.ffn_down.weight"] == (f16, [24, 16])
    assert shapes["blk.1.attn_norm.weight"] == (f32, [16])
    assert len(shapes) == 3 + 9 * spec.layers
    embd = next(t for t in r.tensors if t.name == "token_embd.weight").data
    assert np.isfinite(embd).all() and 0.5 < float(np.std(embd)) < 2.0


def test_same_seed_same_bytes_other_seed_other_weights(vocab: Path, tmp_path: Path) -> None:
    small = TinyModelSpec(layers=1, width=8, heads=2, ffn=8)
    a = write_tiny_model(vocab, tmp_path / "a", small).read_bytes()
    b = write_tiny_model(vocab, tmp_path / "b", small).read_bytes()
    c = write_tiny_model(vocab, tmp_path / "c", TinyModelSpec(layers=1, width=8, heads=2, ffn=8, seed=1))
    assert a == b and c.read_bytes() != a and len(c.read_bytes()) == len(a)


def test_an_existing_model_is_reused_and_no_temporary_file_is_left(vocab: Path, tmp_path: Path) -> None:
    small = TinyModelSpec(layers=1, width=8, heads=2, ffn=8)
    path = write_tiny_model(vocab, tmp_path, small)
    path.write_bytes(b"kept")  # a second call must not rewrite it
    assert write_tiny_model(vocab, tmp_path, small) == path and path.read_bytes() == b"kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([vocab.name, path.name])


def test_bad_inputs_name_what_is_wrong(vocab: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="width 10 is not a multiple of heads 4"):
        write_tiny_model(vocab, tmp_path, TinyModelSpec(width=10, heads=4))
    not_vocab = tmp_path / "ggml-vocab-empty.gguf"
    w = gguf.GGUFWriter(not_vocab, "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(EngineError, match=r"no tokenizer\.ggml\.tokens"):
        write_tiny_model(not_vocab, tmp_path / "out")
