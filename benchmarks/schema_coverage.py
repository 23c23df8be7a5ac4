#!/usr/bin/env python3
"""Which real-world JSON Schemas edgespec accepts and enforces (issue 52's coverage goal).

For every schema in ``tests/data/schemas/`` (OpenAPI components, pydantic and zod
output, draft-04, configuration files, OpenAI strict parameters):

1. **llguidance**: does it compile the schema as given
   (``LLMatcher.validate_grammar(LLMatcher.grammar_from_json_schema(schema))``), and
   in its lenient mode (``x-guidance: {lenient: true}``: unknown keywords ignored)?
2. **the server**: a real ``edgespec serve`` per model, started as a subprocess on a
   free loopback port and asked over HTTP only. Does it accept the schema as
   ``response_format`` (``json_schema``, ``strict: true``), as a tool's ``parameters``
   with ``tool_choice: required`` and with ``auto`` (any 2xx; a refusal's message
   is kept)? A reply in ``auto`` mode must not leak edgespec's internal
   ``{"response": ...}`` wrapper into ``content``, finished or cut.
3. **outputs**: for every accepted schema, ``--outputs`` structured outputs and
   ``--tool-outputs`` required tool calls per model, sampled (temperature
   ``--temperature``, a different seed each), each checked with ``jsonschema`` (the
   schema's own draft, with format checking). Outputs cut at ``--max-tokens`` are
   counted apart: every *finished* output must validate.

Both offline models by default (Gemma 3 270M, a base model, and SmolLM2 135M
Instruct), with the server's default drafter. A JSON report goes to ``--out``, and a
table is printed. The full run (the issue's goal: 200 finished outputs per model)::

    .venv/bin/python benchmarks/schema_coverage.py --outputs 3 --tool-outputs 1 \\
        --max-tokens 384 --out bench/schema_coverage.json

A quick look: ``--limit 5 --outputs 1 --tool-outputs 0 --max-tokens 96``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import llguidance
from coverage_report import print_table, summarize

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "tests" / "data" / "schemas"
MODELS = ("gemma-3-270m", "smollm2-135m-instruct")
TOOL = "record"
WRAPPER_KEYS = ('{"response"', '{"tool_call"', '{"tool_calls"')


def load_schemas(directory: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Every ``*.json`` under directory as {name, origin, note, schema}, sorted by name."""
    out = []
    for path in sorted(directory.glob("*.json")):
        entry = json.loads(path.read_text())
        out.append({
            "name": path.stem,
            "origin": entry["origin"],
            "note": entry.get("note") or entry.get("generator", ""),
            "schema": entry["schema"],
        })  # fmt: skip
    return out[:limit] if limit else out


def llguidance_compiles(schema: dict[str, Any], lenient: bool) -> str:
    """'' when llguidance compiles the schema, else its error."""
    if lenient:
        schema = {**schema, "x-guidance": {"lenient": True}}
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
        return llguidance.LLMatcher.validate_grammar(grammar)
    except Exception as e:  # a schema it cannot even read
        return f"{type(e).__name__}: {e}"


def validation_error(instance: Any, schema: dict[str, Any]) -> str | None:
    """None when instance validates against schema (its own draft, formats checked)."""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    error = jsonschema.exceptions.best_match(
        cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(instance)
    )
    return None if error is None else f"{'/'.join(map(str, error.absolute_path))}: {error.message}"


# ---------------------------------------------------------------- the server, over HTTP


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _edgespec_command() -> list[str]:
    exe = Path(sys.executable).with_name("edgespec")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "edgespec"]


