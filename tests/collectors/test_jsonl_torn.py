"""JsonlWriter on a disk that stops taking bytes: a short write is finished or counted, a line cut
mid-way is counted as torn, the next record starts on a line of its own, and readers skip the torn
line and say it is a torn tail."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

from collectors.jsonl import JsonlWriter, read_jsonl
from collectors.read.runfolder import _torn_tail  # the one rule every reader of the run folder applies


class Disk:
    """A file that takes at most ``room`` more bytes, a few at a time, then refuses with EFBIG."""

    def __init__(self, real: Any, room: int, chunk: int = 7) -> None:
        self.real, self.room, self.chunk = real, room, chunk
        self.closed = False

    def write(self, data: Any) -> int:
        if self.room <= 0:
            raise OSError(errno.EFBIG, "File too large")
        n = min(len(data), self.chunk, self.room)  # short writes, as a pipe or a nearly full disk gives
        self.room -= n
        return int(self.real.write(bytes(data[:n])))

    def close(self) -> None:
        self.closed = True
        self.real.close()


def test_short_writes_are_finished_and_a_refused_one_is_torn_and_counted(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path / "c.jsonl")
    line = len(b'{"i":0,"pad":"xxxxxxxxxx"}\n')
    w._fh = disk = Disk(w._fh, room=2 * line + 5)  # type: ignore[assignment]  # two lines and the start of a third
    for i in range(4):
        w.write({"i": i, "pad": "x" * 10})
    assert (w.written, w.failures, w.torn) == (2, 2, 1)
    disk.room = 10_000  # space again: the next record must not be glued to the torn line
    assert w.write({"i": 9, "pad": "x" * 10})
    w.close()
    read = read_jsonl(w.path)
    assert [r["i"] for r in read.rows] == [0, 1, 9] and read.skipped_lines == [3]


def test_a_background_batch_counts_only_the_lines_it_wrote_whole(tmp_path: Path) -> None:
    w = JsonlWriter(tmp_path / "b.jsonl", flush_s=60)
    w.write({"i": 0})  # the first write is due at once
    w._fh = Disk(w._fh, room=len(b'{"i":1}\n{"i":2}\n{"'))  # type: ignore[assignment]
    for i in (1, 2, 3, 4):
        w.write({"i": i})
    w.flush()
    assert (w.written, w.failures, w.torn) == (3, 2, 1)


def test_readers_tell_a_torn_tail_from_corruption(tmp_path: Path) -> None:
    good = b'{"schema": 1}\n'
    (tmp_path / "canaries.jsonl").write_bytes(good + b'{"not json\n' + good + b'{"schema": 1, "tok')
    (tmp_path / "other.jsonl").write_bytes(good + b'{"not json\n')
    assert _torn_tail(tmp_path / "canaries.jsonl", [2, 4]) is True
    assert _torn_tail(tmp_path / "other.jsonl", [2]) is False  # a corrupt line, but whole
