"""Models by Hub name (``hf:OWNER/REPO[:QUANT|/FILE.gguf]``): pull, --target/--draft, models, rm.

Against the local fake Hub (tests/fake_hub.py): its tree listing for choosing the
file, its ``/resolve/`` HEAD and CDN for the transfer, offline.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fake_hub import FakeHub, running
from test_hub import Bar
from test_models_cli import cli, one_error_line

from edgespec.errors import ModelFetchError, ModelLoadError
from edgespec.modelstore import hfinstalled, hfspec
from edgespec.modelstore import hub as hubmod
from edgespec.modelstore.hfspec import HfFile, ensure_hf_model, parse_hf_spec, select

REPO = "test-org/tiny-GGUF"
DIR = ("hf", "test-org", "tiny-GGUF")


@pytest.fixture
def served(synthetic_models: dict[str, Path]) -> dict[str, bytes]:
    """The repo's files: two quants of usable GGUFs, an mmproj, a README."""
    return {
        "tiny-Q8_0.gguf": synthetic_models["target"].read_bytes(),
        "tiny-Q4_K_M.gguf": synthetic_models["draft_noisy"].read_bytes(),
        "mmproj-tiny-F16.gguf": b"not a model",
        "README.md": b"# tiny\n",
    }


@pytest.fixture
def env(tmp_path: Path, served: dict[str, bytes], monkeypatch: pytest.MonkeyPatch) -> Any:
    hub = FakeHub()
    for name, data in served.items():
        hub.add(REPO, name, data)
    with running(hub):
        vars_ = dict(os.environ)
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "EDGESPEC_CATALOG"):
            vars_.pop(var, None)
            monkeypatch.delenv(var, raising=False)
        extra = {
            "EDGESPEC_MODELS_DIR": str(tmp_path / "models"),
            "HF_ENDPOINT": hub.url,
            "HF_HOME": str(tmp_path / "hf-home"),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        vars_.update(extra)
        for k, v in extra.items():
            monkeypatch.setenv(k, v)
        yield vars_, hub


def stored(tmp_path: Path, name: str) -> Path:
    return tmp_path.joinpath("models", *DIR, name)


# ----------------------------------------------------------------------------- choosing


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("hf:o/r", "m-Q4_K_M.gguf"),
        ("hf:o/r:q8_0", "m-Q8_0.gguf"),  # case-insensitive
        ("hf:o/r:Q6_K", "big/m-Q6_K-00001-of-00002.gguf"),
        ("hf:o/r/m-Q8_0.gguf", "m-Q8_0.gguf"),
        ("hf:o/r/big/m-Q6_K-00002-of-00002.gguf", "big/m-Q6_K-00001-of-00002.gguf"),
    ],
)
def test_select_follows_llama_cpp(spec: str, expected: str) -> None:
    files = [
        HfFile(p)
        for p in (
            "m-Q4_K_M.gguf",
            "m-Q8_0.gguf",
            "mmproj-m-Q8_0.gguf",
            "big/m-Q6_K-00001-of-00002.gguf",
            "big/m-Q6_K-00002-of-00002.gguf",
        )
    ]
    chosen = [f.path for f in select(files, parse_hf_spec(spec))]
    assert chosen[0] == expected
    if "Q6_K" in spec:
        assert chosen == ["big/m-Q6_K-00001-of-00002.gguf", "big/m-Q6_K-00002-of-00002.gguf"]


def test_select_defaults_and_errors() -> None:
    q8 = [HfFile("a-Q8_0.gguf"), HfFile("b-F16.gguf")]
    assert select(q8, parse_hf_spec("hf:o/r"))[0].path == "a-Q8_0.gguf"  # then Q8_0
    other = [HfFile("z-F16.gguf"), HfFile("a-BF16.gguf"), HfFile("mmproj-a.gguf")]
    assert select(other, parse_hf_spec("hf:o/r"))[0].path == "a-BF16.gguf"  # then the first
    with pytest.raises(ModelFetchError, match="available quants: BF16, F16"):
        select(other, parse_hf_spec("hf:o/r:Q4_K_M"))
    # "Q4_K" is no prefix match of "Q4_K_M" (llama.cpp wants . or - after the tag)
    with pytest.raises(ModelFetchError, match="matches quant Q4_K;"):
        select([HfFile("m-Q4_K_M.gguf")], parse_hf_spec("hf:o/r:Q4_K"))
    two = [HfFile("a-Q4_0.gguf"), HfFile("b-Q4_0.gguf")]
    with pytest.raises(ModelFetchError, match="2 files of o/r match Q4_0: a-Q4_0.gguf, b-Q4_0"):
        select(two, parse_hf_spec("hf:o/r:Q4_0"))
    with pytest.raises(ModelFetchError, match="part 2 is missing"):
        select([HfFile("m-Q2_K-00001-of-00003.gguf")], parse_hf_spec("hf:o/r:Q2_K"))
    with pytest.raises(ModelFetchError, match="no file x.gguf in o/r; GGUF files: a-Q8_0.gguf"):
        select(q8, parse_hf_spec("hf:o/r/x.gguf"))


