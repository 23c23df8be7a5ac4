"""The pure numpy rules: logit processing, residuals, greedy and rejection acceptance.

Statistical tests use a chi-square goodness-of-fit test at significance 1e-5 each,
so a correct implementation fails one of them with probability below 1e-4 in all
(the seeds are fixed, so a given run is repeatable).
"""

import numpy as np
import pytest
from scipy import stats as sps

from edgespec.errors import InvalidParameterError
from edgespec.sampling import SamplingParams, TokenDist, process_logits, residual
from edgespec.speculation.verify import accept_greedy, accept_rejection

ALPHA = 1e-5


def reference_dist(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """Dense, obviously-correct version of the documented processing order."""
    z = logits.astype(np.float64) / sp.temperature
    keep = np.ones_like(z, dtype=bool)
    if 0 < sp.top_k < len(z):
        kth = np.sort(z)[::-1][sp.top_k - 1]
        keep &= z >= kth
    p = np.exp(z - z.max())
    if sp.min_p > 0:
        keep &= p >= sp.min_p * p.max() * (1 - 1e-12)
    p = np.where(keep, p, 0.0)
    p /= p.sum()
    if sp.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        mask = np.zeros_like(keep)
        mask[order[before < sp.top_p]] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    return p


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
        SamplingParams(temperature=0.7, top_k=5, top_p=1.0, min_p=0.0),
        SamplingParams(temperature=1.3, top_k=0, top_p=0.8, min_p=0.0),
        SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.1),
        SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    ],
)
def test_process_logits_matches_dense_reference(sp: SamplingParams) -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, size=(7, 300)).astype(np.float32)
    logits[3, :10] = logits[3].max()  # ties at the top
    dists = process_logits(logits, sp)
    for row, dist in zip(logits, dists, strict=True):
        assert np.all(np.diff(dist.ids) > 0)
        np.testing.assert_allclose(dist.dense(300), reference_dist(row, sp), atol=1e-9)


def test_rows_processed_together_equal_rows_alone() -> None:
    rng = np.random.default_rng(1)
    logits = rng.normal(0, 2, size=(5, 1000)).astype(np.float32)
    sp = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.02)
    together = process_logits(logits, sp)
    for row, dist in zip(logits, together, strict=True):
        alone = process_logits(row, sp)[0]
        np.testing.assert_array_equal(alone.ids, dist.ids)
        np.testing.assert_allclose(alone.probs, dist.probs)


@pytest.mark.parametrize("t", [5e-324, 1e-300, 1e-30])
@pytest.mark.parametrize("extra", [dict(top_k=0, top_p=1.0, min_p=0.0), dict()])
def test_a_tiny_temperature_is_a_point_mass_on_the_argmax(t: float, extra: dict) -> None:
    logits = np.array([[0.5, 3.0, -1.0, 2.9], [7.0, 7.0, 1.0, -np.inf]], dtype=np.float32)
    first, tied = process_logits(logits, SamplingParams(temperature=t, **extra))
    assert first.probs_at(np.array([1]))[0] == 1.0 and first.probs.sum() == 1.0
    np.testing.assert_allclose(tied.probs_at(np.array([0, 1])), [0.5, 0.5])  # a tie stays a tie


@pytest.mark.parametrize(
    "kwargs",
    [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1), dict(min_p=1.0)],
)
def test_invalid_sampling_params(kwargs: dict) -> None:
    with pytest.raises(InvalidParameterError):
        SamplingParams(**kwargs)


def test_residual_is_normalized_positive_part() -> None:
    rng = np.random.default_rng(2)
    p_dense, q_dense = rng.dirichlet(np.ones(20)), rng.dirichlet(np.ones(20))
    p_dense[[3, 7]] = 0
    p_dense /= p_dense.sum()
    p = TokenDist(np.flatnonzero(p_dense), p_dense[p_dense > 0])
    q = TokenDist(np.arange(20), q_dense)
    want = np.maximum(p_dense - q_dense, 0)
    np.testing.assert_allclose(residual(p, q).dense(20), want / want.sum())


def test_accept_greedy() -> None:
    assert accept_greedy([5, 6, 7], [5, 6, 7, 8]) == (3, 8)
    assert accept_greedy([5, 6, 7], [5, 9, 7, 8]) == (1, 9)
    assert accept_greedy([5], [4, 1]) == (0, 4)
    assert accept_greedy([], [3]) == (0, 3)


