"""Checks on the synthetic GGUF test models written by tests/make_test_models.py."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

import pytest
from gguf import GGUFReader

SCRIPT = pathlib.Path(__file__).resolve().parent / "make_test_models.py"
NAMES = [
    "target",
    "draft_same",
    "draft_noisy",
    "draft_unrelated",
    "draft_badvocab",
    "draft_bigvocab",
]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_test_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


mtm = _load_script()


@pytest.fixture
def models(synthetic_models: dict[str, pathlib.Path]) -> dict[str, pathlib.Path]:
    """The session's synthetic models (built by conftest.py with the same script)."""
    return synthetic_models


def _field(reader: GGUFReader, key: str) -> object:
    field = reader.get_field(key)
    assert field is not None, key
    return field.contents()


def _tokens(path: pathlib.Path) -> list[str]:
    return list(_field(GGUFReader(path), "tokenizer.ggml.tokens"))


def test_all_models_written(models: dict[str, pathlib.Path]) -> None:
    # the models every test relies on; later additions (other vocabularies, FIM) too
    assert set(NAMES) <= set(models)
    for name, path in models.items():
        assert path.name == f"{name}.gguf"
        assert path.stat().st_size > 0


@pytest.mark.parametrize("name", NAMES)
def test_metadata(models: dict[str, pathlib.Path], name: str) -> None:
    reader = GGUFReader(models[name])
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "llama.block_count") == mtm.N_LAYER
    assert _field(reader, "llama.embedding_length") == mtm.N_EMBD
    assert _field(reader, "llama.context_length") == mtm.CONTEXT_LENGTH
    assert _field(reader, "llama.attention.head_count") == mtm.N_HEAD
    assert _field(reader, "llama.attention.head_count_kv") == mtm.N_HEAD_KV
    assert _field(reader, "tokenizer.ggml.model") == "llama"
    assert _field(reader, "tokenizer.ggml.bos_token_id") == 1
    assert _field(reader, "tokenizer.ggml.eos_token_id") == 2
    assert _field(reader, "tokenizer.ggml.add_bos_token") is True
    assert _field(reader, "tokenizer.ggml.add_eos_token") is False

    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    assert len(tokens) == len(set(tokens))
    assert len(_field(reader, "tokenizer.ggml.scores")) == len(tokens)
    assert len(_field(reader, "tokenizer.ggml.token_type")) == len(tokens)
    assert _field(reader, "llama.vocab_size") == len(tokens)
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3 : 3 + 256] == [f"<0x{b:02X}>" for b in range(256)]

    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert [int(n) for n in embd.shape] == [mtm.N_EMBD, len(tokens)]


def test_vocab_is_small_and_has_multibyte_pieces(models: dict[str, pathlib.Path]) -> None:
    tokens = _tokens(models["target"])
    assert 300 <= len(tokens) <= 512
    for piece in ["\u2581the", "\u2581a", "ing", "é", "ü", "\u2581日本", "!"]:
        assert piece in tokens
    assert "語" not in tokens  # so it must come out as three byte tokens


def test_same_vocab_for_compatible_drafts(models: dict[str, pathlib.Path]) -> None:
    target = _tokens(models["target"])
    for name in ["draft_same", "draft_noisy", "draft_unrelated"]:
        assert _tokens(models[name]) == target


def test_badvocab_differs_in_exactly_one_token(models: dict[str, pathlib.Path]) -> None:
    target = _tokens(models["target"])
    bad = _tokens(models["draft_badvocab"])
    assert len(bad) == len(target)
    diff = [i for i, (a, b) in enumerate(zip(target, bad, strict=True)) if a != b]
    assert len(diff) == 1
    assert diff[0] >= 5
    assert (target[diff[0]], bad[diff[0]]) == (mtm.BADVOCAB_FROM, mtm.BADVOCAB_TO)


def test_bigvocab_extends_target_by_more_than_128(models: dict[str, pathlib.Path]) -> None:
    target = _tokens(models["target"])
    big = _tokens(models["draft_bigvocab"])
    assert len(big) - len(target) > 128
    assert big[: len(target)] == target


def test_draft_same_has_target_weights(models: dict[str, pathlib.Path]) -> None:
    target = {t.name: t.data.tobytes() for t in GGUFReader(models["target"]).tensors}
    same = {t.name: t.data.tobytes() for t in GGUFReader(models["draft_same"]).tensors}
    noisy = {t.name: t.data.tobytes() for t in GGUFReader(models["draft_noisy"]).tensors}
    assert same == target
    assert noisy.keys() == target.keys()
    assert noisy["output.weight"] != target["output.weight"]


def test_build_is_deterministic(tmp_path: pathlib.Path) -> None:
    first = mtm.build_test_models(tmp_path / "a")
    second = mtm.build_test_models(tmp_path / "b")
    assert first.keys() == second.keys()
    for name in first:
        assert first[name].read_bytes() == second[name].read_bytes(), name
