"""Tool calling against ``edgespec serve`` on the two offline models: the ``openai``
SDK's tool loop (call, ``role: tool`` result, final answer), streamed and not, and
``llm`` running a Python function; calls checked against their schemas with
``jsonschema``; greedy output with the n-gram drafter identical to plain decoding
under the tool grammar.

Only what holds on every CPU is asserted: which text a tiny model writes greedily
differs between machines (AMD and Intel round differently), so a reply may finish or
run to ``max_tokens``, and a model may or may not call a tool in ``auto`` mode.
Every reply that finished must parse and validate; one that was cut must say so and
never show edgespec's own wrapper; speculative output equals plain output always."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from openai import OpenAI

from edgespec.completion.session import load_session
from tests.server.conftest import Running, start

pytestmark = pytest.mark.real_model

MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
PATH = "/home/ana/projects/edgespec/edgespec/server/app.py"
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file from disk and return its contents.",
        "parameters": {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "absolute path of the file"},
                "max_lines": {"type": "integer"},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
TOOLS = [READ_FILE, WEATHER]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": f"Show me the first lines of {PATH}, please."}]
#: the generic tool format's own keys: content that starts with one is edgespec's wrapper
WRAPPERS = ('{"response"', '{"tool_call"', '{"tool_calls"')


def _serve(path: str, draft: str | None, name: str) -> Running:
    return start(load_session(path, draft, gamma=4, n_ctx=2048, name=name))


@pytest.fixture(scope="module")
def servers(real_model_paths) -> Iterator[dict[tuple[str, str], Running]]:
    """Each model served twice: with the n-gram drafter (gamma 4) and plain."""
    out = {}
    for model in MODELS:
        path = str(real_model_paths[model])
        out[model, "ngram"] = _serve(path, "ngram", model)
        out[model, "plain"] = _serve(path, None, model)
    yield out
    for running in out.values():
        running.server.close()
        running.session.target.close()


def _client(running: Running) -> OpenAI:
    return OpenAI(base_url=running.base + "/v1", api_key="x", max_retries=0, timeout=300)


def _check_calls(calls: list[Any]) -> None:
    """Each call names an offered tool, with JSON arguments valid against its schema."""
    assert calls
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, SCHEMAS[call.function.name])
    assert len({c.id for c in calls}) == len(calls)


def _check_reply(choice: Any, *, called: bool) -> None:
    """A reply's shape: calls that validate (finish_reason tool_calls), or content; one
    cut at max_tokens (finish_reason length) shows no wrapper in its content, and a call
    cut short (as OpenAI sends one: its arguments so far) names an offered tool."""
    content = choice.message.content or ""
    assert not content.lstrip().startswith(WRAPPERS), content
    if choice.finish_reason == "length":
        for call in choice.message.tool_calls or []:
            assert call.type == "function" and call.function.name in SCHEMAS
        return
    if called or choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        _check_calls(choice.message.tool_calls)
    else:
        assert choice.finish_reason == "stop"


@pytest.mark.parametrize("model", MODELS)
def test_the_openai_tool_loop(servers, model: str) -> None:
    """required: a call that validates (or a reply cut at max_tokens); the call and its
    result sent back (the model's own, else one written here); the final answer text."""
    client = _client(servers[model, "ngram"])
    r = client.chat.completions.create(
        model=model, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=96
    )
    choice = r.choices[0]
    _check_reply(choice, called=True)
    if choice.finish_reason == "tool_calls":
        assert len(choice.message.tool_calls) == 1  # parallel_tool_calls not asked for
        assistant = choice.message.model_dump(exclude_none=True)
        ids = [c.id for c in choice.message.tool_calls]
    else:  # cut: the loop goes on with a call as a client would have it
        arguments = json.dumps({"path": PATH})
        ids = ["call_written_by_the_test"]
        assistant = {"role": "assistant", "content": None, "tool_calls": [{
            "id": ids[0], "type": "function",
            "function": {"name": "read_file", "arguments": arguments}}]}  # fmt: skip
    messages = [*ASK, assistant]
    for call_id in ids:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "import sys\n"})
    final = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=24
    )
    assert final.choices[0].message.tool_calls is None
    assert final.choices[0].message.content and final.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("model", MODELS)
