# Sourced by scripts/edgespec and scripts/test: make .venv and install edgespec into it.
# Reinstalls only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
STAMP="$VENV/.edgespec-installed"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
if [ ! -x "$VENV/bin/python" ]; then
  echo "edgespec: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  echo "edgespec: installing edgespec and its dependencies (llama-cpp-python compiles llama.cpp: ~5 minutes the first time)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  # a GPU build (CMAKE_ARGS) must not be served from pip's cache of an earlier CPU build
  nocache=(); [ -n "${CMAKE_ARGS:-}" ] && nocache=(--no-cache-dir)
  "$VENV/bin/python" -m pip install --quiet ${nocache[@]+"${nocache[@]}"} -e "$ROOT[dev]" >&2
  echo "$want" > "$STAMP"
fi
