"""Token-level intersection (TLI) across vocabularies (Timor et al. 2025, arXiv 2502.05202).

The draft samples only tokens whose bytes are exactly one target token's (the
intersection of the two vocabularies); each proposal maps one to one onto the
target's vocabulary, and q is the draft's processed distribution restricted to
the intersection and renormalized. The proposal really is drawn from q, so the
standard rejection rule is exact and accepts with min(1, p/q) rather than a
point mass's p(x). ``CrossVocabDrafter`` uses it when sampling.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ..backend import LlamaModel
from ..sampling import SamplingParams, TokenDist
from .base import Draft, KeepDrafting, draw_token

_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")


def _by_bytes(model: LlamaModel) -> dict[tuple[bytes, bool], int]:
    """(bytes, is a byte-fallback token) -> lowest id with them; special tokens left out."""
    out: dict[tuple[bytes, bool], int] = {}
    for i in range(model.n_vocab):
        b = model.token_bytes(i)
        if b:
            key = (b, len(b) == 1 and bool(_BYTE_TOKEN.fullmatch(model.token_text(i))))
            out.setdefault(key, i)
    return out


class TokenMap:
    """The tokens two vocabularies share: same bytes, one id in each (control tokens aside).

    Building it reads every token of both vocabularies once (about a second for
    a 262k vocabulary).
    """

    def __init__(self, target: LlamaModel, draft: LlamaModel) -> None:
        target_ids = _by_bytes(target)
        #: draft id -> target id, -1 outside the intersection
        self.to_target = np.full(draft.n_vocab, -1, dtype=np.int64)
        #: target id -> draft id
        self.to_draft: dict[int, int] = {}
        for key, d in _by_bytes(draft).items():
            t = target_ids.get(key)
            if t is not None:
                self.to_target[d] = t
                self.to_draft[t] = d
        self.outside = self.to_target < 0

    def twins(self, target_tokens: Sequence[int]) -> list[int] | None:
        """The draft ids of target tokens, or None if one of them has no twin."""
        out = []
        for t in target_tokens:
            d = self.to_draft.get(t)
            if d is None:
                return None
            out.append(d)
        return out

    def mapped(self, dist: TokenDist) -> TokenDist:
        """A distribution over (intersection) draft ids, moved onto the target's ids."""
        ids = self.to_target[dist.ids]
        order = np.argsort(ids)
        return TokenDist(ids=ids[order], probs=dist.probs[order])


def propose_shared(
    model: LlamaModel,
    tmap: TokenMap,
    dctx: list[int],
    n: int,
    sampling: SamplingParams,
    rng: np.random.Generator,
    keep: KeepDrafting | None = None,
) -> Draft:
    """Up to n target tokens: the draft continues ``dctx`` within the intersection.

    Each draft token is drawn from the draft's distribution restricted to the
    shared tokens; q is that distribution on the target's ids.
    """
    n = min(n, model.n_ctx - len(dctx))
    if not dctx or n <= 0:
        return Draft([], [])
    cached = model.reuse_prefix(dctx)
    logits = model.decode(dctx[cached:], logits="last")
    calls = 1
    tokens: list[int] = []
    q: list[TokenDist] = []
    confidence = 1.0  # the draft's probability of its tokens so far
    for i in range(n):
        row = np.where(tmap.outside, -np.inf, logits[0])
        drawn = draw_token(row, sampling, rng, keep, i + 1, confidence)
        if drawn is None or tmap.outside[drawn[0]]:
            break  # (outside only when no shared token is left: the row is all -inf)
        x, dist, confidence = drawn
        tokens.append(int(tmap.to_target[x]))
        if dist is not None:
            q.append(tmap.mapped(dist))
        if i + 1 < n:
            logits = model.decode([x], logits="last")
            calls += 1
    return Draft(tokens, q, calls)
