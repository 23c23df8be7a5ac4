"""The chat app driven with Textual's Pilot against a scripted fake engine."""

from __future__ import annotations

import asyncio
import math
import threading

import pytest
from edgespec_tui.prompt import ChatMessage
from edgespec_tui.screens.conversations import ConversationsScreen
from edgespec_tui.store import ConversationStore
from edgespec_tui.widgets.assistant_message import AssistantMessage
from edgespec_tui.widgets.chat_log import ChatLog, ModeBanner, UserMessage
from edgespec_tui.widgets.prompt_input import PromptInput
from edgespec_tui.widgets.stats_panel import StatsPanel

from edgespec.errors import ModelLoadError
from edgespec.events import TokenKind
from tests.tui.conftest import send, settle
from tests.tui.fakes import SCRIPT, FakeEngine, context_full

pytestmark = pytest.mark.asyncio

REPLY = "The sea is calm today."


def replies(app) -> list[AssistantMessage]:
    return list(app.chat.query(AssistantMessage))


def style_of(msg: AssistantMessage, kind: TokenKind):
    return msg.get_component_rich_style(f"token--{kind.value}", partial=True)


async def test_reply_streams_with_a_style_per_token_kind(app_with) -> None:
    engine = FakeEngine()
    app = app_with(engine, linger_s=math.inf)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await send(pilot, "Hello sea")
        assert engine.calls[0][0] == [ChatMessage("user", "Hello sea")]
        (msg,) = replies(app)
        assert msg.text == REPLY
        assert [(p.kind, p.text) for p in msg.pieces] == [x for rnd in SCRIPT for x in rnd]
        text = msg.rich_text()
        assert text.plain.startswith("The sea ocean is calm today.")
        styles = {text.plain[s.start : s.end]: s.style for s in text.spans}
        assert styles["The"] == style_of(msg, TokenKind.ACCEPTED)
        assert styles[" ocean"] == style_of(msg, TokenKind.REJECTED)
        assert styles[" ocean"].strike
        assert styles[" is"] == style_of(msg, TokenKind.CORRECTION)
        assert styles["."] == style_of(msg, TokenKind.BONUS)
        kinds = {TokenKind.ACCEPTED, TokenKind.REJECTED, TokenKind.CORRECTION, TokenKind.BONUS}
        assert len({str(style_of(msg, k)) for k in kinds}) == 4  # four distinct looks
        assert not app.chat.generating
        assert app.chat.query_one(PromptInput).text == ""


async def test_rejected_tokens_fade_unless_kept(app_with) -> None:
    app = app_with(linger_s=0.0)
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "Hi")
        (msg,) = replies(app)
        assert "ocean" not in msg.rich_text().plain
        await pilot.press("f6")
        assert msg.show_rejected
        assert "ocean" in msg.rich_text().plain
        await pilot.press("f6")
        assert "ocean" not in msg.rich_text().plain


async def test_stop_mid_generation_keeps_the_app_and_the_partial_reply(app_with) -> None:
    gate = threading.Event()
    engine = FakeEngine(gate=gate, pause_after=3)  # waits after "The", " sea", " ocean"
    app = app_with(engine, linger_s=math.inf)
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "Hi", wait=False)
        assert await asyncio.to_thread(engine.paused.wait, 30)
        assert app.chat.generating
        await pilot.press("escape")
        gate.set()
        await settle(pilot)
        assert app.is_running and not app.chat.generating
        (msg,) = replies(app)
        assert msg.text == "The sea" and msg.status == "stopped"
        assert engine.closed_streams == 1  # the engine's generator was closed
        saved = ConversationStore(app.config.store.dir.parent).load(app.chat.conversation.id)
        assert saved.messages[-1].role == "assistant" and saved.messages[-1].stopped
        assert saved.messages[-1].content == "The sea"
        # the next turn carries on from the partial reply
        await send(pilot, "More")
        assert [m.content for m in engine.calls[1][0]] == ["Hi", "The sea", "More"]
        assert replies(app)[-1].text == REPLY


async def test_multi_turn_sends_the_whole_conversation(app_with) -> None:
    engine = FakeEngine()
    app = app_with(engine)
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "One")
        await send(pilot, "Two")
        assert engine.calls[1][0] == [
            ChatMessage("user", "One"),
            ChatMessage("assistant", REPLY),
            ChatMessage("user", "Two"),
        ]
        panel = app.chat.query_one(StatsPanel).rich_text().plain
        assert "(8 cached)" in panel  # what the engine reported about the KV cache


async def test_new_chat_starts_empty(app_with) -> None:
    engine = FakeEngine()
    app = app_with(engine)
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "One")
        old_id = app.chat.conversation.id
        await pilot.press("ctrl+n")
        await pilot.pause()
        log = app.chat.query_one(ChatLog)
        assert not log.query(UserMessage) and not log.query(AssistantMessage)
        assert app.chat.conversation.id != old_id and not app.chat.conversation.messages
        await send(pilot, "Fresh")
        assert engine.calls[-1][0] == [ChatMessage("user", "Fresh")]


