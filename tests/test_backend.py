"""LlamaModel: logits rows, long prompts in chunks, rollback and its fallback."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import backend
from edgespec.backend import LlamaModel
from edgespec.errors import BackendError, ContextFullError


@pytest.fixture()
def target(synthetic_models):
    with LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1, n_batch=16) as m:
        yield m


def one_by_one(m: LlamaModel, tokens: list[int]) -> np.ndarray:
    m.reset()
    return np.stack([m.decode([t], logits="last")[0].copy() for t in tokens])


def test_selected_rows_match_single_token_decoding(target) -> None:
    tokens = target.tokenize("the cat sat on the mat and the dog")[:12]
    ref = one_by_one(target, tokens)
    target.reset()
    rows = target.decode(tokens, logits=[1, 4, len(tokens) - 1]).copy()
    np.testing.assert_allclose(rows, ref[[1, 4, len(tokens) - 1]], rtol=1e-4, atol=1e-4)
    assert target.tokens == tokens


def test_long_prompt_is_decoded_in_batches(target) -> None:
    tokens = target.tokenize("one two three four five six seven eight nine ten " * 4)
    assert len(tokens) > 2 * target.n_batch
    last = target.decode(tokens, logits="last")[0].copy()
    np.testing.assert_allclose(last, one_by_one(target, tokens)[-1], rtol=1e-4, atol=1e-4)
    with pytest.raises(BackendError, match="outside the last batch"):
        target.decode(tokens[:20], logits="all")


def test_a_batch_larger_than_a_small_context_is_chunked_not_an_abort(synthetic_models) -> None:
    # llama.cpp pads n_ctx=128 to 256 but caps n_batch at 128, and aborts on a larger
    # batch (GGML_ASSERT): a 200-token prompt once killed the server this way
    with LlamaModel(synthetic_models["target"], n_ctx=128, n_threads=1) as m:
        assert m.n_batch <= 128 < m.n_ctx
        tokens = m.tokenize("one two three four five six seven eight nine ten " * 12)[:200]
        assert len(tokens) == 200
        m.decode(tokens, logits="last")
        assert m.tokens == tokens


@pytest.mark.parametrize("threads", [0, -1, -4])
def test_threads_of_zero_or_less_mean_every_core_as_in_llama_cpp(synthetic_models, threads) -> None:
    # llama.cpp's C API takes a count of -1 as it is; its command line means "every core"
    with LlamaModel(synthetic_models["target"], n_ctx=128, n_threads=threads) as m:
        assert m.n_threads == backend.default_threads() >= 1


def test_truncate_falls_back_to_redecoding_when_removal_is_refused(target, monkeypatch) -> None:
    tokens = target.tokenize("the cat sat on the mat and the dog")
    target.decode(tokens, logits="none")
    monkeypatch.setattr(backend.ll, "llama_memory_seq_rm", lambda *a: False)
    target.truncate(4)
    assert target.tokens == tokens[:4]
    assert target.redecodes == 1
    monkeypatch.undo()
    got = target.decode(tokens[4:], logits="last")[0].copy()
    np.testing.assert_allclose(got, one_by_one(target, tokens)[-1], rtol=1e-4, atol=1e-4)


def test_reuse_prefix_keeps_common_part_and_one_token_to_decode(target) -> None:
    a = target.tokenize("the cat sat on the mat")
    target.decode(a, logits="none")
    assert target.reuse_prefix(a) == len(a) - 1
    b = a[:3] + target.tokenize(" dog", add_special=False)
    assert target.reuse_prefix(b) == 3
    assert target.tokens == a[:3]


def test_context_overflow_is_an_error_not_a_crash(target) -> None:
    with pytest.raises(ContextFullError):
        target.decode([5] * (target.n_ctx + 1), logits="none")
    assert target.tokens == []


@pytest.mark.real_model
@pytest.mark.parametrize("name", ["gemma-3-270m", "smollm2-135m-instruct"])
def test_fast_kernels_decode_a_batch(real_model_paths, name: str) -> None:
    """EDGESPEC_FAST_KERNELS=1 (llama.cpp's own kernels) decodes a 16-token batch: on a
    CPU with AMX, llama.cpp's AMX repacking crashed it on the first batch of 2+ tokens."""
    import os
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from edgespec.backend import LlamaModel\n"
        "with LlamaModel(sys.argv[1], n_ctx=256, n_threads=1) as m:\n"
        "    t = m.tokenize('hello world ' * 10)\n"
        "    rows = m.decode(t[:16], logits='all')\n"
        "    print(len(rows))\n"
    )
    env = {**os.environ, "EDGESPEC_FAST_KERNELS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(real_model_paths[name])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["16"]
