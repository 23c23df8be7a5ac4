"""Prompt-lookup drafting: continue the latest earlier occurrence of the last n tokens.

Costs no model call, so it pays wherever the output repeats its input: code
edits, chat that quotes earlier turns, answers grounded in a given text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..backend import LlamaModel
from ..sampling import SamplingParams, TokenDist
from ..sampling.context_processing import Shaper
from .base import Draft, KeepDrafting
from .text_lookup import TextLookup

if TYPE_CHECKING:
    from .history import LookupHistory

DEFAULT_NGRAM_MIN = 1
DEFAULT_NGRAM_MAX = 4
MATCH_LEN_CAP = 64  # how far back a match's agreement is counted
# A short match (under this many tokens) whose n-gram has been followed by different
# tokens in the context is not proposed. Over 20 greedy Gemma 3 270M texts that are not
# the bench's (code edits, summaries, completions), the first token of such proposals
# was right 31% of the time, against 64% for short matches whose n-gram was always
# followed by the same token. With two threads a 1-token draft costs 1.9x a plain
# step, so those proposals never pay here, and mixed in they blur the short matches
# that do. (Where a verify costs about one step, on a GPU, they might pay a little:
# not measured, no GPU here.)
CONTESTED_MIN_MATCH = 4
_CONTESTED = -1  # in the index: the gram has been followed by different tokens
# How many of a gram's latest occurrences are compared with the context for the one
# that agrees with it longest (see NgramDrafter)
OCCURRENCES_COMPARED = 16


class NgramDrafter:
    """Propose the tokens that followed the longest recent match of the context's tail.

    An index maps each n-gram (n_min..n_max) to the end of its latest occurrence and
    the token that follows it (or a mark that different tokens have), updated
    incrementally as the context grows, with a chain from each occurrence to the one
    before it. A proposal finds the longest tail gram in the index, then copies from
    whichever of its latest OCCURRENCES_COMPARED occurrences agrees with the context
    longest before it (the latest among equals): text that quotes a document in which
    a phrase recurs ("of this License") continues the occurrence it is copying, not
    the latest. Replayed over the corpus's greedy outputs (benchmarks/replay_lookup.py,
    chosen on the tuning halves, 16 and 64 compared alike there): geometric mean 1.29x
    plain against 1.25x for the latest occurrence on quotes at depth 8,000, 1.61x
    against 1.62x on the shallow corpus; on the validation halves 1.77x against 1.72x
    (worst text 1.35x against 1.43x) and 1.78x against 1.71x (edits 2.62x against 2.21x).

    A copy of text that has been repeating itself reads on into its own draft
    (``_copy``), so a loop is drafted past one period, as far as the policy asks, as
    llama.cpp's ngram-mod drafts (each token from the n-gram before it, up to 64).

    A match's ``match_len`` counts its agreement beyond that of any compared occurrence
    the context followed by another token, and a reply's first proposal (right after
    ``prefill``, from the context or the history) counts no agreement beyond its gram:
    at the start of a chat reply the tail is the template's turn markers, which agree
    with every earlier turn's start (16 tokens of ChatML as text) and predict nothing
    (an editor's resent prompt loses one round's trust in its history). On the agent corpus's tuning
    half (64 tokens, real runs, two repetitions on a busy machine) 1.06-2.03x the
    tokens/s without the two, where a long first draft that missed used up the loss
    budget and left the rest of the reply plain.

    With a ``history`` (earlier requests' prompts and outputs, edgespec.drafting.
    history; shared by the drafters of one target's slots), a proposal copies from it
    where the context has none (no match, or a short contested one): its match_len
    tells the adaptive policy how far to trust it. Not where the context has a shorter
    match: replayed over benchmarks/bench_history.py's greedy outputs, letting a longer
    history match win there cost 8% of the tokens per target call on a chat that
    resends its conversation (an older copy won over the latest) and gained less on
    the others (1.06x against 1.10x, 1.18x against 1.16x).
    """

    name = "ngram"
    model = None  # runs no model
    is_lookup = True  # a proposal costs a few dictionary look-ups

    def __init__(
        self,
        *,
        n_min: int = DEFAULT_NGRAM_MIN,
        n_max: int = DEFAULT_NGRAM_MAX,
        history: LookupHistory | None = None,
    ) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError(f"need 1 <= n_min <= n_max, got {n_min}, {n_max}")
        self.n_min, self.n_max = n_min, n_max
        self.history = history
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], tuple[int, int]] = {}  # gram -> (end, next)
        # per gram length k: _earlier[k - n_min][end - 1], the end of the occurrence
        # before the k-gram ending at `end` (-1: none)
        self._earlier: list[list[int]] = [[] for _ in range(n_min, n_max + 1)]
        # grams ending at positions <= _indexed_end are in the index; the context's own
        # tail gram is left out so a look-up never finds the tail itself
        self._indexed_end = 0
        self._prompt_len = -1  # the prompt prefill() was given, by its length
        self.text: TextLookup | None = None  # the lookup by text, once bound to a vocabulary
        self._bound: LlamaModel | None = None

    def prefill(self, context: Sequence[int]) -> None:
        """Index a new prompt ahead of the first proposal."""
        self._sync(context)
        self._prompt_len = len(context)

    def propose(
        self,
        context: Sequence[int],
        n: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        *,
        keep: KeepDrafting | None = None,
        shape: Shaper | None = None,  # unused: see Drafter.propose
    ) -> Draft:
        """Up to n tokens copied from after the latest match of the longest tail n-gram.

        Nothing when that match is short and its n-gram has had different successors.
        With a history, the history's match where the context has none; once bound to a
        vocabulary (``bind``), a match by text where neither has one.
        """
        self._sync(context)
        tokens: list[int] = []
        match_len = 0
        first = len(context) == self._prompt_len  # a reply's first proposal
        for k in range(min(self.n_max, len(context) - 1), self.n_min - 1, -1):
            entry = self._index.get(tuple(context[-k:]))
            if entry is not None:
                end, successor = entry
                end, match_len = self._best_occurrence(context, end, k)
                if first:
                    # the prompt's tail is the chat template's turn markers (or the
                    # user's words), which agree with every earlier turn's start;
                    # whether the reply copies shows in its own tokens
                    match_len = min(match_len, k)
                if successor == _CONTESTED and match_len < CONTESTED_MIN_MATCH:
                    match_len = 0
                else:
                    tokens = _copy(context, end, n, match_len)
                break
        # (greedy only: a sampled request's seed reproduces its output only while its
        # drafts depend on its own text, not on which requests came before it)
        if self.history is not None and not tokens and sampling.greedy:
            found = self.history.lookup(context, n, longer_than=match_len)
            if found is not None:
                tokens, match_len = found
                if first:  # as above: earlier requests began their replies alike
                    match_len = min(match_len, self.n_max)
        by_text = False
        if not tokens and self.text is not None:
            found = self.text.lookup(context, n)
            if found is not None:
                (tokens, match_len), by_text = found, True
        if not tokens and not match_len:
            return Draft([], [])
        return Draft(tokens, _point_masses(tokens, sampling), match_len=match_len, by_text=by_text)

    def bind(self, target: LlamaModel) -> None:
        """Look up by text too (``TextLookup``), in target's vocabulary, where the tokens
        find nothing (a no-op when bound to target already)."""
        if self._bound is not target:
            self._bound = target
            self.text = TextLookup(
                target.token_bytes, lambda s: target.tokenize(s, add_special=False)
            )

    def _best_occurrence(self, context: Sequence[int], end: int, k: int) -> tuple[int, int]:
        """Of the k-gram's latest occurrences (the latest ends at `end`), the end of the one
        whose agreement with the context is longest, and that agreement beyond the longest
        of those the context followed by another token (0 when none agrees longer).

        An agreement is evidence of a copy only as far as it tells this occurrence apart
        from ones that went on differently: at the start of a chat reply the tail is the
        template's turn markers, which every earlier reply began with too (16 tokens of
        ChatML as text), followed each time by something else.
        """
        earlier = self._earlier[k - self.n_min]
        seen = [(end, _agreement(context, end, k))]
        best_end, best = seen[0]
        for _ in range(OCCURRENCES_COMPARED - 1):
            end = earlier[end - 1]
            if end < 0 or best >= MATCH_LEN_CAP:
                break
            agree = _agreement(context, end, k)
            seen.append((end, agree))
            if agree > best:
                best_end, best = end, agree
        nxt = _next(context, best_end)
        rival = max((a for e, a in seen if _next(context, e) != nxt), default=0)
        return best_end, max(0, best - rival)

    def _sync(self, context: Sequence[int]) -> None:
        n = len(self._tokens)
        # (one slice comparison in C: walking a 1,000-token prompt in Python every round
        # took 0.15 ms, 1% of a plain step)
        if list(context[:n]) != self._tokens:  # the context changed before its end: start over
            self._tokens, self._index, self._indexed_end = [], {}, 0
            self._earlier = [[] for _ in self._earlier]
        self._tokens.extend(context[len(self._tokens) :])
        tokens, index = self._tokens, self._index
        for end in range(self._indexed_end + 1, len(tokens)):
            for k in range(self.n_min, self.n_max + 1):
                earlier = self._earlier[k - self.n_min]
                if k > end:
                    earlier.append(-1)
                    continue
                gram = tuple(tokens[end - k : end])
                seen = index.get(gram)
                successor = tokens[end] if seen is None or seen[1] == tokens[end] else _CONTESTED
                index[gram] = (end, successor)
                earlier.append(-1 if seen is None else seen[0])
        self._indexed_end = max(self._indexed_end, len(self._tokens) - 1)


def _next(context: Sequence[int], end: int) -> int:
    """The token after an occurrence ending at `end` (-1: it ends the context)."""
    return context[end] if end < len(context) else -1


def _copy(context: Sequence[int], end: int, n: int, match_len: int) -> list[int]:
    """Up to n tokens that follow position ``end``. Where the match is the context's own
    last stretch and agrees at least one whole period back (text repeating itself with a
    period of len(context) - end tokens, at least twice over), the copy reads on into its
    own draft, as LZ77's overlapping copies do: the repetition is drafted past one
    period, as llama.cpp's ngram-mod drafts it (each token from the n-gram before it).
    Elsewhere a copy stops at the context's end, which tells the policy where it does."""
    tokens = list(context[end : end + n])
    period = len(context) - end
    if match_len >= period:
        while len(tokens) < n:
            tokens.append(tokens[len(tokens) - period])
    return tokens


def _point_masses(tokens: list[int], sampling: SamplingParams) -> list[TokenDist]:
    # a deterministic proposal is a point mass: q(x) = 1
    return [] if sampling.greedy else [TokenDist(np.array([t]), np.array([1.0])) for t in tokens]


def _agreement(context: Sequence[int], end: int, k: int) -> int:
    """How many tokens before `end` agree with the context's tail (at least the k matched).

    Text that has been copying its source for a while tends to go on copying it; a
    fresh 1-4 token match is often a coincidence.
    """
    n = k
    while n < MATCH_LEN_CAP and end - 1 - n >= 0 and context[end - 1 - n] == context[-1 - n]:
        n += 1
    return n
