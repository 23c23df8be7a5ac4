"""A chat longer than the context keeps going: the real engine leaves the oldest turns
out of the prompt (``chat --context-overflow truncate-middle``, the default) and the
app shows a note where that happened; ``error`` fails as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from edgespec_tui.command import settings_from_args
from edgespec_tui.overflow import ContextTrimmed
from edgespec_tui.prompt import ChatMessage
from edgespec_tui.session import GenerationSettings, LlamaChatEngine, ModelChoice
from edgespec_tui.store import ConversationStore
from edgespec_tui.widgets.assistant_message import AssistantMessage
from edgespec_tui.widgets.chat_log import ChatLog, ContextNote

from edgespec.cli import build_parser
from edgespec.errors import ContextFullError
from edgespec.events import DoneEvent
from tests.tui.conftest import send, settle
from tests.tui.fakes import FakeEngine


def long_chat(turns: int) -> list[ChatMessage]:
    out = []
    for i in range(turns):
        out.append(ChatMessage("user", f"Question {i}: tell me about the world and its people."))
        out.append(ChatMessage("assistant", f"Answer {i}: the world is large, its people many."))
    return [*out, ChatMessage("user", "And what about the sea today?")]


@pytest.fixture(scope="module")
def engine(synthetic_models: dict[str, Path]):
    """The real engine on the synthetic ChatML target, a 256-token context."""
    choice = ModelChoice(target=str(synthetic_models["target_fim"]), draft="ngram", n_ctx=256,
                         n_threads=1)  # fmt: skip
    eng = LlamaChatEngine.load(choice)
    yield eng
    eng.close()


def test_the_engine_leaves_the_oldest_turns_out_and_replies(engine: LlamaChatEngine) -> None:
    messages = long_chat(10)
    whole = len(engine.prompt_tokens(messages))
    assert whole > 256
    events = list(engine.stream_reply(messages, GenerationSettings(max_tokens=8)))
    first, done = events[0], events[-1]
    assert isinstance(first, ContextTrimmed) and isinstance(done, DoneEvent)
    assert first.messages % 2 == 0 and 0 < first.messages < len(messages)  # whole turns
    kept = engine.prompt_tokens(messages[first.messages :])
    assert first.tokens == whole - len(kept) and first.n_ctx == 256
    assert done.stats.prompt_tokens == len(kept) and len(kept) + 8 <= 256
    assert 1 <= len(done.tokens) <= 8
    # a conversation that fits: nothing left out, no note
    events = list(engine.stream_reply(long_chat(1), GenerationSettings(max_tokens=8)))
    assert not any(isinstance(ev, ContextTrimmed) for ev in events)


def test_error_mode_refuses_as_before(engine: LlamaChatEngine) -> None:
    settings = GenerationSettings(max_tokens=8, context_overflow="error")
    with pytest.raises(ContextFullError):
        list(engine.stream_reply(long_chat(10), settings))


def test_a_last_message_over_the_context_is_a_context_error(engine: LlamaChatEngine) -> None:
    messages = [*long_chat(2), ChatMessage("user", "word " * 400)]
    with pytest.raises(ContextFullError, match="even with its 5 earlier messages dropped"):
        list(engine.stream_reply(messages, GenerationSettings(max_tokens=8)))


def test_the_option_sets_the_setting() -> None:
    parse = build_parser().parse_args
    assert settings_from_args(parse(["chat"])).context_overflow == "truncate-middle"
    args = parse(["chat", "--context-overflow", "error"])
    assert settings_from_args(args).context_overflow == "error"


def test_a_bad_value_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["chat", "--context-overflow", "shift"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--context-overflow" in err and "shift" in err


@pytest.mark.asyncio
async def test_the_app_notes_where_older_turns_were_left_out(app_with, data_dir: Path) -> None:
    engine = FakeEngine(trimmed=ContextTrimmed(4, 312, 2048))
    app = app_with(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await send(pilot, "Hello sea")
        log = app.chat.query_one(ChatLog)
        (note,) = log.query(ContextNote)
        text = str(note.render())
        assert "4 messages" in text and "312 tokens" in text and "2,048-token" in text
        children = list(log.children)
        assert isinstance(children[children.index(note) + 1], AssistantMessage)
        await send(pilot, "Again")  # as many left out as before: no second note
        assert len(log.query(ContextNote)) == 1
        engine.trimmed = ContextTrimmed(6, 470, 2048)
        await send(pilot, "Once more")
        assert len(log.query(ContextNote)) == 2
        assert len(app.chat.query(AssistantMessage)) == 3  # every reply generated
        # the conversation itself stays whole, on screen and saved
        (conv,), _ = ConversationStore(data_dir).scan()
        assert [m.role for m in conv.messages] == ["user", "assistant"] * 3
        await pilot.press("ctrl+n")
        await settle(pilot)
        assert not log.query(ContextNote)
