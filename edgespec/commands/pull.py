"""``edgespec pull NAME...``: fetch catalog models (or both models of a pair), or models by
Hub name (``hf:OWNER/REPO[:QUANT|/FILE.gguf]``), into the model directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import CatalogError
from ..modelstore.catalog import Catalog, load_catalog


def register(sub: argparse._SubParsersAction) -> None:
    """Add the pull subcommand."""
    p = sub.add_parser(
        "pull",
        help="download catalog models, or models by Hub name, into the model directory",
        description="Fetch catalog models (a pair name fetches its target and draft) or "
        "models by Hugging Face Hub name, as llama-server's -hf: hf:OWNER/REPO picks the "
        "Q4_K_M file (else Q8_0, else the first), hf:OWNER/REPO:QUANT the .gguf with that "
        "quant in its name, hf:OWNER/REPO/FILE.gguf that file. Verifies size and sha256 "
        "and moves them into place; an interrupted download resumes. Prints one path per "
        "model.",
    )
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="model or pair name (edgespec models), or hf:OWNER/REPO[:QUANT|/FILE.gguf]",
    )
    p.add_argument("--dir", type=Path, default=None, help="model directory (default: cache)")
    p.set_defaults(run=run)


def expand(names: list[str], catalog: Catalog) -> list[str]:
    """Model names for ``names`` (pairs expand to target and draft), without repeats.

    Raises CatalogError naming the first unknown name, with close names, and
    ModelLoadError for a malformed Hub name.
    """
    out: list[str] = []
    for name in names:
        if name.startswith("hf:"):
            from ..modelstore.hfspec import parse_hf_spec

            wanted = [str(parse_hf_spec(name))]
        elif name in catalog.pairs:
            wanted = [catalog.pairs[name].target, catalog.pairs[name].draft]
        elif name in catalog.models:
            wanted = [name]
        else:
            close = catalog.suggest(name)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise CatalogError(f"unknown model or pair {name!r}{hint} (see edgespec models)")
        out += [w for w in wanted if w not in out]
    return out


def run(args: argparse.Namespace) -> int:
    """Fetch each model in turn; stop at the first failure (an EdgespecError)."""
    from ..modelstore.fetch import console, ensure_catalog_model
    from ..modelstore.gguf_meta import check_usable

    catalog = load_catalog()
    names = expand(args.names, catalog)  # all names are checked before any download
    say, bar = console()
    for name in names:
        if name.startswith("hf:"):
            from ..modelstore.hfspec import ensure_hf_model

            path = ensure_hf_model(name, directory=args.dir, say=say, bar=bar)
        else:
            path = ensure_catalog_model(name, directory=args.dir, catalog=catalog, say=say, bar=bar)
        check_usable(path)
        print(path, flush=True)
    return 0
