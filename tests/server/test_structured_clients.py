"""Structured output through real clients against ``edgespec serve`` on the offline models.

Pydantic models with constraints (``Field(ge=, le=)``, ``EmailStr``, an enum, a nested
model, ``Optional``, a list) sent by the ``openai`` SDK (``chat.completions.parse``
with ``response_format=Model`` and with ``pydantic_function_tool``, streamed and not)
and by ``instructor`` (modes ``TOOLS``, ``TOOLS_STRICT``, ``JSON_SCHEMA``, and a
streamed partial). What must hold on every CPU, whatever text the tiny models write:

- the request is accepted (no 400);
- every *finished* output validates, with ``jsonschema``, against the very schema
  the client sent, and parses into the pydantic model;
- a reply cut at ``max_tokens`` says so (``finish_reason: length``) and never carries
  edgespec's own generic-format wrapper (``{"response": ...}``, ``{"tool_call": ...}``)
  in ``content``; a call cut short may come as OpenAI sends one, in ``tool_calls``
  with its arguments so far;
- the protocol's shape (ids, types, finish reasons, the stream adding up to the reply).

The outputs themselves are never asserted: they differ between AMD and Intel CPUs.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from typing import Any

import instructor
import jsonschema
import openai
import pytest
from instructor.core import IncompleteOutputException, InstructorRetryException
from openai import OpenAI
from pydantic import BaseModel, EmailStr, Field

from edgespec.completion.session import load_session
from tests.server.conftest import Running, start

pytestmark = pytest.mark.real_model

MODELS = ("smollm2-135m-instruct", "gemma-3-270m")
MAX_TOKENS = 96
#: the generic tool format's own keys: a reply that starts with one is edgespec's wrapper
WRAPPERS = ('{"response"', '{"tool_call"', '{"tool_calls"')
ASK = [{"role": "user", "content": "Make up a contact card for a person named Ana in Lisbon."}]


class Colour(enum.StrEnum):
    red = "red"
    green = "green"
    blue = "blue"


class Address(BaseModel):
    city: str = Field(max_length=20)
    postcode: str = Field(pattern=r"^[0-9]{5}$")


class Contact(BaseModel):
    """A person's contact card."""

    name: str = Field(max_length=20)
    age: int = Field(ge=0, le=120)
    email: EmailStr
    favourite: Colour
    address: Address | None = None
    tags: list[str] = Field(default_factory=list, max_length=2)


