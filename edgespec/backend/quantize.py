"""Requantizing a GGUF with llama.cpp's ``llama_model_quantize`` (what llama-quantize does).

A smaller quantization of the target is a draft with the target's own vocabulary,
made locally from the file already here. llama.cpp quantizes in a child process:
a Ctrl+C then stops it at once (the C call cannot be interrupted in this process),
and an abort inside llama.cpp ends the child, not the caller, which says why in
one line.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

from ..errors import BackendError
from .bindings import ll
from .kernels import default_threads
from .log import _failure_reason, _log_tail

#: The llama.cpp file types ``quantize_model`` writes, by name: those that need no
#: importance matrix (IQ1/IQ2 and Q2_K_S do) and are meant for any model (TQ1_0 and
#: TQ2_0 are for ternary ones, MXFP4_MOE for mixtures of experts).
QUANT_TYPES: dict[str, int] = {
    "F32": ll.LLAMA_FTYPE_ALL_F32,
    "F16": ll.LLAMA_FTYPE_MOSTLY_F16,
    "BF16": ll.LLAMA_FTYPE_MOSTLY_BF16,
    "Q8_0": ll.LLAMA_FTYPE_MOSTLY_Q8_0,
    "Q6_K": ll.LLAMA_FTYPE_MOSTLY_Q6_K,
    "Q5_K_M": ll.LLAMA_FTYPE_MOSTLY_Q5_K_M,
    "Q5_K_S": ll.LLAMA_FTYPE_MOSTLY_Q5_K_S,
    "Q5_1": ll.LLAMA_FTYPE_MOSTLY_Q5_1,
    "Q5_0": ll.LLAMA_FTYPE_MOSTLY_Q5_0,
    "Q4_K_M": ll.LLAMA_FTYPE_MOSTLY_Q4_K_M,
    "Q4_K_S": ll.LLAMA_FTYPE_MOSTLY_Q4_K_S,
    "Q4_1": ll.LLAMA_FTYPE_MOSTLY_Q4_1,
    "Q4_0": ll.LLAMA_FTYPE_MOSTLY_Q4_0,
    "IQ4_NL": ll.LLAMA_FTYPE_MOSTLY_IQ4_NL,
    "IQ4_XS": ll.LLAMA_FTYPE_MOSTLY_IQ4_XS,
    "Q3_K_L": ll.LLAMA_FTYPE_MOSTLY_Q3_K_L,
    "Q3_K_M": ll.LLAMA_FTYPE_MOSTLY_Q3_K_M,
    "Q3_K_S": ll.LLAMA_FTYPE_MOSTLY_Q3_K_S,
    "Q2_K": ll.LLAMA_FTYPE_MOSTLY_Q2_K,
}


def quant_type(name: str) -> int:
    """The llama_ftype of a type name (any case); ValueError listing the valid ones."""
    ftype = QUANT_TYPES.get(name.strip().upper())
    if ftype is None:
        raise ValueError(f"unknown quantization type {name!r} (one of {', '.join(QUANT_TYPES)})")
    return ftype


def quantize_model(
    src: Path, dst: Path, type_name: str, *, n_threads: int | None = None, pure: bool = False
) -> None:
    """Write ``src`` requantized to ``type_name`` at ``dst`` (llama.cpp's allow_requantize:
    already quantized tensors are dequantized and quantized again). With ``pure`` every
    tensor gets that type, the token embedding and output too (llama-quantize --pure);
    else llama.cpp's mix for the type (those two kept at more bits, e.g. Q6_K).

    ``dst`` is written in place: the caller makes it atomic (a temporary name, then a
    rename). BackendError (one line, llama.cpp's reason) when llama.cpp fails; a
    KeyboardInterrupt stops the child before it is raised again here.
    """
    quant_type(type_name)  # refused here, before a process starts
    threads = n_threads if n_threads and n_threads > 0 else default_threads()
    root = str(Path(__file__).resolve().parents[2])  # so that the child imports this edgespec
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))),
    }
    code = "from edgespec.backend.quantize import _child; _child()"
    args = [sys.executable, "-c", code, str(src), str(dst), type_name, str(threads), str(int(pure))]
    child = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = child.communicate()
    except BaseException:  # Ctrl+C: stop it before the caller removes what it wrote
        child.kill()
        child.wait()
        raise
    if child.returncode != 0:
        lines = [ln.strip() for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
        reason = lines[-1] if lines else f"llama.cpp ended with status {child.returncode}"
        raise BackendError(f"cannot quantize {src.name} to {type_name.upper()}: {reason}")


def _child() -> None:
    """The child's side: quantize argv's SRC to DST; on failure llama.cpp's reason as the
    last line of stderr and status 1."""
    src, dst, type_name, threads, pure = sys.argv[1:6]
    params = ll.llama_model_quantize_default_params()
    params.nthread = int(threads)
    params.ftype = quant_type(type_name)
    params.allow_requantize = True
    params.pure = pure == "1"
    _log_tail.clear()
    if ll.llama_model_quantize(src.encode(), dst.encode(), params) != 0:
        print(_failure_reason("llama_model_quantize failed"), file=sys.stderr)
        raise SystemExit(1)


def model_description(model: object) -> str:
    """llama.cpp's one-line description of a loaded model (architecture, size, type),
    e.g. "gemma3 270M Q4_0"."""
    buf = (ctypes.c_char * 256)()
    n = ll.llama_model_desc(model._model, buf, len(buf))  # type: ignore[attr-defined]
    return buf.value.decode("utf-8", "replace") if n > 0 else ""
