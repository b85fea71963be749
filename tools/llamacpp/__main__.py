"""``python -m tools.llamacpp [--cache DIR]``: build (or reuse) llama-server and the tiny model, print both paths.

Why: CI and a user trying the tool against a real engine need one step that leaves a runnable
``llama-server`` and a model file, cached for later runs. Prints two lines, ``server=PATH`` and
``model=PATH``, and nothing else on stdout (the build's output goes to ``build.log`` in the cache);
errors are one line on stderr and exit code 2, as the main CLI does. What the build is doing goes to
stderr as it happens (in place on a terminal, a line per step otherwise: ``loadgen/cli/progress``).
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import closing
from pathlib import Path

from loadgen.cli.progress.printer import open_display
from loadgen.core.errors import LoadgenError
from tools.llamacpp.build import LLAMA_CPP_PYTHON_VERSION, cache_for, cache_home, ensure_server
from tools.llamacpp.tiny_model import DEFAULT_VOCAB, TinyModelSpec, write_tiny_model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.llamacpp", description=__doc__)
    parser.add_argument("--cache", type=Path, default=None, help="default: $LOADGEN_CACHE or ~/.cache/loadgen")
    parser.add_argument("--sdist-version", default=LLAMA_CPP_PYTHON_VERSION, help="llama-cpp-python version to build")
    parser.add_argument("--jobs", type=int, default=None, help="parallel compile jobs (default: all cores)")
    parser.add_argument("--vocab", default=DEFAULT_VOCAB, help="tokenizer: models/ggml-vocab-NAME.gguf")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    cache = cache_for(args.cache or cache_home(os.environ), args.sdist_version)
    try:
        with closing(open_display(quiet=False)) as display:  # closed (the live view erased) before any error
            server = ensure_server(cache, jobs=args.jobs, on_stage=display.status)
            vocab = cache.vocab_dir / f"ggml-vocab-{args.vocab}.gguf"
            if not vocab.is_file():
                names = sorted(p.name for p in cache.vocab_dir.glob("ggml-vocab-*.gguf"))
                raise LoadgenError(f"--vocab {args.vocab}: no {vocab}; shipped: {', '.join(names)}")
            display.status("writing the tiny model")
            model = write_tiny_model(vocab, cache.root / "models", TinyModelSpec(seed=args.seed))
    except LoadgenError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"server={server}")
    print(f"model={model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
