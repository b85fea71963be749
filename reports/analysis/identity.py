"""Completion identity and first divergence: the one definition the report, the live table and cold boots use.

docs/design.md: token ids, else token strings, else text, chosen per canary over its completions and
declared in the report, never mixed silently: if even one completion lacks ids, the whole canary is
compared by token strings, and the report says how many had each. With text identity, positions are
characters (Unicode code points). The first divergence of two completions is the first position
where they differ, the shorter length when one is a strict prefix of the other, none when equal.

The rules over a padded matrix (``choose``, ``first_divergence_rows``) for the report's columns; the
per-completion form (``choose_kind``, ``identities``, ``first_divergence``) is ``loadgen.core.identity``,
which this module builds on. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from loadgen.core.identity import END, IdentityKind, choose_kind
from reports.analysis.kernels import Rows, chunks
from reports.model.report import IdentityCounts

if TYPE_CHECKING:
    from collectors.read.runfolder import CanaryColumns


@dataclass
class Identity:
    kind: IdentityKind
    mat: npt.NDArray[Any]  # padded identity matrix
    mrows: Rows  # row in ``mat`` of each completion (aligned with the completion rows given)
    lengths: npt.NDArray[np.int64]  # identity length of each completion
    available: IdentityCounts  # completions that carried each identity
    unit: Literal["token", "character"]


def choose(cols: CanaryColumns, comp_rows: Rows) -> Identity:
    frame = cols.frame
    n_ids = frame["n_ids"].to_numpy()[comp_rows]
    n_tok = frame["n_tokens"].to_numpy()[comp_rows]
    texts = frame["text"].to_numpy()[comp_rows]
    has_text = np.fromiter((isinstance(t, str) for t in texts), dtype=bool, count=len(texts))
    available: IdentityCounts = {
        "completions": len(comp_rows),
        "token_ids": int((n_ids >= 0).sum()),
        "tokens": int((n_tok >= 0).sum()),
        "text": int(has_text.sum()),
    }
    kind = choose_kind(len(comp_rows), available["token_ids"], available["tokens"])
    if kind == "token_ids":
        return Identity(kind, cols.token_ids, comp_rows, n_ids.astype(np.int64), available, "token")
    if kind == "tokens":
        return Identity(kind, cols.token_codes, comp_rows, n_tok.astype(np.int64), available, "token")
    mat, lengths = text_matrix([t if isinstance(t, str) else "" for t in texts])
    return Identity("text", mat, np.arange(len(comp_rows), dtype=np.int64), lengths, available, "character")


# Said when no completion carried ids: where the common servers send them (docs/design.md, "Endpoint kinds").
WHERE_IDS = (
    "vLLM sends ids with return_token_ids, llama.cpp with logprobs; SGLang's OpenAI routes send none, "
    'its native /generate does (endpoint kind "generate")'
)


def note(identity: Identity) -> str | None:
    """A sentence when the identity used is weaker than token ids: why, and where ids would come from."""
    a = identity.available
    n = a["completions"]
    if identity.kind == "tokens" and a["token_ids"]:
        return f"token ids present on {a['token_ids']} of {n} completions only; compared by token strings"
    if identity.kind == "tokens" and n:
        return (
            "the endpoint sent no token ids, so completions are compared by token strings, which can merge "
            f"distinct ids; {WHERE_IDS}"
        )
    if identity.kind == "text" and (a["token_ids"] or a["tokens"]):
        best = max(a["token_ids"], a["tokens"])
        return f"tokens present on {best} of {n} completions only; compared by text (positions are characters)"
    if identity.kind == "text" and n:
        return f"the endpoint sent neither token ids nor logprobs, so completions are compared by text; {WHERE_IDS}"
    return None


def display(cols: CanaryColumns, identity: Identity, row: int, mrow: int, pos: int) -> str | None:
    """The human-readable token at ``pos`` of one completion; ``None`` past its end."""
    if pos < 0 or pos >= identity.mat.shape[1]:
        return END
    value = int(identity.mat[mrow, pos])
    if value < 0:
        return END
    if identity.kind == "text":
        return chr(value)
    if identity.kind == "tokens":
        return str(cols.vocab[value])
    codes = cols.token_codes
    if pos < codes.shape[1] and codes[row, pos] >= 0:
        return str(cols.vocab[int(codes[row, pos])])
    return f"<id {value}>"


def id_at(identity: Identity, mrow: int, pos: int) -> int | None:
    if identity.kind != "token_ids" or pos >= identity.mat.shape[1]:
        return None
    value = int(identity.mat[mrow, pos])
    return value if value >= 0 else None


def first_divergence_rows(mat: npt.NDArray[Any], rows: Rows, ref: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    """Smallest index where each row differs from ``ref`` (a padded row of the same width); -1 if identical."""
    out = np.full(len(rows), -1, dtype=np.int64)
    if mat.shape[1] == 0:
        return out  # every completion is empty, so all are identical
    for sl in chunks(rows, mat.shape[1], 1):
        neq = mat[rows[sl]] != ref
        out[sl] = np.where(neq.any(axis=1), neq.argmax(axis=1), -1)
    return out


def text_matrix(texts: list[str]) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """Code points of each text as a padded matrix (-1 past the end), and lengths: text identity."""
    arrays = [np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32).astype(np.int32) for t in texts]
    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
    mat = np.full((len(texts), int(lengths.max(initial=0))), -1, dtype=np.int32)
    if arrays:
        mat[np.arange(mat.shape[1]) < lengths[:, None]] = np.concatenate(arrays)
    return mat, lengths
