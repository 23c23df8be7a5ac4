"""What a model's vocabulary says: tokens and their text, the draft/target
compatibility facts, FIM tokens, and grammar masks over it."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

from .bindings import ll
from .grammar_matcher import GrammarMatcher, matcher_for, tokenizer_for


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


class Vocabulary:
    """A loaded model's vocabulary methods (LlamaModel's; ``_vocab``, ``_model`` and
    ``path`` are its llama.cpp handles and file)."""

    _vocab: object
    _model: object
    path: Path

    def vocab_info(self) -> VocabInfo:
        """Vocabulary facts used by the compatibility check."""
        v = self._vocab
        return VocabInfo(
            vocab_type=ll.llama_vocab_type(v),
            n_vocab=self.n_vocab,
            add_bos=bool(ll.llama_vocab_get_add_bos(v)),
            bos=ll.llama_vocab_bos(v),
            add_eos=bool(ll.llama_vocab_get_add_eos(v)),
            eos=ll.llama_vocab_eos(v),
        )

    def token_text(self, token: int) -> str:
        """The vocabulary's stored text of a token (as in the GGUF, e.g. '▁the')."""
        raw = ll.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <end_of_turn>, ...)."""
        return bool(ll.llama_vocab_is_eog(self._vocab, token))

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        """Text to token ids; add_special adds BOS where the model wants it."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (ll.llama_token * cap)()
        n = ll.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (ll.llama_token * cap)()
            n = ll.llama_tokenize(
                self._vocab, data, len(data), buf, cap, add_special, parse_special
            )
        return list(buf[:n])

    def token_bytes(self, token: int, *, special: bool = False) -> bytes:
        """The bytes a token contributes to the text (may be part of a UTF-8 character)."""
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = ll.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def chat_template(self) -> str | None:
        """The model's default chat template from its GGUF metadata, if any."""
        raw = ll.llama_model_chat_template(self._model, None)
        return raw.decode("utf-8") if raw else None

    def fim_tokens(self) -> FimTokens:
        """The vocabulary's fill-in-the-middle tokens (each None when absent)."""
        v = self._vocab

        def tok(fn) -> int | None:  # llama.cpp returns LLAMA_TOKEN_NULL (-1) when absent
            t = fn(v)
            return t if t >= 0 else None

        return FimTokens(
            pre=tok(ll.llama_vocab_fim_pre),
            suf=tok(ll.llama_vocab_fim_suf),
            mid=tok(ll.llama_vocab_fim_mid),
            pad=tok(ll.llama_vocab_fim_pad),
            rep=tok(ll.llama_vocab_fim_rep),
            sep=tok(ll.llama_vocab_fim_sep),
        )

    def grammar(self, spec: str) -> GrammarMatcher:
        """An llguidance grammar's start state over this model's vocabulary (ValueError,
        one line, if refused: a special token the vocabulary lacks, say)."""
        return matcher_for(self.path, spec)

    def prepare_grammar(self) -> None:
        """Build the vocabulary's grammar tokenizer now (a few seconds, once per process)
        rather than in the first constrained generation: a server starts it in a thread."""
        tokenizer_for(self.path)
