#!/usr/bin/env python3
"""What `edgespec serve --supervise` costs per request: a direct server against one
behind the front (edgespec.server.proxy), the same model, side by side.

Both servers run at once (one slot each, --quiet) and are asked in turn, A B B A,
--reps times: a short non-streamed completion (the front's added latency is one
loopback connection) and a streamed one of --tokens tokens (its per-chunk copy).
Prints the medians and the ratios supervised / direct.

    .venv/bin/python benchmarks/bench_supervise.py --reps 8 --json docs/bench/supervise.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_rpc import start_serve, uptime


def start(target: str, *extra: str) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    return start_serve(
        [sys.executable, "-m", "edgespec", "serve", "--target", target, "--port", "0"]
        + ["--threads", "1", "--ctx", "1024", "--parallel", "1", "--draft", "none"]
        + ["--quiet", *extra]
    )


def timed(address: tuple[str, int], body: dict) -> float:
    """Seconds from sending the request to the last byte of the answer."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(*address, timeout=300)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    if resp.status != 200:
        raise SystemExit(f"{resp.status}: {data[:200]!r}")
    return time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    print(f"# {uptime()}", flush=True)
    servers = {"direct": start(args.target), "supervised": start(args.target, "--supervise")}
    short = {"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}
    stream = {"prompt": "Once upon a time", "max_tokens": args.tokens, "temperature": 0,
              "stream": True}  # fmt: skip
    runs: dict[str, dict[str, list[float]]] = {
        k: {"short": [], "stream": []} for k in ("direct", "supervised")
    }
    try:
        for name in servers:  # warm-up: the first request of each pays its own start
            timed(servers[name][1], short)
        for rep in range(args.reps):
            order = ["direct", "supervised"] if rep % 2 == 0 else ["supervised", "direct"]
            for kind, body in (("short", short), ("stream", stream)):
                for name in order:
                    runs[name][kind].append(timed(servers[name][1], body))
    finally:
        for serve, _ in servers.values():
            serve.send_signal(signal.SIGINT)
            serve.wait(timeout=60)
    report = {"uptime_after": uptime(), "reps": args.reps, "tokens": args.tokens, "runs": runs}
    for kind in ("short", "stream"):
        d, s = (statistics.median(runs[n][kind]) for n in ("direct", "supervised"))
        ratio = statistics.median(
            b / a for a, b in zip(runs["direct"][kind], runs["supervised"][kind], strict=True)
        )
        report[f"{kind}_ratio"] = ratio
        print(f"{kind:>7}: direct {1000 * d:8.1f} ms, supervised {1000 * s:8.1f} ms, "
              f"supervised / direct {ratio:.3f}")  # fmt: skip
    print(f"# {report['uptime_after']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
