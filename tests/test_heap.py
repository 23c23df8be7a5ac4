"""The C heap helpers of edgespec.backend.heap, each in a fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from edgespec.backend.heap import _malloc_trim

pytestmark = pytest.mark.skipif(_malloc_trim() is None, reason="this C library is not glibc")

PRELUDE = textwrap.dedent(
    """
    import ctypes, sys, threading
    from pathlib import Path
    from edgespec.backend import limit_arenas, trim_heap

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    SIZE = 64 * 1024  # under the mmap threshold: from an arena, not a mapping of its own
    """
)

TRIM = PRELUDE + textwrap.dedent(
    """
    def rss_mib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    blocks = [libc.malloc(SIZE) for _ in range(2000)]
    for b in blocks:
        ctypes.memset(b, 1, SIZE)
    for b in blocks[::2]:  # every other one: free pages between used ones, not at the top
        libc.free(b)
    before = rss_mib()
    released = trim_heap(min_interval_s=0.0)
    print(before, rss_mib(), released, trim_heap(min_interval_s=60.0))
    """
)

ARENAS = PRELUDE + textwrap.dedent(
    """
    if sys.argv[1] == "limit":
        assert limit_arenas(1)
    held, gate = [], threading.Barrier(8)

    def work():
        gate.wait()  # all eight at once, so that they contend for arenas
        for _ in range(50):
            held.append(libc.malloc(SIZE))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    heap = next(line for line in Path("/proc/self/maps").read_text().splitlines()
                if line.endswith("[heap]"))
    lo, hi = (int(x, 16) for x in heap.split()[0].split("-"))
    print(sum(not lo <= b < hi for b in held))
    """
)


def _run(code: str, *args: str) -> list[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True
    ).stdout.split()


def test_free_pages_between_used_ones_go_back_to_the_system() -> None:
    before, after, released, again = _run(TRIM)
    assert released == "True"
    assert float(before) - float(after) > 40  # of the 62.5 MiB freed between used blocks
    assert again == "False"  # a second trim within the interval does nothing


def test_limited_arenas_keep_every_thread_in_the_main_heap() -> None:
    assert int(_run(ARENAS, "limit")[0]) == 0
    assert int(_run(ARENAS, "free")[0]) > 0  # without the limit, threads get arenas of their own
