"""simonw's ``llm`` CLI against the server, as an OpenAI-compatible model: it streams
chat completions with ``stream_options.include_usage`` and logs the usage it reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.conftest import Running

LLM = Path(sys.executable).with_name("llm")
pytestmark = pytest.mark.skipif(
    not LLM.exists() and shutil.which("llm") is None, reason="llm is not installed (dev extra)"
)


def llm(home: Path, *args: str) -> str:
    """Run the llm CLI with its configuration and logs under home."""
    exe = str(LLM) if LLM.exists() else "llm"
    env = {**os.environ, "LLM_USER_PATH": str(home)}
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(
        [exe, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_llm_cli_streams_and_logs_usage(fim_server: Running, tmp_path: Path) -> None:
    (tmp_path / "extra-openai-models.yaml").write_text(
        f'- model_id: edgespec\n  model_name: target_fim\n  api_base: "{fim_server.base}/v1"\n'
    )
    prompt = "Tell me about the people of the world"
    text = llm(tmp_path, "-m", "edgespec", "-o", "max_tokens", "6", prompt)
    assert text.strip()
    llm(tmp_path, "-m", "edgespec", "-o", "max_tokens", "6", prompt)  # the prompt now cached
    logs = json.loads(llm(tmp_path, "logs", "-n", "2", "--json"))
    assert [r["output_tokens"] for r in logs] == [6, 6]
    assert all(r["input_tokens"] > 5 for r in logs)
    details = json.loads(logs[-1]["token_details"])
    assert details["prompt_tokens_details"]["cached_tokens"] > 0
