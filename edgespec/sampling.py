"""Sampling parameters and processed next-token distributions, in pure numpy.

The speculative rules need the *processed* distribution (after temperature and
truncation) of both models at several positions, and must apply the same
processing to target and draft. Processing is, in this order:

1. temperature: logits / T;
2. top-k and min-p, both as one threshold on the logits (min-p keeps tokens with
   p >= min_p * p_max, i.e. logit >= max_logit + T * log(min_p)); tokens tied with
   the k-th largest logit are all kept;
3. top-p on the survivors: the smallest head of the sorted distribution whose
   mass reaches top_p.

Only survivors are exponentiated, and rows are processed together, because at a
262k vocabulary a full softmax per row costs as much as a small model's forward
pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InvalidParameterError

DEFAULT_TEMPERATURE = 0.0
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.95
DEFAULT_MIN_P = 0.05


@dataclass(frozen=True)
class SamplingParams:
    """How to turn logits into a next-token choice. temperature 0 means greedy."""

    temperature: float = DEFAULT_TEMPERATURE
    top_k: int = DEFAULT_TOP_K
    top_p: float = DEFAULT_TOP_P
    min_p: float = DEFAULT_MIN_P

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise InvalidParameterError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidParameterError(f"top-k must be >= 0 (0 disables it), got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise InvalidParameterError(f"top-p must be in (0, 1], got {self.top_p}")
        if not (0.0 <= self.min_p < 1.0):
            raise InvalidParameterError(f"min-p must be in [0, 1), got {self.min_p}")

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (temperature 0)."""
        return self.temperature == 0.0


@dataclass(frozen=True)
class TokenDist:
    """A processed next-token distribution: token ids (ascending) and their probabilities."""

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        """Probability of one token (0 outside the support)."""
        i = int(np.searchsorted(self.ids, token))
        if i < len(self.ids) and self.ids[i] == token:
            return float(self.probs[i])
        return 0.0

    def probs_at(self, tokens: np.ndarray) -> np.ndarray:
        """Probabilities of many tokens at once (0 outside the support)."""
        i = np.searchsorted(self.ids, tokens)
        i_clipped = np.minimum(i, len(self.ids) - 1)
        hit = (i < len(self.ids)) & (self.ids[i_clipped] == tokens)
        return np.where(hit, self.probs[i_clipped], 0.0)

    def sample(self, rng: np.random.Generator) -> int:
        """Draw one token id."""
        # Inverse-CDF sampling: one uniform draw per token keeps seeded runs reproducible.
        cdf = np.cumsum(self.probs)
        i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return int(self.ids[min(i, len(self.ids) - 1)])

    def dense(self, n_vocab: int) -> np.ndarray:
        """The distribution as a dense vector (for tests and diagnostics)."""
        out = np.zeros(n_vocab)
        out[self.ids] = self.probs
        return out


def greedy_tokens(logits: np.ndarray) -> np.ndarray:
    """Argmax of each row (lowest id on ties, as llama.cpp's greedy sampler)."""
    return np.argmax(np.atleast_2d(logits), axis=1)


def process_logits(logits: np.ndarray, params: SamplingParams) -> list[TokenDist]:
    """Processed distributions for each row of a (rows, vocab) or (vocab,) logits array."""
    if params.greedy:
        raise InvalidParameterError("greedy decoding has no distribution to process")
    rows = np.atleast_2d(logits)
    n_vocab = rows.shape[1]
    t = params.temperature
    top_k = params.top_k if 0 < params.top_k < n_vocab else 0
    row_max = rows.max(axis=1)
    # min-p as a logit threshold: p >= min_p * p_max  <=>  logit >= max + T log(min_p)
    floor = (
        row_max + t * math.log(params.min_p) if params.min_p > 0 else np.full(len(rows), -np.inf)
    )
    dists = []
    for row, mx, lo in zip(rows, row_max, floor, strict=True):
        ids = np.flatnonzero(row >= lo) if lo > -np.inf else None
        if top_k and (ids is None or len(ids) > top_k):
            lo = max(lo, _kth_largest(row, mx, top_k))
            ids = np.flatnonzero(row >= lo)
        if ids is None:
            ids = np.flatnonzero(row > -np.inf)
        # shift before dividing: a tiny T (5e-324) would turn logits / T into inf - inf;
        # shifted, everything below the max goes to -inf, i.e. probability 0
        with np.errstate(over="ignore"):
            z = (row[ids].astype(np.float64) - mx) / t
        p = np.exp(z)
        p /= p.sum()
        if params.top_p < 1.0:
            ids, p = _top_p(ids, p, params.top_p)
        dists.append(TokenDist(ids=ids, probs=p))
    return dists


def _kth_largest(row: np.ndarray, row_max: float, k: int) -> float:
    """The k-th largest value of row, partitioning only a head that holds at least k values.

    A full np.partition of a 262k-logit row costs ~3 ms; the head above max - d,
    widened until it holds k values, is usually a few hundred.
    """
    d = 4.0
    while True:
        head = row[row >= row_max - d]
        if len(head) >= k or not np.isfinite(d):
            break
        d = d * 4 if d < 1e6 else np.inf
    if len(head) < k:  # fewer than k finite logits
        return float(head.min())
    return float(np.partition(head, len(head) - k)[len(head) - k])


def _top_p(ids: np.ndarray, p: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-p, kind="stable")
    mass_before = np.cumsum(p[order]) - p[order]
    keep = np.sort(order[mass_before < top_p])
    kept = p[keep]
    return ids[keep], kept / kept.sum()


def residual(p: TokenDist, q: TokenDist) -> TokenDist:
    """normalize(max(0, p - q)): where to sample after rejecting a draft token.

    Its support lies inside p's, since max(0, 0 - q) = 0 outside it.
    """
    r = np.maximum(p.probs - q.probs_at(p.ids), 0.0)
    total = r.sum()
    if total <= 0.0:
        # p == q up to rounding: a rejection then has probability ~0; p itself is exact.
        return p
    keep = r > 0
    return TokenDist(ids=p.ids[keep], probs=r[keep] / total)
