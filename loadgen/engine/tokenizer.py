"""Word-level tokenizer of the embedded engine, with byte fallback so every string tokenizes.

Why this module exists: the engine needs token ids that mean something to a reader (real
English words) and a round trip for any input. Vocabulary: special tokens, 256 byte tokens,
punctuation, then each word of ``words.txt`` as " word", "word", " Word" and "Word". A piece of text
not in the vocabulary becomes its UTF-8 bytes. Decoding concatenates token bytes.

It must not know about the model or HTTP; it is pure apart from reading ``words.txt`` once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Final

EOS_TEXT: Final = "<|endoftext|>"
SPECIALS: Final = (EOS_TEXT, "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")
EOS_ID: Final = 0
BYTE_BASE: Final = len(SPECIALS)
PUNCTUATION: Final = tuple(".,!?;:'\"-()")
_PIECE: Final = re.compile(r" ?[A-Za-z]+| ?[^\sA-Za-z]|\s")


@dataclass(frozen=True)
class Tokenizer:
    """Maps text to ids and ids to bytes; ``piece_ids`` holds every non-byte piece."""

    piece_ids: dict[str, int]
    token_bytes: tuple[bytes, ...]
    specials: dict[str, int]

    @property
    def vocab_size(self) -> int:
        return len(self.token_bytes)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token strings in the text are treated as plain text)."""
        ids: list[int] = []
        for piece in _PIECE.findall(text):
            found = self.piece_ids.get(piece)
            if found is not None:
                ids.append(found)
            else:
                ids.extend(BYTE_BASE + b for b in piece.encode("utf-8"))
        return ids

    def decode_bytes(self, ids: list[int]) -> bytes:
        return b"".join(self.token_bytes[i] for i in ids)

    def decode(self, ids: list[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str:
        """One token rendered on its own, as a logprobs entry shows it."""
        return self.token_bytes[token_id].decode("utf-8", errors="replace")

    def is_special(self, token_id: int) -> bool:
        return token_id < BYTE_BASE


def _words() -> list[str]:
    text = resources.files("loadgen.engine").joinpath("words.txt").read_text(encoding="utf-8")
    seen: dict[str, None] = {}
    for word in text.split():
        seen.setdefault(word.lower(), None)
    return list(seen)


@cache
def load_tokenizer() -> Tokenizer:
    """The engine's one tokenizer; ids are stable for a given ``words.txt``."""
    token_bytes: list[bytes] = [s.encode() for s in SPECIALS]
    token_bytes.extend(bytes([b]) for b in range(256))
    pieces: list[str] = []
    for mark in PUNCTUATION:
        pieces.extend([mark, " " + mark])
    for word in _words():
        pieces.extend([" " + word, word, " " + word.capitalize(), word.capitalize()])
    piece_ids: dict[str, int] = {}
    for piece in pieces:
        if piece not in piece_ids:
            piece_ids[piece] = len(token_bytes)
            token_bytes.append(piece.encode("utf-8"))
    specials = {s: i for i, s in enumerate(SPECIALS)}
    return Tokenizer(piece_ids=piece_ids, token_bytes=tuple(token_bytes), specials=specials)
