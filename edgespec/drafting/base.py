"""The drafter contract: what a drafter proposes (``Draft``) and the ``Drafter`` protocol."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..backend import LlamaModel
from ..sampling import SamplingParams, TokenDist, greedy_tokens, process_logits
from ..sampling.context_processing import Shaper

# keep(i, p): is draft token i (1-based), whose draft probability with tokens 1..i-1
# is p, worth verifying? Supplied by the adaptive policy; drafters stop at a "no".
# When sampling, p must not depend on token i itself: a draft that proposed x only
# where q(x) is high would propose from q cut to those tokens, while the target
# accepts and resamples by q, and the output would no longer follow the target (a
# 50/50 target came out 60/40). So p is the probability of tokens 1..i-1 times the
# largest q(x) at position i, known before x is drawn (with greedy drafts: q(x)).
KeepDrafting = Callable[[int, float], bool]


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and, when sampling, the distribution q each was drawn from."""

    tokens: list[int]
    q: list[TokenDist]
    model_calls: int = 0  # forward passes of a draft model spent on this proposal
    # a lookup drafter copies from earlier text: how many tokens before the copied
    # continuation the context agrees with that text (None for model drafters)
    match_len: int | None = None
    by_text: bool = False  # a lookup's copy matched as text and tokenized anew


class Drafter(Protocol):
    """Anything that proposes continuations of a token context.

    Besides ``name``, a drafter declares what it is: ``model`` and ``is_lookup``
    (plain attributes will do).
    """

    name: str

    @property
    def model(self) -> LlamaModel | None:
        """The draft model the drafter runs, None if it runs none. Its owner closes it,
        and the adaptive policy prices a draft step by it."""
        ...

    @property
    def is_lookup(self) -> bool:
        """True for a drafter whose proposals cost nothing (prompt lookup): with adaptive
        gamma the engine asks it before gamma is chosen, so the policy can size gamma to
        its match (and learn from it when it proposes nothing)."""
        ...

    def prefill(self, context: Sequence[int]) -> None:
        """Process a new prompt ahead of the first proposal (may do nothing)."""
        ...

    def bind(self, target: LlamaModel) -> None:
        """Learn the target whose output is drafted, before a generation's prefill (may
        do nothing; a drafter without it is taken as doing nothing)."""
        ...

    def propose(
        self,
        context: Sequence[int],
        n: int,
        sampling: SamplingParams,
        rng: np.random.Generator,
        *,
        keep: KeepDrafting | None = None,
        shape: Shaper | None = None,
    ) -> Draft:
        """Up to n tokens that might follow context. Deterministic drafters return q as
        point masses (probability 1 on the proposed token) when sampling. A drafter
        with its own confidence stops early when keep() says a token is not worth it.

        shape (given with penalties or a grammar; the drafter's own copy, at the
        context's end): a draft model shapes each row with it and pushes each token, so
        that q is processed as the target's p; a drafter may ignore it (exactness never
        depends on q's shape, only on q being what the token was drawn from)."""
        ...


def draw_token(
    row: np.ndarray,
    sampling: SamplingParams,
    rng: np.random.Generator,
    keep: KeepDrafting | None,
    i: int,
    confidence: float,
) -> tuple[int, TokenDist | None, float] | None:
    """Draft token i (1-based) from a logits row, or None where keep() ends the draft.

    Returns the token, the distribution it was drawn from (None when greedy) and the
    draft's confidence in tokens 1..i. keep() is asked before the token is drawn
    (see KeepDrafting).
    """
    dist = None if sampling.greedy else process_logits(row, sampling)[0]
    if keep is not None:
        top = top_probability(row) if dist is None else float(dist.probs.max())
        if not keep(i, confidence * top):
            return None
    if dist is None:
        if keep is not None:
            confidence *= top  # q(x) of a greedy draft
        return int(greedy_tokens(row)[0]), None, confidence
    x = dist.sample(rng)
    return x, dist, confidence * dist.prob(x)


def top_probability(logits: np.ndarray) -> float:
    """Softmax probability of the argmax token."""
    z = logits - logits.max()
    return float(1.0 / np.exp(z, dtype=np.float32).sum())
