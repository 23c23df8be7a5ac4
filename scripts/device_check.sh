#!/usr/bin/env bash
# edgespec on a CUDA GPU: build, exactness, costs. One command for the device tool.
#
# What it does, on a bare CUDA machine with no network (docs/gpu.md has the details):
#   1. installs the carried wheels (.whl/) into $WORK/pysite and builds llama-cpp-python
#      from the carried, trimmed sdist (.device-src/) with -DGGML_CUDA=on
#      -DCMAKE_CUDA_ARCHITECTURES=native, 16 jobs, no tests/tools/examples/llava;
#   2. writes the synthetic models (tests/make_test_models.py) and a memory-bound
#      3.7 GB Q8_0 pair (benchmarks/device/big_model.py) under $WORK, never carried;
#   3. runs benchmarks/device/checks.py with every layer offloaded (--gpu-layers 99):
#      greedy speculative == plain, the chi-square sampling test, batch-vs-single
#      logits, the verify cost curve k = 1..48, plain-vs-speculative timings and the
#      kernel-setting variants; then benchmarks/kernel_check.py, when it takes --gpu-layers;
#   4. runs `edgespec doctor --json` on the big pair (ngram and big_draft, every layer
#      offloaded): the backend as edgespec sees it, its exactness self-test, the verify
#      curve's regime, each drafter's predicted and measured speed-up;
#   5. writes into $OUT (at most 8 files): log.txt, setup.json, exactness.json,
#      costs.json, variants.json, summary.json, kernel_check.txt, doctor.json.
# Each step has a time cap inside DEVICE_CHECK_BUDGET_S (default 560 s), so the
# command ends, with what it measured, inside the device tool's 10 minutes; every
# JSON file is written as soon as its part is done.
#
# HERE, first (writes the git-ignored .whl/ and .device-src/, about 4 MB):
#   bash benchmarks/device/prepare.sh
# Then the device tool's run, with these arguments:
#   command:   bash scripts/device_check.sh
#   carry:     [".whl", ".device-src"]
#   timeout_s: 600
# and give_back afterwards unless rerunning at once. A rerun on the still-warm machine
# (within its 30 s) skips a finished build and the models (kept under $WORK), and
# resumes a build that its cap cut short (DEVICE_CHECK_BUILD_S, default 420 s) from
# the objects already compiled.
#
# A dry run here, without a GPU (CPU build, 0 GPU layers, a small "big" model):
#   DEVICE_CHECK_CPU=1 OUT=/tmp/dc-out PYTHON=.venv/bin/python bash scripts/device_check.sh
# (PYTHON needs packaging and pathspec, scikit-build-core's dependencies, importable;
# DEVICE_CHECK_BUILD=0 skips the build and uses the llama_cpp PYTHON already has.)
set -uo pipefail
{ # the whole script is one block: bash reads it all before running (safe to edit meanwhile)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
START=$SECONDS
BUDGET="${DEVICE_CHECK_BUDGET_S:-560}"
CPU_ONLY="${DEVICE_CHECK_CPU:-0}"
OUT="${OUT:-$ROOT/device-out}"
WORK="${DEVICE_WORK:-/tmp/edgespec-device}"
PY="${PYTHON:-python3}"
# the models (4 GB): in memory (/dev/shm) when it has 10 GB free, a disk write less
MODELS="$WORK/models"
shm_kb="$(df -k --output=avail /dev/shm 2>/dev/null | tail -1 | tr -d ' ')"
[ "$CPU_ONLY" != 1 ] && [ "${shm_kb:-0}" -gt 10485760 ] 2>/dev/null &&
  MODELS=/dev/shm/edgespec-models
MODELS="${DEVICE_MODELS:-$MODELS}"
LLAMA_VERSION="$(grep -o 'llama-cpp-python==[^"]*' pyproject.toml | cut -d= -f3)"
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1

