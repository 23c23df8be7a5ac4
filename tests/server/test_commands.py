"""``edgespec complete`` in-process, and ``edgespec serve`` as a real subprocess."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from edgespec.cli import main

SOURCE = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    \n\n\nprint(add(1, 2))\n"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "calc.py"
    path.write_text(SOURCE)
    return path


def test_complete_json(synthetic_models, source: Path, capsys) -> None:
    rc = main(["complete", "--file", str(source), "--line", "6", "--col", "5", "--json",
               "--target", str(synthetic_models["target_fim"]), "--max-tokens", "12"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fim"] is True and out["draft"] == "ngram"
    assert out["gamma"] == "auto" and out["stop_reason"] in ("max_tokens", "max_lines", "suffix")
    assert len(out["text"]) > 0 and out["stats"]["generated"] >= 1


def test_complete_prefix_only_says_so(synthetic_models, source: Path, capsys) -> None:
    rc = main(["complete", "--file", str(source), "--line", "6", "--col", "5", "--draft", "none",
               "--target", str(synthetic_models["target"]), "--max-tokens", "6"])  # fmt: skip
    cap = capsys.readouterr()
    assert rc == 0 and "no FIM tokens" in cap.err and cap.out.strip()


@pytest.mark.parametrize(("line", "col"), [("99", "1"), ("6", "40"), ("0", "1")])
def test_complete_bad_cursor(synthetic_models, source: Path, capsys, line: str, col: str) -> None:
    rc = main(["complete", "--file", str(source), "--line", line, "--col", col,
               "--target", str(synthetic_models["target"])])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("edgespec: error: ") and err.count("\n") == 1


def test_complete_missing_file(tmp_path: Path, capsys) -> None:
    rc = main(["complete", "--file", str(tmp_path / "nope.py"), "--line", "1", "--col", "1"])
    assert rc == 1 and "cannot read" in capsys.readouterr().err


def test_serve_subprocess(synthetic_models) -> None:
    env = {**os.environ, "EDGESPEC_API_KEY": "k1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec.cli", "serve", "--port", "0", "--quiet",
         "--target", str(synthetic_models["target_fim"]), "--draft", "ngram", "--gamma", "3"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        assert m, line
        assert "fill-in-the-middle" in line and "draft ngram" in line
        assert "4 slots" in line  # --parallel's default
        base = f"http://127.0.0.1:{m.group(1)}"
        with urllib.request.urlopen(base + "/health", timeout=60) as r:
            assert json.load(r)["status"] == "ok"
        req = urllib.request.Request(
            base + "/infill",
            data=json.dumps({"input_prefix": "def f(", "n_predict": 4}).encode(),
            headers={"Authorization": "Bearer k1"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            assert json.load(r)["tokens_predicted"] <= 4
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "shutting down" in err


def test_serve_port_in_use(synthetic_models, capsys) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        rc = main(["serve", "--port", str(port), "--draft", "none",
                   "--target", str(synthetic_models["target"])])  # fmt: skip
    assert rc == 1 and "cannot listen" in capsys.readouterr().err


def test_serve_refuses_a_non_ascii_api_key_before_loading(tmp_path: Path, capsys) -> None:
    rc = main(["serve", "--api-key", "ключ", "--target", str(tmp_path / "never-loaded.gguf")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1
    assert err[0].startswith("edgespec: error: ") and "API key must be printable ASCII" in err[0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--parallel", "0"], "parallel must be a whole number >= 1"),
        (["--parallel", "65"], "parallel must be at most 64"),
        (["--max-queue", "-1"], "max-queue must be a whole number >= 0"),
    ],
)
def test_serve_refuses_bad_slot_flags_before_loading(
    tmp_path: Path, capsys, flags: list[str], message: str
) -> None:
    rc = main(["serve", *flags, "--target", str(tmp_path / "never-loaded.gguf")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0 and len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("command", ["serve", "generate"])
@pytest.mark.parametrize("ctx", ["16", "255", "0", "-1"])
def test_a_context_below_llamas_floor_is_refused(command: str, ctx: str, capsys) -> None:
    from edgespec.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--ctx", ctx])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ctx must be a whole number >= 256" in err[0], err


def test_a_context_at_the_floor_is_taken_as_given() -> None:
    from edgespec.cli import build_parser

    assert build_parser().parse_args(["serve", "--ctx", "256"]).ctx == 256
    assert build_parser().parse_args(["serve"]).ctx is None
