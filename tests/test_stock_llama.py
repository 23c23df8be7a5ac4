"""edgespec on a llama.cpp with and without its sliding-window ring patch.

scripts/bootstrap.sh builds llama-cpp-python with scripts/patches/llama-kv-swa-ring.patch,
which also exports ``llama_edgespec_swa_ring()``; a stock llama-cpp-python (pip's wheel,
a CUDA or Metal build) has neither. edgespec looks the marker up at load
(edgespec.backend.bindings.SWA_RING) and, without it, keeps the full-size
sliding-window cache (``swa_full``), where every position has a cell of its own: exact
after any rollback, at more memory. Checked three ways:

- the bootstrap's own build is detected as patched (the window-sized ring is used);
- with the detection forced to "unpatched" in this process, the full-size cache is
  used, said once, and greedy output after deep rollbacks equals a fresh context;
- against a real unpatched library, built once from the same pristine sdist that
  tests/test_llama_patches.py checks and kept in a cache outside the clone
  (``$EDGESPEC_STOCK_LLAMA_CACHE``, else the user cache's ``edgespec-tests``, keyed by
  the sdist's hash), loaded in a subprocess with ``LLAMA_CPP_LIB_PATH``: the same checks,
  plus the control that the window-sized cache there is *not* exact.

The unpatched build (pip's own build of the sdist, without llava: 10-20 minutes on two
cores) is made by this test only where ``CI`` or ``EDGESPEC_BUILD_STOCK_LLAMA=1`` is
set, or by ``.venv/bin/python tests/test_stock_llama.py``; elsewhere the real-library
test is skipped unless the cache holds one. ``EDGESPEC_STOCK_LLAMA_LIB=DIR`` points it
at any unpatched ``llama_cpp/lib`` folder instead (a stock llama-cpp-python's).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SDISTS = sorted((Path(sys.prefix) / "llama-sdist").glob("llama_cpp_python-*.tar.gz"))
LIB = "libllama.so" if sys.platform.startswith("linux") else "libllama.dylib"

# The checks, run here (detection forced off) and in a subprocess on the stock library.
# One JSON line: what the model chose and, per rollback, whether the logits after it are
# bit-equal to a fresh context's.
PROBE = r"""
import json, math, random, sys
import numpy as np
import edgespec.backend.model as model_mod
from edgespec.backend import SWA_RING, LlamaModel
from edgespec.backend.bindings import TILED_MODE
from edgespec.drafting.ngram import NgramDrafter
from edgespec.speculation.loop import generate
from edgespec.policy import adaptive

def probe(path):
    words = "river stone light quiet metal garden paper window forest cloud north table".split()
    rng = random.Random(7)
    text = " ".join(rng.choice(words) for _ in range(2000))
    out = {"swa_ring_detected": SWA_RING, "tiled_mode_detected": TILED_MODE}
    a, b = (LlamaModel(path, n_ctx=2048, n_threads=2) for _ in range(2))
    with a, b:
        out["swa_cache"] = a.swa_cache
        out["checkpoints"] = a.checkpoints is not None
        tokens = a.tokenize(text)[:1400]
        equal = {}
        # 1400 tokens, then deep rollbacks (500: past a window-sized ring's cells) and one
        # across the ring's end (a batch at 1020-1030, back to 1023)
        for keep, batches in ((500, [1400]), (1023, [1020, 11])):
            a.reset()
            start = 0
            for n in batches:
                a.decode(tokens[start:start + n], logits="none")
                start += n
            before = a.redecodes
            a.truncate(keep)
            got = a.decode(tokens[keep:keep + 1], logits="last")[-1].copy()
            b.reset()
            b.decode(tokens[:keep], logits="none")
            want = b.decode(tokens[keep:keep + 1], logits="last")[-1]
            equal[str(keep)] = [bool(np.array_equal(got, want)), float(np.abs(got - want).max()),
                                a.redecodes - before]
        out["rollbacks"] = equal
        prompt = tokens[:1000]
        a.reset()
        plain = generate(a, prompt, max_tokens=48, gamma=0)
        a.reset()
        spec = generate(a, prompt, drafter=NgramDrafter(), max_tokens=48, gamma=6)
        out["speculative_equals_plain"] = spec.tokens == plain.tokens
        out["drafted"], out["accepted"] = spec.stats.drafted, spec.stats.accepted
    return out

