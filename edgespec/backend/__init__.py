"""The only package that touches llama_cpp: models, contexts, RPC workers, grammars.

``kernels`` sets the kernel mode before llama.cpp loads, so it is imported first.
"""

from __future__ import annotations

from .kernels import FAST_KERNELS, default_threads  # isort: skip  (before llama_cpp)

import llama_cpp as ll  # noqa: E402

from .gbnf import GrammarMatcher, check_gbnf, compile_grammar, json_schema_to_gbnf  # noqa: E402
from .model import (  # noqa: E402
    DEFAULT_BATCH,
    DEFAULT_CTX,
    FimTokens,
    LlamaModel,
    VocabInfo,
    check_gguf_file,
)
from .quantize import QUANT_TYPES, model_description, quant_type, quantize_model  # noqa: E402
from .rpc import (  # noqa: E402
    RPC_DEFAULT_PORT,
    RPC_UNAVAILABLE,
    DeviceInfo,
    device_info,
    parse_rpc_endpoints,
    probe_rpc_worker,
    rpc_devices,
    rpc_supported,
    run_rpc_worker,
    worker_devices,
)

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_CTX",
    "FAST_KERNELS",
    "QUANT_TYPES",
    "RPC_DEFAULT_PORT",
    "RPC_UNAVAILABLE",
    "DeviceInfo",
    "FimTokens",
    "GrammarMatcher",
    "LlamaModel",
    "VocabInfo",
    "check_gguf_file",
    "check_gbnf",
    "compile_grammar",
    "default_threads",
    "device_info",
    "json_schema_to_gbnf",
    "ll",
    "model_description",
    "parse_rpc_endpoints",
    "probe_rpc_worker",
    "quant_type",
    "quantize_model",
    "rpc_devices",
    "rpc_supported",
    "run_rpc_worker",
    "worker_devices",
]
