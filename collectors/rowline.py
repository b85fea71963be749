"""The JSONL line a row of the canary columns file stands for, written again from the row's values alone.

Why: the columns file (``collectors.sidecar``) is a copy of its JSONL that the report reads without parsing, and a
run folder is hostile input: whoever crafts one writes both files. A digest of the JSONL kept in the columns file
would prove nothing about the columns' own values, so the reader (``collectors.read.sidecar``) trusts a row only
where the line written here from the row's head, ids, token strings, logprobs and alternatives is, byte for byte,
the JSONL's line: then parsing that line gives exactly what the row holds, and nothing was parsed to know it. The
writer makes the same comparison before it appends a row, so an honest folder never fails it (a record whose line
this cannot write again, such as a logprob the server sent as an integer, ends the columns file there).

A line is the row's head (the record's JSON without its four sequences, ``HEAD_FIELDS`` in order) cut before its
``,"text":`` key, with the sequences between as orjson writes them: ``"token_ids"`` (integers), ``"tokens"``
(strings of the file's vocabulary), ``"logprobs"`` (numbers, NaN as null), ``"top_logprobs"`` (per position ``k``
pairs of a vocabulary string and a number). Where the cut is a top-level key, and not one inside an object such
as the request, is for the reader to prove (``MARK``). Pure: numpy and orjson only, no I/O; it runs in the Locust
process too.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

# the head with this at its cut parses to the record with "\x00" as its top-level token_ids; a head holding the
# escape itself proves nothing and is never cut (``cut_at``)
MARK = b',"token_ids":"\\u0000"'
_ESCAPED_NUL = b"\\u0000"
_TEXT = b',"text":'
_KEYS = (b',"token_ids":', b',"tokens":', b',"logprobs":', b',"top_logprobs":')
_NULL = b"null"
_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_MEMO_KEPT = 4096  # distinct token lists and alternative layouts remembered
Ints = npt.NDArray[np.int64]


def cut_at(head: bytes) -> int | None:
    """Where the sequences go in ``head`` (its last ``,"text":`` key), or None where it has no such key or holds
    the marker's escape (no line of such a head is written or trusted)."""
    if _ESCAPED_NUL in head:
        return None
    at = head.rfind(_TEXT)
    return at if at > 0 else None


@dataclass
class Rows:
    """Consecutive rows of a columns file: each row's head (a JSON object and a comma), the count of each of its
    sequences (-1: null; ``n_top`` positions of ``k`` alternatives each) and the rows' values concatenated: ids,
    token codes, logprobs, the alternatives' logprobs and their token codes (``alts``, ``n_top * k`` a row)."""

    heads: list[bytes]
    n_ids: Ints
    n_tok: Ints
    n_lp: Ints
    n_top: Ints
    k: Ints
    ids: npt.NDArray[np.int64]
    codes: npt.NDArray[np.int32]
    lp: npt.NDArray[np.float64]
    top: npt.NDArray[np.float64]
    alts: npt.NDArray[np.int32]


def _starts(counts: Ints) -> list[int]:
    return np.concatenate([[0], np.cumsum(counts.clip(0))]).tolist()  # type: ignore[no-any-return]


class _Strings:
    """A vocabulary's strings as JSON, in code order (grown by doubling: the writer adds a few at a time)."""

    def __init__(self) -> None:
        self.n = 0
        self.json: npt.NDArray[np.object_] = np.empty(64, dtype=object)

    def add(self, words: Iterable[str]) -> None:
        new = [orjson.dumps(w) for w in words]
        end = self.n + len(new)
        if end > len(self.json):
            grown = np.empty(max(end, 2 * len(self.json)), dtype=object)
            grown[: self.n] = self.json[: self.n]
            self.json = grown
        self.json[self.n : end] = new
        self.n = end

    def knows(self, codes: npt.NDArray[np.int32]) -> bool:
        return not codes.size or (int(codes.min()) >= 0 and int(codes.max()) < self.n)


class _Memo:
    """Texts already written, by the values they were written from; it stops remembering once a trial of
    ``_TRIAL`` lookups found fewer than a quarter repeated (a run whose values are all distinct)."""

    def __init__(self) -> None:
        self.texts: dict[Any, bytes] | None = {}
        self.asked = self.found = 0

    def get(self, key: Any) -> bytes | None:
        if self.texts is None:
            return None
        self.asked += 1
        got = self.texts.get(key)
        self.found += got is not None
        if self.asked == _TRIAL and self.found < _TRIAL // 4:
            self.texts = None
        return got

    def put(self, key: Any, text: bytes) -> bytes:
        if self.texts is not None:
            if len(self.texts) >= _MEMO_KEPT:  # many distinct values: keep memory bounded, start again
                self.texts.clear()
            self.texts[key] = text
        return text