# CMake flags: the CUDA backend for this GPU only, and nothing the Python package
# does not load (no tests, tools, examples, server, llava/mtmd, RPC, OpenSSL).
CMAKE_ARGS="-DLLAVA_BUILD=off -DLLAMA_BUILD_TESTS=off -DLLAMA_BUILD_EXAMPLES=off"
CMAKE_ARGS+=" -DLLAMA_BUILD_TOOLS=off -DLLAMA_BUILD_SERVER=off -DLLAMA_BUILD_APP=off"
CMAKE_ARGS+=" -DLLAMA_OPENSSL=off -DGGML_RPC=off -DGGML_CCACHE=off -DGGML_NATIVE=on"
if [ "$CPU_ONLY" = 1 ]; then
  GPU_LAYERS=0
  BIG_SHAPE="--layers 4 --embd 512 --heads 8 --kv-heads 2 --ff 1024"
  JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
else
  GPU_LAYERS="${GPU_LAYERS:-99}"
  BIG_SHAPE=""
  JOBS="${CMAKE_BUILD_PARALLEL_LEVEL:-16}"
  CMAKE_ARGS+=" -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-native}"
  CMAKE_ARGS+=" -DGGML_CUDA_FA_ALL_QUANTS=off"
fi

# cuBLAS and the driver library, which a CUDA toolkit assembled from pip wheels (as on
# this workplace's images) may lack: cuBLAS then comes from the wheel PyTorch installs
# (nvidia-cublas: nvidia/cu13/{include,lib}, no unversioned .so), libcuda from the
# driver (ldconfig, /usr/local/nvidia). Prints CMake flags for what the toolkit lacks,
# with unversioned links to the libraries in $WORK/cudalibs.
cuda_lib_args() {
  local cuda root lib links="$WORK/cudalibs"
  cuda="$(dirname "$(readlink -f "$(command -v nvcc)")")/.."
  mkdir -p "$links"
  if ! ls "$cuda"/include/cublas_v2.h "$cuda"/targets/*/include/cublas_v2.h >/dev/null 2>&1; then
    root="$("$PY" -c '
import glob, os, sys
for p in sys.path:
    for h in sorted(glob.glob(os.path.join(p or ".", "nvidia", "*", "include", "cublas_v2.h"))):
        print(os.path.dirname(os.path.dirname(os.path.abspath(h))))
        sys.exit()
')"
    if [ -n "$root" ]; then
      echo "cuBLAS from $root" >&2
      ln -sf "$(ls "$root"/lib/libcublas.so.* | head -1)" "$links/libcublas.so"
      ln -sf "$(ls "$root"/lib/libcublasLt.so.* | head -1)" "$links/libcublasLt.so"
      echo "-DCUDA_cublas_LIBRARY=$links/libcublas.so -DCUDA_cublasLt_LIBRARY=$links/libcublasLt.so"
      echo "-DCMAKE_CUDA_FLAGS=-I$root/include -DCMAKE_CXX_FLAGS=-I$root/include"
    else
      echo "no cuBLAS found (toolkit or pip): the CUDA configure will fail" >&2
    fi
  fi
  if ! ls "$cuda"/lib64/libcuda.so "$cuda"/lib64/stubs/libcuda.so \
    "$cuda"/targets/*/lib/stubs/libcuda.so >/dev/null 2>&1; then
    lib="$( (ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libcuda\.so[.0-9]*$'
      ls /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* 2>/dev/null) |
      head -1)"
    if [ -n "$lib" ]; then
      echo "libcuda from $lib" >&2
      ln -sf "$lib" "$links/libcuda.so"
      echo "-DCUDA_cuda_driver_LIBRARY=$links/libcuda.so"
    fi
  fi
}

