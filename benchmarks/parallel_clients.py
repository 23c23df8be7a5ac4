"""Plumbing of benchmarks/bench_parallel.py: servers started with their stderr drained,
one request timed from a real HTTP client, and the machine's state (RSS, load)."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import sysconfig
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import Server  # noqa: E402  (benchmarks/ is not a package)


def start(target: str, parallel: int, threads: int, ctx: int) -> Server:
    """A server with --parallel N, its stderr drained (a full pipe would block it)."""
    extra = ["--parallel", str(parallel), "--threads", str(threads), "--ctx", str(ctx)]
    server = Server(target, "auto", extra)
    print(server.banner, file=sys.stderr)
    server.log = deque(maxlen=50)  # type: ignore[attr-defined]
    stderr = server.proc.stderr
    assert stderr is not None
    threading.Thread(target=lambda: server.log.extend(stderr), daemon=True).start()  # type: ignore[attr-defined]
    return server


def request(
    server: Server, path: str, body: dict[str, Any], agent: str = "bench_parallel"
) -> dict[str, Any]:
    """One POST: wall s, first-text s (streamed), text, timings; ``error`` when it failed."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=1800)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"t0": t0}
    try:
        conn.request("POST", path, json.dumps(body),
                     {"Content-Type": "application/json", "User-Agent": agent})  # fmt: skip
        resp = conn.getresponse()
        if resp.status != 200:
            out["error"] = f"HTTP {resp.status}: {resp.read()[:200]!r}"
            return out
        if not body.get("stream"):
            data = json.loads(resp.read())
            out["timings"] = data["timings"]
            out["text"] = data.get("content", "")
            if "choices" in data:
                c = data["choices"][0]
                out["text"] = c.get("text") or (c.get("message") or {}).get("content") or ""
        else:
            parts: list[str] = []
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    out["error"] = str(ev["error"])[:200]
                choice = (ev.get("choices") or [{}])[0]
                text = ev.get("content") or choice.get("text") or (
                    choice.get("delta") or {}).get("content")  # fmt: skip
                if text:
                    out.setdefault("first_s", time.perf_counter() - t0)
                    parts.append(text)
                if "timings" in ev:
                    out["timings"] = ev["timings"]
            out["text"] = "".join(parts)
    except (OSError, ValueError, KeyError) as e:
        out["error"] = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
    out["wall_s"] = time.perf_counter() - t0
    t = out.get("timings")
    if t is not None:
        out["tokens"] = t["predicted_n"]
        out["wait_s"] = max(0.0, out["wall_s"] - t["predicted_ms"] / 1000)
    elif "error" not in out:
        out["error"] = "no timings in the answer"
    return out


def rss_mib(pid: int) -> float:
    """VmRSS of a process, MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def uptime() -> str:
    """``uptime``'s line."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; nan when empty."""
    if not values:
        return float("nan")
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------------- the requests

CHAT_QUESTIONS = [
    "How do I reverse a linked list in Python? Show the code.",
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain the difference between a list and a tuple in Python, with examples.",
    "How do I read a CSV file with Python's csv module and sum one column?",
    "Write a binary search in Python and explain its complexity.",
    "How do I use a context manager to time a block of Python code?",
]

TASKS = [
    ("parse an ISO date", "parse_date"), ("flatten a nested list", "flatten"),
    ("count words in a text", "word_count"), ("merge two sorted lists", "merge_sorted"),
    ("check if a number is prime", "is_prime"), ("compute a file's sha256", "file_digest"),
    ("retry a function with backoff", "retry"), ("chunk a list into pieces", "chunks"),
    ("deduplicate keeping order", "unique"), ("read a JSON config file", "load_config"),
    ("format bytes as KiB/MiB", "human_size"), ("find the longest common prefix", "common_prefix"),
    ("transpose a matrix", "transpose"), ("validate an email address", "is_email"),
    ("convert CamelCase to snake_case", "snake_case"), ("run a shell command", "run_command"),
]  # fmt: skip
PROMPTS = [f"# Python: {task}\nimport os\n\n\ndef {name}(" for task, name in TASKS]


def editor_file(name: str) -> list[str]:
    """A standard library module's lines (the venv python's)."""
    return Path(sysconfig.get_paths()["stdlib"], name).read_text().splitlines(keepends=True)


EDITOR_FILES = ["json/decoder.py", "textwrap.py"]
FIRST_LINES = 40  # k: the first request's prefix
SUFFIX_LINES = 64  # lines after the cursor sent as input_suffix (llama.vim's n_suffix)


def editor_body(lines: list[str], i: int) -> dict[str, Any]:
    """Request i of an editor: the first k + i lines before the cursor."""
    cut = FIRST_LINES + i % (len(lines) - FIRST_LINES)
    return {
        "input_prefix": "".join(lines[:cut]),
        "input_suffix": "".join(lines[cut : cut + SUFFIX_LINES]),
        "n_predict": 24,
        "cache_prompt": True,
        "temperature": 0,
    }


def chat_body(i: int) -> dict[str, Any]:
    """Chat request i: a coding question, 128 tokens, streamed."""
    question = CHAT_QUESTIONS[i % len(CHAT_QUESTIONS)]
    return {
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 128,
        "temperature": 0,
        "stream": True,
    }
