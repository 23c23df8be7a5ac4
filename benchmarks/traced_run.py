"""Run `edgespec ARGS` with tracemalloc on, for the soak's memory trace (issue 35).

    .venv/bin/python benchmarks/traced_run.py OUT serve --target ...

The first SIGUSR1 takes the baseline snapshot; each later one writes to OUT the
Python allocations grown since, largest first, with their tracebacks (what
`benchmarks/bench_soak.py --tracemalloc OUT` does after the first 100 requests and
at the end). It tells Python's own growth from the C heap's, which it cannot see.
"""

from __future__ import annotations

import signal
import sys
import threading
import tracemalloc
from pathlib import Path

FRAMES = 8  # frames kept per allocation
TOP = 12  # allocation sites written


def main() -> int:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    tracemalloc.start(FRAMES)
    baseline: list[tracemalloc.Snapshot] = []

    def on_signal(_signum: int, _frame: object) -> None:
        snap = tracemalloc.take_snapshot()
        if not baseline:
            baseline.append(snap)
            return
        lines = [
            f"traced {tracemalloc.get_traced_memory()[0] / 2**20:.1f} MiB, "
            f"threads {threading.active_count()}"
        ]
        for stat in snap.compare_to(baseline[0], "traceback")[:TOP]:
            lines.append(f"{stat.size_diff / 1024:+.0f} KiB {stat.count_diff:+d} blocks")
            lines += ["    " + ln for ln in stat.traceback.format()[-FRAMES:]]
        out.write_text("\n".join(lines) + "\n")

    signal.signal(signal.SIGUSR1, on_signal)
    from edgespec import main as edgespec

    return edgespec(argv)


if __name__ == "__main__":
    raise SystemExit(main())
