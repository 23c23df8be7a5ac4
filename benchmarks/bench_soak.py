"""A soak of `edgespec serve --parallel 4` with bad clients (issue 35, part 4).

N requests in bursts of --burst concurrent clients (more than the slots and the
queue hold), each at random (seeded): a short completion, streamed or not; a
stream the client drops after its first chunk; a prompt longer than the context;
a body that is not JSON. Counts the answers by status, checks the server is alive,
that /slots shows every slot idle at the end, and the server's RSS after the first
100 requests against the end. Prints a summary; --json writes it.

    .venv/bin/python benchmarks/bench_soak.py --requests 1000 --json docs/bench/soak.json
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import random
import signal
import sys
import threading
import time
from pathlib import Path

from bench_rpc import start_serve, uptime

KINDS = ("complete", "stream", "drop", "oversized", "not_json")
WEIGHTS = (40, 25, 20, 10, 5)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_split_mib(pid: int) -> dict[str, float]:
    """RSS by kind of mapping: files (the model, mapped), anonymous mappings of 16 MiB
    or more (llama.cpp's KV and compute buffers, touched lazily) and the rest (the
    Python and C heaps, thread stacks)."""
    split = {"files": 0, "big_anonymous": 0, "rest": 0}
    kind = "rest"
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and len(head) >= 5 and ":" in head[3]:  # a mapping's first line
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            if len(head) > 5 and head[5].startswith("/"):
                kind = "files"
            else:
                kind = "big_anonymous" if hi - lo >= 16 << 20 else "rest"
        elif head[0] == "Rss:":
            split[kind] += int(head[1])
    return {k: round(v / 1024, 1) for k, v in split.items()}


def one(address: tuple[str, int], kind: str, rng: random.Random) -> str:
    """One client's request; what it got ("200", "429", "dropped", "error: ...")."""
    body: object = {"prompt": f"Item {rng.randrange(1000)}: the", "max_tokens": 8,
                    "temperature": 0}  # fmt: skip
    if kind in ("stream", "drop"):
        body = {**body, "stream": True, "max_tokens": 64 if kind == "drop" else 8}
    elif kind == "oversized":
        body = {**body, "prompt": "word " * 4000}
    data = b"{not json" if kind == "not_json" else json.dumps(body).encode()
    conn = http.client.HTTPConnection(*address, timeout=120)
    try:
        conn.request("POST", "/v1/completions", data, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if kind == "drop" and resp.status == 200:
            resp.readline()
            conn.sock.close()  # gone mid-stream
            return "dropped"
        resp.read()
        return str(resp.status)
    except (OSError, http.client.HTTPException) as exc:
        return f"error: {type(exc).__name__}"
    finally:
        conn.close()


def _client(address: tuple[str, int], kind: str, seed: int, results: list) -> None:
    results.append((kind, one(address, kind, random.Random(seed))))


def get(address: tuple[str, int], path: str) -> object:
    conn = http.client.HTTPConnection(*address, timeout=30)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--burst", type=int, default=20)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--max-queue", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    p.add_argument("--tracemalloc", type=Path, metavar="OUT",
                   help="trace the server's Python allocations (benchmarks/traced_run.py); "
                   "OUT: their growth from after the first 100 requests to the end")  # fmt: skip
    args = p.parse_args()

    launch = [sys.executable, "-m", "edgespec"]
    if args.tracemalloc:
        launch = [
            sys.executable,
            str(Path(__file__).with_name("traced_run.py")),
            str(args.tracemalloc),
        ]
    serve, address = start_serve(
        launch
        + ["serve", "--target", args.target, "--port", "0"]
        + ["--threads", "2", "--ctx", "1024", "--parallel", str(args.parallel)]
        + ["--max-queue", str(args.max_queue), "--quiet"]
    )
    rng = random.Random(args.seed)
    counts: collections.Counter[str] = collections.Counter()
    by_kind: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in KINDS}
    rss_100 = None
    rss_trace: list[float] = []
    split_trace: list[dict[str, float]] = []
    sent = 0
    start = time.monotonic()
    print(f"# {uptime()}", flush=True)
    while sent < args.requests and serve.poll() is None:
        n = min(args.burst, args.requests - sent)
        kinds = rng.choices(KINDS, WEIGHTS, k=n)
        seeds = [rng.randrange(1 << 30) for _ in range(n)]
        results: list[tuple[str, str]] = []

        threads = [
            threading.Thread(target=_client, args=(address, kind, seed, results))
            for kind, seed in zip(kinds, seeds, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        for kind, got in results:
            counts[got] += 1
            by_kind[kind][got] += 1
        before, sent = sent, sent + n
        if sent // 100 > before // 100:  # every 100 requests
            rss_trace.append(round(rss_mib(serve.pid), 1))
            split_trace.append(rss_split_mib(serve.pid))
            if rss_100 is None and args.tracemalloc:
                serve.send_signal(signal.SIGUSR1)  # (the baseline snapshot)
            rss_100 = rss_100 or rss_trace[0]
    alive = serve.poll() is None
    deadline = time.monotonic() + 15
    busy = None
    while alive and time.monotonic() < deadline:
        busy = sum(s["is_processing"] for s in get(address, "/slots"))
        if busy == 0:
            break
        time.sleep(0.2)
    rss_end = rss_mib(serve.pid) if alive else float("nan")
    if alive and args.tracemalloc:
        args.tracemalloc.unlink(missing_ok=True)
        serve.send_signal(signal.SIGUSR1)  # (the growth since the baseline, to OUT)
        deadline = time.monotonic() + 60
        while not args.tracemalloc.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    summary = dict(
        requests=sent,
        seconds=round(time.monotonic() - start, 1),
        server_alive=alive,
        answers=dict(counts),
        by_kind={k: dict(v) for k, v in by_kind.items()},
        slots_busy_at_end=busy,
        rss_after_100_mib=round(rss_100 or float("nan"), 1),
        rss_end_mib=round(rss_end, 1),
        rss_growth=round(rss_end / rss_100, 3) if rss_100 else None,
        rss_every_100_mib=rss_trace,
        rss_split_every_100_mib=split_trace,
        machine=uptime(),
    )
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    serve.send_signal(signal.SIGINT)
    serve.wait(timeout=60)
    return 0 if alive and busy == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
