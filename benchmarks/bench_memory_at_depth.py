#!/usr/bin/env python3
"""Peak memory of a context filled to a depth: edgespec against llama.cpp's llama-bench.

Each run is a fresh process whose peak RSS the kernel reports (wait4): edgespec fills a
context with --depth tokens and decodes 16 more, as it ships and with
EDGESPEC_FAST_KERNELS=1; ``llama-bench -d DEPTH -n 16`` does the same at its defaults
(F16 cache, window-sized sliding-window cache) and with edgespec's cache types.

    .venv/bin/python benchmarks/bench_memory_at_depth.py \\
        --llama-bench /tmp/llama-build/bin/llama-bench --depth 16000
"""

from __future__ import annotations

import argparse
import json
import os
import sys

FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "


def run_rss(cmd: list[str], env: dict[str, str]) -> float:
    """Peak RSS in MiB of cmd, read from wait4 on the child itself."""
    pid = os.fork()
    if pid == 0:
        os.environ.update(env)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execvp(cmd[0], cmd)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{cmd[0]} exited with {os.waitstatus_to_exitcode(status)}")
    return usage.ru_maxrss / 1024


def edgespec_cmd(model: str, depth: int, threads: int) -> list[str]:
    """A Python process that fills a context to depth and decodes 16 tokens."""
    code = (
        "from edgespec import LlamaModel, ModelPair, resolve_model\n"
        f"m = LlamaModel(resolve_model({model!r}), n_ctx={depth + 256}, n_threads={threads})\n"
        f"tokens = m.tokenize({FILLER!r} * {depth // 10 + 1})[:{depth}]\n"
        "ModelPair(m, None, history=False).generate(tokens, max_tokens=16)\n"
    )
    return [sys.executable, "-c", code]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--depth", type=int, default=16000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    from edgespec import resolve_model

    path = str(resolve_model(args.model))
    bench = [args.llama_bench, "-m", path, "-p", "0", "-n", "16", "-d", str(args.depth)]
    bench += ["-t", str(args.threads), "-r", "1"]
    runs = {
        "edgespec": (edgespec_cmd(args.model, args.depth, args.threads), {}),
        "edgespec-fast": (
            edgespec_cmd(args.model, args.depth, args.threads),
            {"EDGESPEC_FAST_KERNELS": "1"},
        ),
        "llama-bench": (bench, {}),
        "llama-bench bf16/f16": (bench + ["-ctk", "bf16", "-ctv", "f16"], {}),
    }
    out = {name: round(run_rss(cmd, env), 1) for name, (cmd, env) in runs.items()}
    base = out["llama-bench"]
    for name, mib in out.items():
        print(f"{name:<22} {mib:8.1f} MiB  {mib / base:.2f}x llama-bench")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "depth": args.depth, "peak_rss_mib": out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
