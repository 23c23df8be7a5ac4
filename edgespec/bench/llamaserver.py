"""llama-server on the same workload: plain decoding and each of its n-gram drafters.

``--llama-cpp-bin DIR`` with a ``llama-server`` in it adds one configuration per
``--spec-type`` in ``--llama-server-types`` (default: plain decoding, ``none``, and the
n-gram types ngram-simple, ngram-map-k, ngram-map-k4v and ngram-mod, each with
llama.cpp's own default draft lengths: ngram-mod drafts 48-64 tokens from a 24-token
match through a hash pool shared by all slots and requests, ngram-simple and the maps
up to 48 from a 12-token match). Each run starts a fresh server (so that no pool,
prompt cache or map carries one run's text into the next, as edgespec's runs start
fresh too), sends a 4-token warm-up request, then the workload's prompt verbatim to
``/completion`` (greedy at temperature 0, the same max tokens, thread count, context
size and seed), reads the reply's ``timings`` (decode tok/s, prompt time, tokens
drafted and accepted) and stops the server: one server at a time, never two.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .llamacpp import LlamaCppError
from .stats import RunRecord
from .workloads import Workload

SERVER = "llama-server"
PLAIN_TYPE = "none"
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")
DEFAULT_TYPES = (PLAIN_TYPE, *NGRAM_TYPES)
KNOWN_TYPES = (*DEFAULT_TYPES, "ngram-cache")
START_TIMEOUT_S = 120.0
REQUEST_TIMEOUT_S = 900.0
LABEL = "llama-server"  # configurations are labelled "llama-server <type>"


@dataclass(frozen=True)
class ServerResult:
    """What one /completion reply's timings said."""

    decoded: int
    decode_s: float
    tokens_per_second: float
    prompt_s: float
    prompt_tokens: int
    drafted: int
    accepted: int
    text: str

    def to_record(self, peak_rss_mib: float = 0.0) -> RunRecord:
        """As a RunRecord (no per-round data: the server does not report it)."""
        return RunRecord(
            tokens_per_second=self.tokens_per_second,
            generated=self.decoded,
            drafted=self.drafted,
            accepted=self.accepted,
            decode_s=self.decode_s,
            prompt_s=self.prompt_s,
            peak_rss_mib=peak_rss_mib,
        )


def label(spec_type: str) -> str:
    """The configuration label of a --spec-type (``llama-server none`` is plain)."""
    return f"{LABEL} {spec_type}"


def parse_types(text: str) -> list[str]:
    """Comma-separated --spec-type names, each once; raises ValueError naming an unknown."""
    out: list[str] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item not in KNOWN_TYPES:
            raise ValueError(f"unknown llama-server type {item!r}; known: {', '.join(KNOWN_TYPES)}")
        if item not in out:
            out.append(item)
    if not out:
        raise ValueError("no llama-server types given")
    return out


def find_server(bin_dir: Path) -> Path | None:
    """llama-server in bin_dir if it is there and executable."""
    path = Path(bin_dir) / SERVER
    return path if path.is_file() and os.access(path, os.X_OK) else None


def parse_reply(body: dict) -> ServerResult:
    """A /completion reply's figures; raises LlamaCppError when its timings are missing."""
    t = body.get("timings")
    if not isinstance(t, dict) or "predicted_ms" not in t or "prompt_ms" not in t:
        raise LlamaCppError(f"no timings in llama-server's reply: {str(body)[:200]}")
    decoded = int(t.get("predicted_n", 0))
    decode_s = float(t["predicted_ms"]) / 1000.0
    return ServerResult(
        decoded=decoded,
        decode_s=decode_s,
        tokens_per_second=float(t.get("predicted_per_second") or 0.0),
        prompt_s=float(t["prompt_ms"]) / 1000.0,
        prompt_tokens=int(t.get("prompt_n", 0)),
        drafted=int(t.get("draft_n", 0)),
        accepted=int(t.get("draft_n_accepted", 0)),
        text=str(body.get("content", "")),
    )


def command(
    binary: Path,
    *,
    target: Path,
    port: int,
    spec_type: str,
    threads: int,
    n_ctx: int,
    swa_full: bool = False,
    no_repack: bool = False,
) -> list[str]:
    """The llama-server command line: one slot, the target alone, a --spec-type."""
    cmd = [
        str(binary),
        "-m", str(target),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-t", str(threads),
        "-tb", str(threads),
        "-c", str(n_ctx),
        "-np", "1",
        "--no-webui",
    ]  # fmt: skip
    if spec_type != PLAIN_TYPE:
        cmd += ["--spec-type", spec_type]
    if swa_full:
        cmd.append("--swa-full")
    if no_repack:
        cmd.append("--no-repack")
    return cmd


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(port: int, body: dict, timeout_s: float) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/completion",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise LlamaCppError(f"llama-server /completion failed: {e}") from None


def _wait_ready(proc: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
            raise LlamaCppError(f"llama-server exited with {proc.returncode}: {tail[:300]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise LlamaCppError(f"llama-server did not become ready in {START_TIMEOUT_S:.0f} s")


def run(
    binary: Path,
    workload: Workload,
    *,
    max_tokens: int,
    seed: int,
    **server: Any,
) -> ServerResult:
    """Start a server (``command(binary, port=..., **server)``), warm it up, send the
    workload's prompt to /completion, stop the server; what the reply's timings said."""
    port = free_port()
    cmd = command(binary, port=port, **server)
    env = dict(os.environ)
    lib_dir = str(binary.parent)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib_dir, env.get("LD_LIBRARY_PATH")) if p)
    with tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log") as log:
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
            )
        except OSError as e:
            raise LlamaCppError(f"cannot run {binary}: {e.strerror or e}") from None
        try:
            _wait_ready(proc, port, Path(log.name))
            warm = {"prompt": "Hello", "n_predict": 4, "temperature": 0.0, "cache_prompt": False}
            _post(port, warm, REQUEST_TIMEOUT_S)
            body = {
                "prompt": workload.prompt,
                "n_predict": max_tokens,
                "temperature": workload.temperature,
                "seed": seed,
                "cache_prompt": False,
            }
            return parse_reply(_post(port, body, REQUEST_TIMEOUT_S))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
