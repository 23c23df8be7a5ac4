"""Saved conversations: round trip, listing, and atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from edgespec_tui.store import Conversation, ConversationStore, StoredMessage, data_dir


def conv(*texts: str) -> Conversation:
    c = Conversation(target="t", draft="d")
    for i, text in enumerate(texts):
        role = "user" if i % 2 == 0 else "assistant"
        segs = [("accepted", text[:2]), ("rejected", "x"), ("bonus", text[2:])] if i % 2 else None
        c.messages.append(StoredMessage(role, text, segments=segs))
    return c


def test_round_trip_and_listing(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    a = conv("Hello there", "Hi!")
    store.save(a)
    b = conv("Second")
    store.save(b)
    loaded = store.load(a.id)
    assert loaded.messages == a.messages and loaded.title == "Hello there"
    assert loaded.messages[1].segments == [("accepted", "Hi"), ("rejected", "x"), ("bonus", "!")]
    assert {c.id for c in store.list()} == {a.id, b.id}
    assert store.path(a.id).parent == tmp_path / "conversations"


def test_data_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGESPEC_DATA_DIR", str(tmp_path))
    assert data_dir() == tmp_path
    assert ConversationStore().dir == tmp_path / "conversations"


def test_a_failed_write_keeps_the_old_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ConversationStore(tmp_path)
    c = conv("Keep me")
    path = store.save(c)
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # a kill arriving between write and rename

    c.messages.append(StoredMessage("assistant", "lost"))
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        store.save(c)
    assert path.read_bytes() == before
    assert sorted(p.name for p in store.dir.iterdir()) == [path.name]


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    good = conv("fine")
    store.save(good)
    (store.dir / "torn.json").write_text('{"id": "torn", "messages": [', encoding="utf-8")
    (store.dir / "odd.json").write_text(json.dumps({"messages": []}), encoding="utf-8")
    (store.dir / f".{good.id}.abc.tmp").write_text("partial", encoding="utf-8")
    assert [c.id for c in store.list()] == [good.id]


def test_bad_ids_are_refused(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(ValueError):
            store.path(bad)


WRONG_SHAPES = {
    "item": '{"id": "item", "messages": [1]}',
    "count": '{"id": "count", "messages": 5}',
    "chars": '{"id": "chars", "messages": "abc"}',
    "segint": '{"id": "segint", "messages": [{"role": "assistant", "content": "a",'
    ' "segments": [1]}]}',
    "segstr": '{"id": "segstr", "messages": [{"role": "assistant", "content": "a",'
    ' "segments": "ab"}]}',
    "segtriple": '{"id": "segtriple", "messages": [{"role": "assistant", "content": "a",'
    ' "segments": [["a", "b", "c"]]}]}',
    "stats": '{"id": "stats", "messages": [{"role": "user", "content": "a", "stats": 3}]}',
    "draft": '{"id": "draft", "draft": [1], "messages": []}',
    "deep": '{"id": "deep", "messages": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deeplist": "[" * 100_000 + "]" * 100_000,
    "badutf8": b'{"id": "badutf8", "title": "\xff\xfe", "messages": []}',
    # right shape, wrong field types: these loaded (as "{}" or "7") before
    "updated": '{"id": "updated", "updated": {}, "messages": []}',
    "title": '{"id": "title", "title": 7, "messages": []}',
    "target": '{"id": "target", "target": null, "messages": []}',
    "mode": '{"id": "mode", "mode": "poetry", "messages": []}',
    "stopped": '{"id": "stopped", "messages": [{"role": "user", "content": "a", "stopped": 1}]}',
    "segnum": '{"id": "segnum", "messages": [{"role": "assistant", "content": "a",'
    ' "segments": [["accepted", 5]]}]}',
    "statstr": '{"id": "statstr", "messages": [{"role": "user", "content": "a",'
    ' "stats": {"generated": "many"}}]}',
    "otherid": '{"id": "someone-else", "messages": []}',
}


def write_wrong_shapes(store: ConversationStore) -> None:
    """Every file of WRONG_SHAPES in the store's directory."""
    store.dir.mkdir(parents=True, exist_ok=True)
    for name, text in WRONG_SHAPES.items():
        path = store.dir / f"{name}.json"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")


def test_wrong_shapes_are_skipped_and_counted(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    good = conv("fine", "reply")
    store.save(good)
    write_wrong_shapes(store)
    (store.dir / "adir.json").mkdir()
    convs, skipped = store.scan()
    assert [c.id for c in convs] == [good.id]
    assert skipped == len(WRONG_SHAPES) + 1
    assert [c.id for c in store.list()] == [good.id]
    for name in WRONG_SHAPES:
        with pytest.raises(ValueError):  # one error type, never a RecursionError or TypeError
            store.load(name)
    assert store.load(good.id).messages == good.messages


def test_a_named_pipe_among_conversations_is_skipped_not_read(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path)
    good = Conversation(target="t", draft="d")
    store.save(good)
    os.mkfifo(tmp_path / "conversations" / "pipe.json")
    conversations, skipped = store.scan()
    assert [c.id for c in conversations] == [good.id] and skipped == 1
