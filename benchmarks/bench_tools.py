#!/usr/bin/env python3
"""Tool calls and structured output from the server, on the offline models.

1. **Validity**: --calls requests with ``tool_choice: required`` (sampled at
   temperature 1, one seed each, the prompt and the tools rotating over a small set)
   and as many with ``response_format: json_schema``; how many parse, how many
   validate against their schema (``jsonschema``), how many were cut by max_tokens.
2. **Speed**: greedy required calls whose arguments copy text from the
   conversation (a file path, a quoted sentence) and ones that do not, on a server
   with the n-gram drafter under gamma auto and one without speculation, requests
   alternating between them; the median of per-pair wall-time ratios, and whether
   the two servers' calls were identical.

    .venv/bin/python benchmarks/bench_tools.py --calls 200 --speed-reps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from typing import Any

import jsonschema
from openai import OpenAI

from edgespec import EdgespecServer, load_session, resolve_model


def _tool(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict:
    schema = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": schema}}  # fmt: skip


TOOLS = [
    _tool("read_file", "Read a file.", {"path": {"type": "string"},
          "max_lines": {"type": "integer"}}, ["path"]),
    _tool("get_weather", "The weather in a city.", {"city": {"type": "string"},
          "unit": {"enum": ["celsius", "fahrenheit"]}}, ["city", "unit"]),
    _tool("send_email", "Send an email.", {"to": {"type": "string"},
          "subject": {"type": "string"}, "body": {"type": "string"},
          "cc": {"type": "array", "items": {"type": "string"}}}, ["to", "subject", "body"]),
    _tool("search", "Search the web.", {"query": {"type": "string"},
          "limit": {"type": "integer"}, "safe": {"type": "boolean"}}, ["query"]),
]  # fmt: skip
ASKS = [
    "Open /home/ana/src/edgespec/edgespec/server/app.py and show me the top.",
    "Is it raining in Lisbon right now?",
    "Email bob@example.com that the build is green, subject 'CI'.",
    "Find recent papers on speculative decoding.",
    "What does the file ./docs/tools.md say?",
]
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "year": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
        "kind": {"enum": ["book", "film", "song"]},
        "rating": {"$ref": "#/$defs/rating"},
    },
    "required": ["title", "year", "kind"],
    "additionalProperties": False,
    "$defs": {"rating": {"type": "object", "properties": {"stars": {"type": "integer"}},
                         "required": ["stars"], "additionalProperties": False}},
}  # fmt: skip
COPY = [  # arguments that repeat the conversation
    'Call read_file with the path "/var/lib/edgespec/conversations/2026-12-04/long-chat.json".',
    'Send an email to "ana@example.org" with the subject "nightly" and the body "The nightly '
    'build finished, all 1,016 tests passed and the wheel installs on a fresh machine."',
    'Search the web for "speculative decoding with n-gram lookup on a laptop CPU".',
]
FRESH = ["Is it cold in Oslo?", "Find something about bees.", "Show me a file."]


def serve(model: str, draft: str | None, threads: int) -> tuple[EdgespecServer, OpenAI]:
    """A server for model on a free loopback port, and a client for it."""
    path = resolve_model(model)
    session = load_session(str(path), draft, gamma="auto", n_ctx=2048, n_threads=threads,
                           name=model)  # fmt: skip
    server = EdgespecServer(("127.0.0.1", 0), session)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    return server, OpenAI(base_url=f"http://{host}:{port}/v1", api_key="x", max_retries=0)


def validity(client: OpenAI, model: str, n: int, max_tokens: int) -> dict[str, int]:
    """n sampled required calls and n sampled json_schema outputs, counted."""
    out = dict.fromkeys(("calls_parsed", "calls_valid", "calls_cut", "json_valid", "json_cut"), 0)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA, "strict": True}}
    for i in range(n):
        ask = [{"role": "user", "content": ASKS[i % len(ASKS)]}]
        tools = TOOLS[i % 2 :] if i % 3 else TOOLS
        r = client.chat.completions.create(model=model, messages=ask, tools=tools,
                                           tool_choice="required", temperature=1.0, seed=i,
                                           max_tokens=max_tokens)  # fmt: skip
        calls = r.choices[0].message.tool_calls or []
        out["calls_cut"] += r.choices[0].finish_reason == "length"
        if calls:
            out["calls_parsed"] += 1
            try:
                for c in calls:
                    jsonschema.validate(json.loads(c.function.arguments), schemas[c.function.name])
                out["calls_valid"] += 1
            except jsonschema.ValidationError:
                pass
        movie = [{"role": "user", "content": f"Describe a {('book', 'film', 'song')[i % 3]}."}]
        r = client.chat.completions.create(model=model, messages=movie, response_format=fmt,
                                           temperature=1.0, seed=i,
                                           max_tokens=max_tokens)  # fmt: skip
        out["json_cut"] += r.choices[0].finish_reason == "length"
        try:
            jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
            out["json_valid"] += 1
        except (ValueError, jsonschema.ValidationError):
            pass
    return out


def speed(clients: dict[str, OpenAI], model: str, asks: list[str], reps: int) -> dict[str, Any]:
    """Median wall-time ratio plain / ngram over alternating greedy requests."""
    ratios, same, accepted, drafted = [], True, 0, 0
    for _ in range(reps):
        for ask in asks:
            took, calls = {}, {}
            for kind in ("plain", "ngram"):
                t0 = time.perf_counter()
                r = clients[kind].chat.completions.create(
                    model=model, messages=[{"role": "user", "content": ask}], tools=TOOLS,
                    tool_choice="required", max_tokens=160)  # fmt: skip
                took[kind] = time.perf_counter() - t0
                calls[kind] = [(c.function.name, c.function.arguments)
                               for c in r.choices[0].message.tool_calls or []]  # fmt: skip
                if kind == "ngram":
                    accepted += r.model_extra["timings"]["draft_n_accepted"]
                    drafted += r.model_extra["timings"]["draft_n"]
            ratios.append(took["plain"] / took["ngram"])
            same &= calls["plain"] == calls["ngram"]
    return {"speedup": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
            "identical": same, "accepted": accepted, "drafted": drafted}  # fmt: skip


def main() -> None:
    """Run both measurements on each model and print one JSON line per model."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2-135m-instruct,gemma-3-270m")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--speed-reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=512, help="per validity request")
    args = ap.parse_args()
    for model in args.models.split(","):
        servers = {
            k: serve(model, d, args.threads) for k, d in (("plain", None), ("ngram", "ngram"))
        }
        clients = {k: c for k, (_, c) in servers.items()}
        row: dict[str, Any] = {"model": model, "n": args.calls}
        if args.calls:
            row.update(validity(clients["ngram"], model, args.calls, args.max_tokens))
        if args.speed_reps:
            row["copying"] = speed(clients, model, COPY, args.speed_reps)
            row["fresh"] = speed(clients, model, FRESH, args.speed_reps)
        print(json.dumps(row), flush=True)
        for server, _ in servers.values():
            server.shutdown()
            server.session.target.close()
    sys.exit(0)


if __name__ == "__main__":
    main()
