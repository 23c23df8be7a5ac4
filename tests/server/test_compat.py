"""What clients read and send (issue 17): usage details, fingerprints, stream shapes,
llama-server's /tokenize, /detokenize, /props, /metrics, t_max_predict_ms, and fields
edgespec does not implement (a 400 naming the field)."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import edgespec.completion.session as completion
from edgespec import __version__
from edgespec.events import DoneEvent, RoundEvent, Stats, StopReason, TokenEvent, TokenKind
from tests.server.conftest import Running
from tests.server.test_infill import PREFIX, SUFFIX, sse_events
from tests.server.test_openai_api import client

MSGS = [{"role": "user", "content": "Tell me about the world"}]


# ---------------------------------------------------------------- response fields


def test_usage_reports_the_cached_prompt_tokens(fim_server: Running) -> None:
    c = client(fim_server)
    kw = {
        "model": "target_fim",
        "prompt": "Cached tokens: the people of the world",
        "max_tokens": 4,
    }
    first = c.completions.create(**kw).usage
    second = c.completions.create(**kw).usage
    assert second.prompt_tokens_details.cached_tokens == second.prompt_tokens - 1
    assert first.prompt_tokens_details.cached_tokens < second.prompt_tokens_details.cached_tokens
    chat = c.chat.completions.create(model="target_fim", messages=MSGS, max_tokens=3).usage
    assert chat.prompt_tokens_details.cached_tokens >= 0


def test_cache_prompt_false_evaluates_the_whole_prompt(fim_server: Running) -> None:
    body = {"prompt": "No cache for this prompt, please", "max_tokens": 3}
    fim_server.request("POST", "/v1/completions", body)
    status, r = fim_server.request("POST", "/v1/completions", {**body, "cache_prompt": False})
    assert status == 200
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == r["timings"]["cache_n"] == 0


def test_system_fingerprint(fim_server: Running) -> None:
    c = client(fim_server)
    want = f"edgespec-{__version__}"
    assert c.completions.create(model="x", prompt="Hi", max_tokens=2).system_fingerprint == want
    r = c.chat.completions.create(model="x", messages=MSGS, max_tokens=2)
    assert r.system_fingerprint == want
    chunks = list(c.chat.completions.create(model="x", messages=MSGS, max_tokens=2, stream=True))
    assert {ch.system_fingerprint for ch in chunks} == {want}


def test_chat_stream_opens_with_the_role_and_null_content(fim_server: Running) -> None:
    events = sse_events(
        fim_server, "/v1/chat/completions", {"messages": MSGS, "max_tokens": 4, "stream": True}
    )
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all("role" not in e["choices"][0]["delta"] for e in events[1:-1] if e["choices"])
    assert events[-1] == "[DONE]"


def test_chat_stream_usage_only_when_asked(fim_server: Running) -> None:
    c = client(fim_server)
    kw = {"model": "target_fim", "messages": MSGS, "max_tokens": 5, "stream": True}
    plain = list(c.chat.completions.create(**kw))
    assert all(ch.usage is None for ch in plain)
    chunks = list(c.chat.completions.create(**kw, stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == 5
    assert last.usage.total_tokens == last.usage.prompt_tokens + 5
    assert last.usage.prompt_tokens_details.cached_tokens > 0  # the same prompt as before
    assert all(ch.usage is None for ch in chunks[:-1])


def test_completion_stream_ends_with_usage_as_llama_server(fim_server: Running) -> None:
    chunks = list(
        client(fim_server).completions.create(
            model="target_fim", prompt="Hello", max_tokens=6, stream=True
        )
    )
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 6
    assert all(ch.usage is None for ch in chunks[:-1])


def test_infill_tokens_cached_is_what_the_cache_holds_after(fim_server: Running) -> None:
    body = {"input_prefix": PREFIX + "  # tokens_cached\n", "input_suffix": SUFFIX,
            "n_predict": 8, "max_lines": 0}  # fmt: skip
    status, r = fim_server.request("POST", "/infill", body)
    assert status == 200
    assert r["tokens_cached"] == len(fim_server.session.target.tokens)
    assert r["tokens_cached"] >= r["tokens_evaluated"] + r["tokens_predicted"] - 1
    assert r["tokens_cached"] > r["timings"]["cache_n"]


# ---------------------------------------------------------------- llama-server's endpoints


def test_tokenize_and_detokenize(fim_server: Running) -> None:
    target = fim_server.session.target
    text = "Hello the world"
    status, r = fim_server.request("POST", "/tokenize", {"content": text})
    assert status == 200
    assert r["tokens"] == target.tokenize(text, add_special=False, parse_special=True)
    _, special = fim_server.request("POST", "/tokenize", {"content": text, "add_special": True})
    assert special["tokens"][-len(r["tokens"]) :] == r["tokens"]
    _, pieces = fim_server.request("POST", "/tokenize", {"content": text, "with_pieces": True})
    assert [p["id"] for p in pieces["tokens"]] == r["tokens"]
    _, mixed = fim_server.request("POST", "/tokenize", {"content": [7, text]})
    assert mixed["tokens"] == [7, *r["tokens"]]
    status, d = fim_server.request("POST", "/detokenize", {"tokens": r["tokens"]})
    # as llama-server: the pieces as they are (this SPM vocabulary's leading space kept)
    assert status == 200 and d["content"] == "".join(p["piece"] for p in pieces["tokens"])
    assert d["content"].lstrip() == text
    assert fim_server.request("POST", "/detokenize", {})[1] == {"content": ""}
    assert fim_server.request("POST", "/detokenize", {"tokens": [10**9]})[0] == 400
    assert fim_server.request("POST", "/tokenize", {"content": {"a": 1}})[0] == 400


def test_props(fim_server: Running) -> None:
    status, p = fim_server.request("GET", "/props")
    assert status == 200
    settings = p["default_generation_settings"]
    assert settings["n_ctx"] == fim_server.session.target.n_ctx == 1024
    assert settings["params"]["temperature"] == 0.0 and settings["params"]["top_k"] == 40
    assert p["total_slots"] == 1
    assert p["model_path"].endswith(".gguf")
    assert "<|im_start|>" in p["chat_template"]
    assert p["edgespec"]["drafter"] == "ngram"


def _metrics(running: Running) -> dict[str, float]:
    """GET /metrics, each sample line parsed as ``name{labels} value``."""
    with urllib.request.urlopen(running.base + "/metrics", timeout=60) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) [a-z_:]+ .+", line), line
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (-?[0-9.e+-]+|NaN)", line)
        assert m, line
        out[m[1]] = float(m[2])
    return out


def test_metrics_count_requests_and_tokens(fim_server: Running) -> None:
    before = _metrics(fim_server)
    r = client(fim_server).completions.create(
        model="target_fim", prompt="Metrics: the people of the people", max_tokens=12
    )
    after = _metrics(fim_server)
    route = 'edgespec_http_requests_total{code="200",route="/v1/completions"}'
    assert after[route] == before.get(route, 0) + 1
    assert (
        after["llamacpp:tokens_predicted_total"] >= before["llamacpp:tokens_predicted_total"] + 12
    )
    assert after["llamacpp:prompt_tokens_total"] + after["llamacpp:prompt_tokens_cached_total"] >= (
        before["llamacpp:prompt_tokens_total"]
        + before["llamacpp:prompt_tokens_cached_total"]
        + r.usage.prompt_tokens
    )
    drafted = r.model_extra["timings"]["draft_n"]
    d = "llamacpp:spec_decode_num_draft_tokens_total"
    a = "llamacpp:spec_decode_num_accepted_tokens_total"
    assert after[d] == before[d] + drafted
    assert after[a] == before[a] + r.model_extra["timings"]["draft_n_accepted"]
    assert 0.0 <= after["edgespec_draft_acceptance_ratio"] <= 1.0
    assert after["edgespec_completions_total"] == before["edgespec_completions_total"] + 1
    assert (
        after['edgespec_jobs_total{outcome="served"}']
        >= before['edgespec_jobs_total{outcome="served"}'] + 1
    )
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    fim_server.request("POST", "/v1/completions", {"prompt": "x", "logit_bias": {"1": 5}})
    final = _metrics(fim_server)
    assert final['edgespec_http_requests_total{code="400",route="/v1/completions"}'] >= 1


# ---------------------------------------------------------------- what clients send


def test_llama_vim_request(fim_server: Running) -> None:
    """The body llama.vim sends (samplers, cache_prompt, t_max_*_ms, response_fields)."""
    fields = ["content", "timings/prompt_n", "timings/predicted_n", "truncated", "tokens_cached"]
    body = {
        "input_prefix": PREFIX,
        "input_suffix": SUFFIX,
        "input_extra": [{"text": "x = 1\n", "time": 0, "filename": "a.py"}],
        "prompt": "",
        "n_predict": 16,
        "n_indent": 4,
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
        "response_fields": fields,
    }
    status, r = fim_server.request("POST", "/infill", body)
    assert status == 200, r
    assert set(r) == set(fields) and isinstance(r["timings/predicted_n"], int)
    # older llama.vim: a sampler string of letters and a neutral penalty window
    older = {**body, "samplers": "ki", "penalty_last_n": 0, "response_fields": None}
    assert fim_server.request("POST", "/infill", older)[0] == 200


def test_neutral_values_of_unimplemented_fields_are_accepted(fim_server: Running) -> None:
    """Clients send defaults: values that ask for nothing are not refused."""
    r = client(fim_server).chat.completions.create(
        model="target_fim",
        messages=MSGS,
        max_tokens=2,
        tools=[],
        tool_choice="none",
        logit_bias={},
        presence_penalty=0,
        frequency_penalty=0.0,
        logprobs=False,
        response_format={"type": "text"},
        parallel_tool_calls=False,
        extra_body={"repeat_penalty": 1.0, "repeat_last_n": 64, "mirostat": 0, "n_probs": 0},
    )
    assert r.usage.completion_tokens == 2


UNIMPLEMENTED = [
    ("logit_bias", {"42": 3}),
    ("typical_p", 0.5),
]


@pytest.mark.parametrize(("field", "value"), UNIMPLEMENTED, ids=[f for f, _ in UNIMPLEMENTED])
def test_unimplemented_fields_are_a_400_naming_them(
    fim_server: Running, field: str, value: Any
) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client(fim_server).chat.completions.create(
            model="target_fim", messages=MSGS, max_tokens=2, extra_body={field: value}
        )
    assert e.value.body["param"] == field and field in e.value.body["message"]


def _slow_script(pieces: list[str], delay: float):
    """A stream_generate stand-in: one piece per round, ``delay`` seconds apart."""

    def fake(target, prompt, **kwargs) -> Iterator:
        out = []
        for r, text in enumerate(pieces, 1):
            time.sleep(delay)
            out.append(300 + r)
            yield TokenEvent(TokenKind.PLAIN, 300 + r, text, r)
            yield RoundEvent(r, 0, 0, Stats(generated=len(out), rounds=r))
        yield DoneEvent("".join(pieces), tuple(out), StopReason.MAX_TOKENS, Stats(generated=r))

    return fake


def test_t_max_predict_ms_stops_at_a_newline_after_the_time(
    fim_server: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server's meaning: past the time, generation ends with the next newline piece."""
    pieces = ["a\n", "b", "c", "d\n", "e", "f\n", "g"]
    monkeypatch.setattr(completion, "stream_generate", _slow_script(pieces, 0.06))
    body = {"prompt": "Hello", "max_tokens": 50}
    _, whole = fim_server.request("POST", "/v1/completions", body)
    assert whole["choices"][0]["text"] == "".join(pieces)
    # 0.06 s per piece: "a\n" starts the clock; 100 ms have passed at "d\n"
    status, r = fim_server.request("POST", "/v1/completions", {**body, "t_max_predict_ms": 100})
    assert status == 200
    assert r["choices"][0]["text"] == "a\nbcd\n"
    assert r["choices"][0]["finish_reason"] == "length"
    body = {"input_prefix": "x", "n_predict": 50, "max_lines": 0, "t_max_predict_ms": 100}
    _, inf = fim_server.request("POST", "/infill", body)
    # the code rules hold a line's newline back until the next piece: it ends one piece later
    assert inf["content"] in ("a\nbcd\n", "a\nbcd\ne") and inf["stop_type"] == "limit"
    served = fim_server.health()["cancelled"]
    fim_server.request("POST", "/v1/completions", {"prompt": "Hello", "t_max_predict_ms": 100})
    assert fim_server.health()["cancelled"] == served  # a time limit is no cancel


