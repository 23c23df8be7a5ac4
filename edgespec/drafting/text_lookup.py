"""Prompt lookup by text: continue an earlier occurrence of the word being written.

The n-gram lookup matches tokens, so it misses a copy whose tokens split unlike its
source: a JSON value copied from a sentence starts after a quote where the source has
a space (``"Uppsala"`` is ``U`` ``ppsala``, the source's `` Uppsala`` another token),
and an e-mail address in a string splits at other places than in prose. There the
text still matches: the word written so far (``U``, ``bruno.l``) starts a word of the
context, and what followed it there, tokenized as the tokenizer splits it, is a
likely continuation. The target verifies it like any draft.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: what ends a word: the written word is the text after the last of these
WORD_BREAKS = frozenset(b" \t\r\n\"'`()[]{}<>,;:=")
MAX_WORD = 48  # a longer "word" is not a word: no lookup
MAX_OCCURRENCES = 32  # how many earlier words it starts are compared, latest first
BYTES_PER_TOKEN = 6  # a continuation of n tokens is cut from about this many bytes each


class TextLookup:
    """The context as text (kept in step with the tokens, token by token), and the
    lookup of its last word among the words before it."""

    def __init__(
        self, token_bytes: Callable[[int], bytes], tokenize: Callable[[str], list[int]]
    ) -> None:
        self._token_bytes = token_bytes
        self._tokenize = tokenize
        self._tokens: list[int] = []
        self._text = bytearray()
        self._ends: list[int] = []  # where each token's bytes end in the text

    def lookup(self, context: Sequence[int], n: int) -> tuple[list[int], int] | None:
        """Up to n tokens that followed the latest earlier word the context's last word
        starts, and how many of the context's tokens that word spans; None where the
        context ends a word, its word is long, starts no earlier word, or starts words
        that go on differently."""
        if n <= 0:
            return None
        self._sync(context)
        text = self._text
        start = len(text)
        while start > 0 and text[start - 1] not in WORD_BREAKS:
            start -= 1
        word = bytes(text[start:])
        if not word or len(word) > MAX_WORD:
            return None
        at = self._latest_word_start(word, start)
        if at is None:
            return None
        begin = at + len(word)
        # (not into the word being written; a line's end ends it)
        follow = bytes(text[begin : min(begin + BYTES_PER_TOKEN * (n + 1), start)])
        line, newline, _ = follow.partition(b"\n")
        tokens = self._tokenize(line.decode("utf-8", "ignore"))
        if not newline:  # cut at a length: its last token may merge with what follows
            tokens = tokens[:-1]
        if not tokens:
            return None
        spanned = sum(end > start for end in self._ends[-len(word) :])
        return tokens[:n], max(1, spanned)

    def _latest_word_start(self, word: bytes, before: int) -> int | None:
        """Where word starts the latest earlier word (of the last MAX_OCCURRENCES places
        it occurs); None where none, or where those words go on differently (``s``
        starts ``self`` and ``string``: which one is being written, the text does not
        tell)."""
        text, latest, rests = self._text, None, set()
        at = before  # (occurrences end before the word itself)
        for _ in range(MAX_OCCURRENCES):
            at = text.rfind(word, 0, at + len(word) - 1)
            if at < 0:
                break
            if at == 0 or text[at - 1] in WORD_BREAKS:
                latest = at if latest is None else latest
                rests.add(self._rest_of_word(at + len(word), before))
                if len(rests) > 1:
                    return None
        return latest

    def _rest_of_word(self, at: int, before: int) -> bytes:
        end = at
        while end < before and self._text[end] not in WORD_BREAKS:
            end += 1
        return bytes(self._text[at:end])

    def _sync(self, context: Sequence[int]) -> None:
        n = len(self._tokens)
        if list(context[:n]) != self._tokens:  # the context changed before its end
            self._tokens, self._text, self._ends = [], bytearray(), []
        for token in context[len(self._tokens) :]:
            self._tokens.append(token)
            self._text += self._token_bytes(token)
            self._ends.append(len(self._text))
