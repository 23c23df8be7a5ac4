"""Cross-vocabulary drafting (through text) and the n-gram + model composite."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli import run_cli
from test_sampling_distribution import ALPHA, _exact_first_two, _pvalue, _sample_first_two

from edgespec.backend import LlamaModel
from edgespec.drafting import CompositeDrafter, ModelDrafter
from edgespec.drafting.compat import incompatibility
from edgespec.drafting.crossvocab import CrossVocabDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.errors import ModelLoadError
from edgespec.loading import load_pair
from edgespec.sampling import SamplingParams
from edgespec.speculation.loop import generate

PROMPTS = ["Hello world", "The people of the world said", "日本語 café ü — the time"]
GREEDY = SamplingParams()
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module")
def models(synthetic_models):
    names = ("target", "draft_permuted", "draft_splitvocab", "draft_badvocab")
    loaded = {n: LlamaModel(synthetic_models[n], n_ctx=512, n_threads=1) for n in names}
    yield loaded
    for m in loaded.values():
        m.close()


def spelled(model: LlamaModel, tokens: list[int]) -> list[bytes]:
    return [model.token_bytes(t) for t in tokens]


# ----------------------------------------------------------------------------- translation


def test_the_draft_models_have_other_vocabularies(models) -> None:
    target = models["target"]
    for name in ("draft_permuted", "draft_splitvocab"):
        assert incompatibility(target, models[name]) is not None
    # the split vocabulary spells words in more, shorter tokens
    text = "The people of the world"
    assert len(models["draft_splitvocab"].tokenize(text)) > len(target.tokenize(text))


def test_last_target_token_waits_for_more_text(models) -> None:
    d = CrossVocabDrafter(models["target"], models["draft_splitvocab"])
    t = models["target"]
    assert d.to_target(b" Hello", b" wor") == []  # " wor" may become " world"
    assert spelled(t, d.to_target(b" Hello", b" wor", final=True)) == [b" wor"]
    assert spelled(t, d.to_target(b" Hello", b" world and")) == [b" world"]
    assert spelled(t, d.to_target(b" Hello", b" world and", final=True)) == [b" world", b" and"]


def test_a_token_across_the_boundary_proposes_nothing(models) -> None:
    d = CrossVocabDrafter(models["target"], models["draft_splitvocab"])
    # the context ends in " th"; " the" would re-tokenize it: no target token starts there
    assert d.to_target(b" th", b"e sea", final=True) == []
    assert spelled(models["target"], d.to_target(b" caf", b"\xc3\xa9 the")) == [b"\xc3\xa9"]
    # a context ending inside a UTF-8 character: the draft text completes it, but here
    # the target spells " 日" as one token, across the boundary
    assert d.to_target(b" \xe6\x97", b"\xa5 the", final=True) == []


def test_draft_context_follows_the_target_context(models) -> None:
    target, draft = models["target"], models["draft_splitvocab"]
    d = CrossVocabDrafter(target, draft)
    context = target.tokenize("The people of the world said hello", add_special=True)
    d.prefill(context)
    full = draft.tokenize("The people of the world said hello", add_special=True)
    assert draft.tokens == full[:-1]  # segment by segment, the same tokens as one call
    # a changed ending re-translates only what changed; the cache keeps the common prefix
    other = target.tokenize("The people of the world said no", add_special=True)
    d.prefill(other)
    assert draft.tokens == draft.tokenize("The people of the world said no")[:-1]


def test_proposals_are_point_masses_and_count_draft_calls(models) -> None:
    d = CrossVocabDrafter(models["target"], models["draft_permuted"], tli=False)
    context = models["target"].tokenize("The people of the world", add_special=True)
    sp = SamplingParams(temperature=1.0)
    draft = d.propose(context, 4, sp, np.random.default_rng(1))
    assert 0 < len(draft.tokens) <= 4
    assert [q.prob(t) for q, t in zip(draft.q, draft.tokens, strict=True)] == [1.0] * len(
        draft.tokens
    )
    assert draft.model_calls >= len(draft.tokens)  # the last token waits for one more
    assert d.propose(context, 0, GREEDY, RNG).tokens == []


def test_token_intersection_maps_tokens_and_q(models) -> None:
    target, draft = models["target"], models["draft_splitvocab"]
    d = CrossVocabDrafter(target, draft, tli=True)
    tmap = d.token_map
    # every draft token but the three specials is a target token too; the converse not
    assert len(tmap.to_draft) == draft.n_vocab - 3 < target.n_vocab - 3
    the = target.tokenize("the", add_special=False)  # "▁the": too long for the split vocab
    assert tmap.twins(the) is None
    short = target.tokenize("he", add_special=False)
    assert spelled(draft, tmap.twins(short)) == spelled(target, short)
    context = target.tokenize("The people of the world", add_special=True)
    draft_out = d.propose(context, 4, SamplingParams(temperature=1.0), np.random.default_rng(1))
    assert len(draft_out.tokens) == len(draft_out.q) == draft_out.model_calls == 4
    for x, q in zip(draft_out.tokens, draft_out.q, strict=True):
        assert np.all(np.diff(q.ids) > 0) and abs(q.probs.sum() - 1) < 1e-9
        assert q.prob(x) > 0 and np.all(np.isin(q.ids, list(tmap.to_draft)))


@pytest.mark.parametrize("tli", [False, True], ids=["text", "tli"])
def test_keep_stops_drafting_early(models, tli: bool) -> None:
    target = models["target"]
    d = CrossVocabDrafter(target, models["draft_permuted"], tli=tli)
    context = target.tokenize("The people of the world", add_special=True)
    asked: list[tuple[int, float]] = []

    def two(i: int, confidence: float) -> bool:
        asked.append((i, confidence))
        return i <= 2

    full = d.propose(context, 5, GREEDY, RNG)
    short = d.propose(context, 5, GREEDY, RNG, keep=two)
    assert len(full.tokens) == 5 and short.tokens == full.tokens[:2]
    assert short.model_calls < full.model_calls
    assert all(0 < c <= 1 for _, c in asked)
    assert d.propose(context, 5, GREEDY, RNG, keep=lambda i, c: False).tokens == []


def test_adaptive_gamma_keeps_greedy_output(models) -> None:
    target = models["target"]
    drafter = CrossVocabDrafter(target, models["draft_permuted"])
    for prompt in PROMPTS[:2]:
        plain = generate(target, prompt, max_tokens=32, gamma=0)
        spec = generate(target, prompt, drafter=drafter, max_tokens=32, gamma="auto")
        assert spec.tokens == plain.tokens


# ----------------------------------------------------------------------------- exactness


@pytest.mark.parametrize("tli", [False, True], ids=["text", "tli"])
@pytest.mark.parametrize("draft", ["draft_permuted", "draft_splitvocab", "draft_badvocab"])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_greedy_output_equals_plain(models, draft: str, gamma: int, tli: bool) -> None:
    target = models["target"]
    drafter = CrossVocabDrafter(target, models[draft], tli=tli)
    for prompt in PROMPTS:
        plain = generate(target, prompt, max_tokens=40, gamma=0)
        spec = generate(target, prompt, drafter=drafter, max_tokens=40, gamma=gamma)
        assert spec.tokens == plain.tokens
        assert spec.text == plain.text
        assert spec.stats.drafted > 0
        assert spec.stats.draft_calls > 0


def test_permuted_vocabulary_drafts_well(models) -> None:
    """The same model under other token ids. Through text, re-tokenization loses what
    the (random) target spells unusually; token for token, nothing is lost."""
    target = models["target"]
    rates = {}
    for name in ("draft_permuted", "draft_splitvocab"):
        for tli, sp in ((False, GREEDY), (True, GREEDY), (True, SamplingParams(temperature=1))):
            drafter = CrossVocabDrafter(target, models[name], tli=tli)
            accepted = drafted = 0
            for prompt in PROMPTS:
                done = generate(
                    target, prompt, drafter=drafter, max_tokens=48, gamma=2, sampling=sp, seed=0
                )
                accepted += done.stats.accepted
                drafted += done.stats.drafted
            rates[name, tli, sp.greedy] = accepted / drafted
    assert rates["draft_permuted", False, True] > 0.5, rates
    assert rates["draft_permuted", True, True] == 1.0, rates
    assert rates["draft_permuted", True, False] > 0.95, rates
    for key in ((False, True), (True, True), (True, False)):
        assert rates[("draft_permuted", *key)] > rates[("draft_splitvocab", *key)] + 0.2, rates


CONFIGS = [
    SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.02),
]
RUNS = 2000


@pytest.mark.parametrize(
    ("draft", "tli"),
    [("draft_permuted", False), ("draft_splitvocab", False), ("draft_splitvocab", True)],
    ids=["permuted-text", "split-text", "split-tli"],
)
@pytest.mark.parametrize("sp", CONFIGS, ids=["topk8", "topp-minp"])
def test_sampled_tokens_follow_the_target(
    synthetic_models, models, draft: str, tli: bool, sp: SamplingParams
) -> None:
    """First and second sampled tokens against the target's exact distributions
    (chi-square at significance 2.5e-5 per test): point masses through text, and
    token-level intersection with its restricted q."""
    target = models["target"]
    prompt = target.tokenize("Once upon a time", parse_special=True)
    p1, p2 = _exact_first_two(synthetic_models["target"], prompt, sp, target.n_vocab)
    drafter = CrossVocabDrafter(target, models[draft], tli=tli)
    firsts, seconds, acceptance = _sample_first_two(target, prompt, drafter, sp, RUNS)
    # both the accept and the resample branches ran (the split vocabulary mostly resamples)
    low = 0.2 if draft == "draft_permuted" else 0.01
    assert low < acceptance < 0.95
    assert _pvalue(firsts, p1) > ALPHA
    assert _pvalue(seconds, p2) > ALPHA


@pytest.mark.parametrize("tli", [False, True], ids=["text", "tli"])
def test_sampled_draft_differs_from_target(synthetic_models, models, tli: bool) -> None:
    """The chi-square test above proves something: the draft's own first token differs."""
    sp = CONFIGS[0]
    target, draft = models["target"], models["draft_splitvocab"]
    prompt = target.tokenize("Once upon a time", parse_special=True)
    p1, _ = _exact_first_two(synthetic_models["target"], prompt, sp, target.n_vocab)
    d = CrossVocabDrafter(target, draft, tli=tli)
    counts = np.zeros(target.n_vocab)
    for seed in range(300):
        tokens = d.propose(prompt, 1, sp, np.random.default_rng(seed)).tokens
        if tokens:
            counts[tokens[0]] += 1
    q1 = counts / counts.sum()
    assert 0.5 * np.abs(p1 - q1).sum() > 0.2


