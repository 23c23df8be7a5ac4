"""The front of a supervised server: forward each request to the child that holds
the models (edgespec.server.supervisor), or answer for it while it reloads.

Bodies and answers pass through unchanged, streams chunk by chunk as they come.
A client that goes away mid-answer closes the forwarded connection, so the child
cancels its job at once, as it would for the client itself. A child that ends
mid-answer ends the answer with an error naming why (the lost worker): a 503
before its headers, an error event in a stream after them.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import socket
import sys
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .errors import ApiError
from .metrics import render
from .supervisor import Supervisor
from .transport import JsonHandler

# hop-by-hop headers, and those this process writes itself
_NOT_FORWARDED = {
    "connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer",
    "upgrade", "proxy-connection", "expect", "host", "server", "date",
}  # fmt: skip
_WATCH_S = 0.25  # how often a forwarded request checks that its client is still there


class ProxyServer(ThreadingHTTPServer):
    """The address clients use; the models are in the Supervisor's child."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # connections waiting for accept (socketserver's 5 reset bursts)
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        supervisor: Supervisor,
        *,
        api_key: str | None,
        max_body: int,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.api_key = api_key or None
        self.max_body = max_body
        self.log = log or (lambda _msg: None)
        super().__init__(address, ProxyHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection's unexpected failure: a client that reset it is no news."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError | TimeoutError):
            self.log(f"error on a connection from {client_address[0]}: {exc!r}")


class ProxyHandler(JsonHandler):
    """One client connection: each request forwarded, or answered while reloading."""

    server: ProxyServer
    server_version = "edgespec"
    timeout = 60

    def do_GET(self) -> None:
        """Every method goes the same way."""
        self._streaming = self._probed = False
        self._raw = b""
        try:
            self._read_body()
            child = self.server.supervisor.state.child
            if child is None:
                self._answer_for_child()
            else:
                self._forward(child)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except ApiError as err:
            self._send_json(err.status, err.body(), err.headers)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """The child logs the requests it answers; this process only its own."""

    # ------------------------------------------------------------------ no child

    def _answer_for_child(self, reason: str | None = None) -> None:
        sup = self.server.supervisor
        with sup.lock:
            st = sup.state
            body, status, retry = st.health(), st.status, st.retry_after
            metrics = render(st.metrics())
            reason = reason or st.error
        path = urlsplit(self.path).path.rstrip("/") or "/"
        headers = {"Retry-After": str(max(1, math.ceil(retry)))}
        if path == "/health":
            self._send_json(503, body, headers)
            return
        self._check_auth()
        if path == "/metrics":
            self._send(200, metrics.encode(), "text/plain; version=0.0.4")
            return
        if status == "loading":
            message, code = "the model is loading", "loading"
        else:
            message = f"{reason}; reloading the target (attempt {body['attempt']})"
            code = "rpc_worker_lost" if body.get("lost_workers") else "target_restarting"
        err = ApiError(503, message, kind="server_error", code=code, headers=headers)
        self._send_json(err.status, err.body(), err.headers)

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    # ------------------------------------------------------------------ forwarding

    def _forward(self, child: tuple[str, int]) -> None:
        conn = http.client.HTTPConnection(*child, timeout=None)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _NOT_FORWARDED}
        if self._raw or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(self._raw))
        lock, done = threading.Lock(), threading.Event()
        watch = threading.Thread(target=self._watch, args=(conn, lock, done), daemon=True)
        try:
            try:
                conn.request(self.command, self.path, self._raw or None, headers)
                watch.start()
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException):
                if done.is_set() or self._gone:
                    raise ConnectionError from None
                self._answer_for_child(self.server.supervisor.wait_for_loss_reason())
                return
            with lock:  # (the watcher's 100 Continue probe stops here)
                self._streaming = True
            self._relay(resp)
        finally:
            done.set()
            conn.close()

    _gone = False

    def _watch(self, conn: http.client.HTTPConnection, lock: threading.Lock,
               done: threading.Event) -> None:  # fmt: skip
        """Close the forwarded connection once the client is gone: the child then
        cancels the job, as it would for its own client."""
        while not done.wait(_WATCH_S):
            with lock:
                gone = self._client_gone()
            if gone:
                self._gone = True
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)
                return

    def _relay(self, resp: http.client.HTTPResponse) -> None:
        chunked = resp.getheader("Transfer-Encoding", "").lower() == "chunked"
        stream = "text/event-stream" in (resp.getheader("Content-Type") or "")
        body = b""
        if not chunked:
            try:
                body = resp.read()
            except (OSError, http.client.HTTPException):
                if self._gone:
                    raise ConnectionError from None
                self._streaming = False
                self._answer_for_child(self.server.supervisor.wait_for_loss_reason())
                return
            if resp.status == 200 and urlsplit(self.path).path.rstrip("/") == "/metrics":
                with self.server.supervisor.lock:  # the child's, then the supervisor's
                    body += render(self.server.supervisor.state.metrics()).encode()
        self.send_response(resp.status, resp.reason)
        for name, value in resp.getheaders():
            if name.lower() not in _NOT_FORWARDED:
                self.send_header(name, value)
        if not chunked:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return
        self._chunked = self.request_version == "HTTP/1.1"
        if self._chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        while True:
            try:
                data = resp.read1(1 << 16)
            except (OSError, http.client.HTTPException):
                if self._gone:
                    raise ConnectionError from None
                if stream:  # the child ended mid-stream: say why in the stream
                    self._sse(self._lost_error().body())
                self.close_connection = True
                break
            if not data:
                break
            self._write(data)
        self._end_stream()

    def _lost_error(self) -> ApiError:
        reason = self.server.supervisor.wait_for_loss_reason() or "the model's process ended"
        code = "rpc_worker_lost" if "RPC worker" in reason else "target_restarting"
        return ApiError(503, reason, kind="server_error", code=code)
