"""``serve --context-overflow``: a chat longer than the context through a real server on
loopback (the synthetic ChatML target, a 256-token context). With truncate-middle the
oldest messages after the system prompt go, whole turns and a tool call with its
results, until the prompt and room for the reply fit, and the response says how
many (usage, timings, the X-Edgespec-Truncated-Messages header), streamed or not;
with error (the default) it is a 400, as is a conversation that cannot fit at all."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgespec.completion.session import CompletionSession, load_session
from edgespec.context_overflow import droppable_groups, reply_reserve
from edgespec.server.requests import parse_chat
from edgespec.tools.formats import GENERIC, detect, template_messages
from tests.server.conftest import Running, start

N_CTX = 256
TOOLS_CTX = 1024
HEADER = "X-Edgespec-Truncated-Messages"
SYSTEM = {"role": "system", "content": "You answer briefly."}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def _session(synthetic_models: dict[str, Path], n_ctx: int = N_CTX) -> CompletionSession:
    return load_session(str(synthetic_models["target_fim"]), "ngram", gamma=4, n_ctx=n_ctx)


@pytest.fixture(scope="module")
def truncating(synthetic_models: dict[str, Path]) -> Iterator[Running]:
    """A server with --context-overflow truncate-middle."""
    running = start(_session(synthetic_models), context_overflow="truncate-middle")
    yield running
    running.server.close()
    running.session.target.close()


@pytest.fixture(scope="module")
def truncating_tools(synthetic_models: dict[str, Path]) -> Iterator[Running]:
    """A server with --context-overflow truncate-middle and a context of TOOLS_CTX tokens
    (the generic tool format's system prompt alone is about 400)."""
    running = start(_session(synthetic_models, TOOLS_CTX), context_overflow="truncate-middle")
    yield running
    running.server.close()
    running.session.target.close()


@pytest.fixture(scope="module")
def refusing(synthetic_models: dict[str, Path]) -> Iterator[Running]:
    """A server with the default, --context-overflow error."""
    running = start(_session(synthetic_models))
    yield running
    running.server.close()
    running.session.target.close()


def long_chat(turns: int, last: str = "And what about the sea today?") -> list[dict[str, Any]]:
    """A system prompt, turns of questions and answers, and a last question."""
    out: list[dict[str, Any]] = [SYSTEM]
    for i in range(turns):
        question = f"Question {i}: tell me about the world and its people."
        answer = f"Answer {i}: the world is large and the people are many."
        out += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return [*out, {"role": "user", "content": last}]


def post(running: Running, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body or the list of a stream's events) of a chat request."""
    host, port = running.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=120)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        text = resp.read().decode()
        headers = {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()
    if "text/event-stream" in headers.get("content-type", ""):
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        return resp.status, headers, [json.loads(e) for e in events[:-1]]
    return resp.status, headers, json.loads(text)


def prompt_len(running: Running, messages: list[dict[str, Any]]) -> int:
    """Tokens of messages' chat prompt (no tools), as the server renders it."""
    return len(running.session.chat_prompt(messages))


def check_truncation(running: Running, messages: list[dict[str, Any]], dropped: int,
                     prompt_tokens: int, max_tokens: int) -> None:  # fmt: skip
    """The fewest oldest whole turns were dropped, and the rest fits with room for the reply."""
    groups = droppable_groups([m["role"] for m in messages])
    sizes = [sum(len(g) for g in groups[:k]) for k in range(len(groups) + 1)]
    assert dropped in sizes[1:]  # some whole groups, never all of the conversation
    kept = [messages[0], *messages[1 + dropped :]]
    assert kept[1]["role"] == "user" and kept[-1] == messages[-1]
    assert prompt_len(running, kept) == prompt_tokens
    room = reply_reserve(max_tokens, N_CTX)
    assert prompt_tokens + room <= N_CTX
    fewer = sizes[sizes.index(dropped) - 1]
    assert prompt_len(running, [messages[0], *messages[1 + fewer :]]) + room > N_CTX


def test_a_long_chat_loses_its_oldest_turns_and_is_answered(truncating: Running) -> None:
    messages = long_chat(12)
    assert prompt_len(truncating, messages) > N_CTX
    status, headers, body = post(truncating, {"messages": messages, "max_tokens": 8})
    assert status == 200, body
    usage = body["usage"]
    n = usage["truncated_messages"]
    assert headers[HEADER.lower()] == str(n) and body["timings"]["truncated_messages"] == n
    check_truncation(truncating, messages, n, usage["prompt_tokens"], 8)
    assert usage["truncated_tokens"] == prompt_len(truncating, messages) - usage["prompt_tokens"]
    assert 1 <= usage["completion_tokens"] <= 8
    assert body["choices"][0]["finish_reason"] in ("stop", "length")


def test_streamed_the_same(truncating: Running) -> None:
    messages = long_chat(12)
    request = {"messages": messages, "max_tokens": 8}
    _, _, whole = post(truncating, request)
    status, headers, events = post(
        truncating, {**request, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert status == 200
    n = whole["usage"]["truncated_messages"]
    assert headers[HEADER.lower()] == str(n)
    assert events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]
    last = [e for e in events if e["choices"]][-1]
    assert last["choices"][0]["finish_reason"] in ("stop", "length")
    assert last["timings"]["truncated_messages"] == n
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == whole["choices"][0]["message"]["content"]  # greedy: the same reply


def test_a_chat_that_fits_keeps_everything_and_says_so(truncating: Running) -> None:
    status, headers, body = post(truncating, {"messages": long_chat(1), "max_tokens": 4})
    assert status == 200 and headers[HEADER.lower()] == "0"
    assert body["usage"]["truncated_messages"] == 0 == body["usage"]["truncated_tokens"]


def test_the_default_still_refuses(refusing: Running) -> None:
    status, headers, body = post(refusing, {"messages": long_chat(12), "max_tokens": 8})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"
    assert HEADER.lower() not in headers
    status, headers, body = post(refusing, {"messages": long_chat(1), "max_tokens": 4})
    assert status == 200 and "truncated_messages" not in body["usage"]
    assert HEADER.lower() not in headers


@pytest.mark.parametrize("stream", [False, True])
def test_what_cannot_fit_is_a_one_line_400(truncating: Running, stream: bool) -> None:
    messages = long_chat(3, last="word " * 400)
    status, headers, body = post(truncating, {"messages": messages, "stream": stream})
    assert status == 400, body
    error = body["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert "6 earlier messages dropped" in error["message"] and "\n" not in error["message"]
    assert truncating.health()["status"] == "ok"  # and the server carries on


def tool_chat() -> list[dict[str, Any]]:
    """An agent's conversation: earlier turns with tool calls, then one instruction
    followed by rounds of calls and results."""
    out: list[dict[str, Any]] = [SYSTEM]
    n = 0

    def call_and_result(city: str) -> list[dict[str, Any]]:
        nonlocal n
        n += 1
        function = {"name": "get_weather", "arguments": json.dumps({"city": city})}
        call = {"id": f"call_{n}", "type": "function", "function": function}
        result = f"In {city} the sun is out and the people of the world are warm."
        return [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}", "content": result},
        ]

    for city in ("Paris", "Rome", "Oslo"):
        out.append({"role": "user", "content": f"What is the weather in {city} today?"})
        out += call_and_result(city)
        out.append({"role": "assistant", "content": f"It is sunny in {city}."})
    out.append({"role": "user", "content": "Now check Lima, Quito and Bogota."})
    for city in ("Lima", "Quito", "Bogota"):
        out += call_and_result(city)
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_with_tools_a_call_goes_with_its_results(truncating_tools: Running, stream: bool) -> None:
    truncating = truncating_tools
    messages = tool_chat()
    body: dict[str, Any] = {"messages": messages, "tools": [WEATHER], "max_tokens": 16}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    status, headers, out = post(truncating, body)
    assert status == 200, out
    usage = out[-1]["usage"] if stream else out["usage"]
    n = usage["truncated_messages"]
    assert n > 0 and headers[HEADER.lower()] == str(n)
    groups = droppable_groups([m["role"] for m in messages])
    assert n in [sum(len(g) for g in groups[:k]) for k in range(1, len(groups) + 1)]
    kept = [messages[0], *messages[1 + n :]]
    assert kept[-2:] == messages[-2:]  # the last call and its result stay
    assert any(m["role"] == "user" for m in kept[1:])  # and so does the instruction
    # the prompt is the kept conversation, rendered as the template gets it with tools
    call = parse_chat({"messages": kept, "tools": [WEATHER]})  # a valid conversation still
    fmt = detect(truncating.session.chat_format.template)
    offered = None if fmt == GENERIC else [t.openai() for t in call.tools.offered()]
    rendered = template_messages(call.messages, fmt, call.tools)
    tokens = truncating.session.chat_prompt(rendered, offered)
    assert usage["prompt_tokens"] == len(tokens)
    assert usage["prompt_tokens"] + reply_reserve(16, TOOLS_CTX) <= TOOLS_CTX
    if stream:
        finish = [e for e in out if e["choices"]][-1]["choices"][0]["finish_reason"]
    else:
        finish = out["choices"][0]["finish_reason"]
    assert finish in ("stop", "length", "tool_calls")


def test_the_option_refuses_a_bad_value_in_one_line() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "serve", "--context-overflow", "shift"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--context-overflow: invalid choice: 'shift'" in r.stderr
    assert "truncate-middle" in r.stderr.splitlines()[-1]
