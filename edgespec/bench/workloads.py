"""Benchmark workloads: prompt files shipped with the package, one TOML file each.

A workload file has ``name``, ``description``, ``temperature``, ``max_tokens``,
optionally ``chat`` (wrap the prompt in the model's chat template; default false,
since the default target is a base model), optionally ``kind`` (what sort of task it
is, e.g. ``edit`` or ``quote``: the corpus report groups by it; default "") and
``prompt``, written as a plain completion, or instead ``[[messages]]`` (each a
``role``, system, user or assistant, and a ``content``: a conversation, rendered in
the target's chat template with the assistant's turn begun; needs ``chat = true``).
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..errors import InvalidParameterError
from ..params import check_max_tokens

WORKLOAD_DIR = "workloads"
ROLES = ("system", "user", "assistant")
_KIND = re.compile(r"[a-z0-9][a-z0-9_-]*")


@dataclass(frozen=True)
class Workload:
    """One prompt and how to decode it."""

    name: str
    description: str
    prompt: str
    temperature: float = 0.0
    max_tokens: int = 256
    chat: bool = False
    kind: str = ""
    messages: tuple[tuple[str, str], ...] = ()  # (role, content): a conversation

    @property
    def greedy(self) -> bool:
        """True when decoded at temperature 0."""
        return self.temperature <= 0.0


def parse_workload(text: str, *, default_name: str = "") -> Workload:
    """A Workload from a TOML document; raises InvalidParameterError on bad content."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InvalidParameterError(f"bad workload file {default_name!r}: {e}") from None
    name = str(data.get("name", default_name))
    messages = _messages(data.get("messages"), name or default_name)
    prompt = data.get("prompt", _plain_text(messages) if messages else None)
    if not name or not isinstance(prompt, str) or not prompt:
        raise InvalidParameterError(f"workload {name or default_name!r} needs a name and a prompt")
    temperature = data.get("temperature", 0.0)
    max_tokens = data.get("max_tokens", 256)
    chat = data.get("chat", False)
    kind = data.get("kind", "")
    bad = f"bad field in workload {name!r}:"
    if not _is_number(temperature) or not 0.0 <= temperature < math.inf:
        raise InvalidParameterError(f"{bad} temperature must be a number >= 0, got {temperature!r}")
    check_max_tokens(max_tokens, minimum=1, name=f"{bad} max_tokens")
    if not isinstance(chat, bool):
        raise InvalidParameterError(f"{bad} chat must be true or false, got {chat!r}")
    if messages and not chat:
        raise InvalidParameterError(f"{bad} messages need chat = true")
    if not isinstance(kind, str) or (kind and not _KIND.fullmatch(kind)):
        raise InvalidParameterError(
            f"{bad} kind must be a lower-case word (letters, digits, - or _), got {kind!r}"
        )
    return Workload(
        name=name,
        description=str(data.get("description", "")),
        prompt=prompt,
        temperature=float(temperature),
        max_tokens=max_tokens,
        chat=chat,
        kind=kind,
        messages=messages,
    )


def _messages(value: object, name: str) -> tuple[tuple[str, str], ...]:
    """A workload's ``[[messages]]`` as (role, content) pairs; () when there are none."""
    if value is None:
        return ()
    bad = f"bad field in workload {name!r}: messages"
    if not isinstance(value, list) or not value:
        raise InvalidParameterError(f"{bad} must be a non-empty array of tables")
    out = []
    for m in value:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise InvalidParameterError(f"{bad}: each needs a role, one of {', '.join(ROLES)}")
        if not isinstance(m.get("content"), str):
            raise InvalidParameterError(f"{bad}: each needs a content string")
        out.append((m["role"], m["content"]))
    return tuple(out)


def _plain_text(messages: tuple[tuple[str, str], ...]) -> str:
    """A conversation as plain text (for a target without a chat template)."""
    turns = [f"{role.capitalize()}: {content}" for role, content in messages]
    return "\n\n".join([*turns, "Assistant:"])


def _is_number(value: object) -> bool:
    """True for a TOML integer or float (TOML booleans are ints to Python: not these)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def builtin_workloads() -> dict[str, Workload]:
    """The workloads shipped in edgespec/bench/workloads/, by name, in file-name order."""
    folder = resources.files("edgespec.bench").joinpath(WORKLOAD_DIR)
    out: dict[str, Workload] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
            w = parse_workload(entry.read_text(encoding="utf-8"), default_name=entry.name[:-5])
            out[w.name] = w
    return out


def shipped_corpus(name: str) -> Path | None:
    """The folder of a corpus shipped in edgespec/bench/workloads/ (e.g. ``agent``), None
    when there is none by that name."""
    if not _KIND.fullmatch(name):
        return None
    folder = Path(str(resources.files("edgespec.bench").joinpath(WORKLOAD_DIR, name)))
    return folder if folder.is_dir() else None


def select_workloads(spec: str | None) -> list[Workload]:
    """Workloads by comma-separated names or ``.toml`` paths (None or ``all``: every built-in)."""
    shipped = builtin_workloads()
    if not spec or spec == "all":
        return list(shipped.values())
    picked: list[Workload] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if item in shipped:
            picked.append(shipped[item])
        elif item.endswith(".toml") or Path(item).is_file():
            path = Path(item)
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise InvalidParameterError(f"cannot read workload {item}: {e}") from None
            picked.append(parse_workload(text, default_name=path.stem))
        else:
            names = ", ".join(shipped)
            raise InvalidParameterError(f"unknown workload {item!r}; shipped: {names}")
    if not picked:
        raise InvalidParameterError("no workloads selected")
    names = [w.name for w in picked]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidParameterError(f"workload named more than once: {', '.join(twice)}")
    return picked
