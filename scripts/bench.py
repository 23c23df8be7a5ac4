#!/usr/bin/env python3
"""Plain vs speculative decoding, side by side: now ``edgespec bench``.

This script is kept as a thin wrapper so old command lines still find it:

    .venv/bin/python scripts/bench.py --reps 3 --json out.json --chart out.png

is ``edgespec bench --reps 3 --json out.json --chart out.png`` (see
``edgespec bench --help`` and the README's Benchmarks section).
"""

from __future__ import annotations

import sys

from edgespec.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
