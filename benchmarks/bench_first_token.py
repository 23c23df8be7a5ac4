"""Time to first token from process start on an empty calibration cache, auto vs plain.

    .venv/bin/python benchmarks/bench_first_token.py generate 6
    .venv/bin/python benchmarks/bench_first_token.py serve 4

generate: `edgespec generate --prompt PROMPT --max-tokens 8` (gamma auto, the default
drafter) against the same with --plain; the first byte on stdout is the first token.
serve: `edgespec serve` started, and its first request (a streamed /v1/completions,
8 tokens, greedy) sent as soon as it listens, against `serve --draft none`; the
first streamed text is the first token. Each run gets a new, empty
EDGESPEC_CACHE_DIR; runs alternate A B A B and the ratio is taken pair by pair.
Prints each pair, then medians (issue 18: auto's time to first token <= 1.2x plain's).
"""

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

EDGESPEC = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "edgespec")
PROMPT = "def fibonacci(n):"


def gen(extra):
    env = dict(os.environ, EDGESPEC_CACHE_DIR=tempfile.mkdtemp())
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [EDGESPEC, "generate", "--prompt", PROMPT, "--max-tokens", "8", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    first = None
    while True:
        b = p.stdout.read(1)
        if not b:
            break
        if first is None:
            first = time.perf_counter() - t0
    p.wait()
    return first, time.perf_counter() - t0


def serve(extra):
    env = dict(os.environ, EDGESPEC_CACHE_DIR=tempfile.mkdtemp())
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [EDGESPEC, "serve", "--port", str(port), "--quiet", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        body = json.dumps(
            {"prompt": PROMPT, "max_tokens": 8, "stream": True, "temperature": 0}
        ).encode()
        while True:
            try:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/completions",
                    body,
                    {"Content-Type": "application/json"},
                )
                r = urllib.request.urlopen(req, timeout=120)
                break
            except (ConnectionError, urllib.error.URLError):
                time.sleep(0.02)
        first = None
        for line in r:
            if (
                line.startswith(b"data: {")
                and b'"text": ""' not in line
                and b'"text":""' not in line
            ):
                first = time.perf_counter() - t0
                break
        r.read()
        return first, time.perf_counter() - t0
    finally:
        p.terminate()
        p.wait()


def main() -> None:
    mode, n = sys.argv[1], int(sys.argv[2])
    fn = gen if mode == "generate" else serve
    plain = ["--plain"] if mode == "generate" else ["--draft", "none"]
    auto_runs, plain_runs = [], []
    for i in range(n):
        a, b = fn([]), fn(plain)
        auto_runs.append(a)
        plain_runs.append(b)
        print(
            f"pair {i}: auto ttft {a[0]:.3f}s (whole {a[1]:.2f}s)  "
            f"plain ttft {b[0]:.3f}s (whole {b[1]:.2f}s)  ratio {a[0] / b[0]:.3f}",
            flush=True,
        )
    r = [a[0] / b[0] for a, b in zip(auto_runs, plain_runs, strict=True)]

    def med(runs, i):
        return statistics.median(x[i] for x in runs)

    print(
        f"{mode}: median ttft auto {med(auto_runs, 0):.3f}s plain {med(plain_runs, 0):.3f}s; "
        f"paired ratio median {statistics.median(r):.3f} (min {min(r):.3f}, max {max(r):.3f}); "
        f"whole process auto {med(auto_runs, 1):.2f}s plain {med(plain_runs, 1):.2f}s"
    )


if __name__ == "__main__":
    main()
