"""``edgespec quantize``: a smaller quantization of a GGUF, e.g. a draft for its target.

A model requantized to fewer bits keeps the target's vocabulary, so it drafts
for it with no second download: ``edgespec quantize gemma-3-270m gemma-q4_0.gguf
--type Q4_0``, then ``--draft gemma-q4_0.gguf``. The file is written under a
temporary name beside the destination, loaded once to check it works, then renamed:
a failure or a Ctrl+C leaves no file behind.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..backend import (
    QUANT_TYPES,
    LlamaModel,
    check_gguf_file,
    model_description,
    quant_type,
    quantize_model,
)
from ..errors import InvalidParameterError
from ..files import replace_file
from ..loading import resolve_model
from .options import THREADS_HELP


def register(sub: argparse._SubParsersAction) -> None:
    """Add the quantize subcommand."""
    p = sub.add_parser(
        "quantize",
        help="requantize a GGUF (e.g. a same-vocabulary draft for its target)",
        description="Write SRC requantized to --type at DST with llama.cpp's quantizer "
        "(already quantized tensors are requantized). A smaller quantization of the "
        "target shares its vocabulary, so it drafts for it: --draft DST. The file is "
        "checked to load before it appears at DST.",
    )
    p.add_argument("src", help="the GGUF to requantize: a .gguf path or a catalog model name")
    p.add_argument("dst", help="the .gguf file to write")
    p.add_argument(
        "--type",
        required=True,
        help=f"what to quantize to: {', '.join(QUANT_TYPES)}",
    )
    p.add_argument(
        "--pure",
        action="store_true",
        help="every tensor to --type, the token embedding and output too (llama-quantize "
        "--pure): much smaller where the vocabulary is large (gemma-3-270m Q4_0: 158 MB, "
        "not 241), and a faster draft; by default they keep more bits",
    )
    p.add_argument("--threads", type=int, default=None, help=THREADS_HELP)
    p.add_argument("--force", action="store_true", help="replace DST if it exists")
    p.set_defaults(run=run)


def _check_source(spec: str) -> Path:
    path = resolve_model(spec)  # a missing file or an unknown name: one line
    check_gguf_file(path)
    return path


def _check_destination(src: Path, dst: Path, *, force: bool) -> None:
    if dst.resolve() == src.resolve() or (dst.exists() and os.path.samefile(src, dst)):
        raise InvalidParameterError(f"the destination is the source: {dst} (write another file)")
    if dst.suffix != ".gguf":
        raise InvalidParameterError(f"the destination must be a .gguf file: {dst}")
    folder = dst.parent
    if not folder.is_dir():
        raise InvalidParameterError(f"no such directory for the destination: {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidParameterError(f"cannot write in {folder}: permission denied")
    if dst.is_dir():
        raise InvalidParameterError(f"the destination is a directory: {dst}")
    if dst.exists() and not force:
        raise InvalidParameterError(f"{dst} exists (--force replaces it)")


def run(args: argparse.Namespace) -> int:
    """Quantize, check the result loads and decodes, then rename it into place."""
    try:
        quant_type(args.type)
    except ValueError as e:
        raise InvalidParameterError(str(e)) from None
    src = _check_source(args.src)
    dst = Path(args.dst).expanduser()
    _check_destination(src, dst, force=args.force)
    type_name = args.type.strip().upper()
    how = f"{type_name}, every tensor" if args.pure else type_name
    print(f"edgespec: quantizing {src.name} to {how} ...", file=sys.stderr, flush=True)
    desc = ""

    def write(tmp: Path) -> None:
        nonlocal desc
        quantize_model(src, tmp, type_name, n_threads=args.threads, pure=args.pure)
        with LlamaModel(tmp, n_ctx=256, n_threads=args.threads) as model:  # does it work?
            model.decode(model.tokenize("Hello"))
            desc = model_description(model)

    try:
        replace_file(dst, write)
    except OSError as exc:
        raise InvalidParameterError(f"cannot write {dst}: {exc.strerror or exc}") from None
    before, after = src.stat().st_size, dst.stat().st_size
    print(
        f"edgespec: wrote {dst} ({desc or type_name}): {after / 1e6:.1f} MB, "
        f"{after / before:.0%} of {src.name} ({before / 1e6:.1f} MB)"
    )
    return 0
