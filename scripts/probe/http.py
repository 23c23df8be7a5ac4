"""Class 4: hostile HTTP against ``edgespec serve`` (raw requests over loopback)."""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .common import ClassStats, Outcome, edgespec_cmd, kill_group, run, spawn

HUGE_CTX = "999999999999"  # over edgespec's MAX_CTX (16,777,216): must be refused


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_of(head: bytes) -> int:
    try:
        return int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def send(port: int, raw: bytes, half_close: bool = True, timeout: float = 30) -> int | None:
    """Send raw bytes; the final status code (interim 1xx answers are skipped, as every
    HTTP/1.1 client must: edgespec sends 100 Continue to a half-closed client that
    waits), 0 if closed without one, None on timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(raw)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        buf = b""

        def read_until(mark: bytes) -> bool:
            nonlocal buf
            while mark not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                buf += chunk
            return True

        try:
            while read_until(b"\r\n") and 100 <= status_of(buf) < 200 and status_of(buf) != 101:
                if not read_until(b"\r\n\r\n"):  # an interim answer, then closed
                    return 0
                buf = buf.split(b"\r\n\r\n", 1)[1]
        except TimeoutError:
            return None
        except OSError:
            return 0
    return status_of(buf)


def req(method: str, path: str, body: bytes | None = None, headers: dict | None = None) -> bytes:
    h = {"Host": "127.0.0.1", "Connection": "close"}
    if body is not None:
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in h.items() if v is not None]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b"")


def js(obj) -> bytes:
    return json.dumps(obj).encode()


def http_cases() -> list[tuple[str, bytes, bool]]:
    """(label, raw request, half-close after sending)."""
    c: list[tuple[str, bytes, bool]] = []

    def add(label, raw, half=True):
        c.append((label, raw, half))

    for m in ("GET", "HEAD", "OPTIONS", "PUT", "DELETE", "PATCH", "POST", "TRACE", "BREW"):
        for path in ("/health", "/v1/models", "/v1/completions"):
            add(f"{m} {path}", req(m, path, b"" if m in ("POST", "PUT", "PATCH") else None))
    for path in (
        "/",
        "/v1",
        "/v1/completions/",
        "/../../etc/passwd",
        "/%00",
        "/v1/models?x=1",
        "/" + "a" * 8000,
        "/" + "a" * 100_000,
        "*",
    ):
        add(f"GET {path[:40]}", req("GET", path))
    comp = "/v1/completions"
    for label, body in (
        ("empty body", b""),
        ("{", b"{"),
        ("nul", b"nul"),
        ("[]", b"[]"),
        ("null", b"null"),
        ("1", b"1"),
        ('"x"', b'"x"'),
        ("invalid UTF-8", b'{"prompt": "\xff\xfe"}'),
        ("lone surrogate", b'{"prompt": "\\ud800"}'),
        ("BOM", b'\xef\xbb\xbf{"prompt": "hi", "max_tokens": 2}'),
        ("deep nesting [", b"[" * 100_000),
        ("deep nesting in prompt", b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("NaN", b'{"prompt": "hi", "temperature": NaN, "max_tokens": 2}'),
        ("Infinity", b'{"prompt": "hi", "top_p": Infinity, "max_tokens": 2}'),
        ("duplicate keys", b'{"prompt": "hi", "prompt": 5, "max_tokens": 2}'),
        ("huge int", b'{"prompt": "hi", "max_tokens": 1' + b"0" * 5000 + b"}"),
        ("valid", js({"prompt": "hi", "max_tokens": 2})),
    ):
        add(f"POST {comp} {label}", req("POST", comp, body))
    bad_values = [None, "x", -1, 1e308, 2**70, [], {}, True, [1, "a"]]
    fields = [
        "prompt",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "stop",
        "stream",
        "n",
        "logprobs",
        "echo",
        "model",
        "suffix",
        "presence_penalty",
        "frequency_penalty",
        "stream_options",
        "logit_bias",
    ]
    rng = random.Random(7)
    for f in fields:
        for v in rng.sample(bad_values, 3):
            body = {"prompt": "hi", "max_tokens": 2}
            body[f] = v
            add(f"POST {comp} {f}={v!r}"[:80], req("POST", comp, js(body)))
    chat = "/v1/chat/completions"
    for label, msgs in (
        ("messages string", "hi"),
        ("messages empty", []),
        ("message number", [5]),
        ("role number", [{"role": 5, "content": "hi"}]),
        ("role unknown", [{"role": "wizard", "content": "hi"}]),
        ("content list of parts", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
        ("content image part", [{"role": "user", "content": [{"type": "image_url"}]}]),
        ("content dict", [{"role": "user", "content": {"a": 1}}]),
        ("content missing", [{"role": "user"}]),
        ("valid", [{"role": "user", "content": "hi"}]),
    ):
        add(f"POST {chat} {label}", req("POST", chat, js({"messages": msgs, "max_tokens": 2})))
    for label, body in (
        ("prefix number", {"input_prefix": 5}),
        ("extra list of strings", {"input_prefix": "a", "input_extra": ["x"]}),
        ("extra bad dicts", {"input_prefix": "a", "input_extra": [{"filename": 5, "text": []}]}),
        ("valid", {"input_prefix": "def f(", "input_suffix": "):\n", "n_predict": 2}),
    ):
        add(f"POST /infill {label}", req("POST", "/infill", js(body)))
    short = js({"prompt": "hi"})
    for label, cl in (
        ("huge", "1000000000000"),
        ("over max-body", "4194305"),
        ("negative", "-5"),
        ("not a number", "abc"),
        ("hex", "0x10"),
        ("too long by 10", str(len(short) + 10)),
    ):
        add(f"Content-Length {label}", req("POST", comp, short, {"Content-Length": cl}))
    add(
        "Content-Length huge, client keeps connection open",
        req("POST", comp, short, {"Content-Length": "1000000"}),
        False,
    )
    add(
        "two Content-Length",
        req("POST", comp, short).replace(b"\r\n\r\n", b"\r\nContent-Length: 3\r\n\r\n", 1),
    )
    add("no Content-Length", req("POST", comp, short, {"Content-Length": None}))
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(short), short)
    add("chunked body", req("POST", comp, None, {"Transfer-Encoding": "chunked"}) + chunked)
    add(
        "bad chunked body",
        req("POST", comp, None, {"Transfer-Encoding": "chunked"}) + b"zz\r\nxx\r\n",
    )
    add("Content-Type text/plain", req("POST", comp, short, {"Content-Type": "text/plain"}))
    add("garbage request line", b"\x00\xff\xfe garbage\r\n\r\n")
    add("no HTTP version", b"GET /health\r\n\r\n")
    add("HTTP/0.9 style", b"GET /health\n")
    add("HTTP/9.9", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n")
    add("header line 100 KB", req("GET", "/health", None, {"X-Big": "a" * 100_000}))
    add("2000 headers", req("GET", "/health", None, {f"X-H{i}": "1" for i in range(2000)}))
    add(
        "non-latin1 header bytes",
        req("GET", "/v1/models").replace(b"\r\n\r\n", b"\r\nX-U: \xff\xfe\xc3\r\n\r\n", 1),
    )
    add("empty request", b"")
    add("only CRLF", b"\r\n\r\n")
    add("valid, not half-closed", req("POST", comp, js({"prompt": "hi", "max_tokens": 2})), False)
    return c


def auth_cases(key: str) -> list[tuple[str, bytes, bool, int]]:
    comp = "/v1/completions"
    body = js({"prompt": "hi", "max_tokens": 2})
    return [
        ("no key: /health", req("GET", "/health"), True, 2),
        ("no key: HEAD /health", req("HEAD", "/health"), True, 2),
        ("no key: /v1/models", req("GET", "/v1/models"), True, 4),
        ("no key: POST", req("POST", comp, body), True, 4),
        ("wrong key", req("POST", comp, body, {"Authorization": "Bearer nope"}), True, 4),
        ("wrong X-Api-Key", req("POST", comp, body, {"X-Api-Key": "nope"}), True, 4),
        ("empty bearer", req("POST", comp, body, {"Authorization": "Bearer "}), True, 4),
        ("Basic scheme", req("POST", comp, body, {"Authorization": "Basic " + key}), True, 4),
        ("key prefix", req("POST", comp, body, {"Authorization": "Bearer " + key[:-1]}), True, 4),
        ("key + suffix", req("POST", comp, body, {"Authorization": f"Bearer {key}x"}), True, 4),
        (
            "non-ASCII key bytes",
            req("POST", comp, body).replace(
                b"\r\n\r\n", b"\r\nAuthorization: Bearer \xff\xc3\xa9\r\n\r\n", 1
            ),
            True,
            4,
        ),
        (
            "no key, huge body never sent",
            req("POST", comp, b"{", {"Content-Length": "100000000"}),
            False,
            4,
        ),
        ("right key", req("POST", comp, body, {"Authorization": "Bearer " + key}), True, 2),
        (
            "right key lower bearer",
            req("POST", comp, body, {"Authorization": "bearer " + key}),
            True,
            2,
        ),
        ("right X-Api-Key", req("POST", comp, body, {"X-Api-Key": key}), True, 2),
        ("right key: /v1/models", req("GET", "/v1/models", None, {"X-Api-Key": key}), True, 2),
    ]


def health(port: int) -> int | None:
    return send(port, req("GET", "/health"), timeout=30)


def try_send(port: int, raw: bytes, half_close: bool = True) -> tuple[int | None, OSError | None]:
    """send, with a connection error as status 0 (and the error)."""
    try:
        return send(port, raw, half_close=half_close, timeout=30), None
    except OSError as exc:
        return 0, exc


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log: Path


def start_server(tmp: Path, env: dict[str, str], target: Path, tag: str, extra: list[str]):
    port = free_port()
    log = tmp / f"server-{tag}.log"
    cmd = edgespec_cmd() + ["serve", "--target", str(target), "--threads", "1"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--ctx", "256"] + extra
    with open(log, "wb") as f:
        proc = spawn(cmd, env, stdout=f, stderr=f)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if send(port, req("GET", "/health"), timeout=2) == 200:
                return Server(proc, port, log)
        except OSError:
            pass
        time.sleep(0.2)
    return Server(proc, port, log) if proc.poll() is None else None


def stop_server(srv: Server) -> None:
    if srv.proc.poll() is None:
        kill_group(srv.proc, signal.SIGTERM)
        try:
            srv.proc.wait(10)
        except subprocess.TimeoutExpired:
            kill_group(srv.proc)
            srv.proc.wait()


def serve_once(env: dict[str, str], target: Path, *flags: str) -> Outcome:
    """``serve`` with flags, on a free port, for 15 s: hang means it started serving."""
    cmd = edgespec_cmd() + ["serve", "--target", str(target), "--threads", "1"]
    cmd += ["--port", str(free_port()), *flags]
    return run(cmd, env, timeout=15)


def stream_then_close(port: int, path: str, body: dict) -> None:
    raw = req("POST", path, js(body))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(raw)
        s.recv(200)
    # closed after the first bytes


STREAMS = (
    ("/v1/completions", {"prompt": "hi", "max_tokens": 200, "stream": True}),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 200, "stream": True},
    ),
    ("/infill", {"input_prefix": "a", "n_predict": 200, "stream": True}),
)


@dataclass
class HttpProbe:
    tmp: Path
    env: dict[str, str]
    target: Path
    st: ClassStats = field(default_factory=lambda: ClassStats("4 HTTP"))
    classes: dict[str, int] = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.info.update(classes=self.classes, fivexx=[], alive={}, server_tracebacks={})

    def tally(self, label: str, code: int | None, expect_class: int | None = None) -> None:
        st = self.st
        st.tried += 1
        k = "hang" if code is None else "no response" if code == 0 else f"{code // 100}xx"
        self.classes[k] = self.classes.get(k, 0) + 1
        if code is None:
            st.count("hang")
            st.bad.append((label, "hang", "no response within 30 s"))
        elif code in (501, 505):  # unknown method / HTTP version: the protocol's answer
            st.count("answered")
            st.notes.append((label, "status", str(code)))
        elif code >= 500:
            st.count("5xx")
            self.info["fivexx"].append((label, code))
            st.bad.append((label, f"status {code}", ""))
        else:
            st.count("answered" if code else "closed")
            if expect_class is not None and code // 100 != expect_class:
                st.notes.append((label, "unexpected status", str(code)))

    def session(self, tag: str, extra: list[str], start_label: str, cases: Callable) -> bool:
        """Start a server, send it cases(port), check it is still alive, stop it and
        keep its log (False: it did not come up)."""
        srv = start_server(self.tmp, self.env, self.target, tag, extra)
        if srv is None:
            self.st.add(start_label, Outcome("abort", None, "server did not come up"))
            return False
        try:
            cases(srv.port)
            self.info["alive"][tag] = health(srv.port) == 200 and srv.proc.poll() is None
        finally:
            stop_server(srv)
        self.info["server_tracebacks"][tag] = srv.log.read_text("utf-8", "replace")
        return True

    def open_cases(self, port: int) -> None:
        for label, raw, half in http_cases():
            if label.startswith("Content-Length huge, client keeps"):
                self.slow_body(port, raw, label)
                continue
            code, exc = try_send(port, raw, half)
            if exc is not None:
                self.st.notes.append((label, "connect error", repr(exc)))
            self.tally(label, code)
        for i in range(3):
            for path, body in STREAMS:
                try:
                    stream_then_close(port, path, body)
                    code = health(port)
                except OSError:
                    code = 0
                self.tally(f"stream then disconnect {path} #{i} (then /health)", code, 2)

    def slow_body(self, port: int, raw: bytes, label: str) -> None:
        """A client that announces a big body and never sends it: the server may wait
        for it, but must go on answering other clients meanwhile."""
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            time.sleep(0.5)
            self.tally(label + ": another client's /health meanwhile", health(port), 2)
            s.settimeout(10)
            try:
                got = s.recv(100)
            except OSError:
                got = None
            self.st.notes.append((label, "slow client", f"after 10 s the server sent {got!r:.60}"))

    def key_cases(self, key: str) -> Callable[[int], None]:
        def cases(port: int) -> None:
            for label, raw, half, want in auth_cases(key):
                self.tally("api key: " + label, try_send(port, raw, half)[0], want)

        return cases

    def refusals(self) -> None:
        """serve with bad flag values: refused in one line, or (hang) it served."""
        st = self.st
        for tag, bad_key in (("non-ASCII", "kéy"), ("control char", "a\x01b"), ("empty", "")):
            out = serve_once(self.env, self.target, "--api-key", bad_key)
            if out.kind == "hang":  # it started serving: fine for an empty key only
                out = Outcome("ok" if bad_key == "" else "hang", None, "served")
            st.add(f"serve --api-key {tag}", out)
        for ctx in ("1", "255", "0", "-1", "abc", HUGE_CTX):
            lab = f"serve --ctx {ctx}"
            out = serve_once(self.env, self.target, "--ctx", ctx)
            if out.kind == "hang":  # it started serving: accepted
                if ctx == HUGE_CTX:  # edgespec refuses a ctx over 16,777,216 tokens
                    st.bad.append((lab, "accepted", "served; should be refused (ctx at most)"))
                else:  # llama.cpp caps the context
                    st.notes.append((lab, "served", "accepted, server started"))
                out = Outcome("ok", None, "served")
            elif out.kind == "multiline":
                st.notes.append((lab, "multi-line refusal", out.stderr[:300]))
            st.add(lab, out)


def probe_http(tmp: Path, env: dict[str, str], target: Path) -> tuple[ClassStats, dict]:
    hp = HttpProbe(tmp, env, target)
    key = "probe-key-123"
    if hp.session("open", [], "serve start", hp.open_cases) and hp.session(
        "key", ["--api-key", key], "serve --api-key start", hp.key_cases(key)
    ):
        hp.refusals()
    return hp.st, hp.info
