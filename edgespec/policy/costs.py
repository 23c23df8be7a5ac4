"""What a forward pass costs on this machine: the target's verify curve and the draft's step.

Speculation pays only where a k-token verify costs much less than k single
tokens. That ratio depends on the model, the hardware, the thread count and the
kernels, so edgespec measures it and caches the curve per model (its size and
the head of the file, not its path), machine, thread count, offload and kernel mode.

``edgespec calibrate`` measures it at once (``measure_curve``). ``--gamma auto``
never waits for it: with nothing cached the first rounds are plain, and the curve is
measured a batch at a time between rounds (``edgespec.policy.gap_calibration``), a
provisional curve serving as soon as a few sizes are timed; progress is cached here,
so short runs add up.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..backend import FAST_KERNELS, LlamaModel
from ..files import exclusive_lock, replace_file

MAX_VERIFY = 48  # rows of a verify batch: the pending token and up to 47 draft tokens
CALIBRATION_DEPTH = 64  # context depth the curve is measured at
CALIBRATION_REPS = 4
# Batch sizes timed. On CPUs the cost is a staircase, not a smooth curve: llama.cpp's
# matmul kernels take rows four at a time, so 4m rows cost less than 4m - 1 (measured
# here with 2 threads: 7 rows 4.1x one token, 8 rows 3.3x, 9 rows 4.5x; 11 rows 5.0x,
# 12 rows 4.3x). Every size up to 8 is timed, then every multiple of 4, and the policy
# drafts only to sizes that were timed; the others are interpolated, for reference.
CALIBRATION_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48)
CURVE_VERSION = 3  # part of the cache key: v2 keys (path and mtime) read as absent
NOISY_SPREAD = 1.25  # median / fastest repetition above this: something else was running
# A timed size may cost less than a smaller one (the staircase above: up to 1.24x
# here); one costing this much more than a larger size was slowed by something else,
# in every repetition. (A bench's warm-up once timed 8 rows at 282 ms and 12 rows at
# 102 ms, 4 repetitions each: auto then drafted almost nothing at depth 8,000, 0.87x
# plain on a text where a quiet calibration gives 1.12x.)
INVERSION_NOISE = 1.5
IDENTITY_BYTES = 4 << 20  # the model's identity: its size and a hash of its first 4 MiB
FILLER = "The quick brown fox jumps over the lazy dog near the river bank. " * 12


@dataclass(frozen=True)
class CostCurve:
    """Seconds of one decode of k tokens with logits on every row, k = 1..len."""

    model: str
    key: str
    seconds: tuple[float, ...]  # seconds[k - 1] for a batch of k tokens
    noisy: bool = False  # repetitions disagreed: the machine was busy
    timed: tuple[int, ...] = ()  # the sizes measured (empty: all of them)
    provisional: bool = False  # noisy or partly measured: used, and measured again later

    def cost(self, k: int) -> float:
        """Seconds for a batch of k tokens (linear extrapolation past the measured range)."""
        if k <= len(self.seconds):
            return self.seconds[k - 1]
        slope = self.seconds[-1] - self.seconds[-2]
        return self.seconds[-1] + slope * (k - len(self.seconds))

    def timed_sizes(self) -> tuple[int, ...]:
        """The batch sizes that were measured rather than interpolated."""
        return self.timed or tuple(range(1, len(self.seconds) + 1))

    def ratios(self) -> list[float]:
        """Cost of each batch size relative to one token."""
        return [s / self.seconds[0] for s in self.seconds]


def machine_key(model: LlamaModel, max_k: int) -> str:
    """What the curve depends on: the model's identity, CPU, threads, offload, kernels,
    and the RPC workers the layers are on (a curve measured through workers is not one
    of this machine, nor of other workers).

    Not the file's path or mtime: a copy of the same GGUF elsewhere has the same curve.
    """
    parts = [
        model_identity(model.path),
        platform.machine(),
        _cpu_name(),
        f"threads={model.n_threads}",
        f"gpu_layers={model.n_gpu_layers}",
        f"fast_kernels={FAST_KERNELS}",
        f"max_k={max_k}",
        f"curve=v{CURVE_VERSION}",
    ]
    if getattr(model, "swa_cache", None) == "full":  # no ring patch: costs more at depth
        parts.append("swa_cache=full")
    if getattr(model, "rpc", ()):  # layers on RPC workers: their machines and the network
        parts.append(f"rpc={','.join(model.rpc)}")
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


_identities: dict[tuple[str, int, int, int], str] = {}


def model_identity(path: Path) -> str:
    """The GGUF's size and a hash of its first IDENTITY_BYTES (its header and tensor
    index, for small models): what the model is, wherever the file lies."""
    st = path.stat()
    memo = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if memo not in _identities:
        with open(path, "rb") as f:
            head = hashlib.sha256(f.read(IDENTITY_BYTES)).hexdigest()
        _identities[memo] = f"size={st.st_size}|head={head}"
    return _identities[memo]


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def measure_curve(
    model: LlamaModel, *, max_k: int = MAX_VERIFY, reps: int = CALIBRATION_REPS
) -> CostCurve:
    """Time decodes of 1..max_k tokens at a fixed depth; the model's cache is left empty.

    Each size's fastest repetition counts; sizes between the timed ones are interpolated.
    No smoothing: a longer batch can cost less (see CALIBRATION_SIZES). max_k is at
    most the model's n_batch (a verify batch is one llama_decode).
    """
    max_k = min(max_k, model.n_batch)
    tokens = model.tokenize(FILLER)
    while len(tokens) < CALIBRATION_DEPTH + max_k:
        tokens += tokens
    model.reset()
    model.decode(tokens[:CALIBRATION_DEPTH], logits="none")
    sizes = sorted({k for k in CALIBRATION_SIZES if k < max_k} | {max_k})
    samples: dict[int, list[float]] = {k: [] for k in sizes}
    for _ in range(reps):
        for k in sizes:  # interleaved, so drift in machine load hits every k alike
            model.truncate(CALIBRATION_DEPTH)
            t0 = time.perf_counter()
            model.decode(tokens[CALIBRATION_DEPTH : CALIBRATION_DEPTH + k], logits="all")
            samples[k].append(time.perf_counter() - t0)
    model.reset()
    best = {k: min(v) for k, v in samples.items()}
    spread = max(sorted(v)[len(v) // 2] / min(v) for v in samples.values())
    secs = tuple(float(np.interp(k, sizes, [best[s] for s in sizes])) for k in range(1, max_k + 1))
    noisy = spread > NOISY_SPREAD or inversion(best) > INVERSION_NOISE
    return CostCurve(
        model=model.path.name,
        key=machine_key(model, max_k),
        seconds=secs,
        noisy=noisy,
        timed=tuple(sizes),
        provisional=noisy,
    )


def inversion(best: dict[int, float]) -> float:
    """The largest ratio of a timed size's cost to a larger size's (1.0 when costs only
    rise with the size)."""
    worst, cheapest_above = 1.0, math.inf
    for k in sorted(best, reverse=True):
        worst = max(worst, best[k] / cheapest_above)
        cheapest_above = min(cheapest_above, best[k])
    return worst


def calibration_file() -> Path:
    """Where measured curves are cached (EDGESPEC_CACHE_DIR overrides the user cache)."""
    base = os.environ.get("EDGESPEC_CACHE_DIR")
    if base:
        return Path(base) / "calibration.json"
    import platformdirs

    return Path(platformdirs.user_cache_dir("edgespec")) / "calibration.json"


def load_or_measure(
    model: LlamaModel, *, max_k: int = MAX_VERIFY, refresh: bool = False
) -> CostCurve:
    """The cached curve for this model and machine, measuring (and caching) it if absent.

    A provisional cached curve (noisy, or measured between rounds) is measured again.
    Every curve is also kept for the life of the process, a noisy one included:
    measuring empties the model's KV cache, so it must not happen on every request.
    A noisy one is cached as provisional: ``gap_calibration.policy_curve`` uses it, and
    refines it.
    """
    max_k = min(max_k, model.n_batch)  # a verify batch is one llama_decode
    key = machine_key(model, max_k)
    if not refresh and key in _process_curves:
        return _process_curves[key]
    path = calibration_file()
    curve = None if refresh else cached_curve(read_cache(path).get(key), key, max_k)
    origin = ORIGIN_CACHE
    if curve is None or curve.provisional:
        curve = measure_curve(model, max_k=max_k)
        stored = store_curve(path, curve)
        # a busy machine's curve is cached as provisional, and measured again later
        origin = ORIGIN_NOISY if curve.noisy else ORIGIN_STORED if stored else ORIGIN_UNWRITABLE
    _process_curves[key] = curve
    _process_origins[key] = origin
    _gap_calibrations.pop(key, None)
    return curve


ORIGIN_CACHE = "read from the cache"
ORIGIN_STORED = "measured and cached"
ORIGIN_NOISY = (
    "measured, cached as provisional: timings varied between repetitions (a busy "
    "machine?); measured again later"
)
ORIGIN_UNWRITABLE = "measured, not cached: the cache file could not be written"
ORIGIN_PROVISIONAL = (
    "provisional: partly measured between rounds, or on a busy machine; used, and "
    "measured again between the rounds of later replies"
)
ORIGIN_PENDING = "not measured yet: plain rounds first, measured between rounds"

_process_curves: dict[str, CostCurve] = {}
_process_origins: dict[str, str] = {}
# the curves being measured between rounds, by key (edgespec.policy.gap_calibration)
_gap_calibrations: dict[str, Any] = {}


def use_curve(curve: CostCurve) -> None:
    """Make ``curve`` the one ``--gamma auto`` plans with in this process, for its model
    and machine, as ``load_or_measure(refresh=True)`` leaves a curve it measured (without
    storing it): e.g. a curve measured under a delay the benchmark then sets."""
    _process_curves[curve.key] = curve
    _process_origins[curve.key] = ORIGIN_STORED
    _gap_calibrations.pop(curve.key, None)


def curve_origin(curve: CostCurve) -> str:
    """Where load_or_measure got this curve: one of the ORIGIN_* sentences."""
    return _process_origins.get(curve.key, ORIGIN_CACHE)


def cached_curve(entry: dict | None, key: str, max_k: int) -> CostCurve | None:
    """A cache entry as a curve, or None when absent or malformed (then: measure again)."""
    try:
        seconds = tuple(float(x) for x in entry["seconds"])
        timed = tuple(int(k) for k in entry.get("timed", ()))
        model = str(entry["model"])
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    if len(seconds) != max_k or not all(math.isfinite(x) and x > 0 for x in seconds):
        return None  # (json reads NaN and Infinity: a NaN cost would stop all drafting)
    if not set(timed) <= set(range(1, max_k + 1)):
        return None
    provisional = bool(entry.get("provisional", False))
    return CostCurve(model=model, key=key, seconds=seconds, timed=timed, provisional=provisional)


def store_curve(path: Path, curve: CostCurve, **extra: list) -> bool:
    """Add one curve to the cache file, keeping the others.

    The read, merge and replace happen under an exclusive lock on a file beside the
    cache, so two processes (or a server's threads) calibrating at once keep both
    curves. Failing to write (False) only costs a re-measurement next time.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(path.with_name(f".lock-{path.name}")):
            cache = read_cache(path)
            cache[curve.key] = {**asdict(curve), **extra}
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # an empty directory in its place (OSError if not empty)
            _write_cache(path, cache)
    except OSError:
        return False
    return True


def read_cache(path: Path) -> dict[str, dict]:
    """The cache's well-shaped entries; {} if it is missing or unreadable in any way.

    Deep nesting, wrong shapes, invalid UTF-8, a directory or a FIFO in its place all
    read as an empty cache: the curve is measured again and the file replaced.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the read
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            with open(fd, "rb", closefd=False) as f:
                raw = f.read()
        finally:
            os.close(fd)
        data = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # json.loads recurses once per level
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if _well_shaped(v)}


def _well_shaped(entry: object) -> bool:
    """An entry as written: a JSON object of scalars and lists of numbers, nothing deeper.

    Whether it is a usable curve is cached_curve's question; this only keeps a bad
    entry from being carried into every later write.
    """
    if not isinstance(entry, dict):
        return False
    for value in entry.values():
        if isinstance(value, list):
            if not all(isinstance(x, int | float) for x in value):
                return False
        elif value is not None and not isinstance(value, str | int | float):
            return False
    return True


def _write_cache(path: Path, cache: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(cache, indent=1)
        replace_file(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError:
        pass  # a read-only cache only costs a re-measurement next time


def interpolate_ratios(by_size: dict[int, float], n: int) -> list[float]:
    """by_size's values at 1..n: linear between the observed sizes, flat beyond them.

    Deep in a context a long batch costs relatively more than the calibration says
    (attention is paid per row). Priced at the mean ratio, which the many plain
    rounds pull down, an unseen size looked cheaper than the sizes just seen, and
    on a long copy the policy drafted one token less each round: 47, 46, 45, ...
    """
    ks = sorted(by_size)
    return np.interp(np.arange(1, n + 1), ks, [by_size[k] for k in ks]).tolist()


def could_pay(costs: list[float], timed: frozenset[int], min_gain: float) -> bool:
    """Would drafting beat plain decoding by min_gain even if every draft token were accepted?

    costs[g] is a round drafting g tokens, verified in a batch of g + 1 (only timed
    sizes are ever chosen). A draft model as slow as its target never can: then
    probing only loses.
    """
    return any(
        (g + 1) / c > min_gain / costs[0] for g, c in enumerate(costs) if g and g + 1 in timed
    )