@pytest.mark.parametrize(
    "spec",
    ["hf:owner", "hf:bad--name/x", "hf:../..", "hf:o/r:Q4 K", "hf:o/r/../x.gguf", "hf:o/r/a.bin"],
)
def test_malformed_specs(spec: str) -> None:
    with pytest.raises(ModelLoadError) as exc:
        parse_hf_spec(spec)
    assert "\n" not in str(exc.value)


# ----------------------------------------------------------------------------- pull


def test_pull_default_quant_file_and_models_listing(
    env: Any, tmp_path: Path, served: dict[str, bytes]
) -> None:
    vars_, hub = env
    r = cli(vars_, "pull", f"hf:{REPO}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(stored(tmp_path, "tiny-Q4_K_M.gguf"))
    assert stored(tmp_path, "tiny-Q4_K_M.gguf").read_bytes() == served["tiny-Q4_K_M.gguf"]
    assert not stored(tmp_path, "mmproj-tiny-F16.gguf").exists()

    r = cli(vars_, "pull", f"hf:{REPO}:q8_0", f"hf:{REPO}/tiny-Q8_0.gguf")  # the same file
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(stored(tmp_path, "tiny-Q8_0.gguf"))] * 2

    hub.requests.clear()  # in place and verified: no request at all
    assert cli(vars_, "pull", f"hf:{REPO}", f"hf:{REPO}:Q8_0").returncode == 0
    assert hub.requests == []

    rows = {row["name"]: row for row in json.loads(cli(vars_, "models", "--json").stdout)}
    row = rows[f"hf:{REPO}/tiny-Q8_0.gguf"]
    assert row["present"] is True and row["state"] == "verified"
    assert row["sha256"] == hashlib.sha256(served["tiny-Q8_0.gguf"]).hexdigest()
    assert row["path"] == str(stored(tmp_path, "tiny-Q8_0.gguf"))
    assert f"hf:{REPO}/tiny-Q4_K_M.gguf" in rows
    text = cli(vars_, "models").stdout
    assert "pulled by Hub name" in text and f"hf:{REPO}/tiny-Q8_0.gguf" in text


def test_pull_bad_quant_lists_the_quants(env: Any) -> None:
    vars_, _ = env
    line = one_error_line(cli(vars_, "pull", f"hf:{REPO}:Q5_K_S"))
    assert f"no GGUF file in {REPO} matches quant Q5_K_S; available quants: Q4_K_M, Q8_0" in line
    line = one_error_line(cli(vars_, "pull", f"hf:{REPO}/nope.gguf"))
    assert "no file nope.gguf in test-org/tiny-GGUF; GGUF files: tiny-Q4_K_M.gguf" in line


def test_pull_bad_repo_id_is_one_line_before_any_request(env: Any, tmp_path: Path) -> None:
    vars_, hub = env
    for bad in ("hf:test-org/bad--repo", "hf:test-org", "hf:../../etc:Q4_K_M"):
        line = one_error_line(cli(vars_, "pull", bad))
        assert "not a valid Hugging Face repo id" in line or "expected hf:OWNER/REPO" in line
    assert hub.requests == [] and not (tmp_path / "models").exists()


def test_pull_unknown_repo_is_one_line(env: Any) -> None:
    vars_, _ = env
    line = one_error_line(cli(vars_, "pull", "hf:test-org/nope-GGUF"))
    assert "repo test-org/nope-GGUF not found on" in line


