"""Gemma 3's sliding-window layers past their 512-token window: speculation with real
rejections, rollbacks deeper than a batch, prefix reuse and parallel slots stay exact.

The local layers keep llama.cpp's window-sized ring of 1,024 cells (512 + a batch), with
edgespec's patch placing position p at cell p mod 1,024 (scripts/patches): a rollback
across the ring's end, or the window's, decodes into the cells plain decoding used."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import threading

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.backend.quantize import quantize_model
from edgespec.drafting import ModelDrafter
from edgespec.drafting.build import fork_drafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.policy import adaptive
from edgespec.speculation.loop import generate

pytestmark = pytest.mark.real_model

N_CTX = 2048
WORDS = (
    "river stone light quiet metal garden paper window forest cloud north table engine "
    "silver music bridge winter copper signal harbor"
)


def _prompt(n_words: int, seed: int) -> str:
    """Word salad with a copied third: n-gram lookup proposes, and is often wrong."""
    rng = random.Random(seed)
    base = " ".join(rng.choice(WORDS.split()) for _ in range(n_words))
    return base + " " + base[: len(base) // 3] + ". Then"


@pytest.fixture(scope="module")
def gemma(real_model_paths):
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=N_CTX, n_threads=2) as target:
        yield target


@pytest.fixture(scope="module")
def fresh(real_model_paths):
    """A second context, for what a cache that never rolled back gives."""
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=N_CTX, n_threads=2) as model:
        yield model


@pytest.fixture(scope="module")
def q4_draft(real_model_paths, tmp_path_factory):
    """Gemma requantized to Q4_0: the same vocabulary, other weights, real rejections."""
    dst = tmp_path_factory.mktemp("q4") / "gemma-q4_0.gguf"
    quantize_model(real_model_paths["gemma-3-270m"], dst, "Q4_0", n_threads=2)
    with LlamaModel(dst, n_ctx=N_CTX, n_threads=2) as draft:
        yield draft


@pytest.mark.parametrize("rows", [9, 70])
def test_k_rows_at_depth_are_bit_equal_to_one_token_decodes(gemma, rows) -> None:
    # past 512 cells an F16/F16 cache takes flash attention's split path for one row
    # (and its tiled path for 64+ rows): logits then differ by up to 1.8 (BF16 keys with
    # F16 values keep every row on one loop)
    tokens = gemma.tokenize(_prompt(700, seed=11))[: 600 + rows]
    gemma.reset()
    gemma.decode(tokens[:600], logits="none")
    single = np.stack([gemma.decode([t])[0].copy() for t in tokens[600:]])
    gemma.truncate(600)
    batch = gemma.decode(tokens[600:], logits="all").copy()
    assert np.array_equal(batch, single), float(np.abs(batch - single).max())


@pytest.mark.parametrize(
    ("n_words", "drafter", "gamma"),
    [
        (330, "ngram", 6),  # a 470-token prompt: the verify batches cross position 512
        (1000, "ngram", 6),  # 1,400 tokens: past the window and the 1,024 cells
        (1000, "model", 4),
        (-1000, "ngram", 6),  # a 1,000-token prompt: the verify batches cross cell 1,023
    ],
)
def test_greedy_speculation_past_the_window_equals_plain(
    gemma, q4_draft, n_words, drafter, gamma, monkeypatch
) -> None:
    monkeypatch.setattr(adaptive, "LOSS_SHARE", math.inf)  # draft even where it loses
    prompt = _prompt(abs(n_words), seed=n_words)
    if n_words < 0:
        prompt = gemma.tokenize(prompt)[:1000]
    gemma.reset()
    plain = generate(gemma, prompt, max_tokens=64, gamma=0)
    gemma.reset()
    d = NgramDrafter() if drafter == "ngram" else ModelDrafter(q4_draft)
    spec = generate(gemma, prompt, drafter=d, max_tokens=64, gamma=gamma)
    assert spec.tokens == plain.tokens
    assert spec.stats.drafted > spec.stats.accepted > 0  # rollbacks happened, and hits


def _next_logits(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    model.reuse_prefix(tokens)
    return model.decode(tokens[len(model.tokens) :], logits="last")[-1].copy()


@pytest.mark.parametrize(("keep", "rebuilt"), [(1300, 0), (900, 0), (500, 1)])
def test_a_rollback_deeper_than_the_last_batch_gives_the_logits_of_a_fresh_cache(
    gemma, fresh, keep, rebuilt
) -> None:
    # 1,400 tokens leave positions 376-1399 in the ring: 1300 and 900 keep their window
    # (the 512 positions before them); 500 lost part of its own and is decoded again
    tokens = gemma.tokenize(_prompt(1000, seed=7))[:1400]
    gemma.reset()
    gemma.decode(tokens, logits="none")
    before = gemma.redecodes
    got = _next_logits(gemma, tokens[: keep + 1])
    # (a llama.cpp without the ring patch keeps every position: nothing to rebuild)
    assert gemma.redecodes - before == (rebuilt if gemma.swa_cache == "ring" else 0)
    fresh.reset()
    np.testing.assert_array_equal(got, _next_logits(fresh, tokens[: keep + 1]))


@pytest.mark.parametrize("keep", [1021, 1023])
def test_a_rollback_across_the_ring_end_decodes_into_plain_decodings_cells(
    gemma, fresh, keep
) -> None:
    # A batch at positions 1020-1030 fills cells 1020-1023 and 0-6. Rolled back to keep,
    # llama.cpp's own search would put position keep in the lowest freed cell (0), and the
    # window would be summed in another order; the patch puts it in cell keep mod 1,024.
    tokens = gemma.tokenize(_prompt(1000, seed=5))[:1031]
    gemma.reset()
    gemma.decode(tokens[:1020], logits="none")
    gemma.decode(tokens[1020:], logits="none")
    before = gemma.redecodes
    gemma.truncate(keep)
    got = gemma.decode(tokens[keep : keep + 1], logits="last")[-1].copy()
    assert (gemma.n_swa, gemma.redecodes - before) == (512, 0)  # the ring, nothing rebuilt
    fresh.reset()
    fresh.decode(tokens[:keep], logits="none")
    want = fresh.decode(tokens[keep : keep + 1], logits="last")[-1]
    assert np.array_equal(got, want), float(np.abs(got - want).max())


RING_PROBE = """
import sys, numpy as np
from edgespec.backend import LlamaModel
path, keep = sys.argv[1], int(sys.argv[2])
with LlamaModel(path, n_ctx=2048, n_threads=2) as a, LlamaModel(path, n_ctx=2048) as b:
    tokens = a.tokenize(sys.argv[3])[:1400]  # 1,400 tokens in the ring of 1,024 cells
    a.decode(tokens, logits="none")
    a.truncate(keep)
    got = a.decode(tokens[keep : keep + 1], logits="last")[-1]
    b.decode(tokens[:keep], logits="none")  # (one row, as got: fast kernels vary by batch)
    want = b.decode(tokens[keep : keep + 1], logits="last")[-1]
    print(a.n_swa, a.redecodes, int(np.argmax(got) == np.argmax(want)),
          float(np.abs(got - want).max()))
