"""Two drafters in turn: the first (e.g. n-gram lookup), the second where it has nothing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backend import LlamaModel
from ..sampling import SamplingParams
from ..sampling.context_processing import Shaper
from .base import Draft, Drafter, KeepDrafting


class CompositeDrafter:
    """Ask ``first`` (e.g. the n-gram drafter); when it proposes nothing, ``fallback``.

    Exact with sampling too: which drafter runs depends only on the context, and
    each reports the q its tokens were drawn from.
    """

    def __init__(self, first: Drafter, fallback: Drafter) -> None:
        self.first = first
        self.fallback = fallback
        self.name = f"{first.name}+{fallback.name}"
        self.model: LlamaModel | None = fallback.model  # so that its owner can close it
        self.is_lookup = first.is_lookup and fallback.is_lookup

    def bind(self, target: LlamaModel) -> None:
        """Bind both drafters to target."""
        for drafter in (self.first, self.fallback):
            if (bind := getattr(drafter, "bind", None)) is not None:
                bind(target)

    def prefill(self, context: Sequence[int]) -> None:
        """Prefill both drafters."""
        self.first.prefill(context)
        self.fallback.prefill(context)

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
        """The first drafter's proposal, or the fallback's when the first has none."""
        kwargs: dict = {} if keep is None else {"keep": keep}
        if shape is not None:
            kwargs["shape"] = shape.fork()  # the fallback gets a fresh copy
        draft = self.first.propose(context, n, sampling, rng, **kwargs)
        if draft.tokens:
            return draft
        if shape is not None:
            kwargs["shape"] = shape
        return self.fallback.propose(context, n, sampling, rng, **kwargs)
