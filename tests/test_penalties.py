"""Repetition penalties: llama.cpp's formula, exact speculative output, no cost when off.

The penalty history at draft position i holds the draft's tokens 0..i-1, for the
draft's q and the target's p alike; the chi-square contexts below are chosen so
that leaving them out would move the second token's distribution by a total
variation above 0.1 (checked in the test).
"""

from __future__ import annotations

import ctypes

import llama_cpp as ll
import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import CompositeDrafter, ModelDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.errors import InvalidParameterError
from edgespec.sampling import SamplingParams, apply_penalties, context_processing, process_logits
from edgespec.speculation.loop import generate
from tests.test_sampling_distribution import ALPHA, _pvalue

RUNS = 2000
# (prompt, tokens of the target's greedy continuation appended, sampling): contexts
# where the second token's penalties depend on the first (see the module docstring)
CASES = [
    (
        "a a a",
        8,
        SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0, repeat_penalty=2.0,
                       penalty_last_n=2),
    ),
    (
        "Once upon a time",
        4,
        SamplingParams(temperature=0.9, top_k=0, top_p=0.95, min_p=0.02, repeat_penalty=1.5,
                       presence_penalty=0.3, frequency_penalty=0.2, penalty_last_n=1),
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def models(synthetic_pair):
    return synthetic_pair


def test_defaults_and_checks() -> None:
    sp = SamplingParams()
    assert (sp.repeat_penalty, sp.presence_penalty, sp.frequency_penalty) == (1.0, 0.0, 0.0)
    assert sp.penalty_last_n == 64 and not sp.penalized
    assert not SamplingParams(repeat_penalty=1.5, penalty_last_n=0).penalized
    assert SamplingParams(presence_penalty=-0.5).penalized
    for bad in (
        {"repeat_penalty": 0.0},
        {"repeat_penalty": -1.0},
        {"repeat_penalty": float("nan")},
        {"repeat_penalty": 1e-45},  # 1 / it overflows: llama.cpp refuses it too
        {"presence_penalty": float("inf")},
        {"frequency_penalty": float("nan")},
        {"penalty_last_n": -2},
        {"penalty_last_n": 1.5},
    ):
        with pytest.raises(InvalidParameterError) as err:
            SamplingParams(**bad)
        assert "\n" not in str(err.value)


def _llama_cpp_penalised(row: np.ndarray, history: list[int], sp: SamplingParams) -> np.ndarray:
    """The row through llama.cpp's own llama_sampler_penalties (the reference)."""
    smpl = ll.llama_sampler_init_penalties(
        len(row), sp.penalty_last_n, sp.repeat_penalty, sp.frequency_penalty, sp.presence_penalty
    )
    try:
        for tok in history:
            ll.llama_sampler_accept(smpl, tok)
        data = (ll.llama_token_data * len(row))()
        for i, v in enumerate(row):
            data[i] = ll.llama_token_data(i, float(v), 0.0)
        arr = ll.llama_token_data_array(data=data, size=len(row), selected=-1, sorted=False)
        ll.llama_sampler_apply(smpl, ctypes.byref(arr))
        return np.array([data[i].logit for i in range(len(row))], dtype=np.float32)
    finally:
        ll.llama_sampler_free(smpl)


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(repeat_penalty=1.3, presence_penalty=0.4, frequency_penalty=0.25),
        SamplingParams(repeat_penalty=0.7, frequency_penalty=-0.5, penalty_last_n=5),
    ],
)
def test_penalties_are_llama_cpps(sp: SamplingParams) -> None:
    rng = np.random.default_rng(0)
    row = rng.normal(0, 3, size=300).astype(np.float32)
    history = [int(t) for t in rng.integers(0, 40, size=90)]
    # llama.cpp's sampler keeps the last penalty_last_n tokens it accepted
    ours = apply_penalties(row, history[-sp.penalty_last_n :], sp)
    np.testing.assert_array_equal(ours, _llama_cpp_penalised(row, history, sp))
    assert not np.array_equal(ours, row)


