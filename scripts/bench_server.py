#!/usr/bin/env python3
"""The completion server, measured from a client: prefix-cache TTFT and speculation speed-up.

Starts real ``edgespec serve`` processes on free loopback ports and talks HTTP to them.

1. **Time to first token** on a ~2,000-token Python file (``/infill``, streamed,
   the cursor near the end): *cold* after an unrelated request has replaced the
   cache, *warm* when the same request comes again (an editor re-sending its
   file). Medians over --reps; the issue's bar is warm <= 10% of cold.
2. **Tokens/s** on the benchmark's ``code_editing`` workload (``/v1/completions``,
   greedy): one server with --draft (default auto: n-gram, adaptive gamma) and
   one with speculation off, requests alternating between them. Decode tokens/s
   from the servers' timings and end-to-end tokens/s seen by the client; the
   speed-up is the median of per-repetition ratios (ratios taken close in time
   are steadier on a busy machine). Greedy outputs must be equal.

    .venv/bin/python scripts/bench_server.py --target gemma-3-270m --reps 5
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
        cmd = [sys.executable, "-m", "edgespec.cli", "serve", "--port", "0", "--quiet",
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
        from edgespec.bench.workloads import builtin_workloads
    except ImportError:
        raise SystemExit("needs the benchmark workloads (edgespec/bench/workloads)") from None
    return builtin_workloads()[name].prompt


def ttft(server: Server, text: str, reps: int) -> dict[str, Any]:
    """Cold and warm time to first token on text, streamed through /infill."""
    cut = text.rindex("\n    return ") + len("\n    return ")
    body = {"input_prefix": text[:cut], "input_suffix": text[cut:], "n_predict": 16,
            "stream": True}  # fmt: skip
    other = {"input_prefix": "# a different file\nimport os\n", "n_predict": 2}
    cold, warm, prompt_n = [], [], 0
    for _ in range(reps):
        server.post("/infill", other)  # evict the file from the cache
        _, first_cold, ev_cold = server.post("/infill", body)
        _, first_warm, ev_warm = server.post("/infill", body)
        cold.append(first_cold or float("nan"))
        warm.append(first_warm or float("nan"))
        prompt_n = ev_cold[-1]["tokens_evaluated"]
        assert ev_warm[-1]["tokens_cached"] == prompt_n - 1, ev_warm[-1]["timings"]
    c, w = statistics.median(cold), statistics.median(warm)
    return {"prompt_tokens": prompt_n, "cold_s": c, "warm_s": w, "warm_over_cold": w / c,
            "cold_all": cold, "warm_all": warm}  # fmt: skip


def speed(spec: Server, plain: Server, prompt: str, max_tokens: int, reps: int) -> dict:
    """Decode and end-to-end tokens/s of spec and plain on prompt, alternating."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    rows: dict[str, list[dict[str, float]]] = {"spec": [], "plain": []}
    texts: dict[str, str] = {}
    for rep in range(reps):
        order = [("spec", spec), ("plain", plain)]
        for name, server in order if rep % 2 == 0 else order[::-1]:
            wall, _, (r,) = server.post("/v1/completions", body)
            t = r["timings"]
            n = r["usage"]["completion_tokens"]
            rows[name].append({"decode_tps": t["predicted_per_second"], "e2e_tps": n / wall,
                               "tokens": n, "acceptance": t["acceptance_rate"],
                               "per_call": t["tokens_per_target_call"]})  # fmt: skip
            texts[name] = r["choices"][0]["text"]
    out: dict[str, Any] = {"same_text": texts["spec"] == texts["plain"]}
    for key in ("decode_tps", "e2e_tps"):
        ratios = [s[key] / p[key] for s, p in zip(rows["spec"], rows["plain"], strict=True)]
        out[key] = {"spec": statistics.median(r[key] for r in rows["spec"]),
                    "plain": statistics.median(r[key] for r in rows["plain"]),
                    "speedup": statistics.median(ratios), "ratios": ratios}  # fmt: skip
    out["tokens"] = rows["spec"][0]["tokens"]
    out["acceptance"] = statistics.median(r["acceptance"] for r in rows["spec"])
    out["tokens_per_target_call"] = statistics.median(r["per_call"] for r in rows["spec"])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--draft", default="auto", help="the speculative server's --draft")
    p.add_argument("--gamma", default=None, help="the speculative server's --gamma")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--file-tokens", type=int, default=2000, help="size of the TTFT file")
    p.add_argument("--workload", default="code_editing")
    p.add_argument("--max-tokens", type=int, default=None, help="default: the workload's")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--threads", type=int, default=None, help="CPU threads per server")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args()
    extra = ["--ctx", str(args.ctx)] + (["--threads", str(args.threads)] if args.threads else [])
    spec = Server(args.target, args.draft, extra + (["--gamma", args.gamma] if args.gamma else []))
    plain = Server(args.target, "none", extra)
    try:
        print(spec.banner, file=sys.stderr)
        print(plain.banner, file=sys.stderr)
        report: dict[str, Any] = {"target": args.target, "draft": args.draft, "reps": args.reps,
                                  "threads": args.threads}  # fmt: skip
        report["ttft"] = ttft(spec, code_file(args.file_tokens), args.reps)
        from edgespec.bench.workloads import builtin_workloads

        w = builtin_workloads()[args.workload]
        report["speed"] = speed(spec, plain, w.prompt, args.max_tokens or w.max_tokens, args.reps)
        report["workload"] = w.name
    finally:
        spec.stop()
        plain.stop()
    t, s = report["ttft"], report["speed"]
    print(f"TTFT on a {t['prompt_tokens']}-token file (/infill, streamed, median of {args.reps}):"
          f" cold {t['cold_s'] * 1000:.0f} ms, warm {t['warm_s'] * 1000:.0f} ms"
          f" = {t['warm_over_cold']:.1%} of cold")  # fmt: skip
    print(f"{w.name}, {s['tokens']} tokens, greedy; draft {args.draft} vs speculation off"
          f" (same text: {s['same_text']}):")  # fmt: skip
    for key, label in (("decode_tps", "decode tok/s"), ("e2e_tps", "end-to-end tok/s")):
        r = s[key]
        print(f"  {label:>17}: {r['spec']:.1f} vs {r['plain']:.1f}  speed-up {r['speedup']:.2f}x")
    print(f"  acceptance {s['acceptance']:.2f}, {s['tokens_per_target_call']:.2f} tokens/call")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
