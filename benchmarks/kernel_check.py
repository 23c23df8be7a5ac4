#!/usr/bin/env python3
"""Are batched logits bit-identical to one-token logits, and what does a batch cost?

Greedy speculative output equals plain output only if a k-token verify batch and
k single-token decodes give the same logits. For each kernel mode (edgespec's
batch-invariant default, and EDGESPEC_FAST_KERNELS=1) this decodes the same
tokens both ways at two context depths and prints the largest logit difference,
then the cost of a k-token batch relative to one token (median thread CPU time
with one thread, so a busy machine disturbs it less than wall time).

    .venv/bin/python benchmarks/kernel_check.py --model gemma-3-270m --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = (2, 4, 8, 16)
FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "


def measure(model: str, threads: int, depths: list[int]) -> dict:
    """Logit differences and batch costs for the kernel mode of this process."""
    from edgespec import LlamaModel, resolve_model

    sys.path.insert(0, str(Path(__file__).resolve().parent / "device"))
    from measure import logit_diffs  # the device check's own measurement

    path = resolve_model(model)
    with LlamaModel(path, n_ctx=2048, n_threads=threads) as m:
        result: dict = {"max_abs_diff": logit_diffs(m, depths, SIZES)["max_abs_diff"]}
    with LlamaModel(path, n_ctx=2048, n_threads=1) as m:
        tokens = m.tokenize(FILLER * 4)
        m.decode(tokens[:32], logits="none")
        costs = {}
        for k in (1, *SIZES):
            samples = []
            for _ in range(9):
                m.truncate(32)
                t0 = time.thread_time()
                m.decode(tokens[32 : 32 + k], logits="all")
                samples.append(time.thread_time() - t0)
            costs[k] = statistics.median(samples)
        result["cost_ratio"] = {k: costs[k] / costs[1] for k in SIZES}
        result["one_token_ms"] = costs[1] * 1000
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--depths", default="16,300", help="context depths to test at")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    if args.child:
        print(json.dumps(measure(args.model, args.threads, depths)))
        return 0
    for mode, fast in (("batch-invariant (default)", "0"), ("fast kernels", "1")):
        env = {**os.environ, "EDGESPEC_FAST_KERNELS": fast}
        env.pop("GGML_CPU_TILED_MM", None)
        out = subprocess.run(
            [sys.executable, __file__, "--child", "--model", args.model]
            + ["--threads", str(args.threads), "--depths", args.depths],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        r = json.loads(out)
        print(f"{mode}: one token {r['one_token_ms']:.1f} ms (1 thread)")
        for key, diff in r["max_abs_diff"].items():
            print(f"  {key:>16}  max |batch - single| logit = {diff:.3g}")
        ratios = "  ".join(f"k={k}: {v:.2f}x" for k, v in r["cost_ratio"].items())
        print(f"  verify cost vs one token: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
