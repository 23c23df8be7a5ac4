"""The context-dependent part of processing: repetition penalties and a grammar's mask.

Both depend on the tokens so far, so a speculative round shapes the row of draft
position i with the draft's tokens 0..i-1 included: the same ``Shaper``, forked,
walks the draft for the draft model (q) and for the target's verify rows (p).

llguidance computes a grammar's mask over the whole vocabulary in 0.05-0.7 ms, once
per state (the masks are shared by a shaper's forks); a row for sampling is masked in
full. Greedy decoding needs less: the argmax of the unmasked row is the constrained
argmax whenever the grammar admits it (the lowest id of the row's maximum is then the
lowest among the admitted), which ``GrammarMatcher.admits`` tells of one token, without
the mask where the grammar forces no text (``Shaper.greedy``); only otherwise are the
admitted ids read out. Where the mask admits exactly one token, that token is certain
under the constrained target: ``certain`` finds such rows, whose logits the verify call
need not compute (a state that forces no text and cannot end admits several, which
needs no mask either), and ``grammar_draft`` proposes what the grammar forces next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from ..backend import GrammarMatcher, LlamaModel
from ..grammar import Grammar, GrammarError
from ..speculation.verify import NO_TOKEN
from .params import SamplingParams
from .processing import TokenDist, apply_penalties, greedy_tokens, process_logits

_T = TypeVar("_T")

#: a mask admitting tokens in at most this many of its 32-token words is applied by
#: setting the admitted logits alone (else by a masked copy of the whole row)
_SPARSE_WORDS = 256


class Shaper:
    """Penalties (when ``sampling.penalized``) and a grammar state, at one position.

    ``push`` moves it past a token; ``fork`` gives an independent copy to walk a draft.
    A shaper and its forks share the masks they compute, keyed by the tokens pushed
    since the shaper (a state's mask is built once however many walks read it: the
    grammar's draft, the certain rows, the verify rows, the next round's); a push on
    the shaper itself keeps those of the states still ahead of it.
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
        self._masks: dict[tuple[int, ...], np.ndarray] = {}  # path -> the state's bits
        self._path: tuple[int, ...] = ()  # tokens pushed since the shaper (forks only)
        self._forked = False

    def fork(self) -> Shaper:
        """An independent copy (the grammar state cloned; the masks shared)."""
        out = Shaper.__new__(Shaper)
        out.__dict__.update(self.__dict__)
        out.history = list(self.history)
        out.matcher = self.matcher.clone() if self.matcher is not None else None
        out._forked = True
        return out

    def push(self, token: int) -> None:
        """Move past token (which ``allows`` admitted)."""
        if self._last_n:
            self.history.append(token)
            if self._last_n > 0 and len(self.history) > self._last_n:
                del self.history[0]
        if self.matcher is not None and not self.is_eog(token):
            self.matcher.accept(token)  # (an end of generation ends the output)
            if self._forked:
                self._path = (*self._path, token)
            else:  # the masks of the states ahead of this one, re-keyed
                ahead = {k[1:]: v for k, v in self._masks.items() if k and k[0] == token}
                self._masks = ahead  # (forks made before keep the old table)

    def _state(self) -> GrammarMatcher:
        """The grammar state, with its mask where a walk computed it already."""
        m = self.matcher
        assert m is not None
        if not m.has_bits and (known := self._masks.get(self._path)) is not None:
            m.use_bits(known)
        return m

    def _grammar(self) -> GrammarMatcher:
        """The grammar state, its mask computed (or taken from a walk that computed it)."""
        m = self._state()
        if not m.has_bits:
            self._masks[self._path] = m.bits()
        return m

    def _ask(self, question: Callable[[GrammarMatcher], _T]) -> _T:
        """question(the grammar state), which may build the state's mask or not; a mask
        built is kept for the forks."""
        m = self._state()
        known = m.has_bits
        out = question(m)
        if not known and m.has_bits:
            self._masks[self._path] = m.bits()
        return out

    def allows(self, token: int) -> bool:
        """Whether the grammar admits token here (always without a grammar)."""
        return self.matcher is None or self._ask(lambda m: m.admits(token))

    def only(self) -> int | None:
        """The one token the grammar admits here, or None (none, several, no grammar).
        Where it admits ends of generation alone (Gemma's <eos> and <end_of_turn>), the
        first: which of them ends the output changes nothing of it (no token, no text,
        the same stop reason), so the row needs no logits either."""
        if self.matcher is None or self._state().several():
            return None
        only = self._ask(lambda m: m.only())
        return self._ends() if only is None else only

    def complete(self) -> bool:
        """Whether the grammar admits nothing but an end of generation here: the output
        is complete, whatever the logits (none need computing)."""
        if self.matcher is None or not self._state().may_end():
            return False
        only = self._ask(lambda m: m.only())
        return self.is_eog(only) if only is not None else self._ends() is not None

    def _ends(self) -> int | None:
        """The first of the ends of generation when the grammar admits nothing else."""
        grammar = self._grammar()
        if 0 < grammar.n_words() <= 4:
            ids = grammar.allowed_ids()
            if len(ids) and all(self.is_eog(int(x)) for x in ids):
                return int(ids[0])
        return None

    def admissible(self, tokens: Sequence[int]) -> int:
        """How many of a draft's tokens to verify: up to the first the grammar forbids
        (the target would reject it surely, p(x) = 0, and resample from p itself, as
        at the bonus position), and through an end of generation (which ends the output)."""
        if self.matcher is None or not tokens:
            return len(tokens)
        walk = self
        for i, x in enumerate(tokens):
            if not walk.allows(x):
                return i
            if self.is_eog(x):
                return i + 1
            if i + 1 < len(tokens):
                walk = walk.fork() if walk is self else walk
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
            out.append(walk.only())
            if self.is_eog(x):
                return [*out, None]  # (nothing is decoded after an end of generation)
            walk.push(x)
        return [*out, walk.only()]

    def grammar_draft(self, limit: int) -> list[int]:
        """Up to limit tokens the grammar forces next: while it admits a single token,
        that token; then the text it forces, as the tokenizer would split it, its last
        token too (a draft the target verifies: it may prefer another split of the same
        text, or the forced text merged with what follows, as ``' "Ada'``)."""
        if self.matcher is None or limit <= 0:
            return []
        walk = self.fork()
        out: list[int] = []
        while len(out) < limit:
            only = walk.only()
            if only is not None:
                out.append(only)
                if self.is_eog(only):
                    break
                walk.push(only)
                continue
            taken = 0
            for x in walk.matcher.forced_text_tokens()[: limit - len(out)]:  # type: ignore[union-attr]
                if not walk.allows(x):
                    break
                out.append(x)
                walk.push(x)
                taken += 1
            if not taken:
                break
        return out

    def rows(self, logits: Sequence[np.ndarray], draft: Sequence[int]) -> Sequence[np.ndarray]:
        """Verify rows shaped on demand: row i after the draft's tokens 0..i-1."""
        return _Walked(len(logits), draft, self, lambda walk, i: walk.shape(logits[i]))

    def shape(self, row: np.ndarray) -> np.ndarray:
        """The row penalised and masked: -inf where the grammar forbids a token, or
        where it may allow it but the processing would drop it (all -inf: nothing
        admitted)."""
        if self._last_n:
            row = apply_penalties(row, self.history, self.sampling)
        if self.matcher is None:
            return row
        grammar = self._grammar()
        out = np.full(len(row), -np.inf, dtype=np.float32)
        # (a draft vocabulary's extra tokens, which the target lacks, stay -inf)
        if grammar.n_words() <= _SPARSE_WORDS:  # few admitted: set those alone
            ids = grammar.allowed_ids()
            ids = ids[ids < len(row)]
            out[ids] = row[ids]
            return out
        mask = grammar.mask()
        n = len(mask)
        np.copyto(out[:n], np.asarray(row[:n], dtype=np.float32), where=mask[: len(row)])
        return out

    def greedy(self, row: np.ndarray) -> int:
        """The argmax of the shaped row (lowest id on ties), or NO_TOKEN where the grammar
        admits nothing with a finite logit: the raw argmax when the grammar admits it,
        else the argmax over the admitted ids (a full mask built only then)."""
        if self._last_n:
            row = apply_penalties(row, self.history, self.sampling)
        if self.matcher is None:
            return int(np.argmax(row))
        if not self._state().several():  # perhaps one token admitted: then no argmax
            only = self._ask(lambda m: m.only())
            if only is not None and row[only] > -np.inf:
                return only
        best = int(np.argmax(row))
        if row[best] > -np.inf and self.allows(best):
            return best  # (NaN fails the test above and takes the masked path, as before)
        ids = self._grammar().allowed_ids()
        ids = ids[ids < len(row)]
        if not len(ids):
            return NO_TOKEN
        values = row[ids]
        at = int(np.argmax(values))
        return int(ids[at]) if values[at] > -np.inf else NO_TOKEN


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


