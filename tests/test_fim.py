"""FIM prompt layout, truncation, the prefix-only fallback and cursor positions."""

from __future__ import annotations

import pytest

from edgespec.backend import FimTokens
from edgespec.completion.fim import (
    SNIPPET_SEPARATOR,
    ExtraChunk,
    build_fim_prompt,
    fim_stop_tokens,
    split_at_cursor,
)
from edgespec.errors import InvalidParameterError

# special ids above every code point, so they cannot collide with character tokens
BOS, PRE, SUF, MID, PAD, REP, SEP = range(0x110000, 0x110007)
FULL = FimTokens(pre=PRE, suf=SUF, mid=MID, pad=PAD, rep=REP, sep=SEP)
BASIC = FimTokens(pre=PRE, suf=SUF, mid=MID)
NONE = FimTokens()
NAMES = {BOS: "<BOS>", PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", REP: "<REP>", SEP: "<SEP>"}


def chars(text: str) -> list[int]:
    """A tokenizer with one token per character (its code point)."""
    return [ord(c) for c in text]


def text_of(tokens: list[int]) -> str:
    return "".join(NAMES[t] if t in NAMES else chr(t) for t in tokens)


def test_psm_layout_with_bos() -> None:
    p = build_fim_prompt(chars, BASIC, "ab", "cd", bos=BOS, budget=100)
    assert text_of(p.tokens) == "<BOS><PRE>ab<SUF>cd<MID>"
    assert p.fim and not p.truncated and not p.prefix_at_line_start


def test_prompt_field_follows_the_prefix() -> None:
    p = build_fim_prompt(chars, BASIC, "ab", "cd", prompt="x", bos=None, budget=100)
    assert text_of(p.tokens) == "<PRE>abx<SUF>cd<MID>"


def test_repo_level_extra_context() -> None:
    extra = [ExtraChunk("E1", "a.py"), ExtraChunk("E2", "b.py")]
    p = build_fim_prompt(chars, FULL, "P", "S", extra=extra, bos=BOS, budget=100)
    assert text_of(p.tokens) == (
        "<BOS><REP>myproject\n<SEP>a.py\nE1<SEP>b.py\nE2<SEP>filename\n<PRE>P<SUF>S<MID>"
    )


def test_prefix_only_fallback_ignores_the_suffix() -> None:
    p = build_fim_prompt(chars, NONE, "def f():\n", "tail", bos=BOS, budget=100)
    assert text_of(p.tokens) == "<BOS>def f():\n"
    assert not p.fim and p.prefix_at_line_start


def test_fallback_extra_uses_snippet_separators() -> None:
    p = build_fim_prompt(chars, NONE, "P", "", extra=[ExtraChunk("E")], bos=None, budget=100)
    assert text_of(p.tokens) == SNIPPET_SEPARATOR + "E" + SNIPPET_SEPARATOR + "P"


def test_truncation_keeps_the_prefix_end_and_the_suffix_start() -> None:
    prefix, suffix = "0123456789" * 5, "abcdefghij" * 5
    p = build_fim_prompt(chars, BASIC, prefix, suffix, bos=BOS, budget=44)
    assert p.truncated and len(p.tokens) == 44
    body = text_of(p.tokens)
    pre = body[len("<BOS><PRE>") : body.index("<SUF>")]
    suf = body[body.index("<SUF>") + 5 : body.index("<MID>")]
    assert prefix.endswith(pre) and suffix.startswith(suf)
    assert len(suf) == (44 - 4) // 4 and len(pre) == 40 - len(suf)


def test_extra_context_is_cut_first_keeping_its_end() -> None:
    extra = [ExtraChunk("x" * 50)]
    p = build_fim_prompt(chars, BASIC, "P", "S", extra=extra, bos=None, budget=20)
    assert p.truncated and len(p.tokens) == 20
    assert text_of(p.tokens).endswith("<PRE>P<SUF>S<MID>")


def test_no_room_is_an_error() -> None:
    with pytest.raises(InvalidParameterError):
        build_fim_prompt(chars, BASIC, "P", "S", bos=BOS, budget=4)


def test_fim_stop_tokens() -> None:
    assert fim_stop_tokens(FULL) == {PRE, SUF, MID, PAD, REP, SEP}
    assert fim_stop_tokens(NONE) == frozenset()


@pytest.mark.parametrize(
    ("line", "col", "prefix"),
    [
        (1, 1, ""),
        (1, 3, "ab"),
        (1, 4, "abc"),
        (2, 1, "abc\n"),
        (2, 2, "abc\nd"),
        (3, 1, "abc\nde\n"),
    ],
)
def test_split_at_cursor(line: int, col: int, prefix: str) -> None:
    text = "abc\nde\n"
    before, after = split_at_cursor(text, line, col)
    assert before == prefix and before + after == text


@pytest.mark.parametrize(("line", "col"), [(0, 1), (1, 0), (4, 1), (1, 5), (2, 4)])
def test_split_at_cursor_out_of_range(line: int, col: int) -> None:
    with pytest.raises(InvalidParameterError):
        split_at_cursor("abc\nde\n", line, col)
