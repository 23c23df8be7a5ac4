"""``edgespec bench --load N``: the measurement beside N busy processes it starts itself.

Each busy process is a Python loop on one core, as ``yes > /dev/null`` is (the load
benchmarks/bench_neighbour.py measured against): on a machine whose cores are taken,
what the speed-ups are (docs/benchmarks.md, "A busy machine"). They are killed when the
run ends, also on Ctrl-C or an error; a busy process whose parent died without killing
it (SIGKILL) sees that within milliseconds and exits too.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from types import TracebackType
from typing import Any

from ..errors import EdgespecError
from ..params import check_whole

MAX_LOAD = 256  # busy processes at most

# exits once its parent (argv[1]: it may be gone before this starts) is gone, reparented
BUSY_LOOP = (
    "import os, sys\n"
    "parent = int(sys.argv[1])\n"
    "while os.getppid() == parent:\n"
    "    for _ in range(100_000):\n"
    "        pass\n"
)


def check_load(value: object) -> int:
    """Busy processes beside the measurement: a whole number from 0 to MAX_LOAD."""
    return check_whole(value, name="load", minimum=0, maximum=MAX_LOAD)


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):  # (not on every platform)
        return None


class BusyLoad:
    """A context manager: ``n`` busy processes while the block runs, none after it."""

    def __init__(self, n: int) -> None:
        self.n = check_load(n)
        self.processes: list[subprocess.Popen[bytes]] = []
        self.load_before: list[float] | None = None

    def __enter__(self) -> BusyLoad:
        self.load_before = _load_average()  # before the busy processes count in it
        try:
            for _ in range(self.n):
                self.processes.append(
                    subprocess.Popen(
                        [sys.executable, "-S", "-c", BUSY_LOOP, str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        start_new_session=True,  # Ctrl-C reaches the bench, which kills them
                    )
                )
        except OSError as e:
            self.stop()
            raise EdgespecError(f"--load: cannot start a busy process: {e.strerror}") from None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Kill every busy process and wait for it (idempotent)."""
        for p in self.processes:
            if p.poll() is None:
                p.kill()
        for p in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):  # (SIGKILL: not expected)
                p.wait(timeout=10)
        self.processes = []

    def describe(self) -> dict[str, Any]:
        """What the report records: the busy processes, the cores, the load before them."""
        return {
            "busy_processes": self.n,
            "cpu_count": os.cpu_count(),
            "load_average_before": self.load_before,
        }


def load_line(load: dict[str, Any]) -> str:
    """The report's line about the machine's load."""
    before = load.get("load_average_before")
    avg = f"load average {before[0]:.2f} before it" if before else "load average unknown"
    n = load.get("busy_processes", 0)
    if not n:
        return f"machine: {load.get('cpu_count')} cores, {avg}"
    return (
        f"machine: {load.get('cpu_count')} cores, measured beside {n} busy "
        f"process{'es' if n != 1 else ''} started by the bench (--load {n}), {avg}"
    )
