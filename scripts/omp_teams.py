#!/usr/bin/env python3
"""Why every llama_decode runs on one thread: decode cost after other threads decoded.

GNU OpenMP keeps a thread team for every thread that ever started a parallel region;
with more of those threads than cores it stops spinning at barriers (see
edgespec.backend.compute). This times k-row decodes of Gemma 3 270M at the depth of
the code_editing prompt from one thread, then again while N other threads that each
decoded once are still alive (as a parallel server's slot threads are), with
edgespec's compute thread and with each caller decoding on its own thread (the way
it was before: ``--per-caller``), each in a fresh process, alternating.

    .venv/bin/python scripts/omp_teams.py --reps 3        # both ways, 3 processes each
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

SIZES = (1, 8, 16)


def measure(per_caller: bool, others: int, threads: int, model: str) -> dict[str, dict[int, float]]:
    """Median ms per k-row decode, alone and with `others` threads that decoded alive."""
    from edgespec.backend import LlamaModel
    from edgespec.backend import model as backend_model
    from edgespec.bench.workloads import builtin_workloads
    from edgespec.loading import resolve_model

    if per_caller:  # each caller runs its own llama_decode: one OpenMP team per thread

        class _Inline:
            def run(self, fn, *args):
                return fn(*args)

        backend_model.local_compute = lambda: _Inline()
    m = LlamaModel(resolve_model(model), n_ctx=4096, n_threads=threads)
    prompt = m.tokenize(builtin_workloads()["code_editing"].prompt)
    m.decode(prompt, logits="none")
    depth = len(m.tokens)

    def timings() -> dict[int, float]:
        res: dict[int, list[float]] = {k: [] for k in SIZES}
        for _ in range(7):
            for k in SIZES:
                t0 = time.perf_counter()
                m.decode(prompt[100 : 100 + k], logits="all")
                res[k].append((time.perf_counter() - t0) * 1000)
                m.truncate(depth)
        return {k: statistics.median(v) for k, v in res.items()}

    out = {"alone": timings()}
    release = threading.Event()

    def other() -> None:
        m.decode(prompt[10:12], logits="all")
        m.truncate(depth)
        release.wait()

    pool = [threading.Thread(target=other) for _ in range(others)]
    for t in pool:
        t.start()
        time.sleep(0.2)  # one after another: the decodes do not overlap
    out["others_alive"] = timings()
    release.set()
    for t in pool:
        t.join()
    m.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="gemma-3-270m")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--others", type=int, default=3, help="other threads that decode once")
    p.add_argument("--reps", type=int, default=3, help="processes per way")
    p.add_argument("--one", choices=("compute-thread", "per-caller"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        res = measure(args.one == "per-caller", args.others, args.threads, args.model)
        print(json.dumps(res))
        return 0
    rows: dict[str, list[dict]] = {"compute-thread": [], "per-caller": []}
    for _ in range(args.reps):
        for way in rows:
            cmd = [sys.executable, __file__, "--one", way, "--others", str(args.others),
                   "--threads", str(args.threads), "--model", args.model]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            rows[way].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"ms per decode, {args.threads} threads, median of {args.reps} processes (each the"
        f" median of 7); 'alive': after {args.others} other threads decoded"
    )
    print("| way | " + " | ".join(f"{k} rows alone | {k} rows, alive" for k in SIZES) + " |")
    print("|---|" + "---|---|" * len(SIZES))
    for way, runs in rows.items():
        cells = []
        for k in SIZES:
            for phase in ("alone", "others_alive"):
                cells.append(f"{statistics.median(r[phase][str(k)] for r in runs):.1f}")
        print(f"| {way} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
