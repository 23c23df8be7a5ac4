"""Fill-in-the-middle prompts from a model's own FIM tokens, and cursor positions in a file.

A FIM prompt uses llama.cpp server's repo-level layout (Qwen2.5-Coder report,
arXiv:2409.12186), with the ids the GGUF vocabulary declares::

    [BOS] [FIM_REP]myproject\\n [FIM_SEP]name\\n extra ... [FIM_SEP]filename\\n
          [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]

The prefix comes first, so an editor that sends the same file again and again
gets the whole prefix from the KV cache. A model without FIM tokens gets a
prefix-only prompt (``[BOS] extra ... prefix prompt``); the suffix then only
serves the stop rules (edgespec/codestop.py). Everything here is pure: text goes
through a ``tokenize`` callable that adds no BOS and parses no special tokens, so
text from a file can never inject control tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..backend import FimTokens
from ..errors import InvalidParameterError

#: llama.cpp's separator between extra chunks when the model has no FIM_SEP token.
SNIPPET_SEPARATOR = "\n\n--- snippet ---\n\n"
REPO_NAME = "myproject"
CURRENT_FILE = "filename"

Tokenize = Callable[[str], list[int]]


@dataclass(frozen=True)
class ExtraChunk:
    """Context from another file or place (llama.cpp's ``input_extra`` item)."""

    text: str
    filename: str = "tmp"


@dataclass(frozen=True)
class FimPrompt:
    """A prompt ready for the engine.

    Attributes:
        tokens: the prompt ids.
        fim: True when built with FIM tokens; False for the prefix-only fallback.
        truncated: True when prefix, suffix or extra context was cut to fit.
        prefix_at_line_start: the cursor is at the start of a line (stop rules use it).
    """

    tokens: list[int]
    fim: bool
    truncated: bool
    prefix_at_line_start: bool


def build_fim_prompt(
    tokenize: Tokenize,
    fim: FimTokens,
    prefix: str,
    suffix: str,
    *,
    extra: Sequence[ExtraChunk] = (),
    prompt: str = "",
    bos: int | None = None,
    budget: int,
) -> FimPrompt:
    """The token prompt for completing between ``prefix`` and ``suffix``.

    Args:
        tokenize: text to ids, without BOS and without parsing special tokens.
        fim: the model's FIM tokens; without pre/suf/mid the prompt is prefix-only.
        prefix, suffix: the text before and after the cursor.
        extra: context chunks placed before the current file (oldest first).
        prompt: text appended right after the prefix (llama.cpp's ``prompt`` field).
        bos: the BOS id to start with, or None when the model adds none.
        budget: the most tokens the prompt may have; the prefix keeps its end, the
            suffix its start and the extra context its end, in that priority.
    """
    use_fim = fim.usable
    pre = tokenize(prefix) + tokenize(prompt)
    suf = tokenize(suffix) if use_fim else []
    extra_ids = _extra_tokens(tokenize, fim, extra, use_fim)
    fixed = (1 if bos is not None else 0) + (3 if use_fim else 0)
    room = budget - fixed
    if room < 1:
        raise InvalidParameterError(f"no room for a prompt in {budget} tokens")
    suf_take = min(len(suf), room // 4)
    pre_take = min(len(pre), room - suf_take)
    suf_take = min(len(suf), room - pre_take)
    extra_take = min(len(extra_ids), room - pre_take - suf_take)
    truncated = (pre_take, suf_take, extra_take) != (len(pre), len(suf), len(extra_ids))
    pre = pre[len(pre) - pre_take :]
    suf = suf[:suf_take]
    extra_ids = extra_ids[len(extra_ids) - extra_take :]
    head = [bos] if bos is not None else []
    if use_fim:
        assert fim.pre is not None and fim.suf is not None and fim.mid is not None
        tokens = [*head, *extra_ids, fim.pre, *pre, fim.suf, *suf, fim.mid]
    else:
        tokens = [*head, *extra_ids, *pre]
    at_line_start = (prefix + prompt).endswith("\n") or not (prefix + prompt)
    return FimPrompt(tokens, use_fim, truncated, at_line_start)


def _extra_tokens(
    tokenize: Tokenize, fim: FimTokens, extra: Sequence[ExtraChunk], use_fim: bool
) -> list[int]:
    out: list[int] = []
    if use_fim and fim.rep is not None:
        out += [fim.rep, *tokenize(REPO_NAME + "\n")]
    for chunk in extra:
        if use_fim and fim.sep is not None:
            out += [fim.sep, *tokenize(chunk.filename + "\n")]
        else:
            out += tokenize(SNIPPET_SEPARATOR)
        out += tokenize(chunk.text)
    if extra and not (use_fim and fim.sep is not None):
        out += tokenize(SNIPPET_SEPARATOR)
    if use_fim and fim.sep is not None:
        out += [fim.sep, *tokenize(CURRENT_FILE + "\n")]
    return out


def fim_stop_tokens(fim: FimTokens) -> frozenset[int]:
    """FIM control tokens that end a completion if the model emits one."""
    ids = (fim.pre, fim.suf, fim.mid, fim.pad, fim.rep, fim.sep)
    return frozenset(t for t in ids if t is not None)


def split_at_cursor(text: str, line: int, col: int) -> tuple[str, str]:
    """Split a file's text at a 1-based line and column (columns count characters).

    Column ``len(line) + 1`` is the end of the line; line ``n + 1`` column 1 is the
    end of a file whose last line ends with a newline.
    """
    if line < 1 or col < 1:
        raise InvalidParameterError(f"line and column start at 1, got {line}:{col}")
    lines = text.split("\n")
    if line > len(lines):
        raise InvalidParameterError(f"line {line} is past the end of the file ({len(lines)} lines)")
    if col > len(lines[line - 1]) + 1:
        raise InvalidParameterError(
            f"column {col} is past the end of line {line} ({len(lines[line - 1])} characters)"
        )
    offset = sum(len(s) + 1 for s in lines[: line - 1]) + col - 1
    return text[:offset], text[offset:]
