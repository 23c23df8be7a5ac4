#!/usr/bin/env bash
# Run HERE (not on the device machine), once before scripts/device_check.sh travels:
# writes what the device machine cannot download into two git-ignored folders that
# the device tool's `carry` names:
#
#   .whl/        wheels missing from the device image (KINDS.md's package list):
#                gguf (model writing), diskcache (llama-cpp-python's dependency),
#                scikit-build-core (llama-cpp-python's build backend, pinned here)
#   .device-src/ llama-cpp-python's sdist trimmed to what its CUDA build reads
#                (benchmarks/device/trim_sdist.py: 77 MB -> about 3.5 MB), with
#                scripts/patches applied
#
# Both are added to .git/info/exclude (never committed). Prints their sizes; fails
# if the two together pass DEVICE_CARRY_LIMIT_MB (default 48: the device tool takes
# 64 MiB of working tree and carried files in all).
#
#   bash benchmarks/device/prepare.sh            # sdist from /tmp/llsrc or pip download
#   SDIST=path/to/llama_cpp_python-0.3.36.tar.gz bash benchmarks/device/prepare.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY=python3
LLAMA_VERSION="$(grep -o 'llama-cpp-python==[^"]*' pyproject.toml | cut -d= -f3)"
WHEELS=("gguf==0.19.0" "diskcache==5.6.3" "scikit-build-core==1.1.2")
LIMIT_MB="${DEVICE_CARRY_LIMIT_MB:-48}"

exclude="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$exclude")"
for pattern in /.whl/ /.device-src/; do
  grep -qxF "$pattern" "$exclude" 2>/dev/null || echo "$pattern" >>"$exclude"
done

# --- wheels (pure Python; one version of each, as the device README asks)
mkdir -p .whl
for spec in "${WHEELS[@]}"; do
  name="${spec%%==*}"
  # drop other versions of the same package: two stop the install there
  find .whl -maxdepth 1 -iname "$(echo "$name" | tr - _)-*.whl" ! -iname "*-${spec##*==}-*" -delete
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "$spec"
done

# --- the trimmed sdist
sdist="${SDIST:-/tmp/llsrc/llama_cpp_python-$LLAMA_VERSION.tar.gz}"
if [ ! -f "$sdist" ]; then
  mkdir -p /tmp/llsrc
  "$PY" -m pip download --quiet --no-deps --no-binary=:all: -d /tmp/llsrc \
    "llama-cpp-python==$LLAMA_VERSION"
  sdist="$(ls /tmp/llsrc/llama_cpp_python-"$LLAMA_VERSION".tar.gz)"
fi
mkdir -p .device-src
rm -f .device-src/*.tar.gz
# edgespec's patches (scripts/patches) go in before the trim, as scripts/bootstrap.sh does
unpacked="$(mktemp -d)"
tar -xzf "$sdist" -C "$unpacked"
for p in scripts/patches/*.patch; do
  (cd "$unpacked/llama_cpp_python-$LLAMA_VERSION" &&
    GIT_CEILING_DIRECTORIES="$unpacked" git apply -p1 "$ROOT/$p")
done
"$PY" benchmarks/device/trim_sdist.py "$unpacked/llama_cpp_python-$LLAMA_VERSION" \
  ".device-src/llama_cpp_python-$LLAMA_VERSION.tar.gz"
rm -rf "$unpacked"

whl_kb="$(du -sk .whl | cut -f1)"
src_kb="$(du -sk .device-src | cut -f1)"
echo "wheels: $((whl_kb / 1024)).$(((whl_kb % 1024) * 10 / 1024)) MB in .whl ($(ls .whl | wc -l) files)"
echo "trimmed sdist: $((src_kb / 1024)).$(((src_kb % 1024) * 10 / 1024)) MB in .device-src"
echo "carry: [\".whl\", \".device-src\"]"
if [ $(((whl_kb + src_kb) / 1024)) -ge "$LIMIT_MB" ]; then
  echo "prepare: carried files pass ${LIMIT_MB} MB" >&2
  exit 1
fi
