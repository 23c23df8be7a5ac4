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

import numpy as np
import pytest

from edgespec.backend import LlamaModel
from edgespec.chat_template import ChatTemplateError, render_chat
from edgespec.grammar import Grammar
from edgespec.grammar.tools import special_tokens, tool_grammar
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
    assert isinstance(tool_grammar(request, fmt), Grammar)


@pytest.fixture(scope="module")
def smollm(real_model_paths):
    with LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256) as model:
        yield model


def _admits(model: LlamaModel, grammar: Grammar, text: str) -> bool:
    """Whether grammar admits text, token by token as the model writes it, to its end."""
    matcher = model.grammar(grammar.spec)
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
    assert _admits(smollm, grammar, body)
    bad_enum = body.replace('"unit": "c"', '"unit": "k"')
    assert not _admits(smollm, grammar, bad_enum)
    missing = body.replace(', "unit": "c"', "")
    assert not _admits(smollm, grammar, missing)
    assert not _admits(smollm, grammar, "Sure, here is the weather.")


def test_parallel_grammar_admits_several_calls(smollm) -> None:
    for fmt in (HERMES, MISTRAL, GENERIC):
        two = _written(fmt, TWO_CALLS)
        assert _admits(smollm, tool_grammar(_request("required", True), fmt), two), fmt
        assert not _admits(smollm, tool_grammar(_request("required", False), fmt), two), fmt


def test_generic_auto_admits_a_call_or_an_answer(smollm) -> None:
    grammar = tool_grammar(_request("auto"), GENERIC)
    assert _admits(smollm, grammar, _written(GENERIC, TWO_CALLS[:1]))
    assert _admits(smollm, grammar, '{"response": "Hello."}')
    assert not _admits(smollm, grammar, "Hello.")


# ------------------------------------------- pydantic-style parameters ($defs / $ref)

#: what pydantic's model_json_schema() writes for a model with a nested model and an enum
PYDANTIC = {
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
            "additionalProperties": False,
        },
    },
    "properties": {"place": {"$ref": "#/$defs/Place"}, "unit": {"$ref": "#/$defs/Unit"}},
    "required": ["place", "unit"],
    "title": "WeatherArgs",
    "type": "object",
    "additionalProperties": False,
}  # fmt: skip
PYDANTIC_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": PYDANTIC}}
PYDANTIC_ARGS = {"place": {"city": "Oslo", "country": None}, "unit": "celsius"}


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3, GENERIC])
@pytest.mark.parametrize("choice", CHOICES, ids=["auto", "required", "named"])
def test_defs_and_refs_resolve_in_every_format_and_mode(smollm, fmt: str, choice) -> None:
    """A tool's parameters go into the grammar as they are, so '#/$defs/X' resolves:
    a call with valid nested arguments is admitted, one breaking a $ref'd enum is not."""
    request = _request(choice, tools=[READ_FILE, PYDANTIC_TOOL])
    grammar = tool_grammar(request, fmt)
    body = _written(fmt, [("get_weather", PYDANTIC_ARGS)])
    assert _admits(smollm, grammar, body)
    assert not _admits(smollm, grammar, body.replace('"celsius"', '"kelvin"'))
    assert not _admits(smollm, grammar, body.replace('"city": "Oslo", ', ""))  # required


def test_parameters_that_cannot_compile_name_the_tool() -> None:
    missing = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}}}  # fmt: skip
    with pytest.raises(ToolError, match=r"^'tools\[1\]\.function\.parameters': .*Missing"):
        tool_grammar(_request("required", tools=[READ_FILE, missing]), HERMES)
    unenforced = {"type": "object", "properties": {"n": {"type": "integer", "not": {"const": 3}}}}
    lenient = {"type": "function", "function": {"name": "g", "parameters": unenforced}}
    assert isinstance(tool_grammar(_request("required", tools=[lenient]), GENERIC), Grammar)
    strict = {"type": "function", "function": {**lenient["function"], "strict": True}}
    with pytest.raises(ToolError, match=r"^'tools\[0\]\.function\.parameters': .*'not'"):
        tool_grammar(_request("required", tools=[strict]), GENERIC)
    with pytest.raises(ToolError, match=r"'tools\[0\]\.function\.strict'"):
        parse_tools([{"type": "function", "function": {"name": "h", "strict": "yes"}}], None, None)


# ------------------------------------------------------------- the lazy grammar (auto)


