#!/usr/bin/env python3
"""The parallel server (--parallel 4) against the serial one (--parallel 1), from real clients.

Starts real ``edgespec serve`` processes on free loopback ports (bench_server's
``Server``): ``--draft auto`` (n-gram lookup, adaptive gamma), greedy, both idle
but for the one being measured. Issue 19's goals, side by side:

1. **Mixed load**: 4 clients for --duration seconds: 2 editors, each sending
   ``/infill`` completions (n_predict 24, cache_prompt) of a growing standard
   library file one after another (request i: the first k + i lines as
   ``input_prefix``, the next lines as ``input_suffix``), and 2 chat clients
   streaming ``/v1/chat/completions`` (max_tokens 128) one after another. On the
   parallel server and the serial one, then the 2 editors alone on a fresh parallel
   server (--alone-duration; fresh, so that its lookup history does not hold the
   completions the mixed phase asked for already). Editor latency p50/p95 mixed over alone, each
   editor's first request (its file opened: a cold prompt) left out (goal <= 1.5x),
   aggregate tokens/s (every completion token / wall time) parallel over serial
   (goal >= 1.5x), and the longest wait before any request's first token
   (its wall time less the server's ``predicted_ms``: queueing and prompt) against
   a lone 128-token chat reply's time (goal: no wait longer than one reply).
2. **16 streaming clients**: 16 threads of the ``openai`` client, streaming
   different prompts at once: all complete, and the texts equal the serial server's
   greedy ones; then --requests in all (16 threads looping), the server's VmRSS
   sampled after 20%, 50% and 100% of them (goal: flat).
3. **A lone client loses nothing**: one ``code_editing`` request (128 tokens),
   parallel and serial server alternating, --reps pairs: the median of per-pair
   ratios of decode tokens/s from the servers' timings (goal >= 0.97x).

    .venv/bin/python benchmarks/bench_parallel.py \
        --json docs/bench/gemma-3-270m-parallel-server.json
    .venv/bin/python benchmarks/bench_parallel.py --quick     # a smoke run, small numbers

About 10 minutes (--quick: 2) on a quiet 2-core machine; on a busy one, much more
(docs/benchmarks.md, "Parallel server": 882 s at a load of 10, with --threads 1).

The machine's load (``uptime``) is recorded before and after, and per phase.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import Server  # noqa: E402  (benchmarks/ is not a package)
from parallel_clients import (  # noqa: E402
    EDITOR_FILES,
    PROMPTS,
    chat_body,
    editor_body,
    editor_file,
    load,
    pct,
    request,
    rss_mib,
    start,
    uptime,
)
from parallel_report import goals, print_table  # noqa: E402

# ---------------------------------------------------------------------- 1. mixed load


#: what each mixed-load record keeps: the client's figures, the server's timings
RECORD_KEYS = ("kind", "client", "i", "start_s", "wall_s", "wait_s", "first_s", "tokens", "error")
TIMINGS_KEPT = ("cache_n", "prompt_n", "prompt_ms", "predicted_ms", "predicted_per_second",
                "target_calls", "drafted", "accepted", "stop")  # fmt: skip


def mixed(server: Server, duration: float, chats: int = 2, editors: int = 2) -> dict[str, Any]:
    """Editors and chat clients, each one request after another, for duration seconds."""
    records: list[dict[str, Any]] = []
    lock = threading.Lock()
    t_start = time.perf_counter()
    deadline = t_start + duration

    def client(kind: str, n: int) -> None:
        lines = editor_file(EDITOR_FILES[n % len(EDITOR_FILES)]) if kind == "editor" else []
        i = 0
        while time.perf_counter() < deadline:
            if kind == "editor":
                r = request(server, "/infill", editor_body(lines, i), f"editor-{n}")
            else:
                r = request(server, "/v1/chat/completions", chat_body(2 * i + n), f"chat-{n}")
            r.update(kind=kind, client=n, i=i, start_s=r.pop("t0") - t_start)
            with lock:
                records.append(r)
            i += 1

    threads = [threading.Thread(target=client, args=("editor", n)) for n in range(editors)]
    threads += [threading.Thread(target=client, args=("chat", n)) for n in range(chats)]
    load_before = load()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t_start
    ok = [r for r in records if "error" not in r]
    # an editor's first request opens its file (a cold prompt): latency counts the rest
    # (all of them in a run too short for more)
    first_included = not any(r["kind"] == "editor" and r["i"] > 0 for r in ok)
    ed = [r["wall_s"] for r in ok if r["kind"] == "editor" and (r["i"] > 0 or first_included)]
    ch = [r["wall_s"] for r in ok if r["kind"] == "chat"]
    tokens = sum(r["tokens"] for r in ok)
    waits = [r["wait_s"] for r in ok]
    worst = max(ok, key=lambda r: r["wait_s"]) if ok else {}
    return {
        "clients": {"editors": editors, "chats": chats},
        "duration_s": duration,
        "wall_s": wall,
        "requests": len(records),
        "errors": [r["error"] for r in records if "error" in r][:10],
        "n_errors": len(records) - len(ok),
        "editor_requests": len(ed),
        "editor_first_included": first_included,
        "chat_requests": len(ch),
        "editor_p50_s": pct(ed, 0.5),
        "editor_p95_s": pct(ed, 0.95),
        "chat_p50_s": pct(ch, 0.5),
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "max_wait_s": max(waits, default=float("nan")),
        "max_wait_kind": worst.get("kind"),
        # the same without each client's first request: at the start all four arrive
        # at once, two of them with a file's cold prompt
        "max_wait_after_first_s": max(
            (r["wait_s"] for r in ok if r["i"] > 0), default=float("nan")
        ),
        "p95_wait_s": pct(waits, 0.95),
        "max_chat_first_token_s": max(
            (r["first_s"] for r in ok if "first_s" in r), default=float("nan")
        ),
        "load_before": load_before,
        "load_after": load(),
        "records": [
            {k: r.get(k) for k in RECORD_KEYS}
            | {k: (r.get("timings") or {}).get(k) for k in TIMINGS_KEPT}
            for r in records
        ],
    }


# ---------------------------------------------------------------------- 2. 16 clients


def openai_client(server: Server) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"http://{server.host}:{server.port}/v1", api_key="x", timeout=1800)


def stream_text(client: Any, prompt: str, max_tokens: int) -> str:
    """One streamed, greedy completion's text."""
    stream = client.completions.create(
        model="m", prompt=prompt, max_tokens=max_tokens, stream=True, temperature=0
    )
    return "".join(chunk.choices[0].text for chunk in stream if chunk.choices)


