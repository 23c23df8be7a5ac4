"""The target on llama.cpp RPC workers (issue 20): `edgespec worker`, --rpc, the
loopback latency proxy.

Workers are `edgespec worker` subprocesses on free loopback ports. These tests need
llama-cpp-python built with -DGGML_RPC=on (scripts/bootstrap.sh builds it so): on a
build without RPC they fail, they do not skip.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rpc_workers import ENV, Worker, free_port, post, require_rpc, start_serve

from edgespec.backend import (
    LlamaModel,
    check_rpc_timeout,
    parse_rpc_endpoints,
)
from edgespec.backend.rpc_watch import cut_connections
from edgespec.commands.worker import bind_address
from edgespec.drafting import ModelDrafter
from edgespec.drafting.ngram import NgramDrafter
from edgespec.errors import BackendError, InvalidParameterError
from edgespec.sampling import SamplingParams
from edgespec.speculation.loop import generate

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from latency_proxy import LatencyProxy  # noqa: E402  (the harness's loopback proxy)

PROMPTS = ["Hello world", "the cat sat on the mat and the cat sat on the", "1 2 3 4 5"]
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Two workers, each behind a latency proxy (0 ms unless a test sets ``delay``).

    llama.cpp keeps one connection per worker for the whole process and a worker
    serves one client at a time, so this process reaches them through the proxies
    only."""
    require_rpc()
    log_dir = tmp_path_factory.mktemp("rpc-workers")
    ws = [Worker(log_dir), Worker(log_dir)]
    proxies = [LatencyProxy(w.endpoint, 0).start() for w in ws]
    yield ws, proxies
    for p in proxies:
        p.close()
    for w in ws:
        w.stop()


@pytest.fixture(scope="module")
def models(synthetic_models, workers):
    _, proxies = workers
    rpc = [p.address for p in proxies]
    loaded = {
        "remote": LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1, rpc=rpc),
        "local": LlamaModel(synthetic_models["target"], n_ctx=512, n_threads=1),
        "draft": LlamaModel(synthetic_models["draft_noisy"], n_ctx=512, n_threads=1),
    }
    yield loaded, proxies
    for m in loaded.values():  # before the workers go: freeing talks to them
        m.close()


def test_the_layers_go_to_both_workers(models) -> None:
    (m, proxies) = models
    assert m["remote"].rpc == tuple(p.address for p in proxies)
    for p in proxies:  # the weights went up, and each worker answered
        assert p.stats["up"][1] > 10_000 and p.stats["down"][0] > 0, p.stats


def test_greedy_through_workers_equals_local_plain_and_speculative(models) -> None:
    m, _ = models
    for prompt in PROMPTS:
        local = generate(m["local"], prompt, max_tokens=MAX_TOKENS, gamma=0).tokens
        remote = generate(m["remote"], prompt, max_tokens=MAX_TOKENS, gamma=0).tokens
        assert remote == local, prompt
        for drafter, gamma in ((ModelDrafter(m["draft"]), 4), (NgramDrafter(), 8)):
            spec = generate(
                m["remote"], prompt, drafter=drafter, max_tokens=MAX_TOKENS, gamma=gamma
            )
            assert spec.tokens == local, (prompt, drafter.name)
            local_spec = generate(
                m["local"], prompt, drafter=drafter, max_tokens=MAX_TOKENS, gamma=gamma
            )
            assert local_spec.tokens == local, (prompt, drafter.name)


def test_sampling_through_workers_is_local_sampling(models) -> None:
    """The workers' logits are the local ones bit for bit, so a seeded sampled run is
    the same token for token (a stronger check than a distribution test)."""
    m, _ = models
    sampling = SamplingParams(temperature=0.8, top_k=0, top_p=1.0, min_p=0.0)
    for seed in (1, 2):
        kw = dict(max_tokens=MAX_TOKENS, sampling=sampling, seed=seed)
        local = generate(m["local"], PROMPTS[0], gamma=0, **kw).tokens
        assert generate(m["remote"], PROMPTS[0], gamma=0, **kw).tokens == local
        spec = dict(drafter=ModelDrafter(m["draft"]), gamma=4, **kw)
        assert generate(m["remote"], PROMPTS[0], **spec).tokens == (
            generate(m["local"], PROMPTS[0], **spec).tokens
        )


