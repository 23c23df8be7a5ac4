"""Kernel mode, set before llama.cpp loads (no llama_cpp import here).

Batch-invariant kernels. Speculative verification scores k tokens in one batch,
plain decoding one at a time; greedy output is identical only if both give the
same logits bit for bit. llama.cpp's CPU backend switches kernels with the batch
size: repacked weights (n >= 4), a tiled K-quant matmul (n >= 8), and, for one
token over an F16 KV cache of 512+ cells, flash attention split across threads
(and 64+ rows a tiled flash attention). Each rounds differently (logits off by up to
~1.5 on Gemma 3 270M). We turn off the first two and keep keys in BF16 and values in
F16: flash attention takes its split and tiled paths only for keys and values of one
type, F16 or F32, so every row runs the same per-row loop, whatever the batch. BF16
keys have F16's footprint; F16 values keep llama.cpp's fast accumulation (BF16 values
cost 10% at depth 8,000: docs/benchmarks.md, "Plain decoding at depth"). Sliding-
window layers keep a window-sized ring whose cells a patch to llama.cpp places by
position, for the same reason (see LlamaModel).
Prompts get the tiled matmul back (20% faster) where llama.cpp carries edgespec's patch
scripts/patches/ggml-cpu-tiled-mode.patch: a thread may ask for the tiled kernel at
every batch size, where it too gives a row the same result whatever the batch, even
under GGML_CPU_TILED_MM=0 (the default for every other thread). LlamaModel.decode
takes it for a prompt's rows, the one-row kernel for every other row, and records
which kernel computed each position (docs/architecture.md, "Prompt kernels").
EDGESPEC_FAST_KERNELS=1 restores llama.cpp's defaults (F16 cache, matmul kernels), for
speed over bit-exactness, but
for the AMX repacking of Intel CPUs that have AMX: its matmul crashes the process on
the first batch of two or more tokens (llama.cpp issue 20824; Gemma 3 270M and
SmolLM2 Q4 models on a Xeon with AMX), so there the weights are not repacked at all.
"""

from __future__ import annotations

import os

FAST_KERNELS = os.environ.get("EDGESPEC_FAST_KERNELS", "") == "1"
if not FAST_KERNELS:
    os.environ.setdefault("GGML_CPU_TILED_MM", "0")

# A good neighbour. llama.cpp's CPU threads meet at an OpenMP barrier after every
# operation of a graph (hundreds a token), and libgomp lets a waiting thread spin
# 300,000 times before it sleeps. Where another process holds a core, the thread being
# waited for has lost it and the spinner burns its own time slice waiting: Gemma 3 270M
# on 2 threads fell from 43.7 tok/s to 4.5 beside one busy core. Sleeping at once
# (OMP_WAIT_POLICY=passive) kept 21 tok/s there but cost 39% on a quiet machine; a
# spin of 3,000 costs nothing quiet (45.3 tok/s) and keeps 20.5 beside a busy core,
# 15.4 each for two processes at once (benchmarks/bench_neighbour.py; docs/benchmarks.md,
# "A busy machine"). The user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT wins.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "3000"


def cpu_has_amx() -> bool:
    """Whether this CPU has AMX (where llama.cpp's weight repacking crashes, see above)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


#: weights repacked into llama.cpp's extra buffer types (fast mode, where it is safe)
REPACK_WEIGHTS = FAST_KERNELS and not cpu_has_amx()


def default_threads() -> int:
    """Physical-ish core count: llama.cpp decodes fastest with one thread per core."""
    return max(
        1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
