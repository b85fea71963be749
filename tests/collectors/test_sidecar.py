"""The columns sidecar (``collectors.sidecar``) gives the report a JSONL-only read gives, whatever befell it.

A real ``loadgen run`` on the embedded engine writes ``canaries*.columns.arrow`` beside its JSONL; its
``report.json`` is byte-identical whether ``loadgen report`` reads the sidecar, the JSONL alone (sidecar
removed), a sidecar torn mid-message, or a stale one (a JSONL line changed after). A run whose Locust
process is killed with SIGKILL mid-write gives the same report from what it left as from its JSONL.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pandas as pd  # type: ignore[import-untyped]

from collectors.runfolder import load_run
from collectors.sidecar import SidecarWriter, read_sidecar, sidecar_path

SMALL = ("--levels", "0,2", "--canaries-per-level", "3")  # quickstart, 11 canaries: seconds on the embedded engine


def report_bytes(run_dir: Path) -> bytes:
    got = subprocess.run(
        [sys.executable, "-m", "loadgen", "report", str(run_dir)], capture_output=True, text=True, timeout=180
    )
    assert got.returncode == 0, got.stderr
    return (run_dir / "report.json").read_bytes()


def same_columns(run_dir: Path) -> None:
    """``load_run`` through the sidecar equals ``load_run`` of the JSONL alone: rows, matrices, codes, files."""
    a, b = load_run(run_dir), load_run(run_dir, sidecar=False)
    pd.testing.assert_frame_equal(a.canaries.frame, b.canaries.frame)
    for name in ("token_ids", "token_codes", "logprobs", "top_gap"):
        x, y = getattr(a.canaries, name), getattr(b.canaries, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y)
    assert a.canaries.vocab.tolist() == b.canaries.vocab.tolist()
    assert a.files == b.files


def rewrite_sidecar(jsonl: Path, batch_records: int) -> int:
    """The sidecar rebuilt from the JSONL's lines by the collectors' writer, ``batch_records`` a batch."""
    sidecar_path(jsonl).unlink(missing_ok=True)
    writer = SidecarWriter(jsonl, batch_records=batch_records, batch_s=1e9)
    end = 0
    for line in jsonl.read_bytes().splitlines(keepends=True):
        end += len(line)
        writer.add(line, end)
    writer.close()
    return writer.batches


def test_a_real_run_reports_the_same_from_its_sidecar_torn_stale_or_missing(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", "quickstart", *SMALL, "--out", str(out), "--quiet"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p for p in out.iterdir() if (p / "manifest.json").exists()]
    (jsonl,) = run_dir.glob("canaries*.jsonl")
    side = sidecar_path(jsonl)
    assert side.stat().st_size > 0 and read_sidecar(jsonl, jsonl.stat().st_size)  # written by the run, matching
    from_sidecar = report_bytes(run_dir)
    same_columns(run_dir)

    kept = tmp_path / "sidecar"
    shutil.copyfile(side, kept)
    side.unlink()
    assert report_bytes(run_dir) == from_sidecar  # the JSONL alone

    assert rewrite_sidecar(jsonl, batch_records=3) >= 3  # several batches, so that a cut leaves some whole
    full = side.read_bytes()
    for cut in (len(full) // 3, len(full) // 2, len(full) - 7):
        side.write_bytes(full[:cut])  # torn mid-message
        assert report_bytes(run_dir) == from_sidecar
        same_columns(run_dir)

    side.write_bytes(full)
    lines = jsonl.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[-1])
    record["text"] = "changed after the sidecar"
    lines[-1] = orjson.dumps(record) + b"\n"
    jsonl.write_bytes(b"".join(lines))  # stale: the last batch no longer matches, so its rows come from the JSONL
    assert len(read_sidecar(jsonl, jsonl.stat().st_size)[-1].batches) < -(-len(lines) // 3)
    same_columns(run_dir)
    shutil.copyfile(kept, side)


SCENARIO = """
name = "killed"
[[canaries]]
id = "c"
prompt = "The old harbour town begins with"
max_tokens = 8
[background]
prompt_words = [4, 12]
max_tokens = [4, 8]
[sweep]
levels = [2]
canaries_per_level = 100000
warmup = 0
baseline = 1
"""


def locust_pid(parent: int) -> int | None:
    """The Locust process among ``parent``'s descendants: the innermost whose command line names locust (a
    guard that wraps it names it too)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if any(b"locust" in a for a in argv) and _descends(ppid, parent):
            found[int(entry.name)] = ppid
    inner = [pid for pid in found if not any(_descends(other, pid) for other in found if other != pid)]
    return inner[0] if len(inner) == 1 else None


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def test_a_locust_process_killed_mid_write_reports_as_its_jsonl(tmp_path: Path) -> None:
    scenario = tmp_path / "killed.toml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "loadgen", "run", str(scenario), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:  # until the sidecar holds a batch and more lines followed it
            assert proc.poll() is None and time.monotonic() < deadline, "no sidecar batch within 120 s"
            runs = [p for p in out.glob("*-killed") if (p / "manifest.json").exists()] if out.exists() else []
            jsonls = list(runs[0].glob("canaries*.jsonl")) if runs else []
            parts = read_sidecar(jsonls[0], jsonls[0].stat().st_size) if jsonls else []
            if parts and jsonls[0].stat().st_size > parts[-1].end:
                break
            time.sleep(0.2)
        pid = locust_pid(proc.pid)
        assert pid is not None, "no Locust process under loadgen run"
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    run_dir = runs[0]
    (jsonl,) = run_dir.glob("canaries*.jsonl")
    assert sidecar_path(jsonl).exists()
    from_what_was_left = report_bytes(run_dir)
    same_columns(run_dir)
    sidecar_path(jsonl).unlink()
    assert report_bytes(run_dir) == from_what_was_left
