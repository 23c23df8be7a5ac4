#!/usr/bin/env python3
"""Plain vs speculative decoding, side by side in one process.

Each repetition runs every configuration once, in alternating order, from a cold
KV cache; the table shows medians and the speed-up as the median of per-repetition
ratios to plain decoding (the machine is noisy; ratios taken close in time are
steadier than absolute figures). With --llama-bench, llama.cpp's own tg speed on
the same model and thread count is measured in the same run.

    .venv/bin/python scripts/bench.py --target gemma-3-270m --gammas 0 \
        --max-tokens 128 --reps 5 --llama-bench /path/to/llama-bench
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from edgespec.backend import LlamaModel, default_threads
from edgespec.drafters import ModelDrafter
from edgespec.engine import generate
from edgespec.loading import resolve_model
from edgespec.sampling import SamplingParams

DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def llama_bench_tg(binary: Path, model: Path, n: int, threads: int) -> float:
    """llama.cpp's own token-generation speed (tokens/s) from llama-bench's JSON output."""
    out = subprocess.run(
        [str(binary), "-m", str(model), "-p", "0", "-n", str(n), "-t", str(threads), "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(json.loads(out)[0]["avg_ts"])


def run(args: argparse.Namespace) -> dict:
    target_path = resolve_model(args.target)
    target = LlamaModel(target_path, n_ctx=args.ctx, n_threads=args.threads)
    drafter = None
    if args.draft != "none":
        drafter = ModelDrafter(
            LlamaModel(resolve_model(args.draft), n_ctx=args.ctx, n_threads=args.threads)
        )
    prompt = Path(args.prompt_file).read_text() if args.prompt_file else args.prompt
    sampling = SamplingParams(temperature=args.temperature)
    gammas = [int(g) for g in args.gammas.split(",")]
    if drafter is None:
        gammas = [0]
    results: dict[int, list] = {g: [] for g in gammas}
    llama_tg: list[float] = []
    for rep in range(args.reps):
        order = gammas if rep % 2 == 0 else gammas[::-1]
        for g in order:
            target.reset()
            if drafter is not None:
                drafter.model.reset()
            done = generate(
                target,
                prompt,
                drafter=drafter if g else None,
                max_tokens=args.max_tokens,
                gamma=g,
                sampling=sampling,
                seed=rep,
            )
            results[g].append(done.stats)
        if args.llama_bench:
            llama_tg.append(
                llama_bench_tg(
                    Path(args.llama_bench), target_path, args.max_tokens, target.n_threads
                )
            )
    rows = []
    for g in gammas:
        st = results[g]
        ratios = [
            s.tokens_per_second / p.tokens_per_second
            for s, p in zip(st, results[gammas[0]], strict=True)
        ]
        rows.append(
            {
                "gamma": g,
                "tokens_per_second": statistics.median(s.tokens_per_second for s in st),
                "speedup_vs_first": statistics.median(ratios),
                "acceptance_rate": statistics.median(s.acceptance_rate for s in st),
                "mean_accepted_per_call": statistics.median(s.mean_accepted_per_call for s in st),
                "draft_s": statistics.median(s.draft_s for s in st),
                "verify_s": statistics.median(s.verify_s for s in st),
                "other_s": statistics.median(s.other_s for s in st),
                "generated": statistics.median(s.generated for s in st),
            }
        )
    report = {
        "target": str(target_path),
        "draft": args.draft,
        "threads": target.n_threads,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "reps": args.reps,
        "rows": rows,
        "peak_rss_mib": peak_rss_mib(),
    }
    if llama_tg:
        lt = statistics.median(llama_tg)
        report["llama_bench_tg"] = lt
        report["plain_vs_llama_bench"] = rows[0]["tokens_per_second"] / lt
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--draft", default="none")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--prompt-file")
    p.add_argument("--gammas", default="0,2,4,8", help="comma-separated; the first is the baseline")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--threads", type=int, default=default_threads())
    p.add_argument("--llama-bench", help="path to llama.cpp's llama-bench binary")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args()
    report = run(args)
    print(f"target {report['target']}  draft {report['draft']}  threads {report['threads']}")
    print(
        f"{'gamma':>5} {'tok/s':>8} {'ratio':>6} {'accept':>7} {'tok/call':>8} "
        f"{'draft_s':>8} {'verify_s':>8} {'other_s':>8}"
    )
    for r in report["rows"]:
        print(
            f"{r['gamma']:>5} {r['tokens_per_second']:>8.1f} {r['speedup_vs_first']:>6.2f} "
            f"{r['acceptance_rate']:>7.2f} {r['mean_accepted_per_call']:>8.2f} "
            f"{r['draft_s']:>8.3f} {r['verify_s']:>8.3f} {r['other_s']:>8.3f}"
        )
    if "llama_bench_tg" in report:
        print(
            f"llama-bench tg{args.max_tokens}: {report['llama_bench_tg']:.1f} tok/s; "
            f"edgespec plain / llama-bench = {report['plain_vs_llama_bench']:.3f}"
        )
    print(f"peak RSS {report['peak_rss_mib']:.0f} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
