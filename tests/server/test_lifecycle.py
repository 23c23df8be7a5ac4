"""Clients that go away, requests that arrive together, and the caches in between."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

from edgespec.completion.session import load_session
from tests.server.conftest import Running, start

BODY = {"input_prefix": "Hello the world of people", "input_suffix": "", "max_lines": 0}


def wait_for(cond, timeout: float = 60.0) -> None:
    """Poll cond() until it holds (a bounded wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition never held"
        time.sleep(0.02)


def open_stream(running: Running, body: dict) -> tuple[http.client.HTTPConnection, object]:
    host, port = running.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/infill", json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def test_disconnect_mid_stream_cancels_and_leaves_consistent_caches(fim_server: Running) -> None:
    _, before = fim_server.request("POST", "/infill", {**BODY, "n_predict": 30})
    cancelled = fim_server.health()["cancelled"]
    # a long stream, dropped after its first events
    conn, resp = open_stream(fim_server, {**BODY, "n_predict": -1, "stream": True})
    assert resp.status == 200
    first = resp.fp.readline()
    assert first  # the first chunk arrived
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    wait_for(lambda: fim_server.health()["cancelled"] > cancelled)
    # the same request again: same text, prompt from the cache
    _, after = fim_server.request("POST", "/infill", {**BODY, "n_predict": 30})
    assert after["content"] == before["content"]
    assert after["timings"]["cache_n"] == after["tokens_evaluated"] - 1


def test_disconnect_while_waiting_for_a_whole_answer(fim_server: Running) -> None:
    cancelled = fim_server.health()["cancelled"]
    host, port = fim_server.base.removeprefix("http://").split(":")
    body = json.dumps({**BODY, "n_predict": -1}).encode()
    with socket.create_connection((host, int(port))) as s:
        s.sendall(
            b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
    wait_for(
        lambda: fim_server.health()["cancelled"] > cancelled or not fim_server.health()["busy"]
    )
    _, again = fim_server.request("POST", "/infill", {**BODY, "n_predict": 5})
    assert again["tokens_predicted"] <= 5 and again["timings"]["cache_n"] > 0


def test_concurrent_requests_are_served_one_at_a_time_with_the_same_results(
    fim_server: Running,
) -> None:
    prompts = [f"Hello the world {i}" for i in range(4)]
    serial = {
        p: fim_server.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 25})[1]
        for p in prompts
    }
    results: dict[str, dict] = {}

    def one(p: str) -> None:
        results[p] = fim_server.request("POST", "/v1/completions", {"prompt": p, "max_tokens": 25})[
            1
        ]

    threads = [threading.Thread(target=one, args=(p,)) for p in prompts * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in prompts:
        assert results[p]["choices"][0]["text"] == serial[p]["choices"][0]["text"]
    assert fim_server.health()["failed"] == 0


def test_keep_alive_connection_serves_several_requests(fim_server: Running) -> None:
    host, port = fim_server.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    for n in (1, 2, 3):
        conn.request("POST", "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": n}))
        resp = conn.getresponse()
        assert resp.status == 200
        assert json.loads(resp.read())["usage"]["completion_tokens"] == n
    conn.request("GET", "/health")
    assert conn.getresponse().status == 200
    conn.close()


def test_adaptive_gamma_keeps_the_prefix_cache(synthetic_models) -> None:
    """With gamma auto the cost curve is measured once, at load, never again per request
    (a measurement empties the KV cache, and a busy machine's curve is not cached)."""
    session = load_session(str(synthetic_models["target_fim"]), "auto", n_ctx=512)
    assert session.gamma == "auto" and session.drafter_name == "ngram"
    running = start(session)
    try:
        body = {"input_prefix": "Hello the world " * 20, "n_predict": 8}
        running.request("POST", "/infill", body)
        _, again = running.request("POST", "/infill", body)
        assert again["timings"]["cache_n"] == again["tokens_evaluated"] - 1
        assert again["timings"]["gamma"] == "auto"
    finally:
        running.server.close()
        session.target.close()


class _Blocked:
    """Occupies the server's slot with a job that waits for release(), and counts the
    handlers' polls of their client (to know a queued request was looked at)."""

    def __init__(self, running: Running, monkeypatch) -> None:
        from edgespec.server.app import Handler

        self.gate = threading.Event()
        self.polls: list[bool] = []
        original = Handler._client_gone

        def counted(handler: Handler) -> bool:
            gone = original(handler)
            self.polls.append(gone)
            return gone

        monkeypatch.setattr(Handler, "_client_gone", counted)
        started = threading.Event()

        def work(_session, _cancelled):
            started.set()
            self.gate.wait(60)
            yield from ()

        self.job = running.server.scheduler.submit(work)
        wait_for(started.is_set)

    def release(self) -> None:
        self.gate.set()
        list(self.job.items())


def _send_infill(running: Running, body: dict) -> socket.socket:
    host, port = running.base.removeprefix("http://").split(":")
    data = json.dumps(body).encode()
    s = socket.create_connection((host, int(port)), timeout=60)
    s.sendall(
        b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(data), data)
    )
    return s


def test_a_half_closed_client_waiting_in_the_queue_still_gets_its_answer(
    fim_server: Running, monkeypatch
) -> None:
    blocked = _Blocked(fim_server, monkeypatch)
    served = fim_server.health()["served"]
    s = _send_infill(fim_server, {**BODY, "n_predict": 5})
    try:
        s.shutdown(socket.SHUT_WR)  # done sending, still reading
        wait_for(lambda: fim_server.server.scheduler.queued >= 1)
        n = len(blocked.polls)
        # its handler has looked at the half-closed socket (or given up on it)
        wait_for(lambda: len(blocked.polls) >= n + 3 or any(blocked.polls))
        blocked.release()
        resp = http.client.HTTPResponse(s)
        resp.begin()  # skips an interim 1xx, as every HTTP/1.1 client must
        assert resp.status == 200
        answer = json.loads(resp.read())
        assert 0 < answer["tokens_predicted"] <= 5
    finally:
        s.close()
    wait_for(lambda: fim_server.health()["served"] >= served + 2)


def test_a_client_that_closed_while_queued_is_cancelled(fim_server: Running, monkeypatch) -> None:
    blocked = _Blocked(fim_server, monkeypatch)
    cancelled = fim_server.health()["cancelled"]
    s = _send_infill(fim_server, {**BODY, "n_predict": -1})
    wait_for(lambda: fim_server.server.scheduler.queued >= 1)
    s.close()
    wait_for(lambda: any(blocked.polls))  # its handler noticed
    blocked.release()
    wait_for(lambda: fim_server.health()["cancelled"] > cancelled)


def test_a_closed_connection_gives_the_heaps_free_pages_back(
    fim_server: Running, monkeypatch
) -> None:
    import edgespec.server.app as app

    # trims by the threads of earlier tests' connections (closing on a busy machine, or
    # kept alive) are not this connection's: count those of threads started after now
    before = {t.name for t in threading.enumerate()}
    trims: list[str] = []
    monkeypatch.setattr(app, "trim_heap",
                        lambda: trims.append(threading.current_thread().name) or True)  # fmt: skip

    def ours() -> list[str]:
        return [name for name in trims if name not in before]

    host, port = fim_server.base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    for _ in range(2):  # two requests on one keep-alive connection: its thread lives on
        conn.request("GET", "/health")
        conn.getresponse().read()
    time.sleep(0.2)
    assert ours() == []
    conn.close()
    wait_for(lambda: len(ours()) == 1, timeout=10)
