"""The one module that imports ``llama_cpp``: every other backend module reaches
llama.cpp through the names here.

One seam for two reasons. The kernel mode must be in the environment before
llama.cpp's shared library loads, so this module imports ``kernels`` first, whatever
part of edgespec loads the backend first. And upgrading llama-cpp-python touches one
file: its public ctypes bindings (``ll``), the ggml library handle it loaded (which
the RPC and abort functions live in, not declared by llama-cpp-python), and its
JSON-schema-to-GBNF converter.
"""

from __future__ import annotations

import ctypes

from .kernels import FAST_KERNELS  # isort: skip  (sets GGML_CPU_TILED_MM before the load)

import llama_cpp as ll  # noqa: E402

__all__ = ["FAST_KERNELS", "ll", "libggml", "json_schema_to_gbnf"]


def libggml() -> ctypes.CDLL:
    """The ggml shared library llama_cpp loaded (its functions undeclared)."""
    from llama_cpp._ggml import libggml as lib

    return lib


def json_schema_to_gbnf(schema_json: str) -> str:
    """llama-cpp-python's JSON-schema-to-GBNF converter (llama.cpp's json_schema_to_grammar)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf as convert

    return convert(schema_json)
