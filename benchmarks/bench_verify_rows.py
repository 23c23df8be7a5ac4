#!/usr/bin/env python3
"""What a k-row decode costs at depth, with logits for every row (a verify) and for
the last only (a prompt chunk): the price of each drafted token.

    .venv/bin/python benchmarks/bench_verify_rows.py --model gemma-3-270m --threads 2 --depth 900
    EDGESPEC_FAST_KERNELS=1 .venv/bin/python benchmarks/bench_verify_rows.py   # llama.cpp kernels

Each size is decoded 7 times after the same random depth-token context and rolled
back; the median wall time is printed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from edgespec import LlamaModel, resolve_model

SIZES = (1, 2, 3, 4, 5, 8, 16)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--depth", type=int, default=900)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args()
    m = LlamaModel(resolve_model(args.model), n_ctx=args.depth + 512, n_threads=args.threads)
    rng = np.random.default_rng(0)
    m.decode([int(x) for x in rng.integers(1000, 20000, args.depth)], logits="none")
    base = len(m.tokens)
    for mode in ("all", "last"):
        for k in SIZES:
            times = []
            for _ in range(args.reps):
                tokens = [int(x) for x in rng.integers(1000, 20000, k)]
                t = time.perf_counter()
                m.decode(tokens, logits=mode)
                times.append(time.perf_counter() - t)
                m.truncate(base)
            print(f"logits {mode:>4}, {k:>2} rows: {1e3 * statistics.median(times):6.1f} ms")
    m.close()


if __name__ == "__main__":
    main()
