"""``edgespec calibrate``: measure (or show the cached) cost curves the adaptive policy uses."""

from __future__ import annotations

import argparse
import json

from ..loading import load_pair
from ..policy.costs import (
    ORIGIN_PENDING,
    ORIGIN_UNWRITABLE,
    calibration_file,
    curve_origin,
    load_or_measure,
)
from .options import add_model_options, load_options


def register(sub: argparse._SubParsersAction) -> None:
    """Add the calibrate subcommand."""
    p = sub.add_parser(
        "calibrate",
        help="measure verify/draft costs on this machine",
        description="Measure the target's verify-cost curve (one call on 1, 2, ... tokens) "
        "and a draft model's step cost on this machine and thread count, or show the "
        "cached ones; --gamma auto chooses each round's draft length from them.",
    )
    add_model_options(p, rpc=True)
    p.add_argument("--refresh", action="store_true", help="measure again, ignoring the cache")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print the target's verify-cost curve and the draft model's step cost."""
    target, drafter = load_pair(args.target, args.draft, load_options(args))
    curves = {"target": load_or_measure(target, refresh=args.refresh)}
    draft_model = drafter.model if drafter is not None else None
    if draft_model is not None:
        curves["draft"] = load_or_measure(draft_model, max_k=2, refresh=args.refresh)
    if args.json:
        out = {
            name: {
                "model": c.model,
                "seconds": list(c.seconds),
                "ratios": c.ratios(),
                "timed": list(c.timed_sizes()),
                "noisy": c.noisy,
                "cached": curve_origin(c) not in (ORIGIN_PENDING, ORIGIN_UNWRITABLE),
                "origin": curve_origin(c),
            }
            for name, c in curves.items()
        }
        print(json.dumps({"cache": str(calibration_file()), "threads": target.n_threads, **out}))
        return 0
    t = curves["target"]
    print(f"target {t.model}, {target.n_threads} threads (cache: {calibration_file()})")
    print(f"{'k':>3} {'ms':>8} {'x one token':>12}  (timed sizes; the others are interpolated)")
    timed = set(t.timed_sizes())
    for k, (sec, ratio) in enumerate(zip(t.seconds, t.ratios(), strict=True), start=1):
        if k in timed:
            print(f"{k:>3} {sec * 1000:>8.2f} {ratio:>12.2f}")
    for name, c in curves.items():
        print(f"{name}: {curve_origin(c)}")
    if "draft" in curves:
        d = curves["draft"]
        print(
            f"draft {d.model}: {d.cost(1) * 1000:.2f} ms per token "
            f"({d.cost(1) / t.cost(1):.2f}x a target token)"
        )
    return 0
