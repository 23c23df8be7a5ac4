"""The catalog data model (edgespec/catalog.py), the shipped models/catalog.toml, and
the GGUF metadata reader (edgespec/gguf_meta.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import gguf
import numpy as np
import pytest

from edgespec.errors import CatalogError, ModelLoadError
from edgespec.modelstore.catalog import HubSource, PypiSource, load_catalog, parse_catalog
from edgespec.modelstore.gguf_meta import GgufVocab, check_usable, missing_keys, read_metadata

MINIMAL = """
[models.a]
family = "f"
tokenizer = "t"
params = "1B"
quantization = "Q4_K_M"
file = "a.gguf"
sha256 = ""
context_length = 4096
chat_template = true
sources = [{ type = "hf", repo = "o/r", filename = "a.gguf" }]

[models.b]
family = "f"
tokenizer = "t"
params = "100M"
quantization = "Q8_0"
file = "b.gguf"
size = 10
sha256 = "%s"
context_length = 4096
chat_template = false
sources = [{ type = "pypi", parts = [{ requirement = "b==1", member = "b/b.gguf" }] }]

[pairs."a+b"]
target = "a"
draft = "b"
""" % ("ab" * 32)


# ----------------------------------------------------------------------------- shipped


def test_shipped_catalog_is_valid_and_complete() -> None:
    c = load_catalog()
    assert c.origin.endswith("catalog.toml")
    embedded = {n for n, m in c.models.items() if m.embedded}
    assert embedded == {"smollm2-135m-instruct", "gemma-3-270m"}
    assert c.models["gemma-3-270m"].chat_template is False
    assert c.models["smollm2-135m-instruct"].chat_template is True
    for m in c.models.values():
        assert m.sources and m.context_length > 0 and m.file.endswith(".gguf")
        assert m.sha256 == "" or re.fullmatch(r"[0-9a-f]{64}", m.sha256)
        for s in m.sources:
            if isinstance(s, HubSource):
                assert s.repo.count("/") == 1 and s.filename.endswith(".gguf")
    hub_only = [m for m in c.models.values() if not m.embedded]
    assert len(hub_only) >= 8  # real-world laptop pairs with their Hub sources
    for p in c.pairs.values():
        t, d = c.models[p.target], c.models[p.draft]
        assert t.tokenizer == d.tokenizer and d.param_count < t.param_count
    assert {"qwen2.5-coder-7b+0.5b", "llama-3.2-3b+1b", "gemma-3-4b+270m"} <= set(c.pairs)


def test_catalog_is_package_data() -> None:
    from importlib.resources import files

    assert "[models." in files("edgespec.models").joinpath("catalog.toml").read_text()


def test_env_catalog_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.toml"
    path.write_text(MINIMAL)
    monkeypatch.setenv("EDGESPEC_CATALOG", str(path))
    assert set(load_catalog().models) == {"a", "b"}


# ----------------------------------------------------------------------------- parsing


def test_minimal_catalog_parses() -> None:
    c = parse_catalog(MINIMAL)
    a, b = c.models["a"], c.models["b"]
    assert a.size is None and a.sha256 == "" and a.sources == (HubSource("o/r", "a.gguf", "main"),)
    assert b.sources == (PypiSource((("b==1", "b/b.gguf"),)),) and b.embedded
    assert c.drafts_for("a") == ["b"] and c.targets_for("b") == ["a"] and c.drafts_for("b") == []
    assert c.incompatibility("a", "b") is None
    assert a.param_count == 1e9 and b.param_count == 1e8


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[models.a]", "[models.a]\ncolour = 1"), "models.a: unknown key 'colour'"),
        (('family = "f"\ntokenizer = "t"\nparams = "1B"', 'tokenizer = "t"\nparams = "1B"'),
         "missing key 'family'"),
        (('sha256 = ""', 'sha256 = "abc"'), "sha256 must be 64 hex digits"),
        (('file = "a.gguf"', 'file = "dir/a.gguf"'), "file must be a plain name"),
        (('file = "a.gguf"', 'file = "b.gguf"'), "share file b.gguf"),
        (('type = "hf"', 'type = "ftp"'), 'type must be "hf" or "pypi"'),
        (('repo = "o/r"', 'repo = "r"'), "repo must look like owner/name"),
        (("size = 10\n", ""), "a pypi source needs size and sha256"),
        (('draft = "b"', 'draft = "c"'), "draft 'c' is not a model"),
        (('tokenizer = "t"\nparams = "100M"', 'tokenizer = "u"\nparams = "100M"'),
         "b cannot draft for a: different tokenizers (target t, draft u)"),
        (('[pairs."a+b"]', "[pairs.a]"), "a pair cannot have the name of a model"),
        (("[models.a]", "[models.a"), "not valid TOML"),
    ],
)  # fmt: skip
def test_malformed_catalog_is_one_line(edit: tuple[str, str], message: str) -> None:
    text = MINIMAL.replace(*edit, 1)
    with pytest.raises(CatalogError) as exc:
        parse_catalog(text, "c.toml")
    assert message in str(exc.value)
    assert str(exc.value).startswith("c.toml: ") and "\n" not in str(exc.value)


BAD_VALUES = [
    ('repo = "o/r"', 'repo = "bartowski/gemma 3-GGUF"', "repo 'bartowski/gemma 3-GGUF' is"),
    ('repo = "o/r"', 'repo = "org/repo--x"', "sources[0]: repo 'org/repo--x' is not a valid"),
    ('repo = "o/r"', 'repo = "../.."', "sources[0]: repo '../..' is not a valid"),
    ('repo = "o/r"', 'repo = "o/r.git"', "sources[0]: repo 'o/r.git' is not a valid"),
    ('file = "a.gguf"', 'file = "a\\u0000.gguf"', "models.a: file must not contain a NUL"),
    ('file = "a.gguf"', 'file = "..\\\\a.gguf"', "models.a: file must be a plain name"),
    ('file = "a.gguf"', 'file = "a\\n.gguf"', "models.a: file must be a plain name"),
    ('file = "a.gguf"', 'file = ""', "models.a: file must be a non-empty string"),
    ('filename = "a.gguf"', 'filename = ""', "sources[0]: filename must be a non-empty"),
    ('filename = "a.gguf"', 'filename = "../a.gguf"', "sources[0]: filename must be a relative"),
    ('filename = "a.gguf"', 'filename = "/a.gguf"', "sources[0]: filename must be a relative"),
    ('filename = "a.gguf"', 'filename = "x//a.gguf"', "sources[0]: filename must be a relative"),
    ('filename = "a.gguf"', 'filename = "a\\u0000.gguf"', "sources[0]: filename must not contain"),
    ('filename = "a.gguf"', 'filename = "a.gguf", revision = ""', "revision must be a non-empty"),
    ('filename = "a.gguf"', 'filename = "a.gguf", revision = "a b"', "revision must be a branch"),
    ('filename = "a.gguf"', 'filename = "a.gguf", revision = "../x"', "revision must be a branch"),
    ('filename = "a.gguf"', 'filename = "a.gguf", revision = "v1\\u0000"', "revision must not"),
    ('member = "b/b.gguf"', 'member = "b/b\\u0000.gguf"', "member must not contain a NUL"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "message"), BAD_VALUES)
def test_bad_values_are_one_catalog_error_naming_the_field(
    old: str, new: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Values huggingface_hub or the filesystem would reject with a traceback later
    (HFValidationError, ValueError for NUL) are refused when the catalog is read."""
    path = tmp_path / "c.toml"
    path.write_text(MINIMAL.replace(old, new, 1))
    monkeypatch.setenv("EDGESPEC_CATALOG", str(path))
    with pytest.raises(CatalogError) as exc:
        load_catalog()
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert str(exc.value).startswith(f"{path}: models.")


