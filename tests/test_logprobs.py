"""Logprobs: each kept token's log probability under the target's processed distribution,
from the verify call's rows (no extra target call), with the likeliest alternatives.

The references decode the output again as plain decoding does (the prompt but its
last token in one batch, then token by token), on a fresh context: target-only
logprobs match them to rounding. A verify batch's logits differ from single-token
ones on the synthetic F32 models (up to ~1e-3: llama.cpp's F32 kernels change with
the batch size; F16 values in the KV cache, accumulated in F16, round such differences
to F16 steps: up to ~3e-3), hence SPEC_TOL for speculative runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import ModelDrafter
from edgespec.errors import InvalidParameterError
from edgespec.events import DoneEvent, TokenEvent, TokenKind
from edgespec.grammar import Grammar
from edgespec.sampling import SamplingParams, apply_penalties, process_logits
from edgespec.speculation.loop import generate, stream_generate

PROMPT = "Once upon a time"
TOP = 5
SPEC_TOL = 5e-3


@pytest.fixture(scope="module")
def models(synthetic_pair):
    return synthetic_pair


def _run(target, drafter=None, **kwargs) -> tuple[list[TokenEvent], DoneEvent]:
    events = list(stream_generate(target, PROMPT, drafter=drafter, gamma=3, **kwargs))
    return [e for e in events if isinstance(e, TokenEvent)], events[-1]


def _rows(target: LlamaModel, tokens: list[int]):
    """The target's logits row before each output token, decoded one token at a time."""
    prompt = target.tokenize(PROMPT, parse_special=True)
    target.reset()
    target.decode(prompt[:-1], logits="none")
    row = target.decode(prompt[-1:], logits="last")[0].copy()
    out = []
    for tok in tokens:
        out.append(row)
        row = target.decode([tok], logits="last")[0].copy()
    target.reset()
    return prompt, out


def _log_softmax(row: np.ndarray) -> np.ndarray:
    r = row.astype(np.float64)
    finite = r > -np.inf
    mx = r[finite].max()
    return r - (mx + math.log(np.exp(r[finite] - mx).sum()))


def _check_top(ev: TokenEvent, ref: np.ndarray, tol: float = 1e-9) -> None:
    ids = [i for i, _ in ev.top_logprobs]
    values = [v for _, v in ev.top_logprobs]
    assert values == sorted(values, reverse=True)
    assert len(ids) == len(set(ids)) == min(TOP, int(np.isfinite(ref).sum()))
    np.testing.assert_allclose(values, ref[ids], rtol=0, atol=tol)
    best = np.sort(ref)[::-1][: len(ids)]
    np.testing.assert_allclose(values, best, rtol=0, atol=tol)  # the likeliest ones


def test_off_by_default(models) -> None:
    target, draft = models
    tokens, _ = _run(target, ModelDrafter(draft), max_tokens=12)
    assert all(e.logprob is None and e.top_logprobs == () for e in tokens)


def test_greedy_logprobs_are_the_target_softmax(models) -> None:
    target, draft = models
    alone, _ = _run(target, max_tokens=24, logprobs=TOP)
    spec, done = _run(target, ModelDrafter(draft), max_tokens=24, logprobs=TOP)
    kept = [e for e in spec if e.kind is not TokenKind.REJECTED]
    assert [e.token for e in kept] == [e.token for e in alone] == list(done.tokens)
    assert done.stats.accepted > 3 and any(e.kind is TokenKind.REJECTED for e in spec)
    _, rows = _rows(target, list(done.tokens))
    for ev, ref_ev, row in zip(kept, alone, rows, strict=True):
        ref = _log_softmax(row)
        assert ref_ev.logprob == pytest.approx(ref[ev.token], abs=1e-9)
        _check_top(ref_ev, ref)
        assert ev.logprob == pytest.approx(ref[ev.token], abs=SPEC_TOL)
        _check_top(ev, ref, SPEC_TOL)
    for ev in spec:
        if ev.kind is TokenKind.REJECTED:
            assert ev.logprob is None and ev.top_logprobs == ()


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
        SamplingParams(temperature=0.7, top_k=0, top_p=0.9, min_p=0.02, repeat_penalty=1.3),
    ],
)
def test_sampled_logprobs_are_the_processed_p(models, sp: SamplingParams) -> None:
    target, draft = models
    kinds = set()
    for seed in range(4):
        spec, done = _run(target, ModelDrafter(draft), max_tokens=20, logprobs=TOP, sampling=sp,
                          seed=seed)  # fmt: skip
        kept = [e for e in spec if e.kind is not TokenKind.REJECTED]
        prompt, rows = _rows(target, list(done.tokens))
        history = list(prompt)
        for ev, row in zip(kept, rows, strict=True):
            if sp.penalized:
                row = apply_penalties(row, history[-sp.penalty_last_n :], sp)
            p = process_logits(row, sp)[0]
            ref = np.full(target.n_vocab, -np.inf)
            ref[p.ids] = np.log(p.probs)
            assert ev.logprob == pytest.approx(ref[ev.token], abs=SPEC_TOL)
            _check_top(ev, ref, SPEC_TOL)
            kinds.add(ev.kind)
            history.append(ev.token)
    assert {TokenKind.ACCEPTED, TokenKind.CORRECTION} <= kinds


