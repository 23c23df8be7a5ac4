"""A server that heals (issue 35): `edgespec serve --rpc` runs its models in a child
process (edgespec.server.supervisor) behind a front that holds none
(edgespec.server.proxy); a lost worker ends the child, never the server, and the
target is reloaded when the workers answer again.

Faults are injected into real `edgespec worker` processes on loopback, each behind
the latency proxy (20 ms each way: passes slow enough to fault mid-stream): kill -9,
SIGSTOP past --rpc-timeout, connections reset mid-stream, a different protocol on
the worker's port, a worker that never returns. Each test is bounded: every wait has a deadline.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from rpc_workers import (
    GREEDY,
    LONG,
    RECOVERY_S,
    Worker,
    last_event,
    post,
    require_rpc,
    start_serve,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from latency_proxy import LatencyProxy  # noqa: E402  (the harness's loopback proxy)


class Cluster:
    """Two workers behind latency proxies and a supervised `edgespec serve` on them."""

    def __init__(self, tmp_path, target: str, *extra: str, delay_ms: float = 20) -> None:
        self.tmp_path = tmp_path
        self.workers = [Worker(tmp_path), Worker(tmp_path)]
        self.proxies = [LatencyProxy(w.endpoint, delay_ms).start() for w in self.workers]
        self.serve, self.base = start_serve(
            ["--target", target, "--threads", "1", "--ctx", "4096", "--draft", "ngram"]
            + ["--gamma", "4", "--parallel", "2", "--rpc", self.rpc, *extra]
        )
        host, port = self.base.removeprefix("http://").rsplit(":", 1)
        self.address = (host, int(port))
        self.log: list[str] = []
        assert self.serve.stderr is not None
        threading.Thread(target=self._read_log, daemon=True).start()

    @property
    def rpc(self) -> str:
        return ",".join(p.address for p in self.proxies)

    def _read_log(self) -> None:
        for line in self.serve.stderr:
            self.log.append(line)

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def health(self) -> tuple[int, dict]:
        status, _, body = self.get("/health")
        return status, json.loads(body)

    def wait_healthy(self, timeout: float = RECOVERY_S) -> float:
        """Seconds until /health is 200 (fails past timeout)."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.health()[0] == 200:
                return time.monotonic() - start
            assert self.serve.poll() is None, "".join(self.log)
            time.sleep(0.2)
        raise AssertionError(f"not healthy after {timeout} s: {self.health()}\n{''.join(self.log)}")

    def streams(self, n: int) -> list[tuple[http.client.HTTPConnection, http.client.HTTPResponse]]:
        """n streamed long completions, each past its first chunk (decoding)."""
        out = []
        for _ in range(n):
            conn = http.client.HTTPConnection(*self.address, timeout=120)
            conn.request("POST", "/v1/completions", json.dumps(LONG),
                         {"Content-Type": "application/json"})  # fmt: skip
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.readline().startswith(b"data: ")
            out.append((conn, resp))
        return out

    def close(self) -> int | None:
        rc = None
        if self.serve.poll() is None:
            self.serve.send_signal(signal.SIGINT)
            try:
                rc = self.serve.wait(timeout=60)
            except Exception:
                self.serve.kill()
                self.serve.wait()
        for p in self.proxies:
            p.close()
        for w in self.workers:
            w.stop()
        return rc


@pytest.fixture
def target(synthetic_models) -> str:
    require_rpc()
    return str(synthetic_models["target"])