@pytest.mark.parametrize(
    "repo",
    ["o/r", "bartowski/gemma-3-GGUF", "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "a_b/c.d", "x/y",
     "o/r--x", "o/r..x", "../..", "o/.r", "o/r-", "o/r.git", "o/ r", "o/r?", "-o/r",
     "o/" + "r" * 97, "o/" + "r" * 96],
)  # fmt: skip
def test_repo_rule_is_huggingface_hubs(repo: str) -> None:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo)
        hub_ok = True
    except HFValidationError:
        hub_ok = False
    text = MINIMAL.replace('repo = "o/r"', f"repo = {repo!r}".replace("'", '"'), 1)
    try:
        parse_catalog(text)
        ours = True
    except CatalogError:
        ours = False
    assert ours == hub_ok


def test_unknown_names_get_suggestions() -> None:
    c = load_catalog()
    msg = c.unknown_message("gemma3")
    assert msg.startswith("unknown model 'gemma3'; did you mean 'gemma-3-270m'")
    assert "\n" not in msg
    assert "'qwen2.5-coder-7b-instruct'" in c.unknown_message("qwen2.5-coder-7b")
    assert c.unknown_message("gemma-3-4b+270m") == (
        "'gemma-3-4b+270m' is a pair, not a model: "
        "use --target gemma-3-4b-it --draft gemma-3-270m-it"
    )
    with pytest.raises(CatalogError, match="did you mean 'smollm2-135m-instruct'"):
        c.model("smollm2")


