"""Probe edgespec with hostile inputs and count how it fails (issue 16).

Usage::

    .venv/bin/python scripts/probe_bad_input.py [--skip-http]

Classes: broken model files, malformed state (calibration cache, conversations,
kills mid-write), bad catalogs, hostile HTTP against ``edgespec serve``; each lives
in scripts/probe/ (models, state, catalog, http; common holds what they share).
Every subprocess runs under a timeout (a timeout is a hang). Everything happens in a
temporary directory (models, caches, data) that is removed at the end; the only
network is loopback. Prints a summary table and exits 1 if any input gave a
traceback, an abort (signal), a hang or lost data, or the server answered 5xx,
died or logged a traceback.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the probe package beside us

from probe.catalog import probe_catalog  # noqa: E402
from probe.common import TB, ClassStats, base_env, load_maker  # noqa: E402
from probe.http import probe_http  # noqa: E402
from probe.models import probe_models  # noqa: E402
from probe.state import probe_state  # noqa: E402


def timed(fn: Callable[[], ClassStats]) -> ClassStats:
    t = time.monotonic()
    s = fn()
    print(f"[{s.name}: {s.tried} inputs, {time.monotonic() - t:.0f} s]", flush=True)
    return s


def main(argv: list[str]) -> int:
    skip_http = "--skip-http" in argv
    t0 = time.monotonic()

    def watchdog(*_):
        raise TimeoutError("probe_bad_input: the whole run took over 15 minutes")

    signal.signal(signal.SIGALRM, watchdog)
    signal.alarm(900)
    tmp = Path(tempfile.mkdtemp(prefix="edgespec-probe-"))
    stats: list[ClassStats] = []
    http_info: dict | None = None
    try:
        env = base_env(tmp)
        maker = load_maker()
        mdir = tmp / "synthetic"
        mdir.mkdir()
        paths = maker.build_test_models(mdir)
        target, draft = paths["target"], paths["draft_noisy"]
        stats.append(timed(lambda: probe_models(tmp, env, target, maker)))
        stats.append(timed(lambda: probe_state(tmp, env, target, draft)))
        stats.append(timed(lambda: probe_catalog(tmp, env)))
        if not skip_http:

            def http() -> ClassStats:
                nonlocal http_info
                s, http_info = probe_http(tmp, env, target)
                return s

            stats.append(timed(http))
    finally:
        for p in tmp.rglob("*"):
            try:
                if not p.is_symlink():
                    p.chmod(0o700)
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    return summary(stats, http_info, t0)


def summary(stats: list[ClassStats], http_info: dict | None, t0: float) -> int:
    """Print the table, the bad outcomes and the notes; 1 if anything was bad."""
    cols = ["tried", "ok", "one-line", "multi-line", "traceback", "abort", "hang", "data lost"]
    print()
    print(f"{'class':<20}" + "".join(f"{c:>11}" for c in cols))
    bad_total = 0
    for s in stats:
        c = s.counts
        ok = sum(c.get(k, 0) for k in ("ok", "killed", "answered", "closed"))
        kinds = ("oneline", "multiline", "traceback", "abort", "hang")
        row = [s.tried, ok, *(c.get(k, 0) for k in kinds), s.data_lost]
        print(f"{s.name:<20}" + "".join(f"{v:>11}" for v in row))
        bad_total += len(s.bad)
    if http_info is not None:
        print()
        print("HTTP responses by class:", dict(sorted(http_info["classes"].items())))
        print("HTTP 5xx:", len(http_info["fivexx"]), http_info["fivexx"][:10])
        for tag, alive in http_info["alive"].items():
            print(f"server ({tag}) alive at the end (GET /health 200): {alive}")
            if not alive:
                bad_total += 1
        for tag, log in http_info["server_tracebacks"].items():
            n = log.count(TB)
            print(f"server ({tag}) stderr tracebacks: {n}")
            if n:
                bad_total += 1
                i = log.index(TB)
                print("   ", log[i : i + 1500].replace("\n", "\n    "))
    print()
    print("state class 'ok' includes SIGKILLed runs (the check is the cache afterwards).")
    print("HTTP class 'ok' = answered with < 500 or closed; hang = no response in 30 s;")
    print("its one-line/multi-line are serve's refusals of bad flags; 5xx are listed above.")
    bads = [(s.name, b) for s in stats for b in s.bad]
    if bads:
        print("\nBAD OUTCOMES (traceback / abort / hang / data lost / 5xx / wrongly accepted):")
        for name, (label, kind, err) in bads:
            print(f"  [{name}] {label}: {kind}: {err}")
    notes = [(s.name, n) for s in stats for n in s.notes]
    if notes:
        print(
            "\nNOTES (not failures: ok where an error was expected, multi-line errors, "
            "unexpected statuses):"
        )
        for name, (label, kind, err) in notes:
            print(f"  [{name}] {label}: {kind}: {err[:300]}")
    print(
        f"\ntotal {sum(s.tried for s in stats)} inputs in {time.monotonic() - t0:.0f} s; "
        f"bad outcomes: {bad_total}"
    )
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
