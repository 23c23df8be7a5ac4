"""A chat request's tool fields: ``tools``, ``tool_choice``, ``parallel_tool_calls``, and
the conversation's earlier calls (an assistant's ``tool_calls``, ``role: tool`` results),
and OpenAI's legacy ``functions`` / ``function_call``, mapped onto them.

Each is checked here into what the chat template and the reply parser need; a field
that cannot be used is a 400 naming it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..tools import ToolError, ToolRequest, parse_tools
from .errors import ApiError, bad_request


def parse_tool_request(data: dict[str, Any], *, legacy: bool = False) -> ToolRequest | None:
    """The request's tools and tool choice (None: the model gets no tools); legacy:
    they came as ``functions`` / ``function_call`` (see ``legacy_functions``)."""
    try:
        return parse_tools(
            data.get("tools"), data.get("tool_choice"), data.get("parallel_tool_calls")
        )
    except ToolError as e:
        raise tool_error(e, legacy=legacy) from None


def tool_error(e: ToolError, *, legacy: bool = False) -> ApiError:
    """The 400 for a ToolError, whose message opens with the field it names (in the
    request's own terms: ``functions[0].parameters`` for a legacy request)."""
    message = str(e)
    param = message.split("'")[1] if message.startswith("'") else "tools"
    if legacy:
        renamed = _legacy_name(param)
        message, param = message.replace(f"'{param}'", f"'{renamed}'", 1), renamed
    return bad_request(message, param=param)


def _legacy_name(param: str) -> str:
    param = re.sub(r"^tools\[(\d+)\]\.function\b", r"functions[\1]", param)
    return param.replace("tool_choice.function.name", "function_call.name").replace(
        "tool_choice", "function_call"
    )


def legacy_functions(data: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(data, whether it used the legacy fields): OpenAI's deprecated ``functions`` and
    ``function_call`` as ``tools`` and ``tool_choice``, an assistant's
    ``function_call`` as its one ``tool_calls`` entry, and a ``role: function`` result
    as a ``role: tool`` one answering the latest call of that name."""
    functions, choice = data.get("functions"), data.get("function_call")
    if functions is None and choice is None:
        return data, False
    if data.get("tools") is not None or data.get("tool_choice") is not None:
        raise bad_request(
            "'functions' and 'function_call' cannot be combined with 'tools' or 'tool_choice'",
            param="functions",
        )
    out = {k: v for k, v in data.items() if k not in ("functions", "function_call")}
    if functions is not None:
        if not isinstance(functions, list):
            raise bad_request("'functions' must be a list of {'name', 'parameters'}",
                              param="functions")  # fmt: skip
        out["tools"] = [{"type": "function", "function": f} for f in functions]
    if isinstance(choice, dict):
        out["tool_choice"] = {"type": "function", "function": choice}
    elif choice is not None:
        out["tool_choice"] = choice
    if isinstance(data.get("messages"), list):
        out["messages"] = _legacy_messages(data["messages"])
    return out, True


def _legacy_messages(messages: list[Any]) -> list[Any]:
    out: list[Any] = []
    latest: dict[str, str] = {}  # a function's name -> the id given to its latest call
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            out.append(m)
        elif m.get("role") == "assistant" and isinstance(m.get("function_call"), dict):
            call_id = f"call_legacy_{i}"
            latest[str(m["function_call"].get("name"))] = call_id
            rest = {k: v for k, v in m.items() if k != "function_call"}
            call = {"id": call_id, "type": "function", "function": m["function_call"]}
            out.append({**rest, "tool_calls": [call]})
        elif m.get("role") == "function":
            name = m.get("name")
            if name not in latest:
                raise _bad(f"messages[{i}].name", f"{name!r} answers no earlier function_call")
            out.append({"role": "tool", "tool_call_id": latest[name], "content": m.get("content")})
        else:
            out.append(m)
    return out


def tool_calls_of(m: dict[str, Any], where: str, seen: dict[str, str]) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``, checked, with each call's arguments as an
    object (as chat templates render them); seen gets each call's id -> name."""
    calls = m.get("tool_calls")
    if not isinstance(calls, list):
        raise _bad(f"{where}.tool_calls", "must be a list")
    out = []
    for i, call in enumerate(calls):
        at = f"{where}.tool_calls[{i}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or call.get("type", "function") != "function":
            raise _bad(at, "must be {'id', 'type': 'function', 'function': {name, arguments}}")
        name, args, call_id = fn.get("name"), fn.get("arguments", "{}"), call.get("id")
        if not isinstance(name, str) or not name:
            raise _bad(f"{at}.function.name", "must be a non-empty string")
        if not isinstance(call_id, str) or not call_id:
            raise _bad(f"{at}.id", "must be a non-empty string")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                raise _bad(f"{at}.function.arguments", "is not valid JSON") from None
        if not isinstance(args, dict):
            raise _bad(f"{at}.function.arguments", "must be a JSON object")
        seen[call_id] = name
        parsed = {"name": name, "arguments": args}
        out.append({"id": call_id, "type": "function", "function": parsed})
    return out


def tool_result_of(m: dict[str, Any], where: str, seen: dict[str, str]) -> dict[str, Any]:
    """A ``role: tool`` message, checked against the calls before it."""
    call_id = m.get("tool_call_id")
    if not isinstance(call_id, str) or call_id not in seen:
        raise _bad(f"{where}.tool_call_id", f"{call_id!r} matches no earlier tool call")
    return {"role": "tool", "tool_call_id": call_id, "name": seen[call_id]}


def _bad(param: str, what: str) -> ApiError:
    return bad_request(f"'{param}' {what}", param=param)
