"""A reply read while it is written: its content and calls so far, for streaming.

``read_partial`` reads a reply's text so far (in any of the formats of
``formats``) into the content that is certain to stay content and the calls begun,
each with its name and the raw text of its arguments so far. It only grows as the
text grows, so ``CallStream`` sends the difference as OpenAI's stream deltas: content
pieces, then per call a first delta with ``index``, ``id``, ``type``, the name and
empty arguments, then ``function.arguments`` fragments as they are generated; the
fragments add up to the call's final ``arguments``. A reply cut before it ends
(``max_tokens``) is read the same way, so edgespec's generic wrapper
(``{"response": ...}``, ``{"tool_call": ...}``) never shows as content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import Tool, ToolCall
from .formats import GENERIC, HERMES, LLAMA3, MISTRAL, new_call_id, parse_reply

_WS = re.compile(r"\s*")
_HEADER = re.compile(r'\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*"(arguments|parameters)"\s*:\s*')
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass
class PartialCall:
    """A call begun: its tool's name and the raw text of its arguments so far."""

    name: str
    arguments: str
    done: bool = False  # the arguments' object is closed


@dataclass
class Partial:
    """What a reply's text so far holds (see ``read_partial``)."""

    content: str = ""
    calls: list[PartialCall] = field(default_factory=list)


def object_end(text: str, start: int) -> int | None:
    """The index after the JSON object or array opening at text[start] (None: not
    closed yet)."""
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def string_prefix(text: str, start: int) -> tuple[str, bool]:
    """(the decoded JSON string opening at text[start] so far, whether it is closed);
    an escape not yet complete is left out."""
    out, i = [], start + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return "".join(out), True
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(text):
            break
        e = text[i + 1]
        if e == "u":
            if i + 6 > len(text):
                break
            try:
                code = int(text[i + 2 : i + 6], 16)
            except ValueError:
                break
            if 0xD800 <= code < 0xDC00:  # a surrogate pair: both halves, or wait
                if i + 12 > len(text):
                    break
                try:
                    out.append(json.loads(f'"{text[i : i + 12]}"'))
                except ValueError:
                    out.append("\ufffd")
                i += 12
                continue
            out.append(chr(code))
            i += 6
            continue
        out.append(_ESCAPES.get(e, e))
        i += 2
    return "".join(out), False


def _calls(text: str, pos: int, names: set[str], sep: str | None) -> list[PartialCall]:
    """The calls at text[pos:]: one, or several separated by sep (a regex)."""
    out: list[PartialCall] = []
    while True:
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        head = _HEADER.match(text, pos)
        if head is None:
            return out
        try:
            name = json.loads(f'"{head[1]}"')
        except ValueError:
            return out
        if name not in names:
            return out
        start = head.end()
        if start >= len(text):
            out.append(PartialCall(name, ""))
            return out
        if text[start] != "{":
            return out
        end = object_end(text, start)
        out.append(PartialCall(name, text[start : end or len(text)], end is not None))
        if end is None or sep is None:
            return out
        more = re.compile(r"\s*\}" + sep).match(text, end)
        if more is None:
            return out
        pos = more.end()


def _held(text: str, markers: Sequence[str]) -> int:
    """Where text's content certainly ends: before a tail that may begin a marker, and
    before trailing whitespace."""
    end = len(text)
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), 0, -1):
            if text.endswith(marker[:k]):
                end = min(end, len(text) - k)
                break
    return len(text[:end].rstrip())


def read_partial(text: str, fmt: str, tools: Sequence[Tool]) -> Partial:
    """The content and calls of a reply's text so far (see the module docstring)."""
    names = {t.name for t in tools}
    if fmt == HERMES:
        at = text.find("<tool_call>")
        if at < 0:
            return Partial(text[: _held(text, ["<tool_call>"])])
        sep = r"\s*</tool_call>\s*<tool_call>"
        return Partial(text[:at].rstrip(), _calls(text, at + len("<tool_call>"), names, sep))
    if fmt == MISTRAL:
        at = text.find("[TOOL_CALLS]")
        if at >= 0:
            content, pos = text[:at].rstrip(), at + len("[TOOL_CALLS]")
        else:  # the marker is a control token, left out of the text
            found = re.search(r'\[\s*\{\s*"', text)
            if found is None:
                return Partial(text[: _held(text, ["[TOOL_CALLS]", '[{"'])])
            content, pos = text[: found.start()].rstrip(), found.start()
        bracket = re.compile(r"\s*\[").match(text, pos)
        if bracket is None:
            return Partial(content)
        return Partial(content, _calls(text, bracket.end(), names, r"\s*,"))
    if fmt == LLAMA3:
        body, tagged = text.lstrip(), False
        if body.startswith("<|python_tag|>"):
            body, tagged = body[len("<|python_tag|>") :].lstrip(), True
        if not body.startswith("{") and not (tagged and not body):
            return Partial(text[: _held(text, ["<|python_tag|>"])])
        return Partial("", _calls(body, 0, names, None))
    return _generic(text, names)


