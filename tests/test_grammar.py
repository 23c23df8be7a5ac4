"""Constrained decoding: speculative output is exactly the constrained target's.

The references mask the whole vocabulary with llama.cpp's grammar directly
(``GrammarMatcher.allowed()``), not through edgespec's shaping, which asks the
grammar only about the logits that can matter.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import CompositeDrafter, ModelDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.engine import generate
from edgespec.errors import InvalidParameterError
from edgespec.events import StopReason
from edgespec.grammar import Grammar, GrammarError
from edgespec.sampling import SamplingParams, apply_penalties, greedy_tokens, process_logits
from edgespec.shaping import Shaper
from tests.test_sampling_distribution import ALPHA, _pvalue

RUNS = 2000
WORDS = r'root ::= [a-z]+ " " [a-z]+ " " [a-z]+'
WORDS_RE = re.compile(r"[a-z]+ [a-z]+ [a-z]+")
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
    "required": ["ok", "n"],
}
SAMPLED = [
    SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.05),
]


@pytest.fixture(scope="module")
def models(synthetic_pair):
    return synthetic_pair


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "text", ["root ::= (", "root ::= foo", 'rot ::= "a"', "", 'root ::= root "a"', "root ::= [a"]
)
def test_bad_gbnf_is_one_line(text: str) -> None:
    with pytest.raises(GrammarError) as err:
        Grammar.from_gbnf(text)
    assert isinstance(err.value, InvalidParameterError)
    assert "\n" not in str(err.value) and str(err.value).startswith("invalid grammar")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "objectx"},
        {"$ref": "#/definitions/nope"},
        {"type": "string", "pattern": "(unclosed"},
        {"properties": 5},
        ["not", "an", "object"],
    ],
)
def test_bad_json_schema_is_one_line(schema) -> None:
    with pytest.raises(GrammarError) as err:
        Grammar.from_json_schema(schema)
    assert "\n" not in str(err.value)


def test_json_object_grammar() -> None:
    g = Grammar.from_json_schema(None)
    assert "root ::=" in g.gbnf and g.root == "root"
    assert Grammar.from_json_schema(SCHEMA).gbnf != g.gbnf


# ----------------------------------------------------------------- the masked rows


def _fully_masked(target: LlamaModel, row: np.ndarray, matcher) -> np.ndarray:
    out = np.array(row, dtype=np.float32)
    out[~matcher.allowed()] = -np.inf
    return out


@pytest.mark.parametrize(
    "sp",
    [
        SamplingParams(),
        *SAMPLED,
        SamplingParams(temperature=1.0, top_k=0, top_p=0.5, min_p=0.0),
        SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.2, repeat_penalty=1.3),
    ],
    ids=["greedy", "topk", "minp", "topp", "topk-minp-penalty"],
)
def test_shaped_rows_process_as_fully_masked_rows(models, sp: SamplingParams) -> None:
    target, _ = models
    prompt = target.tokenize("Once upon a time", parse_special=True)
    row = target.decode(prompt, logits="last")[0].copy()
    target.reset()
    rng = np.random.default_rng(1)
    for gbnf in (WORDS, Grammar.from_json_schema(SCHEMA).gbnf):
        matcher = target.grammar(gbnf)
        shaper = Shaper(sp, prompt, matcher.clone(), target.is_eog)
        history = list(prompt)
        for _ in range(12):
            r = (row + rng.normal(0, 2, size=row.shape)).astype(np.float32)
            if sp.penalized:
                r_pen = apply_penalties(r, history[-sp.penalty_last_n :], sp)
            full = _fully_masked(target, r_pen if sp.penalized else r, matcher)
            got = shaper.shape(r)
            if sp.greedy:
                assert greedy_tokens(got)[0] == greedy_tokens(full)[0]
                x = int(greedy_tokens(full)[0])
            else:
                a, b = process_logits(got, sp)[0], process_logits(full, sp)[0]
                np.testing.assert_array_equal(a.ids, b.ids)
                np.testing.assert_allclose(a.probs, b.probs, rtol=1e-12)
                x = int(b.ids[np.argmax(b.probs)])
            if target.is_eog(x):
                break
            matcher.accept(x)
            shaper.push(x)
            history.append(x)


# ---------------------------------------------------------------------- exactness


def _drafter(name: str, draft: LlamaModel):
    return {
        "model": lambda: ModelDrafter(draft),
        "ngram": NgramDrafter,
        "ngram+model": lambda: CompositeDrafter(NgramDrafter(), ModelDrafter(draft)),
    }[name]()


@pytest.mark.parametrize("draft_name", ["model", "ngram", "ngram+model"])
@pytest.mark.parametrize("which", ["words", "schema"])
def test_greedy_constrained_is_target_only(models, draft_name: str, which: str) -> None:
    target, draft = models
    grammar = Grammar.from_gbnf(WORDS) if which == "words" else Grammar.from_json_schema(SCHEMA)
    # a repetitive prompt: the n-gram lookup proposes text the grammar often forbids
    prompt = 'say {"ok": true, "n": 12} and one two three, {"ok": true, "n": 12} one two'
    alone = generate(target, prompt, max_tokens=40, gamma=0, grammar=grammar)
    spec = generate(
        target, prompt, drafter=_drafter(draft_name, draft), max_tokens=40, gamma=4,
        grammar=grammar,
    )  # fmt: skip
    assert spec.tokens == alone.tokens
    assert spec.stop_reason == alone.stop_reason
    assert spec.stats.drafted > 0
    if which == "words":
        assert WORDS_RE.match(alone.text)
    else:
        assert alone.stop_reason is StopReason.EOG
        value = json.loads(alone.text)
        assert set(value) == {"ok", "n"}
        assert isinstance(value["ok"], bool) and isinstance(value["n"], int)
    free = generate(target, prompt, max_tokens=40, gamma=0)
    assert free.tokens != alone.tokens  # the grammar constrained something


class _Spy:
    """A drafter that records each proposal with the context it continued."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, []
        self.name, self.model, self.is_lookup = inner.name, inner.model, inner.is_lookup

    def prefill(self, context) -> None:
        self.inner.prefill(context)

    def propose(self, context, n, sampling, rng, **kwargs):
        draft = self.inner.propose(context, n, sampling, rng, **kwargs)
        self.calls.append((list(context), list(draft.tokens)))
        return draft


