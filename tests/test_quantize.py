"""edgespec quantize: a real requantize of the synthetic model that loads, generates and
drafts for its target; each bad input one line on stderr and no file left (issue 20)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from edgespec.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgespec.cli", *args], capture_output=True, text=True, timeout=300
    )


def one_line_error(capsys, argv: list[str], status: int = 1) -> str:
    """Run the CLI in this process; the one stderr line of a refusal."""
    assert main(argv) == status
    err = capsys.readouterr().err.strip()
    assert err.startswith("edgespec: error: ") and "\n" not in err, err
    return err


def files_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize(("qtype", "pure"), [("Q8_0", False), ("q4_0", True)])
def test_requantized_model_loads_generates_and_drafts(
    synthetic_models, tmp_path: Path, qtype: str, pure: bool
) -> None:
    dst = tmp_path / f"target-{qtype}.gguf"
    argv = ["quantize", str(synthetic_models["target"]), str(dst), "--type", qtype]
    r = run_cli(*argv, "--threads", "1", *(["--pure"] if pure else []))
    assert r.returncode == 0, r.stderr
    assert files_in(tmp_path) == [dst.name]  # no temporary file left beside it
    assert f"wrote {dst}" in r.stdout and qtype.upper() in r.stdout and "MB" in r.stdout
    assert dst.stat().st_size < synthetic_models["target"].stat().st_size  # from F32

    from edgespec.backend import LlamaModel, model_description

    with LlamaModel(dst, n_ctx=256, n_threads=1) as m:
        assert qtype.upper() in model_description(m)
    gen = ["generate", "--target", str(synthetic_models["target"]), "--prompt", "Hello world"]
    gen += ["--max-tokens", "16", "--json", "--threads", "1"]
    plain = run_cli(*gen, "--plain")
    spec = run_cli(*gen, "--draft", str(dst), "--gamma", "4")
    assert plain.returncode == 0 and spec.returncode == 0, plain.stderr + spec.stderr
    p, s = json.loads(plain.stdout), json.loads(spec.stdout)
    assert s["tokens"] == p["tokens"] and len(s["tokens"]) == 16  # exact, as always
    assert s["stats"]["drafted"] > 0 and s["stats"]["accepted"] > 0  # same vocabulary


def test_bad_inputs_are_one_line_and_leave_no_file(synthetic_models, tmp_path, capsys) -> None:
    src = str(synthetic_models["target"])
    out = tmp_path / "out"
    out.mkdir()
    dst = str(out / "q.gguf")

    err = one_line_error(
        capsys, ["quantize", str(tmp_path / "missing.gguf"), dst, "--type", "Q4_0"]
    )
    assert "not found" in err
    text = tmp_path / "notes.gguf"
    text.write_text("not a model at all\n")
    assert "not a GGUF" in one_line_error(capsys, ["quantize", str(text), dst, "--type", "Q4_0"])
    err = one_line_error(capsys, ["quantize", src, dst, "--type", "Q9_9"])
    assert "unknown quantization type 'Q9_9'" in err and "Q4_0" in err and "Q2_K" in err
    err = one_line_error(capsys, ["quantize", src, src, "--type", "Q4_0", "--force"])
    assert "is the source" in err
    link = out / "link.gguf"
    link.symlink_to(src)
    err = one_line_error(capsys, ["quantize", src, str(link), "--type", "Q4_0", "--force"])
    assert "is the source" in err
    link.unlink()
    err = one_line_error(
        capsys, ["quantize", src, str(tmp_path / "no" / "q.gguf"), "--type", "Q4_0"]
    )
    assert "no such directory" in err
    assert files_in(out) == []


def test_unwritable_destination_folder_is_one_line(synthetic_models, tmp_path, capsys) -> None:
    import os

    src = str(synthetic_models["target"])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    # root writes into a read-only directory anyway; not into /proc/self (procfs)
    folder = locked if not os.access(locked, os.W_OK) else Path("/proc/self")
    try:
        err = one_line_error(capsys, ["quantize", src, str(folder / "q.gguf"), "--type", "Q4_0"])
        assert "cannot write" in err
    finally:
        locked.chmod(0o700)
    assert files_in(locked) == []


def test_existing_destination_is_refused_unless_force(synthetic_models, tmp_path, capsys) -> None:
    src = str(synthetic_models["target"])
    dst = tmp_path / "q.gguf"
    dst.write_bytes(b"keep me")
    err = one_line_error(capsys, ["quantize", src, str(dst), "--type", "Q8_0"])
    assert "exists (--force replaces it)" in err and dst.read_bytes() == b"keep me"
    assert main(["quantize", src, str(dst), "--type", "Q8_0", "--threads", "1", "--force"]) == 0
    assert dst.read_bytes()[:4] == b"GGUF" and files_in(tmp_path) == ["q.gguf"]


def test_llama_cpp_failure_is_one_line_and_leaves_no_file(synthetic_models, tmp_path, capsys):
    broken = tmp_path / "broken.gguf"  # GGUF magic, then a header cut short
    broken.write_bytes(synthetic_models["target"].read_bytes()[:200])
    out = tmp_path / "out"
    out.mkdir()
    argv = ["quantize", str(broken), str(out / "q.gguf"), "--type", "Q4_0", "--threads", "1"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("edgespec: error: "), err
    assert files_in(out) == []


def test_ctrl_c_stops_the_child_and_leaves_no_file(synthetic_models, tmp_path, capsys, monkeypatch):
    import edgespec.backend.quantize as q

    children = []
    real_popen = q.subprocess.Popen

    class Interrupted(real_popen):  # the child starts, then Ctrl+C arrives while it runs
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            children.append(self)

        def communicate(self, *a, **kw):
            raise KeyboardInterrupt

    monkeypatch.setattr(q.subprocess, "Popen", Interrupted)
    argv = ["quantize", str(synthetic_models["target"]), str(tmp_path / "q.gguf"), "--type", "Q4_0"]
    assert main(argv) == 130
    assert "interrupted" in capsys.readouterr().err
    assert children and children[0].returncode is not None  # killed and reaped
    assert files_in(tmp_path) == []
