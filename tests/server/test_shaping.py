"""Grammars (GBNF, JSON schemas, response_format) and log probabilities through the
server, read by the ``openai`` client (issue 17)."""

from __future__ import annotations

import itertools
import json

import openai
import pytest

from tests.server.conftest import Running
from tests.server.test_openai_api import client

MSGS = [{"role": "user", "content": "Tell me about the world"}]
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test_gbnf_grammar(fim_server: Running) -> None:
    r = client(fim_server).chat.completions.create(
        model="x", messages=MSGS, max_tokens=20, extra_body={"grammar": 'root ::= "yes" | "no"'}
    )
    assert r.choices[0].message.content in ("yes", "no")
    assert r.choices[0].finish_reason == "stop"
    status, inf = fim_server.request(
        "POST",
        "/infill",
        {
            "input_prefix": "x = ",
            "grammar": 'root ::= [0-9]+ "\\n"',
            "n_predict": 12,
            "max_lines": 0,
        },  # fmt: skip
    )
    assert status == 200 and inf["content"].rstrip("\n").isdigit()


def test_response_format_json_schema(fim_server: Running) -> None:
    c = client(fim_server)
    r = c.chat.completions.create(
        model="x",
        messages=MSGS,
        max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    )
    assert json.loads(r.choices[0].message.content)["answer"] in ("yes", "no")
    # llama-server's own json_schema field, on a text completion, streamed
    chunks = list(c.completions.create(model="x", prompt="Answer:", max_tokens=60, stream=True,
                                       extra_body={"json_schema": SCHEMA}))  # fmt: skip
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert json.loads(text)["answer"] in ("yes", "no")


def test_response_format_json_object(fim_server: Running) -> None:
    r = client(fim_server).chat.completions.create(
        model="x", messages=MSGS, max_tokens=200, response_format={"type": "json_object"}
    )
    if r.choices[0].finish_reason == "stop":  # a random model may not close its object
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    assert r.choices[0].message.content.startswith("{")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"grammar": "root ::= nothing"}, "grammar"),
        ({"json_schema": 5}, "json_schema"),
        ({"response_format": {"type": "xml"}}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        ({"grammar": 'root ::= "a"', "json_schema": {}}, "json_schema"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ],
)
def test_bad_grammar_or_logprobs_is_a_400(fim_server: Running, extra: dict, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client(fim_server).chat.completions.create(
            model="x", messages=MSGS, max_tokens=2, extra_body=extra
        )
    assert e.value.body["param"] == param


def test_chat_logprobs(fim_server: Running) -> None:
    c = client(fim_server)
    kw = {"model": "x", "messages": MSGS, "max_tokens": 6, "logprobs": True, "top_logprobs": 3}
    r = c.chat.completions.create(**kw)
    entries = r.choices[0].logprobs.content
    assert len(entries) == r.usage.completion_tokens == 6
    for e in entries:
        assert e.logprob <= 0 and isinstance(e.token, str) and e.bytes
        tops = [t.logprob for t in e.top_logprobs]
        assert len(tops) == 3 and tops == sorted(tops, reverse=True)
        assert e.logprob == pytest.approx(tops[0])  # greedy: the likeliest token
    text = b"".join(bytes(e.bytes) for e in entries).decode("utf-8", "replace")
    assert text == r.choices[0].message.content
    # streamed: the same entries, on the last chunk
    chunks = list(c.chat.completions.create(**kw, stream=True))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs
                for e in ch.choices[0].logprobs.content]  # fmt: skip
    # (the same tokens; a logprob may differ in its last digits: the rounds that computed
    # its row differ in size when the lookup drafts differently, and so do the kernels)
    assert [e.token for e in streamed] == [e.token for e in entries]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in entries], abs=1e-4)
    plain = c.chat.completions.create(model="x", messages=MSGS, max_tokens=2)
    assert plain.choices[0].logprobs is None


def test_completion_logprobs(fim_server: Running) -> None:
    prompt = "The people of the world"
    r = client(fim_server).completions.create(model="x", prompt=prompt, max_tokens=5, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 5
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(1 <= len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == len(prompt)
    steps = [b - a for a, b in itertools.pairwise(lp.text_offset)]
    assert steps == [len(t) for t in lp.tokens[:-1]]
    zero = client(fim_server).completions.create(model="x", prompt=prompt, max_tokens=5,
                                                 logprobs=0)  # fmt: skip
    assert zero.choices[0].logprobs.tokens == lp.tokens  # (logprobs: as test_chat_logprobs)
    assert zero.choices[0].logprobs.token_logprobs == pytest.approx(lp.token_logprobs, abs=1e-4)
    assert zero.choices[0].logprobs.top_logprobs == [{}] * 5


def test_infill_n_probs(fim_server: Running) -> None:
    body = {"input_prefix": "def f(x):\n    return ", "n_predict": 5, "max_lines": 0, "n_probs": 2}
    status, r = fim_server.request("POST", "/infill", body)
    assert status == 200
    probs = r["completion_probabilities"]
    assert [p["id"] for p in probs] == r["tokens"]
    assert all(len(p["top_logprobs"]) == 2 and p["logprob"] <= 0 for p in probs)
    _, plain = fim_server.request("POST", "/infill", {**body, "n_probs": 0})
    assert "completion_probabilities" not in plain
