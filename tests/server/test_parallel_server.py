"""A parallel server (--parallel 4) on loopback, driven by concurrent real clients.

Outputs equal the serial server's plain decoding (on Gemma 3 270M, where edgespec's
kernels are batch-invariant; the synthetic models' F32 weights are not, by ~3e-6, so
their near-ties can flip with the batch); clients that leave mid-stream free their
slot while the others go on; a full queue answers 429 with Retry-After; /slots,
/health and /metrics show the slots.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai import OpenAI

from edgespec.completion.session import CompletionSession, load_session

from .conftest import Running, start

PROMPTS = [
    f"def function_{i}(x):\n    return x + {i}\n\ndef function_{i + 1}(x):" for i in range(16)
]


def wait_for(cond, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def parallel_session(synthetic_models: dict[str, Path]) -> CompletionSession:
    return load_session(
        str(synthetic_models["target_fim"]), "ngram", gamma="auto", n_ctx=512, parallel=4
    )


@pytest.fixture(scope="module")
def parallel_server(parallel_session: CompletionSession) -> Iterator[Running]:
    running = start(parallel_session)
    yield running
    running.server.close()


def _answers(running: Running, *, stream: bool, max_tokens: int = 8) -> list[str | None]:
    client = OpenAI(base_url=running.base + "/v1", api_key="x", max_retries=0)
    got: list[str | None] = [None] * len(PROMPTS)

    def one(i: int) -> None:
        if not stream:
            got[i] = (
                client.completions.create(
                    model="m", prompt=PROMPTS[i], max_tokens=max_tokens, temperature=0
                )
                .choices[0]
                .text
            )
            return
        chunks = client.completions.create(
            model="m", prompt=PROMPTS[i], max_tokens=max_tokens, temperature=0, stream=True
        )
        got[i] = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)

    if not stream:
        for i in range(len(PROMPTS)):
            one(i)
        return got
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return got


def test_sixteen_streaming_clients_at_once_get_the_serial_outputs(real_model_paths) -> None:
    path = str(real_model_paths["gemma-3-270m"])
    serial = load_session(path, "none", n_ctx=512, n_threads=2)  # plain, one at a time
    parallel = load_session(path, "ngram", gamma="auto", n_ctx=512, n_threads=2, parallel=4)
    running = [start(serial), start(parallel)]
    try:
        want = _answers(running[0], stream=False)
        got = _answers(running[1], stream=True)
        views = [s.session.target for s in running[1].server.scheduler.slots]
    finally:
        for r in running:
            r.server.close()
    assert got == want and all(want)
    assert len({v.seq_id for v in views}) == 4
    assert views[0].batcher.shared > 0  # rounds of several requests shared decodes


def _stream_request(running: Running, prompt: str, max_tokens: int) -> socket.socket:
    host, port = running.base.removeprefix("http://").split(":")
    body = json.dumps(
        {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    ).encode()
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    return s


def test_a_client_leaving_mid_stream_frees_its_slot_while_others_finish(
    parallel_server: Running,
) -> None:
    cancelled = parallel_server.health()["cancelled"]
    leaver = _stream_request(parallel_server, "a b c d e f g", 400)
    seen = b""
    while b"data:" not in seen:  # it is streaming
        chunk = leaver.recv(4096)
        assert chunk
        seen += chunk
    client = OpenAI(base_url=parallel_server.base + "/v1", api_key="x", max_retries=0)
    out: list = []
    t = threading.Thread(
        target=lambda: out.append(
            client.completions.create(model="m", prompt=PROMPTS[3], max_tokens=24, temperature=0)
        )
    )
    t.start()
    leaver.close()
    t.join(120)
    assert out and out[0].usage.completion_tokens > 0
    wait_for(lambda: parallel_server.health()["cancelled"] > cancelled)
    wait_for(lambda: parallel_server.health()["slots_processing"] == 0)


def test_slots_health_and_metrics_show_the_slots(parallel_server: Running) -> None:
    body = {"prompt": PROMPTS[0], "max_tokens": 4, "temperature": 0}
    assert parallel_server.request("POST", "/v1/completions", body)[0] == 200
    status, slots = parallel_server.request("GET", "/slots")
    assert status == 200 and [s["id"] for s in slots] == [0, 1, 2, 3]
    assert all(s["n_ctx"] >= 512 and s["is_processing"] is False for s in slots)
    assert max(s["n_cached"] for s in slots) > 0  # the request left its cache
    health = parallel_server.health()
    assert (health["slots"], health["slots_idle"]) == (4, 4)
    assert [s["state"] for s in health["slot_states"]] == ["idle"] * 4
    status, text = parallel_server.request("GET", "/metrics")
    assert "edgespec_slots 4" in text
    assert 'edgespec_slot_processing{slot="3"} 0' in text
    cached = [s["n_cached"] for s in slots]
    assert f'edgespec_slot_cached_tokens{{slot="0"}} {cached[0]}' in text


def test_a_full_queue_answers_429_with_retry_after(synthetic_models: dict[str, Path]) -> None:
    session = load_session(str(synthetic_models["target_fim"]), "ngram", gamma=4, n_ctx=512)
    running = start(session, max_queue=1)
    gate, started = threading.Event(), threading.Event()

    def blocked(_s, _cancelled):
        started.set()
        gate.wait(60)
        yield from ()

    try:
        job = running.server.scheduler.submit(blocked)
        assert started.wait(10)
        queued = _stream_request(running, "x", 4)  # takes the one place in the queue
        wait_for(lambda: running.server.scheduler.queued == 1)
        host, port = running.base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request(
            "POST",
            "/v1/completions",
            json.dumps({"prompt": "y", "max_tokens": 4}),
            {"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == 429
        assert int(resp.getheader("Retry-After")) >= 1
        assert body["error"]["code"] == "queue_full"
        assert running.health()["refused"] == 1
        gate.set()
        list(job.items())
        assert b"200 OK" in queued.recv(4096)  # the queued one is served after all
        queued.close()
    finally:
        gate.set()
        running.server.close()
        session.target.close()


def test_id_slot_picks_the_slot_and_a_missing_one_is_a_400(parallel_server: Running) -> None:
    body = {"input_prefix": "def f(x):\n    ", "input_suffix": "\n", "n_predict": 4}
    status, answer = parallel_server.request("POST", "/infill", {**body, "id_slot": 2})
    assert status == 200 and answer["id_slot"] == 2
    status, answer = parallel_server.request("POST", "/infill", {**body, "id_slot": 4})
    assert status == 400 and answer["error"]["param"] == "id_slot"
    status, text = parallel_server.request(
        "POST", "/infill", {**body, "id_slot": 3, "stream": True}
    )
    events = [json.loads(x[5:]) for x in text.split("\n") if x.startswith("data:")]
    assert status == 200 and events and {e["id_slot"] for e in events} == {3}


def test_the_slots_share_one_curve_measurement(parallel_server: Running) -> None:
    policies = [s.session._policy for s in parallel_server.server.scheduler.slots]
    assert all(p is not None for p in policies) and len({id(p) for p in policies}) == 4
    assert len({id(p.gaps_lock) for p in policies}) == 1  # one slot times a batch at once
    assert len({id(p.gaps) for p in policies}) == 1  # the same measurement (or none left)
    assert all(p.verify == policies[0].verify for p in policies)  # and the same curve
