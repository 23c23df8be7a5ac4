"""Can a draft model share token ids with a target? llama.cpp's rule, with reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..backend import LlamaModel, VocabInfo
from ..errors import IncompatibleModelsError

MAX_VOCAB_SIZE_DIFFERENCE = 128  # SPEC_VOCAB_MAX_SIZE_DIFFERENCE in llama.cpp
FIRST_CHECKED_TOKEN = 5  # SPEC_VOCAB_CHECK_START_TOKEN_ID: ids below are often special


class Vocabulary(Protocol):
    """What the rule reads: a loaded LlamaModel, or gguf_meta.GgufVocab (metadata only)."""

    path: Path

    def vocab_info(self) -> VocabInfo:
        """Size, special tokens and kind of the vocabulary."""
        ...

    def token_text(self, token: int) -> str:
        """The text of token (as the vocabulary stores it)."""
        ...


def incompatibility(target: Vocabulary, draft: Vocabulary) -> str | None:
    """Why draft cannot draft for target (None when it can).

    Mirrors common_speculative_are_compatible: same vocab type; same add-BOS flag
    and BOS id; same add-EOS flag and EOS id; sizes within 128; identical token
    text from id 5 on.
    """
    t, d = target.vocab_info(), draft.vocab_info()
    if t.vocab_type != d.vocab_type:
        return f"vocabulary types differ (target {t.vocab_type}, draft {d.vocab_type})"
    if t.add_bos != d.add_bos or (t.add_bos and t.bos != d.bos):
        return f"BOS differs (target add={t.add_bos} id={t.bos}, draft add={d.add_bos} id={d.bos})"
    if t.add_eos != d.add_eos or (t.add_eos and t.eos != d.eos):
        return f"EOS differs (target add={t.add_eos} id={t.eos}, draft add={d.add_eos} id={d.eos})"
    diff = abs(t.n_vocab - d.n_vocab)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        return (
            f"vocabulary sizes differ by {diff} (target {t.n_vocab}, draft {d.n_vocab}; "
            f"at most {MAX_VOCAB_SIZE_DIFFERENCE} allowed)"
        )
    for i in range(FIRST_CHECKED_TOKEN, min(t.n_vocab, d.n_vocab)):
        tt, dt = target.token_text(i), draft.token_text(i)
        if tt != dt:
            return f"token {i} differs: target {tt!r}, draft {dt!r}"
    return None


def check_compatible(target: LlamaModel, draft: LlamaModel) -> None:
    """Raise IncompatibleModelsError naming the first difference, if any."""
    why = incompatibility(target, draft)
    if why is not None:
        raise IncompatibleModelsError(
            f"{draft.path.name} cannot draft for {target.path.name}: {why}"
        )
