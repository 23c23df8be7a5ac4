"""Which llama.cpp settings make batch logits equal one-token logits, at what cost.

Each variant runs in its own process (llama.cpp reads its environment variables
once): the ``env`` it sets and the context parameters ``ctx`` it sets over
edgespec's own choices (flash attention, KV cache type: ``LlamaModel(...,
context_params=ctx)``), the model otherwise left as it is. For each model it records
measure.logit_diffs and the cost of a 9-row verify against one token.

llama.cpp's GGML_CUDA_FORCE_MMQ and GGML_CUDA_FORCE_CUBLAS are compile-time
options in this version (``#ifdef`` in ggml-cuda/mmq.cu), not environment
variables: trying them needs another build, so they are listed as not run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 = 0, 1, 30
FA_AUTO, FA_OFF, FA_ON = -1, 0, 1

#: name -> {"env": {...}, "ctx": {llama_context_params field: value}}
VARIANTS: dict[str, dict[str, dict]] = {  # in the order run: the likeliest fixes first
    "default": {"env": {}, "ctx": {}},
    "flash_attn_off": {"env": {}, "ctx": {"flash_attn_type": FA_OFF}},
    "flash_attn_on": {"env": {}, "ctx": {"flash_attn_type": FA_ON}},
    "kv_f32_fa_off": {
        "env": {},
        "ctx": {"flash_attn_type": FA_OFF, "type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32},
    },
    "all_conservative": {
        "env": {
            "GGML_CUDA_DISABLE_GRAPHS": "1",
            "GGML_CUDA_DISABLE_FUSION": "1",
            "GGML_CUDA_CUBLAS_COMPUTE_TYPE": "f32",
        },
        "ctx": {"flash_attn_type": FA_OFF, "type_k": GGML_TYPE_F32, "type_v": GGML_TYPE_F32},
    },
    "no_cuda_graphs": {"env": {"GGML_CUDA_DISABLE_GRAPHS": "1"}, "ctx": {}},
    "no_fusion": {"env": {"GGML_CUDA_DISABLE_FUSION": "1"}, "ctx": {}},
    "cublas_f32": {"env": {"GGML_CUDA_CUBLAS_COMPUTE_TYPE": "f32"}, "ctx": {}},
    "kv_bf16": {"env": {}, "ctx": {"type_k": GGML_TYPE_BF16, "type_v": GGML_TYPE_BF16}},
}
NOT_RUN = {
    "GGML_CUDA_FORCE_MMQ": "compile-time (-DGGML_CUDA_FORCE_MMQ=on): another build",
    "GGML_CUDA_FORCE_CUBLAS": "compile-time (-DGGML_CUDA_FORCE_CUBLAS=on): another build",
}


def verify_ratio(model, k: int = 9, reps: int = 7, depth: int = 64) -> dict:
    """Median seconds of one token and of a k-row verify; their ratio."""
    from measure import filler_tokens

    tokens = filler_tokens(model, depth + k)
    model.reset()
    model.decode(tokens[:depth], logits="none")
    times: dict[int, list[float]] = {1: [], k: []}
    for rep in range(reps + 1):
        for n in times:
            model.truncate(depth)
            t0 = time.perf_counter()
            model.decode(tokens[depth : depth + n], logits="all")
            if rep:
                times[n].append(time.perf_counter() - t0)
    model.reset()
    one, batch = statistics.median(times[1]), statistics.median(times[k])
    return {"one_token_s": one, f"verify_{k}_s": batch, f"ratio_{k}": batch / one}


def child(spec: dict, models: dict[str, str], gpu_layers: int) -> dict:
    """Measure every model under this process's variant (its env was set by the parent)."""
    from measure import logit_diffs

    from edgespec import LlamaModel

    out: dict = {}
    for name, path in models.items():
        with LlamaModel(
            path, n_ctx=1024, n_threads=1, n_gpu_layers=gpu_layers, context_params=spec["ctx"]
        ) as m:
            out[name] = {**logit_diffs(m), **verify_ratio(m)}
    return out


def run_variants(
    models: dict[str, Path],
    gpu_layers: int,
    names: list[str] | None = None,
    timeout: float = 120,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Run each variant (all, or ``names``, in order) in a child process; collect results.

    A variant that fails or times out records its error and the tail of its stderr.
    ``progress`` gets the results so far after each variant (to write them at once).
    """
    results: dict = {"not_run": NOT_RUN, "variants": {}, "bit_identical": []}
    for name in names or list(VARIANTS):
        spec = VARIANTS[name]
        env = {**os.environ, **spec["env"]}
        cmd = [
            sys.executable,
            __file__,
            "--child",
            json.dumps(spec),
            json.dumps({k: str(v) for k, v in models.items()}),
            str(gpu_layers),
        ]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            results["variants"][name] = {**spec, "error": f"timed out after {timeout} s"}
            if progress:
                progress(results)
            continue
        entry: dict = {**spec, "seconds": time.perf_counter() - t0}
        if proc.returncode == 0:
            entry["models"] = json.loads(proc.stdout.strip().splitlines()[-1])
        else:
            entry["error"] = f"exit {proc.returncode}: {proc.stderr[-2000:]}"
        results["variants"][name] = entry
        if "models" in entry and all(m["identical"] for m in entry["models"].values()):
            results["bit_identical"].append(name)
        if progress:
            progress(results)
    return results


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        here = Path(__file__).resolve().parent
        sys.path[:0] = [str(here), str(here.parent.parent)]  # measure; edgespec
        result = child(json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]))
        print(json.dumps(result))
        sys.exit(0)
    print("variants.py is run by benchmarks/device/checks.py", file=sys.stderr)
    sys.exit(2)
