#!/usr/bin/env python3
"""Decoding speed on a busy machine: alone, beside N busy cores (`yes > /dev/null`,
started here), and two edgespec processes decoding at once; for llama.cpp's OpenMP
threads spinning 3,000 times at a barrier before they sleep (edgespec's default,
``spin3k``), sleeping at once (``passive``), and libgomp's own spin of 300,000
(``spin``) or 30,000 (``spin30k``).

Each figure is plain greedy decoding's tokens/s in a fresh process (the policy is read
when llama.cpp loads), the scenarios alternating within each repetition; ratios are to
the same policy's quiet figure of that repetition.

    .venv/bin/python benchmarks/bench_neighbour.py --reps 5 --json docs/bench/neighbour.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

#: edgespec's default is spin3k; passive sleeps at once; spin is libgomp's own default
POLICIES = {"spin3k": {}, "passive": {"OMP_WAIT_POLICY": "passive"},
            "spin": {"GOMP_SPINCOUNT": "300000"}, "spin30k": {"GOMP_SPINCOUNT": "30000"}}
PROMPT = "The history of the printing press begins"


def worker(model: str, threads: int, tokens: int) -> None:
    """Print this process's plain decoding speed (tokens/s) as JSON."""
    from edgespec import LlamaModel, ModelPair, resolve_model

    target = LlamaModel(str(resolve_model(model)), n_ctx=1024, n_threads=threads)
    plain = ModelPair(target, None, history=False)
    plain.generate(PROMPT, max_tokens=8)  # warm
    target.reset()
    done = plain.generate(PROMPT, max_tokens=tokens)
    print(json.dumps({"tps": done.stats.generated / done.stats.decode_s}), flush=True)


def _spawn(policy: str, args: argparse.Namespace) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(POLICIES[policy])
    cmd = [sys.executable, __file__, "--worker", "--model", args.model,
           "--threads", str(args.threads), "--tokens", str(args.tokens)]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)  # fmt: skip


def _tps(p: subprocess.Popen) -> float:
    out, _ = p.communicate(timeout=600)
    return float(json.loads(out.strip().splitlines()[-1])["tps"])


def run(policy: str, scenario: str, args: argparse.Namespace) -> float:
    """tokens/s of one process (the mean of the two in "two")."""
    hogs = []
    if scenario.startswith("load"):
        hogs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
                for _ in range(int(scenario[4:]))]  # fmt: skip
        time.sleep(0.5)
    try:
        procs = [_spawn(policy, args) for _ in range(2 if scenario == "two" else 1)]
        return statistics.mean(_tps(p) for p in procs)
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scenarios", default="quiet,load1,two")
    ap.add_argument("--policies", default="spin3k,passive,spin")
    ap.add_argument("--json", help="append the report to this JSON-lines file")
    args = ap.parse_args()
    if args.worker:
        worker(args.model, args.threads, args.tokens)
        return
    scenarios, policies = args.scenarios.split(","), args.policies.split(",")
    tps: dict[str, dict[str, list[float]]] = {p: {s: [] for s in scenarios} for p in policies}
    for rep in range(args.reps):
        cells = [(p, s) for s in scenarios for p in policies]
        k = rep % len(cells)
        for p, s in cells[k:] + cells[:k]:
            tps[p][s].append(run(p, s, args))
            print(f"rep {rep} {p:8s} {s:6s} {tps[p][s][-1]:6.1f} tok/s", flush=True)
    report = {"model": args.model, "threads": args.threads, "reps": args.reps,
              "load_before": os.getloadavg()[0], "policies": {}}  # fmt: skip
    for p in policies:
        row = {}
        for s in scenarios:
            xs = tps[p][s]
            row[s] = {"median_tps": round(statistics.median(xs), 2),
                      "min": round(min(xs), 2), "max": round(max(xs), 2)}  # fmt: skip
            if s != "quiet" and "quiet" in scenarios:
                ratios = [a / q for a, q in zip(xs, tps[p]["quiet"], strict=True)]
                row[s]["vs_quiet"] = {"median": round(statistics.median(ratios), 3),
                                      "min": round(min(ratios), 3),
                                      "max": round(max(ratios), 3)}  # fmt: skip
        report["policies"][p] = row
        print(p, json.dumps(row))
    for p in policies:
        if p != "spin" and "spin" in policies and "quiet" in scenarios:
            r = [a / b for a, b in zip(tps[p]["quiet"], tps["spin"]["quiet"], strict=True)]
            report[f"quiet_{p}_over_spin"] = {"median": round(statistics.median(r), 3),
                                              "min": round(min(r), 3), "max": round(max(r), 3)}
            print(f"quiet: {p} / spin", report[f"quiet_{p}_over_spin"])
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