@pytest.mark.parametrize("loss", ["killed", "silent", "cut"])
def test_a_lost_worker_is_reloaded_and_answers_as_before(target, tmp_path, loss) -> None:
    """Two streams decode when a worker is killed, stopped past --rpc-timeout, or
    cut off (its connections reset):
    each ends with an error event naming the worker; the server stays up, /health is
    503 ``recovering`` naming the worker and requests get 503 with Retry-After; once
    the worker is back (restarted on its port, continued, or at once) /health is 200 within
    60 s, the same greedy request gets the same answer, /metrics counts one loss and
    one recovery, and the lookup history the first child kept is read back."""
    c = Cluster(tmp_path, target, *(["--rpc-timeout", "2"] if loss == "silent" else []))
    try:
        before = post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"]
        streams = c.streams(2)
        lost = c.workers[1]
        if loss == "cut":  # the network drops its connections; the worker stays
            c.proxies[1].cut()
        else:
            lost.proc.send_signal(signal.SIGKILL if loss == "killed" else signal.SIGSTOP)
        for _conn, resp in streams:
            err = last_event(resp).get("error", {})
            assert err.get("code") == "rpc_worker_lost", err
            assert "lost an RPC worker" in err["message"] and c.proxies[1].address in err["message"]
        assert c.serve.poll() is None
        deadline = time.monotonic() + 5  # (the front reads the child's last line)
        while (state := c.health()[1]).get("status") != "recovering":
            assert time.monotonic() < deadline, state
            time.sleep(0.05)
        assert c.proxies[1].address in state["lost_workers"], state
        assert state["losses"] == 1 and state["recoveries"] == 0
        code, headers, body = c.get("/v1/models")
        assert code == 503 and int(headers["Retry-After"]) >= 1
        assert json.loads(body)["error"]["code"] == "rpc_worker_lost"
        if loss == "killed":
            lost.proc.wait()
            c.workers[1] = Worker(tmp_path, port=lost.port)
        elif loss == "silent":
            lost.proc.send_signal(signal.SIGCONT)
        c.wait_healthy()
        after = post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"]
        assert after == before and after
        metrics = c.get("/metrics")[2].decode()
        assert "edgespec_rpc_worker_losses_total 1" in metrics
        assert "edgespec_target_recoveries_total 1" in metrics
        assert "edgespec_completions_total" in metrics  # (the child's own, then these)
    finally:
        rc = c.close()
    log = "".join(c.log)
    assert rc == 0 and "recovered: serving again" in log and "Traceback" not in log, log
    # the reloaded child read back the lookup history of the greedy request before the loss
    assert re.search(r"lookup history: \d+ earlier requests? from .*lookup-history", log), log


def test_sixteen_streams_when_a_worker_dies_all_end_and_service_returns(target, tmp_path) -> None:
    """16 streams on two slots (14 queued) when a worker is killed: every one ends
    within the deadline, each with an error event or a 503 naming the loss; after the
    worker returns all 16 again are answered in full."""
    c = Cluster(tmp_path, target, delay_ms=2)
    try:

        def one(out: list, first: threading.Event, max_tokens: int) -> None:
            conn = http.client.HTTPConnection(*c.address, timeout=120)
            try:
                body = json.dumps({**LONG, "max_tokens": max_tokens})
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                if resp.status != 200:
                    out.append(json.loads(resp.read()).get("error", {}))
                    return
                first.set()
                event = last_event(resp)
                if "error" in event:
                    out.append(event["error"])
                else:
                    out.append({"done": event["choices"][0]["finish_reason"]})
            finally:
                conn.close()

        def run(n: int, max_tokens: int) -> tuple[list, threading.Event, list]:
            out: list = []
            first = threading.Event()
            threads = [
                threading.Thread(target=one, args=(out, first, max_tokens)) for _ in range(n)
            ]
            for t in threads:
                t.start()
            return out, first, threads

        out, first, threads = run(16, 2000)
        assert first.wait(60)
        c.workers[0].proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert len(out) == 16, out  # none hung
        assert all(e.get("code") == "rpc_worker_lost" for e in out), out
        assert all(c.proxies[0].address in e["message"] for e in out), out
        c.workers[0].proc.wait()
        c.workers[0] = Worker(tmp_path, port=c.workers[0].port)
        c.wait_healthy()
        out, _first, threads = run(16, 24)
        for t in threads:
            t.join(300)
        assert len(out) == 16 and all("done" in e for e in out), out
    finally:
        c.close()
    assert c.serve.returncode == 0


def test_a_worker_of_another_protocol_is_named_until_the_right_one_returns(
    target, tmp_path
) -> None:
    """While the worker's port answers with another protocol (another build), /health
    says so and the server keeps probing; the real worker back on that port brings
    the service back."""
    c = Cluster(tmp_path, target, delay_ms=0)
    fake = None
    try:
        lost = c.workers[0]
        lost.stop()
        code, _, body = _post_raw(c, GREEDY)  # the child finds out on its next pass
        assert code == 503 and json.loads(body)["error"]["code"] == "rpc_worker_lost"
        fake = _WrongProtocol(lost.port)
        deadline = time.monotonic() + 30
        while "protocol" not in c.health()[1].get("error", "") and time.monotonic() < deadline:
            time.sleep(0.2)
        status, state = c.health()
        assert status == 503 and "speaks protocol 9.0.0" in state["error"], state
        fake.close()
        fake = None
        c.workers[0] = Worker(tmp_path, port=lost.port)
        c.wait_healthy()
        assert post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"]
    finally:
        if fake is not None:
            fake.close()
        c.close()


