"""HTTP plumbing for a JSON API: bodies (with a size limit), JSON answers, server-sent events.

``JsonHandler`` extends http.server's handler: a body is read from its
Content-Length or chunked encoding and refused past the server's ``max_body``
(read and dropped first, so the client sees the 413, unless it is huge); every
error, including http.server's own (a garbled request line, headers too long),
is JSON in OpenAI's shape; a stream is sent with chunked transfer encoding, or
delimited by closing the connection for an HTTP/1.0 client.
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from .errors import ApiError, bad_request

_LINGER_S = 2.0  # how long a refused body is read and dropped before the connection closes


class JsonHandler(BaseHTTPRequestHandler):
    """Bodies in, JSON and server-sent events out. The server must have ``max_body``."""

    protocol_version = "HTTP/1.1"
    _raw = b""
    _streaming = False
    _chunked = False
    _probed = False  # a 100 Continue was sent to see whether the client is still there
    _linger = False  # the answer refused a body it did not read: close gently

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (bad request line, headers too long) as JSON too."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # an unparsable request line: answer in 1.0
            self.request_version = "HTTP/1.0"
        self._send_json(code, ApiError(code, message or explain or "bad request").body())

    def _check_auth(self) -> None:
        """401 unless the request carries the server's ``api_key`` (None: no key)."""
        key = self.server.api_key
        if key is None:
            return
        given = self.headers.get("X-Api-Key") or ""
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        # http.server decodes header bytes as latin-1: encoding back gives the bytes sent
        if not hmac.compare_digest(given.encode("latin-1", "replace"), key.encode("ascii")):
            self._refuse_unread_body()
            raise ApiError(
                401,
                "invalid or missing API key",
                kind="authentication_error",
                code="invalid_api_key",
            )

    def _read_body(self) -> None:
        """Read the body within ``timeout`` seconds in all (a 408 after), so a client
        that trickles its body, or announces one and never sends it, cannot hold
        a connection forever."""
        budget = getattr(self, "timeout", None)
        self._body_deadline = None if budget is None else time.monotonic() + budget
        try:
            self._read_body_within()
        except TimeoutError:
            self.close_connection = True
            self._linger = True  # the client may still be sending: close gently
            raise ApiError(
                408, f"the request body did not arrive within {budget:g} s", code="timeout"
            ) from None
        finally:
            if budget is not None:
                self.connection.settimeout(budget)

    def _tick(self) -> None:
        """Let the next socket read wait only for what is left of the body's time."""
        if self._body_deadline is not None:
            left = self._body_deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.connection.settimeout(left)

    def _read_exactly(self, n: int) -> bytes:
        parts = []
        while n > 0:
            self._tick()
            got = self.rfile.read1(min(n, 1 << 16))
            if not got:
                break
            parts.append(got)
            n -= len(got)
        return b"".join(parts)

    def _read_body_within(self) -> None:
        limit = self.server.max_body
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self._raw = self._read_chunked(limit)
            return
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise ApiError(501, "only chunked transfer encoding is supported", code="not_supported")
        length = self.headers.get("Content-Length")
        if length is None:
            if self.command == "POST":
                raise ApiError(411, "a Content-Length is required", code="length_required")
            return
        try:
            n = int(length)
            if n < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            raise bad_request("bad Content-Length") from None
        if n > limit:
            self._discard(n)
            raise _too_large(n, limit)
        self._raw = self._read_exactly(n)
        if len(self._raw) < n:
            raise ConnectionError("the client sent less than its Content-Length")

    def _read_chunked(self, limit: int) -> bytes:
        """A chunked body (RFC 9112 7.1), refused past ``limit`` bytes."""
        out = bytearray()
        total = 0
        while True:
            self._tick()
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
                if size < 0:
                    raise ValueError
            except ValueError:
                self.close_connection = True
                raise bad_request("bad chunked encoding") from None
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailer fields
                    pass
                if total > limit:
                    raise _too_large(total, limit)
                return bytes(out)
            total += size
            if total > max(4 * limit, 16 << 20):  # too much to read just to refuse: close
                self.close_connection = True
                raise _too_large(total, limit)
            data = self._read_exactly(size)
            if len(data) < size:
                raise ConnectionError("the client closed mid-body")
            if total <= limit:
                out += data
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _discard(self, n: int) -> None:
        """Read and drop a refused body, so the client sees the answer (very large: close)."""
        if n > max(4 * self.server.max_body, 16 << 20):
            self.close_connection = True
            return
        while n > 0:
            self._tick()
            got = self.rfile.read1(min(n, 1 << 16))
            if not got:
                raise ConnectionError("the client closed mid-body")
            n -= len(got)

    def _send_json(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _start_stream(self, headers: dict[str, str] | None = None) -> None:
        self._chunked = self.request_version == "HTTP/1.1"
        self.send_response(200)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        if self._chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._streaming = True

    def _write(self, data: bytes) -> None:
        if self._chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        self.wfile.write(data)
        self.wfile.flush()

    def _sse(self, obj: dict[str, Any] | str) -> None:
        text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
        self._write(f"data: {text}\n\n".encode())

    def _end_stream(self) -> None:
        if self._chunked:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        self._streaming = False

    def _client_gone(self) -> bool:
        """True when the peer is gone (polled while the request waits for the worker).

        End of file alone is no proof: a client that half-closed its socket
        (shutdown(SHUT_WR)) after sending is still reading. Only an error or a
        hang-up counts. At the first end of file, before any answer began, an
        HTTP/1.1 client is sent an interim ``100 Continue`` (which every HTTP/1.1
        client must skip): a half-closed client takes it, a closed socket answers
        it with a reset, and the next poll sees the hang-up.
        """
        if not hasattr(select, "poll"):  # no poll(): wait for a write to fail
            return False
        try:
            poller = select.poll()
            poller.register(self.connection, select.POLLIN)  # ERR and HUP are always reported
            events = 0
            for _fd, ev in poller.poll(0):
                events |= ev
            if events & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
                return True
            if (
                events & select.POLLIN
                and not self._probed
                and not self._streaming
                and self.request_version == "HTTP/1.1"
                and self.connection.recv(1, socket.MSG_PEEK) == b""
            ):
                self._probed = True
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.wfile.flush()
            return False
        except (OSError, ValueError):
            return True

    def _refuse_unread_body(self) -> None:
        """Close after this answer without reading the announced body (a refused
        client's body is never read); see ``finish`` for how it is closed."""
        self.close_connection = True
        if self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get(
            "Transfer-Encoding"
        ):
            self._linger = True

    def finish(self) -> None:
        """Flush the answer; after a refused body, close gently.

        Closing a socket with unread data sends a reset, which can destroy the
        answer before the client reads it. So the write side is shut first (the
        client sees the whole answer and its end) and what the client still sends
        is read and dropped for a moment, as web servers' lingering close does.
        """
        super().finish()
        if not self._linger:
            return
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(_LINGER_S)
            left = max(self.server.max_body, 1 << 20)
            while left > 0:
                got = self.connection.recv(1 << 16)
                if not got:
                    break
                left -= len(got)
        except OSError:
            pass


def _too_large(n: int, limit: int) -> ApiError:
    return ApiError(413, f"the body is {n} bytes or more; the limit is {limit}",
                    code="request_too_large")  # fmt: skip
