"""The speculative loop on real llama.cpp contexts over tiny synthetic GGUF models."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import ModelDrafter
from edgespec.drafting.compat import check_compatible
from edgespec.drafting.ngram import NgramDrafter
from edgespec.errors import ContextFullError, IncompatibleModelsError, InvalidParameterError
from edgespec.events import DoneEvent, RoundEvent, StopReason, TokenEvent, TokenKind
from edgespec.sampling import SamplingParams
from edgespec.speculation.loop import generate, stream_generate

PROMPTS = [
    "Hello world",
    "the cat sat on the mat and",
    "Once upon a time, in a land far away,",
    "1 2 3 4 5",
    "café über naïve",
]
DRAFTS = ["draft_same", "draft_noisy", "draft_unrelated"]


@pytest.fixture(scope="module")
def models(synthetic_models: dict[str, Path]):
    loaded = {
        name: LlamaModel(path, n_ctx=512, n_threads=1) for name, path in synthetic_models.items()
    }
    yield loaded
    for m in loaded.values():
        m.close()


@pytest.fixture(scope="module")
def plain_outputs(models) -> dict[str, tuple[int, ...]]:
    return {p: generate(models["target"], p, max_tokens=48, gamma=0).tokens for p in PROMPTS}


@pytest.mark.parametrize("draft", DRAFTS)
@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_greedy_speculative_equals_plain(models, plain_outputs, draft: str, gamma: int) -> None:
    drafter = ModelDrafter(models[draft])
    for prompt in PROMPTS:
        done = generate(models["target"], prompt, drafter=drafter, max_tokens=48, gamma=gamma)
        assert done.tokens == plain_outputs[prompt], (draft, gamma, prompt)
        assert done.stats.generated == len(done.tokens)


def test_acceptance_reflects_draft_quality(models) -> None:
    rates = {}
    for draft in DRAFTS:
        total = [0, 0]
        for prompt in PROMPTS:
            s = generate(
                models["target"],
                prompt,
                drafter=ModelDrafter(models[draft]),
                max_tokens=48,
                gamma=4,
            ).stats
            total[0] += s.accepted
            total[1] += s.drafted
        rates[draft] = total[0] / total[1]
    assert rates["draft_same"] == 1.0
    assert rates["draft_same"] > rates["draft_noisy"] > rates["draft_unrelated"]
    assert rates["draft_unrelated"] < 0.5


def test_events_describe_every_round(models) -> None:
    events = list(
        stream_generate(
            models["target"],
            "the cat sat on the mat and",
            drafter=ModelDrafter(models["draft_noisy"]),
            max_tokens=40,
            gamma=4,
        )
    )
    done = events[-1]
    assert isinstance(done, DoneEvent)
    kept = [e for e in events if isinstance(e, TokenEvent) and e.kind is not TokenKind.REJECTED]
    rejected = [e for e in events if isinstance(e, TokenEvent) and e.kind is TokenKind.REJECTED]
    rounds = [e for e in events if isinstance(e, RoundEvent)]
    assert tuple(e.token for e in kept) == done.tokens
    assert "".join(e.text for e in kept) == done.text
    assert len(rounds) == done.stats.rounds == done.stats.target_calls
    assert sum(r.accepted for r in rounds) == done.stats.accepted
    # one draft forward pass per drafted token: the first also catches the cache up
    assert done.stats.draft_calls == done.stats.drafted
    assert len(rejected) == sum(1 for r in rounds if r.accepted < r.drafted)
    # within a round: accepted tokens, then (rejected, correction) or a bonus token
    for r in rounds:
        kinds = [e.kind for e in events if isinstance(e, TokenEvent) and e.round == r.round]
        assert kinds[: r.accepted] == [TokenKind.ACCEPTED] * r.accepted
        tail = kinds[r.accepted :]
        assert tail in (
            [TokenKind.REJECTED, TokenKind.CORRECTION],
            [TokenKind.BONUS],
            [TokenKind.PLAIN],
            [],  # the round's last token was cut by max_tokens / a stop
        )
    assert done.stats.mean_accepted_per_call == pytest.approx(
        done.stats.generated / done.stats.target_calls
    )


def _fresh_logits(path: Path, tokens: list[int]) -> np.ndarray:
    with LlamaModel(path, n_ctx=512, n_threads=1) as fresh:
        return fresh.decode(tokens, logits="last")[0].copy()


def test_kv_rollback_holds_exactly_the_accepted_prefix(models, synthetic_models) -> None:
    target = models["target"]
    done = generate(
        target,
        "Once upon a time, in a land far away,",
        drafter=ModelDrafter(models["draft_unrelated"]),
        max_tokens=32,
        gamma=6,
    )
    assert done.stats.accepted < done.stats.drafted  # rejections happened
    prompt = target.tokenize("Once upon a time, in a land far away,", parse_special=True)
    committed = prompt + list(done.tokens)
    assert target.tokens == committed[:-1]
    nxt = target.decode([committed[-1]], logits="last")[0].copy()
    want = _fresh_logits(synthetic_models["target"], committed)
    np.testing.assert_allclose(nxt, want, rtol=1e-4, atol=1e-4)
    target.truncate(3)
    assert target.tokens == committed[:3]
    got = target.decode(committed[3:], logits="last")[0].copy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_prefix_is_reused_across_calls(models) -> None:
    target = models["target"]
    first = generate(target, "the cat sat on the mat and", max_tokens=8, gamma=0)
    follow = target.tokenize("the cat sat on the mat and", parse_special=True) + list(first.tokens)
    second = generate(target, follow, max_tokens=8, gamma=0)
    assert second.stats.prompt_cached == len(follow) - 1
    cold = generate(models["draft_same"], follow, max_tokens=8, gamma=0)
    assert cold.tokens == second.tokens


def test_max_tokens_and_stop_strings(models) -> None:
    target = models["target"]
    for gamma in (0, 3):
        drafter = ModelDrafter(models["draft_noisy"])
        for n in (0, 1, 5, 17):
            done = generate(target, "Hello world", drafter=drafter, max_tokens=n, gamma=gamma)
            assert len(done.tokens) == n
            assert done.stop_reason is StopReason.MAX_TOKENS
    full = generate(target, "Hello world", max_tokens=40, gamma=0)
    stop = full.text[10:13]
    done = generate(
        target,
        "Hello world",
        drafter=ModelDrafter(models["draft_noisy"]),
        max_tokens=40,
        gamma=4,
        stop=[stop],
    )
    assert done.stop_reason is StopReason.STOP_STRING
    assert done.text == full.text[: full.text.index(stop)]


def test_a_stream_never_carries_part_of_a_stop_string(models) -> None:
    # the server streams TokenEvent texts; a stop string's first tokens once went out
    # before its last one arrived, though the final text drops the whole stop string
    target = models["target"]
    full = generate(target, "Hello world", max_tokens=40, gamma=0).text
    cut = full.index(full[10:30])
    for stop, final in (
        (full[10:30], full[:cut]),  # found: the stream ends where the stop string begins
        (full[-3:] + "\x00", full),  # never completed: its possible start comes at the end
    ):
        streamed, done = "", None
        for ev in stream_generate(
            target, "Hello world", drafter=ModelDrafter(models["draft_noisy"]),
            max_tokens=40, gamma=4, stop=[stop],
        ):  # fmt: skip
            if isinstance(ev, TokenEvent) and ev.kind is not TokenKind.REJECTED:
                streamed += ev.text
            elif isinstance(ev, DoneEvent):
                done = ev
        assert done is not None and done.text == final
        assert streamed == (final if final != full else full[:-3])


def test_a_prompt_longer_than_the_drafts_context_decodes_plainly(synthetic_models) -> None:
    # a draft's context is capped at its training length and can be the shorter one
    with (
        LlamaModel(synthetic_models["target"], n_ctx=1024, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_same"], n_ctx=256, n_threads=1) as draft,
    ):
        prompt = target.tokenize("the cat sat on the mat and " * 60, add_special=True)
        assert draft.n_ctx < len(prompt) < target.n_ctx
        plain = generate(target, prompt, max_tokens=8, gamma=0)
        done = generate(target, prompt, drafter=ModelDrafter(draft), max_tokens=8, gamma=4)
    assert done.tokens == plain.tokens and done.stats.drafted == 0


def test_context_full_is_a_stop_reason_not_a_crash(synthetic_models) -> None:
    with (
        LlamaModel(synthetic_models["target"], n_ctx=32, n_threads=1) as target,
        LlamaModel(synthetic_models["draft_noisy"], n_ctx=32, n_threads=1) as draft,
    ):
        done = generate(
            target, "Hello world", drafter=ModelDrafter(draft), max_tokens=5000, gamma=4
        )
        assert done.stop_reason is StopReason.CONTEXT_FULL
        assert len(target.tokenize("Hello world")) + len(done.tokens) == target.n_ctx
        with pytest.raises(ContextFullError):
            generate(target, "word " * target.n_ctx, max_tokens=4)


def test_bad_parameters(models) -> None:
    with pytest.raises(InvalidParameterError):
        generate(models["target"], "Hello", gamma=-1)
    with pytest.raises(InvalidParameterError):
        generate(models["target"], "Hello", max_tokens=-1)


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        ("draft_badvocab", r"token \d+ differs: target .▁the., draft .▁thx."),
        ("draft_bigvocab", "sizes differ"),
    ],
)
def test_incompatible_pairs_are_named(models, draft: str, message: str) -> None:
    check_compatible(models["target"], models["draft_noisy"])
    with pytest.raises(IncompatibleModelsError, match=message):
        check_compatible(models["target"], models[draft])


def test_multibyte_characters_split_across_tokens(models) -> None:
    target = models["target"]
    text = "日本語 ✓ 🙂 done"
    tokens = target.tokenize(text, add_special=False)
    assert len(tokens) > len(text)  # byte-fallback tokens: characters span several tokens
    from edgespec.detok import Detokenizer

    detok = Detokenizer(target.token_bytes)
    pieces = [detok.push(t) for t in tokens]
    assert "\ufffd" not in "".join(pieces)
    assert "".join(pieces).lstrip() == text
    assert any(p == "" for p in pieces)  # held back until the character was complete


def test_seed_makes_sampling_reproducible(models) -> None:
    sp = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    runs = [
        generate(
            models["target"],
            "Hello world",
            drafter=ModelDrafter(models["draft_noisy"]),
            max_tokens=24,
            gamma=3,
            sampling=sp,
            seed=7,
        ).tokens
        for _ in range(2)
    ]
    assert runs[0] == runs[1]


@pytest.mark.parametrize("gamma", [40, "auto"])
def test_drafts_longer_than_the_batch_are_cut_to_one_decode(
    synthetic_models, gamma, monkeypatch
) -> None:
    from edgespec.policy import adaptive

    # (auto: the curve measured between rounds whatever earlier tests' timings price its
    # batches at; this test is about the cut, not about the measuring budget)
    monkeypatch.setattr(adaptive, "GAP_SHARE", 1e6)
    # a 16-token context gets a 16-token batch: a verify must fit in one llama_decode
    with LlamaModel(synthetic_models["target"], n_ctx=16, n_threads=1) as m:
        assert m.n_batch == 16
        prompt = "one two three four " * 3
        plain = generate(m, prompt, max_tokens=120, gamma=0)
        spec = generate(m, prompt, drafter=NgramDrafter(), max_tokens=120, gamma=gamma)
        assert spec.tokens == plain.tokens
        assert spec.stats.drafted > 0


class _ScriptedTarget:
    """A greedy target whose i-th generated token is out[i], whatever it is shown."""

    n_ctx, n_batch = 256, 512

    def __init__(self, prompt: list[int], out: list[int]) -> None:
        self.prompt, self.out, self.tokens = prompt, out, []

    def decode(self, tokens, logits="last"):
        start = len(self.tokens)
        self.tokens.extend(tokens)
        rows = {"last": [len(tokens) - 1], "all": range(len(tokens)), "none": []}[logits]
        out = np.zeros((len(rows), 16), np.float32)
        for r, j in enumerate(rows):  # row j predicts the token after position start + j
            out[r, self.out[start + j + 1 - len(self.prompt)]] = 1.0
        return out

    def truncate(self, n: int) -> None:
        del self.tokens[n:]

    def reuse_prefix(self, tokens) -> int:
        self.truncate(0)
        return 0

    def is_eog(self, token: int) -> bool:
        return False

    def token_bytes(self, token: int, special: bool = False) -> bytes:
        return b"x"


def test_a_lookup_scored_in_plain_rounds_moves_on_when_the_model_stands_in(monkeypatch) -> None:
    # composite drafter: when the lookup had nothing, its model stood in and the earlier
    # proposal being scored a token a round stood still: a hit was then scored a miss
    from edgespec.drafting import CompositeDrafter, Draft
    from edgespec.policy.acceptance import AcceptanceEstimate
    from edgespec.policy.adaptive import AdaptiveGamma
    from edgespec.policy.costs import CostCurve

    class StandIn:  # a model drafter with nothing to propose (its model is not needed)
        model, name, is_lookup = None, "stand-in", False

        def prefill(self, context) -> None:
            pass

        def propose(self, context, n, sampling, rng, **kwargs) -> Draft:
            return Draft([], [])

    scored: list[tuple[int, bool]] = []
    observe = AcceptanceEstimate.observe_position

    def recording(self, i: int, hit: bool) -> None:
        scored.append((i, hit))
        observe(self, i, hit)

    monkeypatch.setattr(AcceptanceEstimate, "observe_position", recording)
    prompt = [10, 2, 3, 4, 5, 11, 2, 3, 4, 6, 12, 2, 3]
    out = [4, 6, 12, 2]  # the lookup proposes 4 6 12, then nothing (contested), then 12 2 3
    never_pays = CostCurve("t", "k", seconds=tuple(float(k) for k in range(1, 49)))
    policy = AdaptiveGamma(never_pays, draft_step_s=10.0)
    done = generate(
        _ScriptedTarget(prompt, out), prompt, max_tokens=4, gamma=policy,
        drafter=CompositeDrafter(NgramDrafter(), StandIn()),
    )  # fmt: skip
    assert list(done.tokens) == out and policy.chosen == [0, 0, 0, 0]
    assert (2, True) in scored and (3, True) in scored  # scored on as the text went on
    assert all(hit for _, hit in scored)