def test_a_streamed_call_equals_the_unstreamed_one(servers, model: str) -> None:
    """The SDK's stream: tool-call deltas (index, id, name, arguments) that add up to
    the same call as the non-streamed greedy reply (or, cut at max_tokens, the same
    content and finish_reason)."""
    client = _client(servers[model, "ngram"])
    kwargs = {"model": model, "messages": ASK, "tools": TOOLS, "max_tokens": 96}
    whole = client.chat.completions.create(**kwargs, tool_choice="required")
    calls: dict[int, dict[str, str]] = {}
    finish, content = None, ""
    for chunk in client.chat.completions.create(**kwargs, tool_choice="required", stream=True):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for d in delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += d.id or ""
            entry["name"] += (d.function.name or "") if d.function else ""
            entry["arguments"] += (d.function.arguments or "") if d.function else ""
        finish = chunk.choices[0].finish_reason or finish
    choice = whole.choices[0]
    _check_reply(choice, called=True)
    assert finish == choice.finish_reason
    assert content == (choice.message.content or "")
    expected = choice.message.tool_calls or []
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (c.function.name, c.function.arguments) for c in expected
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())


@pytest.mark.parametrize("model", MODELS)
def test_speculation_is_exact_under_the_tool_grammar(servers, model: str) -> None:
    """Greedy: the n-gram drafter's call is token for token plain decoding's, for a
    required call, a named one and parallel calls; lookup drafts from the path the
    conversation holds (whether the model copies it or not, the lookup drafts from the
    tools' names and keys in the prompt)."""
    asks = [
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "read_file"}}},
        {"tool_choice": "required", "parallel_tool_calls": True},
    ]
    drafted = 0
    for extra in asks:
        got = {}
        for kind in ("ngram", "plain"):
            r = _client(servers[model, kind]).chat.completions.create(
                model=model, messages=ASK, tools=TOOLS, max_tokens=96, **extra
            )
            choice = r.choices[0]
            calls = choice.message.tool_calls or []
            _check_reply(choice, called=True)  # parallel calls may run to max_tokens
            got[kind] = (
                choice.message.content,
                [(c.function.name, c.function.arguments) for c in calls],
            )
            if kind == "ngram":
                drafted += r.model_extra["timings"]["draft_n"]
        assert got["ngram"] == got["plain"], extra
        if "function" in extra["tool_choice"]:
            assert {name for name, _ in got["plain"][1]} <= {"read_file"}
    assert drafted > 0  # drafts were verified under the grammar: the equality tests something


@pytest.mark.parametrize("model", MODELS)
def test_auto_answers_with_text_or_a_valid_call(servers, model: str) -> None:
    client = _client(servers[model, "ngram"])
    for ask in (ASK, [{"role": "user", "content": "Say hello."}]):
        r = client.chat.completions.create(model=model, messages=ask, tools=TOOLS, max_tokens=64)
        choice = r.choices[0]
        _check_reply(choice, called=False)
        if choice.finish_reason == "stop":
            assert isinstance(choice.message.content, str)


def test_the_slot_serves_after_bad_tool_input(servers) -> None:
    running = servers["smollm2-135m-instruct", "ngram"]
    bad = {"messages": ASK, "tools": [READ_FILE], "tool_choice": {"type": "function",
           "function": {"name": "delete_everything"}}}  # fmt: skip
    status, err = running.request("POST", "/v1/chat/completions", bad)
    assert status == 400 and err["error"]["param"] == "tool_choice.function.name"
    good = {"messages": ASK, "tools": [READ_FILE], "tool_choice": "required", "max_tokens": 64}
    status, r = running.request("POST", "/v1/chat/completions", good)
    assert status == 200 and r["choices"][0]["finish_reason"] in ("tool_calls", "length")
    if r["choices"][0]["finish_reason"] == "tool_calls":
        assert r["choices"][0]["message"]["tool_calls"]
    assert running.health()["status"] == "ok"


