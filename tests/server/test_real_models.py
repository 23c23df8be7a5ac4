"""The server on the real models: Gemma 3 270M (base, no FIM tokens) and SmolLM2 (ChatML)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openai import OpenAI

from edgespec.completion.session import load_session
from tests.server.conftest import Running, start

pytestmark = pytest.mark.real_model

CODE = '''import math


def area(radius: float) -> float:
    """The area of a circle."""
    return math.pi * radius ** 2


def circumference(radius: float) -> float:
    """The circumference of a circle."""
'''
SUFFIX = "\n\n\nprint(area(2.0), circumference(2.0))\n"


@pytest.fixture(scope="module")
def gemma(real_model_paths) -> Iterator[Running]:
    session = load_session(str(real_model_paths["gemma-3-270m"]), "ngram", gamma=4, n_ctx=2048,
                           name="gemma-3-270m")  # fmt: skip
    running = start(session)
    yield running
    running.server.close()
    session.target.close()


@pytest.fixture(scope="module")
def smollm(real_model_paths) -> Iterator[Running]:
    path = real_model_paths["smollm2-135m-instruct"]
    session = load_session(str(path), "ngram", gamma=4, n_ctx=2048, name="smollm2")
    running = start(session)
    yield running
    running.server.close()
    session.target.close()


def test_neither_real_model_has_fim_tokens(gemma: Running, smollm: Running) -> None:
    """Gemma 3 and SmolLM2 declare no FIM prefix/suffix/middle tokens: prefix-only completion."""
    assert not gemma.session.has_fim and not smollm.session.has_fim
    assert smollm.session.fim.rep is not None  # SmolLM2's <reponame>, alone of no use


def test_gemma_infill_completes_from_the_prefix_and_stops(gemma: Running) -> None:
    status, r = gemma.request(
        "POST", "/infill", {"input_prefix": CODE + "    ", "input_suffix": SUFFIX, "n_predict": 64}
    )
    assert status == 200 and r["fim"] is False
    assert r["content"].strip() and r["stop_type"] in ("eos", "word", "limit")
    # the suffix is never part of the completion
    assert "print(area(2.0), circumference(2.0))" not in r["content"]
    # repeated: the prompt comes from the cache, the text is the same
    _, again = gemma.request(
        "POST", "/infill", {"input_prefix": CODE + "    ", "input_suffix": SUFFIX, "n_predict": 64}
    )
    assert again["content"] == r["content"]
    assert again["timings"]["cache_n"] == again["tokens_evaluated"] - 1


def test_gemma_ngram_drafting_on_repetitive_code(gemma: Running) -> None:
    prompt = CODE + "    return 2 * math.pi * radius\n\n\n" + CODE.replace("circle", "disc")
    r = OpenAI(base_url=gemma.base + "/v1", api_key="x", max_retries=0).completions.create(
        model="gemma-3-270m", prompt=prompt, max_tokens=48
    )
    t = r.model_extra["timings"]
    assert t["draft_n"] > 0 and t["draft_n_accepted"] > 0


def test_smollm_chat_uses_its_template(smollm: Running) -> None:
    client = OpenAI(base_url=smollm.base + "/v1", api_key="x", max_retries=0)
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    r = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=32)
    assert r.choices[0].message.content.strip()
    assert r.usage.prompt_tokens == len(smollm.session.chat_prompt(msgs))
    rendered = smollm.session.target.tokenize(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n",
        add_special=True,
        parse_special=True,
    )
    assert smollm.session.chat_prompt(msgs) == rendered
    streamed = client.chat.completions.create(model="smollm2", messages=msgs, max_tokens=32,
                                              stream=True)  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert text == r.choices[0].message.content


def test_smollm_json_schema_and_logprobs(smollm: Running) -> None:
    """A real chat model answers in the schema's JSON, with each token's logprobs."""
    client = OpenAI(base_url=smollm.base + "/v1", api_key="x", max_retries=0)
    schema = {
        "type": "object",
        "properties": {"capital": {"type": "string", "enum": ["Paris", "Rome", "Berlin"]}},
        "required": ["capital"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "user", "content": "What is the capital of France? Answer in JSON."}],
        max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        logprobs=True,
        top_logprobs=2,
    )
    assert r.choices[0].finish_reason == "stop"
    assert json.loads(r.choices[0].message.content)["capital"] in ("Paris", "Rome", "Berlin")
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens
    assert "".join(e.token for e in entries) == r.choices[0].message.content
