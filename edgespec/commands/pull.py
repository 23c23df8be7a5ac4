"""``edgespec pull NAME...``: fetch catalog models (or both models of a pair) into the model dir."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import CatalogError
from ..modelstore.catalog import Catalog, load_catalog


def register(sub: argparse._SubParsersAction) -> None:
    """Add the pull subcommand."""
    p = sub.add_parser(
        "pull",
        help="download catalog models into the model directory",
        description="Fetch catalog models (a pair name fetches its target and draft), "
        "verify their sha256 and move them into place. Prints one path per model.",
    )
    p.add_argument("names", nargs="+", metavar="NAME", help="model or pair name (edgespec models)")
    p.add_argument("--dir", type=Path, default=None, help="model directory (default: cache)")
    p.set_defaults(run=run)


def expand(names: list[str], catalog: Catalog) -> list[str]:
    """Model names for ``names`` (pairs expand to target and draft), without repeats.

    Raises CatalogError naming the first unknown name, with close names.
    """
    out: list[str] = []
    for name in names:
        if name in catalog.pairs:
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
        path = ensure_catalog_model(name, directory=args.dir, catalog=catalog, say=say, bar=bar)
        check_usable(path)
        print(path, flush=True)
    return 0
