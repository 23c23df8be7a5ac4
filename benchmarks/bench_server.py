#!/usr/bin/env python3
"""The completion server, measured from a client: prefix-cache TTFT and speculation speed-up.

Starts real ``edgespec serve`` processes on free loopback ports and talks HTTP to them.

1. **Time to first token** on a ~2,000-token Python file (streamed, the cursor
   near the end): *cold* after an unrelated request has replaced the cache,
   *warm* when the same request comes again (an editor re-sending its file).
   Medians over --reps; the issue's bar is warm <= 10% of cold.
2. **Tokens/s** on the benchmark's ``code_editing`` workload (``/v1/completions``,
   greedy): a server with speculation off and one per --spec (default auto:
   n-gram drafting, adaptive gamma), requests rotating between them. Decode
   tokens/s from the servers' timings and end-to-end tokens/s seen by the client;
   a speed-up is the median of per-repetition ratios to the server without
   speculation (ratios taken close in time are steadier on a busy machine).
   Greedy outputs must be equal.

    .venv/bin/python benchmarks/bench_server.py --target gemma-3-270m --reps 5 \
        --spec auto --spec ngram:8
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class Server:
    """An ``edgespec serve`` subprocess on a free port."""

    def __init__(self, target: str, draft: str, extra: list[str]) -> None:
        cmd = [sys.executable, "-m", "edgespec", "serve", "--port", "0", "--quiet",
               "--target", target, "--draft", draft, *extra]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            m = re.search(r"on http://([\d.]+):(\d+)", line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                self.banner = line.strip()
                return
            print(line, end="", file=sys.stderr)
        raise SystemExit(f"server did not start: {' '.join(cmd)}")

    def post(self, path: str, body: dict[str, Any]) -> tuple[float, float | None, list[Any]]:
        """(wall seconds, seconds to the first non-empty text, parsed body or SSE events)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=600)
        t0 = time.perf_counter()
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise SystemExit(f"{path}: HTTP {resp.status}: {resp.read()[:300]!r}")
        if not body.get("stream"):
            data = json.loads(resp.read())
            return time.perf_counter() - t0, None, [data]
        events: list[Any] = []
        first = None
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            events.append(ev)
            text = ev.get("content") or (ev.get("choices") or [{}])[0].get("text")
            if first is None and text:
                first = time.perf_counter() - t0
        conn.close()
        return time.perf_counter() - t0, first, events

    def stop(self) -> None:
        """Interrupt the server and wait for it."""
        self.proc.send_signal(2)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def code_file(n_tokens_hint: int) -> str:
    """A realistic Python module of about ``n_tokens_hint`` tokens (orders.py, then variants)."""
    source = _workload("code_editing").split("```python\n")[1].split("```")[0]
    parts = [source]
    for i, noun in enumerate(["invoice", "refund", "shipment", "basket", "voucher", "ticket"]):
        if sum(len(p) for p in parts) / 3.2 >= n_tokens_hint:  # ~3.2 characters per token
            break
        parts.append(source.replace("order", noun).replace("Order", noun.title()) + f"\n# {i}\n")
    return "\n\n".join(parts)


def _workload(name: str) -> str:
    try:
        from edgespec import builtin_workloads
    except ImportError:
        raise SystemExit("needs the benchmark workloads (edgespec/bench/workloads)") from None
    return builtin_workloads()[name].prompt


def ttft(server: Server, text: str, reps: int) -> dict[str, Any]:
    """Cold and warm time to the first streamed token, the cursor near the end of text.

    Through /v1/completions, which streams every token as it comes (/infill holds
    back text that the code stop rules might still cut).
    """
    cut = text.rindex("\n    return ") + len("\n    return ")
    body = {"prompt": text[:cut], "max_tokens": 8, "stream": True}
    other = {"prompt": "# a different file\nimport os\n", "max_tokens": 2}
    cold, warm, prompt_n = [], [], 0
    for _ in range(reps):
        server.post("/v1/completions", other)  # evict the file from the cache
        _, first_cold, ev_cold = server.post("/v1/completions", body)
        _, first_warm, ev_warm = server.post("/v1/completions", body)
        cold.append(first_cold or float("nan"))
        warm.append(first_warm or float("nan"))
        t_cold, t_warm = ev_cold[-1]["timings"], ev_warm[-1]["timings"]
        prompt_n = t_cold["prompt_tokens"]
        assert t_cold["cache_n"] < prompt_n // 10 and t_warm["cache_n"] == prompt_n - 1
    c, w = statistics.median(cold), statistics.median(warm)
    return {"prompt_tokens": prompt_n, "cold_s": c, "warm_s": w, "warm_over_cold": w / c,
            "cold_all": cold, "warm_all": warm}  # fmt: skip


