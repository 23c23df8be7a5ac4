"""From what a user typed (a path or a model name) to loaded models and a drafter."""

from __future__ import annotations

import sys
from pathlib import Path

from .backend import DEFAULT_CTX, LlamaModel
from .compat import check_compatible
from .drafters import Drafter, ModelDrafter
from .errors import ModelLoadError

NO_DRAFT = ("none", "")


def resolve_model(spec: str) -> Path:
    """A .gguf path as given, or an embedded model name fetched on first use."""
    from .embedded import EMBEDDED_MODELS, ensure_embedded_model

    path = Path(spec).expanduser()
    if path.suffix == ".gguf" or path.exists() or "/" in spec:
        if not path.exists():
            raise ModelLoadError(f"model file not found: {spec}")
        return path
    if spec in EMBEDDED_MODELS:
        return ensure_embedded_model(spec, progress=lambda msg: print(msg, file=sys.stderr))
    known = ", ".join(sorted(EMBEDDED_MODELS))
    raise ModelLoadError(f"no model file or known model named {spec!r} (known: {known})")


def load_pair(
    target_spec: str,
    draft_spec: str | None,
    *,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    gpu_layers: int = 0,
    draft_gpu_layers: int = 0,
) -> tuple[LlamaModel, Drafter | None]:
    """Load the target and, unless draft_spec is none, a compatible draft model."""
    n_ctx = n_ctx or DEFAULT_CTX
    if n_ctx < 16:
        raise ModelLoadError(f"context of {n_ctx} tokens is too small")
    target = LlamaModel(
        resolve_model(target_spec), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=gpu_layers
    )
    if draft_spec is None or draft_spec.lower() in NO_DRAFT:
        return target, None
    draft = LlamaModel(
        resolve_model(draft_spec), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=draft_gpu_layers
    )
    check_compatible(target, draft)
    return target, ModelDrafter(draft)
