"""scripts/device_check.sh's parts that run without a GPU, run here for real.

The device machine (docs/gpu.md) builds llama-cpp-python from a trimmed sdist and
runs benchmarks/device/checks.py with every layer offloaded; here the same checks run
with 0 GPU layers on the synthetic models, and the trimming and the shell script's
cuBLAS lookup on small fake trees.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DEVICE = ROOT / "benchmarks" / "device"
SCRIPT = ROOT / "scripts" / "device_check.sh"
LIMIT_BYTES = 64 << 20  # what the device tool carries, working tree included


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"device_{name}", DEVICE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


trim_sdist = _load("trim_sdist")
big_model = _load("big_model")

L = "vendor/llama.cpp"
KEPT = [
    "PKG-INFO",
    "pyproject.toml",
    "CMakeLists.txt",
    "llama_cpp/__init__.py",
    f"{L}/CMakeLists.txt",
    f"{L}/src/llama.cpp",
    f"{L}/common/common.cpp",
    f"{L}/vendor/miniaudio/miniaudio.h",  # vendor/CMakeLists.txt adds it unconditionally
    f"{L}/ggml/src/ggml-backend.cpp",
    f"{L}/ggml/src/ggml-cuda/template-instances/mmq-instance-q8_0.cu",
    f"{L}/ggml/src/ggml-cpu/ggml-cpu.c",
    f"{L}/ggml/src/ggml-rpc/ggml-rpc.cpp",
]
DROPPED = [
    ".git/modules/vendor/llama.cpp/objects/pack/pack-1.pack",
    f"{L}/.git",
    f"{L}/models/ggml-vocab-llama-bpe.gguf",
    f"{L}/docs/build.md",
    f"{L}/tools/mtmd/clip.cpp",
    f"{L}/tests/test-backend-ops.cpp",
    f"{L}/ggml/src/ggml-vulkan/ggml-vulkan.cpp",
    f"{L}/ggml/src/ggml-sycl/ggml-sycl.cpp",
    f"{L}/convert_hf_to_gguf.py",
    "examples/high_level_api/x.py",
]


def _fake_sdist(tmp_path: Path) -> Path:
    """A tarball shaped like the sdist, with one file per kept and dropped path."""
    path = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel in KEPT + DROPPED:
            data = f"contents of {rel}\n".encode() * 50
            info = tarfile.TarInfo(f"llama_cpp_python-0.3.36/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("rel", KEPT)
def test_build_inputs_are_kept(rel: str) -> None:
    assert not trim_sdist.dropped(rel)


@pytest.mark.parametrize("rel", DROPPED)
def test_unused_parts_are_dropped(rel: str) -> None:
    assert trim_sdist.dropped(rel)


def test_trim_writes_an_sdist_of_the_kept_files(tmp_path: Path) -> None:
    out = tmp_path / "out" / "trimmed.tar.gz"
    stats = trim_sdist.trim(_fake_sdist(tmp_path), out)
    with tarfile.open(out) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
        pkg_info = tar.extractfile("llama_cpp_python-0.3.36/PKG-INFO").read()
    assert names == {f"llama_cpp_python-0.3.36/{rel}" for rel in KEPT}
    assert pkg_info == b"contents of PKG-INFO\n" * 50
    assert stats["kept_files"] == len(KEPT) and stats["dropped_files"] == len(DROPPED)
    assert stats["archive_bytes"] == out.stat().st_size


def test_trim_reads_an_unpacked_folder_too(tmp_path: Path) -> None:
    with tarfile.open(_fake_sdist(tmp_path)) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    out = tmp_path / "from-folder.tar.gz"
    trim_sdist.trim(tmp_path / "unpacked" / "llama_cpp_python-0.3.36", out)
    with tarfile.open(out) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert names == {f"llama_cpp_python-0.3.36/{rel}" for rel in KEPT}


# scripts/bootstrap.sh keeps the sdist it built from; benchmarks/device/prepare.sh's own copy
REAL_SDIST = next(
    (
        p
        for p in (
            Path(sys.prefix) / "llama-sdist" / "llama_cpp_python-0.3.36.tar.gz",
            Path("/tmp/llsrc/llama_cpp_python-0.3.36.tar.gz"),
        )
        if p.is_file()
    ),
    Path("/tmp/llsrc/llama_cpp_python-0.3.36.tar.gz"),
)


@pytest.mark.skipif(not REAL_SDIST.is_file(), reason="the real sdist is not downloaded here")
def test_real_sdist_trims_under_the_carry_limit(tmp_path: Path) -> None:
    out = tmp_path / "trimmed.tar.gz"
    stats = trim_sdist.trim(REAL_SDIST, out)
    assert out.stat().st_size < LIMIT_BYTES // 8  # about 3.5 MB: room for the working tree
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
    top = "llama_cpp_python-0.3.36"
    for rel in ("PKG-INFO", "CMakeLists.txt", f"{L}/ggml/src/ggml-cuda/CMakeLists.txt"):
        assert f"{top}/{rel}" in names
    assert stats["dropped_bytes"] > 100e6


def test_q8_0_weights_have_the_asked_std() -> None:
    rng = np.random.default_rng(0)
    raw = big_model.q8_0_random(rng, 64, 256, std=0.01)
    assert raw.shape == (64, 256 // 32 * 34) and raw.dtype == np.uint8
    blocks = raw.reshape(64, 8, 34)
    scales = blocks[:, :, :2].copy().view(np.float16).astype(np.float32)
    values = blocks[:, :, 2:].copy().view(np.int8).astype(np.float32) * scales
    assert abs(float(values.std()) / 0.01 - 1) < 0.05
    with pytest.raises(ValueError):
        big_model.q8_0_random(rng, 4, 48, std=1.0)


@pytest.fixture(scope="module")
def models_dir(synthetic_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """The synthetic models and a small big_target/big_draft pair in one folder."""
    d = tmp_path_factory.mktemp("device-models")
    for name, path in synthetic_models.items():
        (d / f"{name}.gguf").symlink_to(path)
    shape = big_model.Shape(n_layer=2, n_embd=256, n_head=4, n_head_kv=2, n_ff=512)
    paths = big_model.build_big_models(d, shape)
    assert paths["big_draft"].stat().st_size < paths["big_target"].stat().st_size
    return d


def test_checks_on_cpu_write_every_result(models_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(DEVICE / "checks.py"), "--models", str(models_dir)]
        + ["--out", str(out), "--gpu-layers", "0", "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "costs.json",
        "exactness.json",
        "summary.json",
        "variants.json",
    ]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == {}
    goals = summary["goals"]
    assert goals["greedy_equal_tiny"] is True and goals["greedy_equal_big"] is True
    assert goals["chi_square_passed"] is True
    assert goals["verify_9_model"] == "big_target" and goals["verify_9_ratio"] > 0

    exactness = json.loads((out / "exactness.json").read_text())
    assert exactness["greedy_tiny"]["acceptance"]["draft_same"] == 1.0
    assert 0 < exactness["greedy_big"]["acceptance"]["big_draft"] < 1
    for key in ("logits_tiny", "logits_big"):
        assert isinstance(exactness[key]["identical"], bool)
        assert set(exactness[key]["max_abs_diff"]) == {
            f"depth={d},k={k}" for d in (16, 300) for k in (2, 9)
        }

    costs = json.loads((out / "costs.json").read_text())
    curve = costs["curve_big"]
    assert len(curve["median_s"]) == len(curve["ratio"]) == 12 and curve["ratio"][0] == 1.0
    assert all(s > 0 for s in curve["min_s"])
    speed = costs["speed_big"]
    assert speed["gamma=4"]["equal_to_plain"] is True and speed["plain"]["tokens"] > 0

    variants = json.loads((out / "variants.json").read_text())["kernel_variants"]
    assert set(variants["variants"]) == {"default", "flash_attn_off"}
    for entry in variants["variants"].values():
        assert set(entry["models"]) == {"target", "big_target"}, entry.get("error")
        assert entry["models"]["big_target"]["ratio_9"] > 0
    assert "GGML_CUDA_FORCE_MMQ" in variants["not_run"]


def test_goals_from_partial_results() -> None:
    checks = _load("checks")
    files = {
        "exactness": {"greedy_tiny": {"equal": False}},
        "costs": {"curve_tiny": {"ratio": [1.0 + 0.05 * k for k in range(12)]}},
        "variants": {},
    }
    goals = checks.goals(files)
    assert goals["greedy_equal_tiny"] is False and goals["greedy_equal_big"] is None
    assert goals["chi_square_passed"] is None
    assert goals["verify_9_model"] == "target"
    assert goals["verify_9_ratio"] == pytest.approx(1.4) and goals["verify_9_met"] is True


def test_scripts_parse_and_document_the_device_call() -> None:
    for script in (SCRIPT, DEVICE / "prepare.sh"):
        subprocess.run(["bash", "-n", str(script)], check=True)
    header = SCRIPT.read_text()
    assert "command:   bash scripts/device_check.sh" in header
    assert 'carry:     [".whl", ".device-src"]' in header
    assert "timeout_s: 600" in header
    # edgespec doctor on the big pair, its report among the files that come back
    assert "step doctor 90 run_doctor" in header and '--json >"$OUT/doctor.json"' in header


def test_cuda_lib_args_find_pip_cublas(tmp_path: Path) -> None:
    """A toolkit without cuBLAS: the flags point at the pip wheel's, through links."""
    site = tmp_path / "site" / "nvidia" / "cu13"
    (site / "include").mkdir(parents=True)
    (site / "lib").mkdir()
    (site / "include" / "cublas_v2.h").write_text("")
    for lib in ("libcublas.so.13", "libcublasLt.so.13"):
        (site / "lib" / lib).write_text("")
    function = subprocess.run(
        ["sed", "-n", "/^cuda_lib_args() {/,/^}/p", str(SCRIPT)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert function.strip().endswith("}")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "nvcc").write_text("#!/bin/sh\n")
    (fake_bin / "nvcc").chmod(0o755)
    env = {
        **os.environ,
        "WORK": str(tmp_path / "work"),
        "PY": sys.executable,
        "PYTHONPATH": str(tmp_path / "site"),
        "PATH": f"{fake_bin}:{os.environ['PATH']}",
    }
    out = subprocess.run(
        ["bash", "-c", function + "\ncuda_lib_args"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    links = tmp_path / "work" / "cudalibs"
    assert f"-DCUDA_cublas_LIBRARY={links}/libcublas.so" in out
    assert f"-DCUDA_cublasLt_LIBRARY={links}/libcublasLt.so" in out
    assert f"-DCMAKE_CUDA_FLAGS=-I{site}/include" in out
    assert (links / "libcublas.so").resolve() == site / "lib" / "libcublas.so.13"


def test_a_variants_context_params_reach_llama_cpp(synthetic_models) -> None:
    """variants.py sets llama.cpp's context fields through LlamaModel(context_params=...):
    the model loads and decodes with them; a field llama.cpp lacks is a one-line error."""
    variants = _load("variants")
    from edgespec import BackendError, LlamaModel

    ctx = variants.VARIANTS["kv_f32_fa_off"]["ctx"]
    path = synthetic_models["target"]
    with LlamaModel(path, n_ctx=128, n_threads=1, context_params=ctx) as m:
        got = m.decode(m.tokenize("one two three"), logits="last").copy()
        assert got.shape == (1, m.n_vocab) and np.isfinite(got).all()
    with pytest.raises(BackendError, match="no llama.cpp context parameter 'no_such'"):
        LlamaModel(path, n_ctx=128, n_threads=1, context_params={"no_such": 1})
