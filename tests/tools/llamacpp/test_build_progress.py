"""The llama-server build says what it is doing: each step, then the compiler's percentage while it builds.

``cmake`` is replaced on PATH by a script that prints build lines as Ninja or Make would, so the stage
reporting runs with real processes in milliseconds; the whole output still lands in ``build.log``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from loadgen.core.errors import EngineError
from tools.llamacpp.build import build_progress, cache_for, ensure_server

NINJA_BUILD = """if [ "$1" = --build ]; then
  echo "[1/4] Building CXX object ggml.o"
  echo "warning: something harmless"
  echo "[2/4] Building CXX object llama.o"
  echo "[2/4] Building CXX object llama.o"
  echo "[3/4] Building CXX object server.o"
  echo "[4/4] Linking CXX executable bin/llama-server"
  mkdir -p "$2/bin" && printf '#!/bin/sh\\n' > "$2/bin/llama-server" && chmod +x "$2/bin/llama-server"
fi
"""


def fake_cmake(bin_dir: Path, body: str) -> None:
    bin_dir.mkdir()
    script = bin_dir / "cmake"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_build_progress_reads_make_and_ninja_lines() -> None:
    assert build_progress(b"[ 45%] Building CXX object common/arg.cpp.o\n") == 45
    assert build_progress(b"[100%] Built target llama-server\n") == 100
    assert build_progress(b"[12/48] Building C object ggml.c.o\n") == 25
    assert build_progress(b"-- Configuring done\n") is None and build_progress(b"[0/0] nothing\n") is None


def test_each_stage_and_each_new_percentage_is_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cmake(tmp_path / "bin", NINJA_BUILD)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = cache_for(tmp_path / "cache")
    cache.llama_cpp.mkdir(parents=True)  # as if the sdist were fetched: no pip call here
    stages: list[str] = []
    assert ensure_server(cache, jobs=1, on_stage=stages.append) == cache.server
    building = f"building llama-server (1 job, log: {cache.log})"
    assert stages == [
        "configuring llama.cpp (cmake)",
        building,
        *(f"{building}: {pct}%" for pct in (25, 50, 75, 100)),  # 50% printed twice by the build, told once
    ]
    log = cache.log.read_text()
    assert "warning: something harmless" in log and log.count("[2/4]") == 2  # the log keeps every line
    again: list[str] = []
    ensure_server(cache, jobs=1, on_stage=again.append)
    assert again == []  # a finished build is reused silently


def test_a_build_that_fails_while_reporting_progress_still_raises_with_its_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_cmake(tmp_path / "bin", 'if [ "$1" = --build ]; then echo "[ 10%] a.o"; echo "error: boom"; exit 3; fi\n')
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = cache_for(tmp_path / "cache")
    cache.llama_cpp.mkdir(parents=True)
    stages: list[str] = []
    with pytest.raises(EngineError, match=r"(?s)exited 3.*error: boom"):
        ensure_server(cache, jobs=2, on_stage=stages.append)
    assert stages[-1].endswith(": 10%") and not cache.stamp.exists()
