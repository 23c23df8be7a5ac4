#!/usr/bin/env python3
"""edgespec's plain decoding against llama.cpp's own `llama-bench` tg, side by side.

Both decode N tokens one at a time from an empty context, with the same model,
thread count and kernel configuration, alternating, with repetitions; the ratio
is the cost of edgespec's Python loop (sampling, detokenizing, bookkeeping).
Kernel modes: "exact" is edgespec's default (no weight repacking, no tiled
K-quant matmul, BF16 KV cache; see edgespec/backend/kernels.py), "fast" is llama.cpp's
default (EDGESPEC_FAST_KERNELS=1 on our side).

    .venv/bin/python scripts/bench_plain_vs_llamacpp.py \
        --llama-bench /path/to/llama-bench --model gemma-3-270m --threads 2 --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MODES = {
    "exact": ({"GGML_CPU_TILED_MM": "0"}, ["--repack", "0", "-ctk", "bf16", "-ctv", "bf16"]),
    "fast": ({"EDGESPEC_FAST_KERNELS": "1"}, []),
}


def edgespec_tg(model: str, n: int, threads: int, env: dict[str, str]) -> float:
    """Tokens/s of edgespec's plain decoding (a fresh process, so the kernel mode applies)."""
    code = (
        "import sys, json\n"
        "from edgespec.backend import LlamaModel\n"
        "from edgespec.engine import generate\n"
        "from edgespec.loading import resolve_model\n"
        f"m = LlamaModel(resolve_model({model!r}), n_ctx=1024, n_threads={threads})\n"
        "bos = m.vocab_info().bos\n"
        f"generate(m, [bos], max_tokens=16, gamma=0)\n"  # warm-up, as llama-bench does
        "m.reset()\n"
        f"d = generate(m, [bos], max_tokens={n}, gamma=0)\n"
        "print(json.dumps(d.stats.tokens_per_second))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def llama_bench_tg(binary: str, path: str, n: int, threads: int, env, flags) -> float:
    """llama-bench's tg tokens/s (its own average over 3 repetitions)."""
    cmd = [binary, "-m", path, "-p", "0", "-n", str(n), "-t", str(threads), "-r", "3", "-o", "json"]
    out = subprocess.run(
        cmd + flags, env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    return float(json.loads(out.stdout)[0]["avg_ts"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--modes", default="exact,fast")
    args = p.parse_args()
    from edgespec.loading import resolve_model

    path = str(resolve_model(args.model))
    for mode in args.modes.split(","):
        env, flags = MODES[mode]
        ours, theirs, ratios = [], [], []
        for _ in range(args.reps):
            a = edgespec_tg(args.model, args.n, args.threads, env)
            b = llama_bench_tg(args.llama_bench, path, args.n, args.threads, env, flags)
            ours.append(a)
            theirs.append(b)
            ratios.append(a / b)
        print(
            f"{mode:>5}: edgespec plain {statistics.median(ours):6.1f} tok/s, "
            f"llama-bench tg{args.n} {statistics.median(theirs):6.1f} tok/s, "
            f"ratio median {statistics.median(ratios):.3f} "
            f"(per rep: {', '.join(f'{r:.3f}' for r in ratios)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
