"""The one module that imports ``llama_cpp``: every other backend module reaches
llama.cpp through the names here.

One seam for two reasons. The kernel mode must be in the environment before
llama.cpp's shared library loads, so this module imports ``kernels`` first, whatever
part of edgespec loads the backend first. And upgrading llama-cpp-python touches one
file: its public ctypes bindings (``ll``), the ggml library handle it loaded (which
the RPC and abort functions live in, not declared by llama-cpp-python), its
JSON-schema-to-GBNF converter, and whether the llama.cpp it loaded carries edgespec's
sliding-window ring patch (``SWA_RING``) and its tiled-matmul mode patch (``TILED_MODE``).
"""

from __future__ import annotations

import ctypes
import importlib

from .kernels import FAST_KERNELS  # isort: skip  (sets GGML_CPU_TILED_MM before the load)

import llama_cpp as ll  # noqa: E402

__all__ = [
    "FAST_KERNELS",
    "SWA_RING",
    "TILED_MODE",
    "decode_in_mode",
    "ll",
    "libggml",
    "json_schema_to_gbnf",
    "swa_ring",
    "swa_ring_revision",
    "tiled_mode",
]


def _marker(name: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """An int-returning function of the loaded llama.cpp (or a library it loaded), or None."""
    lib = getattr(importlib.import_module("llama_cpp.llama_cpp"), "_lib", None)  # its CDLL
    try:
        return getattr(lib, name)
    except AttributeError:  # no such symbol (or no library handle): not patched
        return None


def swa_ring_revision() -> int:
    """The revision of edgespec's sliding-window ring patch in the loaded llama.cpp, 0 if
    it has none (a stock llama-cpp-python: pip's wheel, a CUDA or Metal build).

    scripts/patches/llama-kv-swa-ring.patch exports ``llama_edgespec_swa_ring()`` beside
    the ring itself. Looking the symbol up costs nothing at load, where a behavioural
    probe would need a sliding-window model and a rollback across a thousand-cell ring.
    """
    marker = _marker("llama_edgespec_swa_ring")
    if marker is None:
        return 0
    marker.argtypes = []
    marker.restype = ctypes.c_int
    return int(marker())


#: The loaded llama.cpp places sliding-window cells as a ring (edgespec's patch): a
#: window-sized sliding-window cache is then exact across rollbacks. Without it
#: LlamaModel keeps the full-size sliding-window cache (exact, more memory).
SWA_RING = swa_ring_revision() >= 1


def swa_ring() -> bool:
    """``SWA_RING``, asked at each model load (a test can pretend a stock build)."""
    return SWA_RING


_tiled = _marker("ggml_cpu_edgespec_tiled")
if _tiled is not None:
    _tiled.argtypes, _tiled.restype = [ctypes.c_int], ctypes.c_int

#: The loaded llama.cpp lets a thread choose its tiled K-quant matmul (edgespec's patch
#: scripts/patches/ggml-cpu-tiled-mode.patch, ``ggml_cpu_edgespec_tiled``): prompts then
#: take the tiled kernel at every batch size and every other decode the one-row kernel,
#: each batch-invariant (see LlamaModel.decode). Without it every decode takes the
#: one-row kernel (GGML_CPU_TILED_MM=0, kernels.py): exact, slower on prompts.
TILED_MODE = _tiled is not None and _tiled(0) >= 1 and not FAST_KERNELS


def tiled_mode() -> bool:
    """``TILED_MODE``, asked at each model load (a test can pretend a stock build)."""
    return TILED_MODE


def decode_in_mode(ctx: object, batch: object, tiled: bool) -> int:
    """llama_decode with the tiled matmul at every batch size (tiled) or never; on a
    llama.cpp without the patch (or in fast mode) a plain llama_decode. Call it on the
    thread that computes (the mode is the calling thread's)."""
    if _tiled is not None and not FAST_KERNELS:
        _tiled(1 if tiled else -1)
    return ll.llama_decode(ctx, batch)


def libggml() -> ctypes.CDLL:
    """The ggml shared library llama_cpp loaded (its functions undeclared)."""
    from llama_cpp._ggml import libggml as lib

    return lib


def json_schema_to_gbnf(schema_json: str) -> str:
    """llama-cpp-python's JSON-schema-to-GBNF converter (llama.cpp's json_schema_to_grammar)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf as convert

    return convert(schema_json)
