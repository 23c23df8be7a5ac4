"""Request bodies, checked field by field into plain dataclasses (or a 400 ApiError).

Fields that change nothing about a completion (``user``, ...) are ignored, as
OpenAI-compatible servers do; a field edgespec does not implement is a 400
naming it unless its value asks for nothing (see ``unsupported``). Every field
this server uses is type- and range-checked, and strings must be valid Unicode.
Defaults: temperature 0 (greedy, the engine's default; code completion wants the
most likely text), max_tokens 256, n_predict -1 (up to the context).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..completion.fim import ExtraChunk
from ..errors import InvalidParameterError
from ..grammar import Grammar
from ..params import check_max_tokens
from ..sampling import DEFAULT_MIN_P, DEFAULT_TOP_K, DEFAULT_TOP_P, SamplingParams
from ..speculation.loop import DEFAULT_MAX_TOKENS
from ..tools import ToolRequest
from .errors import bad_request
from .fields import Fields
from .sampling_fields import parse_grammar, parse_logprobs, parse_penalties, parse_samplers
from .tool_fields import legacy_functions, parse_tool_request, tool_calls_of, tool_result_of
from .unsupported import refuse_unsupported

UNLIMITED = 1 << 30  # max_tokens meaning "up to the context"; the session caps it


@dataclass(frozen=True)
class Options:
    """What every generation endpoint takes."""

    model: str | None
    max_tokens: int
    sampling: SamplingParams
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    t_max_predict_ms: int = 0  # llama-server's: stop at a newline once generating took longer
    cache_prompt: bool = True  # False: the prompt is evaluated afresh (the KV cache emptied)
    grammar: Grammar | None = None  # grammar, json_schema or response_format
    logprobs: int | None = None  # top alternatives per token; None: no logprobs
    id_slot: int = -1  # llama-server's: the slot to run on (-1: the best free one)


@dataclass(frozen=True)
class CompletionsCall:
    """POST /v1/completions."""

    opts: Options
    prompt: str | list[int]
    suffix: str | None
    max_lines: int | None


@dataclass(frozen=True)
class ChatCall:
    """POST /v1/chat/completions."""

    opts: Options
    messages: list[dict[str, Any]]
    tools: ToolRequest | None = None  # tools the model may (or must) call
    legacy: bool = False  # the tools came as functions: the reply's call is function_call


@dataclass(frozen=True)
class InfillCall:
    """POST /infill (llama.cpp server's fields)."""

    opts: Options
    prefix: str
    suffix: str
    extra: tuple[ExtraChunk, ...]
    prompt: str
    max_lines: int | None
    min_indent: int | None
    response_fields: tuple[str, ...] = ()


def _options(f: Fields, max_tokens: int, kind: str) -> Options:
    """The fields every endpoint shares; kind: "chat", "completions" or "llama" (/infill)."""
    refuse_unsupported(f.data, chat=kind == "chat")
    # llama.vim sends t_max_prompt_ms; llama-server does not implement it either
    # (server-schema.cpp: "TODO: implement t_max_prompt_ms"). Checked, then unused.
    f.integer("t_max_prompt_ms", 0, minimum=-1)
    seed = f.integer("seed", None)
    stream_options = f.raw("stream_options")
    include_usage = False
    if stream_options is not None:
        if not isinstance(stream_options, dict):
            raise bad_request("'stream_options' must be an object", param="stream_options")
        include_usage = Fields(stream_options, "stream_options.").boolean("include_usage", False)
    n = f.integer("n", 1, minimum=1)
    if n != 1:
        raise bad_request("only n = 1 is supported", param="n", code="unsupported_value")
    model = f.string("model", None)
    chain = parse_samplers(f)
    picked: dict[str, Any] = {
        "temperature": f.number("temperature", 0.0, minimum=0.0),
        "top_k": f.integer("top_k", DEFAULT_TOP_K, minimum=0) or 0,
        "top_p": f.number("top_p", DEFAULT_TOP_P, minimum=0.0, maximum=1.0, open_min=True),
        "min_p": f.number("min_p", DEFAULT_MIN_P, minimum=0.0, maximum=1.0, open_max=True),
        **parse_penalties(f),
    }
    if chain is not None:  # what it leaves out is off
        off = {"top_k": {"top_k": 0}, "top_p": {"top_p": 1.0}, "min_p": {"min_p": 0.0},
               "penalties": {"repeat_penalty": 1.0, "presence_penalty": 0.0,
                             "frequency_penalty": 0.0}}  # fmt: skip
        for name, neutral in off.items():
            if name not in chain:
                picked.update(neutral)
    try:
        sampling = SamplingParams(**picked)
    except InvalidParameterError as e:  # a value only the whole set refuses (1/repeat_penalty)
        raise bad_request(str(e), code="invalid_value") from None
    return Options(
        model=model,
        max_tokens=max_tokens,
        sampling=sampling,
        seed=seed if seed is not None and seed >= 0 else None,  # llama.cpp: -1 = random
        stop=f.stop(),
        stream=f.boolean("stream", False),
        include_usage=include_usage,
        t_max_predict_ms=max(f.integer("t_max_predict_ms", 0, minimum=-1) or 0, 0),
        cache_prompt=f.boolean("cache_prompt", True),
        grammar=parse_grammar(f),
        logprobs=parse_logprobs(f, kind),
        id_slot=_or(f.integer("id_slot", -1, minimum=-1), -1),
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _max_lines(f: Fields, default: int | None) -> int | None:
    v = f.integer("max_lines", default, minimum=0)
    return v or None  # 0: no limit


def parse_completions(data: dict[str, Any], default_max_lines: int | None) -> CompletionsCall:
    """Check a /v1/completions body."""
    f = Fields(data)
    max_tokens = f.checked("max_tokens", DEFAULT_MAX_TOKENS, check_max_tokens)
    if f.boolean("echo", False):
        raise bad_request("echo is not supported", param="echo", code="unsupported_value")
    prompt = data.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    prompt = _prompt(f, prompt)
    suffix = f.string("suffix", None)
    return CompletionsCall(
        _options(f, max_tokens, "completions"), prompt, suffix, _max_lines(f, default_max_lines)
    )


def parse_chat(data: dict[str, Any]) -> ChatCall:
    """Check a /v1/chat/completions body (legacy ``functions`` read as ``tools``)."""
    data, legacy = legacy_functions(data)
    f = Fields(data)
    max_tokens = f.checked("max_completion_tokens", None, check_max_tokens)
    if max_tokens is None:
        max_tokens = f.checked("max_tokens", DEFAULT_MAX_TOKENS, check_max_tokens)
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", param="messages")
    out: list[dict[str, Any]] = []
    calls: dict[str, str] = {}  # the conversation's tool call ids -> tool names
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request(f"'messages[{i}]' must be an object", param=f"messages[{i}]")
        mf = Fields(m, f"messages[{i}].")
        role = mf.string("role", None)
        if not role:
            raise mf._bad("role", "is required")
        message: dict[str, Any] = {"role": role}
        if role == "tool":
            message = tool_result_of(m, f"messages[{i}]", calls)
        elif m.get("tool_calls"):
            if role != "assistant":
                raise mf._bad("tool_calls", "are an assistant's")
            message["tool_calls"] = tool_calls_of(m, f"messages[{i}]", calls)
        message["content"] = _content(mf, m.get("content"))
        out.append(message)
    tools = parse_tool_request(data, legacy=legacy)
    opts = _options(f, max_tokens, "chat")
    if tools is not None and opts.grammar is not None:
        raise bad_request(
            "'tools' cannot be combined with a grammar, json_schema or response_format",
            param="tools",
        )
    return ChatCall(opts, out, tools, legacy)


def _content(mf: Fields, content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return mf.text(content, "content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise mf._bad("content", "parts must be {'type': 'text', 'text': ...}")
            texts.append(mf.text(part.get("text"), "content.text"))
        return "".join(texts)
    raise mf._bad("content", "must be a string or a list of text parts")


def parse_infill(data: dict[str, Any], default_max_lines: int | None) -> InfillCall:
    """Check a /infill body (llama.cpp server's fields)."""
    f = Fields(data)
    n_predict = _n_predict(f)
    extra = data.get("input_extra")
    chunks = []
    if extra is not None:
        if not isinstance(extra, list):
            raise bad_request("'input_extra' must be a list", param="input_extra")
        for i, c in enumerate(extra):
            if not isinstance(c, dict):
                raise bad_request(f"'input_extra[{i}]' must be an object", param="input_extra")
            cf = Fields(c, f"input_extra[{i}].")
            chunks.append(
                ExtraChunk(cf.string("text", "") or "", cf.string("filename", "tmp") or "tmp")
            )
    n_indent = f.integer("n_indent", 0, minimum=0)
    return InfillCall(
        opts=_options(f, n_predict, "llama"),
        prefix=f.string("input_prefix", "") or "",
        suffix=f.string("input_suffix", "") or "",
        extra=tuple(chunks),
        prompt=f.string("prompt", "") or "",
        max_lines=_max_lines(f, default_max_lines),
        min_indent=n_indent or None,
        response_fields=_response_fields(f),
    )


@dataclass(frozen=True)
class NativeCall:
    """POST /completion (llama-server's own completion endpoint)."""

    opts: Options
    prompt: str | list[int]
    response_fields: tuple[str, ...] = ()


def _n_predict(f: Fields) -> int:
    """llama-server's n_predict (alias max_tokens); -1, its default, is up to the context."""
    n = f.checked("n_predict", None, check_max_tokens, minimum=-1)
    if n is None:
        n = f.checked("max_tokens", -1, check_max_tokens, minimum=-1)
    return UNLIMITED if n == -1 else n or 0


def _prompt(f: Fields, prompt: Any) -> str | list[int]:
    """A request's ``prompt``: a string, or a non-empty list of token ids."""
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise bad_request(
                "'prompt' must be a string or a list of token ids (one prompt per request)",
                param="prompt",
            )
        return prompt
    if prompt is None:
        raise bad_request("'prompt' is required", param="prompt", code="missing_required")
    return f.text(prompt, "prompt")


def parse_native(data: dict[str, Any]) -> NativeCall:
    """Check a /completion body: a text or token-id ``prompt`` and llama-server's fields."""
    f = Fields(data)
    prompt = data.get("prompt")
    prompt = _prompt(f, prompt)
    return NativeCall(_options(f, _n_predict(f), "llama"), prompt, _response_fields(f))


def _response_fields(f: Fields) -> tuple[str, ...]:
    """llama-server's ``response_fields``: a list of field paths ("timings/prompt_n")."""
    v = f.raw("response_fields")
    if v is None:
        return ()
    if not isinstance(v, list):
        raise f._bad("response_fields", "must be a list of strings")
    return tuple(f.text(x, "response_fields") for x in v)
