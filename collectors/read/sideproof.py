"""Which rows of a canary columns file are, provably, lines of its JSONL: the only rows the reader takes from it.

Why: a run folder is hostile input, and whoever crafts one writes both the JSONL and its columns file
(``collectors.sidecar``), so nothing the columns file says of itself (offsets, CRC-32s, a digest of the JSONL) proves
its values. Each row is written again as the JSONL line it stands for (``collectors.rowline``) and compared with the
JSONL's bytes at that place; a row is trusted only where the two are equal, so its values are exactly what parsing
the JSONL would give, and the first row that differs ends the columns file's use there (the reader reads on from
the JSONL, and says so). Writing a line again costs less than reading it from the JSONL (about half, for a
128-token record with two alternatives a position): orjson formats the numbers, the token strings and the text
around them are joined from the vocabularies (each distinct token list, logprob list and set of alternatives once),
and one comparison covers a chunk of lines. A big file is proven in several processes (``collectors.read.proofpool``).

The head is proven too: cut where ``rowline.cut_at`` cuts it, with ``rowline.MARK`` there, it must parse alone to a
record whose top-level ``token_ids`` is the marker and that has no other sequence key, so the sequences written
there are the record's own and not values inside its request or usage.

What is read is held to what the JSONL holds, before it is read: the index a piece at a time, at most one row per
``SHORTEST_LINE`` bytes of JSONL; each row's counts no more than its line's bytes can carry (an id or a logprob
takes at least two, a token string three); the values and the JSONL a chunk at a time (``CHUNK_ROWS`` rows, at most
``CHUNK_BYTES`` of JSONL); the vocabulary no longer than the lines that use it. A killed writer's torn tail (a row
whose values are not all in their files) ends the coverage without a notice. Must not print.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import orjson

from collectors.rowline import MARK, LineWriter, Rows, cut_at
from collectors.sidecar import INDEX
from loadgen.core.errors import RunFolderError

SHORTEST_LINE = 128  # bytes: a record's line holds its required fields and the four sequence keys, at least
CHUNK_ROWS = 2048  # rows verified at a time
CHUNK_BYTES = 32 << 20  # of JSONL verified at a time (one line more where a single line is longer)
_INDEX_PIECE = 1 << 16  # index rows read at a time
_ITEM = {"head": 1, "ids": 8, "lp": 8, "top": 8, "alts": 4, "codes": 4}
_DTYPE = {"ids": "<i8", "lp": "<f8", "top": "<f8", "alts": "<i4", "codes": "<i4"}
_SEQUENCE_KEYS = ("tokens", "logprobs", "top_logprobs")
Ints = npt.NDArray[np.int64]


@dataclass
class Mapped:
    """A columns folder's proven rows: their index rows, each row's start in every file (one more start than rows),
    the open files and the vocabulary its codes point into. Values are read a chunk at a time (``read``), never
    mapped: mapped pages would count in the reader's resident memory as a million records' worth were touched."""

    rows: int
    index: npt.NDArray[np.void]
    fds: dict[str, int]  # head, ids, lp, top, alts, codes -> an open file descriptor
    vocab: list[str]
    at: dict[str, Ints]  # head, ids, lp, top, alts, codes -> cumulative starts

    def read(self, name: str, a: int, b: int) -> Any:
        """Rows ``a`` to ``b``'s values in file ``name`` (bytes for ``head``)."""
        start, end = int(self.at[name][a]), int(self.at[name][b])
        item = _ITEM[name]
        data = os.pread(self.fds[name], (end - start) * item, start * item) if end > start else b""
        if len(data) != (end - start) * item:
            raise RunFolderError(f"{name}: shorter than when it was read")
        return data if name == "head" else np.frombuffer(data, dtype=_DTYPE[name])


def lengths(index: npt.NDArray[np.void]) -> dict[str, Ints]:
    """Each row's count of values in every file (bytes for ``head``)."""
    n_top = index["n_top"].astype(np.int64).clip(0) * index["k"].astype(np.int64)
    return {
        "head": index["head"].astype(np.int64),
        "ids": index["n_ids"].astype(np.int64).clip(0),
        "lp": index["n_lp"].astype(np.int64).clip(0),
        "top": n_top,
        "alts": n_top,
        "codes": index["n_tok"].astype(np.int64).clip(0),
    }


