"""Tool calling without a server: the request's tools checked, each template of
llama.cpp's set rendering tools, calls and results, the parser reading back the call
the template showed, and the call grammars admitting exactly a valid call.

The server's end of it (real models, the openai SDK's loop, llm) is
tests/server/test_tools.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from edgespec.backend import LlamaModel
from edgespec.chat_template import ChatTemplateError, render_chat
from edgespec.grammar import Grammar
from edgespec.tools import ToolError, ToolRequest, parse_tools
from edgespec.tools.formats import (
    GENERIC,
    HERMES,
    LLAMA3,
    MISTRAL,
    detect,
    generic_system_prompt,
    mistral_call_id,
    parse_reply,
    template_messages,
)
from edgespec.tools.grammar import tool_grammar

SET = Path(__file__).parent / "data" / "llama_cpp_templates"
# the one template that cannot render any conversation: it needs 'functions', which
# edgespec does not give a template (tests/test_chat_template_set.py holds it too)
NEEDS_FUNCTIONS = "fireworks-ai-llama-3-firefunction-v2.jinja"
TOOL_TEMPLATES = sorted(
    p.name for p in SET.glob("*.jinja") if "tools" in p.read_text() and p.name != NEEDS_FUNCTIONS
)

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["c", "f"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ARGS = {"path": "/srv/app/config-7f3.toml"}
RESULT = "port = 8080  # result-sentinel-91c"
USER = [{"role": "user", "content": "Show the config"}]
CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {
            "id": "call_6b1e0c2d9a",
            "type": "function",
            "function": {"name": "read_file", "arguments": ARGS},
        }
    ],
}
TOOL_RESULT = {
    "role": "tool",
    "tool_call_id": "call_6b1e0c2d9a",
    "name": "read_file",
    "content": RESULT,
}


def _request(choice: object = "auto", parallel: bool | None = None, tools=None) -> ToolRequest:
    request = parse_tools(tools or [READ_FILE, WEATHER], choice, parallel)
    assert request is not None
    return request


# ------------------------------------------------------------------ the request's fields


@pytest.mark.parametrize(
    ("tools", "choice", "parallel", "names"),
    [
        ({"type": "function"}, None, None, "'tools'"),
        ([{"type": "retrieval"}], None, None, "'tools[0]'"),
        ([{"type": "function"}], None, None, "'tools[0].function'"),
        (
            [{"type": "function", "function": {"name": "a b"}}],
            None,
            None,
            "'tools[0].function.name'",
        ),
        (
            [{"type": "function", "function": {"name": "f", "description": 3}}],
            None,
            None,
            "'tools[0].function.description'",
        ),
        (
            [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
            None,
            None,
            "'tools[0].function.parameters'",
        ),
        (
            [{"type": "function", "function": {"name": "f", "parameters": []}}],
            None,
            None,
            "'tools[0].function.parameters'",
        ),
        ([READ_FILE, READ_FILE], None, None, "'tools[1].function.name'"),
        (
            [READ_FILE],
            {"type": "function", "function": {"name": "rm"}},
            None,
            "'tool_choice.function.name'",
        ),
        ([READ_FILE], "always", None, "'tool_choice'"),
        ([READ_FILE], "auto", "yes", "'parallel_tool_calls'"),
        (None, "required", None, "'tool_choice'"),
    ],
)
def test_bad_tool_fields_name_the_field(tools, choice, parallel, names: str) -> None:
    with pytest.raises(ToolError) as err:
        parse_tools(tools, choice, parallel)
    message = str(err.value)
    assert message.startswith(names) and "\n" not in message


def test_no_tools_or_choice_none_gives_the_model_no_tools() -> None:
    assert parse_tools(None, None, None) is None
    assert parse_tools([], "auto", None) is None
    assert parse_tools([READ_FILE], "none", True) is None


def test_choices() -> None:
    auto = _request()
    assert auto.choice.mode == "auto" and not auto.must_call and len(auto.offered()) == 2
    assert _request("required").must_call
    named = _request({"type": "function", "function": {"name": "get_weather"}}, True)
    assert named.must_call and named.parallel
    assert [t.name for t in named.offered()] == ["get_weather"]


def test_generic_prompt_offers_an_answer_only_when_the_model_may_choose() -> None:
    auto = generic_system_prompt(_request())
    assert "read_file" in auto and "get_weather" in auto and '"response"' in auto
    required = generic_system_prompt(_request("required", True))
    assert '"response"' not in required and '"tool_calls"' in required
    named = generic_system_prompt(_request({"type": "function", "function": {"name": "read_file"}}))
    assert "read_file" in named and "get_weather" not in named


# -------------------------------------------------------- the templates: render, read back


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("Qwen-Qwen2.5-7B-Instruct.jinja", HERMES),
        ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", HERMES),
        ("meta-llama-Llama-3.1-8B-Instruct.jinja", LLAMA3),
        ("mistralai-Mistral-Nemo-Instruct-2407.jinja", MISTRAL),
        ("Qwen3-Coder.jinja", GENERIC),  # XML arguments: no parser of ours, so generic
        ("unsloth-mistral-Devstral-Small-2507.jinja", GENERIC),  # [ARGS]
        ("google-gemma-2-2b-it.jinja", GENERIC),  # no tools at all
    ],
)
def test_detect(name: str, fmt: str) -> None:
    assert detect((SET / name).read_text()) == fmt


def test_the_set_has_templates_of_every_native_format() -> None:
    formats = {detect((SET / n).read_text()) for n in TOOL_TEMPLATES}
    assert formats == {HERMES, LLAMA3, MISTRAL, GENERIC}
    assert len(TOOL_TEMPLATES) >= 60


def _render(template: str, fmt: str, request: ToolRequest, messages, generation: bool) -> str:
    tools = None if fmt == GENERIC else [t.openai() for t in request.offered()]
    return render_chat(
        template,
        template_messages(messages, fmt, request),
        bos_token="<s>",
        eos_token="</s>",
        add_generation_prompt=generation,
        tools=tools,
    )


def _reply_as_model_writes_it(template: str, fmt: str, request: ToolRequest) -> str:
    """The text of the assistant's call turn as the template renders it, less what the
    template writes around any reply (the turn's header and end, and whatever follows):
    what a text reply's rendering shares with the call's, before and after."""
    text = {"role": "assistant", "content": "S3NT"}
    text_turn = _render(template, fmt, request, [*USER, text], generation=False)
    call_turn = _render(template, fmt, request, [*USER, CALL], generation=False)
    head = len(os.path.commonprefix([text_turn, call_turn]))
    tail = len(os.path.commonprefix([text_turn[::-1], call_turn[::-1]]))
    return call_turn[head : len(call_turn) - tail]


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_template_renders_tools_calls_and_results(name: str) -> None:
    template = (SET / name).read_text()
    fmt = detect(template)
    request = _request()
    prompt = _render(template, fmt, request, [*USER, CALL, TOOL_RESULT], generation=True)
    assert "read_file" in prompt and "get_weather" in prompt  # the tools
    assert ARGS["path"] in prompt  # the earlier call
    assert "result-sentinel-91c" in prompt  # its result


@pytest.mark.parametrize("name", TOOL_TEMPLATES)
def test_parser_reads_back_the_call_the_template_shows(name: str) -> None:
    template = (SET / name).read_text()
    fmt = detect(template)
    request = _request()
    content, calls = parse_reply(
        _reply_as_model_writes_it(template, fmt, request), fmt, request.tools
    )
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("read_file", ARGS)]
    assert content is None


def test_the_template_needing_functions_says_so() -> None:
    with pytest.raises(ChatTemplateError, match="needs 'functions'"):
        _render((SET / NEEDS_FUNCTIONS).read_text(), GENERIC, _request(), USER, generation=True)


def test_mistral_call_ids() -> None:
    assert mistral_call_id("a1B2c3D4e") == "a1B2c3D4e"
    mapped = mistral_call_id("call_6b1e0c2d9a")
    assert len(mapped) == 9 and mapped.isalnum() and mapped == mistral_call_id("call_6b1e0c2d9a")
    assert mapped != mistral_call_id("call_6b1e0c2d9b")
    rendered = template_messages([*USER, CALL, TOOL_RESULT], MISTRAL, None)
    assert rendered[1]["tool_calls"][0]["id"] == rendered[2]["tool_call_id"] == mapped


# ------------------------------------------------------------------------ parsing replies

TWO_CALLS = [("read_file", ARGS), ("get_weather", {"city": "Oslo", "unit": "c"})]


def _written(fmt: str, calls: list[tuple[str, dict]]) -> str:
    if fmt == HERMES:
        blocks = [json.dumps({"name": n, "arguments": a}) for n, a in calls]
        return "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks)
    if fmt == MISTRAL:
        return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a} for n, a in calls])
    if fmt == LLAMA3:
        (name, args), *_ = calls
        return json.dumps({"name": name, "parameters": args})
    entries = [{"name": n, "arguments": a} for n, a in calls]
    payload = {"tool_call": entries[0]} if len(entries) == 1 else {"tool_calls": entries}
    return json.dumps(payload)


@pytest.mark.parametrize(
    ("fmt", "n"),  # Llama 3's format holds one call per reply
    [(HERMES, 1), (HERMES, 2), (MISTRAL, 1), (MISTRAL, 2), (LLAMA3, 1), (GENERIC, 1), (GENERIC, 2)],
)
def test_parse_reply_reads_calls(fmt: str, n: int) -> None:
    content, calls = parse_reply(_written(fmt, TWO_CALLS[:n]), fmt, _request().tools)
    assert content is None
    assert [(c.name, json.loads(c.arguments)) for c in calls] == TWO_CALLS[:n]
    assert len({c.id for c in calls}) == n and all(c.id.startswith("call_") for c in calls)


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3, GENERIC])
def test_a_call_of_no_offered_tool_stays_text(fmt: str) -> None:
    text = _written(fmt, [("delete_everything", {})])
    assert parse_reply(text, fmt, _request().tools) == (text, [])


def test_plain_text_and_the_generic_answer() -> None:
    tools = _request().tools
    assert parse_reply("Hello there.", HERMES, tools) == ("Hello there.", [])
    assert parse_reply('{"response": "It is 4."}', GENERIC, tools) == ("It is 4.", [])
    content, calls = parse_reply(
        'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": "{\\"path\\": \\"/a\\"}"}'
        "\n</tool_call>",
        HERMES,
        tools,
    )
    assert content == "Let me look." and json.loads(calls[0].arguments) == {"path": "/a"}


# ---------------------------------------------------------------------------- grammars

CHOICES = ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3, GENERIC])
@pytest.mark.parametrize("choice", CHOICES, ids=["auto", "required", "named"])
@pytest.mark.parametrize("parallel", [False, True])
def test_tool_grammar_compiles(fmt: str, choice: object, parallel: bool) -> None:
    request = _request(choice, parallel)
    grammar = tool_grammar(request, fmt)
    if fmt != GENERIC and not request.must_call:
        assert grammar is None  # a native format's text answer is free: parsed afterwards
    else:
        assert isinstance(grammar, Grammar)


@pytest.fixture(scope="module")
def smollm(real_model_paths):
    with LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256) as model:
        yield model


def _admits(model: LlamaModel, grammar: Grammar, text: str) -> bool:
    """Whether grammar admits text, token by token as the model writes it, to its end."""
    matcher = model.grammar(grammar.gbnf, grammar.root)
    try:
        for token in model.tokenize(text, add_special=False):
            if not matcher.allowed()[token]:
                return False
            matcher.accept(token)
        return bool(matcher.allowed()[model.vocab_info().eos])
    finally:
        matcher.close()


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3, GENERIC])
def test_required_grammar_admits_valid_calls_only(smollm, fmt: str) -> None:
    grammar = tool_grammar(_request("required"), fmt)
    body = _written(fmt, TWO_CALLS[1:])
    body = body.removeprefix("[TOOL_CALLS]")  # a special token: the grammar starts after it
    assert _admits(smollm, grammar, body)
    bad_enum = body.replace('"unit": "c"', '"unit": "k"')
    assert not _admits(smollm, grammar, bad_enum)
    missing = body.replace(', "unit": "c"', "")
    assert not _admits(smollm, grammar, missing)
    assert not _admits(smollm, grammar, "Sure, here is the weather.")


def test_parallel_grammar_admits_several_calls(smollm) -> None:
    for fmt in (HERMES, MISTRAL, GENERIC):
        two = _written(fmt, TWO_CALLS).removeprefix("[TOOL_CALLS]")
        assert _admits(smollm, tool_grammar(_request("required", True), fmt), two), fmt
        assert not _admits(smollm, tool_grammar(_request("required", False), fmt), two), fmt


def test_generic_auto_admits_a_call_or_an_answer(smollm) -> None:
    grammar = tool_grammar(_request("auto"), GENERIC)
    assert _admits(smollm, grammar, _written(GENERIC, TWO_CALLS[:1]))
    assert _admits(smollm, grammar, '{"response": "Hello."}')
    assert not _admits(smollm, grammar, "Hello.")
