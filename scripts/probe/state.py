"""Class 2: malformed state: the calibration cache, kills mid-write, saved conversations."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

from edgespec import costs

from .common import NOT_OK, PY, REPO, ClassStats, edgespec_cmd, kill_group, place, run, spawn

CACHE_CASES: list[tuple[str, object]] = [
    ("deep nesting 100000 '['", b"[" * 100_000),
    ("deep nesting 100000 '{\"a\":'", b'{"a":' * 100_000),
    ("invalid UTF-8", b'\xff\xfe{"x": \xc3\x28}'),
    ("truncated JSON", b'{"target.gguf|1": {"seconds": [0.1, '),
    ("JSON list", b"[1, 2, 3]"),
    ("JSON null", b"null"),
    ("JSON string", b'"calibration"'),
    ("entry wrong shape", b'{"k": 5, "k2": [1], "k3": {"seconds": "fast"}}'),
    ("entry seconds NaN/neg", b'{"k": {"seconds": [NaN, -1, 1e999], "version": 2}}'),
    ("empty file", b""),
    ("NUL bytes", b"\0" * 4096),
    ("an empty directory", "dir"),
    ("a non-empty directory (kept: not edgespec's to delete)", "fulldir"),
    ("a FIFO", "fifo"),
    ("dangling symlink", "dangling"),
]

KILL_DELAYS = (0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 1.2)
SEED_KEY = "probe-seeded-curve-0000"  # a made-up key: no model's, so nothing rewrites it


def cache_entries(path: Path) -> dict | None:
    """The cache file's JSON object, or None (never opens a FIFO: that would block)."""
    try:
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def curve_origins(out) -> list[str]:
    """The ORIGIN_* sentence calibrate gave for each curve (text or --json output)."""
    try:
        data = json.loads(out.stdout)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return [v["origin"] for v in data.values() if isinstance(v, dict) and "origin" in v]
    found = []
    for line in out.stdout.splitlines():
        name, sep, origin = line.partition(": ")
        if sep and name in ("target", "draft"):
            found.append(origin.strip())
    return found


def seed_cache(path: Path) -> dict:
    """Write a cache holding one well-shaped curve under a made-up key, as edgespec
    writes them (CostCurve's fields), so a kill always has a curve to lose."""
    n = costs.MAX_VERIFY
    entry = {
        "model": "probe-seeded.gguf",
        "key": SEED_KEY,
        "seconds": [0.001 * (1 + 0.25 * k) for k in range(n)],
        "noisy": False,
        "timed": list(costs.CALIBRATION_SIZES),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({SEED_KEY: entry}, indent=1), encoding="utf-8")
    # the seed must be one edgespec keeps: else its loss would prove nothing
    assert SEED_KEY in costs.read_cache(path), "seeded entry not well-shaped"
    assert costs.cached_curve(entry, SEED_KEY, n) is not None, "seeded entry not a curve"
    return {SEED_KEY: entry}


def probe_cache(tmp: Path, env: dict[str, str], st: ClassStats, calib, gen) -> None:
    for i, (label, content) in enumerate(CACHE_CASES):
        cdir = tmp / f"cache{i}"
        cdir.mkdir()
        cfile = cdir / "calibration.json"
        place(cfile, content)
        e = dict(env, EDGESPEC_CACHE_DIR=str(cdir))
        origins: list[str] = []
        for what, cmd in (("calibrate", calib), ("generate --gamma auto", gen)):
            out = run(cmd, e)
            st.add(f"cache {label}: {what}", out, note_kinds=NOT_OK)
            if what == "calibrate":
                origins = curve_origins(out)
        # a curve measured while the machine is busy (noisy) is not cached by design:
        # calibrate again a few times before calling the cache lost (and where
        # calibrate said nothing: it failed); not where it said cached or unwritable
        for _ in range(4):
            if cache_entries(cfile) or (origins and costs.ORIGIN_NOISY not in origins):
                break
            origins = curve_origins(run(calib[:-1], e))  # the text output, this time
        if cache_entries(cfile):
            continue
        lab = f"cache {label}"
        if content == "fulldir":
            st.notes.append((lab, "not replaced", f"directory left in place ({origins})"))
        elif costs.ORIGIN_NOISY in origins:
            st.notes.append((lab, "not rebuilt", "busy machine: " + costs.ORIGIN_NOISY))
        else:
            st.lost(lab, f"not rebuilt as a readable JSON object with entries ({origins})")


