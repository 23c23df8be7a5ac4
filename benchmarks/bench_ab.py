#!/usr/bin/env python3
"""Paired A/B of gamma auto between this checkout and an earlier commit, on chosen texts.

A corpus run judges one version of the policy; comparing two runs taken on different
days mixes the change with the machine's speed (plain tok/s moved 30% between days
here). This runs `edgespec bench --gammas auto --reps 1` on the same texts from each
tree in turn (A B, B A, A B, ...), each run timing plain and auto in one process, so
each text's auto / plain is a ratio taken minutes apart in both arms, and prints per
text the median ratio of each arm and their quotient.

    .venv/bin/python benchmarks/bench_ab.py --before 7473a76~1 --pairs 3 \\
        --texts code-calendar,summarise-man-find,edit-gettext --json ab.json

The earlier commit is checked out with `git worktree` under /tmp and run with this
checkout's .venv, its editable install pointed at the worktree for that process, so
the earlier commit must not need other packages than this one.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AUTO = "ngram auto"


def worktree(rev: str) -> Path:
    """A detached checkout of rev under /tmp (made once, reused)."""
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"edgespec-ab-{sha}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), sha], cwd=ROOT, check=True)
    return path


def pick_texts(corpus: Path, names: list[str], into: Path) -> None:
    """Copy the named workloads (by file stem) from corpus into the folder into."""
    files = {p.stem: p for p in corpus.rglob("*.toml")}
    missing = [n for n in names if n not in files]
    if missing:
        sys.exit(f"bench_ab: not in {corpus}: {', '.join(missing)}")
    for n in names:
        shutil.copy(files[n], into / f"{n}.toml")


def run_arm(tree: Path, corpus: Path, threads: int, out: Path) -> dict[str, float]:
    """One bench run from tree: each text's auto / plain."""
    # the .venv's editable install maps edgespec (and its tui, models) to this checkout:
    # point its mapping at tree instead, so that tree's sources are imported
    code = (
        "import sys\n"
        "for f in sys.meta_path:\n"
        "    m = sys.modules.get(getattr(f, '__module__', ''))\n"
        "    for k, v in list(getattr(m, 'MAPPING', {}).items()):\n"
        f"        m.MAPPING[k] = v.replace({str(ROOT)!r}, {str(tree)!r}, 1)\n"
        # the edgespec command as its script finds it (an earlier tree may lack later names)
        "from importlib.metadata import entry_points\n"
        "sys.exit(entry_points(group='console_scripts')['edgespec'].load()())\n"
    )
    cmd = [
        sys.executable, "-c", code,
        "bench", "--corpus", str(corpus), "--split", "all", "--gammas", "auto",
        "--reps", "1", "--threads", str(threads), "--json", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    report = json.loads(out.read_text())
    return {n: w["configs"][AUTO]["speedup"] for n, w in report["workloads"].items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the earlier commit (arm A)")
    ap.add_argument("--texts", required=True, help="comma-separated workload names")
    ap.add_argument("--corpus", type=Path, default=ROOT / "build" / "corpus")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write every run's ratios here")
    args = ap.parse_args()
    trees = {"before": worktree(args.before), "after": ROOT}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "texts"
        corpus.mkdir()
        pick_texts(args.corpus, args.texts.split(","), corpus)
        for i in range(args.pairs):
            order = ("before", "after") if i % 2 == 0 else ("after", "before")
            for arm in order:
                got = run_arm(trees[arm], corpus, args.threads, Path(tmp) / f"{arm}-{i}.json")
                runs[arm].append(got)
                print(f"pair {i + 1} {arm:6s} " + " ".join(f"{v:.2f}" for v in got.values()))
    names = list(runs["after"][0])
    print(f"{'text':36s} {'before':>8s} {'after':>8s} {'after/before':>13s}  (auto/plain, median)")
    quotients = []
    for n in names:
        b = statistics.median(r[n] for r in runs["before"])
        a = statistics.median(r[n] for r in runs["after"])
        quotients.append(a / b)
        print(f"{n:36s} {b:8.3f} {a:8.3f} {a / b:13.3f}")
    gmean = math.exp(statistics.mean(math.log(q) for q in quotients))
    print(f"geometric mean after/before: {gmean:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), **runs}, indent=1))


if __name__ == "__main__":
    main()
