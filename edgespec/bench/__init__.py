"""``edgespec bench``: plain vs speculative decoding on shipped workloads, side by side.

workloads (prompt files), runner (alternating timed runs in one process),
llamacpp (llama.cpp's own binaries on the same workload), stats (pure
statistics, projection, goals), report (JSON and Markdown tables), chart (PNG).
"""