declare -A STEP_S STEP_RC
left() { echo $((BUDGET - (SECONDS - START))); }
# step NAME CAP_S COMMAND...: run it (a program or one of the functions below, exported)
# under min(CAP_S, budget left - 5 s); timeout kills its whole process group at the cap
step() {
  local name="$1" cap="$2" t0=$SECONDS rc limit
  shift 2
  limit=$(($(left) - 5))
  [ "$cap" -lt "$limit" ] && limit=$cap
  if [ "$limit" -le 5 ]; then
    echo "== $name: skipped (no time left)"
    STEP_RC[$name]=skipped
    return 1
  fi
  echo "== $name (at most ${limit} s) at $((SECONDS - START)) s"
  timeout -k 5 "$limit" bash -c '"$@"' step "$@"
  rc=$?
  STEP_RC[$name]=$rc
  STEP_S[$name]=$((SECONDS - t0))
  echo "== $name: exit $rc after ${STEP_S[$name]} s"
  return $rc
}

install_wheels() {
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/pysite" .whl/*.whl
}

build_llama() {
  local stamp="$WORK/site/.edgespec-build" want="$LLAMA_VERSION $CMAKE_ARGS"
  if [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "llama-cpp-python already built here ($want)"
    return 0
  fi
  rm -rf "$WORK/src" "$WORK/site"
  mkdir -p "$WORK/src"
  tar xzf ".device-src/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$WORK/src" || return 1
  echo "CMAKE_ARGS=$CMAKE_ARGS CMAKE_BUILD_PARALLEL_LEVEL=$JOBS"
  CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$JOBS" \
    "$PY" -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir \
    --target "$WORK/site" -C "build-dir=$WORK/build" "$WORK/src/llama_cpp_python-$LLAMA_VERSION" \
    >"$WORK/build.log" 2>&1
  local rc=$?
  grep -E "^-- (Including|CUDA|Using CUDA|ggml)|error|Error" "$WORK/build.log" | head -40
  [ $rc -eq 0 ] || tail -60 "$WORK/build.log"
  [ $rc -eq 0 ] && echo "$want" >"$stamp"
  return $rc
}

write_models() {
  [ -f "$MODELS/draft_noisy.gguf" ] || "$PY" tests/make_test_models.py "$MODELS" || return 1
  [ -f "$MODELS/big_draft.gguf" ] ||
    "$PY" benchmarks/device/big_model.py "$MODELS" $BIG_SHAPE || return 1  # (split)
  ls -la "$MODELS"
}

kernel_check() {
  set -o pipefail
  if ! "$PY" benchmarks/kernel_check.py --help | grep -q -- --gpu-layers; then
    echo "benchmarks/kernel_check.py takes no --gpu-layers: not run (checks.py measures the same)" \
      | tee "$OUT/kernel_check.txt"
    return 0
  fi
  "$PY" benchmarks/kernel_check.py --model "$MODELS/big_target.gguf" --threads 1 \
    --gpu-layers "$GPU_LAYERS" 2>&1 | tee "$OUT/kernel_check.txt"
}

# doctor.json: edgespec doctor on the big pair, on two prompts of the synthetic vocabulary
run_doctor() {
  local prompts="$WORK/doctor-prompts.jsonl"
  printf '%s\n' '{"prompt": "one two three four five six seven eight one two three four five"}' \
    '{"prompt": "the cat sat on the mat and the dog sat on the log and the cat sat on"}' \
    >"$prompts"
  "$PY" -m edgespec doctor --target "$MODELS/big_target.gguf" --draft ngram \
    --draft "$MODELS/big_draft.gguf" --gpu-layers "$GPU_LAYERS" --draft-gpu-layers "$GPU_LAYERS" \
    --prompts "$prompts" --max-tokens 48 --reps 3 --budget-s 40 --ctx 1024 --json >"$OUT/doctor.json"
}

# setup.json: the machine, the versions there, each step's exit status and seconds
write_setup() {
  local steps="" name
  for name in "${!STEP_RC[@]}"; do
    steps+="\"$name\": {\"rc\": \"${STEP_RC[$name]}\", \"seconds\": ${STEP_S[$name]:-null}},"
  done
  STEPS="{${steps%,}}" CMAKE_ARGS="$CMAKE_ARGS" GPU_LAYERS="$GPU_LAYERS" MODELS="$MODELS" \
    "$PY" - >"$OUT/setup.json" <<'EOF'
import json, os, platform, subprocess, sys
from importlib import metadata

def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable: {e}"

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None

info = {
    "python": sys.version, "machine": platform.machine(),
    "nvidia_smi": run("nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                      "--format=csv,noheader"),
    "nvcc": run("nvcc", "--version").splitlines()[-1:],
    "packages": {n: version(n) for n in ("numpy", "scipy", "cmake", "ninja", "scikit-build-core",
                                         "gguf", "diskcache", "jinja2", "llama_cpp_python")},
    "cmake_args": os.environ["CMAKE_ARGS"], "gpu_layers": int(os.environ["GPU_LAYERS"]),
    "steps": json.loads(os.environ["STEPS"]),
}
try:
    import llama_cpp
    info["llama_cpp"] = {"version": llama_cpp.__version__, "file": llama_cpp.__file__,
                         "gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
                         "system_info": llama_cpp.llama_print_system_info().decode()}
except Exception as e:  # recorded, not fatal
    info["llama_cpp"] = f"import failed: {e!r}"
models = os.environ["MODELS"]
if os.path.isdir(models):
    info["models_bytes"] = {f: os.path.getsize(os.path.join(models, f)) for f in os.listdir(models)}
info["models_dir"] = models
print(json.dumps(info, indent=1))
EOF
}

if [ "$CPU_ONLY" != 1 ]; then
  CMAKE_ARGS+="$(cuda_lib_args | tr '\n' ' ' | sed 's/^/ /; s/ $//')"
  if [ -e "$WORK/cudalibs/libcublas.so" ]; then  # where the loader finds libcublas.so.13
    cublas_lib="$(dirname "$(readlink -f "$WORK/cudalibs/libcublas.so")")"
    export LD_LIBRARY_PATH="$cublas_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi
export ROOT OUT WORK MODELS PY LLAMA_VERSION CMAKE_ARGS JOBS GPU_LAYERS BIG_SHAPE
export -f install_wheels build_llama write_models kernel_check run_doctor
echo "edgespec device check: $(date -u +%FT%TZ) on $(hostname), budget ${BUDGET} s"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
export PYTHONPATH="$WORK/pysite:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
step wheels 60 install_wheels
if [ "${DEVICE_CHECK_BUILD:-1}" = 0 ]; then  # (dry runs: the llama_cpp $PY already has)
  STEP_RC[build]=0
else
  step build "${DEVICE_CHECK_BUILD_S:-420}" build_llama
fi
# a configure that failed at once on "native" (no GPU seen at build time): the H200's 90
if [ "${STEP_RC[build]}" != 0 ] && [ "${STEP_S[build]:-999}" -lt 90 ] &&
  [[ "$CMAKE_ARGS" == *ARCHITECTURES=native* ]]; then
  CMAKE_ARGS="${CMAKE_ARGS/ARCHITECTURES=native/ARCHITECTURES=90}"
  export CMAKE_ARGS
  rm -rf "$WORK/build"
  step build "${DEVICE_CHECK_BUILD_S:-420}" build_llama
fi
write_setup  # now, and again at the end: a run cut short still says how the build went
if [ "${STEP_RC[build]}" = 0 ]; then
  export PYTHONPATH="$WORK/site:$PYTHONPATH"
  export EDGESPEC_CACHE_DIR="$WORK/cache"
  if step models 90 write_models; then
    step checks 400 "$PY" benchmarks/device/checks.py --models "$MODELS" --out "$OUT" \
      --gpu-layers "$GPU_LAYERS"
    step doctor 90 run_doctor
    step kernel_check 60 kernel_check
  fi
fi
write_setup
echo "done in $((SECONDS - START)) s; files in $OUT:"
ls -la "$OUT"
[ "${STEP_RC[checks]:-1}" = 0 ]
exit $?
}