def test_failed_pull_leaves_no_empty_folders(
    env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, hub = env
    monkeypatch.setattr(hubmod, "RETRY_WAIT", 0)
    hub.cdn_down = True
    directory = tmp_path / "m"
    directory.mkdir()
    with pytest.raises(ModelFetchError, match="cannot download"):
        ensure_hf_model(f"hf:{REPO}:Q8_0", directory=directory)
    assert os.listdir(directory) == []


def test_resume_after_partial(
    env: Any, tmp_path: Path, served: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, hub = env
    monkeypatch.setattr(hubmod, "CHUNK_SIZE", 1024)
    Bar.instances, Bar.interrupt_after = [], 100_000
    directory = tmp_path / "m"
    with pytest.raises(KeyboardInterrupt):
        ensure_hf_model(f"hf:{REPO}:Q8_0", directory=directory, bar=Bar)
    folder = directory.joinpath(*DIR)
    (partial,) = [p for p in folder.iterdir() if p.name.endswith(".partial")]
    have = partial.stat().st_size
    assert 0 < have < len(served["tiny-Q8_0.gguf"])
    (listed,) = [m for m in hfinstalled.installed_hf_models(directory)]
    assert listed.state == "partial" and listed.partial_bytes == have

    Bar.interrupt_after = None
    hub.requests.clear()
    path = ensure_hf_model(f"hf:{REPO}:Q8_0", directory=directory, bar=Bar)
    assert path.read_bytes() == served["tiny-Q8_0.gguf"]
    (get,) = hub.gets("cdn")
    assert get.headers.get("range") == f"bytes={have}-"
    assert sorted(p.name for p in folder.iterdir()) == ["tiny-Q8_0.gguf", "tiny-Q8_0.gguf.verified"]


def test_sha_mismatch_is_refused(env: Any, tmp_path: Path) -> None:
    _, hub = env
    hub.corrupt = True
    with pytest.raises(ModelFetchError, match="corrupt download was removed") as exc:
        ensure_hf_model(f"hf:{REPO}:Q8_0", directory=tmp_path / "m")
    assert "\n" not in str(exc.value)
    assert os.listdir(tmp_path / "m") == []  # nothing left, not even an empty folder


def test_listing_sha_is_checked_before_download(
    env: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tree listing's sha256 is the expectation; a HEAD that disagrees stops it."""
    _, hub = env
    real = hfspec.remote_files

    def changed(spec: Any) -> list[HfFile]:
        return [HfFile(f.path, f.size, "0" * 64 if f.sha256 else "") for f in real(spec)]

    monkeypatch.setattr(hfspec, "remote_files", changed)
    with pytest.raises(ModelFetchError, match="the Hub's sha256 is"):
        ensure_hf_model(f"hf:{REPO}:Q8_0", directory=tmp_path / "m")
    assert hub.gets("cdn") == []


def test_split_model_is_fetched_whole_listed_once_and_removed_whole(
    env: Any, tmp_path: Path
) -> None:
    _, hub = env
    parts = [b"part one " * 1000, b"part two " * 1000]
    for i, data in enumerate(parts, 1):
        hub.add(REPO, f"split/tiny-Q2_K-{i:05d}-of-00002.gguf", data)
    directory = tmp_path / "m"
    path = ensure_hf_model(f"hf:{REPO}:Q2_K", directory=directory)
    assert path.name == "tiny-Q2_K-00001-of-00002.gguf"
    assert path.with_name("tiny-Q2_K-00002-of-00002.gguf").read_bytes() == parts[1]
    (m,) = hfinstalled.installed_hf_models(directory)
    assert m.name == f"hf:{REPO}/split/tiny-Q2_K-00001-of-00002.gguf"
    assert m.count == 2 and m.state == "verified" and m.size_on_disk == sum(map(len, parts))
    found = hfinstalled.find_installed(parse_hf_spec(f"hf:{REPO}:Q2_K"), directory)
    assert found == m
    files = hfinstalled.model_files(m, directory)
    removed, freed = hfinstalled.remove_files(files, directory, list(m.parts))
    assert removed == 4 and freed > sum(map(len, parts))  # two parts, two sidecars
    assert not (directory / "hf").exists()  # empty folders go too


# ----------------------------------------------------------------------------- use


def test_target_and_draft_by_hub_name(env: Any, tmp_path: Path) -> None:
    vars_, hub = env
    args = ["generate", "--target", f"hf:{REPO}:Q8_0", "--draft", f"hf:{REPO}:Q4_K_M"]
    args += ["--json", "--prompt", "Hello world", "--max-tokens", "6", "--threads", "1"]
    r = cli(vars_, *args)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["tokens"]) == 6 and out["target"] == str(stored(tmp_path, "tiny-Q8_0.gguf"))
    hub.requests.clear()
    assert cli(vars_, *args).returncode == 0  # second run: from the model directory
    assert hub.requests == []
    line = one_error_line(cli(vars_, "generate", "--target", f"hf:{REPO}:Q3_K"))
    assert "available quants: Q4_K_M, Q8_0" in line
    line = one_error_line(cli(vars_, "generate", "--target", "tiny-target-x", "--draft",
                              "hf:bad--org/x"))  # fmt: skip
    assert "not a valid Hugging Face repo id" in line  # the draft is checked first


# ----------------------------------------------------------------------------- rm


def test_rm_removes_then_says_not_installed(
    env: Any, tmp_path: Path, served: dict[str, bytes]
) -> None:
    vars_, _ = env
    assert cli(vars_, "pull", f"hf:{REPO}:Q8_0", f"hf:{REPO}").returncode == 0
    r = cli(vars_, "rm", f"hf:{REPO}:Q8_0")
    assert r.returncode == 0, r.stderr
    size = len(served["tiny-Q8_0.gguf"])
    assert r.stdout.startswith(f"removed hf:{REPO}/tiny-Q8_0.gguf: 2 files, ")
    amount, unit = r.stdout.split(": 2 files, ")[1].split()[:2]  # the model and its sidecar
    scale = {"kB": 1e3, "MB": 1e6, "GB": 1e9}[unit]
    assert abs(float(amount) * scale - size) <= scale / 10 + 200 and r.stdout.endswith("freed\n")
    assert not stored(tmp_path, "tiny-Q8_0.gguf").exists()
    assert stored(tmp_path, "tiny-Q4_K_M.gguf").exists()  # the other quant stays

    line = one_error_line(cli(vars_, "rm", f"hf:{REPO}:Q8_0"))
    assert line == f"edgespec: error: hf:{REPO}:Q8_0 is not installed in {tmp_path / 'models'}"

    r = cli(vars_, "rm", f"hf:{REPO}/tiny-Q4_K_M.gguf")  # by the name edgespec models shows
    assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path / "models") == []  # no empty folders, no lock files


def test_rm_catalog_model(env: Any, tmp_path: Path, served: dict[str, bytes]) -> None:
    from test_models_cli import model_toml

    vars_, hub = env
    hub.add("test-org/tiny-target-GGUF", "tiny-target.gguf", served["tiny-Q8_0.gguf"])
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(model_toml("tiny-target", "tiny-target.gguf", served["tiny-Q8_0.gguf"]))
    vars_ = {**vars_, "EDGESPEC_CATALOG": str(catalog)}
    assert cli(vars_, "pull", "tiny-target").returncode == 0
    r = cli(vars_, "rm", "tiny-target")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("removed tiny-target: 2 files, ")
    assert os.listdir(tmp_path / "models") == []
    assert "tiny-target is not installed" in one_error_line(cli(vars_, "rm", "tiny-target"))
    line = one_error_line(cli(vars_, "rm", "tiny-targt"))
    assert "unknown model or pair 'tiny-targt'; did you mean 'tiny-target'" in line


def test_rm_refuses_paths_and_names_outside_the_store(env: Any, tmp_path: Path) -> None:
    vars_, _ = env
    outside = tmp_path / "precious.gguf"
    outside.write_bytes(b"keep me")
    (tmp_path / "models").mkdir()
    for name in (str(outside), "../precious.gguf", "precious.gguf", "hf:test-org/x/../../p.gguf"):
        line = one_error_line(cli(vars_, "rm", name))
        assert "refusing to remove" in line or "must be a path in the repo" in line, line
    assert outside.read_bytes() == b"keep me"


def test_remove_files_refuses_a_folder_linked_outside(tmp_path: Path) -> None:
    from edgespec.errors import EdgespecError

    store_dir, elsewhere = tmp_path / "models", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "m.gguf").write_bytes(b"x")
    (store_dir / "hf" / "o").mkdir(parents=True)
    (store_dir / "hf" / "o" / "r").symlink_to(elsewhere)
    with pytest.raises(EdgespecError, match="outside the model directory"):
        hfinstalled.remove_files([store_dir / "hf" / "o" / "r" / "m.gguf"], store_dir, [])
    assert (elsewhere / "m.gguf").exists()
