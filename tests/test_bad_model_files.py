"""Broken or unusual model files get one line of edgespec's own: no abort, traceback or hang.

The CLI cases run ``edgespec generate`` in a subprocess, under a timeout: an abort
in llama.cpp would kill pytest itself, and a blocking open would hang it.
"""

from __future__ import annotations

import builtins
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgespec.backend import LlamaModel
from edgespec.errors import ModelLoadError
from edgespec.loading import load_pair, resolve_model
from edgespec.modelstore.gguf_meta import check_usable

ROOT = Path(__file__).resolve().parent.parent


def _make_test_models():
    spec = importlib.util.spec_from_file_location(
        "make_test_models", ROOT / "tests" / "make_test_models.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_test_models", module)  # dataclasses look their module up there
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def generate(target: str | Path, prompt: str = "Hello") -> subprocess.CompletedProcess[str]:
    """``edgespec generate --target target``; a hang fails the test through the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "generate", "--target", str(target)]
        + ["--prompt", prompt, "--max-tokens", "4", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The single ``edgespec: error:`` line of a failed run that was not killed by a signal."""
    assert r.returncode > 0, (r.returncode, r.stderr[-2000:])  # negative: killed by a signal
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith("edgespec: error: ")
    assert r.stdout == ""
    return lines[0]


# --------------------------------------------------------------- SPM without byte tokens


@pytest.fixture(scope="module")
def no_byte_tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("no-byte-tokens") / "nobytes.gguf"
    return _make_test_models().write_without_byte_tokens(out)


def test_spm_vocabulary_without_byte_tokens_is_refused_not_an_abort(no_byte_tokens) -> None:
    # "語" is outside the vocabulary: llama.cpp would fall back to <0xE8>... and abort
    line = one_error_line(generate(no_byte_tokens, "Hello 語"))
    assert "nobytes.gguf" in line and "byte tokens" in line, line


def test_check_usable_names_the_missing_byte_tokens(no_byte_tokens, synthetic_models) -> None:
    with pytest.raises(ModelLoadError, match=r"<0x00>\.\.<0xFF>") as exc:
        check_usable(no_byte_tokens)
    assert "\n" not in str(exc.value)
    check_usable(synthetic_models["target"])  # the full vocabulary passes


# --------------------------------------------------------------- unreadable files


def test_unreadable_model_is_one_line_naming_file_and_reason(
    synthetic_models, tmp_path, monkeypatch
) -> None:
    path = tmp_path / "secret.gguf"
    path.write_bytes(synthetic_models["target"].read_bytes())
    real_open = builtins.open

    def deny(file, *args, **kwargs):  # as for a chmod 000 file and a user who is not root
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    monkeypatch.setattr(io, "open", deny)  # what pathlib.Path.open calls
    for load in (lambda: load_pair(str(path), None, n_ctx=64), lambda: LlamaModel(path)):
        with pytest.raises(ModelLoadError) as exc:
            load()
        message = str(exc.value)
        assert "secret.gguf" in message and "Permission denied" in message, message


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs procfs")
def test_special_file_that_fails_on_read_is_one_line() -> None:
    line = one_error_line(generate("/proc/self/mem"))
    assert "/proc/self/mem" in line and "Input/output error" in line, line


# --------------------------------------------------------------- not regular files


def test_named_pipe_is_refused_without_opening_it(tmp_path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    line = one_error_line(generate(fifo))  # opening it would block: no writer
    assert str(fifo) in line and "is a named pipe, not a regular file" in line, line


def test_metadata_reader_refuses_a_named_pipe(tmp_path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    code = (
        "import sys\n"
        "from edgespec.errors import ModelLoadError\n"
        "from edgespec.modelstore.gguf_meta import read_metadata\n"
        "try:\n"
        "    read_metadata(sys.argv[1])\n"
        "except ModelLoadError as exc:\n"
        "    print(exc)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60
    )
    assert "is a named pipe, not a regular file" in r.stdout, r.stdout + r.stderr


def test_a_process_substitution_pipe_is_refused_with_the_reason(synthetic_models) -> None:
    read_end, write_end = os.pipe()
    # the start of a real model, then end of file: a regression reads it rather than hangs
    os.write(write_end, synthetic_models["target"].read_bytes()[:4096])
    os.close(write_end)
    try:
        with pytest.raises(ModelLoadError, match="is a named pipe, not a regular file"):
            resolve_model(f"/dev/fd/{read_end}")  # what bash's <(cat model.gguf) passes
    finally:
        os.close(read_end)


@pytest.mark.parametrize(
    ("kind", "reason"), [("dir", "a directory"), ("dev", "a character device")]
)
def test_directories_and_devices_are_refused(tmp_path, kind: str, reason: str) -> None:
    path = tmp_path if kind == "dir" else Path("/dev/null")
    for load in (lambda: resolve_model(str(path)), lambda: LlamaModel(path)):
        with pytest.raises(ModelLoadError, match=f"is {reason}, not a regular file"):
            load()


# --------------------------------------------------------------- llama.cpp's reason


def test_llama_cpps_reason_for_a_truncated_model_is_passed_on(synthetic_models, tmp_path) -> None:
    data = synthetic_models["target"].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) * 2 // 3])  # the metadata whole, the tensor data cut
    check_usable(cut)  # metadata alone cannot tell: llama.cpp must say it
    with pytest.raises(ModelLoadError) as exc:
        LlamaModel(cut)
    message = str(exc.value)
    assert message.startswith("cannot load cut.gguf: ")
    assert "not within the file bounds" in message, message
    assert "\n" not in message