def speed(servers: dict[str, Server], prompt: str, max_tokens: int, reps: int) -> dict[str, Any]:
    """Decode and end-to-end tokens/s of each server on prompt, in rotating order.

    ``servers["none"]`` is the baseline; speed-ups are medians of per-repetition ratios.
    """
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    names = list(servers)
    rows: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    texts: dict[str, str] = {}
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            wall, _, (r,) = servers[name].post("/v1/completions", body)
            t = r["timings"]
            n = r["usage"]["completion_tokens"]
            rows[name].append({"decode_tps": t["predicted_per_second"], "e2e_tps": n / wall,
                               "tokens": n, "acceptance": t["acceptance_rate"],
                               "per_call": t["tokens_per_target_call"]})  # fmt: skip
            texts[name] = r["choices"][0]["text"]
    out: dict[str, Any] = {}
    base = rows["none"]
    for name in names:
        entry: dict[str, Any] = {"same_text": texts[name] == texts["none"],
                                 "tokens": rows[name][0]["tokens"]}  # fmt: skip
        for key in ("decode_tps", "e2e_tps", "acceptance", "per_call"):
            entry[key] = statistics.median(r[key] for r in rows[name])
        for key in ("decode_tps", "e2e_tps"):
            ratios = [x[key] / b[key] for x, b in zip(rows[name], base, strict=True)]
            entry[key + "_speedup"] = statistics.median(ratios)
            entry[key + "_ratios"] = ratios
        out[name] = entry
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument(
        "--spec",
        action="append",
        help="a speculative server as DRAFT or DRAFT:GAMMA (repeatable; default: auto)",
    )
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--file-tokens", type=int, default=2000, help="size of the TTFT file")
    p.add_argument("--workload", default="code_editing")
    p.add_argument("--max-tokens", type=int, default=None, help="default: the workload's")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None, help="CPU threads per server")
    p.add_argument("--no-ttft", action="store_true", help="measure the speed-ups only")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args()
    extra = ["--ctx", str(args.ctx)] + (["--threads", str(args.threads)] if args.threads else [])
    servers: dict[str, Server] = {}
    try:
        for spec in ["none", *(args.spec or ["auto"])]:
            draft, _, gamma = spec.partition(":")
            servers[spec] = Server(
                args.target, draft, extra + (["--gamma", gamma] if gamma else [])
            )
            print(servers[spec].banner, file=sys.stderr)
        report: dict[str, Any] = {"target": args.target, "reps": args.reps,
                                  "threads": args.threads}  # fmt: skip
        first_spec = [n for n in servers if n != "none"][0]
        if not args.no_ttft:
            report["ttft"] = ttft(servers[first_spec], code_file(args.file_tokens), args.reps)
        from edgespec import builtin_workloads

        w = builtin_workloads()[args.workload]
        report["workload"] = w.name
        report["speed"] = speed(servers, w.prompt, args.max_tokens or w.max_tokens, args.reps)
    finally:
        for server in servers.values():
            server.stop()
    if "ttft" in report:
        t = report["ttft"]
        print(f"TTFT on a {t['prompt_tokens']}-token file ({first_spec} server, streamed,"
              f" median of {args.reps}): cold {t['cold_s'] * 1000:.0f} ms, warm"
              f" {t['warm_s'] * 1000:.0f} ms = {t['warm_over_cold']:.1%} of cold")  # fmt: skip
    speeds = report["speed"]
    print(f"{w.name} workload, {speeds['none']['tokens']} tokens, greedy, median of {args.reps}:")
    print(f"  {'server':<10} {'decode tok/s':>12} {'x':>6} {'e2e tok/s':>10} {'x':>6}"
          f" {'accept':>7} {'tok/call':>8}  same text")  # fmt: skip
    for name, e in speeds.items():
        print(f"  {name:<10} {e['decode_tps']:>12.1f} {e['decode_tps_speedup']:>6.2f}"
              f" {e['e2e_tps']:>10.1f} {e['e2e_tps_speedup']:>6.2f} {e['acceptance']:>7.2f}"
              f" {e['per_call']:>8.2f}  {e['same_text']}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
