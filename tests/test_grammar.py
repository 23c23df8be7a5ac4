"""Constrained decoding: speculative output is exactly the constrained target's.

The references mask the whole vocabulary with the grammar's matcher directly
(``GrammarMatcher.allowed()``), not through edgespec's shaping; grammar drafts (the
text a grammar forces, and rows whose one admitted token needs no logits) are on
wherever a drafter is given, and compared with plain constrained decoding.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import CompositeDrafter, ModelDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.errors import InvalidParameterError
from edgespec.events import StopReason
from edgespec.grammar import Grammar, GrammarError
from edgespec.sampling import SamplingParams, apply_penalties, greedy_tokens, process_logits
from edgespec.sampling.context_processing import Shaper
from edgespec.speculation.loop import generate
from tests.test_sampling_distribution import ALPHA, _pvalue

RUNS = 2000
WORDS = r'root ::= [a-z]+ " " [a-z]+ " " [a-z]+'
WORDS_RE = re.compile(r"[a-z]+ [a-z]+ [a-z]+")
# forced text between free words: grammar drafts and certain rows
FORCED = r'root ::= [a-z] " and then " [a-z]+'
RECORD = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "count": {"type": "integer"},
                   "kind": {"enum": ["alpha", "beta"]}, "done": {"type": "boolean"}},
    "required": ["name", "count", "kind", "done"],
    "additionalProperties": False,
}  # fmt: skip
SCHEMA = {
    "type": "object",
    # bounded: at most ~25 characters, so the output ends within max_tokens on any CPU
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0,
                                                    "maximum": 99}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}  # fmt: skip
SAMPLED = [
    SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.05),
]


@pytest.fixture(scope="module")
def models(synthetic_pair):
    return synthetic_pair


# ------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "text", ["root ::= (", "root ::= foo", 'rot ::= "a"', "", "root ::= [a", "root ::= \\"]
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
    assert g.kind == "json_schema" and g.spec
    assert Grammar.from_json_schema(SCHEMA).spec != g.spec


# ----------------------------------------------------------------- the masked rows


def _fully_masked(target: LlamaModel, row: np.ndarray, matcher) -> np.ndarray:
    out = np.array(row, dtype=np.float32)
    out[~matcher.allowed()] = -np.inf
    return out


def test_matcher_queries_agree_with_the_mask(models) -> None:
    """admits, allowed_ids, only and allowed(ids) (read from the bitmask) say what the
    full mask says, state by state along a constrained output."""
    target, _ = models
    rng, ends = np.random.default_rng(3), _ends(target)
    for grammar in (Grammar.from_json_schema(RECORD), Grammar.from_gbnf(FORCED)):
        done = generate(target, "A record:", max_tokens=40, gamma=0, grammar=grammar)
        matcher = target.grammar(grammar.spec)
        for tok in done.tokens:
            fresh, unread = matcher.clone(), matcher.clone()  # asked before its mask is built
            mask = matcher.allowed()
            admitted = np.flatnonzero(mask)
            ids = np.unique(np.r_[rng.integers(0, target.n_vocab, 64), admitted[:32], tok])
            assert [fresh.admits(int(t)) for t in ids] == mask[ids].tolist()
            assert matcher.allowed(ids).tolist() == mask[ids].tolist()
            np.testing.assert_array_equal(matcher.allowed_ids(), admitted)
            assert matcher.only() == (int(admitted[0]) if len(admitted) == 1 else None)
            assert not fresh.admits(-1) and not fresh.admits(target.n_vocab)
            _assert_cheap_answers_hold(unread, mask, ends)
            if target.is_eog(tok):
                break
            matcher.accept(tok)


def _assert_cheap_answers_hold(fresh, mask: np.ndarray, ends: np.ndarray) -> None:
    """What a state says without its mask is what the mask says: several admitted where
    it says so, no end of generation (ends: their ids) where it cannot end, the one
    token admitted (where text is forced: the text's first token)."""
    admitted = np.flatnonzero(mask)
    if fresh.several():
        assert len(admitted) >= 2
    if not fresh.may_end():
        assert not mask[ends].any()
    assert fresh.only() == (int(admitted[0]) if len(admitted) == 1 else None)


def _ends(target: LlamaModel) -> np.ndarray:
    return np.array([t for t in range(target.n_vocab) if target.is_eog(t)], dtype=np.int64)


def _random_walk(target: LlamaModel, matcher, rng: np.random.Generator, steps: int):
    """States along a walk of admitted tokens chosen at random, most among JSON's
    punctuation where the state admits some (four in five: so that strings close and
    objects go on to the text their keys force): (a fresh copy of the state, its mask).
    Ends where only an end is admitted."""
    marks = {t for text in ('"', '",', '"}', "}", ",", "]", "[", "{", "1", " ", "true", "null")
             for t in target.tokenize(text, add_special=False)}  # fmt: skip
    for _ in range(steps):
        fresh, mask = matcher.clone(), matcher.allowed()
        yield fresh, mask
        admitted = np.flatnonzero(mask)
        structural = [int(t) for t in admitted[np.isin(admitted, list(marks))]]
        pool = structural if structural and rng.random() < 0.8 else admitted
        for _ in range(8):
            pick = int(pool[rng.integers(len(pool))])
            if not target.is_eog(pick):
                matcher.accept(pick)
                break
        else:
            return


@pytest.mark.real_model
def test_admits_without_the_mask_agrees_on_real_vocabularies(real_model_paths) -> None:
    """On both real vocabularies (262k and 49k tokens) and the coverage set's schemas,
    along random walks of admitted tokens: ``admits`` asked before the mask is built
    (llguidance's test of one token's bytes where no text is forced) says what the mask
    says, for the tokens a greedy row would ask about and for random ones; so do
    ``several``, ``may_end`` and ``only`` (from the forced text's tokens)."""
    from pathlib import Path

    files = sorted(Path(__file__).parent.joinpath("data", "schemas").glob("*.json"))[::2]
    # (fixed keys force text between the values: each walked a few times)
    schemas = [json.loads(path.read_text()) for path in files] + [RECORD, SCHEMA] * 4
    rng = np.random.default_rng(11)
    for name in ("gemma-3-270m", "smollm2-135m-instruct"):
        with LlamaModel(real_model_paths[name], n_ctx=256, n_threads=1) as target:
            n_checked, n_single, ends = 0, 0, _ends(target)
            for schema in schemas:
                try:
                    matcher = target.grammar(Grammar.from_json_schema(schema, strict=False).spec)
                except (GrammarError, ValueError):
                    continue
                for fresh, mask in _random_walk(target, matcher, rng, 40):
                    _assert_cheap_answers_hold(fresh.clone(), mask, ends)
                    admitted = np.flatnonzero(mask)
                    some = rng.choice(admitted, min(16, len(admitted)))
                    ids = np.unique(np.r_[rng.integers(0, target.n_vocab, 48), some])
                    assert [fresh.admits(int(t)) for t in ids] == mask[ids].tolist(), schema
                    n_checked += len(ids)
                    n_single += len(admitted) == 1
            assert n_checked > 10_000 and n_single > 50, (n_checked, n_single)


def test_forks_share_masks_of_equal_states_only(models) -> None:
    """A shaper's forks reuse a mask computed for the same tokens since the shaper, and
    never one of another state (a push on the shaper re-keys the masks ahead of it)."""
    target, _ = models
    grammar = Grammar.from_json_schema(RECORD)
    done = generate(target, "A record:", max_tokens=40, gamma=0, grammar=grammar)
    out = [t for t in done.tokens if not target.is_eog(t)]
    root = Shaper(SamplingParams(), [], target.grammar(grammar.spec), target.is_eog)

    def fresh(tokens) -> np.ndarray:
        m = target.grammar(grammar.spec)
        for t in tokens:
            m.accept(t)
        return m.allowed()

    for at in range(0, len(out) - 4, 3):
        walks = [root.fork() for _ in range(3)]
        for k, walk in enumerate(walks):
            for t in out[at : at + k + 2]:
                walk.push(t)
            want = np.flatnonzero(fresh(out[: at + k + 2]))
            np.testing.assert_array_equal(walk._grammar().allowed_ids(), want)
            assert walk._grammar().only() == (int(want[0]) if len(want) == 1 else None)
        for t in out[at : at + 3]:
            root.push(t)
        np.testing.assert_array_equal(root._grammar().mask(), fresh(out[: at + 3]))


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
    for grammar in (Grammar.from_gbnf(WORDS), Grammar.from_json_schema(SCHEMA)):
        matcher = target.grammar(grammar.spec)
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
                assert shaper.greedy(r) == greedy_tokens(full)[0]  # no mask when admitted
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
    # (the schema's output is mostly forced text: the grammar may draft all of it)
    assert spec.stats.drafted + (which == "schema") * spec.stats.grammar_drafted > 0
    if which == "words":
        assert WORDS_RE.match(alone.text)
    else:
        assert alone.stop_reason is StopReason.EOG
        value = json.loads(alone.text)
        assert set(value) == {"ok", "n"}
        assert isinstance(value["ok"], bool) and isinstance(value["n"], int)
    free = generate(target, prompt, max_tokens=40, gamma=0)
    assert free.tokens != alone.tokens  # the grammar constrained something


@pytest.mark.parametrize("which", ["forced", "record"])
def test_grammar_drafts_keep_greedy_output(models, which: str) -> None:
    """Drafting the forced text and skipping certain rows' logits changes nothing of the
    greedy output: with and without a drafter, against plain constrained decoding."""
    target, draft = models
    grammar = Grammar.from_gbnf(FORCED) if which == "forced" else Grammar.from_json_schema(RECORD)
    prompt = 'the cat and then the dog, {"name": "x", "count": 3, "kind": "beta", "done": true}'
    plain = generate(target, prompt, max_tokens=60, gamma=0, grammar=grammar)
    assert plain.stats.forced == plain.stats.grammar_drafted == 0  # plain: no grammar drafts
    runs = {
        "grammar only": generate(target, prompt, max_tokens=60, gamma=0, grammar=grammar,
                                 grammar_drafts=True),
        "ngram": generate(target, prompt, drafter=NgramDrafter(), max_tokens=60, gamma=4,
                          grammar=grammar),
        "model auto": generate(target, prompt, drafter=ModelDrafter(draft), max_tokens=60,
                               grammar=grammar),
        "model off": generate(target, prompt, drafter=ModelDrafter(draft), max_tokens=60,
                              gamma=3, grammar=grammar, grammar_drafts=False),
    }  # fmt: skip
    for name, done in runs.items():
        assert done.tokens == plain.tokens, name
        assert done.stop_reason == plain.stop_reason, name
    on = runs["grammar only"].stats
    assert on.forced + on.grammar_accepted > 0
    assert on.target_calls < plain.stats.target_calls
    assert runs["model off"].stats.forced == runs["model off"].stats.grammar_drafted == 0
    if which == "record":
        value = json.loads(plain.text)
        assert set(value) == set(RECORD["properties"])


def test_grammar_drafts_carry_their_kinds(models) -> None:
    from edgespec.events import TokenEvent, TokenKind
    from edgespec.speculation.loop import stream_generate

    target, _ = models
    grammar = Grammar.from_json_schema(RECORD)
    stream = stream_generate(target, "{", max_tokens=60, gamma=0, grammar=grammar,
                             grammar_drafts=True)  # fmt: skip
    events = [e for e in stream if isinstance(e, TokenEvent)]
    kinds = {e.kind for e in events}
    assert TokenKind.FORCED in kinds or TokenKind.GRAMMAR in kinds
    assert kinds <= {TokenKind.FORCED, TokenKind.GRAMMAR, TokenKind.PLAIN, TokenKind.BONUS,
                     TokenKind.CORRECTION, TokenKind.REJECTED}  # fmt: skip


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
        walk = target.grammar(Grammar.from_gbnf(WORDS).spec)
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
    for grammar_drafts in (False, True):  # (with them, the grammar drafts most of it)
        spec = generate(target, prompt, max_tokens=30, gamma=policy, grammar=grammar,
                        drafter=CompositeDrafter(NgramDrafter(), ModelDrafter(draft)),
                        grammar_drafts=grammar_drafts)  # fmt: skip
        assert spec.tokens == alone.tokens
        assert spec.stats.drafted > 0 or grammar_drafts


def test_grammar_completes_with_end_of_generation(models) -> None:
    target, draft = models
    g = Grammar.from_gbnf('root ::= "yes" | "no" | "maybe"')
    for drafter in (None, ModelDrafter(draft)):
        done = generate(target, "Well?", drafter=drafter, max_tokens=30, gamma=3, grammar=g)
        assert done.text in ("yes", "no", "maybe")
        assert done.stop_reason is StopReason.EOG


class _AdmitsNothing:
    """A grammar state whose mask is empty (llguidance's grammars always admit some
    token, an end of generation at least; the engine still guards the empty mask)."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab

    def clone(self):
        return self

    def mask(self) -> np.ndarray:
        return np.zeros(self.n_vocab, dtype=bool)

    def allowed(self, ids=None) -> np.ndarray:
        return self.mask() if ids is None else np.zeros(len(ids), dtype=bool)

    def admits(self, token: int) -> bool:
        return False

    has_bits = True

    def allowed_ids(self) -> np.ndarray:
        return np.empty(0, dtype=np.int64)

    def n_words(self) -> int:
        return 0

    def only(self) -> None:
        return None

    def several(self) -> bool:
        return False

    def may_end(self) -> bool:
        return False

    def forced_tokens(self) -> list[int]:
        return []

    def forced_text_tokens(self) -> list[int]:
        return []


@pytest.mark.parametrize("sp", [SamplingParams(), SAMPLED[0]], ids=["greedy", "sampled"])
def test_a_mask_that_admits_nothing_gives_no_token(models, sp: SamplingParams) -> None:
    from edgespec.speculation.step import speculative_step
    from edgespec.speculation.verify import NO_TOKEN

    target, draft = models
    prompt = target.tokenize("a a a", parse_special=True)
    for drafter in (None, ModelDrafter(draft), NgramDrafter()):
        target.reset()
        target.decode(prompt[:-1], logits="none")
        if drafter is not None:
            drafter.prefill(prompt)
        shaper = Shaper(sp, prompt, _AdmitsNothing(target.n_vocab), target.is_eog)
        res = speculative_step(target, drafter, prompt, 3, sp, np.random.default_rng(0),
                               shaper=shaper, certain_rows=True)  # fmt: skip
        assert res.n_accepted == 0 and res.next_token == NO_TOKEN
        assert len(target.tokens) == len(prompt)  # the pending token only, as after any round
    target.reset()


# ------------------------------------------------------------------- distributions


def _exact_first_two(target: LlamaModel, prompt: list[int], gbnf: str, sp: SamplingParams):
    n_vocab = target.n_vocab
    start = target.grammar(Grammar.from_gbnf(gbnf).spec)
    target.reset()
    row = _fully_masked(target, target.decode(prompt, logits="last")[0], start)
    p1 = process_logits(row, sp)[0]
    p2 = np.zeros(n_vocab)
    for x, px in zip(p1.ids, p1.probs, strict=True):
        if px == 0:
            continue  # (a top-k list may pad with forbidden tokens of no weight)
        after = start.clone()
        after.accept(int(x))
        target.truncate(len(prompt))
        row = _fully_masked(target, target.decode([int(x)], logits="last")[0], after)
        p2 += px * process_logits(row, sp)[0].dense(n_vocab)
    target.reset()
    return p1.dense(n_vocab), p2


@pytest.mark.parametrize(
    ("sp", "draft_name", "gbnf"),
    [(SAMPLED[0], "model", WORDS), (SAMPLED[1], "model", WORDS), (SAMPLED[0], "ngram", WORDS),
     (SAMPLED[0], "ngram", FORCED), (SAMPLED[1], "model", FORCED)],
    ids=["topk8", "topp-minp", "ngram-topk8", "forced-ngram-topk8", "forced-topp-minp"],
)  # fmt: skip
def test_sampled_constrained_output_follows_target(models, sp, draft_name, gbnf) -> None:
    """With FORCED, the second token is the target's choice among the splits of the
    forced " and then " while the grammar drafts its own split (q = 1): it still
    follows the target."""
    target, draft = models
    prompt = target.tokenize("Once upon a time", parse_special=True)
    p1, p2 = _exact_first_two(target, prompt, gbnf, sp)
    grammar = Grammar.from_gbnf(gbnf)
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
    if draft_name == "model" and gbnf == WORDS:
        assert 0.05 < accepted / drafted < 0.95
    elif gbnf == WORDS:  # the lookup's point masses: proposals the grammar forbids are cut,
        assert drafted > RUNS // 4  # the rest mostly rejected (the residual path)
    for got, p in ((firsts, p1), (seconds, p2)):
        if np.count_nonzero(p) == 1:  # one possible token (a chi-square has no degree)
            assert set(got) == {int(np.argmax(p))}
        else:
            assert _pvalue(got, p) > ALPHA


# -------------------------------------------------------------------- real model


@pytest.mark.real_model
def test_gemma_json_schema(real_model_paths) -> None:
    schema = {
        "type": "object",
        # bounded, so that it ends within max_tokens whatever the CPU makes of it
        "properties": {"name": {"type": "string", "maxLength": 16},
                       "age": {"type": "integer", "minimum": 0, "maximum": 40}},
        "required": ["name", "age"],
    }  # fmt: skip
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
    """Lark names a special token by its text (or <[id]>); GBNF's token syntax is not
    read (a one-line error, pointing at the Lark form in the docs)."""
    target, _ = models
    bos = target.vocab_info().bos
    for text in (f'start: "a" {target.token_text(bos)}', f'start: "a" <[{bos}]>'):
        done = generate(target, "a a", max_tokens=5, gamma=0, grammar=Grammar.from_lark(text))
        assert done.tokens[1:] == (bos,) and done.stop_reason is StopReason.EOG
    bad = Grammar.from_lark('start: "a" <|no-such-token|>')  # checked on binding
    with pytest.raises(GrammarError) as err:
        generate(target, "a a", max_tokens=5, gamma=0, grammar=bad)
    assert "\n" not in str(err.value) and "no-such-token" in str(err.value)
    with pytest.raises(GrammarError) as err:
        Grammar.from_gbnf('root ::= "a" <|end|>')
    assert "\n" not in str(err.value)


def test_a_model_loaded_again_keeps_its_grammars(synthetic_models) -> None:
    """The grammar tokenizer is kept per model file for the process and calls llama.cpp's
    tokenize on a vocabulary of its own: closing the model it was first built for and
    loading the file again must not leave it a freed vocabulary."""
    grammar = Grammar.from_json_schema(RECORD)
    runs = []
    for _ in range(3):
        with LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target:
            runs.append(generate(target, "{", max_tokens=60, gamma=0, grammar=grammar,
                                 grammar_drafts=True).tokens)  # fmt: skip
    assert runs[0] == runs[1] == runs[2]