def test_greedy_logprobs_with_penalties_and_grammar(models) -> None:
    target, draft = models
    sp = SamplingParams(repeat_penalty=1.4, presence_penalty=0.3)
    gbnf = r'root ::= [a-z]+ (" " [a-z]+)*'
    spec, done = _run(target, ModelDrafter(draft), max_tokens=16, logprobs=TOP, sampling=sp,
                      grammar=Grammar.from_gbnf(gbnf))  # fmt: skip
    kept = [e for e in spec if e.kind is not TokenKind.REJECTED]
    prompt, rows = _rows(target, list(done.tokens))
    history, matcher = list(prompt), target.grammar(Grammar.from_gbnf(gbnf).spec)
    for ev, row in zip(kept, rows, strict=True):
        row = apply_penalties(row, history[-sp.penalty_last_n :], sp)
        row[~matcher.allowed()] = -np.inf
        ref = _log_softmax(row)  # over every allowed token
        assert ev.logprob == pytest.approx(ref[ev.token], abs=SPEC_TOL)
        _check_top(ev, ref, SPEC_TOL)
        matcher.accept(ev.token)
        history.append(ev.token)


@pytest.mark.parametrize("sp", [SamplingParams(), SamplingParams(temperature=1.0, top_k=8)])
def test_no_extra_target_calls(models, sp: SamplingParams) -> None:
    target, draft = models
    without = generate(target, PROMPT, drafter=ModelDrafter(draft), max_tokens=24, sampling=sp,
                       gamma=3, seed=3)  # fmt: skip
    with_lp = generate(target, PROMPT, drafter=ModelDrafter(draft), max_tokens=24, sampling=sp,
                       gamma=3, seed=3, logprobs=TOP)  # fmt: skip
    assert with_lp.tokens == without.tokens
    assert with_lp.stats.target_calls == without.stats.target_calls
    assert with_lp.stats.draft_calls == without.stats.draft_calls


def test_zero_alternatives_and_bad_values(models) -> None:
    target, _ = models
    tokens, _ = _run(target, max_tokens=4, logprobs=0)
    assert all(e.logprob is not None and e.logprob <= 0 and e.top_logprobs == () for e in tokens)
    for bad in (-1, True, 2.5):
        with pytest.raises(InvalidParameterError):
            generate(target, PROMPT, max_tokens=2, logprobs=bad)


@pytest.mark.real_model
def test_gemma_speculative_logprobs_are_target_only(real_model_paths) -> None:
    """On a real model the verify batch is bit-identical to single tokens: so are logprobs."""
    from edgespec.drafting.ngram import NgramDrafter

    prompt = "The cat sat on the mat. The cat sat on the mat. The cat"
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=512, n_threads=2) as target:
        runs = [
            [
                e
                for e in stream_generate(
                    target, prompt, drafter=drafter, max_tokens=24, gamma=4, logprobs=TOP
                )  # fmt: skip
                if isinstance(e, TokenEvent) and e.kind is not TokenKind.REJECTED
            ]
            for drafter in (None, NgramDrafter())
        ]
    alone, spec = runs
    assert any(e.kind is TokenKind.ACCEPTED for e in spec)
    assert [(e.token, e.logprob, e.top_logprobs) for e in spec] == [
        (e.token, e.logprob, e.top_logprobs) for e in alone
    ]
