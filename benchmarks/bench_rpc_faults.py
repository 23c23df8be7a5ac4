"""Worker faults under load against a supervised `edgespec serve --rpc` (issue 35).

Two `edgespec worker` processes on loopback, each behind the latency proxy, and one
`edgespec serve --rpc` on them (the target on the workers, n-gram auto, two slots).
Each fault: two streamed completions decode; one worker is killed (-9), stopped
(SIGSTOP, past --rpc-timeout) or cut off (the proxy resets its connections), in
turn, alternating workers; every stream must end with an error event within
--rpc-timeout plus a margin; then the worker returns (restarted on its port, or
SIGCONT; a cut one is back at once) and the time from its return to the first
greedy request served is measured, and that answer compared with the one before
any fault. Prints one line per fault and a summary; --json writes the figures.

    .venv/bin/python benchmarks/bench_rpc_faults.py --faults 50 \
        --json docs/bench/rpc-faults.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from bench_rpc import free_port, uptime

GREEDY = {"prompt": "The capital of France is", "max_tokens": 24, "temperature": 0}
LONG = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": True}
RECOVERY_LIMIT_S = 60.0


def start_worker(port: int, log_dir: Path) -> subprocess.Popen:
    from edgespec import unanswering_rpc_workers

    log = (log_dir / f"worker-{port}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "worker", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    deadline = time.monotonic() + 60
    while True:
        if not unanswering_rpc_workers([f"127.0.0.1:{port}"], timeout=2.0):
            return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"worker on port {port} did not start")
        time.sleep(0.1)


def post(base: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        base + "/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except (OSError, http.client.HTTPException):
        return 0, {}


def stream(address: tuple[str, int], out: list, started: threading.Event) -> None:
    """One streamed completion: appends (seconds after the fault, last event)."""
    conn = http.client.HTTPConnection(*address, timeout=300)
    try:
        conn.request("POST", "/v1/completions", json.dumps(LONG),
                     {"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        resp.readline()
        started.set()
        last = ""
        for line in resp:
            if line.startswith(b"data: {"):
                last = line.decode()
        out.append((time.monotonic(), json.loads(last.removeprefix("data: ")) if last else {}))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        started.set()
        out.append((time.monotonic(), {"error": {"message": f"client: {exc!r}"}}))
    finally:
        conn.close()


def main() -> int:
    from latency_proxy import LatencyProxy

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--faults", type=int, default=50)
    p.add_argument("--delay-ms", type=float, default=1.0, help="latency proxy, each way")
    p.add_argument("--rpc-timeout", type=float, default=3.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args()

    log_dir = Path(tempfile.mkdtemp(prefix="edgespec-faults-"))
    ports = [free_port(), free_port()]
    workers = [start_worker(port, log_dir) for port in ports]
    proxies = [LatencyProxy(f"127.0.0.1:{port}", args.delay_ms).start() for port in ports]
    serve_log = (log_dir / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "serve", "--target", args.target, "--port", "0"]
        + ["--threads", "1", "--parallel", "2", "--ctx", "2048", "--quiet"]
        + ["--rpc", ",".join(px.address for px in proxies)]
        + ["--rpc-timeout", str(args.rpc_timeout)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert serve.stderr is not None
    for line in serve.stderr:
        serve_log.write(line)
        if " on http://" in line and "serving" in line:
            base = line.rsplit(" on ", 1)[1].strip()
            break
    else:
        raise SystemExit(f"serve did not start: see {log_dir / 'serve.log'}")
    threading.Thread(
        target=lambda: [serve_log.write(ln) for ln in serve.stderr], daemon=True
    ).start()
    host, port = base.removeprefix("http://").rsplit(":", 1)
    address = (host, int(port))
    status, first = post(base, GREEDY)
    assert status == 200, first
    want = first["choices"][0]["text"]
    print(f"# {uptime()}\n# baseline answer {want!r}", flush=True)

    rows = []
    for i in range(args.faults):
        kind = ("kill", "stop", "cut")[i % 3]
        w = (i // 3) % 2
        ends: list = []
        threads = []
        for _ in range(2):
            started = threading.Event()
            t = threading.Thread(target=stream, args=(address, ends, started), daemon=True)
            t.start()
            started.wait(60)
            threads.append(t)
        fault_at = time.monotonic()
        if kind == "cut":
            proxies[w].cut()
        else:
            workers[w].send_signal(signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        for t in threads:
            t.join(args.rpc_timeout + 30)
        ended = [e for e in ends if "error" in e[1]]
        hung = 2 - len(ends)
        worst = max((t - fault_at for t, _ in ends), default=float("nan"))
        named = all(proxies[w].address in e.get("error", {}).get("message", "") for _, e in ends)
        if kind == "kill":
            workers[w].wait()
            workers[w] = start_worker(ports[w], log_dir)
        elif kind == "stop":
            workers[w].send_signal(signal.SIGCONT)
        back_at = time.monotonic()
        while time.monotonic() - back_at < RECOVERY_LIMIT_S:
            status, answer = post(base, GREEDY)
            if status == 200:
                break
            time.sleep(0.1)
        took = time.monotonic() - back_at
        same = status == 200 and answer["choices"][0]["text"] == want
        row = dict(fault=i, kind=kind, worker=w, errored=len(ended), hung=hung, named=named,
                   stream_end_s=round(worst, 2), recovered=status == 200,
                   return_to_served_s=round(took, 2), same_answer=same,
                   server_alive=serve.poll() is None)  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
        if serve.poll() is not None:
            break

    times = [r["return_to_served_s"] for r in rows if r["recovered"]]
    summary = dict(
        faults=len(rows),
        server_deaths=sum(not r["server_alive"] for r in rows),
        streams_ended_with_error=sum(r["errored"] for r in rows),
        streams_hung=sum(r["hung"] for r in rows),
        errors_naming_the_worker=sum(r["named"] for r in rows),
        recoveries=sum(r["recovered"] for r in rows),
        same_answer_after=sum(r["same_answer"] for r in rows),
        median_return_to_served_s=round(statistics.median(times), 2) if times else None,
        max_return_to_served_s=max(times) if times else None,
        worst_stream_end_s=max(r["stream_end_s"] for r in rows),
        rpc_timeout_s=args.rpc_timeout,
        machine=uptime(),
    )
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "faults": rows}, indent=1) + "\n")
    serve.send_signal(signal.SIGINT)
    serve.wait(timeout=60)
    for px in proxies:
        px.close()
    for proc in workers:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
    return 0 if summary["recoveries"] == len(rows) == args.faults else 1


if __name__ == "__main__":
    raise SystemExit(main())
