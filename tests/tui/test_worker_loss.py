"""`edgespec chat --rpc` after a lost worker (issue 35): the app stays up, the
conversation is kept, and once the workers answer Ctrl+R starts the chat again on
them, resuming the conversation and generating the reply the loss cut off.

The end-to-end test runs the real command in a pseudo-terminal (a lost worker parks a
thread for good, so it cannot share the test's process) with a real `edgespec worker`
behind the latency proxy; the rest drive the app with the scripted engine.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
from edgespec_tui.command import restart_argv
from edgespec_tui.store import Conversation, ConversationStore, StoredMessage

from tests.rpc_workers import ENV, Worker, require_rpc
from tests.tui.conftest import settle
from tests.tui.fakes import FakeEngine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from latency_proxy import LatencyProxy  # noqa: E402  (the harness's loopback proxy)

REPLY = "The sea is calm today."
DEADLINE_S = 90.0  # for each wait below (a busy CI machine)
CTRL_R, CTRL_Q = "\x12", "\x11"


def test_restart_argv_resumes_the_conversation_in_place_of_any_other() -> None:
    args = ["chat", "--rpc", "127.0.0.1:5", "--resume", "old", "--resume=older", "-t", "2"]
    assert restart_argv(args, "new") == [
        sys.executable,
        "-m",
        "edgespec",
        "chat",
        "--rpc",
        "127.0.0.1:5",
        "-t",
        "2",
        "--resume",
        "new",
    ]
    assert restart_argv(["chat"], "")[3:] == ["chat"]
    again = restart_argv(["chat", "--lookup-history-from", "/a", "--resume", "x"], "y", "/b")
    assert again[3:] == ["chat", "--resume", "y", "--lookup-history-from", "/b"]


def test_a_restart_reads_the_lookup_history_saved_for_it(synthetic_models, tmp_path) -> None:
    """load_engine adds the documents of the history file to the engine's and deletes
    the file; a file that is no history is left out (and deleted) without an error."""
    from edgespec_tui.command import load_engine
    from edgespec_tui.session import ModelChoice

    from edgespec.drafting.history import LookupHistory

    target = synthetic_models["target"]
    choice = ModelChoice(target=str(target), draft="ngram", n_ctx=256, n_threads=1)
    saved = LookupHistory(model=target.name)
    saved.add([5, 6, 7, 8, 9])
    saved.add([10, 11, 12])
    path = tmp_path / "history.json"
    saved.save(path)
    engine = load_engine(choice, str(path))
    try:
        assert engine.history.documents == 2 and not path.exists()
    finally:
        engine.close()
    path.write_text("not a history")
    engine = load_engine(choice, str(path))
    try:
        assert engine.history.documents == 0 and not path.exists()
    finally:
        engine.close()


@pytest.mark.asyncio
async def test_resume_generates_the_reply_the_conversation_lacks(app_with, data_dir) -> None:
    store = ConversationStore(data_dir)
    conv = Conversation(messages=[StoredMessage(role="user", content="Hello")])
    store.save(conv)
    engine = FakeEngine()
    app = app_with(engine, resume=store.load(conv.id))
    async with app.run_test() as pilot:
        await settle(pilot)
        await settle(pilot)
        assert [m.content for m in engine.calls[-1][0]] == ["Hello"]
        assert app.chat.conversation.id == conv.id
    saved = store.load(conv.id).messages
    assert [(m.role, m.content) for m in saved] == [("user", "Hello"), ("assistant", REPLY)]


@pytest.mark.asyncio
async def test_resume_of_an_answered_conversation_waits_for_a_message(app_with, data_dir) -> None:
    store = ConversationStore(data_dir)
    conv = Conversation(
        messages=[StoredMessage(role="user", content="Hi"), StoredMessage("assistant", "Yes")]
    )
    store.save(conv)
    engine = FakeEngine()
    app = app_with(engine, resume=store.load(conv.id))
    async with app.run_test() as pilot:
        await settle(pilot)
        assert engine.calls == [] and len(app.chat.conversation.messages) == 2


@pytest.mark.asyncio
async def test_ctrl_r_without_a_loss_changes_nothing(app_with) -> None:
    app = app_with(FakeEngine())
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert app.is_running and app.restart_with is None


def test_resuming_an_unknown_conversation_is_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "chat", "--resume", "nope"],
        env={**ENV, "EDGESPEC_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    where = tmp_path / "conversations"
    assert out.stderr.splitlines() == [
        f"edgespec: error: cannot resume conversation nope: none is saved in {where}"
    ]


class Terminal:
    """A command in a pseudo-terminal of 120x40, its output drained (and kept) by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.proc = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**env, "TERM": "xterm-256color"},
            start_new_session=True,
        )
        os.close(slave)
        self.master = master
        self.output = bytearray()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.master, 65536):
                self.output += chunk

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def cmdline(self) -> list[str]:
        raw = Path(f"/proc/{self.proc.pid}/cmdline").read_bytes()
        return raw.decode().split("\0")[:-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self.master)


