#!/usr/bin/env bash
# Run the model-store tests against the lowest versions pyproject.toml allows of the
# packages they lean on (huggingface-hub, httpx2, filelock), installed with pip into a
# temporary folder that goes first on PYTHONPATH. Needs the package index (pip), so
# CI does not run it; run it by hand after changing those bounds:
#
#   scripts/test_lowest_deps.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
LOWEST=(huggingface-hub==2.0.0 httpx2==2.0.0 filelock==4.0.0)

# The bounds in pyproject.toml must still start at these versions.
"$PY" - "${LOWEST[@]}" <<'PYEOF'
import re, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    spec = next((d for d in deps if re.match(rf"{re.escape(name)}\s*[<>=!~]", d)), None)
    if spec is None or f">={version.removesuffix('.0')}" not in spec.replace(" ", ""):
        sys.exit(f"pyproject.toml declares {spec!r}; update LOWEST in {sys.argv[0]} ({pin})")
PYEOF

TARGET=$(mktemp -d "${TMPDIR:-/tmp}/edgespec-lowest.XXXXXX")
trap 'rm -rf "$TARGET"' EXIT
"$PY" -m pip install --quiet --disable-pip-version-check --target "$TARGET" "${LOWEST[@]}"
export PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - "${LOWEST[@]}" <<'PYEOF'
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    got = version(name)
    assert got == want, f"{name}: {got} is first on the path, not {want}"
    print(f"using {name} {got}")
PYEOF
"$PY" -m pytest -q -p no:cacheprovider -m "not real_model" tests/test_hub.py tests/test_hf_models.py \
    tests/test_models_cli.py tests/test_dependencies.py tests/test_costs_cache.py "$@"
