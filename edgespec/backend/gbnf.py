"""Grammars: llama.cpp's GBNF parser and grammar sampler over a model's vocabulary."""

from __future__ import annotations

import contextlib
import ctypes
import os

import numpy as np

from .bindings import ll
from .log import _failure_reason, _log_tail

# llama_token_data {int32 id; float logit; float p}: candidates the grammar sampler masks
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def _stderr_of(fn):
    """Run fn() with file descriptor 2 captured (llama.cpp's grammar parser reports its
    errors with fprintf(stderr)); return (fn's result, what it wrote)."""
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            result = fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return result, tmp.read().decode("utf-8", "replace")


def _grammar_failure(stderr: str) -> str:
    """The telling line of a grammar parse failure."""
    for line in stderr.splitlines():
        if "error parsing grammar" in line:
            return line.split("error parsing grammar:", 1)[-1].strip()
    return _failure_reason("invalid grammar")


def compile_grammar(text: str, root: str, vocab: object | None = None) -> object:
    """A llama.cpp grammar sampler for GBNF ``text`` (no vocabulary: only to check it).

    Raises ValueError with llama.cpp's one-line reason when the grammar is refused."""
    if not text.strip():
        raise ValueError("the grammar is empty")
    _log_tail.clear()
    smpl, err = _stderr_of(
        lambda: ll.llama_sampler_init_grammar(vocab, text.encode(), root.encode())
    )
    if not smpl:
        raise ValueError(" ".join(_grammar_failure(err).split()))
    return smpl


def check_gbnf(text: str, root: str = "root") -> None:
    """Parse a GBNF grammar with llama.cpp's parser; ValueError (one line) if it is refused."""
    ll.llama_sampler_free(compile_grammar(text, root))


class GrammarMatcher:
    """The state of a llama.cpp grammar over one model's vocabulary: which tokens may
    come next (``allowed``), advanced token by token (``accept``), cheap to ``clone``."""

    def __init__(self, smpl: object, n_vocab: int) -> None:
        self._smpl = smpl
        self.n_vocab = n_vocab
        self._all: np.ndarray | None = None  # the full-vocabulary candidate buffer

    def clone(self) -> GrammarMatcher:
        """An independent copy of the current state."""
        return GrammarMatcher(ll.llama_sampler_clone(self._smpl), self.n_vocab)

    def accept(self, token: int) -> None:
        """Advance past token, which ``allowed`` must have admitted (llama.cpp aborts
        otherwise)."""
        ll.llama_sampler_accept(self._smpl, token)

    def allowed(self, ids: np.ndarray | None = None) -> np.ndarray:
        """For each of ids (default: the whole vocabulary), whether it may come next."""
        if ids is None:
            if self._all is None:
                self._all = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
                self._all["id"] = np.arange(self.n_vocab)
            cand = self._all
            cand["logit"] = 0.0
        else:
            cand = np.zeros(len(ids), dtype=_TOKEN_DATA)
            cand["id"] = ids
        arr = ll.llama_token_data_array(
            data=cand.ctypes.data_as(ctypes.POINTER(ll.llama_token_data)),
            size=len(cand),
            selected=-1,
            sorted=False,
        )
        ll.llama_sampler_apply(self._smpl, ctypes.byref(arr))
        return cand["logit"] == 0.0

    def close(self) -> None:
        """Free the llama.cpp sampler (idempotent)."""
        if self._smpl:
            ll.llama_sampler_free(self._smpl)
            self._smpl = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