def sixteen(
    par: Server, ser: Server, total: int, max_tokens: int, loop_tokens: int
) -> dict[str, Any]:
    """16 concurrent streaming clients: their texts against the serial server's; then RSS."""
    reference = []
    client_s = openai_client(ser)
    for p in PROMPTS:
        r = client_s.completions.create(model="m", prompt=p, max_tokens=max_tokens, temperature=0)
        reference.append(r.choices[0].text)
    client_p = openai_client(par)
    texts: list[str | None] = [None] * len(PROMPTS)
    errors: list[str] = []
    t0 = time.perf_counter()

    def one(i: int) -> None:
        try:
            texts[i] = stream_text(client_p, PROMPTS[i], max_tokens)
        except Exception as e:  # noqa: BLE001 (reported)
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    concurrent_s = time.perf_counter() - t0
    same = [t == r for t, r in zip(texts, reference, strict=True)]

    # then `total` requests in all (the 16 above count), 16 threads looping
    pid = par.proc.pid
    marks = sorted({max(len(PROMPTS) + 1, round(total * f)) for f in (0.2, 0.5, 1.0)})
    rss: dict[int, float] = {len(PROMPTS): rss_mib(pid)}
    lock = threading.Lock()
    state = {"next": len(PROMPTS), "done": len(PROMPTS), "errors": 0}
    t1 = time.perf_counter()

    def loop() -> None:
        while True:
            with lock:
                i = state["next"]
                if i >= total:
                    return
                state["next"] += 1
            try:  # (each slot's cache then holds a prompt it sees again: cheap prompts)
                stream_text(client_p, PROMPTS[i % len(PROMPTS)], loop_tokens)
            except Exception as e:  # noqa: BLE001 (counted)
                with lock:
                    state["errors"] += 1
                    errors.append(f"{type(e).__name__}: {e}")
            with lock:
                state["done"] += 1
                if state["done"] in marks:
                    rss[state["done"]] = rss_mib(pid)

    threads = [threading.Thread(target=loop) for _ in range(len(PROMPTS))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    loop_s = time.perf_counter() - t1
    first_mark = min(m for m in rss if m >= marks[0]) if len(rss) > 1 else len(PROMPTS)
    return {
        "clients": len(PROMPTS),
        "max_tokens": max_tokens,
        "all_completed": all(t is not None for t in texts),
        "same_as_serial": sum(same),
        "all_same": all(same),
        "differing": [i for i, s in enumerate(same) if not s],
        "concurrent_s": concurrent_s,
        "requests": total,
        "loop_max_tokens": loop_tokens,
        "loop_s": loop_s,
        "loop_errors": state["errors"],
        "errors": errors[:10],
        "rss_mib": {str(k): round(v, 1) for k, v in sorted(rss.items())},
        "rss_growth_mib": round(rss[max(rss)] - rss[first_mark], 1),
        "rss_growth_from": first_mark,
        "load_after": load(),
    }


# ---------------------------------------------------------------------- 3. lone client


def lone(par: Server, ser: Server, reps: int, max_tokens: int) -> dict[str, Any]:
    """The code_editing prompt, parallel and serial server alternating: per-pair ratios."""
    from edgespec import builtin_workloads

    prompt = builtin_workloads()["code_editing"].prompt
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    rows: dict[str, list[dict[str, Any]]] = {"parallel": [], "serial": []}
    for _rep in range(reps):
        for name, server in (("parallel", par), ("serial", ser)):
            r = request(server, "/v1/completions", body)
            if "error" in r:
                raise SystemExit(f"lone request on the {name} server: {r['error']}")
            t = r["timings"]
            rows[name].append(
                {
                    "decode_tps": t["predicted_per_second"],
                    "e2e_tps": r["tokens"] / r["wall_s"],
                    "tokens": r["tokens"],
                    "per_call": t["tokens_per_target_call"],
                    "text": r["text"],
                }
            )
    texts = {x["text"] for v in rows.values() for x in v}
    out: dict[str, Any] = {"reps": reps, "max_tokens": max_tokens, "same_text": len(texts) == 1}
    for key in ("decode_tps", "e2e_tps"):
        ratios = [p[key] / s[key] for p, s in zip(rows["parallel"], rows["serial"], strict=True)]
        out[key + "_ratio"] = statistics.median(ratios)
        out[key + "_ratios"] = [round(x, 3) for x in ratios]
        for name in rows:
            out[f"{name}_{key}"] = statistics.median(x[key] for x in rows[name])
    out["tokens"] = rows["parallel"][0]["tokens"]
    out["per_call"] = statistics.median(x["per_call"] for x in rows["parallel"])
    out["load_after"] = load()
    return out


# ---------------------------------------------------------------------- main


def lone_chat(server: Server, reps: int) -> float:
    """Median wall time of one long (128-token) chat reply alone on the server."""
    walls = []
    for i in range(reps):
        r = request(server, "/v1/chat/completions", chat_body(i))
        if "error" in r:
            raise SystemExit(f"lone chat request: {r['error']}")
        walls.append(r["wall_s"])
    return statistics.median(walls)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=2, help="CPU threads per server")
    p.add_argument("--parallel", type=int, default=4, help="slots of the parallel server")
    p.add_argument("--ctx", type=int, default=4096, help="context tokens per slot")
    p.add_argument("--duration", type=float, default=120, help="seconds of mixed load per server")
    p.add_argument("--alone-duration", type=float, default=None,
                   help="seconds of the editors alone (default: half of --duration)")  # fmt: skip
    p.add_argument("--requests", type=int, default=500, help="requests from the 16 clients")
    p.add_argument("--reps", type=int, default=5, help="lone-client pairs")
    p.add_argument("--quick", action="store_true", help="a smoke run: 20 s of load, 48 requests")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args()
    if args.quick:
        args.duration, args.requests, args.reps = 20, 48, 2
    alone_s = args.alone_duration if args.alone_duration is not None else args.duration / 2
    report: dict[str, Any] = {
        "target": args.target,
        "draft": "auto",
        "threads": args.threads,
        "parallel": args.parallel,
        "ctx": args.ctx,
        "quick": args.quick,
        "duration_s": args.duration,
        "alone_duration_s": alone_s,
        "cpus": os.cpu_count(),
        "uptime_before": uptime(),
    }
    t_all = time.perf_counter()

    def phase(name: str, value: Any) -> None:
        """Record a phase's result (the JSON so far is written: a long run keeps its parts)."""
        report[name] = value
        elapsed = time.perf_counter() - t_all
        print(f"[{elapsed:6.0f} s] {name} done; load {load()}", file=sys.stderr, flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n")

    print(report["uptime_before"], file=sys.stderr, flush=True)
    servers: list[Server] = []
    try:
        par = start(args.target, args.parallel, args.threads, args.ctx)
        servers.append(par)
        ser = start(args.target, 1, args.threads, args.ctx)
        servers.append(ser)
        for server in servers:  # warm up: the cost curve, the first decodes
            request(server, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 16})
        phase("lone_chat_s", lone_chat(par, 1 if args.quick else 2))
        phase("mixed_parallel", mixed(par, args.duration))
        phase("mixed_serial", mixed(ser, args.duration))
        # a fresh server: the mixed phase's completions are in par's lookup history,
        # which would make the same requests easier alone (it did: 4 calls against 17)
        fresh = start(args.target, args.parallel, args.threads, args.ctx)
        try:
            request(fresh, "/v1/completions", {"prompt": PROMPTS[0], "max_tokens": 16})
            phase("editors_alone", mixed(fresh, alone_s, chats=0))
        finally:
            fresh.stop()
        phase("sixteen", sixteen(par, ser, args.requests, 24, 8))
        phase("lone", lone(par, ser, args.reps, 128))
        report["rss_after_mib"] = {
            "parallel": rss_mib(par.proc.pid),
            "serial": rss_mib(ser.proc.pid),
        }
    finally:
        for server in servers:
            server.stop()
    report["total_s"] = time.perf_counter() - t_all
    report["uptime_after"] = uptime()
    report["goals"] = goals(report)
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