def test_a_worker_killed_while_the_target_reloads(target, tmp_path) -> None:
    """The worker dies again while the new child loads the target onto it: that
    reload fails with one line, the server stays up and recovering, and the worker's
    next return brings the same answers back."""
    c = Cluster(tmp_path, target, delay_ms=0)
    try:
        before = post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"]
        lost = c.workers[0]
        lost.stop()
        assert _post_raw(c, GREEDY)[0] == 503
        for p in c.proxies:
            p.delay = 0.2  # a slow link: the reload takes many 0.4 s round trips
        c.workers[0] = Worker(tmp_path, port=lost.port)
        sent = c.proxies[0].stats["up"][1]
        deadline = time.monotonic() + 60
        while c.proxies[0].stats["up"][1] - sent < 64 * 1024:  # weights, not a HELLO
            assert time.monotonic() < deadline, "the reload sent no weights"
            time.sleep(0.01)
        c.workers[0].stop()
        while not any("reloading the target failed" in line for line in c.log):
            assert time.monotonic() < deadline and c.serve.poll() is None, "".join(c.log)
            time.sleep(0.1)
        status, state = c.health()
        assert status == 503 and state["status"] == "recovering", state
        assert not any("recovered" in line for line in c.log), "".join(c.log)
        for p in c.proxies:
            p.delay = 0.0
        c.workers[0] = Worker(tmp_path, port=lost.port)
        c.wait_healthy()
        assert post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"] == before
    finally:
        rc = c.close()
    assert rc == 0 and "Traceback" not in "".join(c.log)


def test_a_second_server_on_busy_workers_fails_and_the_first_serves_on(target, tmp_path) -> None:
    """A worker serves one client at a time: a second server asking for the workers
    of a running one fails at once with a line saying they are busy, and the first
    server's answers do not change."""
    import subprocess
    import sys

    from rpc_workers import ENV

    c = Cluster(tmp_path, target, delay_ms=0)
    try:
        before = post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"]
        done = subprocess.run(
            [sys.executable, "-m", "edgespec.cli", "serve", "--target", target, "--port", "0"]
            + ["--rpc", c.rpc],
            capture_output=True, text=True, timeout=120, env=ENV,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("edgespec: error: RPC worker 127.0.0.1:"), last
        assert "busy with another client" in last and "Traceback" not in done.stderr
        assert c.health()[0] == 200
        assert post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"] == before
    finally:
        rc = c.close()
    assert rc == 0


def test_rpc_retry_bounds_the_attempts(target, tmp_path) -> None:
    """A worker that never returns: after --rpc-retry attempts the server ends with
    status 1 and one line saying it gave up and why."""
    c = Cluster(tmp_path, target, "--rpc-retry", "3", delay_ms=0)
    try:
        c.workers[1].stop()
        assert _post_raw(c, GREEDY)[0] == 503
        assert c.serve.wait(timeout=60) == 1
        time.sleep(0.2)
    finally:
        c.close()
    log = "".join(c.log)
    assert "gave up reloading the target after 3 attempts (--rpc-retry)" in log, log
    assert "Traceback" not in log


def test_a_client_gone_mid_stream_frees_its_slot(target, tmp_path) -> None:
    """Through the front: a client that closes its stream ends its job at once (the
    front closes its forwarded connection), so /slots shows every slot idle."""
    c = Cluster(tmp_path, target, delay_ms=0)
    try:
        for conn, _resp in c.streams(2):
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            slots = json.loads(c.get("/slots")[2])
            if not any(s["is_processing"] for s in slots):
                break
            time.sleep(0.1)
        assert [s["is_processing"] for s in slots] == [False, False]
        assert post(c.base, "/v1/completions", GREEDY)["choices"][0]["text"]
    finally:
        c.close()


def test_the_first_start_fails_fast_with_the_childs_reason(target) -> None:
    """No worker at the first start: no retries, the child's one line and status 1."""
    import subprocess
    import sys

    from rpc_workers import ENV, free_port

    done = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "serve", "--target", target, "--port", "0"]
        + ["--rpc", f"127.0.0.1:{free_port()}"],
        capture_output=True, text=True, timeout=120, env=ENV,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("edgespec: error: cannot reach RPC worker"), lines


def _post_raw(c: Cluster, body: dict) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(c.base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class _WrongProtocol:
    """A listener on a worker's port that answers every HELLO with protocol 9.0.0."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_server(("127.0.0.1", port))
        self.sock.settimeout(0.2)
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        import struct

        from edgespec.backend.rpc import _RPC_CONN_CAPS_SIZE as caps

        request = 1 + 8 + caps
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                try:
                    conn.settimeout(2)
                    got = 0
                    while got < request and (chunk := conn.recv(request - got)):
                        got += len(chunk)
                    conn.sendall(struct.pack("<Q", 4 + caps) + bytes([9, 0, 0, 0]) + bytes(caps))
                except OSError:
                    pass

    def close(self) -> None:
        self.stopping = True
        self.thread.join(timeout=5)
        self.sock.close()
