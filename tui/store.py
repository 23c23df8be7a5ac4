"""Saved conversations: one JSON file each, written atomically.

Files live in ``<data dir>/conversations/<id>.json`` where the data directory is
``platformdirs.user_data_dir("edgespec")`` or ``$EDGESPEC_DATA_DIR``. A save writes
a temporary file in the same directory, fsyncs it and renames it over the old
file, so a crash or a kill at any moment leaves either the old or the new
conversation on disk, never a torn one.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

FORMAT_VERSION = 1
TITLE_CHARS = 60


def data_dir() -> Path:
    """edgespec's data directory ($EDGESPEC_DATA_DIR overrides the platform default)."""
    override = os.environ.get("EDGESPEC_DATA_DIR")
    return Path(override) if override else Path(platformdirs.user_data_dir("edgespec"))


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _field(d: dict[str, Any], name: str, kind: type, default: Any, what: str) -> Any:
    """d[name] when it has the right JSON type (or is absent: default), else ValueError."""
    v = d.get(name, default)
    if v is not default and (not isinstance(v, kind) or (kind is not bool and isinstance(v, bool))):
        raise ValueError(f"a {what}'s {name} must be a {kind.__name__}")
    return v


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def new_id() -> str:
    """A sortable, unique conversation id: UTC time plus random hex."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


@dataclass
class StoredMessage:
    """One message; assistant messages keep their token kinds as (kind, text) pairs."""

    role: str
    content: str
    segments: list[tuple[str, str]] | None = None
    stopped: bool = False
    stats: dict[str, float | int] | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StoredMessage:
        """Build from a decoded JSON object (ValueError if malformed)."""
        if not isinstance(d, dict):
            raise ValueError("a message must be a JSON object")
        if not isinstance(d.get("role"), str) or not isinstance(d.get("content"), str):
            raise ValueError("a message needs string role and content")
        segs = d.get("segments")
        if segs is not None and not (
            isinstance(segs, list)
            and all(
                isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
                for s in segs
            )
        ):
            raise ValueError("a message's segments must be [kind, text] pairs of strings")
        stats = d.get("stats")
        if stats is not None and not (
            isinstance(stats, dict)
            and all(_number(v) or (isinstance(v, list) and all(map(_number, v)))
                    for v in stats.values())
        ):  # fmt: skip
            raise ValueError("a message's stats must be a JSON object of numbers")
        return cls(
            role=d["role"],
            content=d["content"],
            segments=[(k, t) for k, t in segs] if segs else None,
            stopped=_field(d, "stopped", bool, False, "message"),
            stats=stats,
        )


@dataclass
class Conversation:
    """A saved chat: the messages and the models it was held with."""

    id: str = field(default_factory=new_id)
    title: str = ""
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    target: str = ""
    draft: str | None = None
    mode: str = "chat"  # "chat" (template) or "completion" (base model)
    messages: list[StoredMessage] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (with the format version)."""
        d = asdict(self)
        d["version"] = FORMAT_VERSION
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Conversation:
        """Build from a decoded JSON object (ValueError if malformed)."""
        if not isinstance(d, dict) or not isinstance(d.get("id"), str):
            raise ValueError("not a conversation")
        messages = d.get("messages", [])
        if not isinstance(messages, list):
            raise ValueError("a conversation's messages must be a list")
        if d.get("draft") is not None and not isinstance(d["draft"], str):
            raise ValueError("a conversation's draft must be a string")
        mode = _field(d, "mode", str, "chat", "conversation")
        if mode not in ("chat", "completion"):
            raise ValueError(f"a conversation's mode must be chat or completion, not {mode!r}")
        return cls(
            id=d["id"],
            title=_field(d, "title", str, "", "conversation"),
            created=_field(d, "created", str, "", "conversation"),
            updated=_field(d, "updated", str, "", "conversation"),
            target=_field(d, "target", str, "", "conversation"),
            draft=d.get("draft"),
            mode=mode,
            messages=[StoredMessage.from_json(m) for m in messages],
        )

    def default_title(self) -> str:
        """The first user message, shortened to one line."""
        for m in self.messages:
            if m.role == "user" and m.content.strip():
                line = " ".join(m.content.split())
                return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
        return "(empty)"


class ConversationStore:
    """Reads and atomically writes conversations under one directory."""

    def __init__(self, root: Path | None = None) -> None:
        self.dir = (root if root is not None else data_dir()) / "conversations"

    def path(self, conv_id: str) -> Path:
        """Where a conversation's file lives."""
        if not conv_id or "/" in conv_id or conv_id.startswith("."):
            raise ValueError(f"bad conversation id {conv_id!r}")
        return self.dir / f"{conv_id}.json"

    def save(self, conv: Conversation) -> Path:
        """Write conv atomically (temp file, fsync, rename); returns its path."""
        conv.updated = _now()
        if not conv.title:
            conv.title = conv.default_title()
        data = json.dumps(conv.to_json(), ensure_ascii=False, indent=1).encode("utf-8")
        dest = self.path(conv.id)
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{conv.id}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _fsync_dir(self.dir)
        return dest

    def load(self, conv_id: str) -> Conversation:
        """Read one conversation (OSError or ValueError if missing or malformed)."""
        path = self.path(conv_id)
        if path.exists() and not path.is_file():  # a named pipe would block the read
            raise ValueError(f"{path.name} is not a regular file")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        try:
            data = json.loads(text)
        except RecursionError:  # json.loads recurses once per level of nesting
            raise ValueError("nested too deeply to be a conversation") from None
        conv = Conversation.from_json(data)
        if conv.id != conv_id:  # saving it would write another file (or fail on a bad id)
            raise ValueError(f"{path.name} holds conversation {conv.id!r}")
        return conv

    def scan(self) -> tuple[list[Conversation], int]:
        """Every readable conversation, most recently updated first, and how many were not.

        A file that cannot be read or is not a conversation is skipped and counted.
        """
        out, skipped = [], 0
        for p in self.dir.glob("*.json") if self.dir.is_dir() else ():
            try:
                out.append(self.load(p.stem))
            except (OSError, ValueError):
                skipped += 1
        return sorted(out, key=lambda c: (c.updated, c.id), reverse=True), skipped

    def list(self) -> list[Conversation]:
        """Every readable conversation, most recently updated first (bad files skipped)."""
        return self.scan()[0]

    def delete(self, conv_id: str) -> None:
        """Remove a conversation (no error if it is already gone)."""
        with contextlib.suppress(FileNotFoundError):
            self.path(conv_id).unlink()


def _fsync_dir(path: Path) -> None:
    # Make the rename itself durable (POSIX); harmless where unsupported.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
