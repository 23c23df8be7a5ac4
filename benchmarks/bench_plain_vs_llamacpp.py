#!/usr/bin/env python3
"""edgespec's plain decoding against llama.cpp's own `llama-bench` tg, at depth.

For each thread count and context depth D, edgespec decodes N tokens one at a time
after a D-token prompt, and `llama-bench -n N -d D` does the same, alternating, with
repetitions (each run a fresh process). The goal compares edgespec as it ships with
llama-bench as llama.cpp ships (its default settings). Two more configurations
split the difference into its causes:

- ``edgespec``: edgespec's default, exact mode (no weight repacking, no tiled K-quant
  matmul, BF16 keys and F16 values in the KV cache, a full-size sliding-window cache;
  edgespec/backend/kernels.py).
- ``llama``: llama-bench with llama.cpp's defaults (F16 cache, repacking, auto flash
  attention, a sliding-window cache of window + ubatch cells); the baseline.
- ``llama-norepack``: llama-bench with weight repacking off, all else default: the
  baseline on Intel CPUs with AMX, where llama.cpp's repacked matmul crashes on the
  first batch of two or more tokens (llama.cpp issue 20824; ``--baseline llama-norepack``).
- ``llama-exact``: llama-bench with edgespec's kernel settings: what the kernels cost
  in llama.cpp itself.
- ``edgespec-fast``: edgespec with EDGESPEC_FAST_KERNELS=1 (llama.cpp's kernels, F16
  cache and window-sized sliding-window cache): what is left is edgespec's own loop.

    .venv/bin/python benchmarks/bench_plain_vs_llamacpp.py \
        --llama-bench /tmp/llama-bin/llama-bench \
        --model gemma-3-270m --threads 1,2 --depths 0,2000,8000,16000 --reps 2 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {
    # name: (side, environment, llama-bench flags)
    "edgespec": ("edgespec", {}, []),
    "llama": ("llama", {}, []),
    "llama-norepack": ("llama", {}, ["--repack", "0"]),
    "llama-exact": (
        "llama",
        {"GGML_CPU_TILED_MM": "0"},
        ["--repack", "0", "-ctk", "bf16", "-ctv", "f16"],
    ),
    "edgespec-fast": ("edgespec", {"EDGESPEC_FAST_KERNELS": "1"}, []),
}
BASELINE = "llama"
FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "


def edgespec_tg(model: str, n: int, depth: int, threads: int, env: dict[str, str]) -> float:
    """Tokens/s of edgespec's plain decoding after a depth-token prompt (a fresh process,
    so the kernel mode applies; prompt processing excluded, as llama-bench's -d)."""
    code = (
        "import sys, json\n"
        "from edgespec import LlamaModel, ModelPair, resolve_model\n"
        f"m = LlamaModel(resolve_model({model!r}), n_ctx={depth + n + 256}, n_threads={threads})\n"
        "generate = ModelPair(m, None, history=False).generate\n"  # plain decoding
        "bos = m.vocab_info().bos\n"
        f"filler = m.tokenize({FILLER!r} * {depth // 10 + 1})\n"
        f"prompt = ([bos] + filler)[: max(1, {depth})]\n"
        "generate([bos], max_tokens=16)\n"  # warm-up, as llama-bench does
        "m.reset()\n"
        f"d = generate(prompt, max_tokens={n})\n"
        "print(json.dumps([d.stats.tokens_per_second, d.stats.generated]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"edgespec run failed: {out.stderr.strip().splitlines()[-1:]}")
    tps, generated = json.loads(out.stdout.strip().splitlines()[-1])
    if generated < n:
        print(f"  (edgespec stopped after {generated} of {n} tokens)", file=sys.stderr)
    return float(tps)


def llama_bench_tg(binary: str, path: str, n: int, depth: int, threads: int, env, flags) -> float:
    """llama-bench's tg tokens/s at depth (one repetition: the script alternates)."""
    cmd = [binary, "-m", path, "-p", "0", "-n", str(n), "-d", str(depth), "-t", str(threads)]
    cmd += ["-r", "1", "-o", "json", *flags]
    out = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"llama-bench failed: {out.stderr.strip().splitlines()[-1:]}")
    return float(json.loads(out.stdout)[0]["avg_ts"])


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            names = (ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
            return next(names, "?")
    except OSError:
        return "?"


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", default=str(os.cpu_count() or 1), help="comma-separated")
    p.add_argument("--depths", default="0,900,2000", help="comma-separated context depths")
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"of {', '.join(CONFIGS)}")
    p.add_argument("--baseline", default=BASELINE, help="the configuration ratios are to")
    p.add_argument("--json", help="write every run and the ratios here")
    args = p.parse_args()
    configs = args.configs.split(",")
    if args.baseline not in configs or any(c not in CONFIGS for c in configs):
        raise SystemExit(f"--configs: names of {', '.join(CONFIGS)}, including {args.baseline}")
    from edgespec import resolve_model

    path = str(resolve_model(args.model))
    loads = [os.getloadavg()[0]]
    rows = []
    print(
        "threads  depth  "
        + "  ".join(f"{c:>14}" for c in configs)
        + f"   (tok/s, ratio to {args.baseline})"
    )
    for threads in _ints(args.threads):
        for depth in _ints(args.depths):
            runs: dict[str, list[float]] = {c: [] for c in configs}
            for rep in range(args.reps):
                order = configs if rep % 2 == 0 else configs[::-1]  # A B ... B A
                for c in order:
                    side, env, flags = CONFIGS[c]
                    if side == "edgespec":
                        tps = edgespec_tg(args.model, args.n, depth, threads, env)
                    else:
                        tps = llama_bench_tg(
                            args.llama_bench, path, args.n, depth, threads, env, flags
                        )
                    runs[c].append(tps)
                loads.append(os.getloadavg()[0])
            base = runs[args.baseline]
            ratio = {
                c: statistics.median(a / b for a, b in zip(runs[c], base, strict=True))
                for c in configs
            }
            rows.append({"threads": threads, "depth": depth, "runs": runs, "ratio": ratio})
            cells = [f"{statistics.median(runs[c]):6.1f} {ratio[c]:.3f}x" for c in configs]
            print(f"{threads:>7}  {depth:>5}  " + "  ".join(f"{x:>14}" for x in cells), flush=True)
    spread = max((max(v) - min(v)) / statistics.median(v) for r in rows for v in r["runs"].values())
    print(
        f"1-minute load average {min(loads):.2f}-{max(loads):.2f}; "
        f"largest spread of one configuration's tok/s across repetitions {100 * spread:.0f}%"
    )
    if args.json:
        report = {
            "model": args.model,
            "baseline": args.baseline,
            "cpu": _cpu_name(),
            "n": args.n,
            "reps": args.reps,
            "loads": loads,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": rows,
        }
        with open(args.json + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
