"""Window checkpoints (edgespec.backend.checkpoints): a rollback that Gemma 3's
window-sized ring cannot serve restores the newest checkpoint at or before it and
decodes on from there, with the logits of a fresh cache, bit for bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from edgespec.backend import SWA_RING, LlamaModel
from edgespec.backend.checkpoints import MAX_CHECKPOINTS
from edgespec.speculation.loop import generate

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.skipif(
        not SWA_RING,
        reason="this llama.cpp lacks edgespec's ring patch: a full-size window cache, "
        "no checkpoints (tests/test_stock_llama.py covers it)",
    ),
]

N_CTX = 3072
PROMPT = 1200  # the prefill that takes the checkpoint
REPLY = 700  # then decoded as a reply: the ring (1,024 cells) no longer holds PROMPT's window
WORDS = [
    "river", "stone", "light", "quiet", "metal", "garden",
    "paper", "window", "forest", "cloud", "north", "table",
]  # fmt: skip


def _tokens(model: LlamaModel, seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return model.tokenize(" ".join(rng.choice(WORDS) for _ in range(2 * n)))[:n]


@pytest.fixture(scope="module")
def gemma(real_model_paths):
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=N_CTX, n_threads=2) as model:
        yield model


@pytest.fixture(scope="module")
def fresh(real_model_paths):
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=N_CTX, n_threads=2) as model:
        yield model


def _after_prompt_and_reply(model, tokens: list[int]) -> None:
    model.reset()
    model.decode(tokens[:PROMPT], logits="none")  # a prompt's prefill: a checkpoint
    model.decode(tokens[PROMPT : PROMPT + REPLY], logits="last")  # not a prefill: none


def _fresh_next(fresh: LlamaModel, tokens: list[int]) -> np.ndarray:
    fresh.reset()
    fresh.decode(tokens[:-1], logits="none")
    return fresh.decode(tokens[-1:], logits="last")[-1].copy()


@pytest.mark.parametrize("past", [0, 40, 150])  # (the ring serves from 188 on)
def test_a_rollback_the_ring_cannot_serve_restores_the_checkpoint(gemma, fresh, past) -> None:
    tokens = _tokens(gemma, 1, PROMPT + REPLY)
    _after_prompt_and_reply(gemma, tokens)
    assert [len(c.tokens) for c in gemma.checkpoints.held] == [PROMPT]
    restores, redecodes = gemma.checkpoints.restores, gemma.redecodes
    keep = PROMPT + past
    gemma.truncate(keep)
    assert (gemma.checkpoints.restores - restores, gemma.redecodes - redecodes) == (1, 0)
    assert gemma.tokens == tokens[:keep]
    got = gemma.decode(tokens[keep : keep + 1], logits="last")[-1]
    want = _fresh_next(fresh, tokens[: keep + 1])
    assert np.array_equal(got, want), float(np.abs(got - want).max())


def test_a_rollback_before_every_checkpoint_decodes_from_the_start(gemma, fresh) -> None:
    tokens = _tokens(gemma, 2, PROMPT + REPLY)
    _after_prompt_and_reply(gemma, tokens)
    restores, redecodes = gemma.checkpoints.restores, gemma.redecodes
    gemma.truncate(PROMPT - 100)
    assert (gemma.checkpoints.restores - restores, gemma.redecodes - redecodes) == (0, 1)
    got = gemma.decode(tokens[PROMPT - 100 : PROMPT - 99], logits="last")[-1]
    assert np.array_equal(got, _fresh_next(fresh, tokens[: PROMPT - 99]))


def test_checkpoints_of_another_text_are_dropped_and_never_restored(gemma, fresh) -> None:
    a, b = _tokens(gemma, 3, PROMPT + REPLY), _tokens(gemma, 4, PROMPT + REPLY)
    _after_prompt_and_reply(gemma, a)
    gemma.truncate(600)  # before the checkpoint: decoded again (a checkpoint at 600)
    gemma.decode(b[600:PROMPT], logits="none")  # a prefill of other text from there
    mixed = a[:600] + b[600:PROMPT]
    assert [c.tokens for c in gemma.checkpoints.held] == [tuple(a[:600]), tuple(mixed)]
    gemma.decode(b[PROMPT : PROMPT + REPLY], logits="last")
    gemma.truncate(PROMPT + 10)
    assert gemma.tokens == (mixed + b[PROMPT:])[: PROMPT + 10]
    want = _fresh_next(fresh, (mixed + b[PROMPT:])[: PROMPT + 11])
    assert np.array_equal(gemma.decode([b[PROMPT + 10]], logits="last")[-1], want)


def test_a_sequence_keeps_its_newest_checkpoints(gemma) -> None:
    tokens = _tokens(gemma, 5, 40 * (MAX_CHECKPOINTS + 2))
    gemma.reset()
    for end in range(40, len(tokens) + 1, 40):
        gemma.decode(tokens[end - 40 : end], logits="none")
    assert [len(c.tokens) for c in gemma.checkpoints.held] == [
        40 * k for k in range(3, MAX_CHECKPOINTS + 3)
    ]
    gemma.reset()
    assert gemma.checkpoints.held == []


def test_a_reply_generated_again_after_a_long_one_restores_the_prompts_checkpoint(
    gemma, fresh
) -> None:
    tokens = _tokens(gemma, 6, PROMPT + REPLY)
    prompt = tokens[:PROMPT]
    gemma.reset()
    generate(gemma, prompt, max_tokens=1, gamma=0)  # its prefill: the checkpoint
    gemma.decode(tokens[PROMPT : PROMPT + REPLY], logits="last")  # as if a long reply
    restores, redecodes = gemma.checkpoints.restores, gemma.redecodes
    again = generate(gemma, prompt, max_tokens=24, gamma=0)
    assert again.stats.prompt_cached == PROMPT - 1
    assert (gemma.checkpoints.restores - restores, gemma.redecodes - redecodes) == (1, 0)
    fresh.reset()
    assert again.tokens == generate(fresh, prompt, max_tokens=24, gamma=0).tokens


def test_a_parallel_slot_restores_its_own_checkpoint(real_model_paths, fresh) -> None:
    path = real_model_paths["gemma-3-270m"]
    with LlamaModel(path, n_ctx=N_CTX, n_threads=2, n_seq=2) as shared:
        other, view = shared.sequence(0), shared.sequence(1)
        other.decode(_tokens(shared, 7, PROMPT), logits="none")  # slot 0's own text
        tokens = _tokens(shared, 8, PROMPT + REPLY)
        with view.working():
            _after_prompt_and_reply(view, tokens)
            view.truncate(PROMPT + 20)
            got = view.decode(tokens[PROMPT + 20 : PROMPT + 21], logits="last")[-1]
        assert (view.checkpoints.restores, view.redecodes) == (1, 0)
        assert [len(c.tokens) for c in other.checkpoints.held] == [PROMPT]
    assert np.array_equal(got, _fresh_next(fresh, tokens[: PROMPT + 21]))
