"""The app against the real smollm2 model: a short chat reply, two turns, KV reuse."""

from __future__ import annotations

from functools import partial

import pytest
from edgespec_tui.app import make_app
from edgespec_tui.prompt import ChatMessage
from edgespec_tui.session import GenerationSettings, LlamaChatEngine, ModelChoice
from edgespec_tui.widgets.assistant_message import AssistantMessage
from edgespec_tui.widgets.stats_panel import StatsPanel

from edgespec.events import TokenKind
from tests.tui.conftest import send, settle

pytestmark = [pytest.mark.asyncio, pytest.mark.real_model]


async def test_short_chat_reply_with_the_real_model(real_model_paths, data_dir) -> None:
    path = str(real_model_paths["smollm2-135m-instruct"])
    # smollm2 drafts for itself: same vocabulary, and greedy accepts every draft token
    choice = ModelChoice(target=path, draft=path, n_ctx=1024, n_threads=2)
    app = make_app(
        partial(LlamaChatEngine.load, choice),
        settings=GenerationSettings(gamma=3, max_tokens=16),
        data_dir=data_dir,
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        chat = app.chat
        assert chat.engine_info is not None and chat.engine_info.chat_mode
        assert chat.meter.mean_s is not None  # plain decoding was timed once
        await send(pilot, "Write a haiku about the sea")
        first = chat.conversation.messages[-1]
        assert first.role == "assistant" and first.content.strip()
        (msg,) = app.chat.query(AssistantMessage)
        assert msg.text == first.content
        assert TokenKind.ACCEPTED in {p.kind for p in msg.pieces}
        assert "speed-up" in chat.query_one(StatsPanel).rich_text().plain
        await send(pilot, "Another one")
        second = chat.conversation.messages[-1]
        assert second.content.strip() and second.stats is not None
        # the second turn re-used the first turn's KV cache: only new tokens were processed
        assert second.stats["prompt_cached"] > first.stats["prompt_tokens"]
        assert second.stats["prompt_tokens"] - second.stats["prompt_cached"] < 20


async def test_stop_then_continue_keeps_the_caches_consistent(real_model_paths, data_dir) -> None:
    path = str(real_model_paths["smollm2-135m-instruct"])
    choice = ModelChoice(target=path, draft=path, n_ctx=1024, n_threads=2)
    app = make_app(
        partial(LlamaChatEngine.load, choice),
        settings=GenerationSettings(gamma=3, max_tokens=24),
        data_dir=data_dir,
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        engine = app.chat.runner.engine
        real_stream = engine.stream_reply

        def stop_after_five_tokens(messages, settings):
            # the person presses Esc after five tokens (set from the worker: no timing)
            for i, ev in enumerate(real_stream(messages, settings)):
                if i == 5:
                    app.chat._stop.set()
                yield ev

        engine.stream_reply = stop_after_five_tokens
        await send(pilot, "Name three fish")
        stopped = app.chat.conversation.messages[-1]
        assert stopped.stopped and stopped.content
        engine.stream_reply = real_stream
        await send(pilot, "Thanks. And three birds?")
        reply = app.chat.conversation.messages[-1]
        assert reply.content.strip() and not reply.stopped
        assert reply.stats["prompt_cached"] > 0
        # both caches hold a prefix of the conversation as the engine tokenizes it now
        convo = [ChatMessage(m.role, m.content) for m in app.chat.conversation.messages[:-1]]
        prompt = engine.prompt_tokens(convo)
        assert engine.target.tokens[: len(prompt)] == prompt
        draft_tokens = engine.drafter.model.tokens
        assert draft_tokens == engine.target.tokens[: len(draft_tokens)]


async def test_drafter_choices_of_the_real_engine(real_model_paths) -> None:
    path = str(real_model_paths["smollm2-135m-instruct"])
    engine = LlamaChatEngine.load(ModelChoice(target=path, draft="none", n_ctx=512, n_threads=2))
    try:
        assert engine.info.draft is None
        assert engine.info.drafter_choices == ("none", "ngram", "self")
        settings = GenerationSettings(gamma=3, max_tokens=8)
        convo = [ChatMessage("user", "Say hello hello hello")]
        for choice in ("ngram", "self", "none"):
            engine.set_drafter(choice)
            assert engine.info.draft == (None if choice == "none" else choice)
            done = list(engine.stream_reply(convo, settings))[-1]
            assert done.tokens and done.stats.drafted >= (3 if choice == "self" else 0)
    finally:
        engine.close()
