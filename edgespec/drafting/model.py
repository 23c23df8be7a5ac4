"""A small GGUF model that shares the target's vocabulary, drafting token by token."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backend import LlamaModel
from ..sampling import SamplingParams, TokenDist
from ..sampling.context_processing import Shaper
from .base import Draft, KeepDrafting, draw_token


class ModelDrafter:
    """A small GGUF model sharing the target's vocabulary.

    Its KV cache follows the committed context: each call keeps the longest common
    prefix and decodes only what is new (the catch-up after a fully accepted round).
    """

    is_lookup = False

    def __init__(self, model: LlamaModel) -> None:
        self.model = model
        self.name = model.path.name

    def bind(self, target: LlamaModel) -> None:
        """Nothing to learn of the target (the draft model is its own)."""

    def prefill(self, context: Sequence[int]) -> None:
        """Bring the draft cache up to context[:-1], as the target's, during prompt time."""
        if len(context) > self.model.n_ctx:
            return  # a draft with a shorter context drafts nothing here (see propose)
        cached = self.model.reuse_prefix(context)
        if len(context) - 1 > cached:
            self.model.decode(context[cached:-1], logits="none")

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
        """Decode what is new in context, then draft up to n tokens one by one (each row
        shaped by shape, when given: q is then processed as the target's p)."""
        m = self.model
        n = min(n, m.n_ctx - len(context))
        if n <= 0:
            return Draft([], [])
        cached = m.reuse_prefix(context)
        logits = m.decode(context[cached:], logits="last")
        calls = 1
        tokens: list[int] = []
        q: list[TokenDist] = []
        confidence = 1.0  # the draft's probability of all its tokens so far
        for i in range(n):
            row = logits[0] if shape is None else shape.shape(logits[0])
            if shape is not None and not row.max() > -np.inf:
                break  # the grammar admits nothing here
            drawn = draw_token(row, sampling, rng, keep, i + 1, confidence)
            if drawn is None:
                break
            x, dist, confidence = drawn
            if dist is not None:
                q.append(dist)
            tokens.append(x)
            if shape is not None:
                shape.push(x)
            if m.is_eog(x):
                break
            if i + 1 < n:  # the last proposal needs no logits after it
                logits = m.decode([x], logits="last")
                calls += 1
        return Draft(tokens, q, calls)
