#!/usr/bin/env python3
"""What window checkpoints save: a reply generated again after a long one, deep in a context.

A prompt of --depth tokens is answered with a long reply (--reply tokens, past what the
window-sized ring can roll back: 512 on Gemma 3), then the same prompt is asked again,
as a chat's "regenerate" or a client's retry does. With checkpoints the second request
restores the copy taken after the first prompt's prefill; without (``checkpoints`` set
to None on the model) it decodes the whole prompt again. One model, the two settings
in turn (A B B A ...), each second request timed over its prompt phase (``prompt_s``:
the rollback and what is decoded again); the greedy replies must be equal.

    .venv/bin/python benchmarks/bench_checkpoints.py --depth 8000 --reps 3 \\
        --json docs/bench/checkpoints.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--depth", type=int, default=8000)
    p.add_argument("--reply", type=int, default=600)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    from edgespec import LlamaModel, ModelPair, resolve_model

    model = LlamaModel(resolve_model(args.model), n_ctx=args.depth + args.reply + 256,
                       n_threads=args.threads)  # fmt: skip
    generate = ModelPair(model, None, history=False).generate  # plain decoding
    kept = model.checkpoints
    if kept is None:
        raise SystemExit(f"{args.model} has no sliding-window layers: nothing to checkpoint")
    tokens = model.tokenize(FILLER * (args.depth // 8))
    prompt, reply = tokens[: args.depth], tokens[args.depth : args.depth + args.reply]
    times: dict[str, list[float]] = {"checkpoints": [], "none": []}
    answers: dict[str, list[int]] = {}
    order = ("checkpoints", "none", "none", "checkpoints") * args.reps
    for setting in order[: 2 * args.reps]:
        model.checkpoints = kept if setting == "checkpoints" else None
        model.reset()
        generate(prompt, max_tokens=1)  # the first request's prefill
        model.decode(reply, logits="last")  # its long reply
        again = generate(prompt, max_tokens=16)
        times[setting].append(again.stats.prompt_s)
        if answers.setdefault(setting, again.tokens) != again.tokens:
            raise SystemExit("greedy replies differ between runs")
    if answers["checkpoints"] != answers["none"]:
        raise SystemExit("greedy replies differ with and without checkpoints")
    med = {k: statistics.median(v) for k, v in times.items()}
    out = {
        "model": args.model,
        "depth": args.depth,
        "reply": args.reply,
        "threads": args.threads,
        "prompt_s": times,
        "median_prompt_s": med,
        "none_over_checkpoints": med["none"] / med["checkpoints"],
        "checkpoint_mib": [round(c.size / 2**20, 2) for c in kept.held],
        "restores": kept.restores,
        "machine": os.popen("uptime").read().strip(),
    }
    print(json.dumps(out, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
