"""Read one canary file through its columns file (``collectors.sidecar``), the JSONL for the rest.

Why: the columns file holds each record's sequences in numpy's layout, so a chunk of records becomes
matrices by reading byte ranges, with no JSON parsed but each chunk's heads (one JSON array). The JSONL stays
the truth; the columns file is used only as far as it provably matches it:

- its rows are proven first (``collectors.read.sideproof``): each one written again as its JSONL line and
  compared with the JSONL's bytes, what is read of either file held to what the JSONL holds; the first row that
  differs ends the coverage there, and ``FileRead.columns_notice`` says which and why (a killed writer's torn
  tail ends it without a notice);
- each head must be a record the columns can hold (``collectors.read.recordcheck.record_problem``); the first
  that is not ends the coverage there.

Lines past the covered ones are read from the JSONL by ``collectors.read.fastcolumns`` in the same builder
(none longer than the run's record can be: ``collectors.jsonl.bounded_lines``), so the result equals reading
the JSONL alone: same rows, codes, skipped line numbers (``tests/collectors/test_sidecar.py``). Must not print.
"""

from __future__ import annotations

import operator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import orjson

from collectors.jsonl import LINE_LIMIT, bounded_lines
from collectors.read.columns import (
    BATCH_OTHERS,
    MAX_ABS_LOGPROB,
    REQUEST_VALUES,
    SCALARS,
    USAGE_VALUES,
    FileRead,
    batch_others,
    file_read,
    request_values,
    usage_values,
)
from collectors.read.fastcolumns import READ_BUFFER, SHARED, FastColumnBuilder, _segment_gaps
from collectors.read.matrices import filled, place_floats
from collectors.read.proofpool import prove_file
from collectors.read.recordcheck import (
    _REQUIRED as REQUIRED,
)
from collectors.read.recordcheck import SCALAR_CHECKS, check_schema, record_problem
from collectors.read.sideproof import Mapped
from collectors.sidecar import FILES, columns_dir
from loadgen.core.errors import RunFolderError
from loadgen.core.record import SCHEMA
from loadgen.core.runfiles import open_lines, open_regular
from loadgen.core.steptrace import renamed

# rows read at a time: a chunk's parsed heads and its sequences' working copies take about 27 KB a row beside
# the matrices (220 MiB at 8,192 rows, the JSONL reader's chunk), and more rows a chunk buy no speed
_ROWS_PER_READ = 2048
Ints = npt.NDArray[np.int64]


def has_columns(jsonl: Path) -> bool:
    folder = columns_dir(jsonl)
    return folder.is_dir() and not folder.is_symlink()


def read_file(builder: ColumnsFileBuilder, path: Path, line_limit: int) -> FileRead:
    """``path`` into ``builder``: the rows its columns file proves (``collectors.read.sideproof``), then the rest of
    its lines from the JSONL (none longer than ``line_limit``)."""
    with ExitStack() as stack:
        jsonl = stack.enter_context(_open(path, 0))  # a JSONL that cannot be read raises, columns file or not
        try:
            mapped, why = _prove(stack, columns_dir(path), jsonl, path, line_limit)
        except (OSError, ValueError, RunFolderError) as exc:
            mapped, why = None, f"cannot be read ({exc})"
        covered = 0 if mapped is None else builder.add_rows(mapped, path)
        end = 0 if not covered or mapped is None else int(mapped.index["jsonl_end"][covered - 1])
        try:
            with _open(path, READ_BUFFER) as fh:
                fh.seek(end)
                count, _, skipped, malformed = builder.add_lines(
                    bounded_lines(fh, path, line_limit, first=covered + 1), path, first=covered + 1
                )
        except OSError as exc:
            raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc
        got = file_read(path, covered + count, skipped, malformed)
        if why is not None:
            rest = "instead" if not covered else f"from line {covered + 1:,} on"
            got.columns_notice = f"{columns_dir(path).name}: {why}; read from {path.name} {rest}"
        return got