def probe_kills(tmp: Path, env: dict[str, str], st: ClassStats, calib) -> None:
    """SIGKILL a refreshing calibration at various moments; the cache must stay
    readable and keep the curve it held before (a seeded one, under a made-up key)."""
    kdir = tmp / "cache_kill"
    cpath = kdir / "calibration.json"
    before = seed_cache(cpath)
    e = dict(env, EDGESPEC_CACHE_DIR=str(kdir))

    def check(label: str) -> None:
        now = cache_entries(cpath)
        if now is None or any(k not in now for k in before):
            st.lost(label, f"the cache lost the seeded curve: now {now!r:.200}")

    # one refresh left to finish, timed: kills late in a run like it land in the write
    t0 = time.monotonic()
    out = run(calib + ["--refresh"], e)
    took = time.monotonic() - t0
    st.add("calibrate --refresh, not killed (timed)", out, note_kinds=NOT_OK)
    check("calibrate --refresh, not killed")
    delays = list(KILL_DELAYS)
    if took > KILL_DELAYS[-1]:
        delays += [round(took * f, 2) for f in (0.8, 0.9, 0.97)]
    for delay in delays:
        p = spawn(calib + ["--refresh"], e)
        time.sleep(delay)
        kill_group(p, signal.SIGKILL)
        p.wait()
        st.tried += 1
        st.count("killed")
        check(f"SIGKILL calibrate --refresh after {delay}s")
    st.add("calibrate after the kills", run(calib, e))
    check("calibrate after the kills")
    leftovers = sorted(p.name for p in kdir.iterdir() if p.name != "calibration.json")
    if leftovers:
        st.notes.append(("after kills", "leftover files", ", ".join(leftovers)))


def probe_state(tmp: Path, env: dict[str, str], target: Path, draft: Path) -> ClassStats:
    st = ClassStats("2 malformed state")
    base = edgespec_cmd()
    calib = base + ["calibrate", "--target", str(target), "--draft", str(draft)]
    calib += ["--threads", "1", "--json"]
    gen = base + ["generate", "--target", str(target), "--draft", str(draft), "--prompt", "hi"]
    gen += ["--max-tokens", "4", "--threads", "1", "--gamma", "auto"]
    probe_cache(tmp, env, st, calib, gen)
    probe_kills(tmp, env, st, calib)
    probe_conversations(tmp, env, st)
    return st


CONV_SCRIPT = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tui import store
s = store.ConversationStore(Path(sys.argv[1]))
convs, skipped = s.scan()
for p in s.dir.iterdir():
    if p.suffix != ".json":
        continue
    try:
        s.load(p.stem)
    except (OSError, ValueError):
        pass
print(len(convs), skipped)
"""

CONV_CASES: list[tuple[str, object]] = [
    ("deep nesting 100000 '['", b"[" * 100_000),
    ("deep nesting objects", b'{"messages":' * 100_000),
    ("invalid UTF-8", b'{"id": "\xff\xfe"}'),
    ("empty file", b""),
    ("JSON null", b"null"),
    ("JSON list", b"[]"),
    ("JSON number", b"5"),
    ("id is a number", b'{"id": 5, "messages": []}'),
    ("messages a string", b'{"id": "x", "messages": "hello"}'),
    ("message a number", b'{"id": "x", "messages": [5]}'),
    ("message role list", b'{"id": "x", "messages": [{"role": [], "content": {}}]}'),
    ("updated a dict", b'{"id": "x", "messages": [], "updated": {}, "title": 7}'),
    ("huge number", b'{"id": "x", "messages": [], "updated": 1' + b"0" * 5000 + b"}"),
    ("NUL bytes", b"\0" * 100),
    ("a directory", "dir"),
    ("a FIFO", "fifo"),
    ("symlink loop", "loop"),
]


def probe_conversations(tmp: Path, env: dict[str, str], st: ClassStats) -> None:
    sys.path.insert(0, str(REPO))
    try:
        from tui import store
    except Exception as exc:  # noqa: BLE001
        st.notes.append(("conversations", "skipped", f"cannot import tui.store: {exc!r}"))
        return
    finally:
        sys.path.pop(0)
    try:
        store.Conversation(id=store.new_id(), messages=[])
    except Exception:  # noqa: BLE001
        st.notes.append(("conversations", "skipped", "cannot build a Conversation"))
        return
    for i, (label, content) in enumerate(CONV_CASES):
        root = tmp / f"conv{i}"
        s = store.ConversationStore(root)
        conv = store.Conversation(id=store.new_id(), messages=[])
        s.save(conv)
        place(s.dir / "bad.json", content)
        out = run([PY, "-c", CONV_SCRIPT, str(root), str(REPO)], env, timeout=30)
        lab = f"conversation file: {label}"
        st.add(lab, out)
        want = ["1", "2"] if content == "loop" else ["1", "1"]  # loop: both links skipped
        if out.kind == "ok" and out.stdout.split() != want:
            st.notes.append((lab, "scan (loaded, skipped) not (1, 1)", out.stdout.strip()))
        if not (root / "conversations" / f"{conv.id}.json").exists():
            st.lost(lab, "the good conversation file is gone")
