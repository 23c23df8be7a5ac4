"""Tool calling in every call format and tool_choice mode against ``edgespec serve`` on
SmolLM2 (real, from PyPI): its own template (the generic form) and, put in its place,
the templates of Qwen 2.5 (Hermes), Mistral Nemo and Llama 3.1, so that each format's
grammar (lazy in ``auto``), reader and stream run on a real model.

Only properties are asserted, never which text the model writes (that differs between
CPUs): a call that finished parses and validates against its tool's schema (pydantic's
``$defs``/``$ref`` included), streamed arguments add up to the unstreamed ones, the
n-gram drafter's reply is plain decoding's, no reply shows edgespec's own wrapper.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openai import OpenAI

from edgespec.chat_template import ChatFormat
from edgespec.completion.session import CompletionSession, load_session
from edgespec.tools.formats import GENERIC, HERMES, LLAMA3, MISTRAL, detect
from tests.server.conftest import Running, start

pytestmark = pytest.mark.real_model

SET = Path(__file__).parent.parent / "data" / "llama_cpp_templates"
TEMPLATES = {
    GENERIC: None,  # SmolLM2's own, which knows no tools
    HERMES: "Qwen-Qwen2.5-7B-Instruct.jinja",
    MISTRAL: "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    LLAMA3: "meta-llama-Llama-3.1-8B-Instruct.jinja",
}
FORMATS = list(TEMPLATES)

#: pydantic's model_json_schema() of a model with a nested model, an enum and Optional
WEATHER_ARGS = {
    "$defs": {
        "Unit": {"enum": ["celsius", "fahrenheit"], "title": "Unit", "type": "string"},
        "Place": {
            "properties": {
                "city": {"title": "City", "type": "string", "maxLength": 40},
                "country": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}],
                            "default": None, "title": "Country"},
            },
            "required": ["city"],
            "title": "Place",
            "type": "object",
        },
    },
    "properties": {"place": {"$ref": "#/$defs/Place"}, "unit": {"$ref": "#/$defs/Unit"}},
    "required": ["place", "unit"],
    "title": "WeatherArgs",
    "type": "object",
}  # fmt: skip
READ_ARGS = {
    "type": "object",
    "properties": {"path": {"type": "string", "maxLength": 80}},
    "required": ["path"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description":
     "The weather in a city now.", "parameters": WEATHER_ARGS}},
    {"type": "function", "function": {"name": "read_file", "description":
     "Read a text file.", "parameters": READ_ARGS}},
]  # fmt: skip
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Oslo, Norway, in celsius?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
WRAPPER = ('"response"', '"tool_call"', '"tool_calls"')


@pytest.fixture(scope="module")
def smol(real_model_paths) -> Iterator[dict[str, Running]]:
    """SmolLM2 served with the n-gram drafter and plain."""
    path = str(real_model_paths["smollm2-135m-instruct"])
    out = {}
    for kind, draft in (("ngram", "ngram"), ("plain", None)):
        out[kind] = start(load_session(path, draft, gamma=4, n_ctx=2048, name="smol"))
    yield out
    for running in out.values():
        running.server.close()
        running.session.target.close()


def _use(session: CompletionSession, fmt: str) -> None:
    """Give the session the template of fmt (the model's own for the generic form)."""
    name = TEMPLATES[fmt]
    template = session.target.chat_template() if name is None else (SET / name).read_text()
    session.chat_template = template
    session.chat_format = ChatFormat.of(session.target, template)
    assert detect(session.chat_format.template) == fmt


@pytest.fixture
def served(smol) -> Iterator[Any]:
    """use(fmt): both servers in that format; the model's own template afterwards."""

    def use(fmt: str) -> dict[str, Running]:
        for running in smol.values():
            _use(running.session, fmt)
        return smol

    yield use
    use(GENERIC)


def _client(running: Running) -> OpenAI:
    return OpenAI(base_url=running.base + "/v1", api_key="x", max_retries=0, timeout=600)


def _check(message: Any, finish: str, *, named: str | None = None) -> None:
    """A reply's properties: each call parses and validates (when the reply finished),
    and the content never holds edgespec's generic wrapper."""
    calls = message.tool_calls or []
    assert finish in ("stop", "length", "tool_calls")
    assert (finish == "tool_calls") == (bool(calls) and finish != "length")
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in SCHEMAS and (named is None or call.function.name == named)
        if finish == "tool_calls":
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert not any(w in (message.content or "") for w in WRAPPER)


@pytest.mark.parametrize("fmt", FORMATS)
def test_pydantic_tools_in_every_mode(served, fmt: str) -> None:
    """Parameters with $defs/$ref are accepted in every tool_choice mode; where the
    model must call, the call is there and valid; with none, no call."""
    client = _client(served(fmt)["ngram"])
    asks = [
        ({"tool_choice": "auto"}, None),
        ({"tool_choice": "required"}, None),
        ({"tool_choice": NAMED}, "get_weather"),
        ({"tool_choice": "required", "parallel_tool_calls": True}, None),
        ({"tool_choice": "none"}, None),
    ]
    for extra, named in asks:
        r = client.chat.completions.create(
            model="smol", messages=ASK, tools=TOOLS, max_tokens=64, **extra
        )
        choice = r.choices[0]
        _check(choice.message, choice.finish_reason, named=named)
        if extra["tool_choice"] == "none":
            assert not choice.message.tool_calls
        elif extra["tool_choice"] != "auto" and choice.finish_reason != "length":
            assert choice.finish_reason == "tool_calls", extra
            if not extra.get("parallel_tool_calls"):
                assert len(choice.message.tool_calls) == 1


def _streamed(client: OpenAI, **kwargs: Any) -> tuple[str, list[tuple[str, str]], str, int]:
    """(content, [(name, arguments)], finish_reason, argument fragments) of a stream,
    checking each delta's shape."""
    content, calls, finish, fragments = "", {}, None, 0
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for d in delta.tool_calls or []:
            if d.index not in calls:  # a call's first delta: id, type, name
                assert d.id.startswith("call_") and d.type == "function" and d.function.name
                calls[d.index] = [d.function.name, d.function.arguments or ""]
            else:
                assert d.id is None and d.function.name is None
                calls[d.index][1] += d.function.arguments or ""
                fragments += 1
        finish = chunk.choices[0].finish_reason or finish
    return content, [tuple(c) for c in calls.values()], finish, fragments


@pytest.mark.parametrize("fmt", FORMATS)
def test_streamed_arguments_arrive_in_pieces(served, fmt: str) -> None:
    """The stream's argument fragments add up to the unstreamed reply's arguments,
    sent as they are generated (several fragments per call), in auto and required."""
    client = _client(served(fmt)["ngram"])
    for choice in ("required", "auto"):
        kwargs = {"model": "smol", "messages": ASK, "tools": TOOLS, "max_tokens": 64,
                  "tool_choice": choice}  # fmt: skip
        whole = client.chat.completions.create(**kwargs).choices[0]
        content, calls, finish, fragments = _streamed(client, **kwargs)
        expected = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
        assert calls == expected and finish == whole.finish_reason
        assert content == (whole.message.content or "")
        if choice == "required":
            assert calls and fragments > len(calls)


@pytest.mark.parametrize("fmt", [HERMES, GENERIC])
def test_speculation_is_exact_under_the_lazy_grammar(served, fmt: str) -> None:
    """Greedy: the n-gram drafter's reply is plain decoding's, text or call."""
    servers = served(fmt)
    for choice in ("auto", "required"):
        got = []
        for kind in ("ngram", "plain"):
            r = _client(servers[kind]).chat.completions.create(
                model="smol", messages=ASK, tools=TOOLS, max_tokens=64, tool_choice=choice
            )
            m = r.choices[0].message
            got.append((m.content, [(c.function.name, c.function.arguments)
                                    for c in m.tool_calls or []]))  # fmt: skip
        assert got[0] == got[1], choice


@pytest.mark.parametrize("max_tokens", [2, 5, 9])
def test_a_cut_reply_never_shows_the_wrapper(served, max_tokens: int) -> None:
    """Cut at max_tokens in auto (the generic form: edgespec's own JSON), the content
    is the answer's text so far or nothing, streamed or not."""
    client = _client(served(GENERIC)["ngram"])
    kwargs = {"model": "smol", "messages": [{"role": "user", "content": "Say hello."}],
              "tools": TOOLS, "max_tokens": max_tokens}  # fmt: skip
    choice = client.chat.completions.create(**kwargs).choices[0]
    _check(choice.message, choice.finish_reason)
    content, _, finish, _ = _streamed(client, **kwargs)
    assert finish == choice.finish_reason
    assert content == (choice.message.content or "")
    assert not any(w in content for w in WRAPPER) and not content.lstrip().startswith("{")


@pytest.mark.parametrize("fmt", [GENERIC, HERMES])
def test_legacy_functions(served, fmt: str) -> None:
    """functions / function_call map onto tools: the reply's call is function_call
    (finish_reason function_call), streamed in pieces too; a role: function result
    answers it."""
    running = served(fmt)["ngram"]
    functions = [t["function"] for t in TOOLS]
    body = {"messages": ASK, "functions": functions, "function_call": {"name": "get_weather"},
            "max_tokens": 64}  # fmt: skip
    status, r = running.request("POST", "/v1/chat/completions", body)
    assert status == 200, r
    choice = r["choices"][0]
    assert "tool_calls" not in choice["message"]
    if choice["finish_reason"] != "length":
        assert choice["finish_reason"] == "function_call"
        call = choice["message"]["function_call"]
        assert call["name"] == "get_weather"
        jsonschema.validate(json.loads(call["arguments"]), WEATHER_ARGS)
        messages = [*ASK, {"role": "assistant", "content": None, "function_call": call},
                    {"role": "function", "name": "get_weather", "content": "4 C, rain"}]
        status, final = running.request("POST", "/v1/chat/completions", {
            "messages": messages, "functions": functions, "function_call": "none",
            "max_tokens": 8})  # fmt: skip
        assert status == 200, final
        assert "function_call" not in final["choices"][0]["message"]
    stream = _client(running).chat.completions.create(
        model="smol", messages=ASK, functions=functions, function_call={"name": "get_weather"},
        max_tokens=64, stream=True,
    )
    name, arguments, finish = None, "", None
    for chunk in stream:
        if chunk.choices:
            fc = chunk.choices[0].delta.function_call
            if fc is not None:
                name = name or fc.name
                arguments += fc.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == choice["finish_reason"] and name == "get_weather"
    if finish == "function_call":
        assert arguments == choice["message"]["function_call"]["arguments"]


def test_bad_parameters_are_a_400_naming_the_tool(served) -> None:
    running = served(HERMES)["ngram"]
    broken = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}}}  # fmt: skip
    for body, param in (
        ({"tools": [TOOLS[0], broken]}, "tools[1].function.parameters"),
        ({"functions": [TOOLS[0]["function"], broken["function"]]}, "functions[1].parameters"),
        ({"functions": [broken["function"]], "tools": TOOLS}, "functions"),
        ({"functions": [TOOLS[0]["function"]], "function_call": {"name": "nope"}},
         "function_call.name"),
    ):  # fmt: skip
        status, err = running.request("POST", "/v1/chat/completions", {"messages": ASK, **body})
        assert status == 400 and err["error"]["param"] == param, err
        assert "\n" not in err["error"]["message"] and "anyOf" not in err["error"]["message"]
    good = {"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 48}
    status, r = running.request("POST", "/v1/chat/completions", good)
    assert status == 200 and running.health()["status"] == "ok"


def test_functions_stay_a_chat_field(served) -> None:
    """/v1/completions has no tools: functions there is a 400 naming it."""
    running = served(GENERIC)["ngram"]
    body = {"prompt": "Hi", "max_tokens": 2, "functions": [TOOLS[0]["function"]]}
    status, err = running.request("POST", "/v1/completions", body)
    assert status == 400 and err["error"]["param"] == "functions"