if __name__ == "__main__":
    adaptive.LOSS_SHARE = math.inf  # draft even where it loses: rollbacks
    if len(sys.argv) > 2:  # pretend the library has (or lacks) the ring patch
        model_mod.swa_ring = {"ring": lambda: True, "full": lambda: False}[sys.argv[2]]
    print(json.dumps(probe(sys.argv[1])))
"""


def _probe_module() -> types.ModuleType:
    """PROBE as a module, for the in-process run."""
    mod = types.ModuleType("stock_probe")
    exec(compile(PROBE, "stock_probe", "exec"), mod.__dict__)
    return mod


def _assert_exact_with_the_full_cache(out: dict) -> None:
    assert out["swa_cache"] == "full", out
    assert out["checkpoints"] is False, out  # nothing to restore: every position is kept
    for keep, (equal, diff, redecodes) in out["rollbacks"].items():
        assert equal, f"rollback to {keep}: logits {diff} off a fresh context"
        assert redecodes == 0, f"rollback to {keep} decoded the prefix again"
    assert out["speculative_equals_plain"], out
    assert out["drafted"] > out["accepted"] > 0, out  # rollbacks happened, and hits


# --------------------------------------------------------------------------- patched


def _bootstrap_built_this_patch() -> bool | None:
    """Whether the running venv's llama-cpp-python was built by scripts/bootstrap.sh with
    the patches as they are now (None: not a bootstrap venv)."""
    stamp = Path(sys.prefix) / ".edgespec-llama-cpp"
    if not stamp.is_file():
        return None
    patches = sorted((ROOT / "scripts" / "patches").glob("*.patch"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in patches)).hexdigest()[:16]
    return f"patches={digest}" in stamp.read_text()


@pytest.mark.real_model
def test_the_bootstraps_patched_build_keeps_the_window_sized_ring(real_model_paths) -> None:
    built = _bootstrap_built_this_patch()
    if built is None:
        pytest.skip("llama-cpp-python here was not built by scripts/bootstrap.sh")
    if not built:
        pytest.skip("scripts/patches changed since .venv was built: run scripts/test to rebuild")
    from edgespec.backend import SWA_RING, LlamaModel
    from edgespec.backend.bindings import swa_ring_revision

    assert SWA_RING and swa_ring_revision() >= 1
    with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=2048, n_threads=2) as m:
        assert (m.swa_cache, m.n_swa) == ("ring", 512)
        assert m.checkpoints is not None
        # and the tiled-mode patch: prompts on the tiled kernel (tests/test_prompt_kernels.py)
        from edgespec.backend.bindings import TILED_MODE

        assert TILED_MODE and m.tiled_prompts


# --------------------------------------------------------------------------- forced off


@pytest.mark.real_model
def test_without_the_ring_patch_the_full_cache_is_kept_exact_and_said_once(
    real_model_paths, monkeypatch, caplog
) -> None:
    import edgespec.backend.model as model_mod
    from edgespec.backend import LlamaModel
    from edgespec.backend.kernels import FAST_KERNELS
    from edgespec.policy import adaptive

    if FAST_KERNELS:
        pytest.skip("EDGESPEC_FAST_KERNELS=1 keeps the ring (not bit-exact anyway)")
    monkeypatch.setattr(model_mod, "swa_ring", lambda: False)
    monkeypatch.setattr(model_mod, "_said_full_swa_cache", False)
    monkeypatch.setattr(adaptive, "LOSS_SHARE", math.inf)  # draft even where it loses
    probe = _probe_module()
    with caplog.at_level(logging.WARNING, logger="edgespec"):
        out = probe.probe(str(real_model_paths["gemma-3-270m"]))
        with LlamaModel(real_model_paths["gemma-3-270m"], n_ctx=512, n_threads=2) as m:
            assert m.swa_cache == "full"
    _assert_exact_with_the_full_cache(out)
    said = [r.getMessage() for r in caplog.records if "ring patch" in r.getMessage()]
    assert len(said) == 1, said  # three models loaded, one line


@pytest.mark.real_model
def test_a_model_without_sliding_window_layers_has_no_swa_cache(real_model_paths) -> None:
    from edgespec.backend import LlamaModel

    with LlamaModel(real_model_paths["smollm2-135m-instruct"], n_ctx=256, n_threads=1) as m:
        assert (m.n_swa, m.swa_cache, m.checkpoints) == (0, "none", None)


# --------------------------------------------------------------------------- the real one


def _cache_dir() -> Path | None:
    """Where the unpatched build of this venv's sdist is kept (None: no sdist here)."""
    if len(SDISTS) != 1:
        return None
    env = os.environ.get("EDGESPEC_STOCK_LLAMA_CACHE")
    if env:
        root = Path(env)
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("edgespec-tests")) / "llama-stock"
    key = hashlib.sha256(SDISTS[0].read_bytes()).hexdigest()[:16]
    return root / f"{SDISTS[0].name.removesuffix('.tar.gz')}-{key}"


