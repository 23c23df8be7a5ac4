"""Processed next-token distributions, in pure numpy.

The speculative rules need the *processed* distribution (after temperature and
truncation) of both models at several positions, and must apply the same
processing to target and draft. Processing is, in this order:

0. (context-dependent, ``context_processing.py``) repetition penalties as llama.cpp's
   ``llama_sampler_penalties`` (``apply_penalties``), then a grammar's mask;
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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InvalidParameterError
from .params import SamplingParams


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


def apply_penalties(row: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """A penalised copy of one logits row, given the tokens penalised (the last
    penalty_last_n of the context), exactly as llama.cpp's ``llama_sampler_penalties``:
    a seen token's logit is divided by repeat_penalty (multiplied when <= 0), then
    lowered by count * frequency_penalty + presence_penalty."""
    out = np.array(row, dtype=np.float32)
    if not len(history):
        return out
    ids, counts = np.unique(np.asarray(history, dtype=np.int64), return_counts=True)
    v = out[ids]
    rp = np.float32(params.repeat_penalty)
    v = np.where(v <= 0, v * rp, v / rp)
    fp, pp = np.float32(params.frequency_penalty), np.float32(params.presence_penalty)
    out[ids] = v - (counts.astype(np.float32) * fp + pp)
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
        if not mx > -np.inf:  # a grammar admits nothing: an empty distribution
            dists.append(TokenDist(ids=np.empty(0, dtype=np.int64), probs=np.empty(0)))
            continue
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


TopLogprobs = tuple[tuple[int, float], ...]


def row_logprobs(row: np.ndarray, token: int, n: int) -> tuple[float, TopLogprobs]:
    """log softmax(row)[token] and the n likeliest (id, logprob), best first (greedy)."""
    mx = float(row.max())
    lse = mx + math.log(float(np.exp(row.astype(np.float64) - mx).sum()))
    top = _best(row, n)
    return float(row[token]) - lse, tuple((int(i), float(row[i]) - lse) for i in top)


def dist_logprobs(dist: TokenDist, token: int, n: int) -> tuple[float, TopLogprobs]:
    """log p(token) and the n likeliest (id, logprob) of a processed distribution."""
    top = np.argsort(-dist.probs, kind="stable")[:n]
    pairs = tuple((int(dist.ids[i]), math.log(float(dist.probs[i]))) for i in top)
    px = dist.prob(token)
    return (math.log(px) if px > 0 else -math.inf), pairs


def _best(row: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest values, largest first (lowest id on ties)."""
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    n = min(n, len(row))
    head = np.argpartition(-row, n - 1)[:n] if n < len(row) else np.arange(len(row))
    return head[np.lexsort((head, -row[head]))]


def kept_logprobs(
    logits: Sequence[np.ndarray], p: Sequence[TokenDist] | None, kept: list[int], n: int
) -> tuple[tuple[float, TopLogprobs], ...]:
    """Per kept token (row i for token i): its logprob and the top n, from the verify rows.

    Sampling: under p, the distribution it was drawn from (a correction's residual
    restores p). Greedy: softmax of the (penalised, masked) logits at temperature 1, the
    meaning of llama-server's n_probs, after the penalties and grammar we apply first."""
    if p is not None:
        return tuple(dist_logprobs(p[i], x, n) for i, x in enumerate(kept))
    return tuple(row_logprobs(logits[i], x, n) for i, x in enumerate(kept))
