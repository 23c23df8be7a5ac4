"""Sampled speculative output follows the target's processed distribution exactly.

For a prompt P we compute, from fresh target contexts, the exact processed
distribution of the first generated token, p1 = p(. | P), and of the second,
p2 = sum_x p1(x) p(. | P x). Then we run speculative generation with a draft
whose distribution clearly differs, over many seeds, and compare the empirical
frequencies with a chi-square test at significance 2.5e-5 per test: with four
tests, a correct sampler fails with probability below 1e-4.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from edgespec.backend import LlamaModel
from edgespec.drafting import ModelDrafter
from edgespec.policy.adaptive import AdaptiveGamma
from edgespec.policy.costs import CostCurve
from edgespec.sampling import SamplingParams, process_logits
from edgespec.speculation.loop import generate

ALPHA = 2.5e-5
RUNS = 2000
PROMPT = "Once upon a time"
CONFIGS = [
    SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.02),
]


def _exact_first_two(target_path, prompt_tokens: list[int], sp: SamplingParams, n_vocab: int):
    with LlamaModel(target_path, n_ctx=256, n_threads=1) as m:
        p1 = process_logits(m.decode(prompt_tokens, logits="last"), sp)[0]
        p2 = np.zeros(n_vocab)
        for x, px in zip(p1.ids, p1.probs, strict=True):
            m.truncate(len(prompt_tokens))
            p2 += px * process_logits(m.decode([int(x)], logits="last"), sp)[0].dense(n_vocab)
    return p1.dense(n_vocab), p2


def _pvalue(samples: list[int], probs: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=len(probs))
    support = probs * len(samples) > 0
    assert counts[~support].sum() == 0, "sampled a token the target never emits"
    # pool categories with tiny expectations so the chi-square approximation holds
    expected = probs[support] * len(samples)
    observed = counts[support]
    small = expected < 5
    if small.any():
        expected = np.append(expected[~small], expected[small].sum())
        observed = np.append(observed[~small], observed[small].sum())
    return sps.chisquare(observed, expected).pvalue


def _sample_first_two(target, prompt, drafter, sp: SamplingParams, runs: int = RUNS, gamma=3):
    """First and second tokens of `runs` seeded speculative generations, and the acceptance."""
    firsts, seconds, accepted, drafted = [], [], 0, 0
    for seed in range(runs):
        done = generate(
            target, prompt, drafter=drafter, max_tokens=3, gamma=gamma, sampling=sp, seed=seed
        )
        firsts.append(done.tokens[0])
        seconds.append(done.tokens[1])
        accepted += done.stats.accepted
        drafted += done.stats.drafted
    return firsts, seconds, accepted / drafted


@pytest.mark.parametrize("sp", CONFIGS, ids=["topk8", "topp-minp"])
def test_first_and_second_token_follow_target(synthetic_models, sp: SamplingParams) -> None:
    with (
        LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_noisy"], n_ctx=256, n_threads=1) as draft,
    ):
        prompt = target.tokenize(PROMPT, parse_special=True)
        p1, p2 = _exact_first_two(synthetic_models["target"], prompt, sp, target.n_vocab)
        # the draft must really differ, or the test proves nothing
        q1 = process_logits(draft.decode(prompt, logits="last"), sp)[0].dense(target.n_vocab)
        draft.reset()
        assert 0.5 * np.abs(p1 - q1).sum() > 0.2
        firsts, seconds, acceptance = _sample_first_two(target, prompt, ModelDrafter(draft), sp)
    assert 0.05 < acceptance < 0.95  # both the accept and the resample branches ran
    assert _pvalue(firsts, p1) > ALPHA
    assert _pvalue(seconds, p2) > ALPHA


class _ConfidentDraftsOnly(AdaptiveGamma):
    """Three draft tokens a round, each kept only while the draft is confident enough.

    The adaptive policy's early stop (keep_drafting) with its costs taken out, so that
    the stop bites on every round. A draft that decided after drawing x, by q(x),
    proposed from q cut to its likely tokens: the output followed the draft, not the
    target (found by review; the fixed-gamma test above never stops early).
    """

    def __init__(self, threshold: float) -> None:
        super().__init__(CostCurve("t", "k", seconds=(1.0, 1.2, 1.4, 1.6)), draft_step_s=0.01)
        self.threshold = threshold
        self.stops = 0

    def choose(self, limit: int, *, match_len: int | None = None, by_text: bool = False) -> int:
        return min(3, limit)

    def keep_drafting(self, i: int, cumulative_conf: float) -> bool:
        keep = cumulative_conf > self.threshold
        self.stops += not keep
        return keep


def test_early_stopped_drafts_keep_the_target_distribution(synthetic_models) -> None:
    sp = CONFIGS[0]
    with (
        LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_noisy"], n_ctx=256, n_threads=1) as draft,
    ):
        prompt = target.tokenize(PROMPT, parse_special=True)
        p1, p2 = _exact_first_two(synthetic_models["target"], prompt, sp, target.n_vocab)
        policy = _ConfidentDraftsOnly(threshold=0.2)
        firsts, seconds, acceptance = _sample_first_two(
            target, prompt, ModelDrafter(draft), sp, gamma=policy
        )
    assert policy.stops > RUNS // 4  # the early stop really cut drafts short
    assert 0.05 < acceptance < 0.95
    assert _pvalue(firsts, p1) > ALPHA
    assert _pvalue(seconds, p2) > ALPHA