def _chi2_pvalue(samples: np.ndarray, probs: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=len(probs))
    expected = probs * len(samples)
    support = expected > 0
    assert counts[~support].sum() == 0, "sampled a token of probability 0"
    return sps.chisquare(counts[support], expected[support]).pvalue


def test_token_dist_sample_frequencies() -> None:
    rng = np.random.default_rng(3)
    probs = rng.dirichlet(np.ones(8))
    dist = TokenDist(np.arange(8), probs)
    samples = np.array([dist.sample(rng) for _ in range(20000)])
    assert _chi2_pvalue(samples, probs) > ALPHA


def _dense_dist(v: np.ndarray) -> TokenDist:
    ids = np.flatnonzero(v)
    return TokenDist(ids, v[ids] / v[ids].sum())


@pytest.mark.parametrize("gamma", [1, 3])
def test_rejection_sampling_output_follows_target(gamma: int) -> None:
    """A loop with position-dependent, context-free p_k and q_k: token k must follow p_k."""
    rng = np.random.default_rng(4 + gamma)
    vocab, n_pos = 6, 3
    p = [rng.dirichlet(np.ones(vocab)) for _ in range(n_pos + gamma + 1)]
    q = [rng.dirichlet(np.ones(vocab) * 0.5) for _ in range(n_pos + gamma + 1)]
    p[1][2] = 0.0  # a token the draft may propose but the target never emits
    p[1] /= p[1].sum()
    P, Q = [_dense_dist(x) for x in p], [_dense_dist(x) for x in q]
    trials = 12000
    out = np.zeros((trials, n_pos), dtype=int)
    accepted = drafted = 0
    for t in range(trials):
        produced: list[int] = []
        while len(produced) < n_pos:
            k = len(produced)
            draft = [Q[k + i].sample(rng) for i in range(gamma)]
            n, nxt = accept_rejection(draft, Q[k : k + gamma], P[k : k + gamma + 1], rng)
            produced += [*draft[:n], nxt]
            accepted, drafted = accepted + n, drafted + gamma
        out[t] = produced[:n_pos]
    for k in range(n_pos):
        assert _chi2_pvalue(out[:, k], p[k]) > ALPHA, f"position {k}"
    assert 0.2 < accepted / drafted < 0.95  # the test exercises both branches


def test_rejection_with_point_mass_draft_follows_target() -> None:
    """Deterministic drafters (n-gram) propose with q = 1 on one token."""
    rng = np.random.default_rng(9)
    p = rng.dirichlet(np.ones(5))
    P = _dense_dist(p)
    point = TokenDist(np.array([2]), np.array([1.0]))
    samples = []
    for _ in range(20000):
        n, nxt = accept_rejection([2], [point], [P, P], rng)
        samples.append(2 if n == 1 else nxt)
    assert _chi2_pvalue(np.array(samples), p) > ALPHA


def test_rejection_is_reproducible_with_a_seed() -> None:
    P = _dense_dist(np.array([0.1, 0.2, 0.3, 0.4]))
    Q = _dense_dist(np.array([0.4, 0.3, 0.2, 0.1]))
    runs = [
        [accept_rejection([0, 1], [Q, Q], [P, P, P], r) for _ in range(50)]
        for r in (np.random.default_rng(11), np.random.default_rng(11))
    ]
    assert runs[0] == runs[1]


def test_top_k_on_wide_rows_with_masked_logits() -> None:
    rng = np.random.default_rng(12)
    logits = rng.normal(0, 8, size=(4, 50_000)).astype(np.float32)
    logits[1, 100:] = -np.inf  # only 100 finite logits
    logits[2, :] = -np.inf
    logits[2, :3] = [1.0, 2.0, 3.0]  # fewer finite logits than top_k
    logits[3] = np.round(logits[3])  # many ties
    sp = SamplingParams(temperature=0.9, top_k=40, top_p=1.0, min_p=0.0)
    for row, dist in zip(logits, process_logits(logits, sp), strict=True):
        np.testing.assert_allclose(dist.dense(50_000), reference_dist(row, sp), atol=1e-9)
