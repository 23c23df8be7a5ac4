"""Prompts on llama.cpp's tiled matmul, every other decode on the one-row kernel
(scripts/patches/ggml-cpu-tiled-mode.patch; docs/architecture.md, "Prompt kernels").

Each kernel gives a row the same logits whatever the batch, so what must hold is that
a position is computed again on the kernel that first computed it (a rebuild after a
rollback the ring cannot serve, a checkpoint restore) and that plain and speculative
decoding compute every position on the same kernel (the prompt's prefill, then verify
rows; a next turn's prefix reuse). Without the patch every row takes the one-row
kernel: the same assertions hold there."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.backend.rows import PROMPT_MIN_ROWS, prompt_rows
from edgespec.drafting.ngram import NgramDrafter
from edgespec.policy import adaptive
from edgespec.speculation.loop import generate

N_CTX = 3072
WORDS = [
    "river", "stone", "light", "quiet", "metal", "garden",
    "paper", "window", "forest", "cloud", "north", "table",
]  # fmt: skip


def test_the_rule_puts_a_prompts_rows_on_the_tiled_kernel_and_no_verify_row() -> None:
    assert prompt_rows(700, "none") == 700
    assert prompt_rows(3, "none") == 3
    assert prompt_rows(700, "last") == 699
    assert prompt_rows(PROMPT_MIN_ROWS, "last") == 0  # a drafter's few tokens: one decode
    assert prompt_rows(48, "all") == 0
    assert prompt_rows(48, [0, 5, 47]) == 0
    assert prompt_rows(48, [47]) == 0  # rows listed: a verify batch, never a prompt
    assert (prompt_rows(9, "all", tiled=True), prompt_rows(900, "none", tiled=False)) == (9, 0)


def _text(seed: int, n_words: int) -> str:
    """Word salad with a copied third: n-gram lookup proposes, and is often wrong."""
    rng = random.Random(seed)
    base = " ".join(rng.choice(WORDS) for _ in range(n_words))
    return base + " " + base[: len(base) // 3]


def _tokens(model: LlamaModel, seed: int, n: int) -> list[int]:
    return model.tokenize(_text(seed, n))[:n]


@pytest.fixture(scope="module")
def gemma(real_model_paths):
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=N_CTX, n_threads=2) as model:
        yield model


@pytest.fixture(scope="module")
def twin(real_model_paths):
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=N_CTX, n_threads=2) as model:
        yield model


@pytest.mark.real_model
def test_tiled_rows_are_the_same_whatever_the_batch(gemma) -> None:
    # the property the rebuild relies on (on every CPU: the patch forces the tiled
    # kernel at every batch size, so a row never changes kernel with the batch)
    tokens = _tokens(gemma, 1, 340)
    gemma.reset()
    gemma.decode(tokens[:40], logits="none")
    whole = gemma.decode(tokens[40:340], logits="all", tiled=True).copy()
    for k in (1, 7, 17, 64):
        gemma.truncate(40)
        parts = [
            gemma.decode(tokens[s : min(340, s + k)], logits="all", tiled=True).copy()
            for s in range(40, 40 + 96, k)
        ]
        got = np.concatenate(parts)
        want = whole[: len(got)]
        assert np.array_equal(got, want), (k, float(np.abs(got - want).max()))


@pytest.mark.real_model
def test_the_kernel_of_each_position_is_recorded(gemma) -> None:
    tokens = _tokens(gemma, 2, 200)
    gemma.reset()
    gemma.decode(tokens[:100], logits="none")  # a prompt
    gemma.decode(tokens[100:110], logits="all")  # a verify batch
    gemma.decode(tokens[110:200], logits="last")  # a prompt wanting its last row
    on = 1 if gemma.tiled_prompts else 0
    assert list(gemma.tiled_at) == [on] * 100 + [0] * 10 + [on] * 89 + [0]
    gemma.truncate(105)
    assert len(gemma.tiled_at) == len(gemma.tokens) == 105
    gemma.reset()
    assert not gemma.tiled_at


@pytest.mark.real_model
@pytest.mark.parametrize("checkpoint", [True, False])
def test_a_rebuild_decodes_each_position_on_its_own_kernel(gemma, twin, checkpoint) -> None:
    # a prompt (tiled), 400 positions of verify rows (one-row kernel), a prompt again;
    # then back to 700: the ring no longer holds its window, so the cache is rebuilt
    # (from the prompt's checkpoint, or from 0), both kernels in their places
    tokens = _tokens(gemma, 3, 1401)

    def history(model: LlamaModel, upto: int) -> None:
        model.reset()
        model.decode(tokens[: min(upto, 600)], logits="none")
        for s in range(600, min(upto, 1000), 40):
            model.decode(tokens[s : min(s + 40, upto)], logits="all")
        if upto > 1000:
            model.decode(tokens[1000:upto], logits="none")

    history(gemma, 1400)
    if not checkpoint and gemma.checkpoints is not None:
        gemma.checkpoints.clear()
    before = gemma.redecodes
    gemma.truncate(700)
    assert gemma.redecodes - before == (0 if checkpoint or gemma.swa_cache != "ring" else 1)
    got = gemma.decode(tokens[700:701], logits="all")[-1].copy()
    history(twin, 700)  # the same decodes, never rolled back
    assert bytes(gemma.tiled_at[:700]) == bytes(twin.tiled_at)
    want = twin.decode(tokens[700:701], logits="all")[-1]
    assert np.array_equal(got, want), float(np.abs(got - want).max())


@pytest.mark.real_model
@pytest.mark.parametrize("stop", [[], ["stone river"]])
def test_speculative_equals_plain_over_turns_with_prefix_reuse(gemma, twin, stop, monkeypatch):
    # a 1,300-token prompt (past the batch of 512 and the window), n-gram drafts with
    # real rejections, then a next turn on each warm cache: plain and speculative leave
    # the same cache (tokens and kernels), so the next turn is the same too
    monkeypatch.setattr(adaptive, "LOSS_SHARE", math.inf)  # draft even where it loses
    first = _text(4, 950)
    gemma.reset()
    twin.reset()
    for turn in range(2):
        plain = generate(twin, first, max_tokens=40, gamma=0, stop=stop)
        spec = generate(gemma, first, drafter=NgramDrafter(), max_tokens=40, gamma=6, stop=stop)
        assert spec.tokens == plain.tokens, turn
        assert (gemma.tokens, bytes(gemma.tiled_at)) == (twin.tokens, bytes(twin.tiled_at))
        assert spec.stats.drafted > spec.stats.accepted  # drafts, rejections (rollbacks)
        if turn == 1:
            assert spec.stats.prompt_cached > 1000  # the turn paid for its new tokens only
        first = first + plain.text + " and then the river stone light quiet"
