"""The context-dependent part of processing: repetition penalties and a grammar's mask.

Both depend on the tokens so far, so a speculative round shapes the row of draft
position i with the draft's tokens 0..i-1 included: the same ``Shaper``, forked,
walks the draft for the draft model (q) and for the target's verify rows (p).

A grammar mask over a 262k vocabulary costs 50-80 ms (llama.cpp matches every
token's text), more than a target step. So ``shape`` asks the grammar only about
the highest logits, widening until no unasked token can matter: greedy needs the
best allowed token, top-k the k best, min-p those above the floor. What is left
unasked becomes -inf, which the processing would have cut anyway: the processed
distribution is exactly that of the fully masked row. (With neither top-k nor
min-p every token counts, and the whole vocabulary is asked.)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .backend import GrammarMatcher, LlamaModel
from .grammar import Grammar, GrammarError
from .sampling import SamplingParams, TokenDist, apply_penalties, greedy_tokens, process_logits

#: greedy logprobs: a softmax over the allowed tokens within this many logits of the
#: best (the rest weigh under n_vocab * e^-40 ~ 1e-12 of the mass)
LOGPROB_SPAN = 40.0
_FIRST_SPAN = 4.0


class Shaper:
    """Penalties (when ``sampling.penalized``) and a grammar state, at one position.

    ``push`` moves it past a token; ``fork`` gives an independent copy to walk a draft.
    """

    def __init__(
        self,
        sampling: SamplingParams,
        history: Sequence[int],
        matcher: GrammarMatcher | None,
        is_eog: Callable[[int], bool],
        *,
        full_softmax: bool = False,
    ) -> None:
        self.sampling = sampling
        self.matcher = matcher
        self.is_eog = is_eog
        self.full_softmax = full_softmax  # greedy logprobs: the softmax's mass matters
        n = sampling.penalty_last_n if sampling.penalized else 0
        self._last_n = n
        self.history = list(history)[-n:] if n > 0 else list(history) if n < 0 else []

    def fork(self) -> Shaper:
        """An independent copy (the grammar state cloned)."""
        out = Shaper.__new__(Shaper)
        out.__dict__.update(self.__dict__)
        out.history = list(self.history)
        out.matcher = self.matcher.clone() if self.matcher is not None else None
        return out

    def push(self, token: int) -> None:
        """Move past token (which ``allows`` admitted)."""
        if self._last_n:
            self.history.append(token)
            if self._last_n > 0 and len(self.history) > self._last_n:
                del self.history[0]
        if self.matcher is not None and not self.is_eog(token):
            self.matcher.accept(token)  # (an end of generation ends the output)

    def allows(self, token: int) -> bool:
        """Whether the grammar admits token here (always without a grammar)."""
        if self.matcher is None:
            return True
        return bool(self.matcher.allowed(np.array([token]))[0])

    def admissible(self, tokens: Sequence[int]) -> int:
        """How many of a draft's tokens to verify: up to the first the grammar forbids
        (the target would reject it surely, p(x) = 0, and resample from p itself, as
        at the bonus position), and through an end of generation (which ends the output)."""
        if self.matcher is None:
            return len(tokens)
        walk = self.fork()
        for i, x in enumerate(tokens):
            if not walk.allows(x):
                return i
            if self.is_eog(x):
                return i + 1
            walk.push(x)
        return len(tokens)

    def rows(self, logits: np.ndarray, draft: Sequence[int]) -> ShapedRows:
        """Verify rows shaped on demand: row i after the draft's tokens 0..i-1."""
        return ShapedRows(logits, draft, self.fork())

    def shape(self, row: np.ndarray) -> np.ndarray:
        """The row penalised and masked: -inf where the grammar forbids a token, or
        where it may allow it but the processing would drop it (all -inf: nothing
        admitted)."""
        if self._last_n:
            row = apply_penalties(row, self.history, self.sampling)
        if self.matcher is None:
            return row
        top_k = 0 if self.sampling.greedy else self.sampling.top_k
        n = self.matcher.n_vocab
        head = _mask_head(np.asarray(row[:n], dtype=np.float32), self.matcher, self._enough, top_k)
        if len(row) <= n:
            return head
        # a draft vocabulary's extra tokens (which the target lacks): never proposed
        return np.concatenate([head, np.full(len(row) - n, -np.inf, dtype=np.float32)])

    def _enough(self, best: float, kth: float, bound: float) -> bool:
        """Whether unasked tokens (all logits < bound) cannot matter, given the best
        allowed logit and the k-th best (-inf while fewer than k are allowed)."""
        sp = self.sampling
        if sp.greedy:
            return best - (LOGPROB_SPAN if self.full_softmax else 0.0) >= bound
        cut = -math.inf
        if sp.top_k > 0:
            cut = kth
        if sp.min_p > 0:
            cut = max(cut, best + sp.temperature * math.log(sp.min_p))
        return cut > -math.inf and cut >= bound


