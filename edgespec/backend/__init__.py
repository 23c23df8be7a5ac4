"""edgespec's only way to llama.cpp: models, contexts, RPC workers, grammar masks.

Only ``bindings`` imports ``llama_cpp``; it sets the kernel mode first.
"""

from __future__ import annotations

from ..files import check_gguf_file
from .bindings import SWA_RING, json_schema_to_gbnf, ll
from .grammar_matcher import GrammarMatcher
from .heap import limit_arenas, trim_heap
from .kernels import FAST_KERNELS, cpu_has_amx, default_threads
from .model import DEFAULT_BATCH, DEFAULT_CTX, LlamaModel
from .quantize import QUANT_TYPES, model_description, quant_type, quantize_model
from .rpc import (
    RPC_DEFAULT_PORT,
    RPC_UNAVAILABLE,
    DeviceInfo,
    device_info,
    on_rpc_worker_lost,
    parse_rpc_endpoints,
    probe_rpc_worker,
    rpc_devices,
    rpc_supported,
    rpc_worker_lost,
    run_rpc_worker,
    stay_up_on_worker_loss,
    unanswering_rpc_workers,
    worker_devices,
)
from .rpc_watch import DEFAULT_RPC_TIMEOUT_S, check_rpc_timeout
from .vocab import FimTokens, VocabInfo

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_CTX",
    "DEFAULT_RPC_TIMEOUT_S",
    "FAST_KERNELS",
    "QUANT_TYPES",
    "RPC_DEFAULT_PORT",
    "RPC_UNAVAILABLE",
    "SWA_RING",
    "DeviceInfo",
    "FimTokens",
    "GrammarMatcher",
    "LlamaModel",
    "VocabInfo",
    "check_gguf_file",
    "check_rpc_timeout",
    "cpu_has_amx",
    "default_threads",
    "device_info",
    "json_schema_to_gbnf",
    "limit_arenas",
    "ll",
    "model_description",
    "on_rpc_worker_lost",
    "parse_rpc_endpoints",
    "probe_rpc_worker",
    "quant_type",
    "quantize_model",
    "rpc_devices",
    "rpc_supported",
    "rpc_worker_lost",
    "run_rpc_worker",
    "stay_up_on_worker_loss",
    "trim_heap",
    "unanswering_rpc_workers",
    "worker_devices",
]