def build_stock_llama(log=print) -> Path:
    """Build llama-cpp-python's libraries from the pristine sdist, unpatched (llava off),
    into the cache once; return the folder holding libllama."""
    cache = _cache_dir()
    if cache is None:
        raise RuntimeError(f"no pristine sdist in {sys.prefix}/llama-sdist (scripts/bootstrap.sh)")
    lib = cache / "lib"
    if (lib / LIB).is_file():
        return lib
    log(f"building an unpatched {SDISTS[0].name} into {cache} (10-20 minutes)")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        env = {**os.environ, "CMAKE_ARGS": "-DLLAVA_BUILD=OFF"}
        nice = ["nice", "-n", "19"] if shutil.which("nice") else []
        subprocess.run(
            [*nice, sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "--no-cache-dir", "-w", tmp, str(SDISTS[0])],
            env=env, check=True,
        )  # fmt: skip
        (wheel,) = Path(tmp).glob("llama_cpp_python-*.whl")
        staging = Path(tmp) / "lib"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.startswith("llama_cpp/lib/") and not name.endswith("/"):
                    (staging / Path(name).name).parent.mkdir(parents=True, exist_ok=True)
                    (staging / Path(name).name).write_bytes(z.read(name))
        if not (staging / LIB).is_file():
            raise RuntimeError(f"{wheel.name} holds no llama_cpp/lib/{LIB}")
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)  # whole or not at all
    return lib


def _stock_lib() -> Path | None:
    """An unpatched llama.cpp library folder: given, cached, or built here in CI."""
    given = os.environ.get("EDGESPEC_STOCK_LLAMA_LIB")
    if given:
        return Path(given)
    cache = _cache_dir()
    if cache is None:
        return None
    if (cache / "lib" / LIB).is_file():
        return cache / "lib"
    if os.environ.get("CI") or os.environ.get("EDGESPEC_BUILD_STOCK_LLAMA") == "1":
        return build_stock_llama()
    return None


@pytest.fixture(scope="module")
def stock_lib() -> Path:
    lib = _stock_lib()
    if lib is None:
        pytest.skip(
            "no unpatched llama.cpp cached: build it once with "
            ".venv/bin/python tests/test_stock_llama.py (or EDGESPEC_STOCK_LLAMA_LIB=DIR)"
        )
    return lib


def _run_probe(lib: Path, model: Path, force: str | None = None) -> dict:
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": str(lib)}
    env.pop("EDGESPEC_FAST_KERNELS", None)
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(model), *([force] if force else [])],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.real_model
def test_a_stock_llama_cpp_is_detected_and_stays_exact(stock_lib, real_model_paths) -> None:
    out = _run_probe(stock_lib, real_model_paths["gemma-3-270m"])
    assert out["swa_ring_detected"] is False, out
    assert out["tiled_mode_detected"] is False, out  # every row on the one-row kernel
    _assert_exact_with_the_full_cache(out)


@pytest.mark.real_model
def test_on_a_stock_llama_cpp_the_window_sized_ring_would_not_be_exact(
    stock_lib, real_model_paths
) -> None:
    """The control: what the detection prevents (a rollback across the ring's end puts
    the position in another cell; llama.cpp's window sum then rounds differently)."""
    out = _run_probe(stock_lib, real_model_paths["gemma-3-270m"], force="ring")
    assert out["swa_cache"] == "ring", out
    equal, diff, _ = out["rollbacks"]["1023"]
    assert not equal and diff > 0, out


if __name__ == "__main__":  # build (or find) the cached unpatched library
    print(build_stock_llama(log=lambda m: print(m, file=sys.stderr)))