def _generic(text: str, names: set[str]) -> Partial:
    m = re.compile(r'\s*\{\s*"(response|tool_call|tool_calls)"\s*:\s*').match(text)
    if m is None:  # the wrapper's opening, not content (the grammar makes every reply JSON)
        opening = text.lstrip()
        return Partial() if not opening or opening.startswith("{") else Partial(text)
    pos = m.end()
    if m[1] == "response":
        if pos < len(text) and text[pos] == '"':
            return Partial(string_prefix(text, pos)[0])
        return Partial()
    if m[1] == "tool_call":
        return Partial("", _calls(text, pos, names, None))
    bracket = re.compile(r"\s*\[").match(text, pos)
    return Partial("", [] if bracket is None else _calls(text, bracket.end(), names, r"\s*,"))


def read_reply(text: str, fmt: str, tools: Sequence[Tool]) -> tuple[str | None, list[ToolCall]]:
    """(content, calls) of a whole reply: ``formats.parse_reply``'s, each call's
    arguments as the model wrote them (what a stream sent) where they are that object;
    where it finds no call in a reply that was cut or left unfinished, what
    ``read_partial`` reads (the calls begun, with their arguments so far; the generic
    answer's text so far), so that edgespec's own wrapper never shows as content."""
    content, calls = parse_reply(text, fmt, tools)
    if calls:
        written = [c for c in read_partial(text, fmt, tools).calls if c.done]
        return content, [_as_written(c, written[i] if i < len(written) else None)
                         for i, c in enumerate(calls)]  # fmt: skip
    if fmt != GENERIC or _whole_json(text):
        return content, calls
    partial = read_partial(text, fmt, tools)
    calls = [ToolCall(new_call_id(), c.name, c.arguments) for c in partial.calls]
    return partial.content or None, calls


def _as_written(call: ToolCall, written: PartialCall | None) -> ToolCall:
    if written is None or written.name != call.name:
        return call
    try:
        same = json.loads(written.arguments) == json.loads(call.arguments)
    except ValueError:
        return call
    return ToolCall(call.id, call.name, written.arguments) if same else call


def _whole_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class CallStream:
    """Turns a reply's pieces into OpenAI chat stream deltas as they come (see the
    module docstring). ``push`` takes a piece of text and gives the deltas it makes
    sendable; ``finish`` the rest, reconciled with the whole reply's reading."""

    def __init__(self, fmt: str, tools: Sequence[Tool], legacy: bool = False) -> None:
        self.fmt, self.tools, self.legacy = fmt, tools, legacy
        self.text = ""
        self.content = ""  # content sent so far
        self.sent: list[tuple[str, str, str]] = []  # (id, name, arguments sent so far)

    @property
    def called(self) -> bool:
        """Whether a call has been sent."""
        return bool(self.sent)

    def push(self, piece: str) -> dict[str, Any]:
        """The delta (a ``choices[0].delta`` body; empty: nothing) piece makes sendable."""
        return merge_deltas(self.pieces(piece), legacy=self.legacy)

    def finish(self) -> dict[str, Any]:
        """The delta left once the reply ended (as ``read_reply`` reads it whole)."""
        return merge_deltas(self.rest(), legacy=self.legacy)

    def pieces(self, piece: str) -> list[dict[str, Any]]:
        """``push``'s delta unmerged: a content piece, a call's first entry, a piece
        of its arguments each."""
        self.text += piece
        partial = read_partial(self.text, self.fmt, self.tools)
        return self._deltas(partial.content, [(c.name, c.arguments) for c in partial.calls])

    def rest(self) -> list[dict[str, Any]]:
        """``finish``'s delta unmerged."""
        content, calls = read_reply(self.text, self.fmt, self.tools)
        if not calls and self.sent:  # read as calls while streamed, not as a whole
            return []
        return self._deltas(content or "", [(c.name, c.arguments) for c in calls], final=True)

    def _deltas(
        self, content: str, calls: list[tuple[str, str]], *, final: bool = False
    ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        grown = content.startswith(self.content) and len(content) > len(self.content)
        if grown and (not self.sent or final):  # content after a call: once the reply ends
            out.append({"content": content[len(self.content) :]})
            self.content = content
        for i, (name, args) in enumerate(calls):
            if i == len(self.sent):
                call_id = new_call_id()
                self.sent.append((call_id, name, ""))
                fn = {"name": name, "arguments": ""}
                out.append({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                            "function": fn}]})  # fmt: skip
            call_id, sent_name, sent = self.sent[i]
            if sent_name != name or not args.startswith(sent) or len(args) == len(sent):
                continue  # (a mismatch cannot be taken back: it is left as sent)
            piece = args[len(sent) :]
            self.sent[i] = (call_id, name, args)
            out.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
        return out


def merge_deltas(deltas: list[dict[str, Any]], *, legacy: bool = False) -> dict[str, Any]:
    """CallStream's deltas as one delta: the content joined, each call's entries as
    one (its first carries id, type and name); legacy: the first call as OpenAI's old
    ``function_call`` (name, then arguments in pieces)."""
    out: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    for d in deltas:
        if "content" in d:
            out["content"] = out.get("content", "") + d["content"]
        for entry in d.get("tool_calls", ()):
            have = calls.get(entry["index"])
            if have is None:
                calls[entry["index"]] = {**entry, "function": dict(entry["function"])}
            else:
                fn = have["function"]
                fn["arguments"] = fn.get("arguments", "") + entry["function"]["arguments"]
    if legacy:
        if 0 in calls:
            out["function_call"] = calls[0]["function"]
    elif calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out
