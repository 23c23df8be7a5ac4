"""`edgespec serve --supervise` (issue 35): a local target's context runs in a child
process, so a crash there (an abort in llama.cpp, a segfault, the kernel's OOM killer)
costs the requests on it, not the server; the child is started again."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rpc_workers import GREEDY, LONG, RECOVERY_S, last_event, post, start_serve


def child_of(pid: int) -> int:
    """The pid of the one `edgespec serve --supervised` child of process pid."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"--supervised" in cmd:
            return int(proc.name)
    raise AssertionError(f"no supervised child of {pid}")


def get(base: str, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(base + path, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_crashed_local_target_is_started_again_and_answers_as_before(synthetic_models) -> None:
    """A stream is decoding when the child aborts (SIGABRT, as llama.cpp's GGML_ABORT) and,
    once it is back, when it segfaults: each time the stream ends with an error event,
    the server stays up and within 60 s serves the same greedy answer again; /metrics
    counts two crashes and two recoveries."""
    target = str(synthetic_models["target"])
    serve, base = start_serve(
        ["--target", target, "--threads", "1", "--ctx", "4096", "--draft", "ngram"]
        + ["--gamma", "4", "--parallel", "2", "--supervise"]
    )
    log: list[str] = []
    assert serve.stderr is not None
    threading.Thread(target=lambda: log.extend(serve.stderr), daemon=True).start()
    host, port = base.removeprefix("http://").rsplit(":", 1)
    try:
        before = post(base, "/v1/completions", GREEDY)["choices"][0]["text"]
        assert before
        for crash in (signal.SIGABRT, signal.SIGSEGV):
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            conn.request("POST", "/v1/completions", json.dumps(LONG),
                         {"Content-Type": "application/json"})  # fmt: skip
            resp = conn.getresponse()
            assert resp.status == 200 and resp.readline().startswith(b"data: ")
            child = child_of(serve.pid)
            os.kill(child, crash)
            err = last_event(resp).get("error", {})
            assert err.get("code") == "target_restarting", err
            assert crash.name in err["message"], err
            assert serve.poll() is None, "".join(log)
            deadline = time.monotonic() + RECOVERY_S
            while get(base, "/health")[0] != 200:
                assert time.monotonic() < deadline and serve.poll() is None, "".join(log)
                time.sleep(0.2)
            after = post(base, "/v1/completions", GREEDY)["choices"][0]["text"]
            assert after == before
            assert child_of(serve.pid) != child
        metrics = get(base, "/metrics")[1].decode()
        assert "edgespec_target_crashes_total 2" in metrics, metrics
        assert "edgespec_target_recoveries_total 2" in metrics, metrics
    finally:
        serve.send_signal(signal.SIGINT)
        rc = serve.wait(timeout=60)
    text = "".join(log)
    assert rc == 0 and "Traceback" not in text, text
    assert text.count("recovered: serving again") == 2, text
