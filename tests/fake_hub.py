"""A local stand-in for the Hugging Face Hub's file endpoints, for offline tests.

Two ``http.server`` instances on 127.0.0.1 (free ports), each in a thread:

* the *hub* answers ``HEAD/GET /{owner}/{repo}/resolve/{revision}/{filename}`` the
  way huggingface.co does for an LFS file: ``302`` to the CDN with ``X-Repo-Commit``,
  ``X-Linked-Etag`` (the sha256), ``X-Linked-Size`` and ``ETag``; ``401`` with
  ``X-Error-Code: GatedRepo`` / ``RepoNotFound`` for gated or unknown repos, ``404``
  with ``RevisionNotFound`` / ``EntryNotFound``;
* the hub also answers ``GET /api/models/{owner}/{repo}/tree/{revision}`` (what
  ``HfApi.list_repo_tree`` asks) with every file: path, size, and the ``lfs`` sha256
  for ``.gguf`` files (as the Hub stores them in LFS), folders too;
* the *CDN* (another origin, as on the real Hub, so clients stop following the
  HEAD's redirect there) serves the bytes with ``ETag``, ``Accept-Ranges`` and
  ``Range: bytes=N-`` (``206`` + ``Content-Range``).

Knobs for failure tests: ``drops`` (for each of the next GETs, send only that many
body bytes, then close the connection), ``corrupt`` (serve altered bytes of the same
length), ``gated``, ``cdn_down`` (the CDN closes every connection without answering,
while the hub's metadata still answers). Every request is logged in ``requests``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Request:
    server: str
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class FakeHub:
    """Files by (repo, filename); ``url`` is the value for HF_ENDPOINT."""

    files: dict[tuple[str, str], bytes] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    revisions: set[str] = field(default_factory=lambda: {"main", COMMIT})
    drops: list[int] = field(default_factory=list)
    corrupt: bool = False
    cdn_down: bool = False
    requests: list[Request] = field(default_factory=list)
    url: str = ""
    cdn_url: str = ""

    def add(self, repo: str, filename: str, data: bytes) -> str:
        """Serve ``data`` as ``repo/filename``; returns its sha256."""
        self.files[(repo, filename)] = data
        return hashlib.sha256(data).hexdigest()

    def gets(self, server: str = "cdn") -> list[Request]:
        """The GET requests one of the two servers received."""
        return [r for r in self.requests if r.server == server and r.method == "GET"]

    # ------------------------------------------------------------------ serving

    def _blob(self, sha: str) -> bytes | None:
        for data in self.files.values():
            if hashlib.sha256(data).hexdigest() == sha:
                return data
        return None

    def tree(self, h: BaseHTTPRequestHandler, parts: list[str]) -> None:
        repo, revision = f"{parts[2]}/{parts[3]}", parts[5]
        if repo in self.gated:
            msg = f"Access to model {repo} is restricted. You must be authenticated."
            return _reply(h, 401, {"X-Error-Code": "GatedRepo", "X-Error-Message": msg})
        if not any(r == repo for r, _ in self.files):
            msg = "Repository not found"
            return _reply(h, 401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": msg})
        if revision not in self.revisions:
            return _reply(h, 404, {"X-Error-Code": "RevisionNotFound"})
        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for (r, name), data in sorted(self.files.items()):
            if r != repo:
                continue
            bits = name.split("/")
            for i in range(1, len(bits)):
                folders.add("/".join(bits[:i]))
            blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            entry: dict[str, Any] = {"type": "file", "oid": blob, "size": len(data), "path": name}
            if name.endswith(".gguf"):
                sha = hashlib.sha256(data).hexdigest()
                entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
            entries.append(entry)
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in folders]
        body = json.dumps(sorted(entries, key=lambda e: e["path"])).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def resolve(self, h: BaseHTTPRequestHandler) -> None:
        parts = h.path.split("?")[0].lstrip("/").split("/")
        if len(parts) >= 6 and parts[:2] == ["api", "models"] and parts[4] == "tree":
            return self.tree(h, parts)
        if len(parts) < 5 or parts[2] != "resolve":
            return _reply(h, 404, {"X-Error-Code": "RepoNotFound"})
        repo, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
        if repo in self.gated:
            msg = f"Access to model {repo} is restricted. You must be authenticated."
            return _reply(h, 401, {"X-Error-Code": "GatedRepo", "X-Error-Message": msg})
        if not any(r == repo for r, _ in self.files):
            msg = "Repository not found"
            return _reply(h, 401, {"X-Error-Code": "RepoNotFound", "X-Error-Message": msg})
        if revision not in self.revisions:
            return _reply(h, 404, {"X-Error-Code": "RevisionNotFound"})
        data = self.files.get((repo, filename))
        if data is None:
            return _reply(h, 404, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT})
        sha = hashlib.sha256(data).hexdigest()
        _reply(
            h,
            302,
            {
                "Location": f"{self.cdn_url}/cdn/{sha}?X-Amz-Signature=fake",
                "X-Repo-Commit": COMMIT,
                "X-Linked-Etag": f'"{sha}"',
                "X-Linked-Size": str(len(data)),
                "ETag": '"0f2e8f3e0d9c0b1a2f3e4d5c6b7a8f9e0d1c2b3a"',
            },
        )

    def cdn(self, h: BaseHTTPRequestHandler) -> None:
        if self.cdn_down:
            h.close_connection = True
            return
        sha = h.path.split("?")[0].rsplit("/", 1)[-1]
        data = self._blob(sha)
        if data is None:
            return _reply(h, 404, {})
        if self.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        start, status = 0, 200
        rng = h.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            status = 206
        body = data[start:]
        headers = {"ETag": f'"{sha}"', "Accept-Ranges": "bytes", "Content-Length": str(len(body))}
        if status == 206:
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        if h.command == "HEAD":
            return
        if self.drops:
            h.wfile.write(body[: self.drops.pop(0)])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(body)


def _reply(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", "0")
    h.end_headers()


def _handler(hub: FakeHub, name: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            hub.requests.append(Request(name, self.command, self.path, headers))
            (hub.resolve if name == "hub" else hub.cdn)(self)

        do_GET = do_HEAD = _serve

        def log_message(self, *_args: Any) -> None:  # keep test output clean
            pass

    return Handler


class running:
    """Context manager: start both servers for ``hub``, stop them on exit."""

    def __init__(self, hub: FakeHub) -> None:
        self.hub = hub
        self.servers = [
            ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub, name)) for name in ("hub", "cdn")
        ]
        for s in self.servers:
            s.daemon_threads = True

    def __enter__(self) -> FakeHub:
        hub_srv, cdn_srv = self.servers
        self.hub.url = f"http://127.0.0.1:{hub_srv.server_address[1]}"
        # Another host name for the same loopback server, as the real CDN is another host:
        # huggingface_hub 2.0 follows a HEAD's redirect when only the port differs.
        self.hub.cdn_url = f"http://localhost:{cdn_srv.server_address[1]}"
        self.threads = [
            threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
            for s in self.servers
        ]
        for t in self.threads:
            t.start()
        return self.hub

    def __exit__(self, *_exc: object) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()
