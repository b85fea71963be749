"""The read benchmark prints both paths, JSONL alone and through the columns file, and counts its workers' memory.

Why: issue 50 asks for records/s, the report's end-to-end time and peak RSS of both paths at the same size, and
the peak once printed 0 for the workers (``RUSAGE_CHILDREN`` never sees a forkserver's children). No timing is
asserted: the figures must be there, and the two paths must have read the same records.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from read_speed import TreeRss

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "read_speed.py"
ROW = re.compile(r"^\| (reference|fast) \| (JSONL|columns file) \| each record its own \| ([\d,]+) \| ([\d,]+) \|")


def test_it_prints_both_paths_at_the_same_size_and_the_parsers_alone() -> None:
    cmd = [sys.executable, str(SCRIPT), "--records", "400", "--old-records", "100", "--distinct-only", "--parsers"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300, env=env).stdout
    rows = [m.groups() for line in out.splitlines() if (m := ROW.match(line))]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("reference", "JSONL", "100"),
        ("fast", "JSONL", "100"),
        ("fast", "JSONL", "400"),
        ("fast", "columns file", "400"),
    ]
    assert all(int(r[3].replace(",", "")) > 0 for r in rows)  # records/s
    paths = re.search(r"at 400 records: columns file / JSONL = [\d.]+x read, .* (\d+) \(JSONL\) vs (\d+) \(col", out)
    assert paths is not None and paths[1] == paths[2] != "0"  # the same completions read by both paths
    assert re.search(r"orjson\.loads, whole line, one process: [\d,]+ records/s", out)
    assert re.search(r"pyarrow\.json\.read_json, explicit schema, \d+ threads: [\d,]+ records/s", out)


def test_tree_rss_counts_a_process_below_this_one() -> None:
    hold = "b = bytearray(300 << 20); import time; time.sleep(3)"  # 300 MiB touched, in a process of its own
    with TreeRss() as tree:
        child = subprocess.Popen([sys.executable, "-c", hold])
        time.sleep(2)
        child.wait(timeout=30)
    assert tree.peak > 300 << 20