@pytest.mark.parametrize("sp", [SamplingParams(), SAMPLED[0]], ids=["greedy", "sampled"])
def test_draft_model_proposes_within_the_grammar(models, sp: SamplingParams) -> None:
    """q is the masked draft distribution: every model proposal walks the grammar."""
    target, draft = models
    prompt = target.tokenize("Once upon a time", parse_special=True)
    spy = _Spy(ModelDrafter(draft))
    generate(target, prompt, drafter=spy, max_tokens=30, gamma=4, sampling=sp, seed=1,
             grammar=Grammar.from_gbnf(WORDS))  # fmt: skip
    assert sum(len(tokens) for _, tokens in spy.calls) > 10
    for context, tokens in spy.calls:
        walk = target.grammar(WORDS)
        for tok in context[len(prompt) :]:
            walk.accept(tok)
        for tok in tokens:
            assert walk.allowed(np.array([tok]))[0]
            if target.is_eog(tok):
                break
            walk.accept(tok)


def test_adaptive_gamma_with_a_lookup_first(models) -> None:
    from edgespec.policy.adaptive import AdaptiveGamma
    from edgespec.policy.costs import CostCurve

    target, draft = models
    grammar = Grammar.from_json_schema(SCHEMA)
    prompt = 'say {"ok": true, "n": 12} and {"ok": true, "n": 12} and {"ok": true, "n": 1'
    alone = generate(target, prompt, max_tokens=30, gamma=0, grammar=grammar)
    curve = CostCurve("t", "k", seconds=(1.0, 1.1, 1.2, 1.3, 1.4))
    policy = AdaptiveGamma(curve, draft_step_s=0.01)
    spec = generate(target, prompt, max_tokens=30, gamma=policy, grammar=grammar,
                    drafter=CompositeDrafter(NgramDrafter(), ModelDrafter(draft)))  # fmt: skip
    assert spec.tokens == alone.tokens and spec.stats.drafted > 0


def test_grammar_completes_with_end_of_generation(models) -> None:
    target, draft = models
    g = Grammar.from_gbnf('root ::= "yes" | "no" | "maybe"')
    for drafter in (None, ModelDrafter(draft)):
        done = generate(target, "Well?", drafter=drafter, max_tokens=30, gamma=3, grammar=g)
        assert done.text in ("yes", "no", "maybe")
        assert done.stop_reason is StopReason.EOG


