"""The CLI contract: --json output, and one-line errors without tracebacks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgespec.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_generate_json_plain_and_speculative_agree(synthetic_models) -> None:
    common = ["generate", "--target", str(synthetic_models["target"]), "--prompt", "Hello world"]
    common += ["--max-tokens", "24", "--json", "--threads", "1"]
    plain = run_cli(*common, "--plain")
    spec = run_cli(*common, "--draft", str(synthetic_models["draft_noisy"]), "--gamma", "3")
    assert plain.returncode == 0, plain.stderr
    assert spec.returncode == 0, spec.stderr
    p, s = json.loads(plain.stdout), json.loads(spec.stdout)
    assert p["tokens"] == s["tokens"] and p["text"] == s["text"]
    assert len(s["tokens"]) == 24 and s["stop_reason"] == "max_tokens"
    for key in (
        "drafted",
        "accepted",
        "acceptance_rate",
        "mean_accepted_per_call",
        "target_calls",
        "tokens_per_second",
        "wall_s",
    ):
        assert key in s["stats"]
    assert p["stats"]["drafted"] == 0 and s["stats"]["drafted"] > 0
    assert s["stats"]["target_calls"] < p["stats"]["target_calls"]


def test_generate_streams_text(synthetic_models) -> None:
    r = run_cli(
        "generate",
        "--target",
        str(synthetic_models["target"]),
        "--draft",
        str(synthetic_models["draft_same"]),
        "--prompt",
        "Hello world",
        "--max-tokens",
        "16",
        "--threads",
        "1",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    # the same weights as draft: every drafted token is accepted
    assert re.search(r"accepted (\d+)/\1 drafts", r.stderr), r.stderr


def _bad_files(tmp: Path, synthetic_models) -> dict[str, Path]:
    text = tmp / "notes.gguf"
    text.write_text("this is not a model\n")
    truncated = tmp / "truncated.gguf"
    data = synthetic_models["target"].read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    return {"text": text, "truncated": truncated}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "model file not found"),
        ("text", "not a GGUF file"),
        ("truncated", "cannot load truncated.gguf"),
        ("missing_draft", "model file not found"),
        ("long_prompt", "the context holds"),
        ("gamma", "gamma must be auto or a whole number >= 0, got -1"),
        ("temperature", "temperature must be >= 0"),
        ("top_p", "top-p must be in (0, 1]"),
        ("top_p_zero", "top-p must be in (0, 1]"),
        ("prompt_file", "cannot read prompt file"),
        ("not_a_number", "max-tokens must be a whole number >= 0, got 'many'"),
        ("seed", "seed must be a whole number >= 0, got -1"),
    ],
)
def test_errors_are_one_line(tmp_path, synthetic_models, case: str, message: str) -> None:
    bad = _bad_files(tmp_path, synthetic_models)
    target = str(synthetic_models["target"])
    args = {
        "missing": ["--target", str(tmp_path / "nope.gguf")],
        "text": ["--target", str(bad["text"])],
        "truncated": ["--target", str(bad["truncated"])],
        "missing_draft": ["--target", target, "--draft", str(tmp_path / "nope.gguf")],
        "long_prompt": ["--target", target, "--ctx", "256", "--prompt", "word " * 300],
        "gamma": ["--target", target, "--gamma", "-1"],
        "temperature": ["--target", target, "--temperature", "-0.5"],
        "top_p": ["--target", target, "--top-p", "1.5"],
        "top_p_zero": ["--target", target, "--top-p", "0"],
        "prompt_file": ["--target", target, "--prompt-file", str(tmp_path / "missing.txt")],
        "not_a_number": ["--target", target, "--max-tokens", "many"],
        "seed": ["--target", target, "--seed", "-1"],
    }[case]
    r = run_cli("generate", *args)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("edgespec: error: ")
    assert message in lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
