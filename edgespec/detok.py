"""Incremental, UTF-8-safe detokenization: never emits half a multibyte character."""

from __future__ import annotations

import codecs
from collections.abc import Callable


class Detokenizer:
    """Turns committed tokens into text pieces, holding back incomplete UTF-8 bytes.

    Args:
        token_bytes: maps a token id to the bytes it contributes.
    """

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""

    def push(self, token: int) -> str:
        """Commit a token; return the text it completes (may be empty)."""
        piece = self._decoder.decode(self._token_bytes(token))
        self.text += piece
        return piece

    def peek(self, tokens: list[int]) -> list[str]:
        """Pieces that tokens *would* give after the committed ones, without committing."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        decoder.setstate(self._decoder.getstate())
        return [decoder.decode(self._token_bytes(t)) for t in tokens]

    def flush(self) -> str:
        """End of output: bytes still held back become U+FFFD replacement characters."""
        piece = self._decoder.decode(b"", final=True)
        self.text += piece
        return piece
