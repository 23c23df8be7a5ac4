"""RTT sweep: the target on two RPC workers behind latency proxies, each drafter against
plain decoding through the same workers (issue 20).

Starts two ``edgespec worker`` processes on free loopback ports (1 thread each), puts
a ``LatencyProxy`` in front of each (in this process, so that its delay can change),
loads the target once through the proxies and every drafter once locally, then for
each one-way delay D (``--delays``, ms; the round trip is 2 D) measures the target's
cost curve anew (gamma auto plans with what a pass costs at that D; the cache key
names the endpoints, not the delay, so each D is measured, not reused) and runs
plain and each configuration, alternating their order every repetition; medians.

    .venv/bin/python benchmarks/bench_rpc.py --json docs/bench/rpc-sweep.json \
        --chart docs/bench/rpc-sweep.png

Drafters: the n-gram lookup; a requantized same-vocabulary draft of the target
(made with ``edgespec quantize --pure`` if --same-vocab-draft is missing); a model
with another vocabulary (SmolLM2 135M, cross-vocabulary drafting).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SAME = Path(tempfile.gettempdir()) / "gemma-3-270m-q4_0-pure.gguf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(log_dir: Path, threads: int) -> tuple[subprocess.Popen, str]:
    from edgespec import unanswering_rpc_workers

    port = free_port()
    log = (log_dir / f"worker-{port}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "worker", "--port", str(port)]
        + ["--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    endpoint = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if not unanswering_rpc_workers([endpoint], timeout=2.0):
            return proc, endpoint
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"worker on {endpoint} did not start")
        time.sleep(0.1)


def ensure_same_vocab_draft(path: Path, target: str) -> None:
    if path.exists():
        return
    cmd = [sys.executable, "-m", "edgespec", "quantize", target, str(path)]
    subprocess.run(cmd + ["--type", "Q4_0", "--pure"], check=True)


def stop_all(models: list, proxies: list, workers: list) -> None:
    """Close the models (None ones skipped), then the proxies, then the workers: the
    models first, since freeing one loaded through the workers talks to them."""
    for model in models:
        if model is not None:
            model.close()
    for px in proxies:
        px.close()
    for proc, _ in workers:
        proc.kill()
        proc.wait()


def start_serve(command: list[str]) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    """Start an `edgespec serve ... --port 0` command line; it and its address once it
    serves (its stderr drained from then on)."""
    serve = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert serve.stderr is not None
    for line in serve.stderr:
        if "serving" in line and " on http://" in line:
            host, port = line.rsplit("http://", 1)[1].strip().rsplit(":", 1)
            break
    else:
        raise SystemExit("serve did not start")
    threading.Thread(target=lambda: [None for _ in serve.stderr], daemon=True).start()
    return serve, (host, int(port))


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def run_one(target, drafter, workload, gamma, max_tokens: int, seed: int) -> dict:
    from edgespec import ModelPair, SamplingParams

    if drafter is not None and drafter.model is not None:
        drafter.model.reset()  # no state from an earlier run (as the bench does)
    done = ModelPair(target, drafter, history=False).generate(
        workload.prompt,
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=workload.temperature),
        gamma=gamma,
        seed=seed,
    )
    s = done.stats
    return {
        "tokens_per_second": s.tokens_per_second,
        "generated": s.generated,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "rounds": s.rounds,
        "target_calls": s.target_calls,
        "draft_s": s.draft_s,
        "verify_s": s.verify_s,
    }


def summarise(runs: list[dict], plain_tps: float | None) -> dict:
    tps = statistics.median(r["tokens_per_second"] for r in runs)
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    calls = sum(r["target_calls"] for r in runs)
    out = {
        "tokens_per_second": tps,
        "tokens_per_second_all": [r["tokens_per_second"] for r in runs],
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "tokens_per_target_call": sum(r["generated"] for r in runs) / calls if calls else 0.0,
        "gamma_mean": drafted / sum(r["rounds"] for r in runs) if drafted else 0.0,
        "draft_s": statistics.median(r["draft_s"] for r in runs),
        "verify_s": statistics.median(r["verify_s"] for r in runs),
    }
    if plain_tps:
        out["speedup"] = tps / plain_tps
    return out


def measure_pass_costs(target, reps: int):
    """The target's cost curve at the current delay, made the one gamma auto plans with
    (what ``load_or_measure(refresh=True)`` does, with fewer repetitions)."""
    from edgespec import measure_curve, use_curve

    curve = measure_curve(target, reps=reps)
    use_curve(curve)
    return curve


def write_chart(report: dict, path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        print("no matplotlib: no chart", file=sys.stderr)
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["workloads"])
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.2), squeeze=False)
    keys = report["delays_ms"]
    delays = [float(d) for d in keys]
    for ax, wname in zip(axes[0], names, strict=True):
        labels = report["workloads"][wname]["configs"]
        for label in labels:
            if label == "plain":
                continue
            ys = [report["results"][d][wname][label].get("speedup", 0.0) for d in keys]
            ax.plot(delays, ys, marker="o", label=label)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        temp = report["workloads"][wname]["temperature"]
        ax.set_title(f"{wname} (T={temp:g}), {report['target']} on 2 RPC workers")
        ax.set_xlabel("one-way delay D per worker (ms; RTT = 2 D)")
        ax.set_ylabel("speed-up over plain through the same workers")
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xticks(delays, [f"{d:g}" for d in delays])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="gemma-3-270m")
    p.add_argument("--same-vocab-draft", type=Path, default=DEFAULT_SAME)
    p.add_argument("--cross-vocab-draft", default="smollm2-135m-instruct")
    p.add_argument("--delays", default="0,1,5,20", help="one-way delays D in ms")
    p.add_argument(
        "--gammas", default="2,4,8", help='fixed gammas for the same-vocab draft ("": none)'
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="client and each worker")
    p.add_argument(
        "--calibration-reps", type=int, default=2, help="repetitions of each size of the curve"
    )
    p.add_argument("--json", type=Path)
    p.add_argument("--from-json", type=Path, help="do not run: print and chart a saved report")
    p.add_argument("--chart", type=Path)
    args = p.parse_args(argv)
    import signal

    def stop(signum, frame):  # a SIGTERM stops the workers too (the finally below)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    if args.from_json:
        report = json.loads(args.from_json.read_text())
        print_table(report)
        if args.chart:
            write_chart(report, args.chart)
        return 0

    # curves of this run only: the endpoints are this run's ports
    os.environ["EDGESPEC_CACHE_DIR"] = tempfile.mkdtemp(prefix="edgespec-bench-rpc-")
    from latency_proxy import LatencyProxy

    from edgespec import build_drafter, builtin_workloads, load, render_workload, resolve_model

    delays = [float(d) for d in args.delays.split(",")]
    gammas = [int(g) for g in args.gammas.split(",") if g.strip()]  # "": auto only
    ensure_same_vocab_draft(args.same_vocab_draft, args.target)
    load_before = uptime()
    log_dir = Path(tempfile.mkdtemp(prefix="edgespec-bench-rpc-workers-"))
    workers = [start_worker(log_dir, args.threads) for _ in range(2)]
    proxies = [LatencyProxy(ep, 0).start() for _, ep in workers]
    t_start = time.monotonic()
    target, drafters = None, {}
    try:
        target = load(
            args.target, "none", n_threads=args.threads, rpc=[px.address for px in proxies]
        ).target
        same = str(args.same_vocab_draft)
        drafters = {
            "ngram": build_drafter(target, "ngram", resolve=resolve_model, n_ctx=target.n_ctx),
            same: build_drafter(
                target, same, resolve=resolve_model, n_ctx=target.n_ctx, n_threads=args.threads
            ),
            args.cross_vocab_draft: build_drafter(
                target,
                args.cross_vocab_draft,
                resolve=resolve_model,
                n_ctx=target.n_ctx,
                n_threads=args.threads,
            ),
        }
        qname = f"{Path(same).stem}"
        xname = args.cross_vocab_draft
        by_name = builtin_workloads()
        # code editing (greedy): every drafter; chat (T=0.7): the model drafters
        plan = {
            "code_editing": [("plain", None, 0), ("ngram auto", "ngram", "auto")]
            + [(f"{qname} auto", same, "auto")]
            + [(f"{qname} g={g}", same, g) for g in gammas]
            + [(f"{xname} auto", xname, "auto")],
            "chat": [("plain", None, 0), (f"{qname} auto", same, "auto")]
            + [(f"{qname} g={g}", same, g) for g in gammas]
            + [(f"{xname} auto", xname, "auto")],
        }
        workloads = {n: render_workload(target, by_name[n]) for n in plan}
        results: dict[str, dict] = {}
        curves: dict[str, list[float]] = {}
        for d in delays:
            for px in proxies:
                px.delay = d / 1000.0
            t0 = time.monotonic()
            curve = measure_pass_costs(target, args.calibration_reps)
            curves[f"{d:g}"] = list(curve.seconds)
            print(
                f"D={d:g} ms: cost curve in {time.monotonic() - t0:.0f} s; one token "
                f"{curve.cost(1) * 1e3:.0f} ms, 8 {curve.cost(8) * 1e3:.0f} ms",
                file=sys.stderr,
                flush=True,
            )
            results[f"{d:g}"] = {}
            for wname, configs in plan.items():
                w = workloads[wname]
                runs: dict[str, list[dict]] = {c[0]: [] for c in configs}
                for rep in range(args.reps):
                    order = configs if rep % 2 == 0 else configs[::-1]
                    for label, dname, gamma in order:
                        drafter = drafters[dname] if dname is not None else None
                        r = run_one(target, drafter, w, gamma, args.max_tokens, rep)
                        runs[label].append(r)
                        print(
                            f"  D={d:g} {wname} rep {rep + 1} {label:<34} "
                            f"{r['tokens_per_second']:6.1f} tok/s",
                            file=sys.stderr,
                            flush=True,
                        )
                plain = statistics.median(r["tokens_per_second"] for r in runs["plain"])
                results[f"{d:g}"][wname] = {
                    label: summarise(rs, None if label == "plain" else plain)
                    for label, rs in runs.items()
                }
    finally:
        models = [dr.model for dr in drafters.values() if dr is not None]
        stop_all([*models, target], proxies, workers)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "target": args.target,
        "same_vocab_draft": same,
        "cross_vocab_draft": xname,
        "threads": args.threads,
        "workers": 2,
        "delays_ms": [f"{d:g}" for d in delays],
        "delay_meaning": "one-way delay per message each direction (RTT = 2 D)",
        "max_tokens": args.max_tokens,
        "reps": args.reps,
        "load_before": load_before,
        "load_after": uptime(),
        "wall_s": time.monotonic() - t_start,
        "workloads": {
            n: {"temperature": workloads[n].temperature, "configs": [c[0] for c in cs]}
            for n, cs in plan.items()
        },
        "cost_curves_s": curves,
        "results": results,
    }
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    if args.chart:
        write_chart(report, args.chart)
    return 0


def print_table(report: dict) -> None:
    print("| workload | config | " + " | ".join(f"D={d} ms" for d in report["delays_ms"]) + " |")
    print("|---|---|" + "---|" * len(report["delays_ms"]))
    for wname, w in report["workloads"].items():
        for label in w["configs"]:
            cells = []
            for d in report["delays_ms"]:
                r = report["results"][d][wname][label]
                if label == "plain":
                    cells.append(f"{r['tokens_per_second']:.1f} tok/s")
                else:
                    cells.append(
                        f"{r['tokens_per_second']:.1f} ({r['speedup']:.2f}x, "
                        f"acc {r['acceptance_rate']:.0%})"
                    )
            print(f"| {wname} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