class Recorder:
    """The JSON bodies the client POSTed, in order (an httpx request hook)."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> None:  # an httpx (or httpx2) Request
        if request.method == "POST":
            self.bodies.append(json.loads(request.content))

    def schema(self) -> dict[str, Any]:
        """The schema of the last request: its response_format's, else its tool's."""
        body = self.bodies[-1]
        if body.get("response_format"):
            return body["response_format"]["json_schema"]["schema"]
        (tool,) = body["tools"]
        return tool["function"]["parameters"]


@pytest.fixture(scope="module")
def servers(real_model_paths) -> Iterator[dict[str, Running]]:
    """Each model served with the n-gram drafter (gamma 4)."""
    out = {
        model: start(
            load_session(str(real_model_paths[model]), "ngram", gamma=4, n_ctx=2048, name=model)
        )  # fmt: skip
        for model in MODELS
    }
    yield out
    for running in out.values():
        running.server.close()
        running.session.target.close()


def _client(running: Running) -> tuple[OpenAI, Recorder]:
    recorder = Recorder()
    http = openai.DefaultHttpxClient(event_hooks={"request": [recorder]}, timeout=300)
    client = OpenAI(base_url=running.base + "/v1", api_key="x", max_retries=0, http_client=http)
    return client, recorder


def _check_finished(text: str, schema: dict[str, Any]) -> Contact:
    """A finished output: valid against the schema sent (its draft, formats checked),
    and a Contact."""
    value = json.loads(text)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)
    return Contact.model_validate_json(text)


def _check_cut(completion: Any, tools: tuple[str, ...] = (), max_tokens: int = MAX_TOKENS) -> None:
    """A reply cut at max_tokens: finish_reason length, no wrapper in content; a call
    cut short (as OpenAI sends one: arguments so far) names an offered tool."""
    choice = completion.choices[0]
    assert choice.finish_reason == "length"
    for call in choice.message.tool_calls or []:
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in tools
    content = choice.message.content or ""
    assert not content.lstrip().startswith(WRAPPERS), content
    if completion.usage is not None:  # a stream's has none unless asked for
        assert completion.usage.completion_tokens == max_tokens


def _stream(client: OpenAI) -> Any:
    """The SDK's chat.completions.stream (client.beta's in older SDKs)."""
    completions = client.chat.completions
    return (
        completions.stream
        if hasattr(completions, "stream")
        else client.beta.chat.completions.stream
    )


@pytest.mark.parametrize("model", MODELS)
def test_openai_parse_with_a_pydantic_response_format(servers, model: str) -> None:
    """chat.completions.parse(response_format=Contact): OpenAI's strict structured
    outputs, greedy and sampled; a finished reply is a parsed Contact."""
    client, recorder = _client(servers[model])
    samplings = [{"temperature": 0}]
    if model == "smollm2-135m-instruct":
        samplings.append({"temperature": 0.9, "seed": 7})
    for sampling in samplings:
        try:
            r = client.chat.completions.parse(
                model=model, messages=ASK, response_format=Contact, max_tokens=MAX_TOKENS,
                **sampling,
            )  # fmt: skip
        except openai.LengthFinishReasonError as e:
            _check_cut(e.completion)
            continue
        schema = recorder.schema()
        assert recorder.bodies[-1]["response_format"]["json_schema"]["strict"] is True
        choice = r.choices[0]
        assert choice.finish_reason == "stop" and choice.message.refusal is None
        assert isinstance(choice.message.parsed, Contact)
        assert _check_finished(choice.message.content, schema) == choice.message.parsed
        assert r.id.startswith("chatcmpl") and r.object == "chat.completion"


def test_openai_streamed_parse_adds_up(servers) -> None:
    """chat.completions.stream(response_format=Contact) on SmolLM2: content deltas that
    add up to the final message, which parses (or the stream says it was cut)."""
    model = "smollm2-135m-instruct"
    client, recorder = _client(servers[model])
    deltas: list[str] = []
    try:
        with _stream(client)(
            model=model, messages=ASK, response_format=Contact, max_tokens=MAX_TOKENS
        ) as stream:
            for event in stream:
                if event.type == "content.delta":
                    deltas.append(event.delta)
            final = stream.get_final_completion()
    except openai.LengthFinishReasonError as e:  # the SDK raises it as the cut arrives
        _check_cut(e.completion)
        assert "".join(deltas) == (e.completion.choices[0].message.content or "")
        return
    choice = final.choices[0]
    assert choice.finish_reason == "stop"
    assert "".join(deltas) == choice.message.content
    assert _check_finished(choice.message.content, recorder.schema()) == choice.message.parsed


@pytest.mark.parametrize("model", MODELS)
def test_openai_parse_with_a_pydantic_function_tool(servers, model: str) -> None:
    """tools=[pydantic_function_tool(Contact)] (strict, $defs/$ref in its parameters),
    tool_choice required: a finished reply is one call whose parsed arguments are a
    Contact."""
    client, recorder = _client(servers[model])
    try:
        r = client.chat.completions.parse(
            model=model, messages=ASK, tools=[openai.pydantic_function_tool(Contact)],
            tool_choice="required", max_tokens=MAX_TOKENS,
        )  # fmt: skip
    except openai.LengthFinishReasonError as e:
        _check_cut(e.completion, tools=("Contact",))
        return
    assert recorder.bodies[-1]["tools"][0]["function"]["strict"] is True
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "Contact"
    parsed = _check_finished(call.function.arguments, recorder.schema())
    assert call.function.parsed_arguments == parsed


@pytest.mark.filterwarnings("ignore:Mode.TOOLS_STRICT is deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    "mode",
    [instructor.Mode.TOOLS, instructor.Mode.TOOLS_STRICT, instructor.Mode.JSON_SCHEMA],
    ids=["TOOLS", "TOOLS_STRICT", "JSON_SCHEMA"],
)
def test_instructor_modes(servers, mode: instructor.Mode) -> None:
    """instructor's create(response_model=Contact) in each mode on SmolLM2: a Contact
    that validates against the schema instructor sent, or a cut reply. (instructor
    1.11 on sends TOOLS_STRICT as TOOLS, the function without ``strict``; older ones
    with ``strict: true``: either is accepted.)"""
    client, recorder = _client(servers["smollm2-135m-instruct"])
    patched = instructor.from_openai(client, mode=mode)
    try:
        contact, completion = patched.chat.completions.create_with_completion(
            model="smollm2", messages=ASK, response_model=Contact, max_tokens=MAX_TOKENS,
            max_retries=0,
        )  # fmt: skip
    except (InstructorRetryException, IncompleteOutputException) as e:
        # only a reply cut at max_tokens may fail (one attempt: max_retries 0)
        assert getattr(e, "last_completion", None) is not None, f"not a cut reply: {e!r}"
        _check_cut(e.last_completion, tools=("Contact",))
        return
    body = recorder.bodies[-1]
    if mode == instructor.Mode.JSON_SCHEMA:
        assert body["response_format"]["type"] == "json_schema"
        text = completion.choices[0].message.content
    else:
        assert body["tool_choice"] == {"type": "function", "function": {"name": "Contact"}}
        assert completion.choices[0].finish_reason == "tool_calls"
        (call,) = completion.choices[0].message.tool_calls
        text = call.function.arguments
    assert isinstance(contact, Contact)
    assert _check_finished(text, recorder.schema()) == Contact.model_validate(contact.model_dump())


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA],
                         ids=["TOOLS", "JSON_SCHEMA"])  # fmt: skip
def test_instructor_streams_partial_models(servers, mode: instructor.Mode) -> None:
    """instructor's create_partial (stream=True): partial Contacts as the reply comes;
    the same request unstreamed (greedy: the same reply) tells whether it finished,
    and then the last partial is that reply's Contact, valid against the schema."""
    client, recorder = _client(servers["smollm2-135m-instruct"])
    patched = instructor.from_openai(client, mode=mode)
    partials = []
    try:
        for partial in patched.chat.completions.create_partial(
            model="smollm2", messages=ASK, response_model=Contact, max_tokens=MAX_TOKENS,
            max_retries=0,
        ):  # fmt: skip
            partials.append(partial)
    except (InstructorRetryException, IncompleteOutputException) as e:
        assert getattr(e, "last_completion", None) is not None, f"not a cut reply: {e!r}"
        _check_cut(e.last_completion, tools=("PartialContact", "Contact"))
        return
    body = recorder.bodies[-1]
    assert body["stream"] is True and partials
    whole = client.chat.completions.create(
        **{k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    )
    choice = whole.choices[0]
    if choice.finish_reason == "length":
        _check_cut(whole, tools=tuple(t["function"]["name"] for t in body.get("tools", [])))
        return
    if mode == instructor.Mode.JSON_SCHEMA:
        text = choice.message.content
    else:
        (call,) = choice.message.tool_calls
        text = call.function.arguments
    assert _check_finished(text, recorder.schema()) == Contact.model_validate(
        partials[-1].model_dump()
    )


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("max_tokens", [3, 17])
def test_a_cut_auto_reply_never_shows_the_wrapper(servers, model: str, max_tokens: int) -> None:
    """tools with tool_choice auto (the generic format's {"response": ...} or a call),
    cut after a few tokens, streamed and not: the content is the model's answer text
    so far (or empty), never edgespec's wrapper; a call cut short names the tool; the
    stream and the reply agree."""
    client, _ = _client(servers[model])
    tools = [{"type": "function", "function": {"name": "save_contact", "parameters": {
        "type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}},
        "required": ["name", "city"]}}}]  # fmt: skip
    kwargs = {"model": model, "messages": ASK, "tools": tools, "max_tokens": max_tokens}
    r = client.chat.completions.create(**kwargs)
    choice = r.choices[0]
    assert choice.finish_reason in ("length", "tool_calls", "stop")
    content = choice.message.content or ""
    assert not content.lstrip().startswith(WRAPPERS), content
    if choice.finish_reason == "length":
        _check_cut(r, tools=("save_contact",), max_tokens=max_tokens)
    streamed, finish = "", None
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        if chunk.choices:
            streamed += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == choice.finish_reason
    assert streamed == content  # greedy: the same reply