@contextlib.contextmanager
def serve(model: str, threads: int, ctx: int, log: Path) -> Iterator[str]:
    """``edgespec serve --target model`` on a free loopback port; yields its base URL."""
    port = _free_port()
    cmd = [*_edgespec_command(), "serve", "--target", model, "--port", str(port),
           "--ctx", str(ctx), "--parallel", "1", "--quiet"]  # fmt: skip
    if threads:
        cmd += ["--threads", str(threads)]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"edgespec serve exited {proc.returncode}: {log.read_text()}")
            with contextlib.suppress(OSError):
                status, _ = post(base, "/health", None, method="GET", timeout=5)
                if status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"edgespec serve did not start: {log.read_text()}")
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post(
    base: str, path: str, body: Any, *, method: str = "POST", timeout: float = 900
) -> tuple[int, Any]:
    """(status, parsed JSON body) of one request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        base + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:  # the server gone: the run goes on
        return 0, f"no answer: {e}"
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def _error(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        return f"{err.get('message')} (param {err.get('param')})"
    return str(body)[:300]


def _title(entry: dict[str, Any]) -> str:
    schema = entry["schema"]
    return schema.get("title") or entry["name"].split("_", 1)[1].replace("_", " ")


def _messages(entry: dict[str, Any]) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write an example {_title(entry)} as JSON."}]


def _tool(entry: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": TOOL, "description": f"Store one {_title(entry)}.",
        "parameters": entry["schema"]}}  # fmt: skip


def _response_format(entry: dict[str, Any]) -> dict[str, Any]:
    spec = {"name": "record", "schema": entry["schema"], "strict": True}
    return {"type": "json_schema", "json_schema": spec}


def _leaks(content: Any) -> bool:
    return isinstance(content, str) and content.lstrip().startswith(WRAPPER_KEYS)


def check_output(text: str | None, finish: str, schema: dict[str, Any]) -> dict[str, Any]:
    """One output: finished or cut; a finished one parsed and validated."""
    if finish == "length":
        return {"finished": False}
    try:
        value = json.loads(text or "")
    except ValueError as e:
        return {"finished": True, "valid": False, "error": f"not JSON: {e}", "text": text}
    error = validation_error(value, schema)
    out: dict[str, Any] = {"finished": True, "valid": error is None}
    if error:
        out.update(error=error, text=text)
    return out


def run_model(
    base: str, model: str, schemas: list[dict[str, Any]], args: argparse.Namespace
) -> dict[str, dict[str, Any]]:
    """Every schema against one server: acceptance, leaks, outputs."""
    results = {}
    for i, entry in enumerate(schemas):
        schema, msgs = entry["schema"], _messages(entry)
        row: dict[str, Any] = {"outputs": [], "tool_outputs": []}
        common = {"model": model, "messages": msgs, "temperature": args.temperature}
        # response_format: acceptance, then outputs
        for k in range(max(args.outputs, 1)):
            seed = 1000 * i + args.seed_base + k
            status, body = post(base, "/v1/chat/completions", {
                **common, "seed": seed, "response_format": _response_format(entry),
                "max_tokens": args.max_tokens if args.outputs else 1})  # fmt: skip
            if k == 0:
                row["response_format"] = status == 200
                if status != 200:
                    row["response_format_error"] = _error(body)
                    break
            if args.outputs and status == 200:
                choice = body["choices"][0]
                row["outputs"].append(
                    check_output(choice["message"]["content"], choice["finish_reason"], schema)
                )
        # a tool: required (acceptance, then calls) and auto (acceptance, no leak)
        for k in range(max(args.tool_outputs, 1)):
            seed = 1000 * i + 500 + args.seed_base + k
            status, body = post(base, "/v1/chat/completions", {
                **common, "seed": seed, "tools": [_tool(entry)], "tool_choice": "required",
                "max_tokens": args.max_tokens if args.tool_outputs else 1})  # fmt: skip
            if k == 0:
                row["tool_required"] = status == 200
                if status != 200:
                    row["tool_required_error"] = _error(body)
                    break
            if args.tool_outputs and status == 200:
                choice = body["choices"][0]
                calls = choice["message"].get("tool_calls") or []
                if choice["finish_reason"] == "tool_calls" and calls:
                    for call in calls:
                        row["tool_outputs"].append(
                            check_output(call["function"]["arguments"], "stop", schema)
                        )
                elif choice["finish_reason"] == "length":
                    row["tool_outputs"].append({"finished": False})
                else:
                    row["tool_outputs"].append({"finished": True, "valid": False,
                        "error": "required, yet no call", "text": choice["message"]})  # fmt: skip
        status, body = post(base, "/v1/chat/completions", {
            **common, "seed": 1000 * i + 900, "tools": [_tool(entry)], "tool_choice": "auto",
            "max_tokens": args.auto_max_tokens})  # fmt: skip
        row["tool_auto"] = status == 200
        if status != 200:
            row["tool_auto_error"] = _error(body)
        else:
            message = body["choices"][0]["message"]
            row["auto_leaked"] = _leaks(message.get("content"))
            row["auto_finish"] = finish = body["choices"][0]["finish_reason"]
            for call in message.get("tool_calls") or []:  # (a cut call: finish "length")
                cut = "length" if finish == "length" else "stop"
                row["tool_outputs"].append(check_output(call["function"]["arguments"], cut, schema))
        results[entry["name"]] = row
        done = [o for o in row["outputs"] + row["tool_outputs"] if o["finished"]]
        bad = sum(not o["valid"] for o in done)
        print(f"  {model:24} {i + 1:3}/{len(schemas)} {entry['name']:40} "
              f"rf={'ok' if row['response_format'] else '400'} "
              f"req={'ok' if row['tool_required'] else '400'} "
              f"auto={'ok' if row['tool_auto'] else '400'} "
              f"finished={len(done)} invalid={bad}", file=sys.stderr, flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--schemas", type=Path, default=SCHEMAS, help="folder of schema files")
    p.add_argument("--limit", type=int, default=None, help="the first N schemas only")
    p.add_argument("--outputs", type=int, default=3, help="response_format outputs per schema")
    p.add_argument("--tool-outputs", type=int, default=1, help="required tool calls per schema")
    p.add_argument("--max-tokens", type=int, default=384)
    p.add_argument(
        "--auto-max-tokens",
        type=int,
        default=24,
        help="the auto-mode request (acceptance and the wrapper leak check)",
    )
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed-base", type=int, default=0, choices=range(0, 500, 100),
                   help="added to each output's seed: a further run's outputs are new ones "
                   "(merge the reports with coverage_report.py)")  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="0: the server's default")
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    args = p.parse_args(argv)

    schemas = load_schemas(args.schemas, args.limit)
    report: dict[str, Any] = {
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "llguidance": getattr(llguidance, "__version__", "?"),
        "schemas": [],
        "models": {},
    }
    for entry in schemas:
        report["schemas"].append({
            "name": entry["name"], "origin": entry["origin"],
            "llguidance_error": llguidance_compiles(entry["schema"], lenient=False),
            "llguidance_lenient_error": llguidance_compiles(entry["schema"], lenient=True),
        })  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            log = Path(tmp) / f"{model}.log"
            with serve(model, args.threads, args.ctx, log) as base:
                report["models"][model] = run_model(base, model, schemas, args)
            report["summary"] = summarize(report)
            if args.out:  # after each model: a run stopped later keeps what it has
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
