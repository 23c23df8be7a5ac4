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


# ------------------------------------------------- what a new user meets first (issue 17)


def test_generate_takes_draft_auto_as_serve_and_complete_do(synthetic_models) -> None:
    """--draft auto means one thing everywhere: the default drafter, n-gram lookup."""
    from edgespec.commands.options import DEFAULT_DRAFT
    from edgespec.drafting.build import parse_draft_spec

    assert parse_draft_spec("auto") == parse_draft_spec("AUTO") == parse_draft_spec("ngram")
    assert DEFAULT_DRAFT == "auto"
    common = ["generate", "--target", str(synthetic_models["target"]), "--prompt", "a b a b a"]
    common += ["--max-tokens", "12", "--json", "--threads", "1", "--gamma", "3"]
    auto, ngram = run_cli(*common, "--draft", "auto"), run_cli(*common, "--draft", "ngram")
    assert auto.returncode == 0, auto.stderr
    a, n = json.loads(auto.stdout), json.loads(ngram.stdout)
    assert a["drafter"] == n["drafter"] == "ngram" and a["tokens"] == n["tokens"]


def test_generate_chat_renders_the_prompt_in_the_targets_template(synthetic_models) -> None:
    target = str(synthetic_models["target_fim"])  # carries a ChatML template
    common = ["generate", "--target", target, "--max-tokens", "8", "--json", "--plain"]
    chat = run_cli(*common, "--chat", "--prompt", "hello")
    by_hand = "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    raw = run_cli(*common, "--prompt", by_hand)
    assert chat.returncode == 0, chat.stderr
    assert json.loads(chat.stdout)["tokens"] == json.loads(raw.stdout)["tokens"]
    # a base model has no template to render: one line, not a silent raw prompt
    r = run_cli("generate", "--target", str(synthetic_models["target"]), "--chat")
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "has no chat template" in r.stderr


def _subcommands():
    import argparse

    from edgespec.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_every_subcommand_and_option_explains_itself() -> None:
    import argparse

    commands = _subcommands()
    assert "chat" in commands  # registered by tui/ through the entry point
    for name, p in commands.items():
        assert p.description and p.description.strip(), f"{name} has no description"
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            what = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and action.help != argparse.SUPPRESS, f"{what} has no help"
            assert action.help.strip(), what


def test_help_documents_the_context_and_thread_defaults() -> None:
    from edgespec.backend import DEFAULT_CTX

    for name in ("generate", "chat", "calibrate", "complete", "serve", "bench"):
        text = _subcommands()[name].format_help()
        flat = " ".join(text.split())
        assert f"default {DEFAULT_CTX}" in flat and "32768" in flat, name
        assert "or 0: one per available core" in flat, name
    assert "most tokens to generate" in _subcommands()["generate"].format_help()


def test_a_newline_in_a_model_path_stays_on_the_error_line(tmp_path) -> None:
    bad = tmp_path / "no\nsuch.gguf"
    out = run_cli("generate", "--target", str(bad), "--prompt", "hi")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "no\\nsuch.gguf" in out.stderr, out.stderr
    assert out.stderr.startswith("edgespec: error: ")