def argmaxes(
    logits: Sequence[np.ndarray],
    shaper: Shaper | None,
    draft: Sequence[int] = (),
    certain: Sequence[int | None] = (),
) -> Sequence[int]:
    """The target's greedy token at each verify row, row i after the draft's tokens
    0..i-1 (with a shaper: each when first read, NO_TOKEN where the grammar admits none;
    a certain row's token is its one admitted token, as ``with_certain_rows`` shapes)."""
    if shaper is None:
        return greedy_tokens(logits)

    def greedy(walk: Shaper, i: int) -> int:
        if i < len(certain) and certain[i] is not None:
            return int(certain[i])  # type: ignore[arg-type]
        return walk.greedy(logits[i])

    return _Walked(len(logits), draft, shaper, greedy)


def dists(
    logits: Sequence[np.ndarray], sampling: SamplingParams, shaper: Shaper | None
) -> Sequence[TokenDist]:
    """p at each verify row (all at once unshaped; shaped rows: each when first read)."""
    if shaper is None:
        return process_logits(logits, sampling)
    return Lazy(lambda i: process_logits(logits[i], sampling)[0], len(logits))


class _Walked(Sequence):
    """fn(the shaper at verify row i, i) for a round's n rows, each when first read (in
    order): the acceptance rules stop at the first rejection, and rows after it are never
    read. Row 0 reads the shaper itself; a copy walks the draft only past it."""

    def __init__(
        self, n: int, draft: Sequence[int], shaper: Shaper, fn: Callable[[Shaper, int], object]
    ) -> None:
        self._n, self._draft, self._fn = n, draft, fn
        self._walk, self._forked = shaper, False
        self._rows: list[object] = []

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if not 0 <= i < self._n:
            raise IndexError(i)
        while len(self._rows) <= i:
            k = len(self._rows)
            if k:  # past row 0: walk a copy over draft token k - 1
                if not self._forked:
                    self._walk, self._forked = self._walk.fork(), True
                self._walk.push(self._draft[k - 1])
            self._rows.append(self._fn(self._walk, k))
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