async def test_reopen_a_saved_conversation(app_with, data_dir) -> None:
    engine = FakeEngine()
    app = app_with(engine, show_rejected=True)
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "Remember me")
        saved_id = app.chat.conversation.id
        await pilot.press("ctrl+n")
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ConversationsScreen)
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat.conversation.id == saved_id
        (user,) = app.chat.query(UserMessage)
        assert user.text == "Remember me"
        (msg,) = replies(app)
        assert msg.text == REPLY and not msg.streaming
        assert [p.kind for p in msg.pieces][:4] == [k for k, _ in SCRIPT[0]]  # colours kept
        await send(pilot, "And now?")
        assert [m.content for m in engine.calls[-1][0]] == ["Remember me", REPLY, "And now?"]
    assert len(ConversationStore(data_dir).list()) == 1


async def test_completion_mode_is_labelled(app_with) -> None:
    app = app_with(FakeEngine(chat_mode=False, draft=None))
    async with app.run_test() as pilot:
        await settle(pilot)
        banner = app.chat.query_one(ModeBanner)
        assert banner.has_class("-completion")
        assert "Completion mode" in str(banner.render())
        assert "COMPLETION" in app.chat.sub_title
        await send(pilot, "Once upon a time")
        (msg,) = replies(app)
        assert {p.kind for p in msg.pieces} == {TokenKind.PLAIN}
        assert app.chat.conversation.mode == "completion"


async def test_settings_change_on_the_fly(app_with) -> None:
    engine = FakeEngine()
    app = app_with(engine)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("f3", "f3", "f2", "f4", "f4")
        assert app.chat.settings.gamma == 4
        assert app.chat.settings.temperature == 0.7
        await send(pilot, "Go")
        assert engine.calls[-1][1].gamma == 4 and engine.calls[-1][1].temperature == 0.7
        await pilot.press("f5")  # fake-draft -> none
        await settle(pilot)
        assert app.chat.engine_info.draft is None
        await send(pilot, "Plain now")
        assert {p.kind for p in replies(app)[-1].pieces} == {TokenKind.PLAIN}
        assert "none" in app.chat.query_one(StatsPanel).rich_text().plain


async def test_newline_key_and_multiline_message(app_with) -> None:
    engine = FakeEngine()
    app = app_with(engine)
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("a", "ctrl+j", "b")
        assert app.chat.query_one(PromptInput).text == "a\nb"
        await pilot.press("enter")
        await settle(pilot)
        assert engine.calls[0][0][-1].content == "a\nb"


async def test_missing_model_is_a_notification(app_with) -> None:
    def factory():
        raise ModelLoadError("model file not found: nowhere.gguf")

    from edgespec_tui.app import make_app

    app = make_app(factory, store=app_with().config.store)
    async with app.run_test() as pilot:
        await settle(pilot)
        assert any("nowhere.gguf" in n.message for n in app._notifications)
        await send(pilot, "Hello")
        assert app.is_running
        assert any("Cannot send" in n.message for n in app._notifications)
        assert app.chat.query_one(PromptInput).text == "Hello"  # kept for later


async def test_context_full_gives_the_message_back(app_with) -> None:
    app = app_with(FakeEngine(fail_with=context_full()))
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "Too long")
        assert any("context holds" in n.message for n in app._notifications)
        assert not app.chat.conversation.messages
        assert not app.chat.query(UserMessage) and not replies(app)
        assert app.chat.query_one(PromptInput).text == "Too long"


async def test_ctrl_q_quits_with_status_0(app_with) -> None:
    app = app_with()
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert not app.is_running
    assert (app.return_code or 0) == 0


async def test_text_and_enter_arriving_together_are_sent(app_with) -> None:
    """A terminal may deliver 'Hi\\r' in one read: Enter must see the typed text."""
    from textual import events

    engine = FakeEngine()
    app = app_with(engine)
    async with app.run_test() as pilot:
        await settle(pilot)
        for ch in "Hi there":
            app.post_message(events.Key("space" if ch == " " else ch, ch))
        app.post_message(events.Key("enter", "\r"))
        await settle(pilot)
        await settle(pilot)
        assert engine.calls and engine.calls[0][0][-1].content == "Hi there"