"""


@pytest.mark.parametrize(("keep", "rebuilt"), [(1300, 0), (500, 1)])
def test_the_window_sized_ring_rebuilds_a_window_it_reused(real_model_paths, keep, rebuilt):
    # The last batch (positions 1024-1399) reused the cells of 0-375: 1300 keeps its
    # window (788-1299); 500 lost part of its own (0-499) and must be decoded again.
    env = {**os.environ, "EDGESPEC_FAST_KERNELS": "1"}
    path = str(real_model_paths["gemma-3-270m"])
    out = subprocess.run(  # the kernel mode is fixed at import: another process
        [sys.executable, "-c", RING_PROBE, path, str(keep), _prompt(1000, seed=7)],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    ).stdout.split()  # fmt: skip
    n_swa, redecodes, same_argmax, max_diff = int(out[0]), int(out[1]), out[2], float(out[3])
    assert (n_swa, redecodes, same_argmax) == (512, rebuilt, "1")
    assert max_diff < 0.05  # F16 cache: not bit-exact, but no missing window (> 1)


def test_prefix_reuse_after_a_long_reply_equals_plain_with_the_same_turns(gemma, fresh) -> None:
    # plain decoding through the same two turns: the reply's positions were verify rows
    # (the one-row kernel) in both, where an empty cache would decode them as a prompt
    # (the tiled kernel): docs/architecture.md, "Prompt kernels"
    first = _prompt(700, seed=3)
    gemma.reset()
    reply = generate(gemma, first, drafter=NgramDrafter(), max_tokens=48, gamma=4)
    second = first + reply.text + " And then the"
    cached = generate(gemma, second, drafter=NgramDrafter(), max_tokens=48, gamma=4)
    fresh.reset()
    assert generate(fresh, first, max_tokens=48, gamma=0).tokens == reply.tokens
    want = generate(fresh, second, max_tokens=48, gamma=0)
    assert cached.stats.prompt_cached == want.stats.prompt_cached > 0
    assert cached.tokens == want.tokens


def test_parallel_slots_past_the_window_equal_plain_alone(
    real_model_paths, fresh, monkeypatch
) -> None:
    monkeypatch.setattr(adaptive, "LOSS_SHARE", math.inf)
    path = real_model_paths["gemma-3-270m"]
    prompts = [_prompt(1000, seed=s) for s in (11, 12)]
    want = []
    for p in prompts:
        fresh.reset()
        want.append(generate(fresh, p, max_tokens=48, gamma=0).tokens)
    with LlamaModel(path, n_ctx=N_CTX, n_threads=2, n_seq=2) as shared:
        views = [shared.sequence(i) for i in range(2)]
        got: list = [None, None]

        def job(i: int) -> None:
            with views[i].working():
                drafter = fork_drafter(NgramDrafter(), views[i], i)
                got[i] = generate(views[i], prompts[i], drafter=drafter, max_tokens=48, gamma=6)

        threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert views[0].batcher.shared > 0  # their rows went in one batch
        for g, w in zip(got, want, strict=True):
            assert g.tokens == w
            assert g.stats.drafted > g.stats.accepted