def _open(path: Path, buffering: int) -> BinaryIO:
    try:
        return open_lines(path, buffering=buffering)
    except OSError as exc:
        raise RunFolderError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _prove(
    stack: ExitStack, folder: Path, jsonl: BinaryIO, path: Path, line_limit: int
) -> tuple[Mapped | None, str | None]:
    """The columns folder's proven rows (None where it has none) and why the rest are not."""
    if not folder.is_dir() or folder.is_symlink():
        return None, None
    files = {name: stack.enter_context(open_regular(folder / name, buffering=0)) for name in FILES}
    return prove_file(files, folder, jsonl, path, line_limit)


def _heads(m: Mapped, a: int, b: int) -> list[Any]:
    """Rows ``a`` to ``b``'s heads, parsed: one JSON array where they all parse, else each on its own (one
    that does not parse is None)."""
    chunk = m.read("head", a, b)
    array = bytearray(b"[") + chunk  # each head ends with a comma: the last one's becomes the "]"
    array[max(len(array) - 1, 1) :] = b"]"
    try:
        got = orjson.loads(array)
        if type(got) is list and len(got) == b - a:
            return got
    except orjson.JSONDecodeError:
        pass
    out: list[Any] = []
    at = (m.at["head"][a : b + 1] - m.at["head"][a]).tolist()
    for r in range(b - a):
        piece = chunk[at[r] : at[r + 1]]
        try:
            out.append(orjson.loads(piece[:-1]) if piece.endswith(b",") else None)
        except orjson.JSONDecodeError:
            out.append(None)
    return out


# string fields whose values repeat from record to record, each value kept once (``_shared``, in
# ``FastColumnBuilder._texts``, as the JSONL reader keeps them)
_SHARED = frozenset(SHARED)
_HEAD_KEYS = tuple(dict.fromkeys((*SCALARS, *sorted(REQUIRED), "schema", "request", "usage", "engine_batch_sizes")))
_GET = operator.itemgetter(*_HEAD_KEYS)


def _columns(heads: list[Any]) -> dict[str, list[Any]] | None:
    """The heads' values key by key (``_HEAD_KEYS``), when every head is an object with every one of those keys
    (as the writer writes them all); else None."""
    if not heads or not all(type(h) is dict for h in heads):
        return None
    try:
        values = list(map(_GET, heads))
    except KeyError:
        return None
    return dict(zip(_HEAD_KEYS, map(list, zip(*values, strict=True)), strict=True))


def _all_fit(cols: dict[str, list[Any]]) -> bool:
    """Every head of this schema, with scalars the columns can hold (the checks of ``_fits``, a key at a time;
    ``_columns`` found every required key)."""
    if set(cols["schema"]) != {SCHEMA}:
        return False
    return all(all(map(ok, cols[name])) for name, (ok, _) in SCALAR_CHECKS.items())


def _first_unfit(heads: list[Any], path: Path, first: int) -> int:
    """How many heads from the first fit (``_fits``, which raises for an unknown schema as the JSONL reader does)."""
    for k, h in enumerate(heads):
        if not _fits(h, f"{path} line {first + k + 1}"):
            return k
    return len(heads)


def _fits(raw: Any, where: str) -> bool:
    """A head the columns can hold (its schema checked as the JSONL reader checks it: an unknown one raises)."""
    if type(raw) is not dict:
        return False
    check_schema(raw, where=where)
    return record_problem(raw, SCALAR_CHECKS) is None


def _ids_ok(ids: Ints, at: Ints) -> int:
    """How many rows have token ids that are all 0 or more (``ids``: the rows' ids, ``at``: each row's start in
    them and the end)."""
    if not ids.size or int(ids.min()) >= 0:
        return len(at) - 1
    return int(np.searchsorted(at, int(np.flatnonzero(ids < 0)[0]), side="right")) - 1


