"""Bad requests get 4xx JSON errors in OpenAI's shape; nothing a client sends crashes the server."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from edgespec.completion.session import CompletionSession, load_session
from tests.server.conftest import API_KEY, Running, start

C, CHAT, INFILL = "/v1/completions", "/v1/chat/completions", "/infill"
U = [{"role": "user", "content": "x"}]


def _tool(name: str, parameters: Any = None) -> dict[str, Any]:
    fn = {"name": name} if parameters is None else {"name": name, "parameters": parameters}
    return {"type": "function", "function": fn}


def _call(arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": arguments}}


TOOL = _tool("f")
CALL = _call("{}")
NAMED_G = {"type": "function", "function": {"name": "g"}}
BAD = [
    # (path, body, status, param or code)
    (C, b"{not json", 400, "invalid_json"),
    (C, b'{"prompt": NaN}', 400, "invalid_json"),
    (C, b"[1, 2]", 400, "invalid_json"),
    (C, b"\xff\xfe garbage", 400, "invalid_json"),
    (C, b"[" * 50_000, 400, "invalid_json"),
    (C, {}, 400, "prompt"),
    (C, {"prompt": 5}, 400, "prompt"),
    (C, {"prompt": [[1], [2]]}, 400, "prompt"),
    (C, {"prompt": ["a", "b"]}, 400, "prompt"),
    (C, {"prompt": [1, 2, 10**9]}, 400, "invalid_value"),
    (C, {"prompt": "\ud800"}, 400, "prompt"),
    (C, {"prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    (C, {"prompt": "x", "max_tokens": "5"}, 400, "max_tokens"),
    (C, {"prompt": "x", "max_tokens": 2.5}, 400, "max_tokens"),
    (C, {"prompt": "x", "max_tokens": True}, 400, "max_tokens"),
    (C, {"prompt": "x", "temperature": -0.5}, 400, "temperature"),
    (C, {"prompt": "x", "temperature": "hot"}, 400, "temperature"),
    (C, {"prompt": "x", "top_p": 0}, 400, "top_p"),
    (C, {"prompt": "x", "top_p": 1.5}, 400, "top_p"),
    (C, {"prompt": "x", "top_k": -1}, 400, "top_k"),
    (C, {"prompt": "x", "min_p": 1}, 400, "min_p"),
    (C, {"prompt": "x", "seed": "abc"}, 400, "seed"),
    (C, {"prompt": "x", "stop": 5}, 400, "stop"),
    (C, {"prompt": "x", "stop": ["a"] * 17}, 400, "stop"),
    (C, {"prompt": "x", "stream": "yes"}, 400, "stream"),
    (C, {"prompt": "x", "stream_options": []}, 400, "stream_options"),
    (C, {"prompt": "x", "n": 2}, 400, "n"),
    (C, {"prompt": "x", "echo": True}, 400, "echo"),
    (C, {"prompt": [1, 2], "suffix": "x"}, 400, "suffix"),
    (C, {"prompt": "word " * 3000}, 400, "context_length_exceeded"),
    (C, {"prompt": "x", "model": 3}, 400, "model"),
    # fields edgespec does not implement: a 400 naming the field, never silence
    (C, {"prompt": "x", "logit_bias": {"5": 10}}, 400, "logit_bias"),
    (C, {"prompt": "x", "logprobs": 21}, 400, "logprobs"),
    (C, {"prompt": "x", "grammar": "root ::= oops"}, 400, "grammar"),
    (C, {"prompt": "x", "response_format": "json"}, 400, "response_format"),
    (C, {"prompt": "x", "best_of": 3}, 400, "best_of"),
    (C, {"prompt": "x", "mirostat": 2}, 400, "mirostat"),
    (C, {"prompt": "x", "samplers": ["top_k", "mirostat"]}, 400, "samplers"),
    (C, {"prompt": "x", "samplers": 5}, 400, "samplers"),
    (C, {"prompt": "x", "t_max_predict_ms": "soon"}, 400, "t_max_predict_ms"),
    (C, {"prompt": "x", "cache_prompt": 1}, 400, "cache_prompt"),
    (C, {"prompt": "x", "ignore_eos": True}, 400, "ignore_eos"),
    # tools: a 400 naming the field (docs/tools.md)
    (C, {"prompt": "x", "tools": [TOOL]}, 400, "tools"),
    (CHAT, {"messages": U, "tool_choice": "required"}, 400, "tool_choice"),
    (CHAT, {"messages": U, "tools": {"f": TOOL}}, 400, "tools"),
    (CHAT, {"messages": U, "tools": [{"type": "function"}]}, 400, "tools[0].function"),
    (CHAT, {"messages": U, "tools": [{"function": {}}]}, 400, "tools[0].function.name"),
    (CHAT, {"messages": U, "tools": [_tool("a b")]}, 400, "tools[0].function.name"),
    (CHAT, {"messages": U, "tools": [TOOL, TOOL]}, 400, "tools[1].function.name"),
    (CHAT, {"messages": U, "tools": [_tool("f", [1])]}, 400, "tools[0].function.parameters"),
    (
        CHAT,
        {"messages": U, "tools": [_tool("f", {"type": "string"})]},
        400,
        "tools[0].function.parameters",
    ),
    (CHAT, {"messages": U, "tools": [TOOL], "tool_choice": "always"}, 400, "tool_choice"),
    (
        CHAT,
        {"messages": U, "tools": [TOOL], "tool_choice": NAMED_G},
        400,
        "tool_choice.function.name",
    ),
    (
        CHAT,
        {"messages": U, "tools": [TOOL], "parallel_tool_calls": "yes"},
        400,
        "parallel_tool_calls",
    ),
    (
        CHAT,
        {"messages": U, "tools": [TOOL], "response_format": {"type": "json_object"}},
        400,
        "tools",
    ),
    (
        CHAT,
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]}]},
        400,
        "messages[0].tool_calls[0]",
    ),
    (
        CHAT,
        {"messages": [{"role": "assistant", "tool_calls": {"id": "1"}}]},
        400,
        "messages[0].tool_calls",
    ),
    (CHAT, {"messages": [{"role": "user", "tool_calls": [CALL]}]}, 400, "messages[0].tool_calls"),
    (
        CHAT,
        {"messages": [{"role": "assistant", "tool_calls": [{**CALL, "id": ""}]}]},
        400,
        "messages[0].tool_calls[0].id",
    ),
    (
        CHAT,
        {"messages": [{"role": "assistant", "tool_calls": [_call("{oops")]}]},
        400,
        "messages[0].tool_calls[0].function.arguments",
    ),
    (
        CHAT,
        {"messages": [{"role": "assistant", "tool_calls": [_call("[1]")]}]},
        400,
        "messages[0].tool_calls[0].function.arguments",
    ),
    (
        CHAT,
        {"messages": [*U, {"role": "tool", "tool_call_id": "nope", "content": "r"}]},
        400,
        "messages[1].tool_call_id",
    ),
    (
        CHAT,
        {
            "messages": [
                {"role": "assistant", "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "other", "content": "r"},
            ]
        },
        400,
        "messages[1].tool_call_id",
    ),
    (
        CHAT,
        {
            "messages": U,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": {"type": "integer", "not": {"const": 0}}},
            },
        },
        400,
        "response_format",
    ),
    (CHAT, {"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}, 400, "logprobs"),
    (
        CHAT,
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
        400,
        "top_logprobs",
    ),  # fmt: skip
    (INFILL, {"input_prefix": "x", "response_fields": "content"}, 400, "response_fields"),
    (INFILL, {"input_prefix": "x", "n_probs": -1}, 400, "n_probs"),
    (CHAT, {"messages": []}, 400, "messages"),
    (CHAT, {"messages": "hi"}, 400, "messages"),
    (CHAT, {"messages": [1]}, 400, "messages[0]"),
    (CHAT, {"messages": [{"content": "hi"}]}, 400, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    (
        CHAT,
        {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        400,
        "messages[0].content",
    ),  # fmt: skip
    (
        CHAT,
        {"messages": [{"role": "user", "content": "hi " * 3000}]},
        400,
        "context_length_exceeded",
    ),  # fmt: skip
    (
        CHAT,
        {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -3},
        400,
        "max_completion_tokens",
    ),  # fmt: skip
    (INFILL, {"input_prefix": 1}, 400, "input_prefix"),
    (INFILL, {"input_extra": "x"}, 400, "input_extra"),
    (INFILL, {"input_extra": [{"text": 1}]}, 400, "input_extra[0].text"),
    (INFILL, {"n_predict": -2}, 400, "n_predict"),
    (INFILL, {"n_indent": -1}, 400, "n_indent"),
    (INFILL, {"max_lines": -1}, 400, "max_lines"),
]


@pytest.mark.parametrize(
    ("path", "body", "status", "what"), BAD, ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD)]
)
def test_bad_input(plain_server: Running, path: str, body: Any, status: int, what: str) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    got, err = plain_server.request("POST", path, raw=raw)
    assert got == status, err
    e = err["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"]
    assert what in (e["param"], e["code"])


def test_oversized_body_is_413(plain_server: Running) -> None:
    got, err = plain_server.request("POST", C, raw=b"x" * (65 * 1024))
    assert got == 413 and err["error"]["code"] == "request_too_large"


def test_chunked_bodies(plain_server: Running) -> None:
    host, port = plain_server.base.removeprefix("http://").split(":")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = [b'{"prompt": "Hel', b'lo", "max_tokens": 2}']
    conn.request("POST", C, body=iter(body), encode_chunked=True, headers=auth)
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] == 2
    conn.request("POST", C, body=iter([b"x" * 40_000] * 2), encode_chunked=True, headers=auth)
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["error"]["code"] == "request_too_large"


def test_routes_and_methods(plain_server: Running) -> None:
    assert plain_server.request("GET", "/nope")[0] == 404
    assert plain_server.request("GET", C)[0] == 405
    assert plain_server.request("DELETE", "/v1/models")[0] == 405


def test_api_key_on_every_route_but_health(plain_server: Running) -> None:
    for method, path in [("GET", "/v1/models"), ("POST", C), ("POST", INFILL), ("GET", "/nope")]:
        for key in (None, "wrong", API_KEY + "x"):
            got, err = plain_server.request(method, path, {"prompt": "x"}, key=key)
            assert got == 401 and err["error"]["type"] == "authentication_error"
    assert plain_server.health()["status"] == "ok"
    got, _ = plain_server.request("GET", "/v1/models", headers={"X-Api-Key": API_KEY}, key=None)
    assert got == 200


def test_garbage_request_line(plain_server: Running) -> None:
    host, port = plain_server.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(b"\x00\x01garbage\r\n\r\n")
        reply = s.recv(4096)
    assert reply.startswith(b"HTTP/") and b" 400 " in reply.split(b"\r\n")[0]
    assert plain_server.health()["status"] == "ok"


# --------------------------------------------------------------------------- fuzzing


@pytest.fixture(scope="module")
def fuzz_server(synthetic_models: dict[str, Path]) -> Iterator[Running]:
    """A server with a small context, so that any accepted request finishes quickly."""
    session: CompletionSession = load_session(
        str(synthetic_models["target_fim"]), "ngram", gamma=4, n_ctx=128
    )
    running = start(session, max_body=16 * 1024)
    yield running
    running.server.close()
    session.target.close()


FIELDS = [
    "prompt", "suffix", "max_tokens", "temperature", "top_p", "top_k", "min_p", "stop", "seed",
    "stream", "n", "model", "messages", "role", "content", "input_prefix", "input_suffix",
    "input_extra", "n_predict", "n_indent", "max_lines", "text", "filename", "stream_options",
    "include_usage", "max_completion_tokens", "type", "echo", "prompt_tokens",
]  # fmt: skip
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.sampled_from([0, 1, -1, 2, 3, 16, 64, 127, 128, 10**6])
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
    | st.sampled_from(["target_fim", "user", "assistant", "text", "\n", "def f(", "\ud800"])
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=20,
)
BODIES = (
    st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=8).map(lambda d: json.dumps(d).encode())
    | JSON.map(lambda v: json.dumps(v).encode())
    | st.binary(max_size=200)
)


TEXT = st.text(max_size=60) | st.sampled_from(["def f(x):\n    ", "\n", "Hello the", ""])
PLAUSIBLE = st.fixed_dictionaries(
    {},
    optional={
        "prompt": TEXT | st.lists(st.integers(-3, 600), max_size=5),
        "suffix": TEXT,
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "x"]),
                                   "content": TEXT}), max_size=3),
        "input_prefix": TEXT,
        "input_suffix": TEXT,
        "input_extra": st.lists(st.fixed_dictionaries({"text": TEXT}), max_size=2),
        "max_tokens": st.integers(-2, 300),
        "n_predict": st.integers(-2, 300),
        "max_lines": st.integers(-1, 5),
        "n_indent": st.integers(-1, 8),
        "temperature": st.floats(-1, 3),
        "top_p": st.floats(-0.5, 1.5),
        "top_k": st.integers(-1, 100),
        "min_p": st.floats(-0.5, 1.5),
        "seed": st.integers(-(2**40), 2**70),
        "stop": TEXT | st.lists(TEXT, max_size=3),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "model": st.sampled_from(["target_fim", "other"]),
    },
)  # fmt: skip


@settings(
    max_examples=60,
    deadline=timedelta(seconds=60),
    derandomize=True,  # the same 60 requests in every run: CI must not be a lottery
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=st.sampled_from([C, CHAT, INFILL]), body=PLAUSIBLE)
# found by random runs: a denormal temperature made logits / T overflow (a 500)
@example(path=INFILL, body={"input_prefix": "def f(", "temperature": 5e-324, "max_tokens": 8})
@example(path=C, body={"prompt": "x", "temperature": 1e-300, "top_k": 0, "max_tokens": 8})
# found by a random run: a 150-token infill prompt with n_ctx=128 aborted the process
@example(path=INFILL, body={"input_extra": [{"text": "L\x19rg OR~B$GR`\t " * 8}], "max_tokens": 4})
# a client error raised inside a job (a token id outside the vocabulary) is a 400
@example(path=C, body={"prompt": [64, 600, 46], "max_tokens": 9})
def test_plausible_requests_never_get_a_5xx(fuzz_server: Running, path: str, body: dict) -> None:
    """Well-typed requests with random values: generation, stop rules and streaming run."""
    status, reply = fuzz_server.request("POST", path, body)
    assert status < 500, reply
    if status == 200 and not body.get("stream"):
        assert "timings" in reply
    assert fuzz_server.health()["failed"] == 0


@settings(
    max_examples=150,
    deadline=timedelta(seconds=60),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=st.sampled_from([C, CHAT, INFILL]), body=BODIES)
def test_random_bodies_never_get_a_5xx(fuzz_server: Running, path: str, body: bytes) -> None:
    status, reply = fuzz_server.request("POST", path, raw=body)
    assert status < 500, reply
    if status >= 400:
        assert set(reply["error"]) == {"message", "type", "param", "code"}
    assert fuzz_server.health()["failed"] == 0


def test_head_answers_as_get_without_a_body(plain_server: Running) -> None:
    host, port = plain_server.base.removeprefix("http://").split(":")
    auth = {"Authorization": f"Bearer {API_KEY}"}
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    for path in ("/health", "/v1/models", "/models"):
        conn.request("GET", path, headers=auth)
        get = conn.getresponse()
        body = get.read()
        conn.request("HEAD", path, headers=auth)
        head = conn.getresponse()
        assert head.status == 200 == get.status, path
        assert head.getheader("Content-Type") == get.getheader("Content-Type")
        assert head.getheader("Content-Length") == str(len(body))
        assert head.read() == b""
    # no body was sent: the same connection goes on with the next request
    conn.request("GET", "/health")
    assert json.loads(conn.getresponse().read())["status"] == "ok"
    conn.request("HEAD", C, headers=auth)  # a POST route: still not allowed
    assert conn.getresponse().status == 405
    conn.close()


def _raw_reply(running: Running, head: bytes, body: bytes) -> bytes:
    """Send a request's head and the start of its body; read the reply until the server
    closes the connection (a bounded wait: the socket times out)."""
    host, port = running.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(head + body)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize("length", [60 * 1024, 100 * 1024 * 1024])
def test_a_keyless_request_is_refused_before_its_body_is_read(
    plain_server: Running, length: int
) -> None:
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )
    reply = _raw_reply(plain_server, head, b'{"prompt": "He')  # the rest never comes
    status_line, _, rest = reply.partition(b"\r\n")
    assert b" 401 " in status_line
    headers, _, body = rest.partition(b"\r\n\r\n")
    assert b"connection: close" in headers.lower()
    assert json.loads(body)["error"]["type"] == "authentication_error"
    assert plain_server.health()["status"] == "ok"


@pytest.mark.parametrize("key", ["ключ", "k\x00ey", " key", "key\n"])
def test_an_api_key_no_client_can_send_is_refused(plain_session: CompletionSession,
                                                  key: str) -> None:  # fmt: skip
    from edgespec.errors import InvalidParameterError
    from edgespec.server import EdgespecServer

    with pytest.raises(InvalidParameterError, match="API key must be printable ASCII"):
        EdgespecServer(("127.0.0.1", 0), plain_session, api_key=key)


@pytest.mark.parametrize("trickle", [False, True])
def test_a_body_that_does_not_arrive_in_time_is_408(
    plain_server: Running, monkeypatch: pytest.MonkeyPatch, trickle: bool
) -> None:
    """A body announced and never sent, or trickled a byte at a time (each byte within
    the idle timeout), is answered 408 once the handler's timeout has passed in all."""
    from edgespec.server.app import Handler

    monkeypatch.setattr(Handler, "timeout", 1.0)
    host, port = plain_server.base.removeprefix("http://").split(":")
    head = (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer %s\r\nContent-Length: 100\r\n\r\n" % API_KEY.encode()
    )
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(head + b"{")
        reply = b""
        for _ in range(40 if trickle else 0):  # 40 x 0.1 s: past the 1 s budget
            time.sleep(0.1)
            try:
                s.sendall(b" ")
            except OSError:
                break
        while chunk := s.recv(65536):
            reply += chunk
    assert b" 408 " in reply.split(b"\r\n")[0]
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "timeout"
    assert plain_server.health()["status"] == "ok"
