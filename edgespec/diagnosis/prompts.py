"""The prompts the doctor measures on: the user's own (``--prompts FILE``), the requests a
server saved (``--history-file FILE``), or a few shipped workloads.

A prompts file is JSON lines, one request per line: an object with a ``prompt`` string
(completed as it is) or a ``messages`` list (``role`` and ``content`` each, rendered in
the target's chat template), as the completion and chat endpoints take them; other
fields are ignored, blank lines skipped. Each bad line is one error naming the line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidParameterError

MAX_PROMPTS = 8  # the first (or, from a history, the latest) this many: about a minute
DEFAULT_WORKLOADS = ("code_completion", "code_editing", "summarisation")
MIN_HISTORY_TOKENS = 8  # a saved request shorter than this is no prompt


@dataclass(frozen=True)
class Prompt:
    """One request: text to complete, a conversation to render, or token ids."""

    name: str
    text: str | None = None
    messages: tuple[Mapping[str, Any], ...] | None = None
    tokens: tuple[int, ...] | None = None

    def render(self, target: Any) -> str | list[int]:
        """What the engine takes: the text, the token ids, or the messages in the
        target's chat template (InvalidParameterError where it has none)."""
        if self.tokens is not None:
            return list(self.tokens)
        if self.messages is None:
            return self.text or ""
        from ..chat_template import ChatFormat

        template = target.chat_template()
        if not template:
            raise InvalidParameterError(
                f"{self.name}: 'messages' need a chat template and {target.path.name} has "
                "none (give a 'prompt' instead)"
            )
        return ChatFormat.of(target, template).render(list(self.messages))


def read_prompts(path: str | Path, *, limit: int = MAX_PROMPTS) -> list[Prompt]:
    """The first ``limit`` prompts of a JSON-lines file; InvalidParameterError (one line,
    naming the line) for anything else."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidParameterError(f"cannot read prompts file {path}: {e}") from None
    out: list[Prompt] = []
    for n, line in enumerate(lines, start=1):
        if line.strip():
            out.append(parse_line(line, f"{path} line {n}"))
    if not out:
        raise InvalidParameterError(f"no prompts in {path}")
    return out[:limit]


def parse_line(line: str, where: str) -> Prompt:
    """One JSON line as a Prompt named ``where``."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise InvalidParameterError(f"{where}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise InvalidParameterError(f"{where}: not a JSON object")
    prompt, messages = data.get("prompt"), data.get("messages")
    if prompt is not None and messages is not None:
        raise InvalidParameterError(f"{where}: give 'prompt' or 'messages', not both")
    if isinstance(prompt, str) and prompt:
        return Prompt(where, text=prompt)
    if prompt is not None:
        raise InvalidParameterError(f"{where}: 'prompt' must be a non-empty string")
    if messages is None:
        raise InvalidParameterError(f"{where}: needs a 'prompt' string or a 'messages' list")
    return Prompt(where, messages=_messages(messages, where))


def _messages(value: object, where: str) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not value:
        raise InvalidParameterError(f"{where}: 'messages' must be a non-empty list")
    for i, m in enumerate(value):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise InvalidParameterError(
                f"{where}: message {i + 1} needs a 'role' string and a 'content' string"
            )
    return tuple(value)


def history_prompts(
    path: str | Path, *, max_tokens: int, model: str = "", limit: int = MAX_PROMPTS
) -> list[Prompt]:
    """The latest ``limit`` requests a server saved with ``--history-file``, as prompts.

    The file keeps each request's prompt and output as one run of tokens (the part an
    earlier request already held is stored once), so each becomes a prompt of its
    tokens less the last ``max_tokens`` (about where its output began).
    """
    from ..drafting.history import LookupHistory

    path = Path(path)
    try:
        LookupHistory(model=model).load(path)  # its format, version and model checked
        documents = json.loads(path.read_text(encoding="utf-8"))["documents"]
    except ValueError as e:
        raise InvalidParameterError(f"cannot use the history file {e}") from None
    except OSError as e:
        raise InvalidParameterError(f"cannot read the history file {path}: {e}") from None
    out = [
        Prompt(f"{path.name} request {i + 1}", tokens=tuple(d[: max(1, len(d) - max_tokens)]))
        for i, d in enumerate(documents)
        if len(d) >= MIN_HISTORY_TOKENS
    ]
    if not out:
        raise InvalidParameterError(f"no saved request of {MIN_HISTORY_TOKENS}+ tokens in {path}")
    return out[-limit:]


def default_prompts(names: Sequence[str] = DEFAULT_WORKLOADS) -> list[Prompt]:
    """A few of the benchmark's shipped workloads (code completion and editing, a summary)."""
    from ..bench.workloads import builtin_workloads

    shipped = builtin_workloads()
    return [Prompt(f"workload {n}", text=shipped[n].prompt) for n in names]
