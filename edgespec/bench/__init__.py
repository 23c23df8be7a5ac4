"""``edgespec bench``: plain vs speculative decoding on shipped workloads, side by side.

workloads (prompt files), corpus (a corpus of texts in tuning and validation
halves), runner (alternating timed runs in one process), llamacpp (llama.cpp's own
binaries on the same workload; llamaserver and vs_server: llama-server's decoding and
n-gram drafters, compared), stats (pure statistics, projection, goals), report
(JSON and Markdown tables), chart (PNG), memory (peak RSS), load (``--load N``: busy
processes beside the measurement).

Internal, as every module below ``edgespec``: the names a user or the harness in
``benchmarks/`` needs (``Workload``, ``builtin_workloads``, ``parse_workload``,
``render_workload``, ``load_corpus``, ``split_of``) are exported by ``edgespec``
itself (docs/library.md), and benchmarks/ imports nothing else of edgespec's
(tests/test_architecture.py checks it).
"""