_TRIAL = 1024


class LineWriter:
    """Writes rows' JSONL lines again; holds the file's two vocabularies (token strings, alternatives' strings)."""

    def __init__(self) -> None:
        self._words = _Strings()
        self._alt_words = _Strings()
        self._tokens = _Memo()  # token codes -> the JSON list of their strings
        self._logprobs = _Memo()  # logprobs -> their JSON list
        self._tops = _Memo()  # (k, alternatives' codes, their logprobs) -> the JSON of the alternatives
        self._layouts: dict[tuple[int, bytes], list[bytes]] = {}  # (k, alternatives' codes) -> text before each number

    def add_words(self, words: Iterable[str], alt_words: Iterable[str]) -> None:
        """The vocabularies' next strings, in code order."""
        self._words.add(words)
        self._alt_words.add(alt_words)

    def lines(self, rows: Rows, cuts: list[int]) -> list[bytes] | None:
        """Each row's line, its newline included (``cuts``: where each head is cut, ``cut_at``); None where a code
        is not one of its vocabulary's."""
        if not (self._words.knows(rows.codes) and self._alt_words.knows(rows.alts)):
            return None
        at_ids, at_tok, at_lp = _starts(rows.n_ids), _starts(rows.n_tok), _starts(rows.n_lp)
        at_top = _starts(rows.n_top.clip(0) * rows.k)
        counts = (rows.n_ids, rows.n_tok, rows.n_lp, rows.n_top, rows.k)
        shape = zip(*(c.tolist() for c in counts), strict=True)
        out = []
        for r, (n_ids, n_tok, n_lp, n_top, k) in enumerate(shape):
            head, cut = rows.heads[r], cuts[r]
            ids = _NULL if n_ids < 0 else orjson.dumps(rows.ids[at_ids[r] : at_ids[r + 1]], option=_NUMPY)
            tokens = _NULL if n_tok < 0 else self._token_list(rows.codes[at_tok[r] : at_tok[r + 1]])
            lp = _NULL if n_lp < 0 else self._numbers(rows.lp[at_lp[r] : at_lp[r + 1]])
            if n_top < 0:
                top = _NULL
            elif n_top == 0 or k == 0:
                top = b"[" + b",".join([b"[]"] * n_top) + b"]"
            else:
                top = self._alternatives(k, rows.alts[at_top[r] : at_top[r + 1]], rows.top[at_top[r] : at_top[r + 1]])
            out.append(
                b"".join(
                    (head[:cut], _KEYS[0], ids, _KEYS[1], tokens, _KEYS[2], lp, _KEYS[3], top, head[cut:-1], b"\n")
                )
            )
        return out

    def _token_list(self, codes: npt.NDArray[np.int32]) -> bytes:
        key = codes.tobytes()
        got = self._tokens.get(key)
        return got if got is not None else self._tokens.put(key, b"[" + b",".join(self._words.json[codes]) + b"]")

    def _numbers(self, values: npt.NDArray[np.float64]) -> bytes:
        key = values.tobytes()
        got = self._logprobs.get(key)
        return got if got is not None else self._logprobs.put(key, orjson.dumps(values, option=_NUMPY))

    def _alternatives(self, k: int, alts: npt.NDArray[np.int32], values: npt.NDArray[np.float64]) -> bytes:
        """``[[[``, then each alternative's token string, a comma, its number and ``],[`` (the next at its position)
        or ``]],[[`` (the first of the next), and ``]]]`` last."""
        key = (k, alts.tobytes(), values.tobytes())
        got = self._tops.get(key)
        if got is not None:
            return got
        woven: list[Any] = [None] * (2 * len(alts)) + [b"]]]"]
        woven[0:-1:2] = self._layout(k, alts)
        woven[1:-1:2] = orjson.dumps(values, option=_NUMPY)[1:-1].split(b",")
        return self._tops.put(key, b"".join(woven))

    def _layout(self, k: int, alts: npt.NDArray[np.int32]) -> list[bytes]:
        """The text before each alternative's number: the brackets, its token string and a comma."""
        key = (k, alts.tobytes())
        got = self._layouts.get(key)
        if got is None:
            lead = np.full(len(alts), b"],[", dtype=object)
            lead[::k] = b"]],[["
            lead[0] = b"[[["
            got = [a + w + b"," for a, w in zip(lead.tolist(), self._alt_words.json[alts].tolist(), strict=True)]
            if len(self._layouts) >= _MEMO_KEPT:
                self._layouts.clear()
            self._layouts[key] = got
        return got