# ----------------------------------------------------------------------------- composite


def test_composite_uses_the_ngram_first(models) -> None:
    target = models["target"]
    prompt = "the cat sat on the mat and the dog sat on the mat and the cat"
    permuted = CrossVocabDrafter(target, models["draft_permuted"])
    composite = CompositeDrafter(NgramDrafter(), permuted)
    assert composite.name == "ngram+draft_permuted.gguf (cross-vocab)"
    assert composite.model is models["draft_permuted"]
    alone = CrossVocabDrafter(target, models["draft_permuted"])
    plain = generate(target, prompt, max_tokens=60, gamma=0)
    for gamma in (1, 4):
        both = generate(target, prompt, drafter=composite, max_tokens=60, gamma=gamma)
        model_only = generate(target, prompt, drafter=alone, max_tokens=60, gamma=gamma)
        assert both.tokens == plain.tokens == model_only.tokens
        assert both.stats.draft_calls < model_only.stats.draft_calls
    # nothing to look up in a fresh context: the fallback proposes
    context = target.tokenize("Hello world", add_special=True)
    assert NgramDrafter().propose(context, 3, GREEDY, RNG).tokens == []
    assert composite.propose(context, 3, GREEDY, RNG).tokens


def test_composite_with_a_same_vocab_model(synthetic_models) -> None:
    with (
        LlamaModel(synthetic_models["target"], n_ctx=256, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_noisy"], n_ctx=256, n_threads=1) as draft,
    ):
        composite = CompositeDrafter(NgramDrafter(), ModelDrafter(draft))
        plain = generate(target, "Hello world", max_tokens=32, gamma=0)
        spec = generate(target, "Hello world", drafter=composite, max_tokens=32, gamma=3)
        assert spec.tokens == plain.tokens and spec.stats.accepted > 0


# ----------------------------------------------------------------------------- loading


def test_load_pair_picks_the_drafter(synthetic_models) -> None:
    t = str(synthetic_models["target"])
    target, drafter = load_pair(t, str(synthetic_models["draft_permuted"]), n_ctx=256)
    assert isinstance(drafter, CrossVocabDrafter)
    assert drafter.name == "draft_permuted.gguf (cross-vocab)"
    target.close()
    drafter.model.close()
    target, drafter = load_pair(t, f"NGRAM+{synthetic_models['draft_noisy']}", n_ctx=256)
    assert isinstance(drafter, CompositeDrafter)
    assert isinstance(drafter.first, NgramDrafter) and isinstance(drafter.fallback, ModelDrafter)
    target.close()
    drafter.model.close()
    target, drafter = load_pair(t, f"ngram+{synthetic_models['draft_badvocab']}", n_ctx=256)
    assert isinstance(drafter.fallback, CrossVocabDrafter)
    assert drafter.name == "ngram+draft_badvocab.gguf (cross-vocab)"
    target.close()
    drafter.model.close()


def test_missing_draft_is_refused_before_loading_the_target(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="model file not found"):
        load_pair(str(tmp_path / "no-target.gguf"), str(tmp_path / "no-draft.gguf"))
    with pytest.raises(ModelLoadError, match="model file not found: .*no-draft"):
        load_pair(str(tmp_path / "no-target.gguf"), f"ngram+{tmp_path / 'no-draft.gguf'}")


def test_cli_cross_vocab_and_composite(synthetic_models) -> None:
    common = ["generate", "--target", str(synthetic_models["target"]), "--prompt", "Hello world"]
    common += ["--max-tokens", "24", "--json", "--threads", "1", "--gamma", "3"]
    plain = json.loads(run_cli(*common, "--plain").stdout)
    for draft in ("draft_permuted", "draft_badvocab"):
        for spec in (str(synthetic_models[draft]), f"ngram+{synthetic_models[draft]}"):
            r = run_cli(*common, "--draft", spec)
            assert r.returncode == 0, r.stderr
            out = json.loads(r.stdout)
            assert out["tokens"] == plain["tokens"]
            assert out["draft"].endswith(f"{draft}.gguf (cross-vocab)")
            assert out["draft"].startswith("ngram+") == spec.startswith("ngram+")
            assert out["stats"]["drafted"] > 0


# ----------------------------------------------------------------------------- real models

REAL_PROMPTS = [
    "The three most useful things to know about the sea are",
    "def fibonacci(n):\n",
    "<start_of_turn>user\nWrite a haiku about the sea.<end_of_turn>\n<start_of_turn>model\n",
]


@pytest.mark.real_model
def test_smollm2_drafts_for_gemma(real_model_paths) -> None:
    """SmolLM2 135M (BPE, 49k tokens) drafting for Gemma 3 270M (SentencePiece, 262k)."""
    with (
        LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=1024, n_threads=1) as gemma,
        LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=1024, n_threads=1) as smol,
    ):
        assert incompatibility(gemma, smol) is not None
        rates = {}
        plain = {p: generate(gemma, p, max_tokens=32, gamma=0) for p in REAL_PROMPTS}
        for tli in (False, True):
            drafter = CrossVocabDrafter(gemma, smol, tli=tli)
            accepted = drafted = 0
            for prompt in REAL_PROMPTS:
                spec = generate(gemma, prompt, drafter=drafter, max_tokens=32, gamma=4)
                assert spec.tokens == plain[prompt].tokens
                assert spec.text == plain[prompt].text
                accepted += spec.stats.accepted
                drafted += spec.stats.drafted
            rates["tli" if tli else "text"] = accepted / drafted
        # sampling: token-level intersection by default
        drafter = CrossVocabDrafter(gemma, smol)
        sp = SamplingParams(temperature=0.8)
        spec = generate(
            gemma, REAL_PROMPTS[0], drafter=drafter, max_tokens=32, gamma=4, sampling=sp, seed=1
        )
        assert len(spec.tokens) == 32 or spec.stop_reason.value == "eog"
        rates["tli, T=0.8"] = spec.stats.accepted / spec.stats.drafted
        print(f"SmolLM2 -> Gemma acceptance: {rates}")
        # the two models agree on plain English text often
        assert rates["text"] > 0.2 and rates["tli"] > 0.2 and rates["tli, T=0.8"] > 0.1