def _mask_after(model: LlamaModel, grammar: Grammar, text: str):
    matcher = model.grammar(grammar.spec)
    try:
        for token in model.tokenize(text, add_special=False):
            matcher.accept(token)
        return matcher.mask().copy()
    finally:
        matcher.close()


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3])
def test_auto_leaves_the_text_before_the_trigger_free(smollm, fmt: str) -> None:
    """Before the trigger the mask is any text's (every token but control tokens and
    bytes that cannot continue UTF-8 text), at the start and after some prose."""
    grammar = tool_grammar(_request("auto"), fmt)
    free = Grammar.from_lark("start: /(.|\\n)*/")
    prose = "I would rather answer this myself: the file is small, so"
    for text in ("", prose):
        mask = _mask_after(smollm, grammar, text)
        any_text = _mask_after(smollm, free, text)
        if fmt == LLAMA3 and text == "":  # a reply opening with "{" is a call here
            opens_call = [t for t in range(len(mask)) if mask[t] != any_text[t]]
            assert opens_call and all(
                smollm.token_bytes(t).lstrip().startswith(b"{") for t in opens_call
            )
            continue
        assert (mask == any_text).all()
        assert mask.sum() > 0.99 * len(mask)


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL])
def test_auto_constrains_the_call_from_the_trigger_on(smollm, fmt: str) -> None:
    grammar = tool_grammar(_request("auto", tools=[READ_FILE, PYDANTIC_TOOL]), fmt)
    trigger = {HERMES: "<tool_call>\n", MISTRAL: "[TOOL_CALLS]"}[fmt]
    before = "Let me look that up for you. "
    mask = _mask_after(smollm, grammar, before + trigger)
    assert mask.sum() < 0.01 * len(mask)  # the call's opening only, not prose
    body = _written(fmt, [("get_weather", PYDANTIC_ARGS)])
    assert _admits(smollm, grammar, before + body)
    assert not _admits(smollm, grammar, before + body.replace('"celsius"', '"kelvin"'))
    assert _admits(smollm, grammar, "Just text, no call at all.")


def test_a_trigger_held_as_a_control_token_is_named_by_its_id(smollm) -> None:
    """A vocabulary whose <tool_call> is a control token (Qwen's): special_tokens finds
    it, and the grammar takes that token, not the text, as the trigger. SmolLM2 has no
    such token: its control token <filename> stands in for one."""
    assert special_tokens(smollm, HERMES) == {}  # SmolLM2's: text

    class WithToolCallToken:
        def tokenize(self, text: str, **kw) -> list[int]:
            return [6] if text == "<tool_call>" else smollm.tokenize(text, **kw)

        def grammar(self, spec: str):
            return smollm.grammar(spec)

    specials = special_tokens(WithToolCallToken(), HERMES)
    assert specials == {"<tool_call>": 6}
    grammar = tool_grammar(_request("auto"), HERMES, specials)
    call = json.dumps({"name": "read_file", "arguments": ARGS})
    matcher = smollm.grammar(grammar.spec)
    try:
        for token in smollm.tokenize("Checking.", add_special=False):
            matcher.accept(token)
        assert matcher.allowed()[6]
        matcher.accept(6)
        for token in smollm.tokenize(f"\n{call}\n</tool_call>", add_special=False):
            assert matcher.allowed()[token]
            matcher.accept(token)
        assert matcher.allowed()[smollm.vocab_info().eos]
    finally:
        matcher.close()


def test_a_real_model_writes_a_valid_call_after_the_trigger(smollm) -> None:
    """SmolLM2 writes free text, the trigger follows, and from there the model's own
    greedy choices under the mask make a call that parses and validates (whatever
    they are on this CPU: only properties are checked)."""
    import jsonschema

    from edgespec.tools.stream import read_partial

    request = _request("auto", tools=[READ_FILE, PYDANTIC_TOOL])
    grammar = tool_grammar(request, HERMES)
    prompt = smollm.tokenize(
        "<|im_start|>user\nWhat is the weather in Oslo?<|im_end|>\n<|im_start|>assistant\n",
        add_special=False, parse_special=True,
    )  # fmt: skip
    written = "I will check.\n<tool_call>\n"
    matcher = smollm.grammar(grammar.spec)
    smollm.reset()
    try:
        forced = smollm.tokenize(written, add_special=False)
        for token in forced:
            matcher.accept(token)
        logits = smollm.decode(prompt + forced)[-1]
        out: list[int] = []
        eos = smollm.vocab_info().eos
        for _ in range(160):
            row = np.where(matcher.mask()[: len(logits)], logits, -np.inf)
            token = int(np.argmax(row))
            if token == eos or smollm.is_eog(token):
                break
            matcher.accept(token)
            out.append(token)
            logits = smollm.decode([token])[-1]
        text = written + b"".join(smollm.token_bytes(t) for t in out).decode("utf-8", "replace")
    finally:
        matcher.close()
    partial = read_partial(text, HERMES, request.offered())
    assert partial.content == "I will check." and partial.calls  # the call began
    if len(out) < 160:  # it ended: the call is whole and valid
        content, calls = parse_reply(text, HERMES, request.offered())
        assert content == "I will check." and len(calls) == 1
        schema = {"read_file": READ_FILE, "get_weather": PYDANTIC_TOOL}[calls[0].name]
        jsonschema.validate(json.loads(calls[0].arguments), schema["function"]["parameters"])


