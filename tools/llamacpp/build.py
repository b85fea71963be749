"""Fetch llama.cpp's source through pip and build ``llama-server`` once into a cache directory.

Why: llama.cpp ships no binary on the package registries this project may use, but its full source
rides inside the ``llama-cpp-python`` sdist (``vendor/llama.cpp``, with ``tools/server`` and the
vocab-only GGUFs in ``models/``). Building takes minutes, so the result is kept at
``<cache>/llama.cpp/<version>/`` and reused: a ``READY`` stamp is written only after a build
succeeded, so an interrupted build is resumed (incrementally), never mistaken for a finished one.
Command lines are pure functions; only ``ensure_server`` runs processes. It prints nothing: the
build's output goes to ``build.log`` in the cache, and a failure raises ``EngineError`` with its tail.
Because a build takes minutes, ``ensure_server`` tells an ``on_stage`` callback what it is doing
(downloading, extracting, configuring, building with the compiler's percentage, read from the build
output by ``build_progress``); the caller decides how to show it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from loadgen.core.errors import EngineError
from loadgen.launchers.process import log_tail

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # pinned: the cache key, and what CI builds
# -march=native (GGML_NATIVE's default) is right for a per-machine cache. Everything that would reach
# past the package registries (prebuilt web UI, OpenSSL's FetchContent) and everything but the server
# (tests, examples) is off; static libraries make the binary self-contained.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)


@dataclass(frozen=True)
class LlamaCppCache:
    """Where one version's source, build and binary live."""

    root: Path  # <cache>/llama.cpp/<version>

    @property
    def src(self) -> Path:
        return self.root / "src"  # the extracted sdist

    @property
    def llama_cpp(self) -> Path:
        return self.src / "vendor" / "llama.cpp"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def server(self) -> Path:
        return self.build_dir / "bin" / "llama-server"

    @property
    def stamp(self) -> Path:
        return self.root / "READY"

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    @property
    def vocab_dir(self) -> Path:
        return self.llama_cpp / "models"


def cache_home(env: Mapping[str, str]) -> Path:
    """``$LOADGEN_CACHE``, else ``$XDG_CACHE_HOME/loadgen``, else ``~/.cache/loadgen``."""
    if env.get("LOADGEN_CACHE"):
        return Path(env["LOADGEN_CACHE"]).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "loadgen"
    return Path.home() / ".cache" / "loadgen"


def cache_for(home: Path, version: str = LLAMA_CPP_PYTHON_VERSION) -> LlamaCppCache:
    return LlamaCppCache(home / "llama.cpp" / version)


def download_command(version: str, dest: Path, *, python: str = sys.executable) -> list[str]:
    return [
        python,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--no-binary",
        ":all:",
        f"llama-cpp-python=={version}",
        "-d",
        str(dest),
    ]


def configure_command(cache: LlamaCppCache, *, ninja: bool) -> list[str]:
    generator = ["-G", "Ninja"] if ninja else []
    return ["cmake", "-S", str(cache.llama_cpp), "-B", str(cache.build_dir), *generator, *CMAKE_FLAGS]


def build_command(cache: LlamaCppCache, jobs: int) -> list[str]:
    return ["cmake", "--build", str(cache.build_dir), "--target", "llama-server", "-j", str(jobs)]


Stage = Callable[[str], None]  # told what the build is doing now, e.g. "building llama-server: 45%"
_MAKE = re.compile(rb"^\[\s*(\d{1,3})%\]")  # Unix Makefiles: "[ 45%] Building CXX object ..."
_NINJA = re.compile(rb"^\[(\d+)/(\d+)\]")  # Ninja: "[123/456] Building CXX object ..."


def no_stage(_what: str) -> None:
    """The default ``on_stage``: say nothing."""


def build_progress(line: bytes) -> int | None:
    """The percentage a build output line shows (Make's ``[ 45%]``, Ninja's ``[123/456]``); None for other lines."""
    if m := _MAKE.match(line):
        return min(int(m[1]), 100)
    if (m := _NINJA.match(line)) and int(m[2]):
        return min(100 * int(m[1]) // int(m[2]), 100)
    return None


def built_server(cache: LlamaCppCache) -> Path | None:
    """The cached binary when a build finished, else None (no build, or one that was cut short)."""
    if cache.stamp.is_file() and os.access(cache.server, os.X_OK):
        return cache.server
    return None


def ensure_server(cache: LlamaCppCache, *, jobs: int | None = None, on_stage: Stage = no_stage) -> Path:
    """The path of a built ``llama-server``: the cached one, else fetch, extract and build it now, telling
    ``on_stage`` each step (and the compiler's percentage while it builds)."""
    done = built_server(cache)
    if done is not None:
        return done
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise EngineError(f"building llama-server needs {tool!r} on PATH (Debian: apt-get install cmake g++)")
    cache.root.mkdir(parents=True, exist_ok=True)
    with open(cache.log, "ab") as log:
        if not cache.src.is_dir():
            _fetch_source(cache, log, on_stage)
        ninja = shutil.which("ninja") is not None and not (cache.build_dir / "Makefile").exists()
        on_stage("configuring llama.cpp (cmake)")
        _step(configure_command(cache, ninja=ninja), cache, log)
        jobs = jobs or os.cpu_count() or 2
        building = f"building llama-server ({jobs} job{'s' if jobs != 1 else ''}, log: {cache.log})"
        on_stage(building)
        _step(build_command(cache, jobs), cache, log, lambda pct: on_stage(f"{building}: {pct}%"))
    if not os.access(cache.server, os.X_OK):
        raise EngineError(f"the build finished but {cache.server} is not there; see {cache.log}")
    cache.stamp.write_text(LLAMA_CPP_PYTHON_VERSION + "\n")
    return cache.server


def _fetch_source(cache: LlamaCppCache, log: BinaryIO, on_stage: Stage) -> None:
    """Download the sdist and extract it to ``src`` (through a temporary folder: a cut extraction leaves no ``src``)."""
    version = cache.root.name
    with tempfile.TemporaryDirectory(dir=cache.root, prefix="fetch-") as tmp:
        on_stage(f"downloading the llama-cpp-python {version} source (pip)")
        _step(download_command(version, Path(tmp)), cache, log)
        archives = sorted(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if len(archives) != 1:
            raise EngineError(f"pip download left {[a.name for a in archives]} in {tmp}, expected one sdist")
        on_stage(f"extracting {archives[0].name}")
        with tarfile.open(archives[0]) as tar:
            tar.extractall(tmp, filter="data")
        top = Path(tmp) / archives[0].name.removesuffix(".tar.gz")
        if not (top / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
            raise EngineError(f"{archives[0].name} holds no vendor/llama.cpp/CMakeLists.txt")
        top.rename(cache.src)


def _step(
    cmd: list[str], cache: LlamaCppCache, log: BinaryIO, on_progress: Callable[[int], None] | None = None
) -> None:
    """Run one command, its output appended to the log; with ``on_progress``, the output is read line by line on
    its way to the log and each new build percentage is passed on."""
    log.write(("$ " + " ".join(cmd) + "\n").encode())
    log.flush()
    if on_progress is None:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    else:
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
            assert proc.stdout is not None
            shown = None
            for line in proc.stdout:
                log.write(line)
                pct = build_progress(line)
                if pct is not None and pct != shown:
                    shown = pct
                    on_progress(pct)
            log.flush()
            code = proc.wait()
    if code != 0:
        raise EngineError(f"{' '.join(cmd)} exited {code}; last lines of {cache.log}:\n{log_tail(cache.log)}")
