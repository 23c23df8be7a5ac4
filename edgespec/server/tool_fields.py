"""A chat request's tool fields: ``tools``, ``tool_choice``, ``parallel_tool_calls``, and
the conversation's earlier calls (an assistant's ``tool_calls``, ``role: tool`` results).

Each is checked here into what the chat template and the reply parser need; a field
that cannot be used is a 400 naming it.
"""

from __future__ import annotations

import json
from typing import Any

from ..tools import ToolError, ToolRequest, parse_tools
from .errors import ApiError, bad_request


def parse_tool_request(data: dict[str, Any]) -> ToolRequest | None:
    """The request's tools and tool choice (None: the model gets no tools)."""
    try:
        return parse_tools(
            data.get("tools"), data.get("tool_choice"), data.get("parallel_tool_calls")
        )
    except ToolError as e:
        param = str(e).split("'")[1] if str(e).startswith("'") else "tools"
        raise bad_request(str(e), param=param) from None


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
