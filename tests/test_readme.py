"""The README as a new user meets it: its first generate example runs and answers."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
MAX_LINES = 300
# special-token text a model should never show a person: Gemma's <start_of_image>,
# ChatML's <|im_end|>, SentencePiece's <bos>/<eos>/<pad>/<unk>, ...
SPECIAL = re.compile(r"<(start|end)_of_\w+>|<\|[^|>\s]*\|>|<(bos|eos|pad|unk|mask)>")


def readme() -> str:
    return README.read_text(encoding="utf-8")


def first_generate_example() -> list[str]:
    """argv (after ``scripts/edgespec``) of the README's first ``generate`` command,
    read out of its first sh block that has one."""
    for block in re.findall(r"```sh\n(.*?)```", readme(), flags=re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["scripts/edgespec", "generate"]:
                return words[1:]
    raise AssertionError("README.md has no `scripts/edgespec generate` example")


def test_readme_stays_short() -> None:
    assert len(readme().splitlines()) <= MAX_LINES


def test_identical_output_claim_says_what_it_is_identical_to() -> None:
    """Where the README first claims greedy output is the target's own, it says it is
    edgespec's plain decoding, not llama-server's, and how to match llama-server."""
    paragraphs = (" ".join(p.split()) for p in readme().split("\n\n"))
    flat = next(p for p in paragraphs if "token for token" in p)
    assert "llama-server" in flat and "EDGESPEC_FAST_KERNELS=1" in flat


def test_first_generate_example_is_parsed_from_the_readme() -> None:
    argv = first_generate_example()
    assert argv[0] == "generate" and "--prompt" in argv


@pytest.mark.real_model
def test_first_generate_example_prints_a_real_answer(real_model_paths) -> None:
    """The README's first generate command, as written there, prints words a person
    recognises, not special-token text (it printed <start_of_image> 64 times)."""
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", *first_generate_example()],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert not SPECIAL.search(out), out
    words = re.findall(r"[A-Za-z]{3,}", out)
    assert len(words) >= 10 and len(set(w.lower() for w in words)) >= 8, out
    # not one token repeated: no single word is most of the answer
    top = max(words.count(w) for w in set(words))
    assert top <= len(words) // 3, out
