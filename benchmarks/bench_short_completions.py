#!/usr/bin/env python3
"""Short code completions in a row: a fresh adaptive policy per request vs one carried.

An editor asks for many short completions (20-60 tokens), each too short for the
adaptive policy to learn in. `edgespec serve` therefore keeps one policy per session.
This replays that: completions cut after the docstrings of edgespec's own functions,
greedy, n-gram drafting, each decoded three ways in one process (plain, a fresh
policy per request, one policy for all), and prints decode time ratios to plain.

    .venv/bin/python benchmarks/bench_short_completions.py --threads 2 --reps 2
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from edgespec import LlamaModel, ModelPair, NgramDrafter, make_policy, resolve_model

SOURCES = ("policy/adaptive.py", "policy/costs.py", "completion/codestop.py",
           "modelstore/store.py", "modelstore/hub.py")  # fmt: skip
# a def line (possibly wrapped), then a one-line docstring: the completion starts after it
CUT = re.compile(r'^( *)def \w+\(.*\n(?:.*\n)*?\1    """.*"""\n', re.M)


def prompts(per_file: int = 2) -> list[str]:
    """The source of each file up to the end of a function's docstring (2nd and 3rd)."""
    root = Path(__file__).resolve().parent.parent / "edgespec"
    out = []
    for name in SOURCES:
        src = (root / name).read_text()
        out += [src[: m.end()] for m in list(CUT.finditer(src))[1 : 1 + per_file]]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=48)
    args = p.parse_args()
    target = LlamaModel(resolve_model(args.model), n_ctx=4096, n_threads=args.threads)
    texts = prompts()
    print(f"{len(texts)} completions of up to {args.max_tokens} tokens, {args.threads} threads")
    for rep in range(args.reps):
        seconds = {"plain": 0.0, "fresh policy": 0.0, "one policy": 0.0}
        carried = None
        tokens = 0
        for text in texts:
            for config in seconds:
                target.reset()
                drafter = NgramDrafter()
                if config == "plain":
                    done = ModelPair(target, None, history=False).generate(
                        text, max_tokens=args.max_tokens
                    )
                    tokens += done.stats.generated
                else:
                    if config == "fresh policy":
                        policy = make_policy(target, drafter)
                    else:
                        carried = carried or make_policy(target, drafter)
                        policy = carried
                    done = ModelPair(target, drafter, history=False).generate(
                        text, max_tokens=args.max_tokens, gamma=policy
                    )
                seconds[config] += done.stats.decode_s
        ratios = "  ".join(f"{k}: {seconds['plain'] / v:.3f}x" for k, v in seconds.items())
        print(f"rep {rep + 1}: {tokens} tokens  {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