class ColumnsFileBuilder(FastColumnBuilder):
    """``FastColumnBuilder`` that also takes rows from a columns file, a chunk at a time: the heads of a
    chunk parsed as one JSON array, the sequences read by byte range into matrices allocated once."""

    def __init__(self, line_limit: int = LINE_LIMIT) -> None:
        super().__init__(line_limit)
        self._request_memo: dict[bytes, tuple[Any, ...]] = {}
        self._usage_memo: dict[bytes, tuple[Any, ...]] = {}

    def add_rows(self, m: Mapped, path: Path) -> int:
        """Every covered row of ``m`` (the columns file of ``path``), in order, until one the columns cannot
        hold: how many were added."""
        self._flush()  # rows of an earlier file go first
        remap = np.zeros(0, np.int32)
        out = _allocate(m)
        done = 0
        while done < m.rows:
            b = min(m.rows, done + _ROWS_PER_READ)
            heads = _heads(m, done, b)
            cols = _columns(heads)
            keep = len(heads) if cols is not None and _all_fit(cols) else _first_unfit(heads, path, done)
            ids = m.read("ids", done, b)
            keep = min(keep, _ids_ok(ids, m.at["ids"][done : b + 1] - m.at["ids"][done]))
            short = keep < len(heads)
            if short:
                heads, cols = heads[:keep], None
            if keep:
                remap = self._remap(m, remap, done + keep)
                cols = cols if cols is not None else {k: [h.get(k) for h in heads] for k in _HEAD_KEYS}
                self._add_heads(cols, path.name)
                ids = ids[: int(m.at["ids"][done + keep] - m.at["ids"][done])]
                self._add_sequences(m, done, done + keep, ids, remap, cols["engine_batch_sizes"], out)
                done += keep
            if short:
                break
        for name, parts in (("ids", self._ids), ("codes", self._codes), ("lp", self._lps), ("top", self._gaps)):
            mat = out.pop(name)
            if done == m.rows:
                parts.append(mat)
            elif done:  # at the width of the rows covered, as the JSONL's own chunks would be
                parts.append(mat[:done, : int(m.index[_LENGTH[name]][:done].max(initial=0))].copy())
        return done

    def _remap(self, m: Mapped, remap: npt.NDArray[np.int32], b: int) -> npt.NDArray[np.int32]:
        """The file's codes up to row ``b``'s vocabulary re-coded into the builder's, new strings in the file's
        order (its first-seen order)."""
        need = int(m.index["vocab"][b - 1])
        if need <= remap.size:
            return remap
        vocab = self._vocab
        more = np.array([vocab.setdefault(w, len(vocab)) for w in m.vocab[remap.size : need]], dtype=np.int32)
        return np.concatenate([remap, more])

    def _add_heads(self, cols: dict[str, list[Any]], file: str) -> None:
        """The chunk's frame values (its heads' values, key by key), as ``ColumnBuilder._add_scalars`` gives
        them one record at a time; the request and usage figures computed once per distinct value."""
        scalars = self._scalars
        cols["answer_id"] = list(map(renamed, cols["answer_id"], cols["request_id"]))
        for k in SCALARS:
            scalars[k].extend(_shared(cols[k], self._texts) if k in _SHARED else cols[k])
        scalars["file"].extend([file] * len(cols["text"]))
        for keys, field_name, memo, compute in (
            (REQUEST_VALUES, "request", self._request_memo, request_values),
            (USAGE_VALUES, "usage", self._usage_memo, usage_values),
        ):
            values = cols[field_name]
            known = list(map(orjson.dumps, values))
            new = {k: v for k, v in zip(known, values, strict=True) if k not in memo}
            if len(memo) + len(new) > _MEMO_KEPT:  # full: start again from this chunk's values alone
                memo.clear()
                new = dict(zip(known, values, strict=True))
            memo.update((k, tuple(compute(v))) for k, v in new.items())
            for k, column in zip(keys, zip(*map(memo.__getitem__, known), strict=True), strict=True):
                scalars[k].extend(column)

    def _add_sequences(
        self,
        m: Mapped,
        a: int,
        b: int,
        ids: Ints,
        remap: npt.NDArray[np.int32],
        sizes: list[Any],
        out: dict[str, Any],
    ) -> None:
        """Rows ``a`` to ``b``'s sequences (``ids``: theirs, read already), as ``ColumnBuilder._flush`` builds them
        from JSON, written straight into rows ``a`` to ``b`` of ``out`` (``_allocate``); the per-record columns
        appended as chunks."""
        ix = m.index[a:b]
        n_ids, n_lp, n_top, n_tok = (ix[k].astype(np.int64) for k in ("n_ids", "n_lp", "n_top", "n_tok"))
        if ids.size and int(ids.max()) >= 2**31 - 1 and out["ids"].dtype != np.int64:
            out["ids"] = out["ids"].astype(np.int64)  # an id beyond int32: the whole matrix widens, as ``_widen`` would
        _place(out["ids"], a, ids, n_ids)
        self._lens["n_ids"].append(n_ids)
        codes = m.read("codes", a, b)
        _place(out["codes"], a, remap[codes] if codes.size else codes, n_tok)
        self._lens["n_tokens"].append(n_tok)
        # null, NaN, infinite or absurd logprobs inside a sequence: left out (NaN) and counted per record
        lps, unusable = _left_out(m.read("lp", a, b), n_lp)
        place_floats(out, "lp", lps)
        _place(out["lp"], a, lps, n_lp)
        self._lens["n_logprobs"].append(n_lp)
        per_row = n_top.clip(0)
        pos_gap, pos_bad = _segment_gaps(m.read("top", a, b), np.repeat(ix["k"].astype(np.int64), per_row))
        if pos_bad.any():
            owner = np.repeat(np.arange(b - a), per_row)
            unusable += np.bincount(owner, weights=pos_bad, minlength=b - a).astype(np.int64)
        place_floats(out, "top", pos_gap)
        _place(out["top"], a, pos_gap, n_top)
        self._unusable.append(unusable)
        for key, values in zip(BATCH_OTHERS, batch_others(sizes), strict=True):
            self._batch[key].append(values)


