"""The HTTP server: routes, authentication, body limits and server-sent events.

Python's ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive): one thread per
connection parses and answers, and one ``Worker`` thread runs the model. A
stream is sent with chunked transfer encoding (close-delimited to an HTTP/1.0
client); a failed write means the client went away and cancels its job, and
while a handler waits for the worker it polls its socket for the same reason.
Every error leaves as JSON in OpenAI's shape; nothing a request sends reaches
the worker unchecked.
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import sys
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from ..completion import (
    DEFAULT_MAX_LINES,
    CodeRules,
    CompletionRequest,
    CompletionResult,
    CompletionSession,
)
from ..errors import EdgespecError
from .errors import ApiError, bad_request, from_exception
from .requests import Options, parse_chat, parse_completions, parse_infill, parse_json
from .responses import OpenAIFormat, infill_body, infill_chunk
from .worker import Worker

DEFAULT_MAX_BODY = 4 * 1024 * 1024
API_KEY_ENV = "EDGESPEC_API_KEY"

#: What the worker yields before the completion: the prompt's size and how it was built.
Prepared = dict[str, Any]
Build = Callable[[], tuple[list[int], CodeRules | None, Prepared]]


class EdgespecServer(ThreadingHTTPServer):
    """An HTTP server around one CompletionSession and its worker thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        session: CompletionSession,
        *,
        api_key: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.session = session
        self.worker = Worker()
        self.api_key = api_key or None
        self.max_body = max_body
        self.log = log or (lambda _msg: None)
        self.started = int(time.time())
        path = session.target.path
        self.model_names = {session.name, path.name, path.stem}
        super().__init__(address, Handler)

    def close(self) -> None:
        """Stop serving (call from another thread than serve_forever's) and free the socket."""
        self.shutdown()
        self.server_close()
        self.worker.stop()


