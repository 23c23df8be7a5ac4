"""Real servers on free loopback ports, each in a thread, over the synthetic models."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edgespec.completion.session import CompletionSession, load_session
from edgespec.server import EdgespecServer

API_KEY = "sk-test-edgespec"


@dataclass
class Running:
    """A server running in a thread, and how to reach it."""

    server: EdgespecServer
    session: CompletionSession
    base: str
    api_key: str | None = None

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        key: str | None = "default",
    ) -> tuple[int, Any]:
        """(status, parsed JSON body or text) of one plain-HTTP request."""
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        h = {"Content-Type": "application/json", **(headers or {})}
        k = self.api_key if key == "default" else key
        if k:
            h["Authorization"] = f"Bearer {k}"
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def health(self) -> dict[str, Any]:
        """GET /health (no key needed)."""
        status, body = self.request("GET", "/health", key=None)
        assert status == 200
        return body


def start(session: CompletionSession, **kwargs: Any) -> Running:
    """Start a server for session on a free 127.0.0.1 port."""
    server = EdgespecServer(("127.0.0.1", 0), session, **kwargs)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()  # fmt: skip
    host, port = server.server_address[:2]
    return Running(server, session, f"http://{host}:{port}", kwargs.get("api_key"))


@pytest.fixture(scope="session")
def fim_session(synthetic_models: dict[str, Path]) -> CompletionSession:
    """The synthetic target with FIM tokens and a chat template, n-gram drafting, gamma 4."""
    return load_session(str(synthetic_models["target_fim"]), "ngram", gamma=4, n_ctx=1024)


@pytest.fixture(scope="session")
def plain_session(synthetic_models: dict[str, Path]) -> CompletionSession:
    """The synthetic target without FIM tokens or chat template, drafting for itself."""
    return load_session(
        str(synthetic_models["target"]),
        str(synthetic_models["draft_same"]),
        gamma=3,
        n_ctx=1024,
    )


@pytest.fixture(scope="module")
def fim_server(fim_session: CompletionSession) -> Iterator[Running]:
    """A server over fim_session, no API key."""
    running = start(fim_session)
    yield running
    running.server.close()


@pytest.fixture(scope="module")
def plain_server(plain_session: CompletionSession) -> Iterator[Running]:
    """A server over plain_session, with an API key and a 64 KiB body limit."""
    running = start(plain_session, api_key=API_KEY, max_body=64 * 1024)
    yield running
    running.server.close()