def for_generation(
    target: LlamaModel,
    sampling: SamplingParams,
    grammar: Grammar | None,
    prompt_tokens: list[int],
    logprobs: int | None,
) -> Shaper | None:
    """Penalties and grammar for this generation; None when neither applies (no cost).

    The penalties look back at the prompt too, as llama-server feeds it to its sampler;
    the grammar starts at the output (llama-server does not feed it the prompt)."""
    if grammar is None and not sampling.penalized:
        return None
    matcher = None
    if grammar is not None:
        try:
            matcher = target.grammar(grammar.gbnf, grammar.root)
        except ValueError as exc:
            raise GrammarError(f"invalid grammar for this model: {exc}") from None
    full = logprobs is not None and sampling.greedy
    return Shaper(sampling, prompt_tokens, matcher, target.is_eog, full_softmax=full)


def argmaxes(logits: Sequence[np.ndarray], shaper: Shaper | None) -> Sequence[int]:
    """The target's greedy token at each verify row (shaped rows: each when first read)."""
    if shaper is None:
        return greedy_tokens(logits)
    return Lazy(lambda i: int(greedy_tokens(logits[i])[0]), len(logits))


def dists(
    logits: Sequence[np.ndarray], sampling: SamplingParams, shaper: Shaper | None
) -> Sequence[TokenDist]:
    """p at each verify row (all at once unshaped; shaped rows: each when first read)."""
    if shaper is None:
        return process_logits(logits, sampling)
    return Lazy(lambda i: process_logits(logits[i], sampling)[0], len(logits))


class ShapedRows(Sequence[np.ndarray]):
    """A round's verify rows, each shaped when first read (in order): the acceptance
    rules stop at the first rejection, and rows after it are never shaped."""

    def __init__(self, logits: np.ndarray, draft: Sequence[int], walk: Shaper) -> None:
        self._logits, self._draft, self._walk = logits, draft, walk
        self._rows: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._logits)

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < len(self._logits):
            raise IndexError(i)
        while len(self._rows) <= i:
            k = len(self._rows)
            self._rows.append(self._walk.shape(self._logits[k]))
            if k < len(self._draft):
                self._walk.push(self._draft[k])
        return self._rows[i]


class Lazy(Sequence):
    """fn(i) for i < n, computed once each when first read."""

    def __init__(self, fn: Callable[[int], object], n: int) -> None:
        self._fn, self._n = fn, n
        self._done: dict[int, object] = {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < self._n:
            raise IndexError(i)
        if i not in self._done:
            self._done[i] = self._fn(i)
        return self._done[i]


def _mask_head(
    row: np.ndarray,
    matcher: GrammarMatcher,
    enough: Callable[[float, float, float], bool],
    top_k: int,
) -> np.ndarray:
    """-inf except the allowed tokens among the highest logits, asked in widening
    spans below the row's max until ``enough`` says the rest cannot matter."""
    k = 0
    mx = float(row.max())
    allowed_logits: list[np.ndarray] = []
    allowed_ids: list[np.ndarray] = []
    asked = np.zeros(len(row), dtype=bool)
    span = _FIRST_SPAN
    while True:
        bound = mx - span if math.isfinite(span) else -math.inf
        new = (
            np.flatnonzero((row >= bound) & ~asked) if bound > -math.inf else np.flatnonzero(~asked)
        )
        asked[new] = True
        ok = new[matcher.allowed(new)] if len(new) else new
        allowed_ids.append(ok)
        allowed_logits.append(row[ok])
        k += len(ok)
        if k and math.isfinite(bound):
            logits = np.concatenate(allowed_logits)
            kth = _kth(logits, top_k)
            if enough(float(logits.max()), kth, bound):
                break
        if not math.isfinite(bound):
            break
        span = span * 4 if span < 1e4 else math.inf
    out = np.full(len(row), -np.inf, dtype=np.float32)
    ids = np.concatenate(allowed_ids)
    out[ids] = row[ids]
    return out


def _kth(logits: np.ndarray, k: int) -> float:
    """The k-th largest of logits (-inf if fewer, or k is 0)."""
    if k <= 0 or len(logits) < k:
        return -math.inf
    return float(np.partition(logits, len(logits) - k)[len(logits) - k])
