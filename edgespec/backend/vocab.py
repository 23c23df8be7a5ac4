"""What a model's vocabulary says: the draft/target compatibility facts and FIM tokens."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VocabInfo:
    """What the draft/target compatibility rule compares."""

    vocab_type: int
    n_vocab: int
    add_bos: bool
    bos: int
    add_eos: bool
    eos: int


@dataclass(frozen=True)
class FimTokens:
    """Fill-in-the-middle token ids from the GGUF vocabulary; None where the model has none."""

    pre: int | None = None
    suf: int | None = None
    mid: int | None = None
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None

    @property
    def usable(self) -> bool:
        """True when prefix, suffix and middle tokens all exist (FIM prompts possible)."""
        return None not in (self.pre, self.suf, self.mid)