class Handler(BaseHTTPRequestHandler):
    """One connection: route each request, answer in JSON or server-sent events."""

    server: EdgespecServer
    protocol_version = "HTTP/1.1"
    server_version = "edgespec"
    timeout = 60  # seconds a connection may stay silent (idle keep-alive, slow body)

    # ------------------------------------------------------------------ plumbing

    def do_GET(self) -> None:
        """GET requests."""
        self._dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        """Request lines go to the server's log callback."""
        self.server.log(f"{self.address_string()} {format % args}")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (bad request line, headers too long) as JSON too."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # an unparsable request line: answer in 1.0
            self.request_version = "HTTP/1.0"
        self._send_json(code, ApiError(code, message or explain or "bad request").body())

    def _dispatch(self) -> None:
        self._streaming = False
        self._raw = b""
        try:
            self._read_body()
            path = urlsplit(self.path).path.rstrip("/") or "/"
            if path != "/health":
                self._check_auth()
            routes = ROUTES.get(path)
            if routes is None:
                raise ApiError(404, f"no such route: {path}", code="not_found")
            route = routes.get(self.command)
            if route is None:
                raise ApiError(
                    405, f"{self.command} is not allowed on {path}", code="method_not_allowed"
                )
            route(self)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as exc:  # one request's failure never stops the server
            err = from_exception(exc)
            if err.status >= 500:
                self.server.log(f"error: {type(exc).__name__}: {exc}")
            if self._streaming:  # headers already sent: report in the stream, then close
                self.close_connection = True
                try:
                    self._sse(err.body())
                    self._end_stream()
                except OSError:
                    pass
            else:
                self._send_json(err.status, err.body())

    def _read_body(self) -> None:
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
        self._raw = self.rfile.read(n)
        if len(self._raw) < n:
            raise ConnectionError("the client sent less than its Content-Length")

    def _read_chunked(self, limit: int) -> bytes:
        """A chunked body (RFC 9112 7.1), refused past ``limit`` bytes."""
        out = bytearray()
        total = 0
        while True:
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
            data = self.rfile.read(size)
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
            got = self.rfile.read(min(n, 1 << 16))
            if not got:
                raise ConnectionError("the client closed mid-body")
            n -= len(got)

    def _check_auth(self) -> None:
        key = self.server.api_key
        if key is None:
            return
        given = self.headers.get("X-Api-Key") or ""
        auth = self.headers.get("Authorization") or ""
        if auth[:7].lower() == "bearer ":
            given = auth[7:].strip()
        if not hmac.compare_digest(given.encode("utf-8", "replace"), key.encode("utf-8")):
            raise ApiError(
                401,
                "invalid or missing API key",
                kind="authentication_error",
                code="invalid_api_key",
            )

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _start_stream(self) -> None:
        self._chunked = self.request_version == "HTTP/1.1"
        self.send_response(200)
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
        """True when the peer closed the connection (polled while the worker runs)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    # ------------------------------------------------------------------ routes

    def _health(self) -> None:
        w = self.server.worker
        self._send_json(
            200,
            {
                "status": "ok",
                "busy": w.busy,
                "queued": w.queued,
                "served": w.served,
                "cancelled": w.cancelled,
                "failed": w.failed,
            },
        )

    def _models(self) -> None:
        s = self.server.session
        meta = {
            "n_ctx": s.target.n_ctx,
            "n_vocab": s.target.n_vocab,
            "fim": s.has_fim,
            "chat_template": s.chat_template is not None,
            "drafter": s.drafter_name,
            "gamma": s.gamma,
        }
        model = {
            "id": s.name,
            "object": "model",
            "created": self.server.started,
            "owned_by": "edgespec",
            "meta": meta,
        }
        self._send_json(200, {"object": "list", "data": [model]})

    def _check_model(self, name: str | None) -> None:
        if name is not None and name not in self.server.model_names:
            raise ApiError(
                404,
                f"the model '{name}' does not exist; this server has '{self.server.session.name}'",
                param="model",
                code="model_not_found",
            )

    def _completions(self) -> None:
        call = parse_completions(parse_json(self._raw), DEFAULT_MAX_LINES)
        self._check_model(call.opts.model)
        s = self.server.session
        if isinstance(call.prompt, list) and call.suffix is not None:
            raise bad_request("'suffix' needs a text prompt", param="suffix")

        def build() -> tuple[list[int], CodeRules | None, Prepared]:
            if isinstance(call.prompt, list):
                return s.check_tokens(call.prompt), None, {}
            if call.suffix is None:
                return s.text_prompt(call.prompt), None, {}
            fp = s.fim_prompt(call.prompt, call.suffix, max_tokens=call.opts.max_tokens)
            rules = CodeRules(call.suffix, fp.prefix_at_line_start, call.max_lines)
            return fp.tokens, rules, {"fim": fp.fim, "truncated": fp.truncated}

        self._generate(build, call.opts, "prompt", OpenAIFormat(s, chat=False))

    def _chat(self) -> None:
        call = parse_chat(parse_json(self._raw))
        self._check_model(call.opts.model)
        s = self.server.session
        self._generate(
            lambda: (s.chat_prompt(call.messages), None, {}),
            call.opts,
            "messages",
            OpenAIFormat(s, chat=True),
        )

    def _infill(self) -> None:
        call = parse_infill(parse_json(self._raw), DEFAULT_MAX_LINES)
        self._check_model(call.opts.model)
        s = self.server.session

        def build() -> tuple[list[int], CodeRules | None, Prepared]:
            fp = s.fim_prompt(
                call.prefix,
                call.suffix,
                extra=call.extra,
                prompt=call.prompt,
                max_tokens=call.opts.max_tokens,
            )
            rules = CodeRules(call.suffix, fp.prefix_at_line_start, call.max_lines, call.min_indent)
            return fp.tokens, rules, {"fim": fp.fim, "truncated": fp.truncated}

        self._generate(build, call.opts, "input_prefix", None)

    # ------------------------------------------------------------------ generation

    def _generate(self, build: Build, opts: Options, param: str, fmt: OpenAIFormat | None) -> None:
        """Run a completion on the worker; answer in OpenAI's format, or llama.cpp's (fmt None)."""
        s = self.server.session

        def work(cancelled: Callable[[], bool]):
            tokens, rules, info = build()
            s.check_prompt(tokens)
            yield {"prompt_tokens": len(tokens), **info}
            req = CompletionRequest(
                tokens, opts.max_tokens, opts.sampling, opts.seed, opts.stop, rules
            )
            yield from s.run(req, cancelled)

        job = self.server.worker.submit(work)
        items = job.items(poll=self._client_gone)
        try:
            prepared: Prepared | None = next(items, None)
        except EdgespecError as e:
            raise from_exception(e, param) from None
        if prepared is None:  # the client went away while queued
            self.close_connection = True
            return
        n_prompt = prepared["prompt_tokens"]
        if not opts.stream:
            result = None
            for item in items:
                if isinstance(item, CompletionResult):
                    result = item
            if result is None:
                self.close_connection = True
                return
            if fmt is None:
                body = infill_body(
                    s,
                    result,
                    prompt_tokens=n_prompt,
                    stop_words=opts.stop,
                    truncated=prepared.get("truncated", False),
                    fim=prepared.get("fim", False),
                    streamed=False,
                )
            else:
                body = fmt.body(result, n_prompt)
            self._send_json(200, body)
            return
        self._start_stream()
        try:
            first = fmt.first_chunk() if fmt is not None else None
            if first is not None:
                self._sse(first)
            n = 0
            for item in items:
                if isinstance(item, str):
                    n += 1
                    self._sse(fmt.chunk(item) if fmt else infill_chunk(item, n, n_prompt))
                elif fmt is not None:
                    for chunk in fmt.last_chunks(item, n_prompt, opts.include_usage):
                        self._sse(chunk)
                    self._sse("[DONE]")
                else:
                    self._sse(
                        infill_body(
                            s,
                            item,
                            prompt_tokens=n_prompt,
                            stop_words=opts.stop,
                            truncated=prepared.get("truncated", False),
                            fim=prepared.get("fim", False),
                            streamed=True,
                        )
                    )
            self._end_stream()
        except OSError:  # the client went away: stop its generation
            job.cancel.set()
            self.close_connection = True


ROUTES: dict[str, dict[str, Callable[[Handler], None]]] = {
    "/health": {"GET": Handler._health},
    "/v1/models": {"GET": Handler._models},
    "/models": {"GET": Handler._models},
    "/v1/completions": {"POST": Handler._completions},
    "/completions": {"POST": Handler._completions},
    "/v1/chat/completions": {"POST": Handler._chat},
    "/chat/completions": {"POST": Handler._chat},
    "/infill": {"POST": Handler._infill},
}


def _too_large(n: int, limit: int) -> ApiError:
    return ApiError(413, f"the body is {n} bytes or more; the limit is {limit}",
                    code="request_too_large")  # fmt: skip


def serve(server: EdgespecServer) -> None:
    """Serve until interrupted, then shut down cleanly."""
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("edgespec: shutting down", file=sys.stderr)
    finally:
        server.server_close()
        server.worker.stop()
