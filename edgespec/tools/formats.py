"""The formats models call tools in: recognised from the chat template, rendered, parsed.

As llama.cpp's ``common/chat.cpp`` recognises them, by what the template writes:

- ``hermes`` (Hermes 2/3, Qwen 2.5/3, SmolLM3...): ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>``, one block per call;
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``;
- ``llama3`` (Llama 3.1-3.3, an ``ipython`` role): a bare ``{"name": ..., "parameters": {...}}``;
- ``generic``, for every template that knows no tools: the tools are described in a
  system message and the model answers in JSON, ``{"tool_call": {"name", "arguments"}}``
  (``{"tool_calls": [...]}`` with parallel calls) or ``{"response": "text"}``.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from . import Tool, ToolCall, ToolRequest

HERMES, MISTRAL, LLAMA3, GENERIC = "hermes", "mistral", "llama3", "generic"


def detect(template: str) -> str:
    """The tool-call format a chat template uses (``generic`` where it knows none).

    A native format is used only where the template writes earlier calls in exactly
    that syntax; a template whose calls use another one (Qwen3-Coder's and GLM's XML
    arguments, Mistral's ``[ARGS]``, Apriel's ``<tool_calls>``, functionary's
    ``<function=...>``) gets the generic form, which any template renders.
    """
    if "tools" not in template and "tool_call" not in template:
        return GENERIC
    if any(marker in template for marker in _OTHER_SYNTAX):
        return GENERIC
    if "<tool_call>" in template:
        return HERMES
    if "[TOOL_CALLS]" in template:
        return MISTRAL
    if "<|start_header_id|>" in template and "ipython" in template:
        return LLAMA3
    return GENERIC


#: what templates write for call syntaxes edgespec has no parser and grammar for
_OTHER_SYNTAX = ("<function=", "<parameter", "<arg_key>", "<invoke", "[ARGS]", "<tool_calls>")


def new_call_id() -> str:
    """An id for a call the model made (OpenAI's ``call_`` prefix)."""
    return "call_" + uuid.uuid4().hex[:24]


def generic_system_prompt(request: ToolRequest) -> str:
    """The system message that tells a model without tool support how to call."""
    tools = [t.openai()["function"] for t in request.offered()]
    call = '{"tool_call": {"name": "<tool name>", "arguments": {<its arguments>}}}'
    if request.parallel:
        call = '{"tool_calls": [{"name": "<tool name>", "arguments": {...}}, ...]}'
    lines = [
        "You can call these tools (JSON Schema of each one's arguments):",
        json.dumps(tools, ensure_ascii=False, indent=1),
        f"To call a tool, answer with JSON only: {call}",
    ]
    if not request.must_call:
        lines.append('To answer without a tool, answer with JSON: {"response": "<your answer>"}')
    return "\n".join(lines)


def template_messages(
    messages: Sequence[dict[str, Any]], fmt: str, request: ToolRequest | None
) -> list[dict[str, Any]]:
    """messages (already checked, calls' arguments as objects) as the template gets them.

    A template with a tool format renders tool calls and results itself (Mistral's
    with call ids of 9 letters or digits, as its templates insist). For the
    generic form, calls become the assistant's JSON, results user messages, and the
    tools' description the system message (before any of the conversation's own).
    """
    if fmt == MISTRAL:
        return [_mistral_ids(m) for m in messages]
    if fmt != GENERIC:
        return [dict(m) for m in messages]
    out: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in m["tool_calls"]
            ]
            payload = {"tool_call": calls[0]} if len(calls) == 1 else {"tool_calls": calls}
            out.append({"role": "assistant", "content": json.dumps(payload, ensure_ascii=False)})
        elif m["role"] == "tool":
            result = {"tool_response": {"name": m.get("name", ""), "content": m["content"]}}
            text = json.dumps(result, ensure_ascii=False)
            if out and out[-1]["role"] == "user":  # several results: one user turn
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + text}
            else:
                out.append({"role": "user", "content": text})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    if request is not None:
        prompt = generic_system_prompt(request)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": prompt + "\n\n" + out[0]["content"]}
        else:
            out.insert(0, {"role": "system", "content": prompt})
    return out


def mistral_call_id(call_id: str) -> str:
    """call_id as Mistral's templates require it (9 letters or digits): kept where it
    is one, else a stable digest of it, so that a call and its result still match."""
    if re.fullmatch(r"[A-Za-z0-9]{9}", call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:9])


_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _mistral_ids(m: dict[str, Any]) -> dict[str, Any]:
    out = dict(m)
    if m.get("tool_calls"):
        out["tool_calls"] = [{**c, "id": mistral_call_id(c["id"])} for c in m["tool_calls"]]
    if m.get("role") == "tool" and "tool_call_id" in m:
        out["tool_call_id"] = mistral_call_id(m["tool_call_id"])
    return out


def parse_reply(text: str, fmt: str, tools: Sequence[Tool]) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) read from a reply in fmt; a call naming no offered tool, or whose
    arguments are not a JSON object, is left in the content as text."""
    names = {t.name for t in tools}
    found: list[tuple[str, Any]] = []
    content = text
    if fmt == HERMES:
        parts = []
        pos = 0
        for m in re.finditer(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", text, re.DOTALL):
            call = _call(_json(m[1]), "arguments", names)
            if call is not None:
                found.append(call)
                parts.append(text[pos : m.start()])
                pos = m.end()
        content = "".join(parts) + text[pos:] if found else text
    elif fmt == MISTRAL:
        before, marker, body = text.partition("[TOOL_CALLS]")
        if not marker:  # the marker is a control token, left out of the text
            at = re.search(r'\[\s*\{\s*"', text)
            before, body = (text[: at.start()], text[at.start() :]) if at else (text, "")
        value = _json(body.strip()) if body.strip().startswith("[") else None
        if isinstance(value, list):
            calls = [_call(v, "arguments", names) for v in value]
            if calls and all(c is not None for c in calls):
                found, content = calls, before  # type: ignore[assignment]
    elif fmt == LLAMA3:
        body = text.strip().removeprefix("<|python_tag|>").strip()
        call = _call(_json(body), "parameters", names) or _call(_json(body), "arguments", names)
        if call is not None:
            found, content = [call], ""
    else:
        value = _json(text.strip())
        if isinstance(value, dict):
            if "response" in value and isinstance(value["response"], str):
                return value["response"], []
            entries = value.get("tool_calls") if "tool_calls" in value else [value.get("tool_call")]
            if isinstance(entries, list):
                calls = [_call(v, "arguments", names) for v in entries]
                if calls and all(c is not None for c in calls):
                    found, content = calls, ""  # type: ignore[assignment]
    calls = [
        ToolCall(new_call_id(), name, json.dumps(args, ensure_ascii=False)) for name, args in found
    ]
    content = content.strip()
    return (content or None) if calls else text, calls


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _call(value: Any, key: str, names: set[str]) -> tuple[str, Any] | None:
    if not isinstance(value, dict) or value.get("name") not in names:
        return None
    args = value.get(key, {})
    if isinstance(args, str):  # some models write the arguments as JSON text
        args = _json(args)
    return (value["name"], args) if isinstance(args, dict) else None