def _left_out(lps: npt.NDArray[np.float64], lengths: Ints) -> tuple[npt.NDArray[np.float64], Ints]:
    """The rows' logprobs (concatenated; ``lengths``: each row's count, -1 for none) with every one that is no
    usable number made NaN, and how many that was in each row."""
    unusable = np.zeros(len(lengths), np.int64)
    if not lps.size or (lps.min() >= -MAX_ABS_LOGPROB and lps.max() <= MAX_ABS_LOGPROB):  # a NaN fails both
        return lps, unusable
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(lps) <= MAX_ABS_LOGPROB)
    owner = np.repeat(np.arange(len(lengths)), lengths.clip(0))
    return np.where(bad, np.nan, lps), unusable + np.bincount(owner, weights=bad, minlength=len(lengths)).astype(
        np.int64
    )


def _place(out: Any, a: int, flat: Any, lengths: Ints) -> None:
    """Rows ``a``, ``a + 1``, ... of the padded matrix ``out`` take ``flat``, their values concatenated
    (``lengths``: each row's count, -1 for none); the rest of each row keeps its padding."""
    width = int(lengths.max(initial=0))
    if width <= 0:
        return
    rows = out[a : a + len(lengths), :width]
    if int(lengths.min()) == width:  # every row as long as the longest: one copy
        rows[...] = flat.reshape(len(lengths), width)
    else:
        rows[np.arange(width) < lengths[:, None]] = flat


_LENGTH = {"ids": "n_ids", "codes": "n_tok", "lp": "n_lp", "top": "n_top"}


def _allocate(m: Mapped) -> dict[str, Any]:
    """The covered rows' padded matrices, allocated once at their final width (``_widen``'s), filled chunk by
    chunk: no chunk matrices kept, and nothing to copy at the end when the file is read from its columns alone.
    The float ones start as float32 and widen at the first value that is no float32 (``matrices.place_floats``)."""
    width = {k: max(int(m.index[c].max(initial=0)), 0) for k, c in _LENGTH.items()}
    return {
        k: filled(
            (m.rows, width[k]),
            -1 if k in ("ids", "codes") else np.nan,
            np.int32 if k in ("ids", "codes") else np.float32,
        )
        for k in _LENGTH
    }


_MEMO_KEPT = 4096  # distinct requests or usages remembered


def _shared(values: list[Any], strings: dict[str, str]) -> list[Any]:
    """``values`` with each string replaced by the equal one in ``strings`` (added where none is): a million
    records of one canary, phase and status hold three strings, not three million (about 56 bytes each)."""
    first = values[0]
    if type(first) is str and values.count(first) == len(values):  # the chunk's values all one string
        return [strings.setdefault(first, first)] * len(values)
    return [strings.setdefault(v, v) if type(v) is str else v for v in values]
