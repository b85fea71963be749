"""The llama-server build cache: where it lives, when a build counts as done, and that a done build is reused.

``cmake`` is replaced on PATH by a small script that records its calls, so the cache logic is tested
with real processes in milliseconds; the real build is exercised by tests/integration/test_llamacpp.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from loadgen.core.errors import EngineError
from tools.llamacpp.build import (
    LLAMA_CPP_PYTHON_VERSION,
    LlamaCppCache,
    build_command,
    built_server,
    cache_for,
    cache_home,
    configure_command,
    ensure_server,
)


def test_cache_home_prefers_loadgen_cache_then_xdg_then_home(tmp_path: Path) -> None:
    assert cache_home({"LOADGEN_CACHE": str(tmp_path), "XDG_CACHE_HOME": "/x"}) == tmp_path
    assert cache_home({"XDG_CACHE_HOME": "/x"}) == Path("/x/loadgen")
    assert cache_home({}) == Path.home() / ".cache" / "loadgen"
    assert cache_for(tmp_path).root == tmp_path / "llama.cpp" / LLAMA_CPP_PYTHON_VERSION


def test_the_build_reaches_nothing_but_the_source_and_builds_only_the_server(tmp_path: Path) -> None:
    cache = cache_for(tmp_path, "1.2.3")
    configure = configure_command(cache, ninja=True)
    assert configure[:5] == [
        "cmake",
        "-S",
        str(tmp_path / "llama.cpp/1.2.3/src/vendor/llama.cpp"),
        "-B",
        str(cache.build_dir),
    ]
    # the prebuilt web UI and OpenSSL would be downloaded at configure time: CI reaches no such host
    assert {"-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF"} <= set(configure)
    assert "Ninja" in configure and "Ninja" not in configure_command(cache, ninja=False)
    assert build_command(cache, 2)[-4:] == ["--target", "llama-server", "-j", "2"]


def _fake_cmake(bin_dir: Path, calls: Path, *, fail: bool) -> None:
    """A ``cmake`` that logs its arguments and, on ``--build``, fails or links an executable ``llama-server``."""
    bin_dir.mkdir()
    script = bin_dir / "cmake"
    body = 'echo "$@" >> ' + str(calls) + "\n"
    if fail:
        body += 'echo "error: boom" ; exit 3\n'
    else:
        body += 'if [ "$1" = --build ]; then mkdir -p "$2/bin" && printf "#!/bin/sh\\n" > "$2/bin/llama-server" '
        body += '&& chmod +x "$2/bin/llama-server"; fi\n'
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _with_source(tmp_path: Path) -> LlamaCppCache:
    cache = cache_for(tmp_path / "cache")
    cache.llama_cpp.mkdir(parents=True)  # as if the sdist were fetched: no pip call in these tests
    return cache


def test_a_finished_build_is_stamped_and_reused_without_running_cmake_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    _fake_cmake(tmp_path / "bin", calls, fail=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = _with_source(tmp_path)
    assert built_server(cache) is None
    server = ensure_server(cache, jobs=1)
    assert server == cache.server and built_server(cache) == server
    assert [line.split()[0] for line in calls.read_text().splitlines()] == ["-S", "--build"]
    assert ensure_server(cache, jobs=1) == server
    assert len(calls.read_text().splitlines()) == 2  # the second call found the stamp: no cmake


def test_a_binary_without_stamp_is_an_unfinished_build(tmp_path: Path) -> None:
    cache = cache_for(tmp_path)
    cache.server.parent.mkdir(parents=True)
    cache.server.write_text("#!/bin/sh\n")
    cache.server.chmod(0o755)
    assert built_server(cache) is None  # a link cut short can leave a file behind: only READY counts
    cache.stamp.write_text("x\n")
    assert built_server(cache) == cache.server


def test_a_failed_build_raises_with_the_log_tail_and_leaves_no_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    _fake_cmake(tmp_path / "bin", calls, fail=True)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cache = _with_source(tmp_path)
    with pytest.raises(EngineError, match=r"(?s)exited 3.*error: boom"):
        ensure_server(cache, jobs=1)
    assert not cache.stamp.exists() and built_server(cache) is None
