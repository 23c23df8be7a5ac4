"""Where a reply's time goes through RPC workers: each target call's rows and seconds.

Starts two ``edgespec worker`` processes (1 thread each) behind latency proxies of
--delay-ms each way (as benchmarks/bench_rpc.py does), loads the target through them,
times the cost curve (at the calibration's depth), then runs plain decoding and n-gram
gamma auto on the code_editing workload in turn, --reps times, and prints every target
call's rows and milliseconds: what a k-row verify costs at the reply's own depth, and
so the most speculation can give there (issue 20).

    .venv/bin/python benchmarks/rpc_rounds.py --delay-ms 5 --reps 2
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_rpc  # noqa: E402  (benchmarks/ is not a package)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--delay-ms", type=float, default=5.0, help="one-way delay per message")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=2)
    args = p.parse_args(argv)
    os.environ["EDGESPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="edgespec-rpc-rounds-")
    from latency_proxy import LatencyProxy

    from edgespec import (
        ModelPair,
        SamplingParams,
        build_drafter,
        builtin_workloads,
        load,
        render_workload,
        resolve_model,
    )

    print(bench_rpc.uptime())
    log_dir = Path(tempfile.mkdtemp(prefix="edgespec-rpc-rounds-workers-"))
    workers = [bench_rpc.start_worker(log_dir, 1) for _ in range(2)]
    proxies = [LatencyProxy(ep, args.delay_ms).start() for _, ep in workers]
    target = None
    try:
        target = load(args.target, "none", n_threads=1, rpc=[px.address for px in proxies]).target
        curve = bench_rpc.measure_pass_costs(target, 2)
        sizes = [k for k in (1, 2, 4, 8, 16, 32, 48) if k <= len(curve.seconds)]
        print("curve, ms:",
              {k: round(curve.cost(k) * 1000) for k in sizes})  # fmt: skip
        drafter = build_drafter(target, "ngram", resolve=resolve_model, n_ctx=target.n_ctx)
        work = render_workload(target, builtin_workloads()["code_editing"])
        calls: list[tuple[int, float]] = []
        decode = target.decode

        def timed(tokens, *, logits="last"):
            t0 = time.perf_counter()
            out = decode(tokens, logits=logits)
            calls.append((len(tokens), time.perf_counter() - t0))
            return out

        target.decode = timed  # type: ignore[method-assign]
        for _ in range(args.reps):
            for gamma in (0, "auto"):
                calls.clear()
                pair = ModelPair(target, drafter if gamma else None, history=False)
                done = pair.generate(work.prompt, max_tokens=args.max_tokens,
                                     sampling=SamplingParams(temperature=0), gamma=gamma,
                                     seed=1)  # fmt: skip
                s = done.stats
                name = "ngram auto" if gamma else "plain"
                print(f"{name}: {s.tokens_per_second:.1f} tok/s, {s.target_calls} target calls, "
                      f"prompt {s.prompt_tokens} tokens")  # fmt: skip
                decodes = calls[1:] if s.prompt_cached < s.prompt_tokens - 1 else calls
                if gamma:
                    print("  calls (rows, ms):", [(n, round(t * 1000)) for n, t in decodes])
                else:
                    ms = sorted(t * 1000 for _, t in decodes)
                    print(f"  one-row calls: median {ms[len(ms) // 2]:.0f} ms")
    finally:
        bench_rpc.stop_all([target], proxies, workers)
    print(bench_rpc.uptime())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
