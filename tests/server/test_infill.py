"""llama.cpp server's /infill over plain HTTP, /health, and prefix caching between requests."""

from __future__ import annotations

import http.client
import json
from typing import Any

from tests.server.conftest import API_KEY, Running

PREFIX = "def total(items):\n    result = 0\n    for item in items:\n        result += "
SUFFIX = "\n    return result\n\n\nprint(total([1, 2, 3]))\n"


def sse_events(running: Running, path: str, body: dict[str, Any], key: str | None = None):
    """POST and parse a server-sent event stream into a list of JSON objects (or strings)."""
    host, port = running.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request("POST", path, json.dumps(body), headers)
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("Content-Type") == "text/event-stream"
    events = []
    for block in resp.read().decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    conn.close()
    return events


def test_health_and_models(fim_server: Running) -> None:
    assert fim_server.health()["status"] == "ok"
    status, body = fim_server.request("GET", "/v1/models")
    assert status == 200 and body["data"][0]["id"] == "target_fim"


def test_infill(fim_server: Running) -> None:
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 16, "max_lines": 0}
    status, r = fim_server.request("POST", "/infill", body)
    assert status == 200
    assert r["stop"] is True and r["fim"] is True and isinstance(r["content"], str)
    assert r["tokens_predicted"] == len(r["tokens"]) <= 16
    assert r["stop_type"] in ("limit", "eos", "word")
    t = r["timings"]
    assert t["predicted_n"] >= r["tokens_predicted"] and t["drafter"] == "ngram"
    assert {"draft_n", "draft_n_accepted", "cache_n", "prompt_n"} <= t.keys()


def test_infill_stream_matches_the_whole_answer(fim_server: Running) -> None:
    body = {
        "input_prefix": PREFIX,
        "input_suffix": SUFFIX,
        "input_extra": [{"filename": "util.py", "text": "def helper():\n    pass\n"}],
        "n_predict": 24,
        "max_lines": 3,
    }
    _, whole = fim_server.request("POST", "/infill", body)
    events = sse_events(fim_server, "/infill", {**body, "stream": True})
    assert all(e["stop"] is False for e in events[:-1])
    last = events[-1]
    assert last["stop"] is True and "timings" in last
    assert "".join(e["content"] for e in events) == whole["content"]
    assert whole["content"].count("\n") <= 2  # max_lines 3


def test_repeated_request_reuses_the_prefix_cache(fim_server: Running) -> None:
    body = {"input_prefix": PREFIX * 4, "input_suffix": SUFFIX, "n_predict": 4}
    fim_server.request("POST", "/infill", {"input_prefix": "something else", "n_predict": 2})
    _, cold = fim_server.request("POST", "/infill", body)
    _, warm = fim_server.request("POST", "/infill", body)
    n = warm["tokens_evaluated"]
    assert cold["timings"]["cache_n"] < n // 2
    assert warm["timings"]["cache_n"] == warm["timings"]["prompt_cached"] == n - 1
    # llama-server's tokens_cached: what the cache holds after, the completion included
    assert warm["tokens_cached"] >= n + warm["tokens_predicted"] - 1
    assert warm["content"] == cold["content"]
    # typing one more character keeps the whole prefix before it: only the prefix's
    # last token or two, the suffix and the FIM tokens around it are processed again
    _, typed = fim_server.request("POST", "/infill", {**body, "input_prefix": PREFIX * 4 + "x"})
    n_suffix = len(fim_server.session.target.tokenize(SUFFIX, add_special=False))
    assert typed["timings"]["cache_n"] >= n - n_suffix - 4


def test_model_without_fim_tokens_completes_from_the_prefix(plain_server: Running) -> None:
    status, r = plain_server.request(
        "POST", "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8}
    )
    assert status == 200 and r["fim"] is False and r["tokens_predicted"] <= 8
    events = sse_events(
        plain_server,
        "/infill",
        {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 8, "stream": True},
        key=API_KEY,
    )
    assert "".join(e["content"] for e in events) == r["content"]


def test_openai_stream_ends_with_done(fim_server: Running) -> None:
    events = sse_events(
        fim_server, "/v1/completions", {"prompt": "Hello", "max_tokens": 3, "stream": True}
    )
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length"