def wait_for(what: str, check, timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def saved(data_dir: Path) -> list[tuple[str, str]]:
    files = list((data_dir / "conversations").glob("*.json"))
    if len(files) != 1:
        return []
    with contextlib.suppress(ValueError, OSError):
        messages = json.loads(files[0].read_text())["messages"]
        return [(m["role"], m["content"]) for m in messages]
    return []


def test_a_worker_lost_mid_reply_keeps_the_chat_and_ctrl_r_resumes_it(
    synthetic_models, tmp_path: Path
) -> None:
    """kill -9 of the worker mid-reply: the chat process stays, with the conversation
    saved up to the message; Ctrl+R does nothing until the worker answers again, then
    starts the chat again (the same process, now with --resume) on the workers, and the
    reply it generates is the one a local greedy run gives."""
    from edgespec_tui.prompt import ChatMessage
    from edgespec_tui.session import GenerationSettings, LlamaChatEngine, ModelChoice

    from edgespec.events import DoneEvent

    require_rpc()
    target, prompt, max_tokens = str(synthetic_models["target"]), "Once upon a time", 120
    first = "the cat sat on the mat"
    choice = ModelChoice(target=target, draft="ngram", n_ctx=1024, n_threads=1)
    local = LlamaChatEngine.load(choice)
    try:
        settings = GenerationSettings(gamma=4, temperature=0.0, max_tokens=max_tokens)
        (first_done,) = [
            e
            for e in local.stream_reply([ChatMessage("user", first)], settings)
            if isinstance(e, DoneEvent)
        ]
        turns = [ChatMessage("user", first), ChatMessage("assistant", first_done.text)]
        done = [
            e
            for e in local.stream_reply([*turns, ChatMessage("user", prompt)], settings)
            if isinstance(e, DoneEvent)
        ]
        expected = done[-1].text
        assert len(expected) > 20
    finally:
        local.close()
    data_dir = tmp_path / "data"
    worker = Worker(tmp_path)
    proxy = LatencyProxy(worker.endpoint, 10).start()
    argv = [sys.executable, "-m", "edgespec.cli", "chat", "--target", target]
    argv += ["--draft", "ngram", "--gamma", "4", "--temperature", "0", "--ctx", "1024"]
    argv += ["--threads", "1", "--max-tokens", str(max_tokens), "--rpc", proxy.address]
    term = Terminal(argv, {**ENV, "EDGESPEC_DATA_DIR": str(data_dir)})
    try:
        wait_for("the models to load", lambda: b"ready" in term.output)
        term.type(first + "\r")  # a whole reply: into the lookup history
        wait_for("the first reply", lambda: len(saved(data_dir)) == 2)
        term.type(prompt + "\r")
        n = len(term.output)
        wait_for("the reply to stream", lambda: b"generating" in term.output[n:])
        time.sleep(1.0)
        worker.stop()  # kill -9, mid-reply
        wait_for("the loss to show", lambda: b"Worker lost" in term.output)
        assert term.proc.poll() is None, term.output.decode(errors="replace")[-2000:]
        assert saved(data_dir)[2:] == [("user", prompt)]  # the cut reply is not kept
        term.type(CTRL_R)  # the worker is not back: nothing happens
        time.sleep(2.0)
        assert "--resume" not in term.cmdline() and term.proc.poll() is None
        worker = Worker(tmp_path, port=worker.port)
        wait_for("the offer to retry", lambda: b"Workers back" in term.output)
        conv_id = json.loads(next((data_dir / "conversations").glob("*.json")).read_text())["id"]
        term.type(CTRL_R)
        wait_for("the chat to start again", lambda: "--resume" in term.cmdline())
        argv_again = term.cmdline()
        assert argv_again[-4:-2] == ["--resume", conv_id], argv_again
        assert argv_again[-2] == "--lookup-history-from", argv_again
        messages = wait_for("the reply", lambda: len(saved(data_dir)) == 4 and saved(data_dir))
        assert messages[2:] == [("user", prompt), ("assistant", expected)]
        assert not Path(argv_again[-1]).exists()  # the history file was read, then deleted
        term.type(CTRL_Q)
        assert term.proc.wait(timeout=60) == 0
    finally:
        term.close()
        proxy.close()
        worker.stop()