# ----------------------------------------------------------------------------- GGUF metadata


def write_gguf(path: Path, *, tokens: bool = True) -> Path:
    """A tiny GGUF with only metadata (and one tensor), optionally without a vocabulary."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    if tokens:
        w.add_tokenizer_model("llama")
        # the byte tokens too: a SentencePiece vocabulary without them is refused
        w.add_token_list(["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "a"])
    w.add_tensor("token_embd.weight", np.zeros((6, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_metadata_of_a_real_model_file(synthetic_models: dict[str, Path]) -> None:
    meta = check_usable(synthetic_models["target"])
    assert meta.architecture == "llama" and meta.version == 3 and missing_keys(meta) == []
    assert meta.kv["llama.context_length"] == 1024
    assert meta.array_lengths["tokenizer.ggml.tokens"] > 256


def test_missing_vocabulary_is_named(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "novocab.gguf", tokens=False)
    with pytest.raises(ModelLoadError) as exc:
        check_usable(path)
    msg = str(exc.value)
    assert msg.startswith("novocab.gguf lacks GGUF metadata the engine needs:")
    assert "tokenizer.ggml.tokens" in msg and "cannot be tokenized" in msg and "\n" not in msg
    assert check_usable(write_gguf(tmp_path / "ok.gguf")).architecture == "llama"


def test_truncated_or_foreign_files(tmp_path: Path, synthetic_models: dict[str, Path]) -> None:
    data = synthetic_models["target"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:200])
    with pytest.raises(ModelLoadError, match="cannot load cut.gguf: GGUF metadata is truncated"):
        read_metadata(cut)
    text = tmp_path / "text.gguf"
    text.write_text("hello")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_metadata(text)


def test_vocab_rule_on_metadata_matches_llama_cpp(synthetic_models: dict[str, Path]) -> None:
    """compat.incompatibility gives the same verdicts on GGUF metadata as on loaded models."""
    from edgespec.backend import LlamaModel
    from edgespec.drafting.compat import incompatibility

    names = ["draft_same", "draft_unrelated", "draft_badvocab", "draft_bigvocab"]
    target = LlamaModel(synthetic_models["target"], n_ctx=64, n_threads=1)
    t_meta = GgufVocab(synthetic_models["target"])
    assert t_meta.vocab_info() == target.vocab_info()
    try:
        for name in names:
            draft = LlamaModel(synthetic_models[name], n_ctx=64, n_threads=1)
            try:
                loaded = incompatibility(target, draft)
            finally:
                draft.close()
            from_meta = incompatibility(t_meta, GgufVocab(synthetic_models[name]))
            assert from_meta == loaded, name
    finally:
        target.close()


@pytest.mark.parametrize("text", ["x = " + "[" * 100_000, "x = " + "{a = " * 100_000])
def test_a_catalog_nested_too_deeply_is_one_catalog_error(text: str) -> None:
    with pytest.raises(CatalogError, match="nested too deeply"):
        parse_catalog(text, "deep.toml")


def test_a_named_pipe_as_catalog_is_refused_without_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fifo = tmp_path / "catalog.toml"
    os.mkfifo(fifo)
    monkeypatch.setenv("EDGESPEC_CATALOG", str(fifo))
    with pytest.raises(CatalogError, match="not a regular file"):
        load_catalog()
