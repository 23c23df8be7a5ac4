"""The OpenAI API through the official ``openai`` client: completions, chat, streaming, models."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI

from tests.server.conftest import API_KEY, Running


def client(running: Running, key: str | None = None) -> OpenAI:
    """An OpenAI client for running (no retries: every failure shows)."""
    return OpenAI(
        base_url=running.base + "/v1",
        api_key=key or running.api_key or "unused",
        max_retries=0,
        timeout=120,
    )


def test_completion(fim_server: Running) -> None:
    r = client(fim_server).completions.create(
        model="target_fim", prompt="Hello the world", max_tokens=12
    )
    choice = r.choices[0]
    assert r.object == "text_completion" and r.model == "target_fim"
    assert choice.finish_reason == "length" and choice.text
    assert r.usage.completion_tokens == 12 and r.usage.prompt_tokens > 0
    timings = r.model_extra["timings"]
    assert timings["drafter"] == "ngram" and timings["predicted_n"] >= 12
    assert timings["draft_n"] == timings["drafted"] >= timings["draft_n_accepted"]


def test_greedy_completion_is_repeatable_and_streams_the_same(fim_server: Running) -> None:
    c = client(fim_server)
    kw = {"model": "target_fim", "prompt": "The people of the world", "max_tokens": 20}
    a = c.completions.create(**kw).choices[0].text
    b = c.completions.create(**kw).choices[0].text
    chunks = list(c.completions.create(**kw, stream=True))
    streamed = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert a == b == streamed
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].model_extra["timings"]["predicted_n"] >= 20


def test_stream_include_usage(fim_server: Running) -> None:
    chunks = list(
        client(fim_server).completions.create(
            model="target_fim",
            prompt="Hello",
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_seeded_sampling_is_repeatable(fim_server: Running) -> None:
    c = client(fim_server)
    kw = {"model": "target_fim", "prompt": "Hello", "max_tokens": 15, "temperature": 0.9}
    a = c.completions.create(**kw, seed=7, top_p=0.9).choices[0].text
    b = c.completions.create(**kw, seed=7, top_p=0.9).choices[0].text
    assert a == b


def test_stop_string(fim_server: Running) -> None:
    c = client(fim_server)
    full = c.completions.create(model="target_fim", prompt="Hello", max_tokens=20).choices[0].text
    # a one-word stop, and one that spans several tokens: its first tokens must not be
    # sent before its last one arrives, streamed or not
    for stop in (full.split()[2], full[4:24]):
        kw = {"model": "target_fim", "prompt": "Hello", "max_tokens": 20, "stop": [stop]}
        r = c.completions.create(**kw)
        assert r.choices[0].finish_reason == "stop"
        assert r.choices[0].text == full[: full.index(stop)]
        chunks = list(c.completions.create(**kw, stream=True))
        assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == r.choices[0].text


def test_completion_with_suffix_uses_fim(fim_server: Running) -> None:
    r = client(fim_server).completions.create(
        model="target_fim", prompt="def f(x):\n    return ", suffix="\n", max_tokens=8
    )
    t = r.model_extra["timings"]
    assert t["prompt_tokens"] == r.usage.prompt_tokens
    assert t["fim"] is True and t["truncated"] is False


def test_token_id_prompt(fim_server: Running) -> None:
    r = client(fim_server).completions.create(
        model="target_fim", prompt=[1, 300, 301], max_tokens=3
    )
    assert r.usage.prompt_tokens == 3


def test_chat(fim_server: Running) -> None:
    r = client(fim_server).chat.completions.create(
        model="target_fim",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        max_tokens=6,
    )
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content
    # ChatML from the model's template: 2 turns + the assistant header
    assert r.usage.prompt_tokens > 10


def test_chat_stream(fim_server: Running) -> None:
    c = client(fim_server)
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}]
    whole = c.chat.completions.create(model="target_fim", messages=msgs, max_tokens=10)
    chunks = list(c.chat.completions.create(model="target_fim", messages=msgs, max_tokens=10,
                                            stream=True))  # fmt: skip
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(ch.object == "chat.completion.chunk" for ch in chunks)


def test_models(fim_server: Running) -> None:
    models = client(fim_server).models.list().data
    assert [m.id for m in models] == ["target_fim"]
    assert models[0].model_extra["meta"]["fim"] is True


def test_any_model_name_is_the_one_model(fim_server: Running) -> None:
    """One model is served: any name reaches it, as llama-server answers (it names its own)."""
    r = client(fim_server).completions.create(model="gpt-9", prompt="x", max_tokens=1)
    assert r.model == "target_fim" and r.usage.completion_tokens == 1


def test_bad_parameter_is_a_400_in_openai_shape(fim_server: Running) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client(fim_server).completions.create(model="target_fim", prompt="x", max_tokens=-5)
    assert e.value.body["param"] == "max_tokens"


def test_api_key_required(plain_server: Running) -> None:
    with pytest.raises(openai.AuthenticationError):
        client(plain_server, key="wrong").models.list()
    r = client(plain_server, key=API_KEY).completions.create(
        model="target", prompt="Hello", max_tokens=4
    )
    assert r.usage.completion_tokens == 4
    # the drafter is the target's own weights: every draft token is accepted
    t = r.model_extra["timings"]
    assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]


def test_chat_without_a_template_falls_back_to_chatml(plain_server: Running) -> None:
    r = client(plain_server, key=API_KEY).chat.completions.create(
        model="target", messages=[{"role": "user", "content": "Hi"}], max_tokens=3
    )
    assert r.usage.completion_tokens == 3