@pytest.mark.parametrize("draft_name", ["draft_same", "draft_noisy", "ngram", "ngram+noisy"])
def test_greedy_with_penalties_is_target_only(synthetic_models, draft_name: str) -> None:
    sp = SamplingParams(repeat_penalty=1.6, presence_penalty=0.5, frequency_penalty=0.3)
    prompt = "one two three four five, one two three four five, one two three"
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target:
        plain = generate(target, prompt, max_tokens=60, gamma=0)
        alone = generate(target, prompt, max_tokens=60, gamma=0, sampling=sp)
        assert alone.tokens != plain.tokens  # the penalties change the output
        file = "draft_same" if draft_name == "draft_same" else "draft_noisy"
        with LlamaModel(synthetic_models[file], n_ctx=256, n_threads=1) as dm:
            drafter = {
                "draft_same": ModelDrafter(dm),
                "draft_noisy": ModelDrafter(dm),
                "ngram": NgramDrafter(),
                "ngram+noisy": CompositeDrafter(NgramDrafter(), ModelDrafter(dm)),
            }[draft_name]
            spec = generate(target, prompt, drafter=drafter, max_tokens=60, gamma=4, sampling=sp)
    assert spec.tokens == alone.tokens
    assert spec.stats.drafted > 5
    if draft_name.startswith("draft"):
        assert spec.stats.accepted > 5  # draft tokens past the first were verified


def test_defaults_cost_nothing(synthetic_models, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_shaper(*args, **kwargs):
        raise AssertionError("a Shaper was built for default sampling")

    monkeypatch.setattr(context_processing, "Shaper", no_shaper)
    with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target:
        generate(target, "Once upon a time", max_tokens=8, gamma=2, drafter=NgramDrafter())
        generate(target, "Once upon a time", max_tokens=8, sampling=SamplingParams(temperature=1))


def _context(target: LlamaModel, prompt: str, extra: int) -> list[int]:
    tokens = target.tokenize(prompt, parse_special=True)
    return tokens + list(generate(target, tokens, max_tokens=extra, gamma=0).tokens)


def _exact_first_two(target: LlamaModel, ctx: list[int], sp: SamplingParams, *, with_first=True):
    """p1 and p2 of the penalised target alone (p2 without the first token in the
    history when with_first is False: what a wrong implementation would sample)."""
    n_vocab, last = target.n_vocab, sp.penalty_last_n
    target.reset()
    p1 = process_logits(apply_penalties(target.decode(ctx, logits="last")[0], ctx[-last:], sp), sp)
    p2 = np.zeros(n_vocab)
    for x, px in zip(p1[0].ids, p1[0].probs, strict=True):
        target.truncate(len(ctx))
        row = target.decode([int(x)], logits="last")[0]
        hist = (ctx + [int(x)])[-last:] if with_first else ctx[-last:]
        p2 += px * process_logits(apply_penalties(row, hist, sp), sp)[0].dense(n_vocab)
    target.reset()
    return p1[0].dense(n_vocab), p2


@pytest.mark.parametrize("case", CASES, ids=["repeat-last2", "mixed-last1"])
def test_sampled_penalised_output_follows_target(models, case) -> None:
    target, draft = models
    prompt, extra, sp = case
    ctx = _context(target, prompt, extra)
    p1, p2 = _exact_first_two(target, ctx, sp)
    _, p2_wrong = _exact_first_two(target, ctx, sp, with_first=False)
    assert 0.5 * np.abs(p2 - p2_wrong).sum() > 0.1  # the test can tell the two apart
    firsts, seconds, accepted, drafted = [], [], 0, 0
    for seed in range(RUNS):
        done = generate(
            target, ctx, drafter=ModelDrafter(draft), max_tokens=3, gamma=3, sampling=sp, seed=seed
        )
        firsts.append(done.tokens[0])
        seconds.append(done.tokens[1])
        accepted += done.stats.accepted
        drafted += done.stats.drafted
    assert 0.05 < accepted / drafted < 0.95  # both the accept and the resample branches ran
    assert _pvalue(firsts, p1) > ALPHA
    assert _pvalue(seconds, p2) > ALPHA


@pytest.mark.real_model
def test_gemma_greedy_with_penalties_is_target_only(real_model_paths) -> None:
    sp = SamplingParams(repeat_penalty=1.15, frequency_penalty=0.2)
    prompt = "Repeat after me: the cat sat on the mat. The cat sat on the mat. The cat"
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=512, n_threads=2) as target:
        plain = generate(target, prompt, max_tokens=40, gamma=0)
        alone = generate(target, prompt, max_tokens=40, gamma=0, sampling=sp)
        spec = generate(target, prompt, max_tokens=40, gamma=4, sampling=sp, drafter=NgramDrafter())
    assert spec.tokens == alone.tokens != plain.tokens
    assert spec.stats.drafted > 0
