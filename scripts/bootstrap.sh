# Sourced by scripts/edgespec and scripts/test: make .venv and install edgespec into it.
# Reinstalls only when pyproject.toml changed since the last install; rebuilds
# llama-cpp-python only when its version or its build flags (CMAKE_ARGS) changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
STAMP="$VENV/.edgespec-installed"
LLAMA_STAMP="$VENV/.edgespec-llama-cpp"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
# llama.cpp with its RPC backend (edgespec worker, --rpc), on top of the user's own
# flags (a GPU build, say), unless they set GGML_RPC themselves
CMAKE_ARGS="${CMAKE_ARGS:-}"
case "$CMAKE_ARGS" in *GGML_RPC*) ;; *) CMAKE_ARGS="${CMAKE_ARGS:+$CMAKE_ARGS }-DGGML_RPC=on" ;; esac
export CMAKE_ARGS
llama_req="$(grep -o 'llama-cpp-python==[^"]*' "$ROOT/pyproject.toml")"
# edgespec's patches to the llama.cpp that llama-cpp-python vendors (scripts/patches/README.md)
patches_sum="$(cat "$ROOT"/scripts/patches/*.patch | sha256sum | cut -c1-16)"
llama_want="$llama_req CMAKE_ARGS=$CMAKE_ARGS patches=$patches_sum"
if [ ! -x "$VENV/bin/python" ]; then
  echo "edgespec: creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$LLAMA_STAMP" 2>/dev/null || true)" != "$llama_want" ]; then
  echo "edgespec: building $llama_req ($CMAKE_ARGS; it compiles llama.cpp: 5-20 minutes)" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  # built from its sdist, patched, with these flags: never a wheel from pip's cache
  src="$VENV/llama-sdist"  # the pristine sdist stays here (tests check the patches apply)
  rm -rf "$src" && mkdir -p "$src"
  "$VENV/bin/python" -m pip download --quiet --no-cache-dir --no-deps --no-binary :all: \
    -d "$src" "$llama_req" >&2
  tar -xzf "$src"/llama_cpp_python-*.tar.gz -C "$src"
  tree="$(echo "$src"/llama_cpp_python-*/)"
  for p in "$ROOT"/scripts/patches/*.patch; do
    # git apply (no fuzz). The sdist ships its own .git; should it ever not, the ceiling
    # keeps git from finding edgespec's repository above, where it skips every path
    if ! (cd "$tree" && GIT_CEILING_DIRECTORIES="$src" git apply -p1 "$p") >&2; then
      echo "edgespec: $(basename "$p") no longer applies to $llama_req" >&2
      exit 1
    fi
  done
  "$VENV/bin/python" -m pip install --quiet --no-cache-dir --force-reinstall --no-deps "$tree" >&2
  rm -rf "$tree"
  rm -f "$STAMP"  # its dependencies come with edgespec's, below
  echo "$llama_want" > "$LLAMA_STAMP"
fi
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  echo "edgespec: installing edgespec and its dependencies" >&2
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >&2
  "$VENV/bin/python" -m pip install --quiet -e "$ROOT[dev]" >&2
  echo "$want" > "$STAMP"
fi
