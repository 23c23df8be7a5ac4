"""``edgespec rm NAME...``: remove models from the model directory, by the names
``edgespec models`` shows (catalog names, pair names, ``hf:`` names)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import EdgespecError
from ..modelstore.catalog import load_catalog
from ..modelstore.store import models_dir


def register(sub: argparse._SubParsersAction) -> None:
    """Add the rm subcommand."""
    p = sub.add_parser(
        "rm",
        help="remove models from the model directory",
        description="Remove models from the model directory: a catalog model (a pair name "
        "removes its target and draft) or a model pulled by Hub name, with its "
        "verification record and any unfinished download. NAME is what edgespec models "
        "lists, or the hf:OWNER/REPO[:QUANT|/FILE.gguf] it was pulled by; paths are "
        "refused. Prints what was removed and the space freed.",
    )
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="catalog model or pair name, or hf:OWNER/REPO[:QUANT|/FILE.gguf]",
    )
    p.add_argument("--dir", type=Path, default=None, help="model directory (default: cache)")
    p.set_defaults(run=run)


def _targets(name: str, directory: Path) -> list[tuple[str, list[Path], list[Path]]]:
    """(shown name, files to remove, files whose store lock to take) for ``name``.

    Raises EdgespecError for a path, an unknown or malformed name, or a model that is
    not installed; nothing has been removed then.
    """
    from ..modelstore import hfinstalled, hfspec, store
    from ..modelstore.fetch import model_path
    from .pull import expand

    if name.startswith("hf:"):
        spec = hfspec.parse_hf_spec(name)
        found = hfinstalled.find_installed(spec, directory)
        if found is None:
            raise EdgespecError(f"{spec} is not installed in {directory}")
        files = hfinstalled.model_files(found, directory)
        return [(found.name, files, [p for p in files if p.name.endswith(".gguf")])]
    if "/" in name or "\\" in name or name.endswith(".gguf") or name.startswith("."):
        raise EdgespecError(
            f"refusing to remove {name}: edgespec rm takes model names (edgespec models), "
            f"not paths, and removes only from {directory}"
        )
    catalog = load_catalog()
    out = []
    for model_name in expand([name], catalog):
        dest = model_path(catalog.model(model_name), directory)
        files = [
            dest,
            store.marker_path(dest),
            *sorted(dest.parent.glob(f".{dest.name}.*.partial")),
        ]
        if not any(p.exists() or p.is_symlink() for p in files):
            raise EdgespecError(f"{model_name} is not installed in {directory}")
        out.append((model_name, files, [dest]))
    return out


def _size(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def run(args: argparse.Namespace) -> int:
    """Check every name first, then remove each model's files under its store lock."""
    from ..modelstore.fetch import console
    from ..modelstore.hfinstalled import remove_files

    directory = Path(args.dir if args.dir is not None else models_dir())
    todo = []
    for name in args.names:
        for target in _targets(name, directory):
            if target[0] not in [t[0] for t in todo]:
                todo.append(target)
    say, _ = console()
    for shown, files, locks in todo:
        removed, freed = remove_files(files, directory, locks, say)
        print(f"removed {shown}: {removed} file{'s' if removed != 1 else ''}, {_size(freed)} freed")
    return 0