async def test_gamma_steps_through_auto(app_with) -> None:
    """Leaving auto, F3 and F2 step from the draft length auto used (0 before a reply);
    F2 at 0 goes back to auto. (F3 from auto went to 0, F2 from auto did nothing.)"""
    from edgespec_tui.session import GenerationSettings

    engine = FakeEngine()
    app = app_with(engine, settings=GenerationSettings(gamma="auto"))
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("f2")  # nothing measured yet: auto counts as 0
        assert app.chat.settings.gamma == 0
        await pilot.press("f2")
        assert app.chat.settings.gamma == "auto"
        await pilot.press("f3")
        assert app.chat.settings.gamma == 1
        await pilot.press("f2", "f2")
        assert app.chat.settings.gamma == "auto"
        await send(pilot, "Go")
        assert engine.calls[-1][1].gamma == "auto"
        # the script drafts 3 then 2 tokens a round: auto's draft length was ~3 (2.5 up)
        assert app.chat.auto_gamma == 3
        assert "γ auto ~3" in app.chat.query_one(StatsPanel).rich_text().plain
        await pilot.press("f3")
        assert app.chat.settings.gamma == 4
        await pilot.press("f2", "f2", "f2", "f2", "f2")  # 3, 2, 1, 0, auto
        assert app.chat.settings.gamma == "auto"
        await pilot.press("f2")
        assert app.chat.settings.gamma == 2


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_setting_keys_replace_one_note_and_pile_up_no_toasts(app_with, size) -> None:
    """F2-F6 each said so in a toast, and at 80x24 they piled over the panel and the chat:
    the latest change is one line in the panel instead, replacing the one before."""
    app = app_with(FakeEngine())
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        before = len(app._notifications)
        await pilot.press("f2", "f3", "f3", "f4", "f6", "f5")
        await settle(pilot)
        assert len(app._notifications) == before
        panel = app.chat.query_one(StatsPanel).rich_text().plain
        notes = [line for line in panel.splitlines() if line.startswith("› ")]
        assert notes == ["› drafter = none"]
        await pilot.press("f4")
        panel = app.chat.query_one(StatsPanel).rich_text().plain
        assert [ln for ln in panel.splitlines() if ln.startswith("› ")] == ["› temperature = 0.7"]


@pytest.mark.parametrize(
    ("size", "target", "shown"),
    [
        ((80, 24), "smollm2-135m-instruct", "smollm2-135m-instruct"),
        ((120, 40), "smollm2-135m-instruct", "smollm2-135m-instruct"),
        ((80, 24), "SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Inst….Q4_1"),
        ((120, 40), "SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q4_1"),
        ((80, 24), "Qwen2.5-Coder-7B-Instruct-Q4_K_M", "Qwen2.5-Coder-7…-Q4_K_M"),
    ],
)
async def test_the_targets_name_fits_the_panel(app_with, size, target, shown) -> None:
    """The target's name was cut at the panel's edge even at 120 columns: it gets a line
    of its own when it does not fit beside its label, shortened in the middle, keeping
    the quantization at its end."""
    app = app_with(FakeEngine(target=target))
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        panel = app.chat.query_one(StatsPanel)
        width = panel.content_size.width
        lines = panel.rich_text().plain.splitlines()
        assert all(len(line) <= width for line in lines), (width, lines)
        assert any(ln.strip() == shown or ln.endswith(f" {shown}") for ln in lines), lines


async def test_quit_while_streaming_stops_the_engine(app_with) -> None:
    """Ctrl+Q mid-reply must not leave the process waiting for the reply to finish."""
    gate = threading.Event()
    engine = FakeEngine(gate=gate, pause_after=2)
    app = app_with(engine)
    async with app.run_test() as pilot:
        await settle(pilot)
        await send(pilot, "Hi", wait=False)
        assert await asyncio.to_thread(engine.paused.wait, 30)
        await pilot.press("ctrl+q")
        await pilot.pause()
    gate.set()  # the worker thread notices the stop at its next event
    assert await asyncio.to_thread(engine.closed.wait, 30)
    assert engine.closed_streams == 1
    assert engine.yielded <= 3  # not the whole script


async def test_open_lists_good_conversations_and_skips_malformed_ones(app_with, data_dir) -> None:
    from edgespec_tui.store import Conversation, StoredMessage
    from textual.widgets import OptionList

    from tests.tui.test_store import WRONG_SHAPES, write_wrong_shapes

    store = ConversationStore(data_dir)
    good = Conversation(messages=[StoredMessage("user", "Still here")])
    store.save(good)
    write_wrong_shapes(store)
    app = app_with(FakeEngine())
    async with app.run_test() as pilot:
        await settle(pilot)
        await pilot.press("ctrl+o")
        await pilot.pause()
        assert isinstance(app.screen, ConversationsScreen)
        listed = app.screen.query_one(OptionList)
        assert [listed.get_option_at_index(i).id for i in range(listed.option_count)] == [good.id]
        notes = [n.message for n in app._notifications]
        assert sum("skipped" in n for n in notes) == 1
        assert any(f"{len(WRONG_SHAPES)} " in n for n in notes if "skipped" in n)
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat.conversation.id == good.id
        (user,) = app.chat.query(UserMessage)
        assert user.text == "Still here"