def test_latency_shows_per_pass_not_per_token(models) -> None:
    """With 5 ms each way, a pass over 8 tokens costs about what a pass over 1 does."""
    m, proxies = models
    remote = m["remote"]
    for p in proxies:
        p.delay = 0.005
    try:
        times = {}
        for n in (1, 8):
            best = float("inf")
            for _ in range(3):
                remote.reset()
                remote.decode([1] * 16, logits="none")
                t = time.perf_counter()
                remote.decode(list(range(10, 10 + n)), logits="all")
                best = min(best, time.perf_counter() - t)
            times[n] = best
    finally:
        for p in proxies:
            p.delay = 0.0
    assert times[1] > 0.01  # at least one round trip through the proxy
    assert times[8] < 2.5 * times[1], times


def test_an_unreachable_worker_is_one_line(synthetic_models) -> None:
    require_rpc()
    port = free_port()
    with pytest.raises(BackendError, match=rf"^cannot reach RPC worker 127\.0\.0\.1:{port}: "):
        LlamaModel(synthetic_models["target"], n_ctx=256, rpc=[f"127.0.0.1:{port}"])
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "generate", "--plain", "--max-tokens", "4"]
        + ["--target", str(synthetic_models["target"]), "--rpc", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert r.returncode == 1
    assert r.stderr.startswith(f"edgespec: error: cannot reach RPC worker 127.0.0.1:{port}")
    assert r.stderr.count("\n") == 1, r.stderr


# A worker lost two ways: killed (its connection closes), or stopped (SIGSTOP: the
# connection stays open and nothing answers, which ggml-rpc alone waits on for ever;
# --rpc-timeout cuts it off).
LOSSES = {"killed": (signal.SIGKILL, []), "silent": (signal.SIGSTOP, ["--rpc-timeout", "2"])}


@pytest.mark.parametrize("loss", LOSSES)
def test_a_worker_lost_mid_generation_ends_it_with_one_line(
    synthetic_models, tmp_path, loss
) -> None:
    require_rpc()
    sig, extra = LOSSES[loss]
    ws = [Worker(tmp_path), Worker(tmp_path)]
    # 20 ms each way: a generation of 2000 tokens lasts long enough to kill a worker in it
    proxies = [LatencyProxy(w.endpoint, 20).start() for w in ws]
    try:
        gen = subprocess.Popen(
            [sys.executable, "-m", "edgespec.cli", "generate", "--plain", "--threads", "1"]
            + ["--target", str(synthetic_models["target"]), "--max-tokens", "2000"]
            + ["--ctx", "4096", "--prompt", "Once upon a time", "--rpc"]
            + [",".join(p.address for p in proxies), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
        )
        try:
            assert gen.stdout is not None
            first = gen.stdout.read(1)  # the first token is out: it is generating
            assert first, gen.stderr.read() if gen.stderr else ""
            ws[1].proc.send_signal(sig)
            _, err = gen.communicate(timeout=60)
        finally:
            if gen.poll() is None:
                gen.kill()
                gen.wait()
    finally:
        for p in proxies:
            p.close()
        for w in ws:
            w.stop()  # (SIGKILL: a stopped worker too)
    lines = err.decode().splitlines()
    assert gen.returncode == 1, err
    assert lines and lines[-1].startswith("edgespec: error: lost an RPC worker"), err
    assert proxies[1].address in lines[-1]
    if loss == "silent":
        assert "no answer from" in lines[-1] and "within 2 s" in lines[-1], lines[-1]
    assert "backtrace" not in err.decode().lower()


def test_cut_connections_shuts_down_only_the_workers_sockets() -> None:
    """The watchdog's cut: a read waiting on the named endpoint's connection ends (the
    descriptor stays open for its owner); a connection elsewhere is untouched."""
    with socket.create_server(("127.0.0.1", 0)) as a, socket.create_server(("127.0.0.1", 0)) as b:
        to_a = socket.create_connection(a.getsockname())
        to_b = socket.create_connection(b.getsockname())
        with to_a, to_b, a.accept()[0], b.accept()[0]:
            assert cut_connections([f"127.0.0.1:{a.getsockname()[1]}"]) == 1
            to_a.settimeout(5)
            assert to_a.recv(1) == b""  # shut down: the read returns at once
            to_b.settimeout(0.2)
            with pytest.raises(TimeoutError):
                to_b.recv(1)  # still connected, still waiting
            assert to_a.fileno() >= 0


def test_the_rpc_timeout_is_checked_in_one_place(synthetic_models) -> None:
    for bad in (0, -1, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match="RPC timeout"):
            check_rpc_timeout(bad)
    assert check_rpc_timeout(2) == 2.0
    with pytest.raises(BackendError, match="RPC timeout must be more than 0"):
        LlamaModel(synthetic_models["target"], n_ctx=256, rpc_timeout=0)
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "serve", "--rpc-timeout", "0"],
        capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    assert r.returncode == 2
    assert "--rpc-timeout: the RPC timeout must be more than 0 seconds" in r.stderr


def test_a_worker_on_a_port_in_use_is_one_line(workers) -> None:
    ws, _ = workers
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "worker", "--port", str(ws[0].port)],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert r.returncode == 1, r.stderr
    assert r.stderr == (
        f"edgespec: error: the RPC worker cannot listen on {ws[0].endpoint}: "
        "Address already in use\n"
    )