# ------------------------------------------------------------------ streamed calls


STREAMED = {
    HERMES: 'Let me see.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "/a\\"}{b"}}\n'
            '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Oslo", "unit": "c"}}\n</tool_call>',
    MISTRAL: 'Sure.[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "/x"}}, '
             '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}]',
    LLAMA3: '<|python_tag|>{"name": "read_file", "parameters": {"path": "/x y"}}',
    GENERIC: '{"tool_calls": [{"name": "read_file", "arguments": {"path":"/x"}}, '
             '{"name": "get_weather", "arguments": {\n "city": "Oslo", "unit": "c"}}]}',
}  # fmt: skip


def _stream(fmt: str, text: str, step: int) -> list[dict]:
    from edgespec.tools.stream import CallStream

    stream = CallStream(fmt, _request("auto", True).offered())
    deltas = []
    for i in range(0, len(text), step):
        deltas.append(stream.pieces(text[i : i + step]))
    deltas.append(stream.rest())
    return [d for ds in deltas for d in ds]


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3, GENERIC])
@pytest.mark.parametrize("step", [1, 3, 1000])
def test_streamed_arguments_add_up_to_the_final_ones(fmt: str, step: int) -> None:
    """Deltas in OpenAI's shape: per call a first one with index, id, type, name and
    empty arguments, then argument fragments as they come; joined, each call's equal
    the unstreamed reply's arguments."""
    from edgespec.tools.stream import read_reply

    text = STREAMED[fmt]
    deltas = _stream(fmt, text, step)
    content, calls = read_reply(text, fmt, _request("auto", True).offered())
    assert [json.loads(c.arguments) for c in calls] == [
        json.loads(c.arguments) for c in parse_reply(text, fmt, _request("auto", True).offered())[1]
    ]
    got: dict[int, dict] = {}
    for d in deltas:
        for entry in d.get("tool_calls", ()):
            if entry["index"] not in got:
                assert entry["type"] == "function" and entry["id"].startswith("call_")
                assert entry["function"] == {"name": entry["function"]["name"], "arguments": ""}
                got[entry["index"]] = {"name": entry["function"]["name"], "arguments": ""}
            else:
                assert set(entry) == {"index", "function"} and set(entry["function"]) == {
                    "arguments"}  # fmt: skip
                got[entry["index"]]["arguments"] += entry["function"]["arguments"]
    assert [(g["name"], g["arguments"]) for g in got.values()] == [
        (c.name, c.arguments) for c in calls
    ]
    assert "".join(d.get("content", "") for d in deltas) == (content or "")
    if step == 1:  # generated piece by piece: sent piece by piece
        pieces = [d for d in deltas if d.get("tool_calls") and "id" not in d["tool_calls"][0]]
        assert len(pieces) > len(calls)


def test_streamed_text_is_sent_as_it_comes() -> None:
    text = "Hello there, no call today."
    deltas = _stream(HERMES, text, 1)
    assert len(deltas) > 5 and "".join(d["content"] for d in deltas) == text
    deltas = _stream(GENERIC, '{"response": "It is \\"4\\" \\u00e9."}', 1)
    assert len(deltas) > 5 and "".join(d["content"] for d in deltas) == 'It is "4" é.'


# ------------------------------------------------------- a reply cut before its end


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ('{"response": "Hello wor', "Hello wor", []),
        ('{"response": "Tab\\', "Tab", []),
        ('{"resp', None, []),
        ("\n", None, []),
        ('\n {"response": "Hi', "Hi", []),
        ('{"tool_call": {"name": "read_file", "arguments": {"pa', None, [("read_file", '{"pa')]),
        ('{"tool_call": {"na', None, []),
    ],
)
def test_a_cut_generic_reply_never_shows_the_wrapper(text, content, calls) -> None:
    from edgespec.tools.stream import read_reply

    got_content, got_calls = read_reply(text, GENERIC, _request().offered())
    assert got_content == content
    assert [(c.name, c.arguments) for c in got_calls] == calls
    streamed = _stream(GENERIC, text, 1)
    assert "".join(d.get("content", "") for d in streamed) == (content or "")