@pytest.mark.parametrize("model", MODELS)
def test_json_schema_output_validates(servers, model: str) -> None:
    """response_format json_schema (OpenAI's structured outputs, strict): greedy, the
    speculative reply is exactly plain decoding's; greedy or sampled, a reply that
    finished parses and matches the schema. Every string, number and array is bounded,
    so the grammar lets few replies run to max_tokens, and one that does says so."""
    schema = {
        "type": "object",
        "properties": {
            "file": {"type": "string", "maxLength": 40},
            "language": {"enum": ["python", "rust", "go"]},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}, "maxItems": 3},
        },
        "required": ["file", "language", "lines"],
        "additionalProperties": False,
        "$defs": {"line": {"type": "object",
                           "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9999}},
                           "required": ["n"], "additionalProperties": False}},
    }  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "f", "schema": schema, "strict": True}}
    runs = [("ngram", {"temperature": 0}), ("plain", {"temperature": 0})]
    runs += [("ngram", {"temperature": 0.8, "seed": seed}) for seed in (3, 4)]
    greedy = []
    for kind, sampling in runs:
        r = _client(servers[model, kind]).chat.completions.create(
            model=model, messages=ASK, response_format=fmt, max_tokens=160, **sampling
        )
        choice = r.choices[0]
        assert choice.finish_reason in ("stop", "length") and not choice.message.tool_calls
        if choice.finish_reason == "stop":
            jsonschema.validate(json.loads(choice.message.content), schema)
        else:
            assert r.usage.completion_tokens == 160
        if not sampling["temperature"]:
            greedy.append((choice.message.content, choice.finish_reason))
    assert greedy[0] == greedy[1]  # speculation is exact (sampled: in distribution only)


def test_llm_runs_a_python_function_tool(servers, tmp_path) -> None:
    """simonw's llm with ``--functions`` (tool_choice auto): the server accepts llm's
    tools, each reply is text or a call llm can run; every call the model makes runs
    the function with the path the model gave and its result goes back to the server,
    which answers it. Whether the tiny model calls, and how often, differs between
    CPUs: llm's chain limit (3) ends a model that keeps calling, and that is the only
    error allowed."""
    running = servers["smollm2-135m-instruct", "ngram"]
    (tmp_path / "extra-openai-models.yaml").write_text(
        f'- model_id: edgespec\n  model_name: smollm2\n  api_base: "{running.base}/v1"\n'
        "  supports_tools: true\n"
    )
    marker = tmp_path / "called"
    function = (
        "def read_file(path: str) -> str:\n"
        '    "Read a text file and return its contents."\n'
        f"    open({str(marker)!r}, 'a').write(repr(path) + '\\n')\n"
        '    return "import sys"\n'
    )
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path)}
    env.pop("OPENAI_API_KEY", None)
    exe = Path(sys.executable).with_name("llm")
    prompt = "Read the file /etc/motd with the read_file tool."
    limit = 3
    done = subprocess.run(
        [str(exe), "-m", "edgespec", "--functions", function, "--td", "--cl", str(limit),
         "-o", "max_tokens", "64", prompt],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    ran = marker.read_text().splitlines() if marker.exists() else []
    assert all(isinstance(eval(line), str) for line in ran)  # the path the model gave
    assert output.count("Tool call: read_file(") == len(ran)  # each call llm showed ran
    if done.returncode == 0:  # the model answered in text, after 0 .. limit-1 calls
        assert len(ran) < limit
        assert "Error" not in done.stderr, done.stderr
    else:  # the model called on every turn: llm stops it, and nothing else went wrong
        assert f"Chain limit of {limit} exceeded" in done.stderr, done.stderr
        assert len(ran) == limit - 1