def test_rpc_endpoints_are_host_port_lists() -> None:
    assert parse_rpc_endpoints("127.0.0.1:50052,10.0.0.2:7") == ["127.0.0.1:50052", "10.0.0.2:7"]
    for bad in ("127.0.0.1", ":5", "host:port", "h:0", "h:70000", "a:1,a:1", ""):
        with pytest.raises(ValueError):
            parse_rpc_endpoints(bad)


def test_the_worker_binds_loopback_unless_told_it_is_unsafe() -> None:
    assert bind_address("127.0.0.1", unsafe_expose=False) == "127.0.0.1"
    assert bind_address("localhost", unsafe_expose=False) == "127.0.0.1"
    for host in ("0.0.0.0", "192.168.1.5"):
        with pytest.raises(InvalidParameterError, match="no authentication"):
            bind_address(host, unsafe_expose=False)
        assert bind_address(host, unsafe_expose=True) == host
    with pytest.raises(InvalidParameterError, match="IPv4"):
        bind_address("::1", unsafe_expose=True)
    r = subprocess.run(
        [sys.executable, "-m", "edgespec.cli", "worker", "--host", "0.0.0.0", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "refusing to bind 0.0.0.0" in r.stderr


def test_the_proxy_delays_each_way_and_only_uses_loopback() -> None:
    with socket.create_server(("127.0.0.1", 0)) as echo_server:
        port = echo_server.getsockname()[1]

        def echo() -> None:
            conn, _ = echo_server.accept()
            with conn:
                while data := conn.recv(1024):
                    conn.sendall(data)

        import threading

        threading.Thread(target=echo, daemon=True).start()
        with LatencyProxy(f"127.0.0.1:{port}", 25) as proxy:
            host, _, pport = proxy.address.rpartition(":")
            with socket.create_connection((host, int(pport)), timeout=5) as c:
                t = time.perf_counter()
                c.sendall(b"ping")
                got = b""
                while len(got) < 4:
                    got += c.recv(4)
                rtt = time.perf_counter() - t
            assert got == b"ping" and 0.05 <= rtt < 1.0, rtt
            assert proxy.stats["up"] == [1, 4]
    for up, listen in (("10.1.2.3:80", "127.0.0.1"), ("127.0.0.1:80", "0.0.0.0")):
        with pytest.raises(ValueError, match="only uses loopback"):
            LatencyProxy(up, 1, listen_host=listen)


def test_the_cost_curve_key_includes_the_workers(models) -> None:
    """A curve measured through workers is not reused locally, nor through others."""
    from types import SimpleNamespace

    from edgespec.policy.costs import machine_key

    m, proxies = models
    remote, local = m["remote"], m["local"]
    assert machine_key(remote, 8) != machine_key(local, 8)
    fields = ("path", "n_threads", "n_gpu_layers")
    other = SimpleNamespace(**{f: getattr(remote, f) for f in fields}, rpc=("127.0.0.1:1",))
    same = SimpleNamespace(**{f: getattr(remote, f) for f in fields}, rpc=remote.rpc)
    assert machine_key(other, 8) not in (machine_key(remote, 8), machine_key(local, 8))
    assert machine_key(same, 8) == machine_key(remote, 8)
    no_rpc = SimpleNamespace(**{f: getattr(local, f) for f in fields}, rpc=())
    assert machine_key(no_rpc, 8) == machine_key(local, 8)  # local keys are as before


def test_serve_rpc_answers_what_local_plain_greedy_does(synthetic_models, tmp_path) -> None:
    """`edgespec serve --rpc` (its own two workers: a worker serves one client at a
    time) answers a greedy completion exactly as a local server without a draft does."""
    import threading

    from edgespec.completion.session import load_session
    from edgespec.server import EdgespecServer

    require_rpc()
    ws = [Worker(tmp_path), Worker(tmp_path)]
    target = str(synthetic_models["target"])
    body = {"prompt": PROMPTS[1], "max_tokens": 24, "temperature": 0}
    serve, base = start_serve(
        ["--target", target, "--threads", "1", "--ctx", "512", "--draft", "ngram"]
        + ["--gamma", "4", "--quiet", "--rpc", ",".join(w.endpoint for w in ws)]
    )
    local = load_session(target, "none", gamma=0, n_ctx=512, n_threads=1)
    server = EdgespecServer(("127.0.0.1", 0), local)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = post(base, "/v1/completions", body)
        host, port = server.server_address[:2]
        plain = post(f"http://{host}:{port}", "/v1/completions", body)
    finally:
        server.shutdown()
        local.target.close()
        serve.terminate()
        serve.wait(timeout=30)
        for w in ws:
            w.stop()
    text = remote["choices"][0]["text"]
    assert text == plain["choices"][0]["text"] and text
    assert remote["usage"] == plain["usage"]


def test_the_chat_app_loads_its_target_through_workers(models, synthetic_models) -> None:
    """`edgespec chat --rpc`: the app's engine puts the target on the workers (this
    process's connections to them, as the models fixture's), the draft stays local,
    and a greedy reply is the local one."""
    from edgespec_tui.command import settings_from_args
    from edgespec_tui.prompt import ChatMessage
    from edgespec_tui.session import GenerationSettings, LlamaChatEngine, ModelChoice

    from edgespec.events import DoneEvent

    _, proxies = models
    rpc = tuple(p.address for p in proxies)
    from edgespec.cli import build_parser

    args = build_parser().parse_args(
        ["chat", "--target", str(synthetic_models["target"]), "--rpc", ",".join(rpc)]
    )
    assert args.rpc == list(rpc)
    settings_from_args(args)
    choice = dict(target=str(synthetic_models["target"]), draft="ngram", n_ctx=512, n_threads=1)
    settings = GenerationSettings(gamma=4, temperature=0.0, max_tokens=16)
    messages = [ChatMessage("user", "the cat sat on the mat and the cat sat on the")]
    replies = []
    for rpc_choice in (rpc, ()):
        engine = LlamaChatEngine.load(ModelChoice(**choice, rpc=rpc_choice))
        try:
            assert engine.target.rpc == rpc_choice
            done = [e for e in engine.stream_reply(messages, settings) if isinstance(e, DoneEvent)]
            replies.append(done[-1].tokens)
        finally:
            engine.close()
    assert replies[0] == replies[1] and len(replies[0]) > 0


@pytest.mark.parametrize("loss", LOSSES)
def test_a_worker_lost_mid_request_leaves_the_server_up(synthetic_models, tmp_path, loss) -> None:
    """`edgespec serve --rpc --rpc-retry 0` with two slots: a worker lost (killed, or silent past
    --rpc-timeout) while a streamed request
    decodes through it ends that request with an error event naming the lost worker
    (and the other slot's request with one too); the server stays up, /health answers
    503 and says why, a new request gets a 503 with code rpc_worker_lost at once, and
    the server still stops cleanly."""
    import http.client
    import json
    import urllib.error
    import urllib.request

    require_rpc()
    sig, extra = LOSSES[loss]
    ws = [Worker(tmp_path), Worker(tmp_path)]
    proxies = [LatencyProxy(w.endpoint, 20).start() for w in ws]  # slow passes: time to kill
    target = str(synthetic_models["target"])
    serve = None
    try:
        serve, base = start_serve(
            ["--target", target, "--threads", "1", "--ctx", "4096", "--draft", "none"]
            + ["--parallel", "2", "--rpc", ",".join(p.address for p in proxies), *extra]
            + ["--rpc-retry", "0"]  # no child to restart (test_self_healing.py has that)
        )
        assert serve.stderr is not None
        host, port = base.removeprefix("http://").rsplit(":", 1)
        body = {"prompt": "Once upon a time", "max_tokens": 2000, "temperature": 0}
        conns, streams = [], []
        for _ in range(2):
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            conn.request(
                "POST",
                "/v1/completions",
                json.dumps({**body, "stream": True}),
                {"Content-Type": "application/json"},
            )
            conns.append(conn)
            streams.append(conn.getresponse())
        for r in streams:
            assert r.status == 200
            assert r.readline().startswith(b"data: ")  # the first chunk: it is decoding
        ws[1].proc.send_signal(sig)
        errors = []
        for r in streams:
            events = [ln for ln in r.read().decode().splitlines() if ln.startswith("data: {")]
            last = json.loads(events[-1].removeprefix("data: "))
            errors.append(last.get("error", {}))
        for err in errors:
            assert err.get("code") == "rpc_worker_lost", errors
            assert "lost an RPC worker" in err["message"]
            assert loss != "silent" or "no answer from" in err["message"], err
        assert serve.poll() is None  # the server is still up
        with pytest.raises(urllib.error.HTTPError) as health:
            urllib.request.urlopen(base + "/health", timeout=30)
        assert health.value.code == 503
        state = json.loads(health.value.read())
        assert state["status"] == "error" and "lost an RPC worker" in state["error"]
        with pytest.raises(urllib.error.HTTPError) as refused:
            post(base, "/v1/completions", {**body, "max_tokens": 4})
        assert refused.value.code == 503
        assert json.loads(refused.value.read())["error"]["code"] == "rpc_worker_lost"
        for conn in conns:
            conn.close()
        serve.send_signal(signal.SIGINT)  # Ctrl+C: stops, a slot's thread parked or not
        assert serve.wait(timeout=60) == 0
        log = serve.stderr.read()
        assert "lost an RPC worker" in log and "Traceback" not in log, log
    finally:
        if serve is not None and serve.poll() is None:
            serve.kill()
            serve.wait()
        for p in proxies:
            p.close()
        for w in ws:
            w.stop()
