"""Request fields edgespec does not implement: a 400 naming the field, never silence.

OpenAI's and llama-server's APIs have many fields edgespec has no counterpart
for (legacy functions, logit bias, mirostat, ...). A request that sends one with a value
that asks for something gets a 400 naming it; the same field with its neutral
value (what asks for nothing: ``tools: []``, ``presence_penalty: 0``,
``logit_bias: {}``, ``mirostat: 0``) is accepted, since clients send defaults.
Fields that change nothing about the completion (``user``, ``metadata``, ...)
are not listed and are ignored, as every OpenAI-compatible server does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import ApiError, bad_request

Neutral = Callable[[Any, Mapping[str, Any]], bool]


def _is(*values: Any) -> Neutral:
    """Neutral when the value equals one of values (numbers compare by value, bools apart)."""

    def check(v: Any, _body: Mapping[str, Any]) -> bool:
        return any(v == x and isinstance(v, bool) == isinstance(x, bool) for x in values)

    return check


def _empty(v: Any, _body: Mapping[str, Any]) -> bool:
    return v in ({}, [], "")


def _no_tools(v: Any, body: Mapping[str, Any]) -> bool:
    """tool_choice / function_call: "none", or "auto" with no tools to choose from."""
    if v == "none":
        return True
    return v == "auto" and not body.get("tools") and not body.get("functions")


def _bool(v: Any, _body: Mapping[str, Any]) -> bool:
    return isinstance(v, bool)


#: Field -> what counts as asking for nothing.
NEUTRAL: dict[str, Neutral] = {
    # OpenAI
    "tools": _empty,
    "functions": _empty,
    "tool_choice": _no_tools,
    "function_call": _no_tools,
    "parallel_tool_calls": _bool,  # nothing to parallelize without tools
    "logit_bias": _empty,
    "best_of": _is(1),
    "audio": _empty,
    "modalities": lambda v, _b: v == ["text"],
    "prediction": _empty,
    # llama-server (tools/server/server-schema.cpp)
    "post_sampling_probs": _is(False),
    "mirostat": _is(0),
    "typical_p": _is(1),
    "typ_p": _is(1),
    "tfs_z": _is(1),
    "dynatemp_range": _is(0),
    "top_n_sigma": _is(-1),
    "xtc_probability": _is(0),
    "dry_multiplier": _is(0),
    "min_keep": _is(0),
    "ignore_eos": _is(False),
    "n_keep": _is(0, -1),  # edgespec never shifts the context: it stops when full
    "n_discard": _is(0),
    "lora": _empty,
    "return_progress": _is(False),
    "timings_per_token": _is(False),
    "n_cmpl": _is(1),
    "chat_template_kwargs": _empty,
}


#: what /v1/chat/completions implements (edgespec/tools): refused on the other endpoints
CHAT_ONLY = ("tools", "tool_choice", "parallel_tool_calls", "functions", "function_call")


def refuse_unsupported(body: Mapping[str, Any], *, chat: bool = False) -> None:
    """A 400 for the first field of body edgespec cannot honour (chat: the tool fields
    are checked by edgespec.server.tool_fields instead)."""
    for name, neutral in NEUTRAL.items():
        if chat and name in CHAT_ONLY:
            continue
        v = body.get(name)
        if v is not None and not neutral(v, body):
            raise unsupported(name)


def unsupported(param: str, what: str = "") -> ApiError:
    """The 400 for a field (or a value of it) edgespec does not implement."""
    return bad_request(
        f"'{param}' is not supported by edgespec{what}", param=param, code="unsupported_field"
    )