def test_repetition_penalties(fim_server: Running) -> None:
    """llama-server's repeat_penalty / repeat_last_n and OpenAI's presence and frequency
    penalties reach the sampler: a huge presence penalty over the whole context leaves
    greedy decoding no token it has seen, the prompt's included."""
    body = {"input_prefix": "Hello the world of people", "n_predict": 24, "max_lines": 0}
    _, plain = fim_server.request("POST", "/infill", body)
    assert len(set(plain["tokens"])) < len(plain["tokens"])  # it repeats itself
    status, r = fim_server.request(
        "POST", "/infill", {**body, "presence_penalty": 1e4, "repeat_last_n": -1}
    )
    assert status == 200 and len(r["tokens"]) > 1
    assert len(set(r["tokens"])) == len(r["tokens"])
    prompt = fim_server.session.target.tokens[: r["tokens_evaluated"]]
    assert not set(r["tokens"]) & set(prompt)
    # repeat_last_n 0 turns them off, as a sampler list without "penalties" does
    off = {**body, "presence_penalty": 1e4, "repeat_last_n": 0}
    assert fim_server.request("POST", "/infill", off)[1]["tokens"] == plain["tokens"]
    off = {**body, "frequency_penalty": 1e4, "samplers": ["top_k"]}
    assert fim_server.request("POST", "/infill", off)[1]["tokens"] == plain["tokens"]
    c = client(fim_server).chat.completions.create(
        model="x", messages=MSGS, max_tokens=8, frequency_penalty=2.0, presence_penalty=1.5,
        extra_body={"repeat_penalty": 1.3},
    )  # fmt: skip
    assert c.usage.completion_tokens >= 1
    assert fim_server.request("POST", "/infill", {**body, "repeat_penalty": 0})[0] == 400


def test_llama_server_completion_endpoint(fim_server: Running) -> None:
    """POST /completion answers in llama-server's own format, tokens_cached included."""
    body = {"prompt": "Native: the people of the world", "n_predict": 8}
    status, r = fim_server.request("POST", "/completion", body)
    assert status == 200 and r["stop"] is True and r["content"]
    assert r["tokens_predicted"] == len(r["tokens"]) == 8 and r["stop_type"] == "limit"
    assert r["tokens_cached"] == len(fim_server.session.target.tokens)
    events = sse_events(fim_server, "/completion", {**body, "stream": True})
    assert "".join(e["content"] for e in events) == r["content"] and events[-1]["stop"]
    _, ids = fim_server.request("POST", "/completion", {"prompt": r["tokens"][:3], "n_predict": 2})
    assert ids["tokens_evaluated"] == 3
    assert fim_server.request("POST", "/completion", {"n_predict": 2})[0] == 400
