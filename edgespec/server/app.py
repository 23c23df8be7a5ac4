"""The HTTP server: routes, authentication and the slots (a completion's answer:
edgespec.server.generate).

Python's ``ThreadingHTTPServer`` (HTTP/1.1, keep-alive): one thread per
connection parses and answers, and the ``Scheduler``'s slots (one thread and one
sequence each, ``--parallel``) run the model. A
stream is sent with chunked transfer encoding (close-delimited to an HTTP/1.0
client); a failed write means the client went away and cancels its job, and
while a handler waits for its slot it polls its socket for the same reason.
Every error leaves as JSON in OpenAI's shape; nothing a request sends reaches
a slot unchecked.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from ..backend import limit_arenas, on_rpc_worker_lost, stay_up_on_worker_loss, trim_heap
from ..completion.session import (
    DEFAULT_MAX_LINES,
    CodeRules,
    CompletionSession,
)
from ..context_overflow import ERROR, check_mode
from ..errors import InvalidParameterError, RpcWorkerLost
from ..grammar.tools import special_tokens, tool_grammar
from ..tools import ToolError
from ..tools.formats import GENERIC, detect
from .errors import ApiError, bad_request, from_exception
from .fields import parse_json
from .generate import Build, Prepared, generate
from .metrics import Metrics, render
from .overflow import chat_build
from .requests import (
    Options,
    parse_chat,
    parse_completions,
    parse_infill,
    parse_native,
)
from .responses import InfillFormat, OpenAIFormat, ResponseFormat
from .slots import DEFAULT_MAX_QUEUE, Scheduler
from .tool_fields import tool_error
from .transport import JsonHandler
from .utility_endpoints import detokenize, props, tokenize

DEFAULT_MAX_BODY = 4 * 1024 * 1024
API_KEY_ENV = "EDGESPEC_API_KEY"


def check_api_key(key: str | None) -> None:
    """Refuse an API key that clients cannot send as it is.

    Only printable ASCII, without spaces at its ends, reaches the server the same
    from every client: a header's other bytes are each library's choice (latin-1,
    UTF-8, or an error), http.server reads them as latin-1, a Bearer token is
    ASCII (RFC 6750), and header values lose their outer spaces.
    """
    if key and not (key.isascii() and key.isprintable() and key == key.strip()):
        raise InvalidParameterError(
            "the API key must be printable ASCII, without spaces at its ends "
            "(HTTP clients send nothing else alike)"
        )


class EdgespecServer(ThreadingHTTPServer):
    """An HTTP server around one CompletionSession and its slots (edgespec.server.slots).

    ``after_loss(message)`` is called on a lost RPC worker, before its jobs fail (the
    supervised child of edgespec.server.supervisor says so and ends itself there).
    ``context_overflow``: a chat longer than the context is refused ("error") or loses
    its oldest messages ("truncate-middle", edgespec.context_overflow)."""

    daemon_threads = True
    block_on_close = False  # shutting down never waits for a client's connection
    request_queue_size = 128  # connections waiting for accept (socketserver's 5 reset bursts)
    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        session: CompletionSession,
        *,
        api_key: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        log: Callable[[str], None] | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        after_loss: Callable[[str], None] | None = None,
        context_overflow: str = ERROR,
    ) -> None:
        check_api_key(api_key)
        self.context_overflow = check_mode(context_overflow)
        self.after_loss = after_loss
        self.session = session
        self.scheduler = Scheduler(session.slot_sessions(), max_queue=max_queue)
        self.api_key = api_key or None
        self.max_body = max_body
        self.log = log or (lambda _msg: None)
        self.started = int(time.time())
        self.metrics = Metrics()
        if getattr(session.target, "rpc", ()):
            # a lost worker ends the requests on it, not the server (see the backend's
            # stay_up_on_worker_loss): /health says so, and new requests get a 503
            stay_up_on_worker_loss()
            on_rpc_worker_lost(self._worker_lost)
        limit_arenas()  # a thread per connection: see edgespec.backend.heap
        super().__init__(address, Handler)

    def _worker_lost(self, message: str) -> None:
        if self.after_loss is None:
            self.log(f"error: {message}; the target is gone: restart the server to reload it")
        else:
            self.after_loss(message)
        self.scheduler.fail_all(RpcWorkerLost(message))

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection on its thread, then give the C heap's free pages back
        (at most once a second; see edgespec.backend.heap)."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            trim_heap()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection's unexpected failure: a client that reset it is no news."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, ConnectionError | TimeoutError):
            self.log(f"error on a connection from {client_address[0]}: {exc!r}")

    def close(self) -> None:
        """Stop serving (call from another thread than serve_forever's) and free the socket."""
        self.shutdown()
        self.server_close()
        self.scheduler.stop()


class Handler(JsonHandler):
    """One connection: route each request, answer in JSON or server-sent events."""

    server: EdgespecServer
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

    def send_response(self, code: int, message: str | None = None) -> None:
        """Send the status line, and count the answer by route for /metrics."""
        route = getattr(self, "_route", None) or "other"
        self.server.metrics.record_request(route, code)
        super().send_response(code, message)

    def _dispatch(self) -> None:
        self._streaming = False
        self._probed = False
        self._raw = b""
        self._route = None
        try:
            path = urlsplit(self.path).path.rstrip("/") or "/"
            self._route = path if path in ROUTES else None
            if path != "/health":
                self._check_auth()  # before the body: a refused client's body is never read
            self._read_body()
            routes = ROUTES.get(path)
            if routes is None:
                raise ApiError(404, f"no such route: {path}", code="not_found")
            route = routes.get(self.command)
            if route is None and self.command == "HEAD":  # a GET's headers, no body
                route = routes.get("GET")
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
                self._send_json(err.status, err.body(), err.headers)
        finally:
            self._route = None  # http.server's own errors on this connection: "other"

    # ------------------------------------------------------------------ routes

    def _health(self) -> None:
        self._send_json(*self.server.scheduler.health())

    def _slots(self) -> None:
        self._send_json(200, [slot.state() for slot in self.server.scheduler.slots])  # type: ignore[arg-type]

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

    def _tokenize(self) -> None:
        self._send_json(200, tokenize(self.server.session, parse_json(self._raw)))

    def _detokenize(self) -> None:
        self._send_json(200, detokenize(self.server.session, parse_json(self._raw)))

    def _props(self) -> None:
        self._send_json(200, props(self.server.session))

    def _metrics(self) -> None:
        sch = self.server.scheduler
        families = self.server.metrics.families(
            processing=sch.processing,
            deferred=sch.queued,
            worker=sch.counts(),
            slots=[slot.state() for slot in sch.slots],
        )
        data = render(families).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True

    def _completions(self) -> None:
        call = parse_completions(parse_json(self._raw), DEFAULT_MAX_LINES)
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

        fmt = OpenAIFormat(
            s,
            chat=False,
            include_usage=call.opts.include_usage,
            logprobs=call.opts.logprobs is not None,
            text_offset=len(call.prompt) if isinstance(call.prompt, str) else 0,
        )
        self._generate(build, call.opts, "prompt", fmt, code=call.suffix is not None)

    def _chat(self) -> None:
        call = parse_chat(parse_json(self._raw))
        s = self.server.session
        fmt = detect(s.chat_format.template)
        opts, tools = call.opts, None
        if call.tools is not None:
            try:
                grammar = tool_grammar(call.tools, fmt, special_tokens(s.target, fmt))
            except ToolError as e:
                raise tool_error(e, legacy=call.legacy) from None
            opts = dataclasses.replace(opts, grammar=grammar)
            if fmt != GENERIC:  # the template renders the tools itself
                tools = [t.openai() for t in call.tools.offered()]
        self._generate(
            chat_build(s, call.messages, fmt, call.tools, tools, max_tokens=opts.max_tokens,
                       mode=self.server.context_overflow),  # fmt: skip
            opts,
            "messages",
            OpenAIFormat(
                s,
                chat=True,
                include_usage=opts.include_usage,
                logprobs=opts.logprobs is not None,
                tools=None if call.tools is None else (call.tools, fmt),
                legacy=call.legacy,
            ),
        )

    def _native(self) -> None:
        call = parse_native(parse_json(self._raw))
        s = self.server.session

        def build() -> tuple[list[int], CodeRules | None, Prepared]:
            if isinstance(call.prompt, list):
                return s.check_tokens(call.prompt), None, {}
            return s.text_prompt(call.prompt), None, {}

        fmt = InfillFormat(
            s,
            stop_words=call.opts.stop,
            response_fields=call.response_fields,
            probs=call.opts.logprobs is not None,
        )
        self._generate(build, call.opts, "prompt", fmt)

    def _infill(self) -> None:
        call = parse_infill(parse_json(self._raw), DEFAULT_MAX_LINES)
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

        fmt = InfillFormat(
            s,
            stop_words=call.opts.stop,
            response_fields=call.response_fields,
            probs=call.opts.logprobs is not None,
        )
        self._generate(build, call.opts, "input_prefix", fmt, code=True)

    # ------------------------------------------------------------------ generation

    def _generate(
        self, build: Build, opts: Options, param: str, fmt: ResponseFormat, *, code: bool = False
    ) -> None:
        generate(self, build, opts, param, fmt, code=code)


ROUTES: dict[str, dict[str, Callable[[Handler], None]]] = {
    "/health": {"GET": Handler._health},
    "/v1/models": {"GET": Handler._models},
    "/models": {"GET": Handler._models},
    "/v1/completions": {"POST": Handler._completions},
    "/completions": {"POST": Handler._completions},
    "/v1/chat/completions": {"POST": Handler._chat},
    "/chat/completions": {"POST": Handler._chat},
    "/infill": {"POST": Handler._infill},
    "/completion": {"POST": Handler._native},  # llama-server's format; /completions is OpenAI's
    "/tokenize": {"POST": Handler._tokenize},
    "/detokenize": {"POST": Handler._detokenize},
    "/props": {"GET": Handler._props},
    "/metrics": {"GET": Handler._metrics},
    "/slots": {"GET": Handler._slots},
}


def serve(server: EdgespecServer) -> None:
    """Serve until interrupted, then shut down cleanly."""
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        print("edgespec: shutting down", file=sys.stderr)
    finally:
        server.server_close()
        server.scheduler.stop()