def test_grammar_that_admits_nothing_stops(models) -> None:
    target, draft = models
    # llama.cpp's grammar never admits a token whose text starts with a NUL byte
    nothing = Grammar.from_gbnf(r"root ::= [\x00]")
    then_nothing = Grammar.from_gbnf(r'root ::= "a" [\x00]')
    for drafter in (None, ModelDrafter(draft), NgramDrafter()):
        done = generate(target, "a a a", drafter=drafter, max_tokens=20, gamma=3, grammar=nothing)
        assert (done.text, done.stop_reason) == ("", StopReason.GRAMMAR)
        for sp in (SamplingParams(), SAMPLED[0]):
            done = generate(
                target, "a a a", drafter=drafter, max_tokens=20, gamma=3, grammar=then_nothing,
                sampling=sp, seed=0,
            )  # fmt: skip
            assert (done.text, done.stop_reason) == ("a", StopReason.GRAMMAR)


# ------------------------------------------------------------------- distributions


def _exact_first_two(target: LlamaModel, prompt: list[int], gbnf: str, sp: SamplingParams):
    n_vocab = target.n_vocab
    start = target.grammar(gbnf)
    target.reset()
    row = _fully_masked(target, target.decode(prompt, logits="last")[0], start)
    p1 = process_logits(row, sp)[0]
    p2 = np.zeros(n_vocab)
    for x, px in zip(p1.ids, p1.probs, strict=True):
        after = start.clone()
        after.accept(int(x))
        target.truncate(len(prompt))
        row = _fully_masked(target, target.decode([int(x)], logits="last")[0], after)
        p2 += px * process_logits(row, sp)[0].dense(n_vocab)
    target.reset()
    return p1.dense(n_vocab), p2


@pytest.mark.parametrize(
    ("sp", "draft_name"),
    [(SAMPLED[0], "model"), (SAMPLED[1], "model"), (SAMPLED[0], "ngram")],
    ids=["topk8", "topp-minp", "ngram-topk8"],
)
def test_sampled_constrained_output_follows_target(models, sp, draft_name) -> None:
    target, draft = models
    prompt = target.tokenize("Once upon a time", parse_special=True)
    p1, p2 = _exact_first_two(target, prompt, WORDS, sp)
    grammar = Grammar.from_gbnf(WORDS)
    firsts, seconds, accepted, drafted = [], [], 0, 0
    for seed in range(RUNS):
        done = generate(
            target, prompt, drafter=_drafter(draft_name, draft), max_tokens=3, gamma=3,
            sampling=sp, seed=seed, grammar=grammar,
        )  # fmt: skip
        firsts.append(done.tokens[0])
        seconds.append(done.tokens[1])
        accepted += done.stats.accepted
        drafted += done.stats.drafted
    if draft_name == "model":
        assert 0.05 < accepted / drafted < 0.95
    else:  # the lookup's point masses: proposals the grammar forbids are cut, the rest
        assert drafted > RUNS // 4  # mostly rejected (the residual path)
    assert _pvalue(firsts, p1) > ALPHA
    assert _pvalue(seconds, p2) > ALPHA


# -------------------------------------------------------------------- real model


@pytest.mark.real_model
def test_gemma_json_schema(real_model_paths) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    grammar = Grammar.from_json_schema(schema)
    prompt = "Describe a cat as a JSON object with its name and age: "
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=512, n_threads=2) as target:
        alone = generate(target, prompt, max_tokens=48, gamma=0, grammar=grammar)
        spec = generate(
            target, prompt, drafter=NgramDrafter(), max_tokens=48, gamma=4, grammar=grammar
        )
    assert spec.tokens == alone.tokens and alone.stop_reason is StopReason.EOG
    value = json.loads(alone.text)
    assert set(value) == {"name", "age"}
    assert isinstance(value["name"], str) and isinstance(value["age"], int)


def test_tokens_named_by_text_are_checked_against_the_model(models) -> None:
    target, _ = models
    bos = target.vocab_info().bos
    g = Grammar.from_gbnf(f'root ::= "a" {target.token_text(bos)}')  # checked on binding
    done = generate(target, "a a", max_tokens=5, gamma=0, grammar=g)
    assert done.tokens[1:] == (bos,) and done.stop_reason is StopReason.EOG
    bad = Grammar.from_gbnf('root ::= "a" <|no-such-token|>')
    with pytest.raises(GrammarError) as err:
        generate(target, "a a", max_tokens=5, gamma=0, grammar=bad)
    assert "\n" not in str(err.value)