def prove(files: dict[str, BinaryIO], jsonl: int, line_limit: int) -> tuple[Mapped | None, str | None]:
    """The rows of a columns file (its ``files``, open) that are lines 1, 2, ... of the JSONL open as ``jsonl`` (a
    descriptor; no line longer than ``line_limit``), and why the row after them is not (None: they are all, or the
    rest is a torn tail). In this process; ``collectors.read.proofpool`` proves a big file in several."""
    return Prover(files, jsonl, line_limit).run()


class Prover:
    """Proves a columns file's rows in order, from where it stands: the rows proven so far, where the next one's
    line starts in the JSONL and its values in each file."""

    def __init__(self, files: dict[str, BinaryIO], jsonl: int, line_limit: int) -> None:
        self.files = files
        self.jsonl = jsonl
        self.limit = line_limit
        self.jsonl_size = os.fstat(jsonl).st_size
        self.sizes = {k: os.fstat(fh.fileno()).st_size // _ITEM[k] for k, fh in files.items() if k in _ITEM}
        self.at = dict.fromkeys(_ITEM, 0)  # the next row's start in each file
        self.lines = LineWriter()
        self.words = _Vocabulary(files["vocab"])
        self.alt_words = _Vocabulary(files["altvocab"])
        self.kept: list[npt.NDArray[np.void]] = []
        self.rows = 0  # proven
        self.end = 0  # JSONL bytes they cover
        self.why: str | None = None  # why the index's rows past the last piece cannot be lines

    def run(self) -> tuple[Mapped | None, str | None]:
        for piece in self.pieces():
            proven, why = self.prove_rows(piece)
            if proven < len(piece):
                return self.result(why)
        return self.result(self.why)

    def pieces(self) -> Iterator[npt.NDArray[np.void]]:
        """The index a piece at a time, each cut before its first row that cannot be the next line (``why`` says
        why, and no piece follows it); a piece is read once the rows before it are proven."""
        most = self.jsonl_size // SHORTEST_LINE + 1  # rows the JSONL could hold: a longer index is not read
        rows = min(os.fstat(self.files["index"].fileno()).st_size // INDEX.itemsize, most)
        while self.rows < rows and self.why is None:
            count = min(_INDEX_PIECE, rows - self.rows) * INDEX.itemsize
            piece = np.frombuffer(os.pread(self.files["index"].fileno(), count, self.rows * INDEX.itemsize), INDEX)
            piece, self.why = self._plausible(piece)
            if not len(piece):
                return
            yield piece

    def prove_rows(self, rows: npt.NDArray[np.void]) -> tuple[int, str | None]:
        """How many of ``rows`` (the next ones) are proven lines, a chunk at a time, and why the next is not (None:
        a torn tail)."""
        a = 0
        while a < len(rows):
            b = self._chunk_end(rows, a)
            done, why = self._chunk(rows[a:b])
            if done < b - a:
                return a + done, why
            a = b
        return len(rows), None

    def position(self, before: npt.NDArray[np.void]) -> tuple[int, int, dict[str, int]]:
        """Where the row after ``before`` (the next rows) starts: its number, its line's start in the JSONL, its
        values' start in each file."""
        if not len(before):
            return self.rows, self.end, dict(self.at)
        used = {k: self.at[k] + int(v.sum()) for k, v in lengths(before).items()}
        return self.rows + len(before), int(before["jsonl_end"][-1]), used

    def start_at(self, rows: int, end: int, at: dict[str, int]) -> None:
        """Stand before row ``rows + 1`` (``position``), the rows before it taken as proven elsewhere."""
        self.rows, self.end, self.at, self.kept = rows, end, dict(at), []

    def keep(self, rows: npt.NDArray[np.void]) -> None:
        """``rows``, the next ones, proven."""
        self._keep(rows, {k: int(v.sum()) for k, v in lengths(rows).items()})

    def result(self, why: str | None) -> tuple[Mapped | None, str | None]:
        """The rows proven, mapped, and ``why`` the next is not."""
        if not self.rows:
            return None, why
        index = np.concatenate(self.kept)
        self.words.count(index["vocab"][-1:], self.end)  # read here where children proved the rows
        at = {k: np.concatenate([[0], np.cumsum(v)]) for k, v in lengths(index).items()}
        fds = {k: fh.fileno() for k, fh in self.files.items() if k in _ITEM}
        return Mapped(self.rows, index, fds, self.words.words[: int(index["vocab"][-1])], at), why

    def _plausible(self, piece: npt.NDArray[np.void]) -> tuple[npt.NDArray[np.void], str | None]:
        """The piece up to its first row that cannot be the next line: numbered wrong, not ending after the last,
        past the JSONL's end, or claiming more than its line's bytes can carry."""
        ends = piece["jsonl_end"].astype(np.int64)
        lens = np.diff(ends, prepend=self.end)
        n = {k: piece[k].astype(np.int64) for k in ("head", "n_ids", "n_tok", "n_lp", "n_top", "k", "vocab")}
        checks = (
            (piece["line"] != np.arange(self.rows + 1, self.rows + len(piece) + 1), "it is not line {r} of the JSONL"),
            (lens <= 0, "it does not end after line {p}"),
            (ends > self.jsonl_size, f"it ends past the {self.jsonl_size:,}-byte JSONL"),
            (lens > self.limit, f"its line would be longer than {self.limit:,} bytes"),
            (
                (n["head"] < 2)
                | (n["head"] > lens)
                | (n["n_ids"] < -1)
                | (n["n_ids"] * 2 > lens)
                | (n["n_tok"] < -1)
                | (n["n_tok"] * 3 > lens)
                | (n["n_lp"] < -1)
                | (n["n_lp"] * 2 > lens)
                | (n["n_top"] < -1)
                | (n["n_top"] * 2 > lens)
                | (n["k"] < 0)
                | (n["k"] > lens)
                | (n["n_top"].clip(0) * n["k"] * 6 > lens),
                "it claims more values than its line's {n:,} bytes can carry",
            ),
            (
                (np.diff(n["vocab"], prepend=self._last("vocab")) < 0)
                | (np.diff(piece["alt_vocab"].astype(np.int64), prepend=self._last("alt_vocab")) < 0),
                "a vocabulary shrinks",
            ),
        )
        first = len(piece)
        why = None
        for bad, says in checks:
            hits = np.flatnonzero(bad)
            if len(hits) and hits[0] < first:
                first = int(hits[0])
                r = self.rows + first + 1
                why = f"its row {r}: " + says.format(r=r, p=r - 1, n=int(lens[first]))
        return piece[:first], why

    def _last(self, name: str) -> int:
        return int(self.kept[-1][name][-1]) if self.kept else 0

    def _chunk_end(self, piece: npt.NDArray[np.void], a: int) -> int:
        """Where the chunk from row ``a`` of ``piece`` ends: ``CHUNK_ROWS`` rows at most, ``CHUNK_BYTES`` of JSONL
        at most (one row at least)."""
        ends = piece["jsonl_end"][a : a + CHUNK_ROWS].astype(np.int64)
        return a + max(int(np.searchsorted(ends, self.end + CHUNK_BYTES, side="right")), 1)

    def _chunk(self, rows: npt.NDArray[np.void]) -> tuple[int, str | None]:
        """How many of ``rows`` (the next ones) are proven lines, and why the next is not (None: a torn tail)."""
        count = lengths(rows)
        have = len(rows)
        for name, c in count.items():  # rows whose values are all in their files
            reach = self.at[name] + np.cumsum(c)
            have = min(have, int(np.searchsorted(reach, self.sizes[name], side="right")))
        budget = int(rows["jsonl_end"][-1])  # a vocabulary holds no more than the lines that use it
        have = min(have, self.words.count(rows["vocab"], budget), self.alt_words.count(rows["alt_vocab"], budget))
        self.lines.add_words(self.words.new(), self.alt_words.new())
        if not have:
            return 0, None
        values = {name: self._values(name, int(c[:have].sum())) for name, c in count.items()}
        heads = _split(values["head"], count["head"][:have])
        cuts = _proven_heads(heads)
        n = len(cuts)
        why = None if n == have else f"its row {self.rows + n + 1} is not a canary record's head"
        if n:
            rows, heads = rows[:n], heads[:n]
            counts: dict[str, Any] = {k: rows[k].astype(np.int64) for k in ("n_ids", "n_tok", "n_lp", "n_top", "k")}
            flat: dict[str, Any] = {
                k: values[k][: int(count[k][:n].sum())] for k in ("ids", "codes", "lp", "top", "alts")
            }
            line_rows = Rows(heads, **counts, **flat)
            good = self._compare(rows, line_rows, cuts)
            if good < n:
                n, why = good, f"its row {self.rows + good + 1} is not line {self.rows + good + 1} of the JSONL"
            self._keep(rows[:n], {k: int(c[:n].sum()) for k, c in count.items()})
        return n, why

    def _compare(self, rows: npt.NDArray[np.void], line_rows: Rows, cuts: list[int]) -> int:
        """How many rows give back their JSONL line, byte for byte."""
        for codes, per_row, vocab in (
            (line_rows.codes, line_rows.n_tok.clip(0), rows["vocab"]),
            (line_rows.alts, lengths(rows)["alts"], rows["alt_vocab"]),
        ):
            known = np.repeat(vocab.astype(np.int64), per_row)  # a code must be of a word its row's vocabulary had
            bad = np.flatnonzero((codes < 0) | (codes >= known))
            if len(bad):
                return int(np.searchsorted(np.cumsum(per_row), bad[0], side="right"))
        written = self.lines.lines(line_rows, cuts)
        if written is None:
            return 0
        ends = rows["jsonl_end"].astype(np.int64) - self.end
        data = os.pread(self.jsonl, int(ends[-1]), self.end)
        start = 0
        for r, end in enumerate(ends.tolist()):  # each line where the index puts it, and nothing between
            if len(written[r]) != end - start or not data.startswith(written[r], start):
                return r
            start = end
        return len(rows)

    def _values(self, name: str, count: int) -> Any:
        item = _ITEM[name]
        data = os.pread(self.files[name].fileno(), count * item, self.at[name] * item) if count else b""
        if len(data) != count * item:
            raise OSError(f"{name}: shorter than its size")
        return data if name == "head" else np.frombuffer(data, dtype=_DTYPE[name])

    def _keep(self, rows: npt.NDArray[np.void], used: dict[str, int]) -> None:
        if not len(rows):
            return
        self.kept.append(rows.copy())
        self.rows += len(rows)
        self.end = int(rows["jsonl_end"][-1])
        for name, n in used.items():
            self.at[name] += n


class _Vocabulary:
    """One of a columns file's vocabularies, read a word at a time as rows need them."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.words: list[str] = []
        self.bytes = 0
        self.given = 0  # words handed on by ``new``

    def new(self) -> list[str]:
        """The words read since the last call."""
        got, self.given = self.words[self.given :], len(self.words)
        return got

    def count(self, need: npt.NDArray[Any], budget: int) -> int:
        """How many rows in a row (``need``: the words each one's codes may use) have every word they need read:
        read here as needed, no more bytes of the file than ``budget``; raises ``ValueError`` for a word that is
        not a JSON string or does not end within the budget."""
        while len(self.words) < int(need[-1]) and self.bytes < budget:
            line = self.fh.readline(budget - self.bytes + 1)
            if len(line) > budget - self.bytes:
                raise ValueError("its vocabulary holds a word longer than the lines that use it")
            if not line.endswith(b"\n"):  # a torn last word, or the end of the file
                break
            self.bytes += len(line)
            word = orjson.loads(line)
            if type(word) is not str:
                raise ValueError("a vocabulary entry that is not a string")
            self.words.append(word)
        return int(np.searchsorted(need, len(self.words), side="right"))


def _split(data: bytes, sizes: Ints) -> list[bytes]:
    at = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    return [data[at[r] : at[r + 1]] for r in range(len(sizes))]


def _proven_heads(heads: list[bytes]) -> list[int]:
    """Where each head is cut (``rowline.cut_at``), for as many heads in a row as are a canary record's with its
    sequences cut out there: with ``rowline.MARK`` at the cut, each parses alone to an object whose top-level
    ``token_ids`` is the marker and that has no other sequence key."""
    cuts: list[int] = []
    for head in heads:
        cut = cut_at(head)
        if cut is None or not head.endswith(b","):
            break
        try:
            got = orjson.loads(head[:cut] + MARK + head[cut:-1])
        except orjson.JSONDecodeError:
            break
        if type(got) is not dict or got.get("token_ids") != "\x00" or any(k in got for k in _SEQUENCE_KEYS):
            break
        cuts.append(cut)
    return cuts
