"""Which completion identity a canary is compared by, and the matrix that holds it.

DESIGN.md: token ids, else token strings, else text, chosen per canary over its completions and
declared in the report, never mixed silently: if even one completion lacks ids, the whole canary is
compared by token strings, and the report says how many had each. With text identity, positions are
characters (Unicode code points). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collectors.runfolder import CanaryColumns
from reports.divergence import Rows, text_matrix

END = None  # a fork "token" where the sequence had already ended


@dataclass
class Identity:
    kind: str  # "token_ids" | "tokens" | "text"
    mat: npt.NDArray[Any]  # padded identity matrix
    mrows: Rows  # row in ``mat`` of each completion (aligned with the completion rows given)
    lengths: npt.NDArray[np.int64]  # identity length of each completion
    available: dict[str, int]  # completions that carried each identity
    unit: str  # "token" | "character"


def choose(cols: CanaryColumns, comp_rows: Rows) -> Identity:
    frame = cols.frame
    n_ids = frame["n_ids"].to_numpy()[comp_rows]
    n_tok = frame["n_tokens"].to_numpy()[comp_rows]
    texts = frame["text"].to_numpy()[comp_rows]
    has_text = np.fromiter((isinstance(t, str) for t in texts), dtype=bool, count=len(texts))
    available = {
        "completions": len(comp_rows),
        "token_ids": int((n_ids >= 0).sum()),
        "tokens": int((n_tok >= 0).sum()),
        "text": int(has_text.sum()),
    }
    if len(comp_rows) and bool((n_ids >= 0).all()):
        return Identity("token_ids", cols.token_ids, comp_rows, n_ids.astype(np.int64), available, "token")
    if len(comp_rows) and bool((n_tok >= 0).all()):
        return Identity("tokens", cols.token_codes, comp_rows, n_tok.astype(np.int64), available, "token")
    mat, lengths = text_matrix([t if isinstance(t, str) else "" for t in texts])
    return Identity("text", mat, np.arange(len(comp_rows), dtype=np.int64), lengths, available, "character")


def note(identity: Identity) -> str | None:
    """A sentence when the identity used is weaker than what some completions carried."""
    a = identity.available
    n = a["completions"]
    if identity.kind == "tokens" and a["token_ids"]:
        return f"token ids present on {a['token_ids']} of {n} completions only; compared by token strings"
    if identity.kind == "text" and (a["token_ids"] or a["tokens"]):
        best = max(a["token_ids"], a["tokens"])
        return f"tokens present on {best} of {n} completions only; compared by text (positions are characters)"
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
