"""RPC workers and `edgespec serve` subprocesses for the tests that use them
(tests/test_rpc.py, tests/test_self_healing.py, tests/test_supervise.py and
tests/tui/test_worker_loss.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgespec.backend import RPC_UNAVAILABLE, probe_rpc_worker, rpc_supported
from edgespec.errors import BackendError

START_TIMEOUT = 60.0  # seconds for a worker to answer (a busy CI machine)
RECOVERY_S = 60.0  # the bound: service back within 60 s of the worker's return
GREEDY = {"prompt": "the cat sat on the mat and the", "max_tokens": 12, "temperature": 0}
LONG = {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0, "stream": True}
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def require_rpc() -> None:
    if not rpc_supported():
        pytest.fail(RPC_UNAVAILABLE)


class Worker:
    """An `edgespec worker` subprocess on a free loopback port (or the one given)."""

    def __init__(self, log_dir: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = log_dir / f"worker-{self.port}.log"
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "edgespec.cli", "worker", "--port", str(self.port)]
                + ["--threads", "1"],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=ENV,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                probe_rpc_worker(self.endpoint, timeout=2.0)
                return
            except BackendError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise AssertionError(f"worker did not start: {self.log.read_text()}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def post(base: str, path: str, body: dict) -> dict:
    import json
    import urllib.request

    req = urllib.request.Request(
        base + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def start_serve(args: list[str]) -> tuple[subprocess.Popen, str]:
    """`edgespec serve ARGS --port 0` as a subprocess, and its base URL once it serves."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "edgespec.cli", "serve", "--port", "0", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    assert serve.stderr is not None
    line = serve.stderr.readline()
    while line and "serving" not in line:
        line = serve.stderr.readline()
    if "on http://" not in line:
        serve.kill()
        raise AssertionError(line + serve.stderr.read())
    return serve, line.rsplit(" on ", 1)[1].strip()


def last_event(resp) -> dict:
    """The last JSON event of a server-sent-event stream (an http.client response)."""
    import json

    events = [ln for ln in resp.read().decode().splitlines() if ln.startswith("data: {")]
    return json.loads(events[-1].removeprefix("data: "))
