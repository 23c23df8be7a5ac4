#!/usr/bin/env python3
"""The attention settings for plain decoding at depth: is each batch-invariant, and
what does one token cost at depths 0 and 2,000?

One variant per process (llama.cpp's settings are read at context creation):
``default`` (edgespec's: BF16 keys, F16 values, flash attention auto), ``f16_fa_off``,
``bf16_fa_off`` (edgespec's cache types), ``f16_fa_auto``, ``bf16_kv`` (BF16 keys and
values). For each, the largest logit difference between a
k-row decode and k one-token decodes (k = 2, 4, 8 at depths 100, 700, 1,500; 0.0 is
what greedy exactness needs) and the median one-token decode time.

    for v in default f16_fa_off bf16_fa_off f16_fa_auto bf16_kv; do
        .venv/bin/python benchmarks/attention_check.py $v; done
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS = ("default", "f16_fa_off", "bf16_fa_off", "f16_fa_auto", "bf16_kv")
FILLER = "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun. "


def main() -> None:
    variant = sys.argv[1] if len(sys.argv) > 1 else "default"
    if variant not in VARIANTS:
        raise SystemExit(f"variant: one of {', '.join(VARIANTS)}")
    from device.variants import FA_OFF, GGML_TYPE_BF16, GGML_TYPE_F16

    from edgespec import LlamaModel, resolve_model

    # llama.cpp's context fields over edgespec's choices (BF16 keys, F16 values)
    ctx = {"flash_attn_type": FA_OFF} if variant.endswith("fa_off") else {}
    if variant.startswith("f16"):
        ctx["type_k"] = GGML_TYPE_F16
    if variant == "bf16_kv":
        ctx["type_v"] = GGML_TYPE_BF16
    m = LlamaModel(resolve_model("gemma-3-270m"), n_ctx=4096, n_threads=2, context_params=ctx)
    toks = m.tokenize(FILLER * 200)
    diffs = {}
    for depth in (100, 700, 1500):
        m.reset()
        m.decode(toks[:depth], logits="none")
        single = [m.decode([t])[0].copy() for t in toks[depth : depth + 8]]
        for k in (2, 4, 8):
            m.truncate(depth)
            batch = m.decode(toks[depth : depth + k], logits="all")
            diffs[f"d{depth}k{k}"] = max(float(abs(batch[i] - single[i]).max()) for i in range(k))
    out = {"variant": variant, "max_diff": max(diffs.values()), "diffs": diffs}
    for depth in (0, 2000):
        m.reset()
        if depth:
            m.decode(toks[:depth], logits="none")
        times = []
        for i in range(40):
            t0 = time.perf_counter()
            m.decode([toks[depth + i]])
            times.append(time.perf_counter() - t0)
        out[f"ms_depth_{depth}"] = round(statistics.median(times) * 1000, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
