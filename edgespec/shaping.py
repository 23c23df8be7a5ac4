"""The context-dependent part of processing: repetition penalties and a grammar's mask.

Both depend on the tokens so far, so a speculative round shapes the row of draft
position i with the draft's tokens 0..i-1 included: the same ``Shaper``, forked,
walks the draft for the draft model (q) and for the target's verify rows (p).

llguidance computes a grammar's mask over the whole vocabulary in about a tenth of a
millisecond, so every shaped row is masked in full. Where the mask admits exactly one
token, that token is certain under the constrained target: ``certain`` finds such
rows, whose logits the verify call need not compute, and ``grammar_draft`` proposes
what the grammar forces next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .backend import GrammarMatcher, LlamaModel
from .grammar import Grammar, GrammarError
from .sampling import SamplingParams, TokenDist, apply_penalties, greedy_tokens, process_logits


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
    ) -> None:
        self.sampling = sampling
        self.matcher = matcher
        self.is_eog = is_eog
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

    def certain(self, tokens: Sequence[int]) -> list[int | None]:
        """For each verify row of a draft (len(tokens) + 1 rows): the one token the
        grammar admits there, or None. Such a row's shaped distribution is a point mass
        whatever the logits, so the target need not compute them."""
        if self.matcher is None:
            return [None] * (len(tokens) + 1)
        walk = self.fork()
        out: list[int | None] = []
        for x in tokens:
            out.append(walk.matcher.only())  # type: ignore[union-attr]
            if self.is_eog(x):
                return [*out, None]  # (nothing is decoded after an end of generation)
            walk.push(x)
        return [*out, walk.matcher.only()]  # type: ignore[union-attr]

    def grammar_draft(self, limit: int) -> list[int]:
        """Up to limit tokens the grammar forces next: while it admits a single token,
        that token; then the text it forces, as the tokenizer would split it (a draft
        the target verifies: it may prefer another split of the same text)."""
        if self.matcher is None or limit <= 0:
            return []
        walk = self.fork()
        out: list[int] = []
        while len(out) < limit:
            only = walk.matcher.only()  # type: ignore[union-attr]
            if only is not None:
                out.append(only)
                if self.is_eog(only):
                    break
                walk.push(only)
                continue
            taken = 0
            for x in walk.matcher.forced_tokens()[: limit - len(out)]:  # type: ignore[union-attr]
                if not walk.allows(x):
                    break
                out.append(x)
                walk.push(x)
                taken += 1
            if not taken:
                break
        return out

    def rows(self, logits: Sequence[np.ndarray], draft: Sequence[int]) -> ShapedRows:
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
        mask = self.matcher.mask()
        n = len(mask)
        out = np.full(len(row), -np.inf, dtype=np.float32)
        # (a draft vocabulary's extra tokens, which the target lacks, stay -inf)
        np.copyto(out[:n], np.asarray(row[:n], dtype=np.float32), where=mask[: len(row)])
        return out


def for_generation(
    target: LlamaModel,
    sampling: SamplingParams,
    grammar: Grammar | None,
    prompt_tokens: list[int],
) -> Shaper | None:
    """Penalties and grammar for this generation; None when neither applies (no cost).

    The penalties look back at the prompt too, as llama-server feeds it to its sampler;
    the grammar starts at the output (llama-server does not feed it the prompt)."""
    if grammar is None and not sampling.penalized:
        return None
    matcher = None
    if grammar is not None:
        try:
            matcher = target.grammar(grammar.spec)
        except ValueError as exc:
            raise GrammarError(f"invalid grammar for this model: {exc}") from None
    return Shaper(sampling, prompt_tokens, matcher, target.is_eog)


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

    def __init__(self, logits: Sequence[np.ndarray], draft: Sequence[int], walk: Shaper) -> None:
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


def with_certain_rows(
    computed: np.ndarray, certain: Sequence[int | None], n_vocab: int
) -> Sequence[np.ndarray]:
    """A round's verify rows where the target computed only those not certain (in order,
    ``computed``): a certain row (the grammar's one token t) stands as logits 0 at t and
    -inf elsewhere, which shapes to the same point mass any computed row would."""
    return CertainRows(computed, certain, n_vocab)


class CertainRows(Sequence[np.ndarray]):
    """Verify rows, the certain ones made up (see ``with_certain_rows``)."""

    def __init__(self, computed: np.ndarray, certain: Sequence[int | None], n_vocab: int) -> None:
        self._computed, self._certain, self._n = computed, certain, n_vocab
        self._at = {i: k for k, i in enumerate(i for i, c in enumerate(certain) if c is None)}

    def __len__(self) -> int:
        return len(self._certain)

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < len(self._certain):
            raise IndexError(i)
        if i in self._at:
            return self._computed[self._at[i]]
        row = np.full(self._n, -np.inf, dtype=np.float32)
        row[self._certain[i]] = 0.0
        return row
