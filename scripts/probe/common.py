"""What every probe class shares: outcomes, counting, running commands, the sandbox."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # scripts/
REPO = HERE.parent
PY = sys.executable
TIMEOUT = 60
TB = "Traceback (most recent call last)"
BAD_KINDS = ("traceback", "abort", "hang")
NOT_OK = ("oneline", "multiline", *BAD_KINDS)


def edgespec_cmd() -> list[str]:
    exe = Path(PY).parent / "edgespec"
    return [str(exe)] if exe.exists() else [PY, "-m", "edgespec.cli"]


@dataclass
class Outcome:
    kind: str  # ok, oneline, multiline, traceback, abort, hang
    rc: int | None
    stderr: str
    stdout: str = ""


@dataclass
class ClassStats:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    tried: int = 0
    data_lost: int = 0
    bad: list[tuple[str, str, str]] = field(default_factory=list)  # input, kind, stderr head
    notes: list[tuple[str, str, str]] = field(default_factory=list)

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def add(self, label: str, out: Outcome, note_kinds: Collection[str] = ()) -> None:
        """Count one input's outcome; a bad one is listed, one of note_kinds noted."""
        self.tried += 1
        self.count(out.kind)
        if out.kind in BAD_KINDS:
            self.bad.append((label, out.kind, head(out.stderr)))
        if out.kind in note_kinds:
            self.notes.append((label, out.kind, head(out.stderr)))

    def lost(self, label: str, why: str) -> None:
        self.data_lost += 1
        self.bad.append((label, "data lost", why))


def head(text: str, n: int = 4) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if TB in text:  # the traceback's last lines say what it was
        return " | ".join(lines[:1] + ["..."] + lines[-3:])
    return " | ".join(lines[:n])[:600]


def classify(rc: int | None, stderr: str) -> Outcome:
    if rc is None:
        return Outcome("hang", rc, stderr)
    if rc < 0:
        return Outcome("abort", rc, stderr)
    if TB in stderr:
        return Outcome("traceback", rc, stderr)
    if rc == 0:
        return Outcome("ok", rc, stderr)
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if lines and all(ln.startswith("edgespec:") for ln in lines):  # progress + the error
        return Outcome("oneline", rc, stderr)
    return Outcome("multiline", rc, stderr)


def spawn(cmd: list[str], env: dict[str, str], *, stdin=None, stdout=None, stderr=None):
    """A child in its own session (so its whole group can be killed), run in the repo;
    stdin, stdout and stderr default to /dev/null."""
    null = subprocess.DEVNULL
    return subprocess.Popen(
        cmd,
        env=env,
        cwd=REPO,
        stdin=null if stdin is None else stdin,
        stdout=null if stdout is None else stdout,
        stderr=null if stderr is None else stderr,
        start_new_session=True,
    )


def kill_group(p: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    os.killpg(p.pid, sig)


def run(
    cmd: list[str], env: dict[str, str], timeout: float = TIMEOUT, input: bytes | None = None
) -> Outcome:
    """Run cmd (stdin: /dev/null, or a pipe carrying input) and classify how it ended."""
    pipe = subprocess.PIPE
    p = spawn(cmd, env, stdin=None if input is None else pipe, stdout=pipe, stderr=pipe)
    try:
        so, err = p.communicate(input, timeout=timeout)
        rc: int | None = p.returncode
    except subprocess.TimeoutExpired:
        kill_group(p)
        so, err = p.communicate()
        rc = None
    out = classify(rc, err.decode("utf-8", "replace"))
    out.stdout = so.decode("utf-8", "replace")
    return out


def place(path: Path, content: object) -> None:
    """Put a hostile file at path: bytes or text, or a special kind named by a marker:
    dir, fulldir (a directory with a file in it), fifo, dangling (symlink), loop (two
    symlinks to each other), missing (nothing)."""
    if content in ("dir", "fulldir"):
        path.mkdir()
        if content == "fulldir":
            (path / "x").write_text("x")
    elif content == "fifo":
        os.mkfifo(path)
    elif content == "dangling":
        os.symlink(path.with_name("nowhere"), path)
    elif content == "loop":
        other = path.with_name("loop2" + path.suffix)
        os.symlink(other, path)
        os.symlink(path, other)
    elif content == "missing":
        pass
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        assert isinstance(content, str)
        path.write_text(content, encoding="utf-8")


def load_maker():
    spec = importlib.util.spec_from_file_location("make_test_models", HERE / "make_test_models.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_test_models"] = mod
    spec.loader.exec_module(mod)
    return mod


def base_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGESPEC_")}
    dead = "http://127.0.0.1:9"  # nothing listens there: no network
    env.update(
        EDGESPEC_MODELS_DIR=str(tmp / "models"),
        EDGESPEC_CACHE_DIR=str(tmp / "cache"),
        EDGESPEC_DATA_DIR=str(tmp / "data"),
        XDG_CACHE_HOME=str(tmp / "xdg-cache"),
        XDG_DATA_HOME=str(tmp / "xdg-data"),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
        HOME=str(tmp / "home"),
        HF_HOME=str(tmp / "hf"),
        HF_ENDPOINT=dead,
        HTTP_PROXY=dead,
        HTTPS_PROXY=dead,
        http_proxy=dead,
        https_proxy=dead,
        NO_PROXY="127.0.0.1,localhost",
        PIP_INDEX_URL=dead + "/simple",
        PIP_RETRIES="0",
        PIP_TIMEOUT="2",
        PYTHONDONTWRITEBYTECODE="1",
    )
    for d in ("models", "cache", "data", "home"):
        (tmp / d).mkdir(parents=True, exist_ok=True)
    return env
